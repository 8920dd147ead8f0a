//! The phone's side (`/pwa/_auth`): the only path the device key cookie is sent to.

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use k2b_core::Core;
use k2b_core::http::body::read_json;
use k2b_core::http::cookies::{SameSiteMode, SetCookie, get_cookie};
use k2b_core::http::openapi::ErrorBody;
use k2b_core::http::routes::Routes;
use k2b_core::identity::session::SESSION_COOKIE as WEB_SESSION_COOKIE;
use k2b_core::pwa::launch::launch_target;
use k2b_core::pwa::pairing::{AccountName, CompleteRequest, Completion, Credentials};
use k2b_core::pwa::renew::{RenewOutcome, RenewRequest};
use k2b_core::pwa::{self, Platform, PwaError, devices, pairing, renew};
use serde::{Deserialize, Serialize};
use utoipa::{OpenApi, ToSchema};

use crate::sessions::{device_key, presented};
use crate::{ApprovalsState, RateLimitedAnswer, RequestFacts, secure_cookies, with_cookies};

/// How long launch works before it redirects to [`UNAVAILABLE_TARGET`]: inside the route budget,
/// so its answer is always its own 302.
pub(crate) const LAUNCH_BUDGET: std::time::Duration = std::time::Duration::from_secs(15);

/// Where launch sends the app when the service cannot answer.
pub(crate) const UNAVAILABLE_TARGET: &str = "/pwa/?pwa=unavailable";

/// The phone side's part of the API document.
#[derive(OpenApi)]
#[openapi(paths(claim, complete, renew_session, launch, rename, unpair))]
struct Api;

pub(crate) fn openapi() -> utoipa::openapi::OpenApi {
    Api::openapi()
}

pub(crate) fn routes() -> Routes<ApprovalsState> {
    Routes::new()
        .post("/pwa/_auth/pairings/claim", claim)
        .post("/pwa/_auth/pairings/complete", complete)
        .post("/pwa/_auth/session/renew", renew_session)
        .get("/pwa/_auth/session/launch", launch)
        .patch("/pwa/_auth/session", rename)
        .delete("/pwa/_auth/session", unpair)
}

fn pairing_cookie_removal(core: &Core) -> SetCookie {
    SetCookie::removal(pwa::PAIRING_COOKIE, pwa::PAIRING_COOKIE_PATH)
        .same_site(SameSiteMode::Strict)
        .secure(secure_cookies(core))
}

/// Removes the app session and the device key.
fn credential_removals(core: &Core) -> Vec<SetCookie> {
    let secure = secure_cookies(core);
    removals(secure)
}

fn removals(secure: bool) -> Vec<SetCookie> {
    vec![
        SetCookie::removal(pwa::SESSION_COOKIE, "/").secure(secure),
        SetCookie::removal(pwa::DEVICE_COOKIE, pwa::PHONE_API_PATH).secure(secure),
    ]
}

/// The app session and device key cookies of new credentials.
fn credential_cookies(core: &Core, credentials: &Credentials) -> Vec<SetCookie> {
    new_credentials(secure_cookies(core), credentials)
}

fn new_credentials(secure: bool, credentials: &Credentials) -> Vec<SetCookie> {
    vec![
        SetCookie::new(
            pwa::SESSION_COOKIE,
            credentials.session.token.clone(),
            pwa::SESSION_SECONDS,
        )
        .secure(secure),
        SetCookie::new(
            pwa::DEVICE_COOKIE,
            credentials.device_key.encode(),
            pwa::DEVICE_COOKIE_MAX_AGE,
        )
        .path(pwa::PHONE_API_PATH)
        .secure(secure),
    ]
}

async fn require_shell(core: &Core) -> Result<(), PwaError> {
    if pwa::shell_available(core).await? {
        Ok(())
    } else {
        Err(PwaError::Unavailable("ShellUnavailable"))
    }
}

/// What the phone scanned, and what it is.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PwaClaimPairing)]
struct ClaimBody {
    /// The link secret: 43 base64url characters.
    #[schema(pattern = "^[A-Za-z0-9_-]{43}$")]
    secret: String,
    #[schema(value_type = Platform)]
    platform: String,
}

