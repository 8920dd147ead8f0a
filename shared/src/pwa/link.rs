//! The pairing link: `<canonical origin>/pwa/#pair=<secret>`. The secret travels only in the
//! fragment, so no server, proxy or log along the way ever sees it.

use crate::approvals::is_secret_shaped;
use crate::http::origin::canonical_origin;

/// Longest link the parser looks at.
pub const MAX_LINK_CHARS: usize = 8192;

/// Why a scanned link is not a pairing link of this installation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRejection {
    /// A Cloud Login link (`#pairing=`), meant for the authenticator app.
    CloudLogin,
    /// A well-formed pairing link of another installation.
    OtherCloud,
    Invalid,
}

impl LinkRejection {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRejection::CloudLogin => "cloud-login",
            LinkRejection::OtherCloud => "other-cloud",
            LinkRejection::Invalid => "invalid",
        }
    }
}

/// The link for a pairing secret.
pub fn pairing_link(origin: &str, secret: &str) -> String {
    format!(
        "{}{}#pair={secret}",
        origin.trim_end_matches('/'),
        super::APP_SCOPE
    )
}

/// Reads the secret out of a scanned link, never fetching anything. `origin` is this
/// installation's canonical origin.
pub fn parse_pairing_link(value: &str, origin: &str) -> Result<String, LinkRejection> {
    let value = value.trim();
    if value.chars().count() > MAX_LINK_CHARS {
        return Err(LinkRejection::Invalid);
    }
    let url = url::Url::parse(value).map_err(|_| LinkRejection::Invalid)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LinkRejection::Invalid);
    }
    let fragment = url.fragment().unwrap_or_default();
    if fragment.starts_with("pairing=") {
        return Err(LinkRejection::CloudLogin);
    }
    let secret = fragment
        .strip_prefix("pair=")
        .filter(|s| is_secret_shaped(s))
        .ok_or(LinkRejection::Invalid)?;
    if url.path() != super::APP_SCOPE
        || url.query().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(LinkRejection::Invalid);
    }
    let link_origin = url.origin().ascii_serialization();
    if Some(link_origin) != canonical_origin(origin) {
        return Err(LinkRejection::OtherCloud);
    }
    Ok(secret.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::create_secret;

    const ORIGIN: &str = "https://cloud.example.test";

    /// Scenario 23 (link part): the link format and every parser reason.
    #[test]
    fn scenario_23_links_and_parser_reasons() {
        let secret = create_secret();
        let link = pairing_link(ORIGIN, &secret);
        assert_eq!(
            link,
            format!("https://cloud.example.test/pwa/#pair={secret}")
        );
        assert_eq!(parse_pairing_link(&link, ORIGIN), Ok(secret.clone()));
        assert_eq!(
            parse_pairing_link(&format!("  {link}\n"), ORIGIN),
            Ok(secret.clone())
        );
        let cases = [
            (
                format!("{ORIGIN}/pwa/#pairing={secret}"),
                LinkRejection::CloudLogin,
            ),
            (
                format!("https://other.example.test/pwa/#pair={secret}"),
                LinkRejection::OtherCloud,
            ),
            (
                format!("{ORIGIN}/pwa#pair={secret}"),
                LinkRejection::Invalid,
            ),
            (
                format!("{ORIGIN}/pwa/x#pair={secret}"),
                LinkRejection::Invalid,
            ),
            (
                format!("{ORIGIN}/pwa/?a=1#pair={secret}"),
                LinkRejection::Invalid,
            ),
            (
                format!("https://u:p@cloud.example.test/pwa/#pair={secret}"),
                LinkRejection::Invalid,
            ),
            (
                format!("{ORIGIN}/pwa/#pair={}", &secret[..42]),
                LinkRejection::Invalid,
            ),
            (
                format!("{ORIGIN}/pwa/#pair={secret}=="),
                LinkRejection::Invalid,
            ),
            ("not a url".to_string(), LinkRejection::Invalid),
            (
                format!("javascript:alert(1)//pwa/#pair={secret}"),
                LinkRejection::Invalid,
            ),
            (
                format!("{ORIGIN}/pwa/#pair={secret}{}", "a".repeat(8192)),
                LinkRejection::Invalid,
            ),
        ];
        for (link, reason) in cases {
            assert_eq!(parse_pairing_link(&link, ORIGIN), Err(reason), "{link}");
        }
        assert_eq!(LinkRejection::CloudLogin.as_str(), "cloud-login");
        assert_eq!(LinkRejection::OtherCloud.as_str(), "other-cloud");
    }
}
