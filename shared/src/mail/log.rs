//! Reading the mail log: an app's own messages, and those of the apps that granted it access
//! (only with `mail:read`; Core's log is never granted). Searches run under a 5 s budget.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder};
use utoipa::ToSchema;

use super::policy::Caller;
use super::record::{AdminRecord, AppRecord, MESSAGE_COLUMNS, MessageRow};
use super::validate::{self, Cursor, MailFilter, PageParams};
use super::{CORE_APP_ID, MailCode, MailError};
use crate::db::{self, DbError};

/// The whole time one search may take, across its statements.
pub const SEARCH_BUDGET: Duration = Duration::from_secs(5);

const SEARCH_TOO_LONG: &str =
    "This search took too long. Narrow it with a longer term, fewer apps, or a shorter time range.";

/// The apps whose logs `app` may read besides its own (read per call: a revoked grant is gone
/// at once).
pub async fn log_apps_for(pool: &PgPool, app: &str) -> Result<Vec<String>, MailError> {
    if app == CORE_APP_ID {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(
        "SELECT source_app_id FROM outgoing_mail.app_log_access
         WHERE app_id = $1 AND source_app_id <> $2 AND source_app_id <> $1
         ORDER BY source_app_id COLLATE \"C\"",
    )
    .bind(app)
    .bind(CORE_APP_ID)
    .fetch_all(pool)
    .await?)
}

/// `[caller, …granted apps sorted]`; the grants only for an app that declares `mail:read`.
pub async fn readable_apps(pool: &PgPool, caller: &Caller) -> Result<Vec<String>, MailError> {
    caller.require_send_or_read()?;
    let mut apps = vec![caller.app_id.clone()];
    if caller.can_read() {
        apps.extend(log_apps_for(pool, &caller.app_id).await?);
    }
    Ok(apps)
}

/// One page of the log.
#[derive(Debug, Clone)]
pub struct MailPage {
    pub rows: Vec<MessageRow>,
    pub page: i64,
    pub per_page: i64,
    pub total: i64,
    pub has_next: bool,
    pub next_cursor: Option<String>,
}

impl MailPage {
    /// The page as an app reads it (`text` only on the caller's own rows).
    pub fn for_app(&self, caller: &str) -> AppRecordPage {
        AppRecordPage {
            items: self.rows.iter().map(|row| row.for_app(caller)).collect(),
            page: self.page,
            per_page: self.per_page,
            total: self.total,
            has_next: self.has_next,
            next_cursor: self.next_cursor.clone(),
        }
    }

    /// The page as an administrator reads it.
    pub fn for_admin(&self) -> AdminRecordPage {
        AdminRecordPage {
            items: self.rows.iter().map(MessageRow::for_admin).collect(),
            page: self.page,
            per_page: self.per_page,
            total: self.total,
            has_next: self.has_next,
            next_cursor: self.next_cursor.clone(),
        }
    }
}