/// A claimed pairing, as the phone shows it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaClaimedPairing)]
struct Claimed {
    /// The six-digit code both screens show.
    code: String,
    /// The account the phone is pairing with.
    account: AccountName,
    expires_at: chrono::DateTime<Utc>,
}

/// Claim a pairing (phone)
///
/// The phone claims a pairing with the scanned link secret: both screens then show the same
/// six-digit code, and the phone receives its completion secret in the `pwa_pairing` cookie
/// (HttpOnly, SameSite=Strict, path `/pwa/_auth/pairings`, until the pairing expires). Needs
/// the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/pwa/_auth/pairings/claim",
    tag = "pairing",
    operation_id = "pwaClaimPairing",
    request_body(content = ClaimBody, content_type = "application/json",
        description = "At most 8192 bytes; no other member."),
    security(()),
    responses(
        (status = 200, description = "Claimed; the completion secret is in the `pwa_pairing` cookie.", body = Claimed,
            headers(("Set-Cookie" = String, description = "`pwa_pairing=<completion secret>; Path=/pwa/_auth/pairings; HttpOnly; SameSite=Strict`."))),
        (status = 400, description = "`INVALID_REQUEST`: not `{secret, platform}` of the right shape (or over 8192 bytes).", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        (status = 409, description = "`ALREADY_USED`: the link was already claimed.", body = ErrorBody),
        (status = 410, description = "`EXPIRED`: no such pairing, or it expired, was cancelled or is past its claim time.", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the mobile app's shell is not installed, or a dependency failed.", body = ErrorBody),
    )
)]
async fn claim(State(state): State<ApprovalsState>, headers: HeaderMap, body: Body) -> Response {
    let core = &state.core;
    let result = async {
        let body: ClaimBody = read_json(&headers, body, pwa::BODY_BYTES)
            .await
            .map_err(|_| PwaError::InvalidRequest)?;
        let platform = Platform::parse(&body.platform).ok_or(PwaError::InvalidRequest)?;
        if !k2b_core::approvals::is_secret_shaped(&body.secret) {
            return Err(PwaError::InvalidRequest);
        }
        require_shell(core).await?;
        let facts = RequestFacts::from_headers(&headers);
        pairing::claim(core, &body.secret, platform, facts.user_agent.as_deref()).await
    }
    .await;
    match result {
        Ok(claimed) => {
            let cookie = pairing_cookie(
                secure_cookies(core),
                &claimed.completion_secret,
                claimed.expires_at,
            );
            with_cookies(
                Json(Claimed {
                    code: claimed.code,
                    account: claimed.account,
                    expires_at: claimed.expires_at,
                })
                .into_response(),
                &[cookie],
            )
        }
        Err(error) => error.into_response(),
    }
}

/// The completion secret's cookie: only the pairing routes receive it, until the pairing expires.
fn pairing_cookie(secure: bool, secret: &str, expires_at: chrono::DateTime<Utc>) -> SetCookie {
    let max_age = ((expires_at - Utc::now()).num_milliseconds() as f64 / 1000.0)
        .ceil()
        .max(1.0) as i64;
    SetCookie::new(pwa::PAIRING_COOKIE, secret, max_age)
        .path(pwa::PAIRING_COOKIE_PATH)
        .same_site(SameSiteMode::Strict)
        .secure(secure)
}

/// The pairing waits for the browser to type the code.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaPairingWaiting)]
struct Waiting {
    state: WaitingState,
    /// The six-digit code both screens show.
    code: String,
    account: AccountName,
    expires_at: chrono::DateTime<Utc>,
}

/// `waiting`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = PwaWaitingState)]
enum WaitingState {
    Waiting,
}

/// The phone is paired.
#[derive(Serialize, ToSchema)]
#[schema(as = PwaPairingPaired)]
struct Paired {
    state: PairedState,
}

/// `paired`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = PwaPairedState)]
enum PairedState {
    Paired,
}

