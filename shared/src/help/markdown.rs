//! Help Markdown to HTML: GitHub-flavoured Markdown with hard line breaks, callouts
//! (`:::warning Title`), guided blocks (`:::steps`), heading ids and section icons, link kinds
//! (web, mail, reference pills), code blocks with a language badge and light highlighting, then
//! the allowlist sanitiser ([`super::sanitize`]). Also the plain text the search indexes.

use std::collections::HashMap;
use std::fmt::Write as _;

use pulldown_cmark::{CodeBlockKind, CowStr, Event, HeadingLevel, Options, Parser, Tag};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

use super::sanitize;
use crate::http::text::escape_html as escape;

/// Callout kinds and their tones.
const CALLOUTS: [(&str, &str); 5] = [
    ("note", "neutral"),
    ("info", "info"),
    ("success", "success"),
    ("warning", "warning"),
    ("danger", "danger"),
];
/// Guided blocks of Help documents.
const GUIDED: [&str; 3] = ["steps", "compare", "reference"];
/// The section icon of an h2 without `{icon="…"}`.
const DEFAULT_SECTION_ICON: &str = "ti ti-point";
/// A heading whose text leaves no slug.
const EMPTY_SLUG: &str = "section";

/// Classes of the code block wrapper, its badge, `<pre>` and `<code>`, and of inline code.
const CODE_BLOCK_CLASS: &str = "md-code-block relative my-3";
const CODE_BADGE_CLASS: &str =
    "absolute top-2 right-2 text-xs text-gray-400 dark:text-gray-500 font-mono select-none";
const CODE_PRE_CLASS: &str = "bg-gray-50 dark:bg-gray-900 border border-gray-200 dark:border-gray-700 rounded-md p-4 overflow-x-auto";
const CODE_CLASS: &str = "text-sm font-mono text-gray-800 dark:text-gray-200 whitespace-pre";
const INLINE_CODE_CLASS: &str = "bg-gray-100 dark:bg-gray-800 text-gray-800 dark:text-gray-200 px-1.5 py-0.5 rounded text-sm font-mono";

/// The language of the screen-reader labels and link kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Labels {
    English,
    German,
}

impl Labels {
    fn for_locale(locale: Option<&str>) -> Labels {
        let primary = locale
            .and_then(|l| l.split('-').next())
            .map(str::to_ascii_lowercase);
        if primary.as_deref() == Some("de") {
            Labels::German
        } else {
            Labels::English
        }
    }

    fn callout(self, kind: &str) -> &'static str {
        match (self, kind) {
            (Labels::German, "note") => "Notiz",
            (Labels::German, "info") => "Info",
            (Labels::German, "success") => "Erfolg",
            (Labels::German, "warning") => "Warnung",
            (Labels::German, _) => "Gefahr",
            (Labels::English, "note") => "Note",
            (Labels::English, "info") => "Info",
            (Labels::English, "success") => "Success",
            (Labels::English, "warning") => "Warning",
            (Labels::English, _) => "Danger",
        }
    }

    fn reference(self, kind: Reference) -> &'static str {
        match (self, kind) {
            (_, Reference::Pdf) => "PDF",
            (Labels::English, Reference::Image) => "Image",
            (Labels::German, Reference::Image) => "Bild",
            (Labels::English, Reference::Design) => "Design file",
            (Labels::German, Reference::Design) => "Designdatei",
            (Labels::English, Reference::File) => "File",
            (Labels::German, Reference::File) => "Datei",
            (Labels::English, Reference::Heading) => "Heading",
            (Labels::German, Reference::Heading) => "Überschrift",
            (Labels::English, Reference::Page) => "Page",
            (Labels::German, Reference::Page) => "Seite",
        }
    }
}

/// Renders a Help document's Markdown; `locale` chooses the language of screen-reader labels.
/// Empty input renders as an empty string.
pub fn render_help_markdown(markdown: &str, locale: Option<&str>) -> String {
    if markdown.trim().is_empty() {
        return String::new();
    }
    let mut renderer = Renderer {
        labels: Labels::for_locale(locale),
        slugs: HashMap::new(),
    };
    let html = renderer.document(markdown);
    sanitize::clean(&html)
}

