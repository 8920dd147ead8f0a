//! The registry table: heartbeat upserts and validated reads of the live entries.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use super::RegistryError;
use super::entry::{AppRegistryEntry, is_valid_app_id};

/// How long an entry lives without a heartbeat: three 60 s heartbeats.
pub const APP_REGISTRY_TTL: Duration = Duration::from_secs(180);
/// Largest entry accepted, as serialised JSON.
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// A stored entry that failed validation, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryIssue {
    pub app_id: String,
    pub reason: String,
}

/// A live entry with its registry timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveApp {
    pub entry: AppRegistryEntry,
    pub updated_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Every live entry: the valid ones in app-id order and the rejected ones.
#[derive(Debug, Clone, Default)]
pub struct RegistrySnapshot {
    pub apps: Vec<LiveApp>,
    pub issues: Vec<RegistryIssue>,
}

/// Invalid entries are logged once per (app, reason) while they stay invalid.
fn logged_issues() -> &'static Mutex<HashMap<String, String>> {
    static LOGGED: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    LOGGED.get_or_init(|| Mutex::new(HashMap::new()))
}

fn report_issue(issue: &RegistryIssue) {
    let Ok(mut logged) = logged_issues().lock() else {
        return;
    };
    if logged.get(&issue.app_id) == Some(&issue.reason) {
        return;
    }
    logged.insert(issue.app_id.clone(), issue.reason.clone());
    tracing::error!(
        source = "app-registry",
        app_id = %issue.app_id,
        reason = %issue.reason,
        "Rejected invalid app registry entry"
    );
}

fn clear_issue(app_id: &str) {
    if let Ok(mut logged) = logged_issues().lock() {
        logged.remove(app_id);
    }
}

/// Validates one stored row: the entry's `id` must equal its key, then [`AppRegistryEntry::parse`].
fn check_row(app_id: &str, value: &Value) -> Result<AppRegistryEntry, String> {
    if value.get("id").and_then(Value::as_str) != Some(app_id) {
        return Err("registry key must match entry id".into());
    }
    AppRegistryEntry::parse(value)
}

/// One stored entry's text and what validating it gave.
struct Checked {
    text: String,
    result: Result<AppRegistryEntry, String>,
}

/// The last validation of each app's entry, by app id. Validation depends on the entry alone,
/// so an entry read again with the same text (Postgres prints a `jsonb` value one way) is not
/// parsed and validated again.
fn checked_entries() -> &'static Mutex<HashMap<String, Checked>> {
    static CHECKED: OnceLock<Mutex<HashMap<String, Checked>>> = OnceLock::new();
    CHECKED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// [`check_row`] of a stored entry's text, once per text.
fn check_text(app_id: &str, text: &str) -> Result<AppRegistryEntry, String> {
    if let Ok(checked) = checked_entries().lock()
        && let Some(hit) = checked.get(app_id).filter(|hit| hit.text == text)
    {
        return hit.result.clone();
    }
    let result = serde_json::from_str::<Value>(text)
        .map_err(|e| format!("entry is malformed: {e}"))
        .and_then(|value| check_row(app_id, &value));
    if let Ok(mut checked) = checked_entries().lock() {
        checked.insert(
            app_id.to_string(),
            Checked {
                text: text.to_string(),
                result: result.clone(),
            },
        );
    }
    result
}

type Row = (String, String, DateTime<Utc>, DateTime<Utc>);

/// Reads every unexpired entry, validating each (invalid ones are skipped and logged once).
pub async fn read_snapshot(conn: &mut PgConnection) -> Result<RegistrySnapshot, RegistryError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT app_id, entry::text, updated_at, expires_at FROM registry.apps
         WHERE expires_at > now() ORDER BY app_id COLLATE \"C\"",
    )
    .fetch_all(conn)
    .await?;
    let mut snapshot = RegistrySnapshot::default();
    let present: HashSet<String> = rows.iter().map(|r| r.0.clone()).collect();
    for (app_id, text, updated_at, expires_at) in rows {
        match check_text(&app_id, &text) {
            Ok(entry) => {
                clear_issue(&app_id);
                snapshot.apps.push(LiveApp {
                    entry,
                    updated_at,
                    expires_at,
                });
            }
            Err(reason) => {
                let issue = RegistryIssue { app_id, reason };
                report_issue(&issue);
                snapshot.issues.push(issue);
            }
        }
    }
    if let Ok(mut logged) = logged_issues().lock() {
        logged.retain(|app_id, _| present.contains(app_id));
    }
    if let Ok(mut checked) = checked_entries().lock() {
        checked.retain(|app_id, _| present.contains(app_id));
    }
    Ok(snapshot)
}

