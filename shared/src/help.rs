//! Help: the documents apps publish (Markdown with front matter, per locale), stored per content
//! hash, and read and searched by the viewers who may see the app.
//!
//! - Apps author documents ([`define`]), compile them into a corpus and the summary of their
//!   registry entry ([`compile`]), and publish the corpus to Core before every registry write
//!   (`PUT /api/help/v1/{appId}/corpus`; [`store::register`]).
//! - Core reads through a [`reader::HelpReader`] bound to one request locale and one viewer.
//! - Maintenance deletes corpora no app renewed for [`RETENTION`] ([`store::cleanup`]).

pub mod compile;
pub mod define;
pub mod markdown;
pub mod reader;
pub mod sanitize;
pub mod store;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use compile::{
    CompiledHelp, Corpus, compile_help, manifest_hash, parse_corpus, validate_corpus,
};
pub use define::{HelpDefinition, HelpDocument, define_help, define_localized_help};
pub use markdown::{markdown_to_plain_text, render_help_markdown};
pub use reader::HelpReader;

/// The largest Markdown body of one document, in UTF-8 bytes (128 KiB).
pub const MAX_DOCUMENT_BYTES: usize = 131_072;
/// The order of a base document that names none.
pub const DEFAULT_ORDER: i32 = 100;
/// How long a corpus no app renews is kept: twice the registry entry's lifetime, so a corpus
/// outlives the entry that advertises it.
pub const RETENTION: Duration = Duration::from_secs(360);
/// Every statement of a publish or a cleanup ends within this.
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// A search query is cut to this many characters.
pub const MAX_QUERY_CHARS: usize = 200;
/// Search results: default and bounds.
pub const DEFAULT_SEARCH_LIMIT: i64 = 10;
pub const MAX_SEARCH_LIMIT: i64 = 25;
/// A page of [`reader::HelpReader::list`].
pub const LIST_PAGE: usize = 100;
/// The scheme of Help resource URIs (`cloud://help/<appId>/<documentId>`).
pub const RESOURCE_URI_PREFIX: &str = "cloud://help/";

/// One document of a corpus as it is published and stored (no HTML: readers render it).
///
/// A translation (in `documentsByLocale`) must name a document of the base locale and keep its
/// `icon` and `order`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = HelpCorpusDocument)]
pub struct CorpusDocument {
    /// Lowercase kebab-case, unique within its locale.
    #[schema(pattern = "^[a-z0-9]+(-[a-z0-9]+)*$")]
    pub id: String,
    /// Trimmed, non-empty, at most 1000 characters.
    #[schema(min_length = 1, max_length = 1000, pattern = "^\\S([\\s\\S]*\\S)?$")]
    pub title: String,
    /// Trimmed, non-empty, at most 1000 characters (for example `ti ti-rocket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 1000, pattern = "^\\S([\\s\\S]*\\S)?$")]
    pub icon: Option<String>,
    /// Trimmed, non-empty, at most 1000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 1000, pattern = "^\\S([\\s\\S]*\\S)?$")]
    pub description: Option<String>,
    /// Position among the documents (ascending, then by title).
    pub order: i32,
    /// The Markdown body: not blank, at most 131 072 UTF-8 bytes.
    #[schema(max_length = 131072, pattern = "\\S")]
    pub markdown: String,
    /// The document's text without markup, for search: at most 262 144 UTF-8 bytes.
    #[schema(max_length = 262144)]
    pub search_text: String,
}

/// The Help area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum HelpError {
    /// A definition or corpus that breaks a rule; the message names the document and field.
    #[error("{0}")]
    Invalid(String),
    #[error("help database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("help registry error: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    #[error("help settings error: {0}")]
    Settings(#[from] crate::settings::SettingsError),
    #[error("help read did not finish within {} s", .0.as_secs())]
    Timeout(Duration),
}

impl HelpError {
    pub(crate) fn invalid(message: impl Into<String>) -> HelpError {
        HelpError::Invalid(message.into())
    }
}

/// `^[a-z0-9]+(-[a-z0-9]+)*$`: a document id.
pub fn is_valid_document_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('-')
        && !id.ends_with('-')
        && !id.contains("--")
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The text search configuration of a locale: `german` for `de*`, `english` for `en*`, else
/// `simple`.
pub fn search_config(locale: &str) -> &'static str {
    match locale
        .split('-')
        .next()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("de") => "german",
        Some("en") => "english",
        _ => "simple",
    }
}

/// `cloud://help/<appId>/<documentId>`, each part percent-encoded.
pub fn resource_uri(app_id: &str, document_id: &str) -> String {
    use crate::http::text::encode_uri_component;
    format!(
        "{RESOURCE_URI_PREFIX}{}/{}",
        encode_uri_component(app_id),
        encode_uri_component(document_id)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_ids_are_lowercase_kebab() {
        for good in ["start", "getting-started", "a1-b2"] {
            assert!(is_valid_document_id(good), "{good}");
        }
        for bad in ["", "Start", "-a", "a-", "a--b", "a_b", "a b", "ü"] {
            assert!(!is_valid_document_id(bad), "{bad}");
        }
    }

    #[test]
    fn locales_choose_their_search_configuration() {
        assert_eq!(search_config("de-CH"), "german");
        assert_eq!(search_config("en"), "english");
        assert_eq!(search_config("fr"), "simple");
    }

    /// Scenario 30: resource URIs encode their parts.
    #[test]
    fn scenario_30_resource_uris_encode_their_parts() {
        assert_eq!(
            resource_uri("inventory", "getting started"),
            "cloud://help/inventory/getting%20started"
        );
        assert_eq!(
            resource_uri("inventory", "start"),
            "cloud://help/inventory/start"
        );
    }
}