/// The text the search indexes: the rendered document (English labels) without tags, script
/// or style content, whitespace collapsed. Text stays HTML-escaped (`&amp;`).
pub fn markdown_to_plain_text(markdown: &str) -> String {
    let html = render_help_markdown(markdown, None);
    sanitize::text_only(&html)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A top-level block of a document.
enum Block<'a> {
    Markdown(String),
    Callout {
        kind: &'static str,
        title: Option<&'a str>,
        body: String,
    },
    Guided {
        kind: &'static str,
        body: String,
    },
}

/// The indentation (0–3 spaces) and rest of a line, when it is at most three spaces indented.
fn block_line(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    (indent <= 3).then(|| (indent, &line[indent..]))
}

/// Whether a line opens or closes a fenced code block; returns its fence character and length.
fn fence(line: &str) -> Option<(char, usize)> {
    let (_, rest) = block_line(line)?;
    let marker = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = rest.chars().take_while(|c| *c == marker).count();
    (length >= 3).then_some((marker, length))
}

/// `:::kind[ title]` of a callout.
fn callout_opener(line: &str) -> Option<(usize, &'static str, Option<&str>)> {
    let (indent, rest) = block_line(line.trim_end_matches('\r'))?;
    let rest = rest.strip_prefix(":::")?;
    let (kind, title) = CALLOUTS.iter().find_map(|(kind, _)| {
        let after = rest.strip_prefix(kind)?;
        if after.is_empty() {
            return Some((*kind, None));
        }
        let first = after.chars().next()?;
        if first != ' ' && first != '\t' {
            return None;
        }
        let title = after.trim_matches([' ', '\t']);
        Some((*kind, (!title.is_empty()).then_some(title)))
    })?;
    Some((indent, kind, title))
}

/// `:::` closing a block opened at `indent` or deeper.
fn closer(line: &str, indent: usize) -> bool {
    block_line(line.trim_end_matches('\r'))
        .is_some_and(|(i, rest)| i <= indent && rest.trim_end_matches([' ', '\t']) == ":::")
}

/// `:::steps` (no indentation, nothing after the kind but spaces).
fn guided_opener(line: &str) -> Option<&'static str> {
    let rest = line.trim_end_matches('\r').strip_prefix(":::")?;
    let rest = rest.trim_end_matches([' ', '\t']);
    GUIDED.iter().find(|kind| rest == **kind).copied()
}

/// Splits a document into Markdown and the top-level blocks outside code fences. An opener
/// without its closer stays text.
fn blocks(markdown: &str) -> Vec<Block<'_>> {
    let lines: Vec<&str> = markdown.split('\n').collect();
    let mut blocks = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    let mut open_fence: Option<(char, usize)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some((marker, length)) = open_fence {
            if fence(line).is_some_and(|(m, l)| m == marker && l >= length) {
                open_fence = None;
            }
            plain.push(line);
            i += 1;
            continue;
        }
        if let Some(found) = fence(line) {
            open_fence = Some(found);
            plain.push(line);
            i += 1;
            continue;
        }
        let opened = if let Some((indent, kind, title)) = callout_opener(line) {
            lines[i + 1..]
                .iter()
                .position(|l| closer(l, indent))
                .map(|end| {
                    let body = lines[i + 1..i + 1 + end].join("\n");
                    (Block::Callout { kind, title, body }, end)
                })
        } else if let Some(kind) = guided_opener(line) {
            lines[i + 1..]
                .iter()
                .position(|l| l.trim_end_matches('\r') == ":::")
                .map(|end| {
                    let body = lines[i + 1..i + 1 + end].join("\n").trim().to_string();
                    (Block::Guided { kind, body }, end)
                })
        } else {
            None
        };
        match opened {
            Some((block, end)) => {
                if !plain.is_empty() {
                    blocks.push(Block::Markdown(plain.join("\n")));
                    plain.clear();
                }
                blocks.push(block);
                i += end + 2;
            }
            None => {
                plain.push(line);
                i += 1;
            }
        }
    }
    if !plain.is_empty() {
        blocks.push(Block::Markdown(plain.join("\n")));
    }
    blocks
}