/// The live apps in registry order. An empty registry is an empty list; a registry whose every
/// entry is invalid is an error (readers answer 503 rather than "no apps").
pub async fn list_apps(pool: &PgPool) -> Result<Vec<AppRegistryEntry>, RegistryError> {
    let snapshot = read_snapshot(&mut *pool.acquire().await?).await?;
    if snapshot.apps.is_empty() && !snapshot.issues.is_empty() {
        return Err(RegistryError::NoValidEntries {
            rejected: snapshot.issues.len(),
        });
    }
    Ok(snapshot.apps.into_iter().map(|app| app.entry).collect())
}

/// One live app, if it is registered and its entry is valid.
pub async fn get_app(
    pool: &PgPool,
    app_id: &str,
) -> Result<Option<AppRegistryEntry>, RegistryError> {
    let row: Option<String> = sqlx::query_scalar(
        "SELECT entry::text FROM registry.apps WHERE app_id = $1 AND expires_at > now()",
    )
    .bind(app_id)
    .fetch_optional(pool)
    .await?;
    let Some(text) = row else {
        return Ok(None);
    };
    match check_text(app_id, &text) {
        Ok(entry) => {
            clear_issue(app_id);
            Ok(Some(entry))
        }
        Err(reason) => {
            report_issue(&RegistryIssue {
                app_id: app_id.to_string(),
                reason,
            });
            Ok(None)
        }
    }
}

/// Validates an entry for publication: a valid app id, the read-time rules, the publication
/// rules ([`super::rules`]: links, routes, limits), and the size bound.
pub fn validate_for_publication(value: &Value) -> Result<AppRegistryEntry, RegistryError> {
    let entry = AppRegistryEntry::parse(value).map_err(RegistryError::Invalid)?;
    if !is_valid_app_id(&entry.id) {
        return Err(RegistryError::Invalid(
            "id must be a lowercase letter followed by lowercase letters, digits or -, at most 80 characters"
                .into(),
        ));
    }
    super::rules::check(value).map_err(RegistryError::Invalid)?;
    let size = serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_ENTRY_BYTES {
        return Err(RegistryError::TooLarge { bytes: size });
    }
    Ok(entry)
}

/// Publishes one app may make per minute (its heartbeat publishes once a minute per replica, and
/// every 5 s while a publish keeps failing).
pub const MAX_PUBLISHES_PER_MINUTE: i32 = 60;

/// Counts a publish of `app_id` in the current minute: `Ok(None)` when it is within
/// [`MAX_PUBLISHES_PER_MINUTE`], else `Ok(Some(seconds))` until the next minute begins.
pub async fn count_publish(
    conn: &mut PgConnection,
    app_id: &str,
) -> Result<Option<u64>, RegistryError> {
    let (publishes, retry_after): (i32, f64) = sqlx::query_as(
        "INSERT INTO registry.publish_rate AS r (app_id, window_start, publishes)
         VALUES ($1, date_trunc('minute', now()), 1)
         ON CONFLICT (app_id) DO UPDATE SET
           publishes = CASE WHEN r.window_start = date_trunc('minute', now())
                            THEN r.publishes + 1 ELSE 1 END,
           window_start = date_trunc('minute', now())
         RETURNING publishes,
           extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now())::float8",
    )
    .bind(app_id)
    .fetch_one(conn)
    .await?;
    Ok((publishes > MAX_PUBLISHES_PER_MINUTE).then(|| retry_after.ceil().max(1.0) as u64))
}

