//! Parsers under fire: the SVG sizer, fed random garbage and near-valid mutations of SVG roots,
//! never panics, leaves what it cannot scale unchanged, and sizes what it documents it sizes.

use icons::svg::sized_svg;
use proptest::prelude::*;
use proptest::sample::Index;

/// One edit of a text, in characters: insert, delete, replace, truncate or duplicate.
#[derive(Debug, Clone)]
struct Edit {
    op: u8,
    at: Index,
    len: u8,
    ch: char,
}

const SVG_SPECIALS: &[char] = &[
    '<', '>', '/', '=', '"', '\'', ' ', '\t', '\n', '\u{a0}', '\u{3000}', 'x', 'p', '%', '.', '0',
    '9', 'é', 'S', '_',
];

fn edit() -> impl Strategy<Value = Edit> {
    (
        0u8..5,
        any::<Index>(),
        0u8..8,
        prop_oneof![3 => prop::sample::select(SVG_SPECIALS), 1 => any::<char>()],
    )
        .prop_map(|(op, at, len, ch)| Edit { op, at, len, ch })
}

fn apply_edits(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let at = edit.at.index(chars.len() + 1);
        let end = (at + usize::from(edit.len) + 1).min(chars.len());
        match edit.op {
            0 => chars.insert(at, edit.ch),
            1 => {
                chars.drain(at.min(end)..end);
            }
            2 if at < chars.len() => chars[at] = edit.ch,
            2 => chars.push(edit.ch),
            3 => chars.truncate(at),
            _ => {
                let copy: Vec<char> = chars[at.min(end)..end].to_vec();
                chars.splice(at..at, copy);
            }
        }
    }
    chars.into_iter().collect()
}

/// A size attribute's value: a plain pixel number (digits, an optional fraction, an optional
/// `px` in any case), or something that is not.
#[derive(Debug, Clone)]
enum Size {
    Pixels { text: String, value: f64 },
    Other(String),
}

impl Size {
    fn text(&self) -> &str {
        match self {
            Size::Pixels { text, .. } | Size::Other(text) => text,
        }
    }

    fn pixels(&self) -> Option<f64> {
        match self {
            Size::Pixels { value, .. } => Some(*value),
            Size::Other(_) => None,
        }
    }
}

fn size() -> impl Strategy<Value = Size> {
    let pixels = (
        "[0-9]{1,4}",
        prop::option::of("[0-9]{1,2}"),
        prop::sample::select(&["", "px", "PX", "Px", "pX"][..]),
        prop::sample::select(&["", " "][..]),
    )
        .prop_map(|(whole, fraction, unit, pad)| {
            let number = match fraction {
                Some(fraction) => format!("{whole}.{fraction}"),
                None => whole,
            };
            let value = number.parse().unwrap_or_default();
            Size::Pixels {
                text: format!("{pad}{number}{unit}{pad}"),
                value,
            }
        });
    let other = prop_oneof![
        "[0-9]{1,3}%",
        "[0-9]{1,3}(cm|em|mm|pt|in)",
        Just("auto".to_string()),
        Just(String::new()),
        "-[0-9]{1,2}",
        "\\.[0-9]",
        "[0-9]\\.",
        "[0-9]e[0-9]",
    ]
    .prop_map(Size::Other);
    prop_oneof![3 => pixels, 1 => other]
}

/// One attribute of the generated root, with the whitespace before it.
#[derive(Debug, Clone)]
enum Attribute {
    Width(Size),
    Height(Size),
    ViewBox,
    Other,
}

/// The value in double quotes, single quotes, or bare (only when it has no whitespace).
fn quoted(value: &str, quote: u8) -> String {
    let bare_ok = !value.is_empty() && !value.contains(char::is_whitespace);
    match quote % 3 {
        1 => format!("'{value}'"),
        2 if bare_ok => value.to_string(),
        _ => format!("\"{value}\""),
    }
}

fn space() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&[" ", "  ", "\n", "\t", " \n "][..])
}

/// A root tag, what comes before it and after it, with the size attributes it holds.
#[derive(Debug, Clone)]
struct Root {
    prefix: String,
    name: String,
    attributes: Vec<(String, Attribute)>,
    close: String,
    rest: String,
}

