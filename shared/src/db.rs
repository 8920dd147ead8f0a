//! Postgres: the pool every function shares, embedded migrations, and helpers for
//! transaction-local timeouts and advisory locks.

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::config::Config;

pub mod notify;
pub mod reads;
#[cfg(feature = "test-util")]
pub mod testing;

/// Every migration of every schema, embedded in the binary. Applied by the local runner, the test
/// harness and the deploy-time `migrate` command; never lazily by a request.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The database layer's one error type.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database URL")]
    InvalidUrl,
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Parses a connection URL without ever echoing it (it may carry a password).
pub fn connect_options(url: &str) -> Result<PgConnectOptions, DbError> {
    PgConnectOptions::from_str(url)
        .map(|options| {
            options
                .application_name("k2b-cloud")
                .disable_statement_logging()
        })
        .map_err(|_| DbError::InvalidUrl)
}

/// Limits the server applies to every statement of a pool's connections, so no wait on
/// Postgres — a slow statement, a row lock held elsewhere, a transaction left open by a frozen
/// execution environment — outlasts the caller's own deadline. A transaction can still set a
/// tighter or longer local limit (`SET LOCAL`), as issuance does with its own deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DbLimits {
    /// `statement_timeout`.
    pub statement: Duration,
    /// `lock_timeout`: waiting for a row or table lock.
    pub lock: Duration,
    /// `idle_in_transaction_session_timeout`: ends a transaction whose client went quiet (a
    /// Lambda environment frozen after answering), releasing its locks.
    pub idle_in_transaction: Duration,
}

impl DbLimits {
    /// HTTP functions: every wait ends far inside the route budget (`lambda::ROUTE_BUDGET`).
    pub const HTTP: DbLimits = DbLimits {
        statement: Duration::from_secs(5),
        lock: Duration::from_secs(3),
        idle_in_transaction: Duration::from_secs(10),
    };
    /// Queue and scheduled functions: longer batches, still never unbounded.
    pub const EVENTS: DbLimits = DbLimits {
        statement: Duration::from_secs(60),
        lock: Duration::from_secs(30),
        idle_in_transaction: Duration::from_secs(60),
    };
}

/// The pool of one execution environment: a few connections, opened on first use (a cold start
/// does not wait for Postgres), a short acquire timeout so an exhausted pool fails fast.
pub fn lazy_pool(config: &Config) -> Result<PgPool, DbError> {
    lazy_pool_from(config, connect_options(config.database_url.expose())?)
}

/// [`lazy_pool`] with server-side limits on every connection.
pub fn lazy_pool_with(config: &Config, limits: DbLimits) -> Result<PgPool, DbError> {
    let millis = |d: Duration| d.as_millis().to_string();
    let options = connect_options(config.database_url.expose())?.options([
        ("statement_timeout", millis(limits.statement)),
        ("lock_timeout", millis(limits.lock)),
        (
            "idle_in_transaction_session_timeout",
            millis(limits.idle_in_transaction),
        ),
    ]);
    lazy_pool_from(config, options)
}

fn lazy_pool_from(config: &Config, options: PgConnectOptions) -> Result<PgPool, DbError> {
    Ok(PgPoolOptions::new()
        .max_connections(config.db.max_connections)
        .min_connections(0)
        .acquire_timeout(config.db.acquire_timeout)
        .idle_timeout(Some(config.db.idle_timeout))
        .connect_lazy_with(options))
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Versions applied by this call, ascending (empty when the schema was current).
    pub applied: Vec<i64>,
    /// The newest version now applied.
    pub current: Option<i64>,
}

/// Applies every pending migration (concurrent callers serialise on the migrator's lock).
pub async fn migrate(pool: &PgPool) -> Result<MigrationReport, DbError> {
    let before = applied_versions(pool).await?;
    MIGRATOR.run(pool).await?;
    let after = applied_versions(pool).await?;
    let applied = after
        .iter()
        .copied()
        .filter(|v| !before.contains(v))
        .collect();
    Ok(MigrationReport {
        applied,
        current: after.last().copied(),
    })
}

/// Versions recorded as applied, ascending; empty on a database never migrated.
pub async fn applied_versions(pool: &PgPool) -> Result<Vec<i64>, DbError> {
    let exists: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations')::text")
            .fetch_one(pool)
            .await?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?,
    )
}

/// Every migration this binary carries, ascending.
pub fn known_migrations() -> Vec<i64> {
    let mut versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    versions.sort_unstable();
    versions
}

/// The newest migration this binary carries.
pub fn latest_known_migration() -> Option<i64> {
    MIGRATOR.iter().map(|m| m.version).max()
}

/// Creates the database named in `url` when it does not exist yet (connecting to the server's
/// `postgres` database to do so). Returns whether it was created.
pub async fn ensure_database(url: &str) -> Result<bool, DbError> {
    let options = connect_options(url)?;
    let name = options
        .get_database()
        .map(str::to_string)
        .unwrap_or_else(|| "postgres".to_string());
    if !is_plain_identifier(&name) {
        return Err(DbError::InvalidUrl);
    }
    let mut admin = options.clone().database("postgres").connect().await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await?;
    if exists {
        admin.close().await.ok();
        return Ok(false);
    }
    let statement = format!("CREATE DATABASE \"{name}\"");
    let created = match sqlx::query(sqlx::AssertSqlSafe(statement))
        .execute(&mut admin)
        .await
    {
        Ok(_) => true,
        // Another process created it between the check and the statement.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => false,
        Err(e) => return Err(e.into()),
    };
    admin.close().await.ok();
    Ok(created)
}

