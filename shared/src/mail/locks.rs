//! Transaction-scoped advisory locks of outgoing mail, always taken in one fixed order so two
//! calls can never wait on each other in a circle:
//! policy → app → (app, key) → (app, profile) quota → profile backlog → the call's own lock.
//! A call takes a constant number of them however many messages it carries.

use sqlx::PgConnection;

use crate::db::{self, DbError};

/// Whether a lock is shared with other holders of the same kind or held alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

/// One lock of the fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MailLock<'a> {
    /// Profiles, app access and log grants: shared by acceptance and delivery, exclusive for
    /// administrators' changes.
    Policy,
    /// One app's calls: batches exclusive, keyed sends shared.
    App(&'a str),
    /// One idempotency key of one app.
    Key(&'a str, &'a str),
    /// The daily quota of one app on one profile.
    Quota(&'a str, uuid::Uuid),
    /// The bulk backlog of one profile (all apps).
    Backlog(uuid::Uuid),
    /// One call's own lock, held until its transaction ends: a caller that lost the reply to
    /// COMMIT waits on it to learn the outcome.
    Call(uuid::Uuid),
}

impl MailLock<'_> {
    fn name(&self) -> String {
        match self {
            MailLock::Policy => "outgoing_mail.policy".to_string(),
            MailLock::App(app) => format!("outgoing_mail.app\n{app}"),
            MailLock::Key(app, key) => format!("outgoing_mail.key\n{app}\n{key}"),
            MailLock::Quota(app, profile) => format!("outgoing_mail.quota\n{app}\n{profile}"),
            MailLock::Backlog(profile) => format!("outgoing_mail.backlog\n{profile}"),
            MailLock::Call(id) => format!("outgoing_mail.call\n{id}"),
        }
    }
}

/// Takes `lock` until the end of the current transaction.
pub async fn take(conn: &mut PgConnection, lock: MailLock<'_>, mode: Mode) -> Result<(), DbError> {
    match mode {
        Mode::Shared => db::advisory_xact_lock_shared(conn, &lock.name()).await,
        Mode::Exclusive => db::advisory_xact_lock(conn, &lock.name()).await,
    }
}
