//! Entity tags: building them from content and matching `If-None-Match`.

use http::{HeaderMap, header};
use sha2::{Digest, Sha256};

/// `"<first hex_len hex characters of SHA-256(body)>"`, quoted as an entity tag.
pub fn sha256_etag(body: &[u8], hex_len: usize) -> String {
    let digest = hex::encode(Sha256::digest(body));
    format!("\"{}\"", &digest[..hex_len.min(digest.len())])
}

/// Whether an `If-None-Match` value matches `current` (a quoted entity tag): the value is split on
/// commas and each trimmed tag matches when it equals `current`, `W/` + `current`, or `*`.
pub fn etag_matches(if_none_match: &str, current: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|tag| {
        tag == "*" || tag == current || tag.strip_prefix("W/").is_some_and(|t| t == current)
    })
}

/// [`etag_matches`] over every `If-None-Match` header of a request.
pub fn if_none_match(headers: &HeaderMap, current: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| etag_matches(value, current))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const CURRENT: &str = "\"0123456789ab\"";

    #[test]
    fn matches_exact_weak_listed_and_wildcard_tags() {
        assert!(etag_matches("\"0123456789ab\"", CURRENT));
        assert!(etag_matches("W/\"0123456789ab\"", CURRENT));
        assert!(etag_matches("\"other\", \"0123456789ab\"", CURRENT));
        assert!(etag_matches("\"other\",W/\"0123456789ab\"", CURRENT));
        assert!(etag_matches("*", CURRENT));
        assert!(etag_matches(" * ", CURRENT));
    }

    #[test]
    fn does_not_match_other_or_malformed_tags() {
        assert!(!etag_matches("\"ba9876543210\"", CURRENT));
        assert!(!etag_matches("0123456789ab", CURRENT), "unquoted");
        assert!(!etag_matches("w/\"0123456789ab\"", CURRENT), "lowercase w/");
        assert!(!etag_matches("\"0123456789ab", CURRENT));
        assert!(!etag_matches("", CURRENT));
        assert!(!etag_matches("**", CURRENT));
    }

    #[test]
    fn reads_every_if_none_match_header() {
        let mut headers = HeaderMap::new();
        assert!(!if_none_match(&headers, CURRENT));
        headers.append(header::IF_NONE_MATCH, HeaderValue::from_static("\"a\""));
        headers.append(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"0123456789ab\""),
        );
        assert!(if_none_match(&headers, CURRENT));
    }

    #[test]
    fn sha256_etag_is_quoted_prefix_of_the_digest() {
        // SHA-256("") = e3b0c44298fc1c149afbf4c8996fb924...
        assert_eq!(sha256_etag(b"", 12), "\"e3b0c44298fc\"");
        assert_eq!(sha256_etag(b"", 32), "\"e3b0c44298fc1c149afbf4c8996fb924\"");
    }
}
