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
use crate::telemetry::metrics::{self, Unit};

/// A family of outboxes this bundle drains (live updates, outgoing mail).
pub trait OutboxResolver: Send + Sync {
    /// The pass a wake-up asks for, if it names an outbox of this family; it ends by
    /// `deadline` and returns how many rows it settled.
    fn pass(
        &self,
        target: &OutboxRef,
        deadline: Option<Instant>,
    ) -> Option<BoxFuture<'_, Result<u64, Arc<OutboxError>>>>;
    /// What the sweep passes over: every outbox of the family with rows due.
    fn with_rows(&self) -> BoxFuture<'_, Result<Vec<OutboxRef>, OutboxError>>;
}

impl OutboxResolver for LiveOutboxes {
    fn pass(
        &self,
        target: &OutboxRef,
        deadline: Option<Instant>,
    ) -> Option<BoxFuture<'_, Result<u64, Arc<OutboxError>>>> {
        let outbox: Arc<Outbox> = LiveOutboxes::resolve(self, target)?;
        Some(async move { outbox.reconcile_until(deadline).await }.boxed())
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

    /// The pass of a wake-up, if any resolver knows its outbox.
    fn pass(
        &self,
        target: &OutboxRef,
        deadline: Option<Instant>,
    ) -> Option<BoxFuture<'_, Result<u64, Arc<OutboxError>>>> {
        self.resolvers.iter().find_map(|r| r.pass(target, deadline))
    }

    /// Whether a resolver knows the outbox of a wake-up.
    pub fn knows(&self, target: &OutboxRef) -> bool {
        self.pass(target, None).is_some()
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
            match self.pass(&target, deadline) {
                Some(pass) => passes.push(async move {
                    let started = Instant::now();
                    let result = pass.await;
                    metrics::observe(
                        "OutboxPassDuration",
                        Unit::Milliseconds,
                        started.elapsed().as_secs_f64() * 1000.0,
                    );
                    if let Err(error) = &result {
                        metrics::count("OutboxFailed", 1);
                        tracing::warn!(table = %target.table, filter = ?target.filter, error = %error, "outbox pass failed");
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
