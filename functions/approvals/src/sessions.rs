//! The sessions a request presents: the browser's `session_token` and the app's `pwa_session`,
//! each validated in full (signature, claims, family, epoch, key, terms, category).

use chrono::DateTime;
use http::{HeaderMap, header};
use k2b_core::Core;
use k2b_core::auth::{SessionKind, UserRecord};
use k2b_core::http::cookies::get_cookie;
use k2b_core::identity::session::{SESSION_COOKIE, ValidSession, validate_session};
use k2b_core::pwa::{self, AppSession, DeviceKey, PwaError, WebActor};

/// A valid browser session.
#[derive(Debug, Clone)]
pub struct WebSession {
    pub actor: WebActor,
    pub user: UserRecord,
}

/// What a request carries.
#[derive(Debug, Clone, Default)]
pub struct Presented {
    pub web: Option<WebSession>,
    pub app: Option<AppSession>,
    /// Whether a `session_token` cookie was sent at all (valid or not).
    pub web_cookie_sent: bool,
    /// Whether `session_token` held a valid session of another kind than a browser's.
    pub web_cookie_not_web: bool,
}

async fn validate(core: &Core, token: &str) -> Result<Option<(ValidSession, i64)>, PwaError> {
    let Some(claims) = core.identity.check_session_token(token).await? else {
        return Ok(None);
    };
    let mut conn = core.pool.acquire().await?;
    let valid = validate_session(&mut conn, &core.settings, &claims).await?;
    Ok(valid.map(|v| (v, claims.exp as i64)))
}

/// Validates both session cookies of a request.
pub async fn presented(core: &Core, headers: &HeaderMap) -> Result<Presented, PwaError> {
    let mut result = Presented::default();
    if let Some(token) = get_cookie(headers, SESSION_COOKIE) {
        result.web_cookie_sent = true;
        match validate(core, token).await? {
            Some((valid, _)) if valid.kind == SessionKind::Web => {
                result.web = Some(WebSession {
                    actor: WebActor {
                        user_id: valid.user.id,
                        sid: valid.sid,
                    },
                    user: valid.user,
                });
            }
            Some(_) => result.web_cookie_not_web = true,
            None => {}
        }
    }
    if let Some(token) = get_cookie(headers, pwa::SESSION_COOKIE)
        && let Some((valid, exp)) = validate(core, token).await?
        && let SessionKind::App { device_id } = valid.kind
    {
        result.app = Some(AppSession {
            user_id: valid.user.id,
            device_id,
            sid: valid.sid,
            expires_at: DateTime::from_timestamp(exp, 0).unwrap_or_default(),
        });
    }
    Ok(result)
}

/// The web actor of a web route: API keys and OAuth never manage phones (403 FORBIDDEN), an app
/// session alone gets 403 FORBIDDEN, and without a valid browser session 403 REAUTHENTICATE.
pub async fn web_actor(
    core: &Core,
    headers: &HeaderMap,
) -> Result<(WebActor, Presented), PwaError> {
    if headers.contains_key(header::AUTHORIZATION) {
        return Err(PwaError::Forbidden);
    }
    let presented = presented(core, headers).await?;
    match (&presented.web, &presented.app) {
        (Some(web), _) => Ok((web.actor, presented.clone())),
        (None, Some(_)) => Err(PwaError::Forbidden),
        (None, None) if presented.web_cookie_not_web => Err(PwaError::Forbidden),
        (None, None) => Err(PwaError::Reauthenticate),
    }
}

/// The device key cookie, if well formed.
pub fn device_key(headers: &HeaderMap) -> Option<DeviceKey> {
    get_cookie(headers, pwa::DEVICE_COOKIE).and_then(DeviceKey::parse)
}
