//! Authoring: one Markdown source per document, with YAML front matter (`id`, `title`, and
//! optionally `icon`, `description`, `order`), in a base locale and optional translations.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::Value;

use super::{CorpusDocument, DEFAULT_ORDER, HelpError, is_valid_document_id};
use crate::http::locale::{DEFAULT_LOCALE, canonicalize_locale, locale_chain};

const FRONT_MATTER_REQUIRED: &str =
    "Help documents require YAML frontmatter wrapped in --- markers";

/// One document of one locale, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelpDocument {
    pub id: String,
    pub title: String,
    pub icon: Option<String>,
    pub description: Option<String>,
    pub order: i32,
    /// The trimmed body.
    pub markdown: String,
    /// The body rendered for the document's locale.
    pub html: String,
    /// The body as plain text, for search.
    pub search_text: String,
}

impl HelpDocument {
    /// The document as a corpus publishes it.
    pub fn to_corpus_document(&self) -> CorpusDocument {
        CorpusDocument {
            id: self.id.clone(),
            title: self.title.clone(),
            icon: self.icon.clone(),
            description: self.description.clone(),
            order: self.order,
            markdown: self.markdown.clone(),
            search_text: self.search_text.clone(),
        }
    }
}

/// A validated set of documents: the base locale's, and partial translations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelpDefinition {
    base_locale: String,
    /// Every locale with its documents, sorted by order then title; the base locale included.
    locales: BTreeMap<String, Vec<HelpDocument>>,
}

impl HelpDefinition {
    pub fn base_locale(&self) -> &str {
        &self.base_locale
    }

    /// The base locale's documents.
    pub fn documents(&self) -> &[HelpDocument] {
        self.locales
            .get(&self.base_locale)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Every locale but the base, in tag order, with its documents.
    pub fn translations(&self) -> impl Iterator<Item = (&str, &[HelpDocument])> {
        self.locales
            .iter()
            .filter(|(locale, _)| **locale != self.base_locale)
            .map(|(locale, documents)| (locale.as_str(), documents.as_slice()))
    }

    /// The Markdown of `id` in the first locale of `locale`'s chain that has it (default: the
    /// base locale).
    pub fn markdown(&self, id: &str, locale: Option<&str>) -> Option<&str> {
        let requested = locale.unwrap_or(&self.base_locale);
        locale_chain(Some(requested), &self.base_locale)
            .iter()
            .filter_map(|tag| self.locales.get(tag))
            .find_map(|documents| documents.iter().find(|d| d.id == id))
            .map(|d| d.markdown.as_str())
    }
}

/// Documents of the base locale `en`.
pub fn define_help(sources: &[&str]) -> Result<HelpDefinition, HelpError> {
    define_localized_help(DEFAULT_LOCALE, &[(DEFAULT_LOCALE, sources.to_vec())])
}

/// Documents per locale: the base locale's are complete, the others may translate some of
/// them (keeping their icon and order, inheriting icon, order and description).
pub fn define_localized_help(
    base_locale: &str,
    documents: &[(&str, Vec<&str>)],
) -> Result<HelpDefinition, HelpError> {
    let base = canonicalize_locale(base_locale)
        .ok_or_else(|| HelpError::invalid(format!("Invalid help locale \"{base_locale}\"")))?;
    let mut parsed: BTreeMap<String, Vec<Parsed>> = BTreeMap::new();
    for (locale, sources) in documents {
        let tag = canonicalize_locale(locale)
            .ok_or_else(|| HelpError::invalid(format!("Invalid help locale \"{locale}\"")))?;
        if parsed.contains_key(&tag) {
            return Err(HelpError::invalid(format!(
                "Duplicate help locale \"{tag}\""
            )));
        }
        let documents = sources
            .iter()
            .map(|source| parse_source(source))
            .collect::<Result<Vec<_>, _>>()?;
        parsed.insert(tag, documents);
    }
    let base_documents = parsed.remove(&base).ok_or_else(|| {
        HelpError::invalid(format!("Help documents require the base locale \"{base}\""))
    })?;
    let mut locales = BTreeMap::new();
    let base_rendered = finish(&base, base_documents, None)?;
    for (locale, documents) in parsed {
        let rendered = finish(&locale, documents, Some(&base_rendered))?;
        locales.insert(locale, rendered);
    }
    locales.insert(base.clone(), base_rendered);
    Ok(HelpDefinition {
        base_locale: base,
        locales,
    })
}

/// Front matter and body of one source, before the locale rules.
struct Parsed {
    id: String,
    title: String,
    icon: Option<String>,
    description: Option<String>,
    order: Option<i32>,
    body: String,
}

/// Splits `---\n<yaml>\n---\n<body>` (LF or CRLF).
fn split_front_matter(source: &str) -> Option<(&str, &str)> {
    let rest = source
        .strip_prefix("---\n")
        .or_else(|| source.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end_matches(['\r', '\n']) == "---" {
            let yaml = rest[..offset].trim_end_matches(['\r', '\n']);
            return Some((yaml, &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// An optional front matter string: trimmed and non-empty when present.
fn optional_text(
    value: Option<&Value>,
    id: &str,
    field: &str,
) -> Result<Option<String>, HelpError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(Some(text.trim().to_string())),
        Some(_) => Err(HelpError::invalid(format!(
            "Help document \"{id}\" {field} must be a non-empty string"
        ))),
    }
}

fn parse_source(source: &str) -> Result<Parsed, HelpError> {
    let (yaml, body) =
        split_front_matter(source).ok_or_else(|| HelpError::invalid(FRONT_MATTER_REQUIRED))?;
    let front: Value = if yaml.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_saphyr::from_str(yaml).map_err(|error| {
            HelpError::invalid(format!(
                "Help document front matter is not valid YAML: {error}"
            ))
        })?
    };
    let Value::Object(front) = front else {
        return Err(HelpError::invalid(FRONT_MATTER_REQUIRED));
    };
    let id = match front.get("id") {
        Some(Value::String(id)) if is_valid_document_id(id) => id.clone(),
        Some(Value::String(id)) => {
            return Err(HelpError::invalid(format!(
                "Help document id \"{id}\" must be lowercase kebab-case (a-z, 0-9 and single hyphens)"
            )));
        }
        _ => return Err(HelpError::invalid("Help document requires an id")),
    };
    let title = match front.get("title") {
        Some(Value::String(title)) if !title.trim().is_empty() => title.trim().to_string(),
        _ => {
            return Err(HelpError::invalid(format!(
                "Help document \"{id}\" requires a title"
            )));
        }
    };
    let icon = optional_text(front.get("icon"), &id, "icon")?;
    let description = optional_text(front.get("description"), &id, "description")?;
    let order = match front.get("order") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| {
                    HelpError::invalid(format!("Help document \"{id}\" order must be an integer"))
                })?,
        ),
    };
    let body = body.trim();
    if body.is_empty() {
        return Err(HelpError::invalid(format!(
            "Help document \"{id}\" has no body"
        )));
    }
    Ok(Parsed {
        id,
        title,
        icon,
        description,
        order,
        body: body.to_string(),
    })
}