/// Complete a pairing (phone)
///
/// The phone asks, with its `pwa_pairing` cookie, whether the browser has confirmed: 202 while
/// it waits, then 200 with the device key (`pwa_device`, path `/pwa/_auth`, 150 days) and a
/// 24-hour app session (`pwa_session`, path `/`), and the `pwa_pairing` cookie removed (on iOS
/// also the browser's `session_token`). A retry that already carries this device's app session
/// is 200 without new cookies. Any `EXPIRED` answer removes `pwa_pairing`. Needs the
/// installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/pwa/_auth/pairings/complete",
    tag = "pairing",
    operation_id = "pwaCompletePairing",
    params(
        ("pwa_pairing" = Option<String>, Cookie, description = "The completion secret the claim set."),
        ("pwa_device" = Option<String>, Cookie, description = "A device key this app already holds (`<deviceId>.<secret>`), if any."),
    ),
    security((), ("appSession" = []), ("session" = [])),
    responses(
        (status = 200, description = "Paired; new credentials are in the cookies (none on a retry that carries this device's app session).", body = Paired,
            headers(("Set-Cookie" = String, description = "`pwa_session` and `pwa_device`, the removal of `pwa_pairing`, and on iOS the removal of `session_token`."))),
        (status = 202, description = "Waiting for the browser to type the code.", body = Waiting),
        (status = 403, description = "`FORBIDDEN` (an `Origin` other than the installation's) or `ACCOUNT_BLOCKED` (the account cannot use the mobile app now).", body = ErrorBody),
        (status = 409, description = "`ALREADY_PAIRED` (this app holds another account's device) or `ACCOUNT_MISMATCH` (outside iOS, the browser is signed in to another account).", body = ErrorBody),
        (status = 410, description = "`EXPIRED`: no or an unknown completion secret, or the pairing expired, was cancelled or lost its browser session; `pwa_pairing` is removed.", body = ErrorBody,
            headers(("Set-Cookie" = String, description = "The removal of `pwa_pairing`."))),
        (status = 429, description = "`LIMIT_REACHED` (20 active devices), or `RATE_LIMITED` (too many requests from this client; `Retry-After: 1`).", body = ErrorBody,
            headers(("Retry-After" = String, description = "`1`, on `RATE_LIMITED`."))),
        (status = 503, description = "`UNAVAILABLE`: the mobile app's shell is not installed, or a dependency failed.", body = ErrorBody),
    )
)]
async fn complete(State(state): State<ApprovalsState>, headers: HeaderMap) -> Response {
    let core = &state.core;
    let result = async {
        require_shell(core).await?;
        let sessions = presented(core, &headers).await?;
        let facts = RequestFacts::from_headers(&headers);
        pairing::complete(
            core,
            CompleteRequest {
                completion_secret: get_cookie(&headers, pwa::PAIRING_COOKIE).map(str::to_string),
                device_key: device_key(&headers),
                app_session: sessions.app,
                web_user_id: sessions.web.as_ref().map(|w| w.actor.user_id),
                request_id: facts.request_id,
                user_agent: facts.user_agent,
            },
        )
        .await
        .map(|completion| (completion, sessions.web_cookie_sent))
    }
    .await;
    match result {
        Ok((
            Completion::Waiting {
                code,
                account,
                expires_at,
            },
            _,
        )) => (
            StatusCode::ACCEPTED,
            Json(Waiting {
                state: WaitingState::Waiting,
                code,
                account,
                expires_at,
            }),
        )
            .into_response(),
        Ok((
            Completion::Paired {
                credentials,
                platform,
            },
            web_cookie_sent,
        )) => {
            let response = Json(Paired {
                state: PairedState::Paired,
            })
            .into_response();
            let Some(credentials) = credentials else {
                return response;
            };
            let mut cookies = credential_cookies(core, &credentials);
            cookies.push(pairing_cookie_removal(core));
            if platform == Platform::Ios && web_cookie_sent {
                // On iOS the installed app holds only a copy of the browser's cookies: the web
                // session must not live on in the app.
                cookies
                    .push(SetCookie::removal(WEB_SESSION_COOKIE, "/").secure(secure_cookies(core)));
            }
            with_cookies(response, &cookies)
        }
        Err(error @ PwaError::Expired { .. }) => {
            with_cookies(error.into_response(), &[pairing_cookie_removal(core)])
        }
        Err(error) => error.into_response(),
    }
}

