//! The `outbox` function: drains the Postgres outboxes.
//!
//! - SQS trigger (the wake-up queue): one pass per distinct outbox named in the batch; the
//!   message ids of outboxes whose pass failed are reported as `batchItemFailures`, so only they
//!   come back (and land in the dead-letter queue after repeated failures).
//! - Schedule trigger (every minute): a pass of every outbox with rows (lost wake-ups, retries
//!   that fell due), which for outgoing mail is its recovery scan; a wake-up delayed by 30 s runs
//!   the scan again half a minute later; and once a day from 00:00 UTC the mail retention. Then
//!   the run follows the live outboxes for the rest of `K2B_OUTBOX_FOLLOW_SECONDS` (65 s: the
//!   next run listens before this one stops): a live row any writer commits is published at
//!   once, without a wake-up message (writers outside this bundle cannot send one).
//!
//! Passes stop claiming when the invocation has less than a claim period (plus a margin) left.

use std::collections::HashMap;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::lambda::{EventFuture, Function, Invocation};
use k2b_core::mail::MailError;
use k2b_core::mail::delivery::{RECOVERY_PERIOD, recovery_wakeup};
use k2b_core::mail::retention::{self, Removed};
use k2b_core::outbox::config::DEFAULT_CLAIM;
use k2b_core::outbox::engine::DEADLINE_MARGIN;
use k2b_core::outbox::{Drainer, FollowReport, Follower, OutboxError, OutboxRef, PassOutcome};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

/// The function: the database, both queues (it publishes live updates and sends delayed
/// wake-ups for retries), the settings (the SMTP passwords of mail profiles, the retention) and
/// the attachment objects of outgoing mail.
pub const FUNCTION: Function = Function {
    name: "outbox",
    needs: Needs::DATABASE
        .with_queues()
        .with_settings()
        .with_mail_objects(),
};

/// The handler of both triggers, passes bounded by the invocation's deadline.
pub fn handler(core: Core) -> impl Fn(Invocation) -> EventFuture {
    let drainer = std::sync::Arc::new(core.drainer());
    move |invocation| {
        let (core, drainer) = (core.clone(), drainer.clone());
        Box::pin(async move {
            Ok(handle(
                &core,
                &drainer,
                invocation.payload,
                Some(invocation.deadline),
            )
            .await?)
        })
    }
}

/// Runs the passes a batch of wake-ups asks for and reports the messages of failed passes.
pub async fn handle_wakeups(
    drainer: &Drainer,
    event: SqsEvent,
    deadline: Option<Instant>,
) -> SqsBatchResponse {
    let mut messages: HashMap<OutboxRef, Vec<String>> = HashMap::new();
    for record in event.records {
        let Some(id) = record.message_id else {
            continue;
        };
        match record.body.as_deref().and_then(OutboxRef::from_message) {
            Some(target) => messages.entry(target).or_default().push(id),
            // Malformed bodies can never succeed; retrying them would only fill the DLQ.
            None => tracing::warn!(message_id = %id, "malformed outbox wake-up ignored"),
        }
    }
    let outcomes = drainer.run(messages.keys().cloned(), deadline).await;
    let mut response = SqsBatchResponse::default();
    for PassOutcome { target, result } in outcomes {
        let drained = result.as_ref().map(|n| *n).unwrap_or(0);
        tracing::info!(table = %target.table, filter = ?target.filter, drained, ok = result.is_ok(), "outbox pass");
        if result.is_err() {
            for id in messages.remove(&target).unwrap_or_default() {
                response.add_failure(id);
            }
        }
    }
    response
}

/// What a scheduled sweep did.
#[derive(Debug, Default, Serialize)]
pub struct SweepReport {
    pub outboxes: usize,
    pub drained: u64,
    pub failed: usize,
    /// The day's mail retention, when this run did it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mail_retention: Option<Removed>,
    /// What the run did while following the live outboxes after the sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub followed: Option<FollowReport>,
}

/// A pass of every outbox with rows.
pub async fn sweep(
    drainer: &Drainer,
    deadline: Option<Instant>,
) -> Result<SweepReport, OutboxError> {
    let outcomes = drainer.sweep(deadline).await?;
    let mut report = SweepReport {
        outboxes: outcomes.len(),
        ..SweepReport::default()
    };
    for outcome in outcomes {
        match outcome.result {
            Ok(n) => report.drained += n,
            Err(_) => report.failed += 1,
        }
    }
    if report.outboxes > 0 {
        tracing::info!(
            outboxes = report.outboxes,
            drained = report.drained,
            failed = report.failed,
            "outbox sweep"
        );
    }
    Ok(report)
}

