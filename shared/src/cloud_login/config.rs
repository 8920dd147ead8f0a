//! Cloud Login's settings, read from the database for every operation (never a cache): whether
//! it is on, whether administrators may enroll for others, the authenticator app's origin, and
//! the issuer (the canonical origin of `app.url`, never the request's Host header).

use sqlx::PgConnection;

use super::CloudLoginError;
use crate::Core;
use crate::http::origin::canonical_origin;

const KEYS: [&str; 4] = [
    "app.url",
    "user.app_approval.enabled",
    "user.app_approval.admin_pairing",
    "user.app_approval.origin",
];

/// The settings of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginConfig {
    /// The installation's origin: signed messages name it, and every row is scoped to it.
    pub issuer: String,
    /// The authenticator app's origin; `None` when unset or not a valid origin.
    pub app_origin: Option<String>,
    pub enabled: bool,
    pub admin_pairing: bool,
}

impl LoginConfig {
    /// The feature operations (pairing, commands, sign-in, `/info`) need Cloud Login on and a
    /// valid app origin; returns that origin.
    pub fn require_feature(&self) -> Result<&str, CloudLoginError> {
        match (&self.app_origin, self.enabled) {
            (Some(origin), true) => Ok(origin),
            _ => Err(CloudLoginError::Unavailable("CloudLoginUnavailable")),
        }
    }
}

/// Reads the settings on `conn` (one round trip). A value of the wrong type or an issuer that is
/// not a valid origin is 503; an invalid app origin only disables the feature operations.
pub async fn read_on(core: &Core, conn: &mut PgConnection) -> Result<LoginConfig, CloudLoginError> {
    let values = core.settings.get_many_uncached(conn, &KEYS).await?;
    let production = !core.config.mode.is_local();
    let invalid = CloudLoginError::Unavailable("InvalidConfiguration");
    let issuer = values[0]
        .as_str()
        .and_then(canonical_origin)
        .and_then(|origin| strict_origin(&origin, production))
        .ok_or(invalid.clone())?;
    let enabled = values[1].as_bool().ok_or(invalid.clone())?;
    let admin_pairing = values[2].as_bool().ok_or(invalid.clone())?;
    let app_origin = strict_origin(values[3].as_str().ok_or(invalid)?, production);
    Ok(LoginConfig {
        issuer,
        app_origin,
        enabled,
        admin_pairing,
    })
}

/// Reads the settings on a pooled connection.
pub async fn read(core: &Core) -> Result<LoginConfig, CloudLoginError> {
    let mut conn = core.pool.acquire().await?;
    read_on(core, &mut conn).await
}

/// `value` as an origin when it is exactly one: https (http only for a loopback host outside
/// production), no user info, query or fragment, and the path `/`.
pub fn strict_origin(value: &str, production: bool) -> Option<String> {
    let url = url::Url::parse(value).ok()?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    let scheme_ok = url.scheme() == "https" || (url.scheme() == "http" && loopback && !production);
    if !scheme_ok
        || url.host_str().is_none()
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
        || url.path() != "/"
    {
        return None;
    }
    Some(url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_https_with_the_root_path_only() {
        assert_eq!(
            strict_origin("https://cloud-login.pwa.k2b.dev", true).as_deref(),
            Some("https://cloud-login.pwa.k2b.dev")
        );
        assert_eq!(
            strict_origin("https://auth.example.test/", true).as_deref(),
            Some("https://auth.example.test")
        );
        assert_eq!(
            strict_origin("https://auth.example.test:8443", true).as_deref(),
            Some("https://auth.example.test:8443")
        );
        for bad in [
            "",
            "auth.example.test",
            "https://auth.example.test/path",
            "https://user@auth.example.test",
            "https://auth.example.test/?q=1",
            "https://auth.example.test/#x",
            "http://auth.example.test",
            "ftp://auth.example.test",
        ] {
            assert_eq!(strict_origin(bad, false), None, "{bad}");
        }
    }

    #[test]
    fn plain_http_only_for_loopback_outside_production() {
        assert_eq!(
            strict_origin("http://127.0.0.1:43119", false).as_deref(),
            Some("http://127.0.0.1:43119")
        );
        assert_eq!(
            strict_origin("http://localhost:3000", false).as_deref(),
            Some("http://localhost:3000")
        );
        assert_eq!(strict_origin("http://127.0.0.1:43119", true), None);
        assert_eq!(strict_origin("http://localhost:3000", true), None);
    }
}