/// Runs a renewal with what the request carries.
async fn run_renew(
    core: &Core,
    headers: &HeaderMap,
) -> Result<(RenewOutcome, crate::sessions::Presented), PwaError> {
    let sessions = presented(core, headers).await?;
    let facts = RequestFacts::from_headers(headers);
    let outcome = renew::renew(
        core,
        RenewRequest {
            device_key: device_key(headers),
            app_session: sessions.app,
            request_id: facts.request_id,
            user_agent: facts.user_agent,
        },
    )
    .await?;
    Ok((outcome, sessions))
}

/// A renewal's answer.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = PwaRenewal)]
struct Renewal {
    /// Whether a new device key and app session were set.
    renewed: bool,
    /// Another account a browser session in the same cookie jar is signed in to.
    #[serde(skip_serializing_if = "Option::is_none")]
    other_account: Option<AccountName>,
}

/// Renew the app session (phone)
///
/// The installed app presents its device key: a session with more than 12 hours left stays
/// (`renewed: false`), else the key rotates and a new 24-hour app session is set. A missing,
/// unknown or revoked key is 401 and removes both cookies; a blocked account is 403 and keeps
/// them. Needs the installation's own `Origin`.
#[utoipa::path(
    post,
    path = "/pwa/_auth/session/renew",
    tag = "pairing",
    operation_id = "pwaRenewSession",
    params(("pwa_device" = Option<String>, Cookie, description = "The device key `<deviceId>.<secret>`.")),
    security((), ("appSession" = []), ("session" = [])),
    responses(
        (status = 200, description = "The app session is good; `renewed` says whether new cookies were set.", body = Renewal,
            headers(("Set-Cookie" = String, description = "When renewed: the new `pwa_session` and `pwa_device`."))),
        (status = 401, description = "`UNPAIRED`: no, an unknown or a revoked device key; `pwa_session` and `pwa_device` are removed.", body = ErrorBody,
            headers(("Set-Cookie" = String, description = "The removal of `pwa_session` and `pwa_device`."))),
        (status = 403, description = "`FORBIDDEN` (an `Origin` other than the installation's) or `ACCOUNT_BLOCKED` (the account cannot use the mobile app now; the device stays paired).", body = ErrorBody),
        RateLimitedAnswer,
        (status = 503, description = "`UNAVAILABLE`: the mobile app's shell is not installed, or a dependency failed (never signs the phone out).", body = ErrorBody),
    )
)]
async fn renew_session(State(state): State<ApprovalsState>, headers: HeaderMap) -> Response {
    let core = &state.core;
    let result = async {
        require_shell(core).await?;
        run_renew(core, &headers).await
    }
    .await;
    let (outcome, sessions) = match result {
        Ok(found) => found,
        Err(error) => return error.into_response(),
    };
    let (user_id, cookies, renewed) = match &outcome {
        RenewOutcome::Missing | RenewOutcome::Ended => {
            return with_cookies(
                PwaError::Unpaired.into_response(),
                &credential_removals(core),
            );
        }
        RenewOutcome::Blocked => return PwaError::AccountBlocked.into_response(),
        RenewOutcome::Current { user_id } => (*user_id, Vec::new(), false),
        RenewOutcome::Renewed {
            user_id,
            credentials,
        } => (*user_id, credential_cookies(core, credentials), true),
    };
    let body = Renewal {
        renewed,
        other_account: sessions
            .web
            .filter(|w| w.user.id != user_id)
            .map(|web| AccountName {
                name: web.user.shown_name().to_string(),
            }),
    };
    with_cookies(Json(body).into_response(), &cookies)
}

/// A 302 to `target` with cookies.
pub(crate) fn launch_redirect(target: &str, cookies: &[SetCookie]) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    if let Ok(value) = HeaderValue::from_str(target) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    with_cookies(response, cookies)
}

