//! Where the installed app lands after `/pwa/_auth/session/launch?to=`: a path inside the app's
//! scope and outside `/pwa/_auth`, however it is encoded, else the app's start page.

/// The start page (also the fallback for any target that is not plainly inside the app).
pub const FALLBACK_TARGET: &str = "/pwa/?pwa_launch=1";
/// Longest target looked at.
pub const MAX_TARGET_CHARS: usize = 2048;

const BASE: &str = "http://launch.invalid";

/// The sanitized target for `to`, with `pwa_launch=1` in its query.
pub fn launch_target(to: Option<&str>) -> String {
    sanitize(to).unwrap_or_else(|| FALLBACK_TARGET.to_string())
}

fn sanitize(to: Option<&str>) -> Option<String> {
    let to = to?;
    if to.chars().count() > MAX_TARGET_CHARS
        || !to.starts_with(super::APP_SCOPE)
        || to.contains("//")
        || to.contains('\\')
    {
        return None;
    }
    let base = url::Url::parse(BASE).ok()?;
    let mut url = base.join(to).ok()?;
    if url.origin() != base.origin() {
        return None;
    }
    let decoded = decode_uri_component(url.path())?;
    if !inside(url.path()) || !inside(&decoded) || decoded.contains("//") {
        return None;
    }
    let mut pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    match pairs.iter().position(|(k, _)| k == "pwa_launch") {
        Some(first) => {
            pairs[first].1 = "1".into();
            let mut index = 0;
            pairs.retain(|(k, _)| {
                let keep = k != "pwa_launch" || index == first;
                index += 1;
                keep
            });
        }
        None => pairs.push(("pwa_launch".into(), "1".into())),
    }
    url.query_pairs_mut().clear().extend_pairs(pairs);
    Some(format!(
        "{}?{}",
        url.path(),
        url.query().unwrap_or_default()
    ))
}

/// Inside the app's scope and not at or below `/pwa/_auth`.
fn inside(path: &str) -> bool {
    path.starts_with(super::APP_SCOPE) && path != "/pwa/_auth" && !path.starts_with("/pwa/_auth/")
}

/// Percent-decoding as strict as JavaScript's `decodeURIComponent`: a `%` must start two hex
/// digits and the bytes must be UTF-8.
fn decode_uri_component(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let text = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(text, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario 13 (target part): in-scope targets keep their query and gain `pwa_launch=1`;
    /// everything else lands on the start page.
    #[test]
    fn scenario_13_launch_targets() {
        assert_eq!(
            launch_target(Some("/pwa/spaces?view=today")),
            "/pwa/spaces?view=today&pwa_launch=1"
        );
        assert_eq!(launch_target(Some("/pwa/")), "/pwa/?pwa_launch=1");
        assert_eq!(
            launch_target(Some("/pwa/x?pwa_launch=0&a=b&pwa_launch=2")),
            "/pwa/x?pwa_launch=1&a=b"
        );
        let long = format!("/pwa/{}", "a".repeat(2048));
        for evil in [
            "https://evil.example/pwa/",
            "/pwa/_auth",
            "/pwa/_auth/session/renew",
            "/pwa//x",
            "/pwa/\\x",
            "/pwa/./_auth",
            "/pwa/%2e/_auth",
            "/pwa/spaces/../_auth",
            "/pwa/%5Fauth",
            "/pwa/%2F%2Fevil",
            "/pwa/%E0%A4%A",
            "/pwa/..",
            long.as_str(),
            "",
            "/me/app",
        ] {
            assert_eq!(launch_target(Some(evil)), FALLBACK_TARGET, "{evil}");
        }
        assert_eq!(launch_target(None), FALLBACK_TARGET);
    }
}
