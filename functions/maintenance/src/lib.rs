//! The scheduled `maintenance` function: housekeeping that no request should pay for.
//!
//! Each task is bounded (a fixed number of rows per run), so a backlog drains over several runs
//! instead of one long invocation.

pub mod notices;

use std::time::Duration;

use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::lambda::{EventFuture, Function, Invocation};
use k2b_core::pwa::{self, PwaError};
use k2b_core::registry::{RegistryError, store};
use serde::Serialize;

/// The function: the database, and the wake-up queue (the pairing notices it hands to outgoing
/// mail are delivered by the `outbox` function).
pub const FUNCTION: Function = Function {
    name: "maintenance",
    needs: Needs::DATABASE.with_wakeups(),
};

/// The scheduled handler: any schedule payload (an EventBridge "Scheduled Event" envelope or a
/// ScheduleV2 input) runs every task once.
pub fn handler(core: Core) -> impl Fn(Invocation) -> EventFuture {
    move |_invocation| {
        let core = core.clone();
        Box::pin(async move { Ok(serde_json::to_value(run(&core).await?)?) })
    }
}

/// How long an expired registry entry is kept before it is deleted (readers already ignore it).
pub const REGISTRY_PRUNE_GRACE: Duration = Duration::from_secs(600);
/// Registry rows deleted per run at most.
pub const REGISTRY_PRUNE_BATCH: i64 = 100;

/// Clients idle this long lose their rate-limit row (it only ever counts the current second).
pub const REQUEST_RATE_IDLE: Duration = Duration::from_secs(60);
/// Rate-limit rows deleted per run at most.
pub const REQUEST_RATE_BATCH: i64 = 10_000;

/// Expired attachment records forgotten per run at most.
pub const MAIL_OBJECTS_BATCH: i64 = 1000;

/// What one run changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct MaintenanceReport {
    pub registry_pruned: u64,
    /// Rate-limit counts of clients idle for a minute, deleted.
    pub request_rates_pruned: u64,
    /// Help corpora no app renewed within the retention (one per run).
    pub help_corpora_deleted: u64,
    /// Live sessions of accounts past their `account_expires`, ended.
    pub expired_account_sessions: u64,
    /// Pairing and device housekeeping.
    pub pwa: pwa::maintenance::PwaMaintenanceReport,
    /// Mail attachment objects past their lifetime no longer counted against the total (the
    /// store's own expiry removes the bytes).
    pub mail_objects_forgotten: u64,
    /// Local mode: attachment files past their lifetime removed from the folder store (S3's
    /// lifecycle rule does this when deployed).
    pub mail_files_purged: u64,
    /// "New phone paired" notices.
    pub pairing_notices: notices::NoticeReport,
    /// Cloud Login: expired pairings, sign-ins and used command ids deleted.
    pub cloud_login: k2b_core::cloud_login::CleanupReport,
    /// Cloud Login's "sign-in app enrolled" and "removed by an administrator" notices.
    pub authenticator_notices: notices::NoticeReport,
    /// How long the oldest due outbox row has waited, whole seconds, outside the bulk mail lane
    /// (emitted every run as the `OutboxOldestDueAgeSeconds` metric the outbox alarm watches).
    pub outbox_oldest_due_age_seconds: u64,
}

/// The maintenance area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("registry: {0}")]
    Registry(#[from] RegistryError),
    #[error("outbox status: {0}")]
    Outboxes(#[from] k2b_core::operations::OperationsError),
    #[error("pwa: {0}")]
    Pwa(#[from] PwaError),
    #[error("help: {0}")]
    Help(#[from] k2b_core::help::HelpError),
    #[error("mail: {0}")]
    Mail(#[from] k2b_core::mail::MailError),
    #[error("cloud login: {0}")]
    CloudLogin(#[from] k2b_core::cloud_login::CloudLoginError),
    #[error("identity: {0}")]
    Identity(#[from] k2b_core::identity::IdentityError),
    #[error("rate limit: {0}")]
    RateLimit(#[from] k2b_core::http::rate_limit::RateLimitError),
}

/// Runs every task once and logs one line saying what changed.
pub async fn run(core: &Core) -> Result<MaintenanceReport, MaintenanceError> {
    let registry_pruned =
        store::prune_expired(&core.pool, REGISTRY_PRUNE_GRACE, REGISTRY_PRUNE_BATCH).await?;
    let request_rates_pruned =
        k2b_core::http::rate_limit::prune(&core.pool, REQUEST_RATE_IDLE, REQUEST_RATE_BATCH)
            .await?;
    let help_corpora_deleted = k2b_core::help::store::cleanup(&core.pool).await?;
    let expired_account_sessions =
        k2b_core::identity::session::end_sessions_of_expired_accounts(&core.pool).await?;
    let pwa = pwa::maintenance::run(core).await?;
    let mail_objects_forgotten =
        k2b_core::mail::attachments::forget_expired(&core.pool, MAIL_OBJECTS_BATCH).await?;
    let mail_files_purged = if core.config.mode.is_local() {
        core.mail_objects.store().await.purge_expired().await?
    } else {
        0
    };
    let pairing_notices = notices::run(core).await?;
    let cloud_login = {
        let mut conn = core
            .pool
            .acquire()
            .await
            .map_err(k2b_core::cloud_login::CloudLoginError::from)?;
        k2b_core::cloud_login::cleanup(&mut conn).await?
    };
    let authenticator_notices = notices::run_cloud_login(core).await?;
    let outboxes = k2b_core::operations::outbox::status(&core.pool).await?;
    let oldest_due = k2b_core::operations::outbox::oldest_due_age_seconds(&outboxes);
    // Every run, zero included: the outbox alarm reads this series.
    k2b_core::telemetry::metrics::gauge(
        "OutboxOldestDueAgeSeconds",
        k2b_core::telemetry::metrics::Unit::Seconds,
        oldest_due,
    );
    let report = MaintenanceReport {
        outbox_oldest_due_age_seconds: oldest_due as u64,
        registry_pruned,
        request_rates_pruned,
        help_corpora_deleted,
        expired_account_sessions,
        pwa,
        mail_objects_forgotten,
        mail_files_purged,
        pairing_notices,
        cloud_login,
        authenticator_notices,
    };
    if report == MaintenanceReport::default() {
        tracing::debug!("maintenance run finished: nothing to do");
    } else {
        tracing::info!(
            registry_pruned = report.registry_pruned,
            request_rates_pruned = report.request_rates_pruned,
            help_corpora_deleted = report.help_corpora_deleted,
            expired_account_sessions = report.expired_account_sessions,
            pairings_deleted = report.pwa.pairings_deleted,
            devices_expired = report.pwa.devices_expired,
            devices_purged = report.pwa.devices_purged,
            mail_objects_forgotten = report.mail_objects_forgotten,
            mail_files_purged = report.mail_files_purged,
            pairing_notices_sent = report.pairing_notices.sent,
            pairing_notices_deferred = report.pairing_notices.deferred,
            cloud_login_pairings_deleted = report.cloud_login.pairings,
            cloud_login_logins_deleted = report.cloud_login.logins,
            cloud_login_proofs_deleted = report.cloud_login.proofs,
            authenticator_notices_sent = report.authenticator_notices.sent,
            authenticator_notices_deferred = report.authenticator_notices.deferred,
            outbox_oldest_due_age_seconds = report.outbox_oldest_due_age_seconds,
            "maintenance run finished"
        );
    }
    Ok(report)
}
