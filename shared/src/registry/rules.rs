//! What an app may put in its registry entry beyond the shape readers need: checked when the
//! entry is published (an entry lives three minutes, so every live entry passed them).
//!
//! - **Links** (`nav.href`, `nav.adminHref`, `adminNav[].links[].href`,
//!   `legalLinks[].href`): empty (no link), a same-origin path (`/…`, not `//…`) or an absolute
//!   `http(s)` URL with a host and no credentials; no control characters; at most 2000
//!   characters. A
//!   `javascript:` or `data:` link cannot reach the shell's navigation.
//! - **Routes**: same-origin paths without dot segments, query or fragment; none may be or lie
//!   below one of Core's own paths ([`CORE_PATHS`]), nor be `/` or `/api` themselves; `/pwa`
//!   belongs to the shell app `pwa`, and below it any other app may claim only `/pwa/<its id>`.
//! - **Limits**: [`MAX_WIDGETS_PER_ENTRY`] widgets, [`MAX_ROUTES`] routes, [`MAX_LINKS`] links in
//!   each list.

use serde_json::Value;

/// Widgets one entry may declare.
pub const MAX_WIDGETS_PER_ENTRY: usize = 20;
/// Route prefixes one entry may claim.
pub const MAX_ROUTES: usize = 50;
/// Entries of `adminNav` (groups), of each group's links, and of `legalLinks`.
pub const MAX_LINKS: usize = 50;
/// Longest link accepted.
pub const MAX_HREF_CHARS: usize = 2000;

/// Paths Core serves itself: an app may claim none of them, nor anything below them.
pub const CORE_PATHS: &[&str] = &[
    "/api/auth",
    "/pwa/_auth",
    "/pwa/manifest.webmanifest",
    "/pwa/sw.js",
    "/branding",
    "/.well-known",
    "/api/registry",
    "/api/widgets",
    "/api/help",
    "/api/mail",
    "/api/admin/core",
    "/api/accounts/users",
    "/api/_internal",
    "/healthz",
    "/_local",
];

/// Paths no app may claim as a whole (every request would be the app's).
const WHOLE_PATHS: &[&str] = &["/", "/api"];
/// The app that owns the installed web app's shell (`/pwa`).
const SHELL_APP_ID: &str = "pwa";

fn is_same_origin_path(href: &str) -> bool {
    let mut chars = href.chars();
    chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !href.chars().any(|c| c == '\\' || c.is_whitespace())
}

/// Whether `href` is a link the shell may render: a same-origin path or an `http(s)` URL.
pub fn is_safe_link(href: &str) -> bool {
    if href.is_empty()
        || href.chars().count() > MAX_HREF_CHARS
        || href.chars().any(char::is_control)
    {
        return false;
    }
    if href.starts_with('/') {
        return is_same_origin_path(href);
    }
    url::Url::parse(href).is_ok_and(|url| {
        matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some_and(|h| !h.is_empty())
            && url.username().is_empty()
            && url.password().is_none()
    })
}

/// Whether `path` is `prefix` or lies below it (whole segments).
fn within(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Why `route` may not be claimed by `app_id`, if it may not.
pub fn route_refusal(app_id: &str, route: &str) -> Option<String> {
    if !is_same_origin_path(route) || route.contains(['?', '#', '%']) {
        return Some(format!("routes must be same-origin paths: {route:?}"));
    }
    if route
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Some(format!("routes must not contain dot segments: {route:?}"));
    }
    let normal = match route.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    let lower = normal.to_ascii_lowercase();
    if WHOLE_PATHS.contains(&lower.as_str()) {
        return Some(format!("routes must not claim {normal} as a whole"));
    }
    if let Some(core) = CORE_PATHS.iter().find(|core| within(&lower, core)) {
        return Some(format!("routes must not claim Core's path {core}"));
    }
    if within(&lower, "/pwa")
        && app_id != SHELL_APP_ID
        && !within(normal, &format!("/pwa/{app_id}"))
    {
        return Some(format!(
            "routes below /pwa must be the app's own /pwa/{app_id}"
        ));
    }
    None
}

fn links(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).into_iter().flatten()
}

fn check_count(field: &str, count: usize, max: usize) -> Result<(), String> {
    if count > max {
        return Err(format!(
            "{field} must have at most {max} entries ({count} given)"
        ));
    }
    Ok(())
}

fn check_link(field: &str, href: Option<&Value>) -> Result<(), String> {
    match href {
        // No link at all (a hidden navigation entry says `""`).
        None => Ok(()),
        Some(Value::String(href)) if href.is_empty() => Ok(()),
        Some(Value::String(href)) if is_safe_link(href) => Ok(()),
        Some(_) => Err(format!(
            "{field} must be a same-origin path or an http(s) URL"
        )),
    }
}

