//! One migration run against the configured database, bounded by a deadline.

use std::time::Duration;

use k2b_core::config::{Config, ConfigError};
use k2b_core::db::{self, DbError, DbLimits};
use sqlx::{ConnectOptions, Connection};
use tokio::time::Instant;

use crate::request::SchemaData;

/// How long the first connection may take before the database counts as unreachable (a
/// security group that drops packets would otherwise hold the connection attempt for minutes).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Postgres cancels a statement this long after the run's own deadline: the run reports its
/// timeout first, and a statement left behind (a migration, a wait for the migrator's lock) still
/// ends on the server instead of holding the lock after the invocation was answered.
const SERVER_GRACE: Duration = Duration::from_secs(2);
/// Closing the pool after a run waits at most this long.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the schema could not be migrated; displayed as the `Reason` CloudFormation shows.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("configuration error: {0}")]
    Config(ConfigError),
    #[error("cannot reach the database: no connection within {0} s")]
    Unreachable(u64),
    #[error("cannot reach the database: {0}")]
    Connect(sqlx::Error),
    #[error(
        "the database schema is at migration {applied}, newer than this release's latest \
         migration {known}: deploy the release that applied it (a release must not run against \
         a schema newer than it knows)"
    )]
    NewerSchema { applied: i64, known: i64 },
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(
        "timed out: the migrations did not finish within {0} s (the invocation's deadline less \
         the time kept for answering); the migrator's lock may be held by another run"
    )]
    TimedOut(u64),
}

/// What a successful run left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// Migrations applied by this run.
    pub applied: usize,
    /// The newest migration applied now.
    pub current: Option<i64>,
}

impl Migrated {
    /// The resource's attributes.
    pub fn data(&self) -> SchemaData {
        SchemaData {
            version: self.current.map(|v| v.to_string()).unwrap_or_default(),
            applied: self.applied.to_string(),
        }
    }

    /// One line for the response's `Reason`.
    pub fn summary(&self) -> String {
        let current = self
            .current
            .map(|v| v.to_string())
            .unwrap_or_else(|| "none".to_string());
        match self.applied {
            0 => format!("the schema is up to date (migration {current})"),
            n => format!("applied {n} migration(s); the schema is at migration {current}"),
        }
    }
}

/// Applies every pending migration of this binary, giving up at `until`.
///
/// Concurrent runs (two stacks on one database, a retried invocation) take turns on the
/// migrator's advisory lock, and a run finding nothing to do changes nothing.
pub async fn migrate(config: &Config, until: Instant) -> Result<Migrated, SchemaError> {
    let allowed = until.saturating_duration_since(Instant::now());
    match tokio::time::timeout_at(until, apply(config, until)).await {
        Ok(result) => result,
        // The run is dropped here: its connections close, and the server ends what was still
        // running at the latest `SERVER_GRACE` later (an unfinished migration's transaction
        // rolls back).
        Err(_) => Err(SchemaError::TimedOut(allowed.as_secs())),
    }
}

async fn apply(config: &Config, until: Instant) -> Result<Migrated, SchemaError> {
    let options = db::connect_options(config.database_url.expose())?;
    // One plain connection first: the pool would report a refused connection only as its own
    // acquire timeout, and the reason should name what went wrong.
    let within = CONNECT_TIMEOUT.min(until.saturating_duration_since(Instant::now()));
    match tokio::time::timeout(within, options.connect()).await {
        Err(_) => return Err(SchemaError::Unreachable(within.as_secs())),
        Ok(Err(error)) => return Err(SchemaError::Connect(error)),
        Ok(Ok(connection)) => {
            connection.close().await.ok();
        }
    }
    let server_limit = until.saturating_duration_since(Instant::now()) + SERVER_GRACE;
    let pool = db::lazy_pool_with(
        config,
        DbLimits {
            statement: server_limit,
            lock: server_limit,
            idle_in_transaction: server_limit,
        },
    )?;
    let result = migrate_pool(&pool).await;
    tokio::time::timeout(CLOSE_TIMEOUT, pool.close()).await.ok();
    result
}

async fn migrate_pool(pool: &sqlx::PgPool) -> Result<Migrated, SchemaError> {
    // A newer release already ran: its migrations are unknown here, and running this binary's
    // code on that schema is what the deploy must not do.
    let applied = db::applied_versions(pool).await?;
    if let Some(&newest) = applied.last() {
        let known = db::latest_known_migration().unwrap_or(0);
        if newest > known {
            return Err(SchemaError::NewerSchema {
                applied: newest,
                known,
            });
        }
    }
    let report = db::migrate(pool).await?;
    Ok(Migrated {
        applied: report.applied.len(),
        current: report.current,
    })
}