/// Launch the installed app (phone)
///
/// The app's start URL: renews the app session like `renew`, then always redirects (302) —
/// to `to` (with `pwa_launch=1`) when the session is good, else to `/pwa/?pwa=blocked`,
/// `/pwa/?pwa=ended` (cookies removed), `/pwa/?pwa=new` (no device key) or
/// `/pwa/?pwa=unavailable` (no shell, a failure, a time-out after 15 s, or rate-limited).
#[utoipa::path(
    get,
    path = "/pwa/_auth/session/launch",
    tag = "pairing",
    operation_id = "pwaLaunch",
    params(
        ("to" = Option<String>, Query, description = "Where to land: a path inside `/pwa/` (not `/pwa/_auth`), else the start page. Only the first `to` counts; other parameters are ignored."),
        ("pwa_device" = Option<String>, Cookie, description = "The device key `<deviceId>.<secret>`."),
    ),
    security((), ("appSession" = [])),
    responses(
        (status = 302, description = "Always: to the target, or to the start page with `pwa=blocked|ended|new|unavailable`.",
            headers(
                ("Location" = String, description = "The target."),
                ("Set-Cookie" = String, description = "When renewed: the new `pwa_session` and `pwa_device`; when ended: their removal."),
            )),
    )
)]
async fn launch(
    State(state): State<ApprovalsState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let core = &state.core;
    // The first `to` (launch always redirects, whatever the query holds).
    let to = query.and_then(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == "to")
            .map(|(_, value)| value.into_owned())
    });
    let work = async {
        require_shell(core).await?;
        run_renew(core, &headers).await
    };
    // Launch always redirects: work that outlasts its budget is "unavailable" like any failure.
    let result = match tokio::time::timeout(LAUNCH_BUDGET, work).await {
        Ok(result) => result,
        Err(_) => Err(PwaError::Unavailable("LaunchTimeout")),
    };
    match result {
        Ok((RenewOutcome::Renewed { credentials, .. }, _)) => launch_redirect(
            &launch_target(to.as_deref()),
            &credential_cookies(core, &credentials),
        ),
        Ok((RenewOutcome::Current { .. }, _)) => {
            launch_redirect(&launch_target(to.as_deref()), &[])
        }
        Ok((RenewOutcome::Blocked, _)) => launch_redirect("/pwa/?pwa=blocked", &[]),
        Ok((RenewOutcome::Ended, _)) => {
            launch_redirect("/pwa/?pwa=ended", &credential_removals(core))
        }
        Ok((RenewOutcome::Missing, _)) => launch_redirect("/pwa/?pwa=new", &[]),
        Err(error) => {
            if let PwaError::Unavailable(name) = error {
                tracing::warn!(error = name, "pwa launch unavailable");
            }
            launch_redirect(UNAVAILABLE_TARGET, &[])
        }
    }
}

/// The device's new name.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PwaRenameDevice)]
struct RenameBody {
    /// Trimmed, 1 to 80 characters.
    #[schema(min_length = 1, max_length = 80)]
    name: String,
}

/// Rename this phone (phone)
///
/// Renames the device whose key the request carries. Needs the installation's own `Origin`.
#[utoipa::path(
    patch,
    path = "/pwa/_auth/session",
    tag = "pairing",
    operation_id = "pwaRenameDevice",
    params(("pwa_device" = Option<String>, Cookie, description = "The device key `<deviceId>.<secret>`.")),
    request_body(content = RenameBody, content_type = "application/json",
        description = "At most 8192 bytes; no other member."),
    security(()),
    responses(
        (status = 204, description = "Renamed."),
        (status = 400, description = "`INVALID_REQUEST`: not `{name}` with 1 to 80 characters after trimming (or over 8192 bytes).", body = ErrorBody),
        (status = 401, description = "`UNPAIRED`: no, an unknown or a revoked device key.", body = ErrorBody),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn rename(State(state): State<ApprovalsState>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let body: RenameBody = read_json(&headers, body, pwa::BODY_BYTES)
            .await
            .map_err(|_| PwaError::InvalidRequest)?;
        let facts = RequestFacts::from_headers(&headers);
        devices::rename(
            &state.core,
            device_key(&headers).as_ref(),
            &body.name,
            facts.request_id,
        )
        .await
    }
    .await;
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_response(),
    }
}