/// The heading id of `text`: lowercase, NFKD without combining marks, every run of other
/// characters than `a-z0-9` a single `-`, trimmed; `section` when nothing is left.
pub fn slug(text: &str) -> String {
    let mut slug = String::new();
    for c in text
        .to_lowercase()
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
    {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_matches('-');
    if slug.is_empty() {
        EMPTY_SLUG.to_string()
    } else {
        slug.to_string()
    }
}

/// Splits a trailing ` {icon="name"}` off a heading text.
fn section_icon(text: &str) -> (&str, Option<&str>) {
    let trimmed = text.trim_end();
    if let Some(open) = trimmed.rfind("{icon=\"")
        && let Some(name) = trimmed[open + 7..].strip_suffix("\"}")
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && trimmed[..open].ends_with(char::is_whitespace)
    {
        return (trimmed[..open].trim_end(), Some(name));
    }
    (text, None)
}

/// What a relative link points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reference {
    Pdf,
    Image,
    Design,
    File,
    Heading,
    Page,
}

impl Reference {
    /// The kind of a link target, `None` for anything with a scheme or `//`.
    fn of(href: &str) -> Option<Reference> {
        let href = href.trim();
        if href.is_empty() || href.starts_with("//") || has_scheme(href) {
            return None;
        }
        if href.starts_with('#') {
            return Some(Reference::Heading);
        }
        let path = href.split(['?', '#']).next().unwrap_or_default();
        let last = path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let extension = last.rsplit_once('.').map(|(_, ext)| ext).filter(|ext| {
            (1..=10).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
        });
        Some(match extension {
            None => Reference::Page,
            Some("pdf") => Reference::Pdf,
            Some(
                "png" | "jpg" | "jpeg" | "gif" | "webp" | "avif" | "bmp" | "ico" | "svg" | "heic"
                | "heif" | "tif" | "tiff",
            ) => Reference::Image,
            Some(
                "afdesign" | "afphoto" | "afpub" | "psd" | "psb" | "ai" | "eps" | "indd" | "idml"
                | "fig" | "sketch" | "xd",
            ) => Reference::Design,
            Some(_) => Reference::File,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Reference::Pdf => "pdf",
            Reference::Image => "image",
            Reference::Design => "design",
            Reference::File => "file",
            Reference::Heading => "heading",
            Reference::Page => "page",
        }
    }

    fn icon(self) -> &'static str {
        match self {
            Reference::Pdf => "ti-file-type-pdf",
            Reference::Image => "ti-photo",
            Reference::Design => "ti-vector-bezier-2",
            Reference::File => "ti-file",
            Reference::Heading => "ti-hash",
            Reference::Page => "ti-link",
        }
    }
}