impl Root {
    fn render(&self) -> String {
        let attributes: String = self
            .attributes
            .iter()
            .map(|(text, _)| text.as_str())
            .collect();
        format!(
            "{}<{}{attributes}{}{}",
            self.prefix, self.name, self.close, self.rest
        )
    }

    fn width(&self) -> Option<&Size> {
        self.attributes.iter().find_map(|(_, a)| match a {
            Attribute::Width(size) => Some(size),
            _ => None,
        })
    }

    fn height(&self) -> Option<&Size> {
        self.attributes.iter().find_map(|(_, a)| match a {
            Attribute::Height(size) => Some(size),
            _ => None,
        })
    }

    fn has_view_box(&self) -> bool {
        self.attributes
            .iter()
            .any(|(_, a)| matches!(a, Attribute::ViewBox))
    }

    /// Whether the sizer documents a change: a viewBox, or a pixel width and height.
    fn scalable(&self) -> bool {
        self.has_view_box()
            || (self.width().and_then(Size::pixels).is_some()
                && self.height().and_then(Size::pixels).is_some())
    }
}

fn attribute() -> impl Strategy<Value = (String, Attribute)> {
    let width = (
        space(),
        prop::sample::select(&["width", "WIDTH", "Width"][..]),
        size(),
        any::<u8>(),
    )
        .prop_map(|(space, name, size, quote)| {
            (
                format!("{space}{name}={}", quoted(size.text(), quote)),
                Attribute::Width(size),
            )
        });
    let height = (
        space(),
        prop::sample::select(&["height", "HEIGHT", "Height"][..]),
        size(),
        any::<u8>(),
    )
        .prop_map(|(space, name, size, quote)| {
            (
                format!("{space}{name}={}", quoted(size.text(), quote)),
                Attribute::Height(size),
            )
        });
    let view_box = (
        space(),
        prop::sample::select(&["viewBox", "viewbox", "VIEWBOX"][..]),
        any::<u8>(),
    )
        .prop_map(|(space, name, quote)| {
            (
                format!("{space}{name}={}", quoted("0 0 24 24", quote % 2)),
                Attribute::ViewBox,
            )
        });
    let other = (
        space(),
        prop::sample::select(
            &[
                "xmlns=\"http://www.w3.org/2000/svg\"",
                "stroke-width=\"2\"",
                "data-width='3'",
                "fill=\"red\"",
                "class=\"logo\"",
                "aria-hidden=\"true\"",
                "preserveAspectRatio=\"xMidYMid\"",
            ][..],
        ),
    )
        .prop_map(|(space, text)| (format!("{space}{text}"), Attribute::Other));
    prop_oneof![width, height, view_box, other]
}

/// A root tag ending in one of `closes`.
fn root(closes: &'static [&'static str]) -> impl Strategy<Value = Root> {
    (
        prop::sample::select(&["", "<?xml version=\"1.0\"?>", "<!-- logo -->\n", "<svgx/>"][..]),
        prop::sample::select(&["svg", "SVG", "Svg"][..]),
        prop::collection::vec(attribute(), 0..5),
        prop::sample::select(closes),
        prop::sample::select(&["<rect/></svg>", "<svg width=\"1\" height=\"1\"/></svg>", ""][..]),
    )
        .prop_map(|(prefix, name, attributes, close, rest)| {
            let mut seen = (false, false, false);
            let attributes = attributes
                .into_iter()
                .filter(|(_, a)| match a {
                    Attribute::Width(_) => !std::mem::replace(&mut seen.0, true),
                    Attribute::Height(_) => !std::mem::replace(&mut seen.1, true),
                    Attribute::ViewBox => !std::mem::replace(&mut seen.2, true),
                    Attribute::Other => true,
                })
                .collect();
            Root {
                prefix: prefix.to_string(),
                name: name.to_string(),
                attributes,
                close: close.to_string(),
                rest: rest.to_string(),
            }
        })
}

/// A root without a viewBox and without a pixel width and height both.
fn unscalable_root() -> impl Strategy<Value = Root> {
    root(&[">", " >", "/>"]).prop_map(|mut root| {
        root.attributes
            .retain(|(_, a)| !matches!(a, Attribute::ViewBox));
        if root.scalable() {
            root.attributes
                .retain(|(_, a)| !matches!(a, Attribute::Height(_)));
        }
        root
    })
}

