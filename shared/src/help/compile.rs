//! Compiling a definition into the corpus an app publishes and the summary its registry entry
//! carries; and checking a published corpus the way Core receives it.

use std::collections::{BTreeMap, HashMap};

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::{CorpusDocument, HelpDefinition, HelpError, MAX_DOCUMENT_BYTES, is_valid_document_id};
use crate::http::locale::canonicalize_locale;
use crate::registry::entry::HelpSummary;
use crate::registry::is_valid_app_id;

/// Bumped when what the hash covers changes.
const HASH_REVISION: u32 = 1;
/// The plain text of a document may exceed its Markdown a little (labels of callouts and
/// links); anything far beyond is not derived from it.
const MAX_SEARCH_TEXT_BYTES: usize = 2 * MAX_DOCUMENT_BYTES;
/// Longest title, description and icon accepted, in characters.
const MAX_FIELD_CHARS: usize = 1000;

/// The translations of a corpus: locale → documents, in case-insensitive tag order (a JSON
/// object on the wire).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translations(pub Vec<(String, Vec<CorpusDocument>)>);

impl Translations {
    fn sort(&mut self) {
        self.0
            .sort_by(|(a, _), (b, _)| a.to_lowercase().cmp(&b.to_lowercase()).then(a.cmp(b)));
    }
}

impl Serialize for Translations {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (locale, documents) in &self.0 {
            map.serialize_entry(locale, documents)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Translations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Translations;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of locale → documents")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Translations, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Vec<CorpusDocument>>()? {
                    entries.push(entry);
                }
                Ok(Translations(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// What an app publishes: every document of every locale, under its content hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = HelpCorpus)]
pub struct Corpus {
    /// The app of the path: a lowercase letter, then lowercase letters, digits and `-`.
    #[schema(min_length = 1, max_length = 80, pattern = "^[a-z][a-z0-9-]*$")]
    pub app_id: String,
    /// Hex SHA-256 of the JSON of `{revision: 1, appId, baseLocale, documents,
    /// documentsByLocale}` (translations in case-insensitive locale order): the content's own
    /// hash.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub manifest_hash: String,
    /// A canonical BCP 47 tag (`en`, `de-CH`).
    pub base_locale: String,
    /// The documents of the base locale: at least one.
    #[schema(min_items = 1)]
    pub documents: Vec<CorpusDocument>,
    /// Translations: a canonical BCP 47 tag (other than the base locale, each once) → documents
    /// of the base locale in that language.
    #[serde(default)]
    #[schema(value_type = Option<HashMap<String, Vec<CorpusDocument>>>)]
    pub documents_by_locale: Translations,
}

impl Corpus {
    /// Every locale with its documents, the base locale first.
    pub fn locales(&self) -> impl Iterator<Item = (&str, &[CorpusDocument])> {
        std::iter::once((self.base_locale.as_str(), self.documents.as_slice())).chain(
            self.documents_by_locale
                .0
                .iter()
                .map(|(locale, documents)| (locale.as_str(), documents.as_slice())),
        )
    }

    /// How many document rows the corpus stores.
    pub fn row_count(&self) -> usize {
        self.locales().map(|(_, documents)| documents.len()).sum()
    }
}

/// The result of [`compile_help`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledHelp {
    /// The registry entry's `help`.
    pub summary: HelpSummary,
    pub corpus: Corpus,
}

/// Hex SHA-256 of the JSON of `{revision, appId, baseLocale, documents, documentsByLocale}`.
pub fn manifest_hash(
    app_id: &str,
    base_locale: &str,
    documents: &[CorpusDocument],
    translations: &Translations,
) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Hashed<'a> {
        revision: u32,
        app_id: &'a str,
        base_locale: &'a str,
        documents: &'a [CorpusDocument],
        documents_by_locale: &'a Translations,
    }
    let json = serde_json::to_vec(&Hashed {
        revision: HASH_REVISION,
        app_id,
        base_locale,
        documents,
        documents_by_locale: translations,
    })
    .unwrap_or_default();
    hex::encode(Sha256::digest(json))
}