/// Titles in a reading order independent of case.
fn title_order(a: &str, b: &str) -> Ordering {
    a.to_lowercase()
        .cmp(&b.to_lowercase())
        .then_with(|| a.cmp(b))
}

/// Applies the locale rules and renders; `base` is `None` for the base locale itself.
fn finish(
    locale: &str,
    documents: Vec<Parsed>,
    base: Option<&[HelpDocument]>,
) -> Result<Vec<HelpDocument>, HelpError> {
    let mut finished: Vec<HelpDocument> = Vec::with_capacity(documents.len());
    for document in documents {
        if finished.iter().any(|d| d.id == document.id) {
            return Err(HelpError::invalid(format!(
                "Duplicate help document id \"{}\" in locale \"{locale}\"",
                document.id
            )));
        }
        let (icon, order, description) = match base {
            None => (
                document.icon,
                document.order.unwrap_or(DEFAULT_ORDER),
                document.description,
            ),
            Some(base) => {
                let original = base.iter().find(|d| d.id == document.id).ok_or_else(|| {
                    HelpError::invalid(format!(
                        "Help translation \"{locale}\" contains unknown document id \"{}\"",
                        document.id
                    ))
                })?;
                if document
                    .icon
                    .as_ref()
                    .is_some_and(|i| Some(i) != original.icon.as_ref())
                    || document.order.is_some_and(|o| o != original.order)
                {
                    return Err(HelpError::invalid(format!(
                        "Help translation \"{}\" in locale \"{locale}\" must preserve icon and order",
                        document.id
                    )));
                }
                (
                    original.icon.clone(),
                    original.order,
                    document
                        .description
                        .or_else(|| original.description.clone()),
                )
            }
        };
        finished.push(HelpDocument {
            html: super::render_help_markdown(&document.body, Some(locale)),
            search_text: super::markdown_to_plain_text(&document.body),
            id: document.id,
            title: document.title,
            icon,
            description,
            order,
            markdown: document.body,
        });
    }
    finished.sort_by(|a, b| {
        a.order
            .cmp(&b.order)
            .then_with(|| title_order(&a.title, &b.title))
    });
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(id: &str, title: &str, extra: &str, body: &str) -> String {
        format!("---\nid: {id}\ntitle: {title}\n{extra}---\n{body}\n")
    }

    #[test]
    fn front_matter_is_required_and_checked() {
        for bad in [
            "# No front matter",
            "---\nid: x\ntitle: X\nbody without end",
        ] {
            let error = define_help(&[bad]).expect_err("refused");
            assert_eq!(error.to_string(), FRONT_MATTER_REQUIRED);
        }
        let error = define_help(&["---\nid: Bad_Id\ntitle: X\n---\nBody"]).expect_err("id");
        assert!(
            error
                .to_string()
                .contains("\"Bad_Id\" must be lowercase kebab-case")
        );
        let error = define_help(&["---\nid: x\ntitle: \"  \"\n---\nBody"]).expect_err("title");
        assert_eq!(error.to_string(), "Help document \"x\" requires a title");
        let error = define_help(&["---\nid: x\ntitle: X\n---\n  \n"]).expect_err("body");
        assert_eq!(error.to_string(), "Help document \"x\" has no body");
        let error =
            define_help(&["---\nid: x\ntitle: X\norder: soon\n---\nBody"]).expect_err("order");
        assert_eq!(
            error.to_string(),
            "Help document \"x\" order must be an integer"
        );
        // CRLF sources and unknown keys are fine.
        let definition =
            define_help(&["---\r\nid: x\r\ntitle: X\r\nauthor: Ada\r\n---\r\nBody\r\n"])
                .expect("crlf");
        assert_eq!(definition.documents()[0].markdown, "Body");
    }

    /// Scenario 22: documents sorted by order, and a duplicate id refused.
    #[test]
    fn scenario_22_order_and_duplicates() {
        let definition = define_help(&[
            &source("later", "Later", "order: 20\n", "Two"),
            &source("first", "First", "order: 10\n", "One"),
            &source("default", "Alpha", "", "Three"),
        ])
        .expect("valid");
        let ids: Vec<&str> = definition
            .documents()
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(ids, ["first", "later", "default"]);
        assert_eq!(definition.documents()[2].order, DEFAULT_ORDER);
        let error = define_help(&[&source("same", "A", "", "x"), &source("same", "B", "", "y")])
            .expect_err("duplicate");
        assert_eq!(
            error.to_string(),
            "Duplicate help document id \"same\" in locale \"en\""
        );
    }

    /// Scenario 24: partial translations inherit from the base; the chain finds the nearest.
    #[test]
    fn scenario_24_translations() {
        let definition = define_localized_help(
            "en",
            &[
                (
                    "en",
                    vec![
                        &source(
                            "start",
                            "Start",
                            "order: 1\nicon: ti ti-rocket\ndescription: Begin here\n",
                            "English start",
                        ),
                        &source("details", "Details", "order: 2\n", "English details"),
                    ],
                ),
                (
                    "de",
                    vec![&source("start", "Starten", "", "Deutscher Start")],
                ),
                (
                    "DE-ch",
                    vec![&source("details", "Einzelheiten", "", "Schweizer Details")],
                ),
            ],
        )
        .expect("valid");
        assert_eq!(definition.base_locale(), "en");
        let translated: Vec<&str> = definition.translations().map(|(l, _)| l).collect();
        assert_eq!(translated, ["de", "de-CH"]);
        assert_eq!(definition.documents().len(), 2);
        assert_eq!(
            definition.markdown("start", Some("de-CH")),
            Some("Deutscher Start")
        );
        assert_eq!(
            definition.markdown("details", Some("de-CH")),
            Some("Schweizer Details")
        );
        assert_eq!(
            definition.markdown("details", Some("de")),
            Some("English details")
        );
        let (_, german) = definition.translations().next().expect("de");
        assert_eq!(german[0].icon.as_deref(), Some("ti ti-rocket"));
        assert_eq!(german[0].order, 1);
        assert_eq!(german[0].description.as_deref(), Some("Begin here"));
        assert!(german[0].search_text.contains("Deutscher Start"));
    }

    #[test]
    fn translation_rules() {
        let base = source("start", "Start", "order: 1\n", "Body");
        let unknown = define_localized_help(
            "en",
            &[
                ("en", vec![&base]),
                ("de", vec![&source("other", "X", "", "y")]),
            ],
        )
        .expect_err("unknown");
        assert!(
            unknown
                .to_string()
                .contains("contains unknown document id \"other\"")
        );
        let reordered = define_localized_help(
            "en",
            &[
                ("en", vec![&base]),
                ("de", vec![&source("start", "X", "order: 2\n", "y")]),
            ],
        )
        .expect_err("order");
        assert!(
            reordered
                .to_string()
                .contains("must preserve icon and order")
        );
        let missing_base =
            define_localized_help("en", &[("de", vec![&base])]).expect_err("no base");
        assert_eq!(
            missing_base.to_string(),
            "Help documents require the base locale \"en\""
        );
        let invalid = define_localized_help("en", &[("en", vec![&base]), ("not a tag", vec![])])
            .expect_err("tag");
        assert_eq!(invalid.to_string(), "Invalid help locale \"not a tag\"");
        let duplicate = define_localized_help(
            "en",
            &[("en", vec![&base]), ("de-ch", vec![]), ("DE-CH", vec![])],
        )
        .expect_err("duplicate locale");
        assert!(duplicate.to_string().starts_with("Duplicate help locale"));
    }
}