/// Whether an event is an SQS batch (else it is a schedule).
pub fn is_sqs_event(payload: &Value) -> bool {
    payload
        .get("Records")
        .and_then(Value::as_array)
        .and_then(|records| records.first())
        .and_then(|record| record.get("eventSource"))
        .and_then(Value::as_str)
        == Some("aws:sqs")
}

/// The schedule's run: the recovery scan again in half a minute (a delayed wake-up), the sweep
/// now, and the day's mail retention if no run did it yet today.
pub async fn scheduled(
    core: &Core,
    drainer: &Drainer,
    deadline: Option<Instant>,
) -> Result<SweepReport, OutboxError> {
    core.wakeups
        .wake_later(recovery_wakeup(), RECOVERY_PERIOD)
        .await;
    let mut report = sweep(drainer, deadline).await?;
    report.mail_retention = mail_retention(core).await;
    Ok(report)
}

/// The day's retention of outgoing mail, once a day across every environment; failures are
/// logged (tomorrow's run takes what is left).
async fn mail_retention(core: &Core) -> Option<Removed> {
    let run = async {
        if !retention::claim_today(&core.pool).await? {
            return Ok::<_, MailError>(None);
        }
        let policy = k2b_core::mail::admin::retention(&core.settings).await?;
        let store = core.mail_objects.store().await;
        retention::run(&core.pool, store, policy).await.map(Some)
    };
    match run.await {
        Ok(removed) => removed,
        Err(error) => {
            tracing::warn!(error = %error, "outgoing mail retention failed");
            None
        }
    }
}

/// Handles any event of the function: an SQS batch or a schedule.
pub async fn handle(
    core: &Core,
    drainer: &Drainer,
    payload: Value,
    deadline: Option<Instant>,
) -> Result<Value, OutboxError> {
    if is_sqs_event(&payload) {
        let event: SqsEvent = serde_json::from_value(payload)
            .map_err(|e| OutboxError::Queue(format!("unreadable SQS event: {e}")))?;
        let response = handle_wakeups(drainer, event, deadline).await;
        return serde_json::to_value(response).map_err(|e| OutboxError::Queue(e.to_string()));
    }
    let report = scheduled_and_follow(core, drainer, deadline).await?;
    serde_json::to_value(report).map_err(|e| OutboxError::Queue(e.to_string()))
}

/// The schedule's run in an execution environment: listening first (so no commit during the
/// sweep goes unheard), [`scheduled`], then following the live outboxes until the follow time
/// is over or too little of the invocation is left for a pass to claim.
pub async fn scheduled_and_follow(
    core: &Core,
    drainer: &Drainer,
    deadline: Option<Instant>,
) -> Result<SweepReport, OutboxError> {
    let started = Instant::now();
    let follow = core.config.outbox_follow;
    let follower = if follow.is_zero() {
        None
    } else {
        match Follower::listen(&core.pool).await {
            Ok(follower) => Some(follower),
            Err(error) => {
                tracing::warn!(error = %error, "live outboxes not followed; the sweep covers them");
                None
            }
        }
    };
    let mut report = scheduled(core, drainer, deadline).await?;
    if let Some(follower) = follower {
        let until = follow_until(started, follow, deadline);
        let followed = follower.follow(drainer, Some(until), deadline).await;
        tracing::info!(
            notifications = followed.notifications,
            passes = followed.passes,
            drained = followed.drained,
            failed = followed.failed,
            "live outboxes followed"
        );
        report.followed = Some(followed);
    }
    Ok(report)
}

/// When following stops: after the follow time, or once a live pass could no longer claim
/// before the invocation's deadline.
fn follow_until(
    started: Instant,
    follow: std::time::Duration,
    deadline: Option<Instant>,
) -> Instant {
    let end = started + follow;
    match deadline {
        Some(deadline) => end.min(
            deadline
                .checked_sub(DEFAULT_CLAIM + DEADLINE_MARGIN)
                .unwrap_or(started),
        ),
        None => end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn following_ends_while_a_pass_can_still_claim() {
        let started = Instant::now();
        let follow = Duration::from_secs(65);
        // The template's 150 s: the whole follow time.
        let long = follow_until(started, follow, Some(started + Duration::from_secs(150)));
        assert_eq!(long, started + follow);
        // A short invocation stops following a claim and a margin before its end.
        let short = follow_until(started, follow, Some(started + Duration::from_secs(45)));
        assert_eq!(short, started + Duration::from_secs(10));
        // Too short for any claim: no following at all.
        let none = follow_until(started, follow, Some(started + Duration::from_secs(20)));
        assert!(none <= started);
        assert_eq!(follow_until(started, follow, None), started + follow);
    }
}