/// The corpus and registry summary of an app's definition. `base_path` is where the app serves
/// its pages (`/app/inventory`); Help pages live under `<base_path>/help`.
pub fn compile_help(
    app_id: &str,
    base_path: Option<&str>,
    definition: &HelpDefinition,
) -> Result<CompiledHelp, HelpError> {
    let check = |documents: &[super::HelpDocument]| {
        documents.iter().try_for_each(|d| {
            if d.markdown.len() > MAX_DOCUMENT_BYTES {
                Err(HelpError::invalid(format!(
                    "Help document \"{}\" exceeds the {MAX_DOCUMENT_BYTES}-byte limit",
                    d.id
                )))
            } else {
                Ok(())
            }
        })
    };
    check(definition.documents())?;
    let documents: Vec<CorpusDocument> = definition
        .documents()
        .iter()
        .map(|d| d.to_corpus_document())
        .collect();
    let mut translations = Translations::default();
    for (locale, translated) in definition.translations() {
        check(translated)?;
        translations.0.push((
            locale.to_string(),
            translated.iter().map(|d| d.to_corpus_document()).collect(),
        ));
    }
    translations.sort();
    let base_locale = definition.base_locale().to_string();
    let hash = manifest_hash(app_id, &base_locale, &documents, &translations);
    let page_base = format!(
        "{}/help",
        base_path
            .map(|p| p.strip_suffix('/').unwrap_or(p))
            .unwrap_or_default()
    );
    Ok(CompiledHelp {
        summary: HelpSummary {
            manifest_hash: hash.clone(),
            page_base,
            base_locale: base_locale.clone(),
        },
        corpus: Corpus {
            app_id: app_id.to_string(),
            manifest_hash: hash,
            base_locale,
            documents,
            documents_by_locale: translations,
        },
    })
}