/// One page of an app's log listing: newest first (then by id).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailRecordPage)]
pub struct AppRecordPage {
    pub items: Vec<AppRecord>,
    /// The page number (1-based; a cursor carries its own).
    #[schema(minimum = 1)]
    pub page: i64,
    #[schema(minimum = 1, maximum = 100)]
    pub per_page: i64,
    /// How many records match, on all pages.
    #[schema(minimum = 0)]
    pub total: i64,
    pub has_next: bool,
    /// The cursor of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One page of the administrators' log listing: newest first (then by id).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAdminRecordPage)]
pub struct AdminRecordPage {
    pub items: Vec<AdminRecord>,
    /// The page number (1-based; a cursor carries its own).
    #[schema(minimum = 1)]
    pub page: i64,
    #[schema(minimum = 1, maximum = 100)]
    pub per_page: i64,
    /// How many records match, on all pages.
    #[schema(minimum = 0)]
    pub total: i64,
    pub has_next: bool,
    /// The cursor of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// What a log query selects; the app API and the admin API fill it differently.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub apps: Option<Vec<String>>,
    pub app: Option<String>,
    pub profile: Option<String>,
    pub filter: MailFilter,
    /// Admin: `recipient` as a free substring instead of an exact address.
    pub recipient_substring: Option<String>,
}

/// The log as an app reads it: its own rows, and others' it names and was granted.
pub async fn list(
    pool: &PgPool,
    caller: &Caller,
    filter: MailFilter,
    page: PageParams,
) -> Result<MailPage, MailError> {
    caller.require_send_or_read()?;
    let apps = filter
        .apps
        .clone()
        .unwrap_or_else(|| vec![caller.app_id.clone()]);
    let others: Vec<&String> = apps.iter().filter(|a| **a != caller.app_id).collect();
    if !others.is_empty() {
        if !caller.can_read() {
            return Err(MailError::fault(
                MailCode::MailNotDeclared,
                "Declare \"mail:read\" in platformPermissions to read other apps’ mail logs.",
            ));
        }
        let granted = log_apps_for(pool, &caller.app_id).await?;
        if let Some(denied) = others.iter().find(|a| !granted.contains(a)) {
            return Err(MailError::fault(
                MailCode::AppNotAllowed,
                format!("This application may not read the mail log of \"{denied}\"."),
            ));
        }
    }
    let query = LogQuery {
        apps: Some(apps),
        filter,
        ..LogQuery::default()
    };
    run(pool, &query, &page).await
}

fn push_where(builder: &mut QueryBuilder<Postgres>, query: &LogQuery) {
    builder.push(" WHERE true");
    if let Some(apps) = &query.apps {
        builder
            .push(" AND m.app_id = ANY(")
            .push_bind(apps.clone())
            .push(")");
    }
    if let Some(app) = &query.app {
        builder.push(" AND m.app_id = ").push_bind(app.clone());
    }
    if let Some(profile) = &query.profile {
        builder
            .push(" AND m.profile_key = ")
            .push_bind(profile.clone());
    }
    let filter = &query.filter;
    if !filter.ids.is_empty() {
        builder
            .push(" AND m.id = ANY(")
            .push_bind(filter.ids.clone())
            .push(")");
    }
    if let Some(batch) = filter.batch_id {
        builder.push(" AND m.batch_id = ").push_bind(batch);
    }
    if !filter.status.is_empty() {
        let status: Vec<String> = filter
            .status
            .iter()
            .map(|s| s.as_str().to_string())
            .collect();
        builder
            .push(" AND m.status = ANY(")
            .push_bind(status)
            .push(")");
    }
    if let Some(since) = filter.since {
        builder.push(" AND m.created_at >= ").push_bind(since);
    }
    if let Some(until) = filter.until {
        builder.push(" AND m.created_at < ").push_bind(until);
    }
    // Terms are lowercased by Postgres, as the indexed texts are.
    if let Some(q) = &filter.q {
        builder
            .push(" AND outgoing_mail.search_text(m.subject, m.to_addresses) LIKE lower(")
            .push_bind(format!("%{}%", escape_like(q)))
            .push(")");
    }
    if let Some(recipient) = &filter.recipient {
        builder
            .push(" AND outgoing_mail.lower_addresses(m.to_addresses) @> ARRAY[lower(")
            .push_bind(recipient.clone())
            .push(")]");
    }
    // A part of one address: the trigram index finds the rows whose subject or addresses hold
    // it, and the addresses themselves decide.
    if let Some(part) = &query.recipient_substring {
        let pattern = format!("%{}%", escape_like(part));
        builder
            .push(" AND outgoing_mail.search_text(m.subject, m.to_addresses) LIKE lower(")
            .push_bind(pattern.clone())
            .push(") AND EXISTS (SELECT 1 FROM unnest(m.to_addresses) AS a WHERE lower(a) LIKE lower(")
            .push_bind(pattern)
            .push("))");
    }
    if let Some(scope) = &filter.ref_scope {
        builder.push(" AND m.ref_scope = ").push_bind(scope.clone());
    }
    if let Some(id) = &filter.ref_id {
        builder.push(" AND m.ref_id = ").push_bind(id.clone());
    }
}

/// `%`, `_` and `\` match themselves.
fn escape_like(term: &str) -> String {
    let mut escaped = String::with_capacity(term.len());
    for c in term.chars() {
        if matches!(c, '\\' | '%' | '_') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Whether a query searches (and so runs under the search budget).
fn searches(query: &LogQuery) -> bool {
    query.filter.q.is_some()
        || query.filter.recipient.is_some()
        || query.recipient_substring.is_some()
}

/// Runs a log query: total, then the page (by offset, or after the cursor's anchor).
pub async fn run(
    pool: &PgPool,
    query: &LogQuery,
    page: &PageParams,
) -> Result<MailPage, MailError> {
    let cursor = page
        .cursor
        .as_deref()
        .map(validate::decode_cursor)
        .transpose()?;
    let page_number = cursor.as_ref().map_or(page.page, |c| c.page);
    let mut tx = pool.begin().await?;
    let budget = searches(query).then(|| Instant::now() + SEARCH_BUDGET);
    let result = async {
        set_budget(&mut tx, budget).await?;
        let mut count =
            QueryBuilder::<Postgres>::new("SELECT count(*) FROM outgoing_mail.messages m");
        push_where(&mut count, query);
        let total: i64 = count.build_query_scalar().fetch_one(&mut *tx).await?;
        set_budget(&mut tx, budget).await?;
        let mut rows = QueryBuilder::<Postgres>::new(format!(
            "SELECT {MESSAGE_COLUMNS} FROM outgoing_mail.messages m"
        ));
        push_where(&mut rows, query);
        if let Some(cursor) = &cursor {
            rows.push(" AND (m.created_at < ")
                .push_bind(cursor.created_at.clone())
                .push("::timestamptz OR (m.created_at = ")
                .push_bind(cursor.created_at.clone())
                .push("::timestamptz AND m.id > ")
                .push_bind(cursor.id)
                .push("))");
        }
        rows.push(" ORDER BY m.created_at DESC, m.id ASC LIMIT ")
            .push_bind(page.per_page + 1);
        if cursor.is_none() {
            rows.push(" OFFSET ")
                .push_bind((page_number - 1).saturating_mul(page.per_page));
        }
        let found: Vec<MessageRow> = rows.build_query_as().fetch_all(&mut *tx).await?;
        Ok::<_, MailError>((total, found))
    }
    .await;
    let (total, mut found) = match result {
        Ok(found) => found,
        Err(error) if budget.is_some() && is_timeout(&error) => return Err(too_long()),
        Err(error) => return Err(error),
    };
    tx.rollback().await?;
    let has_next = found.len() as i64 > page.per_page;
    found.truncate(page.per_page.max(0) as usize);
    let next_cursor = has_next.then(|| found.last()).flatten().map(|last| {
        validate::encode_cursor(&Cursor {
            created_at: last.created_at_text.clone(),
            id: last.id,
            page: page_number + 1,
        })
    });
    Ok(MailPage {
        rows: found,
        page: page_number,
        per_page: page.per_page,
        total,
        has_next,
        next_cursor,
    })
}

/// Gives the next statement what is left of the search budget (`SET LOCAL`: the session's own
/// timeout is back once the transaction ends).
async fn set_budget(conn: &mut PgConnection, budget: Option<Instant>) -> Result<(), MailError> {
    let Some(deadline) = budget else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(too_long());
    }
    db::set_local_statement_timeout(conn, left).await?;
    Ok(())
}

fn too_long() -> MailError {
    MailError::fault(MailCode::BadInput, SEARCH_TOO_LONG)
}

/// A statement cancelled by its timeout, or a lock wait that outlasted the pool's
/// `lock_timeout` (3 s on a deployed HTTP function, inside the 5 s budget).
fn is_timeout(error: &MailError) -> bool {
    match error {
        MailError::Database(error) | MailError::Db(DbError::Sql(error)) => db::is_timeout(error),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_and_backslashes_match_themselves() {
        assert_eq!(escape_like("50%_off"), "50\\%\\_off");
        assert_eq!(escape_like("\\sale"), "\\\\sale");
        assert_eq!(escape_like("plain"), "plain");
    }
}
