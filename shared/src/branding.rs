//! The installation logo the app icons are drawn from, and the icons' version.
//!
//! `app.logo` counts when it is a single-line `data:<mime>;base64,<payload>` URI whose payload
//! decodes (leniently) to 1 byte .. 10 MiB; anything else — no logo, a link, an empty or oversized
//! payload — means the Cloud logo. The version is the first 12 hex characters of
//! SHA-256(key ‖ renderer version), where the key is the raw logo string (or the Cloud logo's
//! text): it changes exactly when the icons do, and is the same on every instance.

use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

/// Bumped when the drawing changes, so installed apps pick up the new icons.
pub const RENDERER_VERSION: &str = "1";
/// Larger logos fall back to the Cloud logo instead of reaching a decoder.
pub const APP_ICON_SOURCE_MAX_BYTES: usize = 10 * 1024 * 1024;
/// The Cloud logo: a cloud in a 24×24 viewBox with two vertical gradients. Its exact bytes are
/// part of the icons' version.
pub const CLOUD_LOGO_SVG: &str = include_str!("../assets/cloud-logo.svg");
/// The mime type of SVG sources.
pub const SVG_MIME: &str = "image/svg+xml";

/// The bytes the icons are drawn from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppIconSource {
    pub data: Vec<u8>,
    pub mime: String,
    pub version: String,
}

impl AppIconSource {
    /// Whether the icons come from the Cloud logo rather than the installation's.
    pub fn is_cloud_logo(&self) -> bool {
        self.mime == SVG_MIME && self.data == CLOUD_LOGO_SVG.as_bytes()
    }
}

/// Splits `data:<mime>;base64,<payload>`: the mime is one or more characters other than `;`
/// and `,`, `;base64,` follows at once, and the payload is the rest — which may not cross a line
/// (no `\n`, `\r`, U+2028 or U+2029).
fn split_data_uri(logo: &str) -> Option<(&str, &str)> {
    let rest = logo.strip_prefix("data:")?;
    let end = rest.find([';', ','])?;
    let (mime, rest) = rest.split_at(end);
    let payload = rest.strip_prefix(";base64,")?;
    let single_line = !payload.contains(['\n', '\r', '\u{2028}', '\u{2029}']);
    (!mime.is_empty() && !payload.is_empty() && single_line).then_some((mime, payload))
}

/// Decodes base64 the lenient way browsers' and Node's decoders do: both alphabets, characters
/// outside them skipped, padding optional, decoding ends at the first `=`.
pub fn decode_base64_lenient(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => continue,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    out
}

fn version_of(key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update(RENDERER_VERSION.as_bytes());
    hex::encode(hasher.finalize())[..12].to_string()
}

/// The icon source of an `app.logo` value.
pub fn parse_icon_source(logo: &str) -> AppIconSource {
    if let Some((mime, payload)) = split_data_uri(logo) {
        let data = decode_base64_lenient(payload);
        if !data.is_empty() && data.len() <= APP_ICON_SOURCE_MAX_BYTES {
            return AppIconSource {
                data,
                mime: mime.to_string(),
                version: version_of(logo),
            };
        }
    }
    AppIconSource {
        data: CLOUD_LOGO_SVG.as_bytes().to_vec(),
        mime: SVG_MIME.to_string(),
        version: version_of(CLOUD_LOGO_SVG),
    }
}

/// Remembers the last logo parsed in this process: the manifest, the worker script and the
/// icons read it on every request, so a logo is decoded and hashed once.
#[derive(Default)]
pub struct IconSourceMemo {
    latest: Mutex<Option<(String, Arc<AppIconSource>)>>,
}