/// Reads a corpus from JSON, naming the field (and the document) that does not fit.
pub fn parse_corpus(value: serde_json::Value) -> Result<Corpus, HelpError> {
    let serde_json::Value::Object(mut fields) = value else {
        return Err(HelpError::invalid("The corpus must be a JSON object."));
    };
    let text = |fields: &mut serde_json::Map<String, serde_json::Value>, name: &str| match fields
        .remove(name)
    {
        Some(serde_json::Value::String(text)) => Ok(text),
        _ => Err(HelpError::invalid(format!("{name}: a string is required"))),
    };
    let app_id = text(&mut fields, "appId")?;
    let manifest_hash = text(&mut fields, "manifestHash")?;
    let base_locale = text(&mut fields, "baseLocale")?;
    let documents = |place: &str, value: Option<serde_json::Value>| {
        let Some(serde_json::Value::Array(items)) = value else {
            return Err(HelpError::invalid(format!("{place}: an array is required")));
        };
        items
            .into_iter()
            .enumerate()
            .map(|(index, item)| {
                let id = item
                    .get("id")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                serde_json::from_value::<CorpusDocument>(item).map_err(|error| {
                    HelpError::invalid(format!("{place}[{index}] (\"{id}\"): {error}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let base = documents("documents", fields.remove("documents"))?;
    let mut translations = Translations::default();
    match fields.remove("documentsByLocale") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(locales)) => {
            for (locale, value) in locales {
                let place = format!("documentsByLocale.{locale}");
                let translated = documents(&place, Some(value))?;
                translations.0.push((locale, translated));
            }
        }
        Some(_) => {
            return Err(HelpError::invalid(
                "documentsByLocale: an object of locale → documents is required",
            ));
        }
    }
    if let Some(unknown) = fields.keys().next() {
        return Err(HelpError::invalid(format!("{unknown}: unknown field")));
    }
    Ok(Corpus {
        app_id,
        manifest_hash,
        base_locale,
        documents: base,
        documents_by_locale: translations,
    })
}

/// A bounded, trimmed, non-empty optional field.
fn check_text(value: Option<&str>, place: &str, field: &str) -> Result<(), HelpError> {
    match value {
        Some(text) if text.trim().is_empty() || text.trim() != text => Err(HelpError::invalid(
            format!("{place}: {field} must be non-empty trimmed text"),
        )),
        Some(text) if text.chars().count() > MAX_FIELD_CHARS => Err(HelpError::invalid(format!(
            "{place}: {field} is longer than {MAX_FIELD_CHARS} characters"
        ))),
        _ => Ok(()),
    }
}

/// Checks a corpus as Core receives it for `app_id`: the rules of authoring and compiling,
/// and a hash that is the content's own. Messages name the document and the field.
pub fn validate_corpus(app_id: &str, corpus: &mut Corpus) -> Result<(), HelpError> {
    if corpus.app_id != app_id || !is_valid_app_id(app_id) {
        return Err(HelpError::invalid(
            "appId: the corpus must belong to the app of the path",
        ));
    }
    let base = canonicalize_locale(&corpus.base_locale)
        .filter(|tag| *tag == corpus.base_locale)
        .ok_or_else(|| HelpError::invalid("baseLocale: not a canonical BCP 47 tag"))?;
    if corpus.documents.is_empty() {
        return Err(HelpError::invalid(
            "documents: a corpus needs at least one document",
        ));
    }
    let mut base_documents: HashMap<&str, &CorpusDocument> = HashMap::new();
    let mut seen_locales: BTreeMap<String, ()> = BTreeMap::new();
    for (locale, documents) in corpus.locales() {
        let is_base = locale == base;
        if !is_base {
            if canonicalize_locale(locale).as_deref() != Some(locale) {
                return Err(HelpError::invalid(format!(
                    "documentsByLocale.{locale}: not a canonical BCP 47 tag"
                )));
            }
            if seen_locales.insert(locale.to_lowercase(), ()).is_some()
                || locale.eq_ignore_ascii_case(&base)
            {
                return Err(HelpError::invalid(format!(
                    "documentsByLocale.{locale}: duplicate locale"
                )));
            }
        }
        let mut ids: Vec<&str> = Vec::with_capacity(documents.len());
        for (index, document) in documents.iter().enumerate() {
            let place = if is_base {
                format!("documents[{index}] (\"{}\")", document.id)
            } else {
                format!("documentsByLocale.{locale}[{index}] (\"{}\")", document.id)
            };
            if !is_valid_document_id(&document.id) {
                return Err(HelpError::invalid(format!(
                    "{place}: id must be lowercase kebab-case"
                )));
            }
            if ids.contains(&document.id.as_str()) {
                return Err(HelpError::invalid(format!(
                    "{place}: duplicate id in locale \"{locale}\""
                )));
            }
            ids.push(&document.id);
            check_text(Some(&document.title), &place, "title")?;
            check_text(document.icon.as_deref(), &place, "icon")?;
            check_text(document.description.as_deref(), &place, "description")?;
            if document.markdown.trim().is_empty() {
                return Err(HelpError::invalid(format!("{place}: markdown is empty")));
            }
            if document.markdown.len() > MAX_DOCUMENT_BYTES {
                return Err(HelpError::invalid(format!(
                    "{place}: markdown exceeds the {MAX_DOCUMENT_BYTES}-byte limit"
                )));
            }
            if document.search_text.len() > MAX_SEARCH_TEXT_BYTES {
                return Err(HelpError::invalid(format!(
                    "{place}: searchText exceeds {MAX_SEARCH_TEXT_BYTES} bytes"
                )));
            }
            if is_base {
                base_documents.insert(&document.id, document);
            } else {
                let Some(original) = base_documents.get(document.id.as_str()) else {
                    return Err(HelpError::invalid(format!(
                        "{place}: unknown document id (not in the base locale)"
                    )));
                };
                if document.icon != original.icon || document.order != original.order {
                    return Err(HelpError::invalid(format!(
                        "{place}: icon and order must equal the base locale's"
                    )));
                }
            }
        }
    }
    let mut translations = corpus.documents_by_locale.clone();
    translations.sort();
    let expected = manifest_hash(app_id, &base, &corpus.documents, &translations);
    if expected != corpus.manifest_hash {
        return Err(HelpError::invalid(
            "manifestHash: does not match the corpus content",
        ));
    }
    corpus.documents_by_locale = translations;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::help::{define_help, define_localized_help};

    fn source(id: &str, title: &str, body: &str) -> String {
        format!("---\nid: {id}\ntitle: {title}\n---\n{body}\n")
    }

    /// Scenario 23: the base path's trailing slash does not matter; search text has the body.
    #[test]
    fn scenario_23_summary_and_search_text() {
        let definition =
            define_help(&[&source("start", "Start", "Open the **inventory**.")]).expect("valid");
        let a = compile_help("inventory", Some("/app/inventory/"), &definition).expect("a");
        let b = compile_help("inventory", Some("/app/inventory"), &definition).expect("b");
        assert_eq!(a.summary, b.summary);
        assert_eq!(a.summary.page_base, "/app/inventory/help");
        assert_eq!(a.summary.base_locale, "en");
        assert_eq!(a.summary.manifest_hash.len(), 64);
        assert!(
            a.corpus.documents[0]
                .search_text
                .contains("Open the inventory.")
        );
        let summary = serde_json::to_value(&a.summary).expect("json");
        let keys: Vec<&String> = summary.as_object().expect("object").keys().collect();
        assert_eq!(keys.len(), 3);
    }

    /// Scenario 25: one byte over 128 KiB is refused; large documents under it are fine.
    #[test]
    fn scenario_25_document_limit() {
        let over = "a".repeat(MAX_DOCUMENT_BYTES + 1);
        let definition = define_help(&[&source("big", "Big", &over)]).expect("defined");
        let error = compile_help("inventory", None, &definition).expect_err("too big");
        assert_eq!(
            error.to_string(),
            "Help document \"big\" exceeds the 131072-byte limit"
        );
        let body = "word ".repeat(120 * 1024 / 5);
        let sources: Vec<String> = (0..5)
            .map(|i| source(&format!("doc-{i}"), "Doc", &body))
            .collect();
        let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
        let compiled = compile_help("inventory", None, &define_help(&refs).expect("defined"))
            .expect("five large documents");
        assert_eq!(compiled.corpus.documents.len(), 5);
    }

    /// Scenario 26: a large two-locale corpus keeps a three-key summary; search text in both.
    #[test]
    fn scenario_26_large_corpus_small_summary() {
        let body = "Inventory records and stock levels. ".repeat(400);
        let english: Vec<String> = (0..40)
            .map(|i| source(&format!("doc-{i}"), "Doc", &body))
            .collect();
        let german: Vec<String> = (0..40)
            .map(|i| {
                source(
                    &format!("doc-{i}"),
                    "Dokument",
                    "Lagerbestand und Datensätze.",
                )
            })
            .collect();
        let definition = define_localized_help(
            "en",
            &[
                ("en", english.iter().map(String::as_str).collect()),
                ("de", german.iter().map(String::as_str).collect()),
            ],
        )
        .expect("defined");
        let compiled =
            compile_help("inventory", Some("/app/inventory"), &definition).expect("compiled");
        assert!(serde_json::to_vec(&compiled.corpus).expect("json").len() > 512 * 1024);
        assert!(serde_json::to_vec(&compiled.summary).expect("json").len() < 256);
        let (_, translated) = &compiled.corpus.documents_by_locale.0[0];
        assert!(translated[0].search_text.contains("Lagerbestand"));
        assert!(
            compiled.corpus.documents[0]
                .search_text
                .contains("stock levels")
        );
    }

    #[test]
    fn a_received_corpus_is_checked_against_its_own_hash_and_rules() {
        let definition = define_localized_help(
            "en",
            &[
                ("en", vec![&source("start", "Start", "Hello")]),
                ("de", vec![&source("start", "Starten", "Hallo")]),
            ],
        )
        .expect("defined");
        let compiled = compile_help("inventory", None, &definition).expect("compiled");
        let mut corpus = compiled.corpus.clone();
        validate_corpus("inventory", &mut corpus).expect("valid as compiled");
        // Round trip through JSON keeps the hash.
        let mut received: Corpus =
            serde_json::from_slice(&serde_json::to_vec(&compiled.corpus).expect("json"))
                .expect("parse");
        validate_corpus("inventory", &mut received).expect("valid after JSON");

        let mut parsed =
            parse_corpus(serde_json::to_value(&compiled.corpus).expect("json")).expect("parsed");
        validate_corpus("inventory", &mut parsed).expect("valid after parsing");
        let mut broken = serde_json::to_value(&compiled.corpus).expect("json");
        broken["documents"][0]
            .as_object_mut()
            .expect("document")
            .remove("title");
        let error = parse_corpus(broken).expect_err("no title");
        assert!(
            error
                .to_string()
                .starts_with("documents[0] (\"start\"): missing field `title`"),
            "{error}"
        );

        let mut other_app = compiled.corpus.clone();
        assert!(validate_corpus("reports", &mut other_app).is_err());
        let mut changed = compiled.corpus.clone();
        changed.documents[0].markdown = "Changed".into();
        let error = validate_corpus("inventory", &mut changed).expect_err("hash");
        assert!(error.to_string().starts_with("manifestHash"));
        let mut untitled = compiled.corpus.clone();
        untitled.documents[0].title = " ".into();
        let error = validate_corpus("inventory", &mut untitled).expect_err("title");
        assert_eq!(
            error.to_string(),
            "documents[0] (\"start\"): title must be non-empty trimmed text"
        );
        let mut stray = compiled.corpus.clone();
        stray.documents_by_locale.0[0].1[0].id = "ghost".into();
        let error = validate_corpus("inventory", &mut stray).expect_err("unknown");
        assert!(
            error
                .to_string()
                .starts_with("documentsByLocale.de[0] (\"ghost\")")
        );
    }
}
