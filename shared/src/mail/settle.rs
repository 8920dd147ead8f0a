//! The settle signal: whoever ends an attempt or a message (delivery, an administrator's cancel)
//! notifies `outgoing_mail_settled` with the message id, so a `send` waiting in another
//! execution environment learns of it at once instead of at its next poll.

use std::time::Duration;

use sqlx::PgPool;
use tokio::time::Instant;
use uuid::Uuid;

use super::MailError;
use crate::db;

/// The Postgres notification channel.
pub const CHANNEL: &str = "outgoing_mail_settled";

/// Notifies that `id` settled (inside the transaction that settled it, or after).
pub async fn notify(conn: &mut sqlx::PgConnection, id: Uuid) -> Result<(), MailError> {
    Ok(db::notify::notify(conn, CHANNEL, &id.to_string()).await?)
}

/// Notifies after the fact; a failure is logged (waiters poll anyway).
pub async fn notify_pool(pool: &PgPool, ids: &[Uuid]) {
    let Ok(mut conn) = pool.acquire().await else {
        tracing::warn!("outgoing mail settle signal not sent: no connection");
        return;
    };
    for id in ids {
        if let Err(error) = notify(&mut conn, *id).await {
            tracing::warn!(error = %error, "outgoing mail settle signal not sent");
            return;
        }
    }
}

/// Waits until `check` says the message is done, `deadline` passes, or `check` fails. `check`
/// runs first, after every settle signal for `id`, and every `poll` in between.
pub async fn wait_for<T, F, Fut>(
    notifications: &db::notify::Notifications,
    id: Uuid,
    deadline: Instant,
    poll: Duration,
    check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(bool, T), MailError>>,
{
    db::notify::wait_for(
        notifications,
        CHANNEL,
        &id.to_string(),
        deadline,
        poll,
        check,
    )
    .await
}
