//! The offline page the service worker shows when the network or the gateway fails: one
//! self-contained document (no links, no external scripts, no account data) in English and
//! German, with the installation's name and logo.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k2b_core::branding::{AppIconSource, CLOUD_LOGO_SVG, SVG_MIME};

/// Logos larger than this are not inlined; the page shows the Cloud logo instead.
pub const MAX_INLINE_LOGO_BYTES: usize = 64 * 1024;

pub use k2b_core::http::text::escape_html;

fn logo_data_uri(source: &AppIconSource) -> String {
    let (mime, data) = if source.data.len() <= MAX_INLINE_LOGO_BYTES {
        (source.mime.as_str(), source.data.as_slice())
    } else {
        (SVG_MIME, CLOUD_LOGO_SVG.as_bytes())
    };
    format!(
        "data:{};base64,{}",
        escape_html(mime),
        STANDARD.encode(data)
    )
}

/// The offline document for an installation called `name` with logo `source`.
pub fn offline_document(name: &str, source: &AppIconSource) -> String {
    let cloud = escape_html(name);
    let logo = logo_data_uri(source);
    let en_title = escape_html(&format!("Can't reach {name}"));
    let de_title = escape_html(&format!("{name} nicht erreichbar"));
    format!(
        r##"<!doctype html>
<html lang="en" class="light">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover">
<meta name="theme-color" content="#fafafa">
<title>{cloud}</title>
<script>
(function () {{
  var match = document.cookie.match(/(?:^|;\s*)theme=(light|dark)/);
  var dark = match ? match[1] === "dark" : window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.className = dark ? "dark" : "light";
}})();
</script>
<style>
html, body {{ margin: 0; min-height: 100%; }}
html.light {{ background: #fafafa; color: #09090b; }}
html.dark {{ background: #090d12; color: #fafafa; }}
body {{
  font-family: system-ui, -apple-system, "Segoe UI", sans-serif;
  display: flex; flex-direction: column; align-items: center; justify-content: center;
  min-height: 100vh; box-sizing: border-box; text-align: center;
  padding: env(safe-area-inset-top) env(safe-area-inset-right) env(safe-area-inset-bottom) env(safe-area-inset-left);
}}
img {{ width: 72px; height: 72px; object-fit: contain; }}
.name {{ font-weight: 600; margin: 12px 0 24px; }}
section[hidden] {{ display: none; }}
h1 {{ font-size: 1.25rem; margin: 0 0 8px; }}
p {{ margin: 0 0 24px; opacity: 0.8; }}
button {{ min-height: 44px; padding: 0 20px; border-radius: 22px; border: 0; font: inherit; background: #2563eb; color: #fff; }}
</style>
</head>
<body>
<img src="{logo}" alt="">
<div class="name">{cloud}</div>
<section lang="en" id="offline-en">
<h1>{en_title}</h1>
<p>Check your connection, then try again.</p>
<button type="button" onclick="location.reload()">Try again</button>
</section>
<section lang="de" id="offline-de" hidden>
<h1>{de_title}</h1>
<p>Prüfe deine Verbindung und versuche es dann erneut.</p>
<button type="button" onclick="location.reload()">Erneut versuchen</button>
</section>
<script>
(function () {{
  var cookie = document.cookie.match(/(?:^|;\s*)cloud\.locale=([^;]*)/);
  var language = (cookie ? decodeURIComponent(cookie[1]) : navigator.language || "en").toLowerCase();
  var german = language.indexOf("de") === 0;
  document.getElementById("offline-en").hidden = german;
  document.getElementById("offline-de").hidden = !german;
  document.documentElement.lang = german ? "de" : "en";
  if (document.documentElement.className === "dark") {{
    document.querySelector('meta[name="theme-color"]').setAttribute("content", "#090d12");
  }}
}})();
</script>
</body>
</html>
"##
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k2b_core::branding::parse_icon_source;

    /// Scenario 18: the offline page's content.
    #[test]
    fn scenario_18_offline_page() {
        let html = offline_document("Example Cloud", &parse_icon_source(""));
        for expected in [
            "Can&#39;t reach Example Cloud",
            "Example Cloud nicht erreichbar",
            "data:image/svg+xml;base64,",
            "viewport-fit=cover",
            "env(safe-area-inset-top)",
            "Try again",
            "Erneut versuchen",
            "Prüfe deine Verbindung und versuche es dann erneut.",
            "<html lang=\"en\" class=\"light\">",
            "content=\"#fafafa\"",
            "#090d12",
        ] {
            assert!(html.contains(expected), "{expected}");
        }
        for forbidden in ["<link", "<script src", "http://", "https://"] {
            assert!(!html.contains(forbidden), "{forbidden}");
        }
    }

    #[test]
    fn names_are_escaped_and_large_logos_are_not_inlined() {
        let html = offline_document("<b>\"A\" & 'B'</b>", &parse_icon_source(""));
        assert!(html.contains("&lt;b&gt;&quot;A&quot; &amp; &#39;B&#39;&lt;/b&gt;"));
        assert!(!html.contains("<b>"));
        let small = parse_icon_source(&format!(
            "data:image/png;base64,{}",
            STANDARD.encode([7u8; 100])
        ));
        assert!(offline_document("C", &small).contains("data:image/png;base64,"));
        let large = parse_icon_source(&format!(
            "data:image/png;base64,{}",
            STANDARD.encode(vec![7u8; MAX_INLINE_LOGO_BYTES + 1])
        ));
        let html = offline_document("C", &large);
        assert!(!html.contains("data:image/png"));
        assert!(html.contains("data:image/svg+xml;base64,"));
    }
}