/// `scheme:` at the start of a URL.
fn has_scheme(href: &str) -> bool {
    let Some((scheme, _)) = href.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

struct Renderer {
    labels: Labels,
    /// Heading ids used so far in this document, with their count.
    slugs: HashMap<String, usize>,
}

impl Renderer {
    fn document(&mut self, markdown: &str) -> String {
        let mut html = String::new();
        for block in blocks(markdown) {
            match block {
                Block::Markdown(text) => html.push_str(&self.markdown(&text)),
                Block::Callout { kind, title, body } => {
                    let tone = CALLOUTS
                        .iter()
                        .find(|(k, _)| *k == kind)
                        .map_or("neutral", |(_, tone)| tone);
                    let name = match title {
                        Some(title) => {
                            format!("<p class=\"k2b-notice-card__title\">{}</p>", escape(title))
                        }
                        None => format!(
                            "<span class=\"k2b-sr-only\">{}: </span>",
                            self.labels.callout(kind)
                        ),
                    };
                    let _ = write!(
                        html,
                        "<aside class=\"k2b-notice-card\" data-tone=\"{tone}\" role=\"note\">{name}<div class=\"k2b-notice-card__body\">{}</div></aside>",
                        self.markdown(&body)
                    );
                }
                Block::Guided { kind, body } => {
                    let _ = write!(
                        html,
                        "<div class=\"help-{kind}\">{}</div>",
                        self.markdown(&body)
                    );
                }
            }
        }
        html
    }

    /// One Markdown chunk through the event pipeline.
    fn markdown(&mut self, text: &str) -> String {
        let options = Options::ENABLE_TABLES
            | Options::ENABLE_TASKLISTS
            | Options::ENABLE_STRIKETHROUGH
            | Options::ENABLE_MATH
            | Options::ENABLE_SUPERSCRIPT
            | Options::ENABLE_SUBSCRIPT;
        let events: Vec<Event<'_>> =
            pulldown_cmark::utils::TextMergeStream::new(Parser::new_ext(text, options)).collect();
        let mut out = Vec::with_capacity(events.len());
        let mut i = 0;
        while i < events.len() {
            match &events[i] {
                Event::Start(Tag::Heading { level, .. }) => {
                    let end = matching_end(&events, i);
                    out.push(Event::Html(
                        self.heading(*level, &events[i + 1..end]).into(),
                    ));
                    i = end + 1;
                }
                Event::Start(Tag::CodeBlock(kind)) => {
                    let end = matching_end(&events, i);
                    let code: String = events[i + 1..end]
                        .iter()
                        .filter_map(|e| match e {
                            Event::Text(t) => Some(t.as_ref()),
                            _ => None,
                        })
                        .collect();
                    let language = match kind {
                        CodeBlockKind::Fenced(info) => info.split_whitespace().next(),
                        CodeBlockKind::Indented => None,
                    };
                    out.push(Event::Html(code_block(language, &code).into()));
                    i = end + 1;
                }
                _ => i = self.inline_event(&events, i, &mut out),
            }
        }
        let mut html = String::new();
        pulldown_cmark::html::push_html(&mut html, out.into_iter());
        html
    }

    /// A unique id for a heading text in this document (`x`, `x-2`, `x-3`…).
    fn unique_slug(&mut self, text: &str) -> String {
        let base = slug(text);
        let count = self.slugs.entry(base.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            base
        } else {
            format!("{base}-{count}")
        }
    }

    fn heading(&mut self, level: HeadingLevel, inner: &[Event<'_>]) -> String {
        let raw: String = inner
            .iter()
            .filter_map(|e| match e {
                Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                _ => None,
            })
            .collect();
        let (text, icon) = section_icon(&raw);
        let id = self.unique_slug(text);
        let mut inner: Vec<Event<'_>> = inner.to_vec();
        if level == HeadingLevel::H2 {
            // The icon marker is the end of the last text of the heading.
            if icon.is_some()
                && let Some(Event::Text(last)) =
                    inner.iter_mut().rev().find(|e| matches!(e, Event::Text(_)))
            {
                let (kept, _) = section_icon(last);
                *last = CowStr::from(kept.to_string());
            }
            let icon = icon.map_or_else(
                || DEFAULT_SECTION_ICON.to_string(),
                |name| format!("ti ti-{name}"),
            );
            let title = self.markdown_inline(&inner);
            return format!(
                "<h2 id=\"{id}\" class=\"help-section-title\" data-help-icon=\"{icon}\">\n  <span class=\"help-section-icon\" aria-hidden=\"true\"><i class=\"{icon}\"></i></span>\n  <span>{title}</span>\n</h2>"
            );
        }
        let n = level as usize;
        format!("<h{n} id=\"{id}\">{}</h{n}>", self.markdown_inline(&inner))
    }

    /// Renders the inline event at `i` (a link with everything up to its end) into `out`;
    /// returns the index of the next event.
    fn inline_event<'a>(
        &mut self,
        events: &[Event<'a>],
        i: usize,
        out: &mut Vec<Event<'a>>,
    ) -> usize {
        match &events[i] {
            Event::Start(Tag::Link {
                dest_url, title, ..
            }) => {
                let end = matching_end(events, i);
                out.push(Event::Html(
                    self.link(dest_url, title, &events[i + 1..end]).into(),
                ));
                return end + 1;
            }
            Event::Code(code) => out.push(Event::Html(
                format!(
                    "<code class=\"{INLINE_CODE_CLASS}\">{}</code>",
                    escape(code)
                )
                .into(),
            )),
            Event::SoftBreak => out.push(Event::HardBreak),
            Event::Text(text) => marked(text, out),
            other => out.push(other.clone()),
        }
        i + 1
    }

    /// Inline events (already inside a block) rendered through the same rules.
    fn markdown_inline(&mut self, events: &[Event<'_>]) -> String {
        let mut out = Vec::new();
        let mut i = 0;
        while i < events.len() {
            i = self.inline_event(events, i, &mut out);
        }
        let mut html = String::new();
        pulldown_cmark::html::push_html(&mut html, out.into_iter());
        html
    }

    fn link(&mut self, href: &str, title: &str, inner: &[Event<'_>]) -> String {
        let label = self.markdown_inline(inner);
        let title_attribute = if title.is_empty() {
            String::new()
        } else {
            format!(" title=\"{}\"", escape(title))
        };
        let trimmed = href.trim();
        let lower = trimmed.to_ascii_lowercase();
        if lower.starts_with("note:") || lower.starts_with("attach:") {
            return label;
        }
        if lower.starts_with("mailto:") || lower.starts_with("tel:") {
            return format!(
                "<a href=\"{}\" class=\"k2b-text-link\" data-link=\"mail\"{title_attribute}>{label}</a>",
                escape(trimmed)
            );
        }
        if lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("//")
        {
            return format!(
                "<a href=\"{}\" class=\"k2b-text-link\" data-link=\"web\"{title_attribute} target=\"_blank\" rel=\"noopener noreferrer\">{label}<i class=\"k2b-text-link__external ti ti-arrow-up-right\" aria-hidden=\"true\"></i></a>",
                escape(trimmed)
            );
        }
        match Reference::of(trimmed) {
            Some(kind) => {
                let text = plain_text(inner);
                format!(
                    "<a href=\"{}\" class=\"k2b-reference\" data-reference=\"{}\" aria-label=\"{}: {}\"{title_attribute}><i class=\"k2b-reference__icon ti {}\" aria-hidden=\"true\"></i>{label}</a>",
                    escape(trimmed),
                    kind.name(),
                    self.labels.reference(kind),
                    escape(&text),
                    kind.icon()
                )
            }
            // Another scheme: an ordinary link (the sanitiser drops schemes it does not allow).
            None => format!(
                "<a href=\"{}\"{title_attribute}>{label}</a>",
                escape(trimmed)
            ),
        }
    }
}

/// The index of the `End` matching the `Start` at `start`.
fn matching_end(events: &[Event<'_>], start: usize) -> usize {
    let mut depth = 0usize;
    for (i, event) in events.iter().enumerate().skip(start) {
        match event {
            Event::Start(_) => depth += 1,
            Event::End(_) => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    events.len().saturating_sub(1)
}

/// The text of inline events.
fn plain_text(events: &[Event<'_>]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
            _ => None,
        })
        .collect()
}

/// Text with `==highlighted==` runs as `<mark>`.
fn marked<'a>(text: &CowStr<'a>, out: &mut Vec<Event<'a>>) {
    let mut rest: &str = text;
    if !rest.contains("==") {
        out.push(Event::Text(text.clone()));
        return;
    }
    while let Some(open) = rest.find("==") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("==").filter(|c| *c > 0) else {
            break;
        };
        if open > 0 {
            out.push(Event::Text(CowStr::from(rest[..open].to_string())));
        }
        out.push(Event::InlineHtml("<mark>".into()));
        out.push(Event::Text(CowStr::from(after[..close].to_string())));
        out.push(Event::InlineHtml("</mark>".into()));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        out.push(Event::Text(CowStr::from(rest.to_string())));
    }
}

/// A fenced or indented code block: the wrapper, the language badge, the highlighted source.
fn code_block(language: Option<&str>, code: &str) -> String {
    let language = language.filter(|l| !l.is_empty());
    if language.is_some_and(|l| l.eq_ignore_ascii_case("mermaid")) {
        return format!(
            "<div class=\"md-mermaid-block relative my-3\" style=\"height: 400px;\"><pre class=\"hidden\"><code class=\"language-mermaid\">{}</code></pre></div>",
            escape(code)
        );
    }
    let mut html = format!("<div class=\"{CODE_BLOCK_CLASS}\">");
    if let Some(language) = language {
        let _ = write!(
            html,
            "<span class=\"{CODE_BADGE_CLASS}\">{}</span>",
            escape(language)
        );
    }
    let class = match language {
        Some(language) => format!("{CODE_CLASS} language-{}", escape(language)),
        None => CODE_CLASS.to_string(),
    };
    let _ = write!(
        html,
        "<pre class=\"{CODE_PRE_CLASS}\"><code class=\"{class}\">{}</code></pre></div>",
        highlight(language.unwrap_or_default(), code)
    );
    html
}

/// The token rules of a highlighted language.
struct Syntax {
    line_comments: &'static [&'static str],
    block_comments: bool,
    keywords: &'static [&'static str],
}

const SHELL: Syntax = Syntax {
    line_comments: &["#"],
    block_comments: false,
    keywords: &[
        "if", "then", "else", "elif", "fi", "for", "in", "do", "done", "while", "case", "esac",
        "function", "export", "local", "return", "echo", "cd", "sudo",
    ],
};
const SCRIPT: Syntax = Syntax {
    line_comments: &["//"],
    block_comments: true,
    keywords: &[
        "const",
        "let",
        "var",
        "function",
        "return",
        "if",
        "else",
        "for",
        "while",
        "import",
        "from",
        "export",
        "default",
        "class",
        "new",
        "await",
        "async",
        "true",
        "false",
        "null",
        "undefined",
        "type",
        "interface",
        "extends",
        "implements",
        "try",
        "catch",
        "throw",
        "typeof",
    ],
};
const GRAPHQL: Syntax = Syntax {
    line_comments: &["#"],
    block_comments: false,
    keywords: &[
        "query",
        "mutation",
        "subscription",
        "fragment",
        "on",
        "type",
        "input",
        "enum",
        "schema",
        "true",
        "false",
        "null",
    ],
};
const YAML: Syntax = Syntax {
    line_comments: &["#"],
    block_comments: false,
    keywords: &["true", "false", "null", "yes", "no"],
};

fn syntax(language: &str) -> Option<&'static Syntax> {
    match language.to_ascii_lowercase().as_str() {
        "sh" | "bash" | "shell" | "zsh" | "console" => Some(&SHELL),
        "js" | "javascript" | "ts" | "typescript" | "jsx" | "tsx" | "script" => Some(&SCRIPT),
        "graphql" | "gql" => Some(&GRAPHQL),
        "yaml" | "yml" => Some(&YAML),
        _ => None,
    }
}

/// Escaped source with `hl-comment`, `hl-string`, `hl-number` and `hl-keyword` spans for the
/// languages that have rules; other languages are only escaped.
fn highlight(language: &str, code: &str) -> String {
    let Some(syntax) = syntax(language) else {
        return escape(code);
    };
    let mut html = String::with_capacity(code.len() * 2);
    let span = |html: &mut String, class: &str, text: &str| {
        let _ = write!(html, "<span class=\"hl-{class}\">{}</span>", escape(text));
    };
    let mut rest = code;
    while let Some(c) = rest.chars().next() {
        if syntax.line_comments.iter().any(|m| rest.starts_with(*m)) {
            let end = rest.find('\n').unwrap_or(rest.len());
            span(&mut html, "comment", &rest[..end]);
            rest = &rest[end..];
        } else if syntax.block_comments && rest.starts_with("/*") {
            let end = rest[2..].find("*/").map_or(rest.len(), |e| e + 4);
            span(&mut html, "comment", &rest[..end]);
            rest = &rest[end..];
        } else if matches!(c, '"' | '\'' | '`') {
            let mut end = rest.len();
            let mut escaped = false;
            for (i, ch) in rest.char_indices().skip(1) {
                if escaped {
                    escaped = false;
                } else if ch == '\\' {
                    escaped = true;
                } else if ch == c {
                    end = i + ch.len_utf8();
                    break;
                } else if ch == '\n' && c != '`' {
                    end = i;
                    break;
                }
            }
            span(&mut html, "string", &rest[..end]);
            rest = &rest[end..];
        } else if c.is_ascii_digit() {
            let end = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '.' || ch == '_'))
                .unwrap_or(rest.len());
            span(&mut html, "number", &rest[..end]);
            rest = &rest[end..];
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let end = rest
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '$' || ch == '-'))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            if syntax.keywords.contains(&word) {
                span(&mut html, "keyword", word);
            } else {
                html.push_str(&escape(word));
            }
            rest = &rest[end..];
        } else {
            html.push_str(&escape(&rest[..c.len_utf8()]));
            rest = &rest[c.len_utf8()..];
        }
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_renders_nothing() {
        assert_eq!(render_help_markdown("", None), "");
        assert_eq!(render_help_markdown("  \n", Some("de")), "");
    }

    /// Scenario 33: every callout kind is a notice card with its tone and a screen-reader
    /// label; a titled one shows its escaped title instead.
    #[test]
    fn scenario_33_callouts_become_notice_cards() {
        for (kind, tone, label) in [
            ("note", "neutral", "Note"),
            ("info", "info", "Info"),
            ("success", "success", "Success"),
            ("warning", "warning", "Warning"),
            ("danger", "danger", "Danger"),
        ] {
            let html =
                render_help_markdown(&format!(":::{kind}\nBack up **first**.\n:::"), Some("en"));
            assert!(
                html.starts_with(&format!(
                    "<aside class=\"k2b-notice-card\" data-tone=\"{tone}\" role=\"note\"><span class=\"k2b-sr-only\">{label}: </span><div class=\"k2b-notice-card__body\"><p>Back up <strong>first</strong>.</p>"
                )),
                "{kind}: {html}"
            );
        }
        let titled = render_help_markdown(":::warning Mind <the> gap\nText\n:::", None);
        assert!(
            titled.contains("<p class=\"k2b-notice-card__title\">Mind &lt;the&gt; gap</p>"),
            "{titled}"
        );
        assert!(!titled.contains("k2b-sr-only"));
    }

    /// Scenario 18: the label follows the render locale.
    #[test]
    fn scenario_18_callout_labels_are_localized() {
        let german = render_help_markdown(":::warning\nAchtung\n:::", Some("de-AT"));
        assert!(
            german.contains("<span class=\"k2b-sr-only\">Warnung: </span>"),
            "{german}"
        );
        let english = render_help_markdown(":::warning\nCareful\n:::", Some("en"));
        assert!(english.contains("<span class=\"k2b-sr-only\">Warning: </span>"));
    }

    #[test]
    fn callouts_need_their_closer_and_stay_out_of_code() {
        let unclosed = render_help_markdown(":::info\nNo end", None);
        assert!(!unclosed.contains("aside"), "{unclosed}");
        assert!(unclosed.contains(":::info"));
        let fenced = render_help_markdown("```\n:::info\nx\n:::\n```", None);
        assert!(!fenced.contains("aside"), "{fenced}");
        let unknown = render_help_markdown(":::tip\nx\n:::", None);
        assert!(!unknown.contains("aside"));
    }

    #[test]
    fn guided_blocks_wrap_their_content() {
        let html = render_help_markdown(":::steps\n1. One\n2. Two\n:::", None);
        assert!(html.starts_with("<div class=\"help-steps\"><ol>"), "{html}");
        assert!(!html.contains(":::"));
    }

    #[test]
    fn headings_get_unique_ids_and_h2_icons() {
        let html = render_help_markdown(
            "## Getting started {icon=\"rocket\"}\n\n## Getting started\n\n### Über uns\n\n#### ***",
            None,
        );
        assert!(
            html.contains("<h2 id=\"getting-started\" class=\"help-section-title\" data-help-icon=\"ti ti-rocket\">\n  <span class=\"help-section-icon\" aria-hidden=\"true\"><i class=\"ti ti-rocket\"></i></span>\n  <span>Getting started</span>\n</h2>"),
            "{html}"
        );
        assert!(html.contains("<h2 id=\"getting-started-2\""), "{html}");
        assert!(html.contains("data-help-icon=\"ti ti-point\""));
        assert!(html.contains("<h3 id=\"uber-uns\">"), "{html}");
        assert!(!html.contains("{icon="));
        assert_eq!(slug("***"), "section");
    }

    #[test]
    fn links_have_kinds() {
        let html = render_help_markdown(
            "[Site](https://example.org) [Mail](mailto:ada@example.test) [Guide](/app/x/guide.pdf) [Top](#start) [Page](/app/example)",
            None,
        );
        assert!(html.contains("<a href=\"https://example.org\" class=\"k2b-text-link\" data-link=\"web\" target=\"_blank\" rel=\"noopener noreferrer\">Site<i class=\"k2b-text-link__external ti ti-arrow-up-right\" aria-hidden=\"true\"></i></a>"), "{html}");
        assert!(html.contains("<a href=\"mailto:ada@example.test\" class=\"k2b-text-link\" data-link=\"mail\">Mail</a>"), "{html}");
        assert!(
            html.contains("data-reference=\"pdf\" aria-label=\"PDF: Guide\""),
            "{html}"
        );
        assert!(html.contains("data-reference=\"heading\""));
        assert!(
            html.contains(
                "<a href=\"/app/example\" class=\"k2b-reference\" data-reference=\"page\""
            )
        );
        assert!(!html.contains("href=\"/app/example\" class=\"k2b-reference\" data-reference=\"page\" aria-label=\"Page: Page\" target"));
    }

    #[test]
    fn code_blocks_have_a_badge_and_escaped_highlighted_source() {
        let html = render_help_markdown("```bash\necho \"<hi>\" # say\n```", None);
        assert!(
            html.starts_with("<div class=\"md-code-block relative my-3\"><span class=\"absolute"),
            "{html}"
        );
        assert!(html.contains(">bash</span>"));
        assert!(html.contains("language-bash"));
        assert!(
            html.contains("<span class=\"hl-keyword\">echo</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"hl-string\">\"&lt;hi&gt;\"</span>"),
            "{html}"
        );
        assert!(html.contains("<span class=\"hl-comment\"># say</span>"));
        let plain = render_help_markdown("    indented <b>", None);
        assert!(plain.contains("indented &lt;b&gt;"), "{plain}");
        assert!(!plain.contains("language-"));
    }

    /// Scenario 34: a `script` fence is inert escaped source.
    #[test]
    fn scenario_34_script_fences_are_inert() {
        let html = render_help_markdown("```script\n<script>alert(1)</script>\n```", None);
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;script&gt;") || html.contains("&lt;"),
            "{html}"
        );
    }

    #[test]
    fn single_newlines_break_lines_and_marks_highlight() {
        let html = render_help_markdown("one\ntwo ==important== ^up^ ~down~", None);
        assert!(html.contains("one<br>"), "{html}");
        assert!(html.contains("<mark>important</mark>"), "{html}");
        assert!(
            html.contains("<sup>up</sup>") && html.contains("<sub>down</sub>"),
            "{html}"
        );
    }

    #[test]
    fn tables_and_task_lists_render() {
        let html = render_help_markdown(
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n- [x] done\n- [ ] open",
            None,
        );
        assert!(
            html.contains("<table>") && html.contains("<td>1</td>"),
            "{html}"
        );
        assert!(html.contains("type=\"checkbox\""), "{html}");
        assert!(html.contains("checked"), "{html}");
    }

    #[test]
    fn plain_text_drops_tags_and_keeps_escapes() {
        let text = markdown_to_plain_text(
            "# Title\n\nTom &amp; Jerry <script>evil()</script>\n\n:::note\nRemember\n:::",
        );
        assert_eq!(text, "Title Tom &amp; Jerry Note: Remember");
    }
}
