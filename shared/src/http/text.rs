//! Text for HTML pages and URLs.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// HTML text escaping of `& < > " '` (the apostrophe as `&#39;`), for text and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// `encodeURIComponent`: everything but letters, digits and `-_.!~*'()` is escaped.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// A path segment or URI part percent-encoded the way `encodeURIComponent` does.
pub fn encode_uri_component(part: &str) -> String {
    utf8_percent_encode(part, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_encodes_components() {
        assert_eq!(
            escape_html("<a href=\"x\">Tom & Jerry's</a>"),
            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;"
        );
        assert_eq!(
            encode_uri_component("a b/c-d_e.f!~*'()ü"),
            "a%20b%2Fc-d_e.f!~*'()%C3%BC"
        );
    }
}