/// Unpair this phone (phone)
///
/// Revokes the device whose key the request carries (if it is valid) and always removes the
/// three pairing cookies. Idempotent. Needs the installation's own `Origin`.
#[utoipa::path(
    delete,
    path = "/pwa/_auth/session",
    tag = "pairing",
    operation_id = "pwaUnpair",
    params(("pwa_device" = Option<String>, Cookie, description = "The device key `<deviceId>.<secret>`.")),
    security(()),
    responses(
        (status = 204, description = "Unpaired (whatever the key was); the cookies are removed.",
            headers(("Set-Cookie" = String, description = "The removal of `pwa_session`, `pwa_device` and `pwa_pairing`."))),
        (status = 403, description = "`FORBIDDEN`: an `Origin` other than the installation's.", body = ErrorBody),
        RateLimitedAnswer,
    )
)]
async fn unpair(State(state): State<ApprovalsState>, headers: HeaderMap) -> Response {
    let core = &state.core;
    let facts = RequestFacts::from_headers(&headers);
    let mut cookies = credential_removals(core);
    cookies.push(pairing_cookie_removal(core));
    // The phone forgets its pairing whatever happens here.
    if let Err(PwaError::Unavailable(name)) =
        devices::unpair(core, device_key(&headers).as_ref(), facts.request_id).await
    {
        tracing::warn!(error = name, "pwa unpair failed");
    }
    with_cookies(StatusCode::NO_CONTENT.into_response(), &cookies)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k2b_core::identity::session::IssuedSession;
    use k2b_core::pwa::DeviceKey;

    fn header(cookie: &SetCookie) -> String {
        cookie
            .header_value()
            .to_str()
            .unwrap_or_default()
            .to_string()
    }

    fn attributes(cookie: &SetCookie) -> Vec<String> {
        header(cookie)
            .split(';')
            .skip(1)
            .map(|a| a.trim().to_string())
            .collect()
    }

    /// Outside local mode every PWA cookie is `Secure`, with the attributes of spec §2.3.
    #[test]
    fn cookies_are_secure_outside_local_mode() {
        let now = Utc::now();
        let credentials = Credentials {
            device_key: DeviceKey {
                device_id: uuid::Uuid::nil(),
                secret: "a".repeat(43),
            },
            session: IssuedSession {
                token: "token".into(),
                sid: uuid::Uuid::nil(),
                issued_at: now,
                expires_at: now + chrono::Duration::seconds(86_400),
            },
        };
        let cookies = new_credentials(true, &credentials);
        let session = attributes(&cookies[0]);
        for expected in [
            "HttpOnly",
            "Secure",
            "SameSite=Lax",
            "Path=/",
            "Max-Age=86400",
        ] {
            assert!(session.contains(&expected.to_string()), "{session:?}");
        }
        let device = attributes(&cookies[1]);
        for expected in [
            "HttpOnly",
            "Secure",
            "SameSite=Lax",
            "Path=/pwa/_auth",
            "Max-Age=12960000",
        ] {
            assert!(device.contains(&expected.to_string()), "{device:?}");
        }
        let pairing = attributes(&pairing_cookie(
            true,
            "secret",
            now + chrono::Duration::milliseconds(599_100),
        ));
        for expected in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/pwa/_auth/pairings",
            "Max-Age=600",
        ] {
            assert!(pairing.contains(&expected.to_string()), "{pairing:?}");
        }
        let expired = attributes(&pairing_cookie(true, "secret", now));
        assert!(
            expired.contains(&"Max-Age=1".to_string()),
            "at least one second"
        );
        for removal in removals(true) {
            let attrs = attributes(&removal);
            assert!(
                attrs.contains(&"Max-Age=0".to_string()) && attrs.contains(&"Secure".to_string())
            );
        }
        assert!(
            !attributes(&new_credentials(false, &credentials)[0]).contains(&"Secure".to_string())
        );
    }
}
