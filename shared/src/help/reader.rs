//! Reading Help as one viewer in one locale: only the apps the viewer may see, only the corpus
//! each app advertises now, and for each document only its version in the locale that comes
//! first in the request's chain — decided before anything is matched, ranked or limited.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use super::{
    DEFAULT_SEARCH_LIMIT, HelpError, LIST_PAGE, MAX_QUERY_CHARS, MAX_SEARCH_LIMIT,
    RESOURCE_URI_PREFIX,
};
use crate::auth::AuthUser;
use crate::http::locale::locale_chain;
use crate::registry::{can_see_app, get_app, list_apps};

/// Every read ends within this.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// An app whose Help the viewer may read.
#[derive(Debug, Clone)]
struct Selected {
    app_id: String,
    app_name: String,
    manifest_hash: String,
    page_base: String,
    base_locale: String,
    /// The locales to read, most preferred first.
    chain: Vec<String>,
}

/// A document of the manifest (no body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = HelpManifestDocument)]
pub struct ManifestDocument {
    pub id: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub order: i32,
    /// The locale of the version read (the first of the request's chain the app translates).
    pub locale: String,
    /// `/api/help/v1/<appId>/search`.
    pub search_url: String,
    /// `/api/help/v1/<appId>/documents/<documentId>`.
    pub url: String,
}

/// An app's Help as the viewer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = HelpManifest)]
pub struct Manifest {
    pub manifest_hash: String,
    pub page_base: String,
    pub base_locale: String,
    /// The request locale.
    pub locale: String,
    pub documents: Vec<ManifestDocument>,
}

/// A document's metadata; [`HelpReader::read`] adds the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = HelpListItem)]
pub struct ListItem {
    pub app_id: String,
    pub app_name: String,
    pub manifest_hash: String,
    /// The locale of the version read.
    pub locale: String,
    pub document_id: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    pub order: i32,
}

impl ListItem {
    /// `cloud://help/<appId>/<documentId>`.
    pub fn uri(&self) -> String {
        super::resource_uri(&self.app_id, &self.document_id)
    }
}

/// A document with its Markdown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct HelpRead {
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub item: ListItem,
    pub markdown: String,
}

