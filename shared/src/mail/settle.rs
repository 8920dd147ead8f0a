//! The settle signal: whoever ends an attempt or a message (delivery, an administrator's cancel)
//! notifies `outgoing_mail_settled` with the message id, so a `send` waiting in another
//! execution environment learns of it at once instead of at its next poll.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::time::Instant;
use uuid::Uuid;

use super::MailError;

/// The Postgres notification channel.
pub const CHANNEL: &str = "outgoing_mail_settled";

/// Notifies that `id` settled (inside the transaction that settled it, or after).
pub async fn notify(conn: &mut sqlx::PgConnection, id: Uuid) -> Result<(), MailError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(id.to_string())
        .execute(conn)
        .await?;
    Ok(())
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
/// runs first, after every settle signal for `id`, and every `poll` in between (the signal may
/// be lost, or not listened to when no listener could be opened).
pub async fn wait_for<T, F, Fut>(
    pool: &PgPool,
    id: Uuid,
    deadline: Instant,
    poll: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(bool, T), MailError>>,
{
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(mut listener) => match listener.listen(CHANNEL).await {
            Ok(()) => Some(listener),
            Err(error) => {
                tracing::warn!(error = %error, "settle signal not listened to; polling");
                None
            }
        },
        Err(error) => {
            tracing::warn!(error = %error, "settle signal not listened to; polling");
            None
        }
    };
    let wanted = id.to_string();
    let mut last = None;
    loop {
        match check().await {
            Ok((done, value)) => {
                if done {
                    return Some(value);
                }
                last = Some(value);
            }
            Err(error) => {
                tracing::warn!(error = %error, "message not re-read while waiting");
                return last;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return last;
        }
        let pause = poll.min(deadline - now);
        match listener.as_mut() {
            Some(listener) => {
                let signalled = async {
                    loop {
                        match listener.recv().await {
                            Ok(note) if note.payload() == wanted => return,
                            Ok(_) => continue,
                            // The listener reconnects on its next recv; fall back to the poll.
                            Err(_) => std::future::pending::<()>().await,
                        }
                    }
                };
                let _ = tokio::time::timeout(pause, signalled).await;
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}