/// Database names this crate creates or accepts: letters, digits, `_` and `-`.
pub fn is_plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Bounds every following statement of the current transaction to `timeout` (at least 1 ms).
/// Transaction-local: the session's own value is back once the transaction ends.
pub async fn set_local_statement_timeout(
    conn: &mut PgConnection,
    timeout: Duration,
) -> Result<(), DbError> {
    let ms = timeout.as_millis().max(1).to_string();
    sqlx::query("SELECT set_config('statement_timeout', $1, true)")
        .bind(ms)
        .execute(conn)
        .await?;
    Ok(())
}

/// Bounds how long the current transaction waits for any lock (row or advisory) to `timeout`.
pub async fn set_local_lock_timeout(
    conn: &mut PgConnection,
    timeout: Duration,
) -> Result<(), DbError> {
    let ms = timeout.as_millis().max(1).to_string();
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(ms)
        .execute(conn)
        .await?;
    Ok(())
}

/// Takes the transaction-scoped advisory lock named `key` (hashed with `hashtextextended(key, 0)`,
/// so a TypeScript replica using the same key string shares it). Released at commit or rollback.
pub async fn advisory_xact_lock(conn: &mut PgConnection, key: &str) -> Result<(), DbError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// Like [`advisory_xact_lock`], shared with every other holder of the shared lock (and waiting
/// only for an exclusive holder).
pub async fn advisory_xact_lock_shared(conn: &mut PgConnection, key: &str) -> Result<(), DbError> {
    sqlx::query("SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))")
        .bind(key)
        .execute(conn)
        .await?;
    Ok(())
}

/// Like [`advisory_xact_lock`] but returns `false` at once when another transaction holds it.
pub async fn try_advisory_xact_lock(conn: &mut PgConnection, key: &str) -> Result<bool, DbError> {
    Ok(
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(key)
            .fetch_one(conn)
            .await?,
    )
}

/// Whether an error is Postgres cancelling a statement for `statement_timeout` or `lock_timeout`.
pub fn is_timeout(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e)
        if matches!(e.code().as_deref(), Some("57014") | Some("55P03")))
}

/// Whether an error is a unique-constraint violation.
pub fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.code().as_deref() == Some("23505"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::TestDb;

    #[tokio::test]
    async fn statement_timeout_is_transaction_local() {
        let db = TestDb::new().await;
        let mut tx = db.pool.begin().await.expect("begin");
        set_local_statement_timeout(&mut tx, Duration::from_millis(50))
            .await
            .expect("set");
        let inside: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("show");
        assert_eq!(inside, "50ms");
        let err = sqlx::query("SELECT pg_sleep(1)")
            .execute(&mut *tx)
            .await
            .expect_err("must fail");
        assert!(is_timeout(&err), "{err}");
        tx.rollback().await.expect("rollback");
        let after: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&db.pool)
            .await
            .expect("show");
        assert_eq!(after, "0");
    }

    #[tokio::test]
    async fn advisory_lock_excludes_a_second_transaction_until_commit() {
        let db = TestDb::new().await;
        let mut first = db.pool.begin().await.expect("begin");
        advisory_xact_lock(&mut first, "cloud:test-lock")
            .await
            .expect("lock");
        let mut second = db.pool.begin().await.expect("begin");
        assert!(
            !try_advisory_xact_lock(&mut second, "cloud:test-lock")
                .await
                .expect("try")
        );
        assert!(
            try_advisory_xact_lock(&mut second, "cloud:other-lock")
                .await
                .expect("try")
        );
        first.commit().await.expect("commit");
        assert!(
            try_advisory_xact_lock(&mut second, "cloud:test-lock")
                .await
                .expect("try")
        );
        second.rollback().await.expect("rollback");
    }

    #[tokio::test]
    async fn migrating_twice_is_a_no_op() {
        let db = TestDb::new().await;
        let report = migrate(&db.pool).await.expect("migrate");
        assert!(report.applied.is_empty(), "{report:?}");
        assert_eq!(report.current, latest_known_migration());
    }

    #[tokio::test]
    async fn ensure_database_creates_once() {
        let db = TestDb::new().await;
        let name = format!("k2b_ensure_{}", uuid::Uuid::new_v4().simple());
        let url = db.url_for(&name);
        assert!(ensure_database(&url).await.expect("create"));
        assert!(!ensure_database(&url).await.expect("exists"));
        db.drop_database(&name).await;
    }

    #[test]
    fn lazy_pool_does_not_connect() {
        let config = Config::from_lookup(crate::config::Mode::Local, |k| {
            (k == "DATABASE_URL").then(|| "postgres://nobody@127.0.0.1:1/none".to_string())
        })
        .expect("config");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let pool = runtime
            .block_on(async { lazy_pool(&config) })
            .expect("pool");
        assert_eq!(pool.size(), 0);
    }

    #[tokio::test]
    async fn a_limited_pool_sets_its_limits_on_every_connection() {
        let db = TestDb::new().await;
        let pool = lazy_pool_with(&db.config(), DbLimits::HTTP).expect("pool");
        let mut conn = pool.acquire().await.expect("connection");
        let mut shown = Vec::new();
        for setting in [
            "SHOW statement_timeout",
            "SHOW lock_timeout",
            "SHOW idle_in_transaction_session_timeout",
        ] {
            let value: String = sqlx::query_scalar(setting)
                .fetch_one(&mut *conn)
                .await
                .expect("show");
            shown.push(value);
        }
        assert_eq!(shown, ["5s", "3s", "10s"]);
        // A statement past the limit ends with the server's cancellation, not a hang.
        let error = sqlx::query("SELECT pg_sleep(6)")
            .execute(&mut *conn)
            .await
            .expect_err("cancelled");
        assert!(error.to_string().contains("statement timeout"), "{error}");
    }
}
