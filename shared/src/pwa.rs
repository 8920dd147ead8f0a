//! Mobile-app (PWA) pairing: a person pairs the installed web app on a phone from a signed-in
//! browser. The app ends with a device key that only Core's `/pwa/_auth` routes receive and a 24 h
//! app session that every app validates like a web session, but that never acts as an
//! administrator.
//!
//! The flow: the web starts a pairing (a one-time link secret shown as a QR code), the phone
//! claims it and shows a six-digit code, the web types the code (confirm), the phone completes
//! and receives its device key and app session. The device renews its session daily.

pub mod devices;
pub mod error;
pub mod launch;
pub mod link;
pub mod maintenance;
pub mod pairing;
pub mod renew;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

pub use error::PwaError;

use crate::Core;
use crate::registry::store;

/// Largest request body of the PWA routes.
pub const BODY_BYTES: usize = 8192;
/// The bound of issuing an app session (completion, renewal, launch). These run on HTTP routes,
/// so the bound ends well inside the route budget rather than at issuance's 30 s default.
pub const ISSUANCE_TIMEOUT_MS: f64 = 10_000.0;
/// How long a started pairing can be claimed by a phone.
pub const LINK_CLAIM_SECONDS: i64 = 300;
/// How long a pairing lives from its start.
pub const PAIRING_SECONDS: i64 = 600;
/// A pairing can only be started from a web sign-in at most this old.
pub const RECENT_SESSION_SECONDS: i64 = 600;
/// Wrong codes allowed before a pairing is cancelled.
pub const CONFIRM_ATTEMPTS: i16 = 3;
/// Active devices per account.
pub const DEVICES_PER_ACCOUNT: i64 = 20;
/// Open pairings per account.
pub const PENDING_PER_ACCOUNT: i64 = 5;
/// A device not renewed for this long is no longer active.
pub const IDLE_DAYS: i64 = 150;
/// Lifetime of an app session.
pub const SESSION_SECONDS: i64 = 86_400;
/// An app session with less than this left is renewed.
pub const RENEW_WITHIN_SECONDS: i64 = 43_200;
/// The previous device key still counts as current this long after a rotation.
pub const ROTATION_GRACE_SECONDS: i64 = 60;
/// How often the phone polls while waiting for the web.
pub const POLL_SECONDS: i64 = 5;
/// Longest device name, in characters.
pub const NAME_MAX_LENGTH: usize = 80;
/// `Max-Age` of the device key cookie (150 days).
pub const DEVICE_COOKIE_MAX_AGE: i64 = 12_960_000;

/// Web API of the signed-in browser.
pub const WEB_API_PATH: &str = "/api/auth/pwa/v1";
/// Phone API (the only path that receives the device key).
pub const PHONE_API_PATH: &str = "/pwa/_auth";
/// Path of the completion secret cookie.
pub const PAIRING_COOKIE_PATH: &str = "/pwa/_auth/pairings";
/// Scope of the installed app.
pub const APP_SCOPE: &str = "/pwa/";

/// The app session (every app receives it on `/`).
pub const SESSION_COOKIE: &str = "pwa_session";
/// The device key `<deviceId>.<secret>`.
pub const DEVICE_COOKIE: &str = "pwa_device";
/// The completion secret of a claimed pairing.
pub const PAIRING_COOKIE: &str = "pwa_pairing";

/// The registered app that serves the installed web app's shell.
pub const SHELL_APP_ID: &str = "pwa";
/// The route the shell app must own.
pub const SHELL_ROUTE: &str = "/pwa";

/// A device platform.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[schema(as = PwaPlatform)]
pub enum Platform {
    Ios,
    Android,
    Other,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Ios => "ios",
            Platform::Android => "android",
            Platform::Other => "other",
        }
    }
    pub fn parse(value: &str) -> Option<Platform> {
        match value {
            "ios" => Some(Platform::Ios),
            "android" => Some(Platform::Android),
            "other" => Some(Platform::Other),
            _ => None,
        }
    }

    /// The name a new device gets: "iPad" on iOS when the user agent says so, else "iPhone";
    /// "Android"; "Phone".
    pub fn device_name(self, user_agent: Option<&str>) -> &'static str {
        match self {
            Platform::Ios => {
                let ipad = user_agent.is_some_and(|ua| {
                    ua.split(|c: char| !c.is_ascii_alphanumeric())
                        .any(|word| word == "iPad")
                });
                if ipad { "iPad" } else { "iPhone" }
            }
            Platform::Android => "Android",
            Platform::Other => "Phone",
        }
    }
}

/// A device key as the app holds it: `<deviceId>.<secret>` (lowercase hyphenated UUID and a
/// 43-character base64url secret). Anything else counts as no key.
#[derive(Clone, PartialEq, Eq)]
pub struct DeviceKey {
    pub device_id: Uuid,
    pub secret: String,
}

impl std::fmt::Debug for DeviceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceKey({}, [REDACTED])", self.device_id)
    }
}

