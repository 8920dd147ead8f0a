//! Waiting on a Postgres notification: whoever changes a row notifies a channel with the row's
//! id inside the changing transaction (delivered at commit), so a request waiting in another
//! execution environment learns of it at once instead of at its next poll.
//!
//! Each execution environment listens with one connection per channel ([`Notifications`]),
//! however many requests wait: a waiter subscribes to the process's fan-out, never to a
//! connection of its own, so held requests cannot exhaust the pool.

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{PgConnection, PgPool};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

/// Notifies `channel` with `payload` (inside the transaction that made the change, or after).
pub async fn notify(
    conn: &mut PgConnection,
    channel: &str,
    payload: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Payloads fanned out to the waiters of one execution environment.
const FAN_OUT: usize = 1024;
/// How long a first subscriber waits for the listener to be set up before it polls only.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(3);

/// The process's listeners, one per channel, started on first use.
pub struct Notifications {
    pool: PgPool,
    channels: Mutex<HashMap<String, broadcast::Sender<String>>>,
}

impl Notifications {
    pub fn new(pool: PgPool) -> Notifications {
        Notifications {
            pool,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// A receiver of `channel`'s payloads from now on; `None` when no listener could be set up
    /// (the waiter then polls only).
    pub async fn subscribe(&self, channel: &str) -> Option<broadcast::Receiver<String>> {
        let started = {
            let mut channels = self.channels.lock().ok()?;
            if let Some(sender) = channels.get(channel) {
                return Some(sender.subscribe());
            }
            let (sender, receiver) = broadcast::channel(FAN_OUT);
            channels.insert(channel.to_string(), sender.clone());
            let (ready, listening) = oneshot::channel();
            tokio::spawn(listen(
                self.pool.clone(),
                channel.to_string(),
                sender,
                ready,
            ));
            (receiver, listening)
        };
        let (receiver, listening) = started;
        match tokio::time::timeout(LISTEN_TIMEOUT, listening).await {
            Ok(Ok(true)) => Some(receiver),
            _ => {
                // Let the next waiter try again.
                if let Ok(mut channels) = self.channels.lock() {
                    channels.remove(channel);
                }
                None
            }
        }
    }
}

/// The listener of one channel: it runs for the life of the process and reconnects after an
/// error (notifications in between are lost; waiters poll).
async fn listen(
    pool: PgPool,
    channel: String,
    sender: broadcast::Sender<String>,
    ready: oneshot::Sender<bool>,
) {
    let connected = async {
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(&channel).await?;
        Ok::<_, sqlx::Error>(listener)
    }
    .await;
    let mut listener = match connected {
        Ok(listener) => {
            ready.send(true).ok();
            listener
        }
        Err(error) => {
            tracing::warn!(channel, error = %error, "notifications not listened to; polling");
            ready.send(false).ok();
            return;
        }
    };
    loop {
        match listener.recv().await {
            Ok(note) => {
                // No receiver right now is fine: nobody is waiting.
                let _ = sender.send(note.payload().to_string());
            }
            Err(error) => {
                tracing::warn!(channel, error = %error, "notification listener reconnecting");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Waits until `check` says it is done, `deadline` passes, or `check` fails; returns the last
/// value `check` produced. `check` runs first (after subscribing, so no notification between
/// the two is missed), after every notification of `channel` carrying `payload`, and every
/// `poll` in between (a notification may be lost, or not listened to when no listener could
/// be set up).
pub async fn wait_for<T, E, F, Fut>(
    notifications: &Notifications,
    channel: &str,
    payload: &str,
    deadline: Instant,
    poll: Duration,
    mut check: F,
) -> Option<T>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(bool, T), E>>,
{
    let mut receiver = notifications.subscribe(channel).await;
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
                tracing::warn!(channel, error = %error, "not re-read while waiting");
                return last;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return last;
        }
        let pause = poll.min(deadline - now);
        match receiver.as_mut() {
            Some(receiver) => {
                let signalled = async {
                    loop {
                        match receiver.recv().await {
                            Ok(note) if note == payload => return,
                            Ok(_) => continue,
                            // Some were missed: one of them may have been ours.
                            Err(broadcast::error::RecvError::Lagged(_)) => return,
                            Err(broadcast::error::RecvError::Closed) => {
                                std::future::pending::<()>().await
                            }
                        }
                    }
                };
                let _ = tokio::time::timeout(pause, signalled).await;
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}
