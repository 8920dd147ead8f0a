//! Draining outboxes on request: the passes behind a batch of wake-ups and the scheduled sweep.
//! Used by the `outbox` function and by the local runner's in-process drainer.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::engine::Outbox;
use super::live::LiveOutboxes;
use super::{OutboxError, OutboxRef};

/// A family of outboxes this bundle drains (live updates now; mail delivery later).
pub trait OutboxResolver: Send + Sync {
    /// The outbox a wake-up names, if it belongs to this family.
    fn resolve(&self, target: &OutboxRef) -> Option<Arc<Outbox>>;
    /// Every outbox of the family that has rows (for the sweep).
    fn with_rows(&self) -> BoxFuture<'_, Result<Vec<OutboxRef>, OutboxError>>;
}

impl OutboxResolver for LiveOutboxes {
    fn resolve(&self, target: &OutboxRef) -> Option<Arc<Outbox>> {
        LiveOutboxes::resolve(self, target)
    }
    fn with_rows(&self) -> BoxFuture<'_, Result<Vec<OutboxRef>, OutboxError>> {
        LiveOutboxes::with_rows(self).boxed()
    }
}

/// The result of one outbox's pass.
#[derive(Debug)]
pub struct PassOutcome {
    pub target: OutboxRef,
    pub result: Result<u64, Arc<OutboxError>>,
}

/// Runs passes of the outboxes its resolvers know.
pub struct Drainer {
    resolvers: Vec<Arc<dyn OutboxResolver>>,
}

impl Drainer {
    pub fn new(resolvers: Vec<Arc<dyn OutboxResolver>>) -> Drainer {
        Drainer { resolvers }
    }

    /// The outbox of a wake-up, if any resolver knows it.
    pub fn resolve(&self, target: &OutboxRef) -> Option<Arc<Outbox>> {
        self.resolvers.iter().find_map(|r| r.resolve(target))
    }

    /// One pass per distinct known target, concurrently. Unknown targets are skipped (a
    /// message naming them can never succeed, so it is not worth a retry).
    pub async fn run(
        &self,
        targets: impl IntoIterator<Item = OutboxRef>,
        deadline: Option<Instant>,
    ) -> Vec<PassOutcome> {
        let distinct: BTreeSet<OutboxRef> = targets.into_iter().collect();
        let mut passes = Vec::new();
        for target in distinct {
            match self.resolve(&target) {
                Some(outbox) => passes.push(async move {
                    let result = outbox.reconcile_until(deadline).await;
                    if let Err(error) = &result {
                        tracing::warn!(outbox = %outbox.config().name, error = %error, "Outbox reconcile failed");
                    }
                    PassOutcome { target, result }
                }),
                None => tracing::warn!(table = %target.table, "wake-up for an unknown outbox ignored"),
            }
        }
        futures::future::join_all(passes).await
    }

    /// A pass of every outbox that has rows: catches lost wake-ups and retries that fell due.
    pub async fn sweep(&self, deadline: Option<Instant>) -> Result<Vec<PassOutcome>, OutboxError> {
        let mut targets = Vec::new();
        for resolver in &self.resolvers {
            targets.extend(resolver.with_rows().await?);
        }
        Ok(self.run(targets, deadline).await)
    }
}
