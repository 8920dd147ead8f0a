//! The canonical origin of the installation (`app.url`) and the `Origin` check that protects
//! state-changing cookie routes.

use http::{HeaderMap, Method, header};

/// Canonical origin (`scheme://host[:port]`, default ports omitted) of a configured URL.
///
/// The value is trimmed and trailing slashes are dropped. Without a scheme, `https` is assumed,
/// except for loopback hosts (`localhost`, `127.0.0.1`, `::1`), which get `http`. Returns `None`
/// for anything that is not an http(s) URL with a host.
pub fn canonical_origin(value: &str) -> Option<String> {
    let trimmed = value.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        return None;
    }
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        let scheme = if is_loopback_authority(trimmed) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{trimmed}")
    };
    let url = url::Url::parse(&with_scheme).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    if !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    Some(url.origin().ascii_serialization())
}

/// The origin of a private transport URL (`http://app-core:3000`): an http(s) URL with a host,
/// written out as `scheme://host[:port]`; `None` for anything else.
pub fn transport_origin(value: &str) -> Option<String> {
    let url = url::Url::parse(value.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    Some(url.origin().ascii_serialization())
}

fn is_loopback_authority(authority: &str) -> bool {
    let host = authority.split('/').next().unwrap_or_default();
    let host = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else if host == "::1" {
        host
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(
        host.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

/// Whether a request passes the `Origin` check: safe methods (GET, HEAD, OPTIONS) always do; every
/// other method needs an `Origin` header exactly equal to `expected`. Forwarded headers
/// (`X-Forwarded-Host` and friends) are never consulted.
pub fn origin_allowed(method: &Method, headers: &HeaderMap, expected: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
        || origin_matches(headers, expected)
}

/// Whether the request carries exactly one `Origin` header equal to `expected`, whatever its
/// method (for routers whose rule covers OPTIONS too).
pub fn origin_matches(headers: &HeaderMap, expected: &str) -> bool {
    let mut values = headers.get_all(header::ORIGIN).iter();
    match (values.next(), values.next()) {
        (Some(origin), None) => origin.to_str().is_ok_and(|o| o == expected),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn canonical_origin_normalises_configured_urls() {
        let cases = [
            (
                "https://cloud.example.test/",
                Some("https://cloud.example.test"),
            ),
            (
                "https://cloud.example.test:443/app/",
                Some("https://cloud.example.test"),
            ),
            (
                "  HTTPS://Cloud.Example.Test:8443  ",
                Some("https://cloud.example.test:8443"),
            ),
            ("cloud.example.test", Some("https://cloud.example.test")),
            ("localhost:3000", Some("http://localhost:3000")),
            ("127.0.0.1:3000/", Some("http://127.0.0.1:3000")),
            ("[::1]:3000", Some("http://[::1]:3000")),
            (
                "http://cloud.example.test",
                Some("http://cloud.example.test"),
            ),
            ("ftp://cloud.example.test", None),
            ("https://user:pw@cloud.example.test", None),
            ("", None),
            ("   ", None),
        ];
        for (input, expected) in cases {
            assert_eq!(canonical_origin(input).as_deref(), expected, "{input:?}");
        }
    }

    fn headers(origins: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for origin in origins {
            map.append(
                header::ORIGIN,
                HeaderValue::from_str(origin).expect("header"),
            );
        }
        map
    }

    #[test]
    fn state_changing_requests_need_the_exact_origin() {
        let expected = "https://cloud.example.test";
        assert!(origin_allowed(
            &Method::POST,
            &headers(&[expected]),
            expected
        ));
        assert!(!origin_allowed(&Method::POST, &headers(&[]), expected));
        assert!(!origin_allowed(
            &Method::DELETE,
            &headers(&["https://evil.test"]),
            expected
        ));
        assert!(!origin_allowed(
            &Method::PATCH,
            &headers(&["https://cloud.example.test/"]),
            expected
        ));
        assert!(!origin_allowed(&Method::PUT, &headers(&["null"]), expected));
        assert!(!origin_allowed(
            &Method::POST,
            &headers(&[expected, expected]),
            expected
        ));
    }

    #[test]
    fn forwarded_headers_never_help() {
        let expected = "https://cloud.example.test";
        let mut map = headers(&["https://internal:3000"]);
        map.insert(
            "x-forwarded-host",
            HeaderValue::from_static("cloud.example.test"),
        );
        map.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(!origin_allowed(&Method::POST, &map, expected));
    }

    #[test]
    fn safe_methods_pass_without_origin() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(origin_allowed(&method, &HeaderMap::new(), "https://x.test"));
        }
    }

    #[test]
    fn origin_matches_ignores_the_method() {
        let expected = "https://x.test";
        assert!(!origin_matches(&HeaderMap::new(), expected));
        assert!(origin_matches(&headers(&[expected]), expected));
        assert!(!origin_matches(&headers(&["https://y.test"]), expected));
        assert!(!origin_matches(&headers(&[expected, expected]), expected));
    }
}
