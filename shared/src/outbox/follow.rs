//! Following the live outboxes: every live row committed by any writer — another app's
//! transaction that only runs SQL included — notifies the `k2b_outbox` channel with its app id
//! at commit (a trigger on `events.outbox`). A follower listens on one connection and runs a
//! pass of each outbox it hears of, so such a row is published within moments instead of at
//! the next minute's sweep.
//!
//! The `outbox` function follows during its scheduled run (listening before its sweep, so no
//! commit between the two is missed); the local runner follows for as long as it runs.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Drainer, OutboxError, OutboxRef, PassOutcome};

/// The channel the live rows' trigger notifies (payload: the row's app id).
pub const CHANNEL: &str = "k2b_outbox";

/// Notifications waiting for the follower before the listener stops reading (Postgres keeps
/// the rest in its notification queue meanwhile).
const BACKLOG: usize = 4096;
/// The pause after a failed receive before the listener tries again.
const RETRY: Duration = Duration::from_secs(1);

/// What the listener heard.
enum Heard {
    /// A live row of this outbox was committed.
    Outbox(OutboxRef),
    /// The connection was lost and is being re-established: notifications in between are lost,
    /// so the follower sweeps.
    Lost,
}

/// What a follower did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FollowReport {
    /// Notifications heard.
    pub notifications: u64,
    /// Passes run for them (notifications heard together share a pass per outbox).
    pub passes: u64,
    /// Rows those passes settled.
    pub drained: u64,
    /// Passes that failed (the sweep of a later run retries their rows).
    pub failed: u64,
}

impl FollowReport {
    fn add(&mut self, outcomes: Vec<PassOutcome>) {
        for outcome in outcomes {
            self.passes += 1;
            match outcome.result {
                Ok(n) => self.drained += n,
                Err(_) => self.failed += 1,
            }
        }
    }
}

/// A listener of [`CHANNEL`], reading on a task of its own.
pub struct Follower {
    heard: mpsc::Receiver<Heard>,
    reader: JoinHandle<()>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        // Closes the listening connection.
        self.reader.abort();
    }
}

impl Follower {
    /// Listens from now on (on a connection of its own, outside the pool's count).
    pub async fn listen(pool: &PgPool) -> Result<Follower, OutboxError> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        let (sender, heard) = mpsc::channel(BACKLOG);
        let reader = tokio::spawn(read(listener, sender));
        Ok(Follower { heard, reader })
    }

    /// Runs a pass of every outbox it hears of until `until` (`None`: for ever), passes ending
    /// by `deadline`; then waits for the passes in flight. After a lost connection it sweeps
    /// every outbox once (what was committed meanwhile was not heard).
    pub async fn follow(
        mut self,
        drainer: &Drainer,
        until: Option<Instant>,
        deadline: Option<Instant>,
    ) -> FollowReport {
        let mut report = FollowReport::default();
        let mut passes: FuturesUnordered<BoxFuture<'_, Vec<PassOutcome>>> = FuturesUnordered::new();
        let ended = async {
            match until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(ended);
        loop {
            tokio::select! {
                _ = &mut ended => break,
                Some(outcomes) = passes.next(), if !passes.is_empty() => report.add(outcomes),
                heard = self.heard.recv() => {
                    let Some(first) = heard else { break };
                    // Everything already waiting goes into the same passes.
                    let mut targets = BTreeSet::new();
                    let mut lost = false;
                    let mut next = Some(first);
                    while let Some(heard) = next {
                        match heard {
                            Heard::Outbox(target) => {
                                report.notifications += 1;
                                targets.insert(target);
                            }
                            Heard::Lost => lost = true,
                        }
                        next = self.heard.try_recv().ok();
                    }
                    if lost {
                        passes.push(
                            async move {
                                drainer.sweep(deadline).await.unwrap_or_else(|error| {
                                    tracing::warn!(error = %error, "outbox sweep after a lost listener failed");
                                    Vec::new()
                                })
                            }
                            .boxed(),
                        );
                    }
                    if !targets.is_empty() {
                        passes.push(drainer.run(targets, deadline).boxed());
                    }
                }
            }
        }
        while let Some(outcomes) = passes.next().await {
            report.add(outcomes);
        }
        report
    }
}

/// The listener's loop: forwards what it hears until the follower is gone.
async fn read(mut listener: PgListener, sender: mpsc::Sender<Heard>) {
    loop {
        let heard = match listener.try_recv().await {
            Ok(Some(note)) => Heard::Outbox(OutboxRef::live(note.payload())),
            Ok(None) => {
                tracing::warn!(
                    channel = CHANNEL,
                    "outbox listener lost its connection; reconnecting"
                );
                Heard::Lost
            }
            // Reconnecting failed (the database is away): the next receive tries again, and the
            // sweep after the connection loss covers what was committed meanwhile.
            Err(error) => {
                tracing::warn!(channel = CHANNEL, error = %error, "outbox listener failed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if sender.send(heard).await.is_err() {
            return;
        }
    }
}