/// A search hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = HelpSearchItem)]
pub struct SearchItem {
    /// Always `help`.
    #[schema(pattern = "^help$", example = "help")]
    pub kind: String,
    pub app_id: String,
    pub app_name: String,
    pub locale: String,
    pub document_id: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The selection as query parameters ($1–$4: app ids, advertised hashes, localized names and
/// locale chains).
const SELECTION: &str = "
WITH selection AS MATERIALIZED (
  SELECT s.app_id, s.manifest_hash, s.app_name, string_to_array(s.chain, ',') AS chain
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
       AS s(app_id, manifest_hash, app_name, chain)
)";

/// The CTE that applies locale precedence to the selection (`visible`: one row per app and
/// document, the earliest locale of the app's chain); follows [`SELECTION`].
const VISIBLE: &str = ",
visible AS (
  SELECT DISTINCT ON (d.app_id, d.document_id)
         d.app_id, s.app_name, d.manifest_hash, d.locale, d.document_id, d.title, d.description,
         d.icon, d.sort_order
  FROM help.documents d
  JOIN selection s ON d.app_id = s.app_id AND d.manifest_hash = s.manifest_hash
  WHERE d.locale = ANY (s.chain)
  ORDER BY d.app_id, d.document_id, array_position(s.chain, d.locale)
)";

/// A query over the selection, its first four parameters bound.
type SelectionQuery<'q, O> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>;

/// Help as one viewer in one locale sees it.
pub struct HelpReader {
    pool: PgPool,
    locale: String,
    selected: Vec<Selected>,
}

impl HelpReader {
    /// The apps of the live registry (only `app_id` when given) that `viewer` may see and that
    /// advertise Help. No viewer (anonymous, or an app's own credential) sees nothing.
    pub async fn new(
        pool: &PgPool,
        locale: &str,
        viewer: Option<&AuthUser>,
        app_id: Option<&str>,
    ) -> Result<HelpReader, HelpError> {
        let mut selected = Vec::new();
        if viewer.is_some() {
            // One app's entry when the request names it, else the whole live registry.
            let apps = async {
                match app_id {
                    Some(id) => Ok(get_app(pool, id).await?.into_iter().collect()),
                    None => list_apps(pool).await,
                }
            };
            let apps: Vec<_> = tokio::time::timeout(READ_TIMEOUT, apps)
                .await
                .map_err(|_| timeout())??;
            for entry in apps {
                let Some(help) = &entry.help else { continue };
                if !can_see_app(entry.nav.as_ref(), viewer) {
                    continue;
                }
                selected.push(Selected {
                    app_name: entry.localized_name(Some(locale)),
                    manifest_hash: help.manifest_hash.clone(),
                    page_base: help.page_base.clone(),
                    base_locale: help.base_locale.clone(),
                    chain: locale_chain(Some(locale), &help.base_locale),
                    app_id: entry.id.clone(),
                });
            }
        }
        Ok(HelpReader {
            pool: pool.clone(),
            locale: locale.to_string(),
            selected,
        })
    }

    /// The request locale.
    pub fn locale(&self) -> &str {
        &self.locale
    }

    /// `sql` (which reads the selection as $1–$4) with the selected apps bound — only `app_id`
    /// when given; `None` when no app is selected.
    fn query<'q, O>(&self, sql: String, app_id: Option<&str>) -> Option<SelectionQuery<'q, O>>
    where
        O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        let mut columns: [Vec<String>; 4] = Default::default();
        for app in self
            .selected
            .iter()
            .filter(|a| app_id.is_none_or(|id| a.app_id == id))
        {
            columns[0].push(app.app_id.clone());
            columns[1].push(app.manifest_hash.clone());
            columns[2].push(app.app_name.clone());
            columns[3].push(app.chain.join(","));
        }
        if columns[0].is_empty() {
            return None;
        }
        let [ids, hashes, names, chains] = columns;
        Some(
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(ids)
                .bind(hashes)
                .bind(names)
                .bind(chains),
        )
    }

    /// The app's Help without bodies, when the viewer may see it and its advertised corpus is
    /// stored; documents by order, then title.
    pub async fn manifest(&self, app_id: &str) -> Result<Option<Manifest>, HelpError> {
        let Some(app) = self.selected.iter().find(|a| a.app_id == app_id) else {
            return Ok(None);
        };
        let work = async {
            let stored: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM help.corpora WHERE app_id = $1 AND manifest_hash = $2)",
            )
            .bind(&app.app_id)
            .bind(&app.manifest_hash)
            .fetch_one(&self.pool)
            .await?;
            if !stored {
                return Ok(None);
            }
            let query = format!(
                "{SELECTION}{VISIBLE}
                 SELECT app_id, app_name, manifest_hash, locale, document_id, title, description,
                        icon, sort_order AS \"order\"
                 FROM visible ORDER BY sort_order, title, document_id"
            );
            let items: Vec<ListItem> = match self.query(query, Some(app_id)) {
                Some(query) => query.fetch_all(&self.pool).await?,
                None => Vec::new(),
            };
            let encoded = crate::http::text::encode_uri_component;
            let search_url = format!("/api/help/v1/{}/search", encoded(app_id));
            let documents = items
                .into_iter()
                .map(|item| ManifestDocument {
                    url: format!(
                        "/api/help/v1/{}/documents/{}",
                        encoded(app_id),
                        encoded(&item.document_id)
                    ),
                    search_url: search_url.clone(),
                    id: item.document_id,
                    title: item.title,
                    icon: item.icon,
                    description: item.description,
                    order: item.order,
                    locale: item.locale,
                })
                .collect();
            Ok::<_, HelpError>(Some(Manifest {
                manifest_hash: app.manifest_hash.clone(),
                page_base: app.page_base.clone(),
                base_locale: app.base_locale.clone(),
                locale: self.locale.clone(),
                documents,
            }))
        };
        bounded(work).await
    }

    /// Metadata of every visible document after `cursor` (a resource URI; empty for the start),
    /// in URI order: at most [`LIST_PAGE`] + 1 rows, the last one telling that more follow.
    pub async fn list(&self, cursor: &str) -> Result<Vec<ListItem>, HelpError> {
        let query = format!(
            "{SELECTION}{VISIBLE}
             SELECT app_id, app_name, manifest_hash, locale, document_id, title, description, icon,
                    sort_order AS \"order\"
             FROM visible
             WHERE ('{RESOURCE_URI_PREFIX}' || app_id || '/' || document_id) COLLATE \"C\" > $5 COLLATE \"C\"
             ORDER BY ('{RESOURCE_URI_PREFIX}' || app_id || '/' || document_id) COLLATE \"C\"
             LIMIT $6"
        );
        let Some(query) = self.query(query, None) else {
            return Ok(Vec::new());
        };
        let query = query.bind(cursor).bind((LIST_PAGE + 1) as i64);
        bounded(async { Ok(query.fetch_all(&self.pool).await?) }).await
    }

    /// One visible document with its Markdown.
    pub async fn read(
        &self,
        app_id: &str,
        document_id: &str,
    ) -> Result<Option<HelpRead>, HelpError> {
        let query = format!(
            "{SELECTION}{VISIBLE}
             SELECT v.app_id, v.app_name, v.manifest_hash, v.locale, v.document_id, v.title,
                    v.description, v.icon, v.sort_order AS \"order\", d.markdown
             FROM visible v
             JOIN help.documents d USING (app_id, manifest_hash, locale, document_id)
             WHERE v.document_id = $5"
        );
        let Some(query) = self.query(query, Some(app_id)) else {
            return Ok(None);
        };
        let query = query.bind(document_id);
        bounded(async { Ok(query.fetch_optional(&self.pool).await?) }).await
    }

    /// Documents matching `query` (cut to 200 characters; empty matches nothing): an exact id
    /// or title first, then by full-text rank in each row's own language, at most `limit`
    /// (1–25, default 10).
    pub async fn search(
        &self,
        query: &str,
        app_id: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<SearchItem>, HelpError> {
        let query: String = query.trim().chars().take(MAX_QUERY_CHARS).collect();
        if query.is_empty() {
            return Ok(Vec::new());
        }
        let limit = limit
            .unwrap_or(DEFAULT_SEARCH_LIMIT)
            .clamp(1, MAX_SEARCH_LIMIT);
        // Matching first, through the full-text index (one query per text search configuration,
        // each row matched in its own language), then locale precedence on the matches only: a
        // match counts when no version of its document exists in an earlier locale of the
        // chain. Only the survivors are ranked.
        let sql = format!(
            "{SELECTION},
             q AS MATERIALIZED (
               SELECT websearch_to_tsquery('english', $5) AS english,
                      websearch_to_tsquery('german', $5) AS german,
                      websearch_to_tsquery('simple', $5) AS simple,
                      lower($5) AS exact
             ),
             found AS MATERIALIZED (
               SELECT d.app_id, d.manifest_hash, d.locale, d.document_id, false AS exact
               FROM q, help.documents d
               WHERE d.search_document @@ q.english AND d.search_config = 'english'
                 AND d.app_id = ANY ($1)
               UNION ALL
               SELECT d.app_id, d.manifest_hash, d.locale, d.document_id, false
               FROM q, help.documents d
               WHERE d.search_document @@ q.german AND d.search_config = 'german'
                 AND d.app_id = ANY ($1)
               UNION ALL
               SELECT d.app_id, d.manifest_hash, d.locale, d.document_id, false
               FROM q, help.documents d
               WHERE d.search_document @@ q.simple AND d.search_config = 'simple'
                 AND d.app_id = ANY ($1)
               UNION ALL
               SELECT d.app_id, d.manifest_hash, d.locale, d.document_id, true
               FROM q, help.documents d
               WHERE (lower(d.title) = q.exact OR d.document_id = q.exact) AND d.app_id = ANY ($1)
             ),
             hits AS (
               SELECT f.app_id, f.manifest_hash, f.locale, f.document_id, s.app_name,
                      bool_or(f.exact) AS exact
               FROM found f
               JOIN selection s ON s.app_id = f.app_id AND s.manifest_hash = f.manifest_hash
               WHERE f.locale = ANY (s.chain)
                 AND (array_position(s.chain, f.locale) = 1 OR NOT EXISTS (
                   SELECT 1 FROM help.documents e
                   WHERE e.app_id = f.app_id AND e.manifest_hash = f.manifest_hash
                     AND e.document_id = f.document_id
                     AND e.locale = ANY (s.chain[1:array_position(s.chain, f.locale) - 1])))
               GROUP BY f.app_id, f.manifest_hash, f.locale, f.document_id, s.app_name
             )
             SELECT 'help' AS kind, h.app_id, h.app_name, h.locale, h.document_id, d.title,
                    d.description
             FROM hits h
             JOIN help.documents d USING (app_id, manifest_hash, locale, document_id)
             CROSS JOIN q
             ORDER BY h.exact DESC,
                      ts_rank_cd(d.search_document,
                                 CASE d.search_config WHEN 'english' THEN q.english
                                      WHEN 'german' THEN q.german ELSE q.simple END) DESC,
                      h.app_id, d.sort_order, h.document_id
             LIMIT $6"
        );
        let Some(sql) = self.query(sql, app_id) else {
            return Ok(Vec::new());
        };
        let sql = sql.bind(&query).bind(limit);
        bounded(async { Ok(sql.fetch_all(&self.pool).await?) }).await
    }
}

fn timeout() -> HelpError {
    HelpError::Timeout(READ_TIMEOUT)
}

/// A read bounded by [`READ_TIMEOUT`].
async fn bounded<T>(
    work: impl std::future::Future<Output = Result<T, HelpError>>,
) -> Result<T, HelpError> {
    tokio::time::timeout(READ_TIMEOUT, work)
        .await
        .map_err(|_| timeout())?
}