/// Publishes (or renews) an app's entry, alive for `ttl` from now.
pub async fn upsert(
    conn: &mut PgConnection,
    value: &Value,
    ttl: Duration,
) -> Result<AppRegistryEntry, RegistryError> {
    let entry = validate_for_publication(value)?;
    sqlx::query(
        "INSERT INTO registry.apps (app_id, entry, updated_at, expires_at)
         VALUES ($1, $2, now(), now() + make_interval(secs => $3))
         ON CONFLICT (app_id) DO UPDATE
           SET entry = EXCLUDED.entry, updated_at = now(), expires_at = EXCLUDED.expires_at",
    )
    .bind(&entry.id)
    .bind(value)
    .bind(ttl.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(entry)
}

/// Deletes entries that expired more than `grace` ago, at most `limit` of them; returns how many.
pub async fn prune_expired(
    pool: &PgPool,
    grace: Duration,
    limit: i64,
) -> Result<u64, RegistryError> {
    let result = sqlx::query(
        "DELETE FROM registry.apps WHERE app_id IN (
           SELECT app_id FROM registry.apps
           WHERE expires_at < now() - make_interval(secs => $1)
           ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(grace.as_secs_f64())
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;
    use crate::registry::entry::tests::valid_entry;
    use serde_json::json;

    async fn insert_raw(db: &TestDb, app_id: &str, entry: &Value, ttl_secs: f64) {
        sqlx::query(
            "INSERT INTO registry.apps (app_id, entry, updated_at, expires_at)
             VALUES ($1, $2, now() - interval '1 hour', now() + make_interval(secs => $3))",
        )
        .bind(app_id)
        .bind(entry)
        .bind(ttl_secs)
        .execute(&db.pool)
        .await
        .expect("insert");
    }

    #[tokio::test]
    async fn read_skips_invalid_and_expired_entries_in_app_order() {
        let db = TestDb::new().await;
        let mut conn = db.pool.acquire().await.expect("conn");
        upsert(&mut conn, &valid_entry("weather"), APP_REGISTRY_TTL)
            .await
            .expect("upsert");
        upsert(&mut conn, &valid_entry("inventory"), APP_REGISTRY_TTL)
            .await
            .expect("upsert");
        insert_raw(&db, "broken", &json!({"id": "broken", "name": ""}), 60.0).await;
        insert_raw(&db, "mismatch", &valid_entry("other"), 60.0).await;
        insert_raw(&db, "gone", &valid_entry("gone"), -1.0).await;

        let snapshot = read_snapshot(&mut conn).await.expect("snapshot");
        let ids: Vec<&str> = snapshot.apps.iter().map(|a| a.entry.id.as_str()).collect();
        assert_eq!(ids, vec!["inventory", "weather"]);
        let mut issues: Vec<(String, String)> = snapshot
            .issues
            .iter()
            .map(|i| (i.app_id.clone(), i.reason.clone()))
            .collect();
        issues.sort();
        assert_eq!(
            issues,
            vec![
                (
                    "broken".to_string(),
                    "name must be a non-empty string".to_string()
                ),
                (
                    "mismatch".to_string(),
                    "registry key must match entry id".to_string()
                ),
            ]
        );
        assert_eq!(list_apps(&db.pool).await.expect("list").len(), 2);
        assert!(get_app(&db.pool, "broken").await.expect("get").is_none());
        assert!(get_app(&db.pool, "gone").await.expect("get").is_none());
        assert_eq!(
            get_app(&db.pool, "weather")
                .await
                .expect("get")
                .map(|e| e.id),
            Some("weather".to_string())
        );
    }

    #[tokio::test]
    async fn an_entry_changed_in_place_is_validated_again() {
        let db = TestDb::new().await;
        let mut conn = db.pool.acquire().await.expect("conn");
        upsert(&mut conn, &valid_entry("cached"), APP_REGISTRY_TTL)
            .await
            .expect("upsert");
        let read = |snapshot: RegistrySnapshot| {
            (
                snapshot
                    .apps
                    .iter()
                    .map(|a| a.entry.name.clone())
                    .collect::<Vec<_>>(),
                snapshot
                    .issues
                    .iter()
                    .map(|i| i.reason.clone())
                    .collect::<Vec<_>>(),
            )
        };
        let first = read(read_snapshot(&mut conn).await.expect("snapshot"));
        assert_eq!(first.0.len(), 1);
        assert!(first.1.is_empty());
        // Read again unchanged: the same entry.
        assert_eq!(
            read(read_snapshot(&mut conn).await.expect("snapshot")),
            first
        );
        // Broken behind the validation's back: the next read rejects it.
        sqlx::query(
            "UPDATE registry.apps SET entry = jsonb_set(entry, '{name}', '\"\"') WHERE app_id = 'cached'",
        )
        .execute(&mut *conn)
        .await
        .expect("break");
        let broken = read(read_snapshot(&mut conn).await.expect("snapshot"));
        assert!(broken.0.is_empty());
        assert_eq!(broken.1, vec!["name must be a non-empty string"]);
        assert!(get_app(&db.pool, "cached").await.expect("get").is_none());
        // Renamed: the new name is read.
        sqlx::query(
            "UPDATE registry.apps SET entry = jsonb_set(entry, '{name}', '\"Renamed\"') WHERE app_id = 'cached'",
        )
        .execute(&mut *conn)
        .await
        .expect("rename");
        assert_eq!(
            read(read_snapshot(&mut conn).await.expect("snapshot")).0,
            vec!["Renamed"]
        );
        assert_eq!(
            get_app(&db.pool, "cached")
                .await
                .expect("get")
                .map(|e| e.name),
            Some("Renamed".to_string())
        );
    }

    #[tokio::test]
    async fn a_registry_of_only_invalid_entries_fails_but_an_empty_one_does_not() {
        let db = TestDb::new().await;
        assert!(list_apps(&db.pool).await.expect("empty").is_empty());
        insert_raw(&db, "broken", &json!({"id": "broken"}), 60.0).await;
        assert!(matches!(
            list_apps(&db.pool).await,
            Err(RegistryError::NoValidEntries { rejected: 1 })
        ));
    }

    #[tokio::test]
    async fn heartbeat_renews_and_publication_is_validated() {
        let db = TestDb::new().await;
        let mut conn = db.pool.acquire().await.expect("conn");
        upsert(&mut conn, &valid_entry("weather"), Duration::from_secs(1))
            .await
            .expect("upsert");
        let first: DateTime<Utc> =
            sqlx::query_scalar("SELECT expires_at FROM registry.apps WHERE app_id = 'weather'")
                .fetch_one(&mut *conn)
                .await
                .expect("row");
        upsert(&mut conn, &valid_entry("weather"), APP_REGISTRY_TTL)
            .await
            .expect("renew");
        let renewed: DateTime<Utc> =
            sqlx::query_scalar("SELECT expires_at FROM registry.apps WHERE app_id = 'weather'")
                .fetch_one(&mut *conn)
                .await
                .expect("row");
        assert!(renewed - first > chrono::Duration::seconds(170));

        let mut bad_id = valid_entry("x");
        bad_id["id"] = json!("Bad_Id");
        assert!(matches!(
            upsert(&mut conn, &bad_id, APP_REGISTRY_TTL).await,
            Err(RegistryError::Invalid(_))
        ));
        let mut huge = valid_entry("huge");
        huge["description"] = json!("x".repeat(MAX_ENTRY_BYTES));
        assert!(matches!(
            upsert(&mut conn, &huge, APP_REGISTRY_TTL).await,
            Err(RegistryError::TooLarge { .. })
        ));
        let mut invalid = valid_entry("inv");
        invalid["routes"] = json!(["relative"]);
        assert!(matches!(
            upsert(&mut conn, &invalid, APP_REGISTRY_TTL).await,
            Err(RegistryError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn prune_removes_only_long_expired_entries() {
        let db = TestDb::new().await;
        insert_raw(&db, "old", &valid_entry("old"), -3600.0 + 1.0).await;
        insert_raw(&db, "recent", &valid_entry("recent"), -1.0).await;
        insert_raw(&db, "live", &valid_entry("live"), 60.0).await;
        assert_eq!(
            prune_expired(&db.pool, Duration::from_secs(600), 100)
                .await
                .expect("prune"),
            1
        );
        let left: Vec<String> =
            sqlx::query_scalar("SELECT app_id FROM registry.apps ORDER BY app_id")
                .fetch_all(&db.pool)
                .await
                .expect("rows");
        assert_eq!(left, vec!["live", "recent"]);
    }
}
