//! Reading request cookies and writing `Set-Cookie` headers with explicit attributes.

use cookie::{Cookie, SameSite};
use http::{HeaderMap, HeaderValue, header};

/// The value of the first cookie named `name` across every `Cookie` header, as sent (no decoding).
pub fn get_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| key.trim() == name)
        .map(|(_, value)| value.trim().trim_matches('"'))
}

/// A cookie to set. Every attribute is explicit, because each cookie of the platform has a
/// deliberate scope: build one with [`SetCookie::new`] and the attribute methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetCookie {
    pub name: String,
    pub value: String,
    pub path: String,
    pub max_age_seconds: i64,
    pub http_only: bool,
    pub secure: bool,
    pub same_site: SameSiteMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameSiteMode {
    Strict,
    Lax,
    None,
}

impl SetCookie {
    /// An `HttpOnly`, `Secure`, `SameSite=Lax` cookie on `/`; adjust with the methods below.
    pub fn new(name: impl Into<String>, value: impl Into<String>, max_age_seconds: i64) -> Self {
        SetCookie {
            name: name.into(),
            value: value.into(),
            path: "/".into(),
            max_age_seconds,
            http_only: true,
            secure: true,
            same_site: SameSiteMode::Lax,
        }
    }

    /// A cookie that deletes `name` on `path` (empty value, `Max-Age=0`, an expiry in the past).
    pub fn removal(name: impl Into<String>, path: impl Into<String>) -> Self {
        SetCookie::new(name, "", 0).path(path)
    }

    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
    pub fn same_site(mut self, same_site: SameSiteMode) -> Self {
        self.same_site = same_site;
        self
    }
    /// `Secure` is dropped only in local mode, where the runner speaks plain HTTP.
    pub fn secure(mut self, secure: bool) -> Self {
        self.secure = secure;
        self
    }
    pub fn http_only(mut self, http_only: bool) -> Self {
        self.http_only = http_only;
        self
    }

    /// The `Set-Cookie` header value.
    pub fn header_value(&self) -> HeaderValue {
        let mut cookie = Cookie::new(self.name.clone(), self.value.clone());
        cookie.set_path(self.path.clone());
        cookie.set_http_only(self.http_only);
        cookie.set_secure(self.secure);
        cookie.set_same_site(match self.same_site {
            SameSiteMode::Strict => SameSite::Strict,
            SameSiteMode::Lax => SameSite::Lax,
            SameSiteMode::None => SameSite::None,
        });
        cookie.set_max_age(cookie::time::Duration::seconds(self.max_age_seconds.max(0)));
        if self.max_age_seconds <= 0 {
            cookie.set_expires(cookie::time::OffsetDateTime::UNIX_EPOCH);
        }
        // Names and values are ours (identifiers, base64url, JWTs), so this cannot fail in practice;
        // an unencodable value degrades to a removal rather than a panic.
        HeaderValue::from_str(&cookie.to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("invalid=; Max-Age=0"))
    }

    /// Appends this cookie to a response's headers.
    pub fn append_to(&self, headers: &mut HeaderMap) {
        headers.append(header::SET_COOKIE, self.header_value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_cookie_by_name_across_headers() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; session_token=abc.def; b=2"),
        );
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("session_token=later"),
        );
        assert_eq!(get_cookie(&headers, "session_token"), Some("abc.def"));
        assert_eq!(get_cookie(&headers, "b"), Some("2"));
        assert_eq!(get_cookie(&headers, "session"), None);
        assert_eq!(get_cookie(&HeaderMap::new(), "a"), None);
    }

    #[test]
    fn set_cookie_carries_every_attribute() {
        let value = SetCookie::new("pwa_pairing", "secret", 599)
            .path("/pwa/_auth/pairings")
            .same_site(SameSiteMode::Strict)
            .header_value();
        let text = value.to_str().expect("ascii");
        assert!(text.starts_with("pwa_pairing=secret"));
        for attribute in [
            "HttpOnly",
            "Secure",
            "SameSite=Strict",
            "Path=/pwa/_auth/pairings",
            "Max-Age=599",
        ] {
            assert!(text.contains(attribute), "{attribute} missing from {text}");
        }
    }

    #[test]
    fn local_mode_drops_secure_and_removal_expires_the_cookie() {
        let text = SetCookie::new("session_token", "t", 60)
            .secure(false)
            .header_value();
        assert!(!text.to_str().expect("ascii").contains("Secure"));
        let removal = SetCookie::removal("pwa_device", "/pwa/_auth").header_value();
        let text = removal.to_str().expect("ascii");
        assert!(text.starts_with("pwa_device=;"));
        assert!(text.contains("Max-Age=0"));
        assert!(text.contains("Path=/pwa/_auth"));
        assert!(text.contains("Expires=Thu, 01 Jan 1970 00:00:00 GMT"));
    }
}
