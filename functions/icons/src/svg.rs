//! Giving an SVG logo the target size, so the vector renders sharp instead of being scaled as a
//! bitmap.

/// The first `name` attribute (preceded by whitespace, any case) of a start tag's attribute
/// text, as a plain pixel number: digits, an optional fraction, an optional `px`. Percentages
/// and other units do not give the drawing's extent and read as `None`.
fn pixels(attributes: &str, name: &str) -> Option<f64> {
    let value = find_attribute(attributes, name)?.1;
    let value = value.trim();
    let number = value
        .strip_suffix("px")
        .or_else(|| value.strip_suffix("PX"))
        .or_else(|| value.strip_suffix("Px"))
        .or_else(|| value.strip_suffix("pX"))
        .unwrap_or(value);
    let mut parts = number.splitn(2, '.');
    let whole = parts.next().unwrap_or_default();
    let fraction = parts.next();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    number.parse().ok()
}

/// Finds `\s<name>\s*=\s*("…"|'…'|bare)` (name case-insensitive) and returns the byte range of
/// the whole match and the value.
fn find_attribute<'a>(attributes: &'a str, name: &str) -> Option<((usize, usize), &'a str)> {
    let bytes = attributes.as_bytes();
    let mut from = 0;
    while from < bytes.len() {
        let start = from + attributes[from..].find(|c: char| c.is_whitespace())?;
        let whitespace_len = attributes[start..].chars().next().map_or(1, char::len_utf8);
        let name_start = start + whitespace_len;
        let candidate = attributes.get(name_start..name_start + name.len());
        if let Some(candidate) = candidate
            && candidate.eq_ignore_ascii_case(name)
        {
            let mut cursor = name_start + name.len();
            cursor += leading_whitespace(&attributes[cursor..]);
            if attributes[cursor..].starts_with('=') {
                cursor += 1;
                cursor += leading_whitespace(&attributes[cursor..]);
                let rest = &attributes[cursor..];
                let (value, consumed) = if let Some(inner) = rest.strip_prefix('"') {
                    inner.find('"').map(|end| (&inner[..end], end + 2))
                } else if let Some(inner) = rest.strip_prefix('\'') {
                    inner.find('\'').map(|end| (&inner[..end], end + 2))
                } else {
                    let end = rest
                        .find(|c: char| c.is_whitespace() || c == '>')
                        .unwrap_or(rest.len());
                    (end > 0).then_some((&rest[..end], end))
                }?;
                return Some(((start, cursor + consumed), value));
            }
        }
        from = name_start;
    }
    None
}

fn leading_whitespace(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

/// Removes every whitespace-preceded `width`/`height` attribute.
fn without_size(attributes: &str) -> String {
    let mut rest = attributes.to_string();
    for name in ["width", "height"] {
        while let Some(((start, end), _)) = find_attribute(&rest, name) {
            rest.replace_range(start..end, "");
        }
    }
    rest
}

/// A number printed as JavaScript prints it (`20` rather than `20.0`).
fn js_number(value: f64) -> String {
    format!("{value}")
}

/// Rewrites the first `<svg …>` start tag (any case) so the drawing renders at `size`×`size`:
/// without a viewBox, one is made from a plain pixel width and height; a root with neither a
/// viewBox nor both pixel sizes stays as it is (a new size would crop it, not scale it).
/// Otherwise the root's width and height are replaced by `size`; everything else is kept.
pub fn sized_svg(svg: &str, size: u32) -> String {
    let lower = svg.to_ascii_lowercase();
    let mut search = 0;
    let tag_start = loop {
        let Some(found) = lower[search..].find("<svg") else {
            return svg.to_string();
        };
        let at = search + found;
        let next = lower.as_bytes().get(at + 4).copied();
        // `<svg` must end the name: `<svgx>` is another element.
        if next.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_')) {
            break at;
        }
        search = at + 4;
    };
    let Some(close) = svg[tag_start..].find('>') else {
        return svg.to_string();
    };
    let attributes = &svg[tag_start + 4..tag_start + close];
    // A self-closing root (`<svg …/>`) stays self-closing.
    let (attributes, end) = match attributes.strip_suffix('/') {
        Some(attributes) => (attributes, "/>"),
        None => (attributes, ">"),
    };
    let has_view_box = find_view_box(attributes);
    let width = pixels(attributes, "width");
    let height = pixels(attributes, "height");
    if !has_view_box && (width.is_none() || height.is_none()) {
        return svg.to_string();
    }
    let mut rest = without_size(attributes);
    if !has_view_box && let (Some(w), Some(h)) = (width, height) {
        rest.push_str(&format!(
            " viewBox=\"0 0 {} {}\"",
            js_number(w),
            js_number(h)
        ));
    }
    format!(
        "{}<svg{rest} width=\"{size}\" height=\"{size}\"{end}{}",
        &svg[..tag_start],
        &svg[tag_start + close + 1..]
    )
}

