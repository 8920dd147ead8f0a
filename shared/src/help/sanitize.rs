//! The allowlist Help HTML passes through: text and table tags plus the few the renderer
//! writes (`aside div figure figcaption i img input mark span sub sup`) and MathML; a fixed set
//! of attributes per tag with restricted values; http(s), mailto, tel, note and attach URLs;
//! and only the inline styles the renderer itself uses. Anything else is dropped — `<script>`
//! and `<style>` with their content.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::LazyLock;

use ammonia::{Builder, UrlRelative};

const EXTRA_TAGS: &[&str] = &[
    "aside",
    "div",
    "figure",
    "figcaption",
    "i",
    "img",
    "input",
    "mark",
    "span",
    "sub",
    "sup",
    "math",
    "semantics",
    "annotation",
    "mrow",
    "mi",
    "mn",
    "mo",
    "mfrac",
    "msqrt",
    "msub",
    "msup",
    "msubsup",
    "mover",
    "mtext",
];
const GENERIC_ATTRIBUTES: &[&str] = &[
    "aria-hidden",
    "aria-label",
    "class",
    "data-help-icon",
    "data-tone",
    "id",
    "title",
];
/// Elements dropped with everything inside them.
const DROPPED_WITH_CONTENT: &[&str] = &[
    "script", "style", "svg", "iframe", "object", "embed", "noscript", "template",
];
const URL_SCHEMES: &[&str] = &["http", "https", "mailto", "tel", "note", "attach"];
const IMAGE_SCHEMES: &[&str] = &["http", "https", "attach"];

static SANITIZER: LazyLock<Builder<'static>> = LazyLock::new(|| {
    let mut builder = Builder::default();
    builder
        .add_tags(EXTRA_TAGS)
        .rm_tags(DROPPED_WITH_CONTENT)
        .add_clean_content_tags(DROPPED_WITH_CONTENT)
        .generic_attributes(GENERIC_ATTRIBUTES.iter().copied().collect())
        .add_tag_attributes("a", &["href", "name", "rel", "target", "title"])
        .add_tag_attributes("div", &["data-block-name", "style"])
        .add_tag_attributes(
            "img",
            &["alt", "height", "loading", "src", "title", "width", "style"],
        )
        .add_tag_attributes("input", &["checked", "disabled"])
        .add_tag_attribute_values("input", "type", &["checkbox"])
        .add_tag_attributes("span", &["style"])
        .add_tag_attribute_values("a", "data-link", &["web", "mail"])
        .add_tag_attribute_values(
            "a",
            "data-reference",
            &[
                "pdf", "image", "design", "file", "note", "heading", "task", "page",
            ],
        )
        .add_tag_attribute_values("aside", "role", &["note"])
        .url_schemes(URL_SCHEMES.iter().copied().collect::<HashSet<_>>())
        .url_relative(UrlRelative::PassThrough)
        .link_rel(None)
        .strip_comments(true)
        .attribute_filter(filter_attribute);
    builder
});

/// The sanitised HTML.
pub fn clean(html: &str) -> String {
    SANITIZER.clean(html).to_string()
}

/// The text of HTML: every tag removed, `<script>`/`<style>` with their content; text stays
/// escaped.
pub fn text_only(html: &str) -> String {
    static TEXT: LazyLock<Builder<'static>> = LazyLock::new(|| {
        let mut builder = Builder::empty();
        builder
            .add_clean_content_tags(DROPPED_WITH_CONTENT)
            .generic_attributes(HashSet::new())
            .strip_comments(true);
        builder
    });
    // Block ends separate words (`</p><p>` would otherwise glue them).
    let spaced = html
        .replace("</p>", "</p> ")
        .replace("<br />", " ")
        .replace("</li>", "</li> ")
        .replace("</h", " </h")
        .replace("</td>", "</td> ")
        .replace("</th>", "</th> ")
        .replace("</div>", "</div> ")
        .replace("</span>", "</span> ");
    TEXT.clean(&spaced).to_string()
}

/// Values the tag-level lists cannot express: image sources by scheme, and inline styles
/// limited to the renderer's own declarations.
fn filter_attribute<'u>(element: &str, attribute: &str, value: &'u str) -> Option<Cow<'u, str>> {
    match (element, attribute) {
        ("img", "src") => {
            let scheme = value.split_once(':').map(|(s, _)| s.to_ascii_lowercase());
            match scheme {
                Some(scheme) if !scheme.contains('/') => IMAGE_SCHEMES
                    .contains(&scheme.as_str())
                    .then_some(Cow::Borrowed(value)),
                _ => Some(Cow::Borrowed(value)),
            }
        }
        (_, "style") => {
            let kept: Vec<String> = value
                .split(';')
                .filter_map(|declaration| {
                    let (property, value) = declaration.split_once(':')?;
                    let property = property.trim().to_ascii_lowercase();
                    let value = value.trim();
                    allowed_style(element, &property, value).then(|| format!("{property}: {value}"))
                })
                .collect();
            (!kept.is_empty()).then(|| Cow::Owned(format!("{};", kept.join("; "))))
        }
        _ => Some(Cow::Borrowed(value)),
    }
}

/// `N<unit>` with digits (and one optional decimal point) only.
fn length(value: &str, unit: &str) -> bool {
    value.strip_suffix(unit).is_some_and(|number| {
        !number.is_empty()
            && number.chars().filter(|c| *c == '.').count() <= 1
            && number.chars().all(|c| c.is_ascii_digit() || c == '.')
    })
}

