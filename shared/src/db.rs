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
    Ok(pool_options(config.db.max_connections)
        .min_connections(0)
        .acquire_timeout(config.db.acquire_timeout)
        .idle_timeout(Some(config.db.idle_timeout))
        .connect_lazy_with(options))
}

/// A connection idle longer than this is pinged before it is handed out.
pub const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// When a connection taken from the pool gets a ping (one round trip) first: after it was idle
/// longer than [`PING_IDLE_AFTER`], and every connection taken within that long after a quiet
/// spell of the process on the wall clock (no connection taken for longer, as after a Lambda
/// execution environment was frozen, whose monotonic clock need not have counted the pause), or
/// after the wall clock went back. A connection in steady use is handed out as it is.
#[derive(Debug, Default)]
pub struct PingPolicy {
    /// Wall-clock milliseconds of the last connection taken (0: none yet).
    last_taken_ms: std::sync::atomic::AtomicU64,
    /// Until when (wall-clock milliseconds) every connection taken is pinged.
    ping_until_ms: std::sync::atomic::AtomicU64,
}

impl PingPolicy {
    /// Whether the connection taken at `now_ms` (wall clock), idle for `idle_for`, gets a ping.
    pub fn needs_ping(&self, now_ms: u64, idle_for: Duration) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let window = PING_IDLE_AFTER.as_millis() as u64;
        let previous = self.last_taken_ms.swap(now_ms, SeqCst);
        if previous == 0 || now_ms < previous || now_ms - previous > window {
            self.ping_until_ms.fetch_max(now_ms + window, SeqCst);
        }
        idle_for > PING_IDLE_AFTER || now_ms < self.ping_until_ms.load(SeqCst)
    }
}

fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// The pool options every pool of the platform starts from: at most `max_connections`, and a
/// ping only where [`PingPolicy`] asks for one (instead of before every connection handed out).
pub fn pool_options(max_connections: u32) -> PgPoolOptions {
    let policy = std::sync::Arc::new(PingPolicy::default());
    PgPoolOptions::new()
        .max_connections(max_connections)
        .test_before_acquire(false)
        .before_acquire(move |connection, meta| {
            let ping = policy.needs_ping(wall_clock_ms(), meta.idle_for);
            Box::pin(async move {
                if ping {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
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
    none_without_table(
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await,
    )
}

/// The highest migration applied, `None` before the first, in one statement.
pub async fn latest_applied_version(pool: &PgPool) -> Result<Option<i64>, DbError> {
    none_without_table(
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await,
    )
}

/// A read of the migrations table, where a database never migrated (no such table) has none.
fn none_without_table<T: Default>(read: Result<T, sqlx::Error>) -> Result<T, DbError> {
    match read {
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42P01") => {
            Ok(T::default())
        }
        read => Ok(read?),
    }
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

/// Begins a transaction whose statements are each bounded by `timeout` (at least 1 ms), in one
/// round trip: `BEGIN` and the transaction-local `statement_timeout` go as one simple query.
pub async fn begin_bounded(
    pool: &PgPool,
    timeout: Duration,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, DbError> {
    let ms = timeout.as_millis().max(1);
    // An integer rendered by us: nothing from outside reaches this statement.
    let statement = format!("BEGIN; SET LOCAL statement_timeout = {ms}");
    Ok(pool.begin_with(sqlx::AssertSqlSafe(statement)).await?)
}

/// [`begin_bounded`] for a transaction that only holds row locks: its commit does not wait for
/// the WAL to reach the disk (`synchronous_commit` off). A crash before the flush only undoes
/// the locks, which the crash releases anyway.
pub async fn begin_bounded_lock_only(
    pool: &PgPool,
    timeout: Duration,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, DbError> {
    let ms = timeout.as_millis().max(1);
    // An integer rendered by us: nothing from outside reaches this statement.
    let statement =
        format!("BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL synchronous_commit = off");
    Ok(pool.begin_with(sqlx::AssertSqlSafe(statement)).await?)
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

    const SECOND: Duration = Duration::from_secs(1);
    const BRIEF: Duration = Duration::from_millis(5);

    /// A policy past its first second, its last connection taken at 1,001,100 ms unpinged.
    fn in_steady_use() -> PingPolicy {
        let policy = PingPolicy::default();
        policy.needs_ping(1_000_000, BRIEF);
        policy.needs_ping(1_000_600, BRIEF);
        assert!(!policy.needs_ping(1_001_100, BRIEF));
        policy
    }

    #[test]
    fn connections_in_steady_use_are_not_pinged() {
        let policy = PingPolicy::default();
        // The process's first connection, and those taken in the second after it, are pinged.
        assert!(policy.needs_ping(1_000_000, BRIEF));
        assert!(policy.needs_ping(1_000_500, BRIEF));
        // Taken every half second from then on: steady use, no ping.
        assert!(!policy.needs_ping(1_001_000, BRIEF));
        assert!(!policy.needs_ping(1_001_500, BRIEF));
        assert!(!policy.needs_ping(1_002_000, BRIEF));
    }

    #[test]
    fn a_connection_idle_longer_than_a_second_is_pinged() {
        let policy = in_steady_use();
        assert!(policy.needs_ping(1_001_400, SECOND + BRIEF));
        assert!(!policy.needs_ping(1_001_600, SECOND));
    }

    #[test]
    fn after_a_quiet_spell_every_connection_is_pinged_for_a_second() {
        let policy = in_steady_use();
        // A pause of ten minutes on the wall clock that the connections' idle time did not see
        // (a frozen Lambda environment): each connection taken in the next second is pinged.
        assert!(policy.needs_ping(1_601_100, BRIEF));
        assert!(policy.needs_ping(1_601_200, BRIEF));
        assert!(policy.needs_ping(1_602_000, BRIEF));
        assert!(!policy.needs_ping(1_602_200, BRIEF));
    }

    #[test]
    fn a_wall_clock_that_went_back_pings_again() {
        let policy = in_steady_use();
        assert!(policy.needs_ping(1_000_100, BRIEF));
    }

    #[tokio::test]
    async fn the_latest_applied_version_skips_failures_and_is_none_without_the_table() {
        let db = TestDb::new().await;
        let known = known_migrations();
        let latest = latest_applied_version(&db.pool).await.expect("latest");
        assert_eq!(latest, known.last().copied());
        assert_eq!(
            latest,
            applied_versions(&db.pool)
                .await
                .expect("applied")
                .last()
                .copied()
        );
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES ($1, 'failed', false, '\\x00', 0)",
        )
        .bind(latest.unwrap_or_default() + 1)
        .execute(&db.pool)
        .await
        .expect("failed migration");
        assert_eq!(
            latest_applied_version(&db.pool).await.expect("latest"),
            latest
        );
        sqlx::query("ALTER TABLE _sqlx_migrations RENAME TO migrations_elsewhere")
            .execute(&db.pool)
            .await
            .expect("rename");
        assert_eq!(
            latest_applied_version(&db.pool).await.expect("latest"),
            None
        );
    }

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
    async fn a_bounded_transaction_times_out_its_statements_and_only_its_own() {
        let db = TestDb::new().await;
        let mut tx = begin_bounded(&db.pool, Duration::from_millis(50))
            .await
            .expect("begin");
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
        // The connection goes back to the pool with the session's own value.
        let mut conn = db.pool.acquire().await.expect("acquire");
        let after: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut *conn)
            .await
            .expect("show");
        assert_eq!(after, "0");
        // A committed bounded transaction keeps what it wrote.
        let mut tx = begin_bounded(&db.pool, Duration::from_secs(5))
            .await
            .expect("begin");
        sqlx::query("CREATE TABLE bounded_probe (n int)")
            .execute(&mut *tx)
            .await
            .expect("create");
        tx.commit().await.expect("commit");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM bounded_probe")
            .fetch_one(&db.pool)
            .await
            .expect("table kept");
        assert_eq!(rows, 0);
    }

    #[tokio::test]
    async fn a_lock_only_transaction_commits_without_waiting_for_the_disk() {
        let db = TestDb::new().await;
        let mut tx = begin_bounded_lock_only(&db.pool, Duration::from_millis(70))
            .await
            .expect("begin");
        let settings: (String, String) = sqlx::query_as(
            "SELECT current_setting('statement_timeout'), current_setting('synchronous_commit')",
        )
        .fetch_one(&mut *tx)
        .await
        .expect("show");
        assert_eq!(settings, ("70ms".to_string(), "off".to_string()));
        tx.commit().await.expect("commit");
        let mut conn = db.pool.acquire().await.expect("acquire");
        let after: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&mut *conn)
            .await
            .expect("show");
        assert_eq!(after, "on");
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