/// The publication rules of an entry already valid in shape (see the module documentation).
pub fn check(entry: &Value) -> Result<(), String> {
    let app_id = entry.get("id").and_then(Value::as_str).unwrap_or_default();
    let routes: Vec<&str> = links(entry.get("routes"))
        .filter_map(Value::as_str)
        .collect();
    check_count("routes", routes.len(), MAX_ROUTES)?;
    for route in routes {
        if let Some(refusal) = route_refusal(app_id, route) {
            return Err(refusal);
        }
    }
    check_count(
        "widgets",
        links(entry.get("widgets")).count(),
        MAX_WIDGETS_PER_ENTRY,
    )?;
    if let Some(nav) = entry.get("nav") {
        for field in ["href", "adminHref"] {
            check_link(&format!("nav.{field}"), nav.get(field))?;
        }
    }
    check_count("adminNav", links(entry.get("adminNav")).count(), MAX_LINKS)?;
    for (g, group) in links(entry.get("adminNav")).enumerate() {
        check_count(
            &format!("adminNav[{g}].links"),
            links(group.get("links")).count(),
            MAX_LINKS,
        )?;
        for (l, link) in links(group.get("links")).enumerate() {
            check_link(&format!("adminNav[{g}].links[{l}].href"), link.get("href"))?;
        }
    }
    check_count(
        "legalLinks",
        links(entry.get("legalLinks")).count(),
        MAX_LINKS,
    )?;
    for (l, link) in links(entry.get("legalLinks")).enumerate() {
        check_link(&format!("legalLinks[{l}].href"), link.get("href"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn links_are_paths_or_web_urls() {
        for good in [
            "/reports",
            "/reports?x=1#y",
            "https://docs.example/guide",
            "http://intranet.example:8080/x",
        ] {
            assert!(is_safe_link(good), "{good}");
        }
        for bad in [
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            "data:text/html,x",
            "//evil.example/",
            "/\\evil.example",
            "vbscript:x",
            "https://user:pw@example.org/",
            "mailto:x@example.org",
            "",
            "/a\nb",
            "reports",
        ] {
            assert!(!is_safe_link(bad), "{bad}");
        }
        assert!(!is_safe_link(&format!("/{}", "a".repeat(MAX_HREF_CHARS))));
    }

    #[test]
    fn core_paths_cannot_be_claimed() {
        for (route, refused) in [
            ("/reports", false),
            ("/api/reports", false),
            ("/api/authority", false),
            ("/pwa/reports", false),
            ("/pwa/reports/sub", false),
            ("/admin/reports", false),
            ("/api/auth", true),
            ("/api/auth/", true),
            ("/API/Auth/pwa/v1", true),
            ("/pwa/_auth/x", true),
            ("/branding", true),
            ("/.well-known/jwks.json", true),
            ("/api/registry/v1", true),
            ("/api/widgets", true),
            ("/api/help/v1", true),
            ("/api/mail", true),
            ("/", true),
            ("/api", true),
            ("/pwa", true),
            ("/pwa/other", true),
            ("/Pwa/other", true),
            ("/pwa/sw.js", true),
            ("//evil", true),
            ("/x/../api/auth", true),
            ("/api%2fauth", true),
        ] {
            assert_eq!(
                route_refusal("reports", route).is_some(),
                refused,
                "{route}"
            );
        }
    }

    #[test]
    fn the_shell_owns_pwa() {
        assert_eq!(route_refusal("pwa", "/pwa"), None);
        assert!(route_refusal("pwa", "/pwa/_auth").is_some());
        assert!(route_refusal("reports", "/pwa").is_some());
    }

    #[test]
    fn limits_and_links_are_checked_in_every_list() {
        let base = json!({"id": "reports", "routes": ["/reports"]});
        assert_eq!(check(&base), Ok(()));
        let with = |key: &str, value: Value| {
            let mut entry = base.clone();
            entry[key] = value;
            check(&entry)
        };
        let widgets: Vec<Value> = (0..=MAX_WIDGETS_PER_ENTRY)
            .map(|i| json!({"id": format!("w{i}"), "path": "/x"}))
            .collect();
        assert_eq!(
            with("widgets", json!(widgets)),
            Err("widgets must have at most 20 entries (21 given)".into())
        );
        assert!(with("widgets", json!(widgets[..20])).is_ok());
        assert!(with("nav", json!({"href": "javascript:x", "section": "primary"})).is_err());
        assert!(with("nav", json!({"href": "/r", "adminHref": "data:x"})).is_err());
        assert!(
            with(
                "adminNav",
                json!([{"label": "g", "links": [{"label": "l", "href": "//x", "icon": "i"}]}])
            )
            .is_err()
        );
        assert!(
            with(
                "legalLinks",
                json!([{"label": "l", "href": "javascript:x"}])
            )
            .is_err()
        );
        assert!(
            with(
                "legalLinks",
                json!([{"label": "l", "href": "https://law.example/"}])
            )
            .is_ok()
        );
        assert!(with("routes", json!(["/reports", "/api/mail"])).is_err());
        let many: Vec<String> = (0..=MAX_ROUTES).map(|i| format!("/r{i}")).collect();
        assert!(with("routes", json!(many)).is_err());
    }
}