/// The first `<svg` start tag (any case, the name ended) and its first `>`.
fn root_tag(svg: &str) -> Option<(usize, usize)> {
    let lower = svg.to_ascii_lowercase();
    let mut from = 0;
    loop {
        let at = from + lower[from..].find("<svg")?;
        match lower.as_bytes().get(at + 4) {
            Some(b) if b.is_ascii_alphanumeric() || *b == b'_' => from = at + 4,
            _ => return Some((at, at + svg[at..].find('>')?)),
        }
    }
}

fn svg_input() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (root(&[">", " >", "/>"]), prop::collection::vec(edit(), 0..4))
            .prop_map(|(root, edits)| apply_edits(&root.render(), &edits)),
        1 => "(?s).{0,64}",
        1 => prop::collection::vec(any::<u8>(), 0..64)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// `sized_svg` reads any text: without a `<svg …>` start tag it is unchanged; otherwise it
    /// is unchanged or only the root tag is rewritten, ending in the requested width and height,
    /// with everything before and after the tag kept.
    #[test]
    fn any_text_is_sized_or_left_unchanged(svg in svg_input(), size in any::<u32>()) {
        let out = sized_svg(&svg, size);
        let Some((start, close)) = root_tag(&svg) else {
            prop_assert_eq!(out, svg);
            return Ok(());
        };
        if out != svg {
            let before = &svg[..start];
            let after = &svg[close + 1..];
            prop_assert!(out.starts_with(before) && out.ends_with(after), "{:?} -> {:?}", svg, out);
            prop_assert!(out.len() >= before.len() + after.len());
            let tag = &out[before.len()..out.len() - after.len()];
            prop_assert!(tag.starts_with("<svg"), "{:?}", tag);
            let sized = format!(" width=\"{size}\" height=\"{size}\"");
            let self_closing = svg[..close].ends_with('/');
            let end = if self_closing { "/>" } else { ">" };
            prop_assert!(tag.ends_with(&format!("{sized}{end}")), "{:?}", tag);
            prop_assert!(!tag[..tag.len() - 1].contains('>'));
        }
    }

    /// A root with a viewBox, or with a pixel width and height, is rewritten to the requested
    /// size: its own width and height are gone (each with the whitespace character before it), a
    /// viewBox `0 0 <width> <height>` is added when it had none, and everything else is kept in
    /// order.
    #[test]
    fn scalable_roots_get_the_requested_size(root in root(&[">", " >"]), size in 1u32..4096) {
        let svg = root.render();
        let out = sized_svg(&svg, size);
        if !root.scalable() {
            prop_assert_eq!(out, svg);
            return Ok(());
        }
        // A size attribute goes with the one whitespace character before it.
        let kept: String = root
            .attributes
            .iter()
            .map(|(text, a)| match a {
                Attribute::Width(_) | Attribute::Height(_) => {
                    let space = &text[..text.len() - text.trim_start().len()];
                    let mut space = space.chars();
                    space.next_back();
                    space.as_str()
                }
                _ => text.as_str(),
            })
            .collect();
        let close = root.close.strip_suffix('>').unwrap_or_default();
        let width = root.width().and_then(Size::pixels);
        let height = root.height().and_then(Size::pixels);
        let view_box = match (root.has_view_box(), width, height) {
            (false, Some(w), Some(h)) => format!(" viewBox=\"0 0 {w} {h}\""),
            _ => String::new(),
        };
        let expected = format!(
            "{}<svg{kept}{close}{view_box} width=\"{size}\" height=\"{size}\">{}",
            root.prefix, root.rest
        );
        prop_assert_eq!(out, expected);
    }

    /// A root with neither a viewBox nor both sizes in plain pixels is left exactly as it is.
    #[test]
    fn unscalable_roots_are_unchanged(root in unscalable_root(), size in any::<u32>()) {
        prop_assert!(!root.scalable());
        let svg = root.render();
        prop_assert_eq!(sized_svg(&svg, size), svg);
    }
}