fn allowed_style(element: &str, property: &str, value: &str) -> bool {
    match (element, property) {
        ("div", "height") => length(value, "px"),
        ("img", "max-height" | "max-width") => length(value, "px"),
        ("span", "margin-right" | "margin-top") => length(value, "em"),
        ("span", "width") => length(value, "%"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `input` loses `forbidden` both when cleaned alone and when it is raw HTML in a Help
    /// document rendered as a whole.
    fn never_survives(input: &str, forbidden: &str) {
        let cleaned = clean(input);
        assert!(
            !cleaned.to_ascii_lowercase().contains(forbidden),
            "{input} → {cleaned}"
        );
        never_rendered(input, forbidden);
    }

    /// A Help document holding `input` renders without `forbidden`.
    fn never_rendered(input: &str, forbidden: &str) {
        let rendered = crate::help::render_help_markdown(&format!("Text\n\n{input}\n"), None);
        assert!(
            !rendered.to_ascii_lowercase().contains(forbidden),
            "{input} → {rendered}"
        );
    }

    #[test]
    fn raw_script_vanishes_with_its_content() {
        never_survives("<p>a<script>alert(1)</script>b</p>", "alert");
        never_survives(
            "<script src=\"https://evil.example/x.js\"></script>",
            "script",
        );
        assert_eq!(clean("<p>a<script>alert(1)</script>b</p>"), "<p>ab</p>");
    }

    #[test]
    fn javascript_links_lose_their_target() {
        never_survives("<a href=\"javascript:alert(1)\">x</a>", "javascript");
        never_survives("<a href=\"JaVaScRiPt:alert(1)\">x</a>", "javascript");
        never_survives("<a href=\" javascript:alert(1)\">x</a>", "javascript");
        never_rendered("[x](javascript:alert(1))", "javascript");
    }

    #[test]
    fn data_links_and_images_lose_their_target() {
        never_survives("<a href=\"data:text/html,<b>x</b>\">x</a>", "data:");
        never_survives("<img src=\"data:image/png;base64,AAAA\">", "data:");
        never_rendered("![x](data:image/svg+xml;base64,AAAA)", "data:");
    }

    #[test]
    fn event_handler_attributes_are_stripped() {
        never_survives("<p onclick=\"steal()\">x</p>", "onclick");
        never_survives("<img src=x onerror=\"steal()\">", "onerror");
        never_survives(
            "<a href=\"https://x\" onmouseover=\"steal()\">x</a>",
            "onmouseover",
        );
    }

    #[test]
    fn styles_outside_the_allowlist_are_dropped() {
        never_survives("<span style=\"position:fixed;top:0\">x</span>", "position");
        never_survives(
            "<div style=\"background:url(javascript:x)\">x</div>",
            "background",
        );
        never_survives("<div style=\"height: 400px; color: red\">x</div>", "color");
        never_survives("<p style=\"height: 4px\">x</p>", "style");
        never_survives("<style>body{display:none}</style>", "display");
    }

    #[test]
    fn iframes_are_removed() {
        never_survives("<iframe src=\"https://evil.example\"></iframe>", "iframe");
        never_survives("<object data=\"https://evil.example\"></object>", "object");
        never_survives("<embed src=\"https://evil.example\">", "embed");
    }

    #[test]
    fn svg_with_script_is_removed() {
        never_survives(
            "<svg><script>alert(1)</script><circle r=\"1\"/></svg>",
            "alert",
        );
        never_survives("<svg onload=\"alert(1)\"></svg>", "svg");
        never_survives(
            "<svg><a xlink:href=\"javascript:alert(1)\">x</a></svg>",
            "javascript",
        );
    }

    #[test]
    fn data_script_source_is_stripped_and_its_text_kept() {
        never_survives(
            "<p data-script-source=\"alert(1)\">kept text</p>",
            "data-script-source",
        );
        assert_eq!(
            clean("<p data-script-source=\"alert(1)\">kept text</p>"),
            "<p>kept text</p>"
        );
    }

    #[test]
    fn unknown_values_tags_and_roles_are_dropped() {
        never_survives("<a href=\"https://x\" data-link=\"evil\">x</a>", "evil");
        never_survives("<aside role=\"alert\">x</aside>", "alert");
        never_survives("<form action=\"/x\"><input name=\"q\"></form>", "form");
    }

    #[test]
    fn the_renderers_own_markup_survives() {
        for html in [
            "<aside class=\"k2b-notice-card\" data-tone=\"info\" role=\"note\"><span class=\"k2b-sr-only\">Info: </span><div class=\"k2b-notice-card__body\"><p>x</p></div></aside>",
            "<a href=\"https://example.org\" class=\"k2b-text-link\" data-link=\"web\" target=\"_blank\" rel=\"noopener noreferrer\">x</a>",
            "<a href=\"/app/x\" class=\"k2b-reference\" data-reference=\"page\" aria-label=\"Page: x\">x</a>",
            "<a href=\"note:abc\">n</a>",
            "<img src=\"attach:logo.png\" alt=\"logo\" style=\"max-width: 200px;\">",
            "<span style=\"width: 50%;\">w</span>",
            "<div style=\"height: 400px;\">h</div>",
        ] {
            assert_eq!(clean(html), html);
        }
        assert_eq!(
            clean("<img src=\"mailto:x@y\">"),
            "<img>",
            "images only from http(s) and attachments"
        );
    }

    #[test]
    fn text_only_keeps_words_apart_and_drops_scripts() {
        assert_eq!(
            text_only("<p>One</p><p>Two &amp; <script>x()</script>three</p>")
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["One", "Two", "&amp;", "three"]
        );
    }
}