impl IconSourceMemo {
    /// The source of `logo`: the same object as last time when the logo did not change.
    pub fn read(&self, logo: &str) -> Arc<AppIconSource> {
        if let Ok(latest) = self.latest.lock()
            && let Some((raw, source)) = latest.as_ref()
            && raw == logo
        {
            return source.clone();
        }
        let source = Arc::new(parse_icon_source(logo));
        if let Ok(mut latest) = self.latest.lock() {
            *latest = Some((logo.to_string(), source.clone()));
        }
        source
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;

    fn uri(mime: &str, bytes: &[u8]) -> String {
        format!("data:{mime};base64,{}", STANDARD.encode(bytes))
    }

    /// Scenario 1: the memo returns the identical object until the logo changes.
    #[test]
    fn scenario_1_memo_keeps_one_entry() {
        let memo = IconSourceMemo::default();
        let png = uri("image/png", b"\x89PNG fake");
        let first = memo.read(&png);
        let again = memo.read(&png);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.mime, "image/png");
        let svg = uri(
            "image/svg+xml",
            b"<svg xmlns='http://www.w3.org/2000/svg'/>",
        );
        let other = memo.read(&svg);
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.mime, "image/svg+xml");
    }

    #[test]
    fn only_single_line_base64_data_uris_count() {
        let cloud = parse_icon_source("");
        assert!(cloud.is_cloud_logo());
        for logo in [
            "",
            "https://logo.example.test/logo.png",
            "plain text",
            "data:image/svg+xml;charset=utf-8;base64,PHN2Zy8+",
            "data:image/png,AAAA",
            "data:;base64,AAAA",
            "data:image/png;base64,",
            "data:image/png;base64,AA\nAA",
            "data:image/png;base64,====",
        ] {
            let source = parse_icon_source(logo);
            assert!(source.is_cloud_logo(), "{logo:?}");
            assert_eq!(
                source.version, cloud.version,
                "{logo:?} shares the Cloud logo's version"
            );
        }
        let valid = parse_icon_source("data:image/png;base64,AAAA");
        assert!(!valid.is_cloud_logo());
        assert_eq!(valid.data, vec![0, 0, 0]);
        assert_ne!(valid.version, cloud.version);
    }

    #[test]
    fn the_size_limit_is_ten_mebibytes() {
        let at_limit = uri("image/png", &vec![1u8; APP_ICON_SOURCE_MAX_BYTES]);
        assert!(!parse_icon_source(&at_limit).is_cloud_logo());
        let over = uri("image/png", &vec![1u8; APP_ICON_SOURCE_MAX_BYTES + 1]);
        assert!(parse_icon_source(&over).is_cloud_logo());
    }

    #[test]
    fn version_is_twelve_hex_of_sha256_of_key_and_renderer_version() {
        let logo = "data:image/png;base64,AAAA";
        let expected = hex::encode(Sha256::digest(format!("{logo}1").as_bytes()))[..12].to_string();
        assert_eq!(parse_icon_source(logo).version, expected);
        let cloud =
            hex::encode(Sha256::digest(format!("{CLOUD_LOGO_SVG}1").as_bytes()))[..12].to_string();
        assert_eq!(parse_icon_source("").version, cloud);
        assert!(
            parse_icon_source("")
                .version
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn lenient_base64_matches_node() {
        assert_eq!(decode_base64_lenient("aGVsbG8="), b"hello");
        assert_eq!(
            decode_base64_lenient("aGVsbG8"),
            b"hello",
            "padding optional"
        );
        assert_eq!(
            decode_base64_lenient("aGV sbG8\t"),
            b"hello",
            "whitespace skipped"
        );
        assert_eq!(
            decode_base64_lenient("aGV*sbG8"),
            b"hello",
            "invalid characters skipped"
        );
        assert_eq!(
            decode_base64_lenient("-_-_"),
            decode_base64_lenient("+/+/"),
            "both alphabets"
        );
        assert_eq!(
            decode_base64_lenient("YQ==YQ=="),
            b"a",
            "decoding ends at padding"
        );
        assert_eq!(decode_base64_lenient("bm90IGFuIGltYWdl"), b"not an image");
    }

    #[test]
    fn the_cloud_logo_matches_its_description() {
        assert!(
            CLOUD_LOGO_SVG
                .starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 24 24\"")
        );
        assert!(CLOUD_LOGO_SVG.contains("class=\"cloud-logo\""));
        assert!(CLOUD_LOGO_SVG.contains("aria-hidden=\"true\""));
        let root = &CLOUD_LOGO_SVG[..CLOUD_LOGO_SVG.find('>').expect("root")];
        assert!(!root.contains(" width=") && !root.contains(" height="));
        for color in ["#f0f6ff", "#5a9cff", "#a6d1ff", "#1f8bff"] {
            assert!(CLOUD_LOGO_SVG.contains(color), "{color}");
        }
        assert!(!CLOUD_LOGO_SVG.ends_with('\n'));
    }
}