/// Whether the attribute text has `viewBox` (any case) preceded by whitespace and followed by `=`.
fn find_view_box(attributes: &str) -> bool {
    let lower = attributes.to_ascii_lowercase();
    let mut from = 0;
    while let Some(found) = lower[from..].find("viewbox") {
        let at = from + found;
        let preceded = lower[..at].chars().last().is_some_and(char::is_whitespace);
        let followed = lower[at + 7..].trim_start().starts_with('=');
        if preceded && followed {
            return true;
        }
        from = at + 7;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Scenario 7: pixel sizes become a viewBox; the rest is unchanged.
    #[test]
    fn scenario_7_pixel_sizes_become_a_view_box() {
        let svg =
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20px"><rect/></svg>"#;
        assert_eq!(
            sized_svg(svg, 84),
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 40 20" width="84" height="84"><rect/></svg>"#
        );
    }

    /// Scenario 8: with a viewBox, percentages are simply replaced.
    #[test]
    fn scenario_8_view_box_keeps_its_quoting() {
        let svg = "<svg viewBox='0 0 4 2' width='100%' height='100%'><path/></svg>";
        assert_eq!(
            sized_svg(svg, 84),
            "<svg viewBox='0 0 4 2' width=\"84\" height=\"84\"><path/></svg>"
        );
    }

    /// Scenario 9: nothing to scale from, so nothing changes.
    #[test]
    fn scenario_9_unchanged_without_a_usable_size() {
        for svg in [
            r#"<svg width="100%" height="100%"><rect/></svg>"#,
            r#"<svg width="10cm" height="5cm"><rect/></svg>"#,
            r#"<svg stroke-width="2"><rect/></svg>"#,
            r#"<svg width="40"><rect/></svg>"#,
            "no svg here",
        ] {
            assert_eq!(sized_svg(svg, 84), svg);
        }
    }

    #[test]
    fn a_self_closing_root_stays_self_closing() {
        assert_eq!(
            sized_svg(r#"<svg width="40" height="20"/>"#, 84),
            r#"<svg viewBox="0 0 40 20" width="84" height="84"/>"#
        );
    }

    #[test]
    fn only_the_root_tag_changes_and_case_is_ignored() {
        let svg = r#"<?xml version="1.0"?><SVG Width="10" HEIGHT='5' stroke-width="3"><svg width="1" height="1"/></SVG>"#;
        assert_eq!(
            sized_svg(svg, 32),
            r#"<?xml version="1.0"?><svg stroke-width="3" viewBox="0 0 10 5" width="32" height="32"><svg width="1" height="1"/></SVG>"#
        );
        assert_eq!(
            sized_svg(r#"<svg width="20.5px" height="10.25" ><g/></svg>"#, 8),
            r#"<svg  viewBox="0 0 20.5 10.25" width="8" height="8"><g/></svg>"#
        );
    }

    proptest! {
        /// A rewritten root has exactly one width and one height.
        #[test]
        fn rewritten_roots_have_one_width_and_height(
            w in "[0-9]{1,4}(px)?|[0-9]{1,3}%|auto",
            h in "[0-9]{1,4}(px)?|[0-9]{1,3}%",
            view_box in proptest::bool::ANY,
            extra in "( stroke-width=\"[0-9]\"| fill=\"red\"| data-x='1')*",
        ) {
            let vb = if view_box { " viewBox=\"0 0 10 10\"" } else { "" };
            let svg = format!("<svg width=\"{w}\"{extra}{vb} height='{h}'><rect/></svg>");
            let out = sized_svg(&svg, 64);
            let root = &out[..out.find('>').expect("root")];
            if out != svg {
                prop_assert_eq!(root.matches(" width=").count(), 1);
                prop_assert_eq!(root.matches(" height=").count(), 1);
                prop_assert!(root.ends_with(" width=\"64\" height=\"64\""));
                prop_assert_eq!(root.matches("viewBox=").count(), 1);
            }
        }
    }
}
