//! Publishing corpora (insert once per content hash, afterwards renew) and deleting the ones no
//! app renews any more.

use sqlx::{PgConnection, PgPool};

use super::{Corpus, HelpError, RETENTION, STATEMENT_TIMEOUT, search_config};
use crate::db::{set_local_lock_timeout, set_local_statement_timeout};

/// What a publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The corpus was stored by this call, with this many document rows.
    Inserted { documents: usize },
    /// The corpus was already stored (or another publish stored it meanwhile): renewed.
    Renewed,
}

/// Bounds the statements and lock waits of the caller's transaction.
async fn bounded(conn: &mut PgConnection) -> Result<(), HelpError> {
    set_local_statement_timeout(conn, STATEMENT_TIMEOUT)
        .await
        .map_err(db_error)?;
    set_local_lock_timeout(conn, STATEMENT_TIMEOUT)
        .await
        .map_err(db_error)?;
    Ok(())
}

fn db_error(error: crate::db::DbError) -> HelpError {
    match error {
        crate::db::DbError::Sql(error) => HelpError::Database(error),
        other => HelpError::invalid(other.to_string()),
    }
}

/// Renews the corpus `(app_id, manifest_hash)` if it is stored; returns whether it was.
pub async fn renew(pool: &PgPool, app_id: &str, manifest_hash: &str) -> Result<bool, HelpError> {
    let mut tx = pool.begin().await?;
    bounded(&mut tx).await?;
    let renewed = renew_in(&mut tx, app_id, manifest_hash).await?;
    tx.commit().await?;
    Ok(renewed)
}

async fn renew_in(
    conn: &mut PgConnection,
    app_id: &str,
    manifest_hash: &str,
) -> Result<bool, HelpError> {
    let updated = sqlx::query(
        "UPDATE help.corpora SET last_seen_at = clock_timestamp()
         WHERE app_id = $1 AND manifest_hash = $2",
    )
    .bind(app_id)
    .bind(manifest_hash)
    .execute(conn)
    .await?;
    Ok(updated.rows_affected() > 0)
}

/// Stores a corpus (checked by the caller) in one transaction: renews it when it is already
/// stored; otherwise inserts the corpus row and — only in the transaction that really inserted
/// it — every document. Any failure leaves nothing behind.
pub async fn register(pool: &PgPool, corpus: &Corpus) -> Result<Published, HelpError> {
    let mut tx = pool.begin().await?;
    bounded(&mut tx).await?;
    if renew_in(&mut tx, &corpus.app_id, &corpus.manifest_hash).await? {
        tx.commit().await?;
        return Ok(Published::Renewed);
    }
    // Concurrent first publishers wait here on the inserter's row and then only renew.
    let inserted: bool = sqlx::query_scalar(
        "INSERT INTO help.corpora (app_id, manifest_hash, base_locale, last_seen_at)
         VALUES ($1, $2, $3, clock_timestamp())
         ON CONFLICT (app_id, manifest_hash) DO UPDATE SET last_seen_at = clock_timestamp()
         RETURNING xmax = 0",
    )
    .bind(&corpus.app_id)
    .bind(&corpus.manifest_hash)
    .bind(&corpus.base_locale)
    .fetch_one(&mut *tx)
    .await?;
    if !inserted {
        tx.commit().await?;
        return Ok(Published::Renewed);
    }
    let rows = corpus.row_count();
    let mut columns = DocumentColumns::with_capacity(rows);
    for (locale, documents) in corpus.locales() {
        for document in documents {
            columns.push(locale, document);
        }
    }
    sqlx::query(
        "INSERT INTO help.documents (app_id, manifest_hash, locale, document_id, title, description,
                icon, sort_order, markdown, search_text, search_config, search_document)
         SELECT $1, $2, d.locale, d.id, d.title, d.description, d.icon, d.sort_order, d.markdown,
                d.title || E'\\n' || coalesce(d.description, '') || E'\\n' || d.body_text,
                d.config,
                setweight(to_tsvector(d.config::regconfig, d.id || ' ' || d.title), 'A')
                || setweight(to_tsvector(d.config::regconfig, coalesce(d.description, '')), 'B')
                || setweight(to_tsvector(d.config::regconfig, d.body_text), 'D')
         FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::int4[],
                     $9::text[], $10::text[], $11::text[])
              AS d(locale, id, title, description, icon, sort_order, markdown, body_text, config)",
    )
    .bind(&corpus.app_id)
    .bind(&corpus.manifest_hash)
    .bind(&columns.locales)
    .bind(&columns.ids)
    .bind(&columns.titles)
    .bind(&columns.descriptions)
    .bind(&columns.icons)
    .bind(&columns.orders)
    .bind(&columns.markdown)
    .bind(&columns.texts)
    .bind(&columns.configs)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Published::Inserted { documents: rows })
}

/// The documents of a corpus as one array per column.
struct DocumentColumns<'a> {
    locales: Vec<&'a str>,
    ids: Vec<&'a str>,
    titles: Vec<&'a str>,
    descriptions: Vec<Option<&'a str>>,
    icons: Vec<Option<&'a str>>,
    orders: Vec<i32>,
    markdown: Vec<&'a str>,
    texts: Vec<&'a str>,
    configs: Vec<&'static str>,
}

impl<'a> DocumentColumns<'a> {
    fn with_capacity(n: usize) -> Self {
        DocumentColumns {
            locales: Vec::with_capacity(n),
            ids: Vec::with_capacity(n),
            titles: Vec::with_capacity(n),
            descriptions: Vec::with_capacity(n),
            icons: Vec::with_capacity(n),
            orders: Vec::with_capacity(n),
            markdown: Vec::with_capacity(n),
            texts: Vec::with_capacity(n),
            configs: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, locale: &'a str, document: &'a super::CorpusDocument) {
        self.locales.push(locale);
        self.ids.push(&document.id);
        self.titles.push(&document.title);
        self.descriptions.push(document.description.as_deref());
        self.icons.push(document.icon.as_deref());
        self.orders.push(document.order);
        self.markdown.push(&document.markdown);
        self.texts.push(&document.search_text);
        self.configs.push(search_config(locale));
    }
}

/// Deletes the one corpus not renewed for longest, if it is older than [`RETENTION`] (its
/// documents go with it). A corpus being renewed right now is skipped. Returns the rows deleted.
pub async fn cleanup(pool: &PgPool) -> Result<u64, HelpError> {
    let mut tx = pool.begin().await?;
    bounded(&mut tx).await?;
    let deleted = sqlx::query(
        "WITH doomed AS (
           SELECT app_id, manifest_hash FROM help.corpora
           WHERE last_seen_at < now() - make_interval(secs => $1)
           ORDER BY last_seen_at LIMIT 1
           FOR UPDATE SKIP LOCKED)
         DELETE FROM help.corpora c USING doomed d
         WHERE c.app_id = d.app_id AND c.manifest_hash = d.manifest_hash",
    )
    .bind(RETENTION.as_secs_f64())
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(deleted)
}