impl DeviceKey {
    pub fn parse(value: &str) -> Option<DeviceKey> {
        let (id, secret) = value.split_once('.')?;
        if id.len() != 36
            || id
                .bytes()
                .any(|b| !(b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-'))
            || !crate::approvals::is_secret_shaped(secret)
        {
            return None;
        }
        let device_id = Uuid::parse_str(id).ok()?;
        (device_id.hyphenated().to_string() == id).then(|| DeviceKey {
            device_id,
            secret: secret.to_string(),
        })
    }

    /// The cookie value.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.device_id.hyphenated(), self.secret)
    }
}

/// A path id: a hyphenated UUID (36 characters), nothing looser.
pub fn parse_id(raw: &str) -> Option<Uuid> {
    if raw.len() != 36 {
        return None;
    }
    let id = Uuid::try_parse(raw).ok()?;
    id.hyphenated()
        .to_string()
        .eq_ignore_ascii_case(raw)
        .then_some(id)
}

/// Whether the installed web app's shell is available: a live registered app `pwa` owns `/pwa`.
/// Without it, start, claim, complete and renew answer 503; management still works.
pub async fn shell_available(core: &Core) -> Result<bool, PwaError> {
    let app = store::get_app(&core.pool, SHELL_APP_ID).await?;
    Ok(app.is_some_and(|entry| {
        entry
            .routes
            .iter()
            .any(|r| r.trim_end_matches('/') == SHELL_ROUTE)
    }))
}

/// The web session a request acts with (every web route needs one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebActor {
    pub user_id: Uuid,
    pub sid: Uuid,
}

/// A valid app session presented with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppSession {
    pub user_id: Uuid,
    pub device_id: Uuid,
    pub sid: Uuid,
    pub expires_at: DateTime<Utc>,
}

/// Whether the web session family `sid` of `user_id` is still valid: not revoked or expired, in
/// the user's current epoch, a browser session, signed by a key that is not revoked.
pub async fn web_family_valid(
    conn: &mut PgConnection,
    sid: Uuid,
    user_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (
           SELECT 1 FROM auth.session_families f
           JOIN auth.users u ON u.id = f.user_id
           JOIN auth.signing_keys k ON k.kid = f.signing_kid
           WHERE f.sid = $1 AND f.user_id = $2 AND f.revoked_at IS NULL AND f.expires_at > now()
             AND f.auth_epoch = u.auth_epoch AND f.pwa_device_id IS NULL
             AND k.state <> 'revoked')",
    )
    .bind(sid)
    .bind(user_id)
    .fetch_one(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_keys_parse_strictly() {
        let id = Uuid::new_v4();
        let secret = crate::approvals::create_secret();
        let key = DeviceKey::parse(&format!("{id}.{secret}")).expect("valid");
        assert_eq!(key.device_id, id);
        assert_eq!(key.encode(), format!("{id}.{secret}"));
        assert!(!format!("{key:?}").contains(&secret), "never printed");
        let upper = id.hyphenated().to_string().to_uppercase();
        for bad in [
            String::new(),
            format!("{upper}.{secret}"),
            format!("{id}.{}", &secret[1..]),
            format!("{id}{secret}"),
            format!("{}.{secret}", id.simple()),
            format!("{id}.{secret}.x"),
        ] {
            assert!(DeviceKey::parse(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn path_ids_are_hyphenated_uuids() {
        let id = Uuid::new_v4();
        assert_eq!(parse_id(&id.to_string()), Some(id));
        assert_eq!(parse_id(&id.to_string().to_uppercase()), Some(id));
        for bad in [
            id.simple().to_string(),
            format!("{{{id}}}"),
            format!("urn:uuid:{id}"),
            "not-a-uuid".to_string(),
        ] {
            assert_eq!(parse_id(&bad), None, "{bad}");
        }
    }

    /// The limits of spec §2.1 (`PWA_LIMITS`).
    #[test]
    fn limits_are_the_specified_ones() {
        assert_eq!(BODY_BYTES, 8192);
        assert_eq!(LINK_CLAIM_SECONDS, 300);
        assert_eq!(PAIRING_SECONDS, 600);
        assert_eq!(RECENT_SESSION_SECONDS, 600);
        assert_eq!(CONFIRM_ATTEMPTS, 3);
        assert_eq!(DEVICES_PER_ACCOUNT, 20);
        assert_eq!(PENDING_PER_ACCOUNT, 5);
        assert_eq!(IDLE_DAYS, 150);
        assert_eq!(SESSION_SECONDS, 86_400);
        assert_eq!(RENEW_WITHIN_SECONDS, 43_200);
        assert_eq!(ROTATION_GRACE_SECONDS, 60);
        assert_eq!(POLL_SECONDS, 5);
        assert_eq!(NAME_MAX_LENGTH, 80);
        assert_eq!(DEVICE_COOKIE_MAX_AGE, IDLE_DAYS * 86_400);
    }

    #[test]
    fn device_names_follow_the_platform() {
        let ipad = "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X)";
        assert_eq!(Platform::Ios.device_name(Some(ipad)), "iPad");
        assert_eq!(
            Platform::Ios.device_name(Some("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0)")),
            "iPhone"
        );
        assert_eq!(Platform::Ios.device_name(Some("iPadOS-ish")), "iPhone");
        assert_eq!(Platform::Ios.device_name(None), "iPhone");
        assert_eq!(Platform::Android.device_name(Some(ipad)), "Android");
        assert_eq!(Platform::Other.device_name(None), "Phone");
    }
}
