//! Delivery (spec mail §6): the `outbox` function claims messages and speaks SMTP.
//!
//! - The immediate lane: a wake-up names one message; one fenced update claims it.
//! - The bulk lane: a wake-up names a profile; a drain claims through the profile's pacing gate,
//!   one message per slot, for at most [`DRAIN_PERIOD`], then wakes itself again when the next
//!   slot or message is due.
//! - The recovery scan (every 30 s): stale claims back to the queue, orphaned and expired bulk
//!   rows settled, leftover objects deleted, and every due message or profile drained.
//!
//! Every update after a claim is fenced by `status = 'sending'` and the claimed attempt count,
//! so a claim that recovery handed to another worker can no longer settle the row. Delivery is
//! at least once: a crash after the server took the message sends it again, with the same
//! Message-ID.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uuid::Uuid;

use super::locks::{self, MailLock, Mode};
use super::objects::{MAX_OBJECT_BYTES, ObjectStore};
use super::policy::{self, Caller};
use super::record::MailFailure;
use super::smtp::{self, Outgoing, OutgoingAttachment, Server};
use super::{MESSAGES_TABLE, MailCode, MailError, MailObjects, attachments, rules, settle};
use crate::outbox::drain::OutboxResolver;
use crate::outbox::{OutboxError, OutboxRef, Wakeups};
use crate::settings::Settings;

/// Attempts of the immediate lane running at once in one process.
pub const IMMEDIATE_CONCURRENCY: usize = 8;
/// Bulk drains running at once in one process.
pub const BULK_CONCURRENCY: usize = 4;
/// How long one bulk drain claims before it hands over to its continuation.
pub const DRAIN_PERIOD: Duration = Duration::from_secs(60);
/// A claim untouched this long belongs to a worker that died: recovery queues it again.
pub const STALE_CLAIM: Duration = Duration::from_secs(5 * 60);
/// How often the recovery scan runs.
pub const RECOVERY_PERIOD: Duration = Duration::from_secs(30);
/// Rows one recovery step looks at.
pub const RECOVERY_BATCH: i64 = 1000;
/// An attempt needs this much of the invocation left to start.
const ATTEMPT_MARGIN: Duration = Duration::from_secs(5);
/// SQS delays a message at most this long; recovery resubmits later retries.
const MAX_WAKEUP_DELAY: Duration = Duration::from_secs(900);

const DEADLINE_EXPIRED: &str = "Outgoing mail delivery deadline expired.";
const UNAVAILABLE: &str = "Outgoing mail delivery is temporarily unavailable.";
const PROFILE_REMOVED: &str = "Outgoing mail profile was removed.";
const NOT_DECLARED: &str = "The application no longer declares mail:send.";
const ACCESS_REVOKED: &str = "The application's access to this outgoing mail profile was revoked.";
const ATTACHMENT_LOST: &str = "An attachment of this message is missing or changed.";

/// The wake-up that runs a recovery scan (the schedule sends it delayed by half its period).
pub fn recovery_wakeup() -> OutboxRef {
    OutboxRef {
        table: MESSAGES_TABLE.to_string(),
        filter: [("recovery".to_string(), "scan".to_string())].into(),
    }
}

/// What a wake-up of outgoing mail asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    Message(Uuid),
    Profile(Uuid),
    Recovery,
}

impl Job {
    pub fn of(target: &OutboxRef) -> Option<Job> {
        if target.table != MESSAGES_TABLE || target.filter.len() != 1 {
            return None;
        }
        let (name, value) = target.filter.iter().next()?;
        match name.as_str() {
            "id" => value.parse().ok().map(Job::Message),
            "profile_id" => value.parse().ok().map(Job::Profile),
            "recovery" if value == "scan" => Some(Job::Recovery),
            _ => None,
        }
    }
}

/// A claimed message with everything its attempt needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub id: Uuid,
    pub app_id: String,
    pub profile_id: Option<Uuid>,
    pub profile_key: String,
    pub lane: String,
    pub to_addresses: Vec<String>,
    pub subject: String,
    pub text_body: Option<String>,
    pub html_body: Option<String>,
    pub headers: Option<Value>,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    pub message_id_header: String,
    pub attachments: Value,
    pub attachment_refs: Option<Value>,
    pub attempt_count: i32,
    pub deadline_at: DateTime<Utc>,
    pub expired: bool,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

const CLAIMED_COLUMNS: &str = "id, app_id, profile_id, profile_key, lane, to_addresses, subject, \
     text_body, html_body, headers, from_name, reply_to, message_id_header, attachments, \
     attachment_refs, attempt_count, deadline_at, deadline_at <= now() AS expired, error_code, error_message";

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Sent {
        response: String,
        failures: Vec<smtp::Rejection>,
    },
    Retry {
        message: String,
        response: Option<String>,
        failures: Vec<smtp::Rejection>,
    },
    Failed {
        code: MailCode,
        message: String,
        response: Option<String>,
        failures: Vec<smtp::Rejection>,
    },
    Cancelled {
        code: MailCode,
        message: &'static str,
    },
}

impl Ending {
    pub fn status(&self) -> &'static str {
        match self {
            Ending::Sent { .. } => "sent",
            Ending::Retry { .. } => "queued",
            Ending::Failed { .. } => "failed",
            Ending::Cancelled { .. } => "cancelled",
        }
    }
}

/// What one bulk claim found: whether the gate was open, the gate after it, and the message.
#[derive(Debug, Clone)]
pub struct BulkClaim {
    /// The database clock the claim ran at (read after the profile lock).
    pub clock: DateTime<Utc>,
    /// Whether this claim took the slot.
    pub granted: bool,
    /// The gate after the claim: the earliest start of the next bulk message.
    pub gate: DateTime<Utc>,
    pub message: Option<Claimed>,
}

/// What a recovery scan did and found.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    pub requeued: u64,
    pub cancelled: u64,
    pub expired: u64,
    pub cleaned: u64,
    pub messages: Vec<Uuid>,
    pub profiles: Vec<Uuid>,
}

/// The delivery side of outgoing mail in one process.
pub struct MailDelivery {
    pool: PgPool,
    settings: Arc<Settings>,
    objects: Arc<MailObjects>,
    wakeups: Arc<dyn Wakeups>,
    extra_roots: Vec<Vec<u8>>,
    hello: String,
    immediate: Semaphore,
    bulk: Semaphore,
}

fn to_outbox(error: MailError) -> OutboxError {
    match error {
        MailError::Database(error) => OutboxError::Database(error),
        other => OutboxError::Queue(other.to_string()),
    }
}

fn failures_json(failures: &[smtp::Rejection], at: DateTime<Utc>) -> Value {
    let failures: Vec<MailFailure> = failures
        .iter()
        .map(|f| MailFailure {
            recipient: f.recipient.clone(),
            reason: f.reason.clone(),
            at: at.to_rfc3339(),
        })
        .collect();
    // A list of strings always serialises.
    serde_json::to_value(failures).unwrap_or_default()
}

/// The profile as an attempt connects with it.
#[derive(Debug, sqlx::FromRow)]
struct SmtpProfile {
    id: Uuid,
    name: String,
    from_address: String,
    from_name: Option<String>,
    smtp_host: String,
    smtp_port: i32,
    smtp_secure: bool,
    smtp_user: Option<String>,
    smtp_password_encrypted: Option<String>,
}

const SMTP_COLUMNS: &str = "id, name, from_address, from_name, smtp_host, smtp_port, smtp_secure, \
     smtp_user, smtp_password_encrypted";

impl MailDelivery {
    pub fn new(
        pool: PgPool,
        settings: Arc<Settings>,
        objects: Arc<MailObjects>,
        wakeups: Arc<dyn Wakeups>,
        extra_roots: Vec<Vec<u8>>,
    ) -> MailDelivery {
        MailDelivery {
            pool,
            settings,
            objects,
            wakeups,
            extra_roots,
            hello: "k2b-cloud.localdomain".to_string(),
            immediate: Semaphore::new(IMMEDIATE_CONCURRENCY),
            bulk: Semaphore::new(BULK_CONCURRENCY),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs what a wake-up asks for; returns how many attempts ended.
    pub async fn run(&self, job: Job, deadline: Option<Instant>) -> Result<u64, MailError> {
        match job {
            Job::Message(id) => self.deliver_message(id, deadline).await,
            Job::Profile(profile) => self.drain_profile(profile, deadline).await,
            Job::Recovery => {
                let found = self.recover().await?;
                Ok(self.deliver_found(&found, deadline).await)
            }
        }
    }

    /// Delivers what a recovery scan found, as far as the invocation allows.
    pub async fn deliver_found(&self, found: &Recovery, deadline: Option<Instant>) -> u64 {
        let messages = found
            .messages
            .iter()
            .map(|id| self.deliver_message(*id, deadline));
        let profiles = found
            .profiles
            .iter()
            .map(|id| self.drain_profile(*id, deadline));
        let (messages, profiles) = futures::future::join(
            futures::future::join_all(messages),
            futures::future::join_all(profiles),
        )
        .await;
        messages
            .into_iter()
            .chain(profiles)
            .map(|result| match result {
                Ok(n) => n,
                Err(error) => {
                    tracing::warn!(error = %error, "outgoing mail delivery pass failed");
                    0
                }
            })
            .sum()
    }

    fn time_left(deadline: Option<Instant>) -> bool {
        deadline.is_none_or(|d| Instant::now() + smtp::ATTEMPT_TIMEOUT + ATTEMPT_MARGIN <= d)
    }

    /// Claims one immediate message if it is queued and due (or past its deadline).
    pub async fn claim_message(&self, id: Uuid) -> Result<Option<Claimed>, MailError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE outgoing_mail.messages
                SET status = 'sending', attempt_count = attempt_count + 1, updated_at = now()
              WHERE id = $1 AND status = 'queued' AND lane = 'immediate'
                AND (next_attempt_at IS NULL OR next_attempt_at <= now() OR deadline_at <= now())
             RETURNING {CLAIMED_COLUMNS}"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn deliver_message(&self, id: Uuid, deadline: Option<Instant>) -> Result<u64, MailError> {
        let Ok(_permit) = self.immediate.acquire().await else {
            return Ok(0);
        };
        if !Self::time_left(deadline) {
            return Ok(0);
        }
        let Some(claimed) = self.claim_message(id).await? else {
            return Ok(0);
        };
        let ending = self.attempt(&claimed).await;
        let ending = self.finish(&claimed, ending).await?;
        if let Some(Ending::Retry { .. }) = ending {
            let delay = rules::backoff(claimed.attempt_count).min(MAX_WAKEUP_DELAY);
            self.wakeups
                .wake_later(super::message_wakeup(id), delay)
                .await;
        }
        Ok(1)
    }

    /// One claim of a profile's bulk lane: takes the slot if the gate is open (moving it one
    /// slot past the later of the gate and the clock), then the first due message.
    pub async fn claim_bulk(&self, profile_id: Uuid) -> Result<Option<BulkClaim>, MailError> {
        let mut tx = self.pool.begin().await?;
        let profile: Option<(DateTime<Utc>, i32)> = sqlx::query_as(
            "SELECT next_bulk_slot_at, pace_per_minute FROM outgoing_mail.profiles
              WHERE id = $1 FOR UPDATE",
        )
        .bind(profile_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((gate, pace)) = profile else {
            return Ok(None);
        };
        // The clock after the lock: a claim that waited must not use the time it started.
        let clock: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&mut *tx)
            .await?;
        if gate > clock {
            tx.rollback().await?;
            return Ok(Some(BulkClaim {
                clock,
                granted: false,
                gate,
                message: None,
            }));
        }
        let next: DateTime<Utc> = sqlx::query_scalar(
            "UPDATE outgoing_mail.profiles
                SET next_bulk_slot_at = greatest(next_bulk_slot_at, $2)
                                        + make_interval(secs => $3 / 1000.0)
              WHERE id = $1 RETURNING next_bulk_slot_at",
        )
        .bind(profile_id)
        .bind(clock)
        .bind(rules::slot_ms(pace))
        .fetch_one(&mut *tx)
        .await?;
        let message: Option<Claimed> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "UPDATE outgoing_mail.messages
                SET status = 'sending', attempt_count = attempt_count + 1, updated_at = now()
              WHERE id = (SELECT id FROM outgoing_mail.messages
                           WHERE profile_id = $1 AND status = 'queued' AND lane = 'bulk'
                             AND coalesce(next_attempt_at, created_at) <= $2
                             AND deadline_at > $2
                           ORDER BY coalesce(next_attempt_at, created_at), id
                           LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING {CLAIMED_COLUMNS}"
        )))
        .bind(profile_id)
        .bind(clock)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(BulkClaim {
            clock,
            granted: true,
            gate: next,
            message,
        }))
    }

    /// How long the drain of a profile waits before its next claim: until both its gate and
    /// its earliest unexpired queued message are due (at most 30 s); `None` when nothing waits.
    pub async fn continuation(&self, profile_id: Uuid) -> Result<Option<Duration>, MailError> {
        let row: Option<(i64, i64, i64)> = sqlx::query_as(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                    (extract(epoch FROM p.next_bulk_slot_at) * 1000)::bigint,
                    (extract(epoch FROM q.due) * 1000)::bigint
               FROM outgoing_mail.profiles p,
                    LATERAL (SELECT coalesce(next_attempt_at, created_at) AS due
                               FROM outgoing_mail.messages
                              WHERE profile_id = p.id AND status = 'queued' AND lane = 'bulk'
                                AND deadline_at > now()
                              ORDER BY coalesce(next_attempt_at, created_at), id
                              LIMIT 1) q
              WHERE p.id = $1",
        )
        .bind(profile_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(now, gate, due)| {
            Duration::from_millis(rules::continuation_delay_ms(now, gate, due).unsigned_abs())
        }))
    }

    /// Drains a profile's bulk lane for at most [`DRAIN_PERIOD`], then wakes itself again.
    pub async fn drain_profile(
        &self,
        profile_id: Uuid,
        deadline: Option<Instant>,
    ) -> Result<u64, MailError> {
        let Ok(_permit) = self.bulk.acquire().await else {
            return Ok(0);
        };
        let started = Instant::now();
        let until = match deadline {
            Some(d) => (started + DRAIN_PERIOD).min(d),
            None => started + DRAIN_PERIOD,
        };
        let mut sent = 0;
        loop {
            if !Self::time_left(deadline) || Instant::now() >= until {
                break;
            }
            let Some(claim) = self.claim_bulk(profile_id).await? else {
                return Ok(sent);
            };
            if let Some(claimed) = claim.message {
                let ending = self.attempt(&claimed).await;
                self.finish(&claimed, ending).await?;
                sent += 1;
                continue;
            }
            let Some(wait) = self.continuation(profile_id).await? else {
                return Ok(sent);
            };
            if Instant::now() + wait >= until {
                break;
            }
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
        if let Some(wait) = self.continuation(profile_id).await? {
            self.wakeups
                .wake_later(super::profile_wakeup(profile_id), wait)
                .await;
        }
        Ok(sent)
    }

    /// The attempt of a claimed message (spec §6, steps 1–8); never fails: every problem is an
    /// ending.
    pub async fn attempt(&self, claimed: &Claimed) -> Ending {
        match self.try_attempt(claimed).await {
            Ok(ending) => ending,
            Err(error) => {
                tracing::warn!(message_id = %claimed.id, error = %error, "outgoing mail attempt could not run");
                Ending::Retry {
                    message: UNAVAILABLE.to_string(),
                    response: None,
                    failures: Vec::new(),
                }
            }
        }
    }

    async fn try_attempt(&self, claimed: &Claimed) -> Result<Ending, MailError> {
        // 1. The deadline ends every retry.
        if claimed.expired {
            return Ok(Ending::Failed {
                code: claimed
                    .error_code
                    .as_deref()
                    .and_then(MailCode::parse)
                    .unwrap_or(MailCode::SmtpFailed),
                message: claimed
                    .error_message
                    .clone()
                    .unwrap_or_else(|| DEADLINE_EXPIRED.to_string()),
                response: None,
                failures: Vec::new(),
            });
        }
        // 2. The profile was deleted.
        let Some(profile_id) = claimed.profile_id else {
            return Ok(cancelled(MailCode::ProfileRemoved, PROFILE_REMOVED));
        };
        // 3. A registered app must still declare mail:send.
        let caller = Caller::of_app(&self.pool, &claimed.app_id).await?;
        if caller.registered && !caller.can_send() {
            return Ok(cancelled(MailCode::ProfileNotAllowed, NOT_DECLARED));
        }
        // 4. The profile the message names, as the app may use it now.
        let profile = {
            let mut tx = self.pool.begin().await?;
            locks::take(&mut tx, MailLock::Policy, Mode::Shared).await?;
            let access = policy::access_of(&mut tx, &claimed.app_id).await?;
            let resolved =
                policy::resolve_profile_for(&mut tx, &access, Some(&claimed.profile_key)).await;
            let ending = match resolved {
                Ok(profile) if profile.id == profile_id => None,
                Ok(_) => Some(cancelled(MailCode::ProfileRemoved, PROFILE_REMOVED)),
                Err(MailError::Fault(fault)) => Some(match fault.code {
                    MailCode::ProfileNotAllowed | MailCode::ProfileRequired => {
                        cancelled(MailCode::ProfileNotAllowed, ACCESS_REVOKED)
                    }
                    _ => cancelled(MailCode::ProfileRemoved, PROFILE_REMOVED),
                }),
                Err(error) => return Err(error),
            };
            if let Some(ending) = ending {
                tx.rollback().await?;
                return Ok(ending);
            }
            // 6 (first half). The credentials of exactly this profile, by id.
            let profile: SmtpProfile = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {SMTP_COLUMNS} FROM outgoing_mail.profiles WHERE id = $1"
            )))
            .bind(profile_id)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            profile
        };
        // 5. Every attachment as it was accepted.
        let attachments = match self.load_attachments(claimed).await? {
            Some(attachments) => attachments,
            None => {
                return Ok(Ending::Failed {
                    code: MailCode::AttachmentLost,
                    message: ATTACHMENT_LOST.to_string(),
                    response: None,
                    failures: Vec::new(),
                });
            }
        };
        let password = self.password(&profile)?;
        let headers = super::record::stored_headers(claimed.headers.as_ref());
        let display_name = rules::display_name(
            claimed.from_name.as_deref(),
            profile.from_name.as_deref(),
            caller.app_name.as_deref(),
            &claimed.app_id,
        );
        let outgoing = Outgoing {
            from_address: &profile.from_address,
            display_name,
            to: &claimed.to_addresses,
            reply_to: claimed.reply_to.as_deref(),
            subject: &claimed.subject,
            text: claimed.text_body.as_deref().unwrap_or(""),
            html: claimed.html_body.as_deref(),
            headers: &headers,
            message_id: &claimed.message_id_header,
            attachments,
        };
        let server = self.server(&profile, password.as_deref());
        // 6–8. One conversation, classified.
        Ok(match smtp::send(&server, &outgoing).await {
            Ok(accepted) => Ending::Sent {
                response: accepted.response,
                failures: accepted.rejected,
            },
            Err(failure) => {
                let failures = failure.all_rejected.clone().unwrap_or_default();
                let retryable = match &failure.all_rejected {
                    Some(rejected) => rules::all_rejected_retryable(
                        &rejected.iter().filter_map(|r| r.code).collect::<Vec<_>>(),
                    ),
                    None => rules::is_retryable(failure.code),
                };
                tracing::info!(
                    message_id = %claimed.id,
                    code = failure.code,
                    retryable,
                    attempt = claimed.attempt_count,
                    "outgoing mail attempt failed"
                );
                if retryable {
                    Ending::Retry {
                        message: failure.message.clone(),
                        response: failure.code.map(|_| failure.message.clone()),
                        failures,
                    }
                } else {
                    Ending::Failed {
                        code: MailCode::SmtpFailed,
                        response: failure.code.map(|_| failure.message.clone()),
                        message: failure.message,
                        failures,
                    }
                }
            }
        })
    }

    /// The attachments of a message, read through and checked against what acceptance stored
    /// (count, size, SHA-256); `None` when one is missing or changed.
    async fn load_attachments(
        &self,
        claimed: &Claimed,
    ) -> Result<Option<Vec<OutgoingAttachment>>, MailError> {
        let meta = claimed.attachments.as_array().cloned().unwrap_or_default();
        let refs = attachments::refs_of(claimed.attachment_refs.as_ref());
        if meta.len() != refs.len() {
            return Ok(None);
        }
        let store: &ObjectStore = self.objects.store().await;
        let mut out = Vec::with_capacity(refs.len());
        for (meta, key) in meta.iter().zip(&refs) {
            let size = meta.get("size").and_then(Value::as_u64);
            let sha = meta.get("sha256").and_then(Value::as_str);
            let (Some(size), Some(sha)) = (size, sha) else {
                return Ok(None);
            };
            let Some(mut chunks) = store.open(key).await? else {
                return Ok(None);
            };
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            let mut hasher = Sha256::new();
            while let Some(chunk) = futures::StreamExt::next(&mut chunks).await {
                let chunk = chunk?;
                if (bytes.len() + chunk.len()) as u64 > size.min(MAX_OBJECT_BYTES) {
                    return Ok(None);
                }
                hasher.update(&chunk);
                bytes.extend_from_slice(&chunk);
            }
            if bytes.len() as u64 != size || hex::encode(hasher.finalize()) != sha {
                return Ok(None);
            }
            out.push(OutgoingAttachment {
                filename: meta
                    .get("filename")
                    .and_then(Value::as_str)
                    .unwrap_or("attachment")
                    .to_string(),
                content_type: meta
                    .get("contentType")
                    .and_then(Value::as_str)
                    .unwrap_or("application/octet-stream")
                    .to_string(),
                bytes,
            });
        }
        Ok(Some(out))
    }

    /// Settles a claimed row with its ending (fenced by the claim), deletes the objects of a
    /// terminal row and signals the waiters. A row another worker reclaimed is left alone.
    pub async fn finish(
        &self,
        claimed: &Claimed,
        ending: Ending,
    ) -> Result<Option<Ending>, MailError> {
        let mut tx = self.pool.begin().await?;
        let at: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await?;
        // A retry that would start after the deadline is the end.
        let ending = match ending {
            Ending::Retry {
                message,
                response,
                failures,
            } if at >= claimed.deadline_at => Ending::Failed {
                code: MailCode::SmtpFailed,
                message,
                response,
                failures,
            },
            other => other,
        };
        let (code, message, response, failures) = match &ending {
            Ending::Sent { response, failures } => {
                (None, None, Some(response.clone()), failures.as_slice())
            }
            Ending::Retry {
                message,
                response,
                failures,
            } => (
                Some(MailCode::SmtpFailed),
                Some(message.clone()),
                response.clone(),
                failures.as_slice(),
            ),
            Ending::Failed {
                code,
                message,
                response,
                failures,
            } => (
                Some(*code),
                Some(message.clone()),
                response.clone(),
                failures.as_slice(),
            ),
            Ending::Cancelled { code, message } => {
                (Some(*code), Some(message.to_string()), None, &[][..])
            }
        };
        let terminal = !matches!(&ending, Ending::Retry { .. });
        let retry_after = rules::backoff(claimed.attempt_count).as_secs_f64();
        let updated = sqlx::query(
            "UPDATE outgoing_mail.messages
                SET status = $3, error_code = $4, error_message = $5,
                    smtp_response = coalesce($6, smtp_response), failures = $7,
                    sent_at = CASE WHEN $3 = 'sent' THEN $8 ELSE sent_at END,
                    next_attempt_at = CASE WHEN $3 = 'queued'
                                           THEN $8 + make_interval(secs => $9) END,
                    attachment_refs = CASE WHEN $10 THEN NULL ELSE attachment_refs END,
                    updated_at = now()
              WHERE id = $1 AND status = 'sending' AND attempt_count = $2",
        )
        .bind(claimed.id)
        .bind(claimed.attempt_count)
        .bind(ending.status())
        .bind(code.map(MailCode::as_str))
        .bind(message)
        .bind(response)
        .bind(failures_json(failures, at))
        .bind(at)
        .bind(retry_after)
        .bind(terminal)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if updated {
            settle::notify(&mut tx, claimed.id).await?;
        }
        tx.commit().await?;
        if !updated {
            tracing::warn!(message_id = %claimed.id, "outgoing mail claim was taken over; its ending is dropped");
            return Ok(None);
        }
        tracing::info!(message_id = %claimed.id, lane = %claimed.lane, status = ending.status(), attempt = claimed.attempt_count, "outgoing mail attempt ended");
        if terminal {
            let refs = attachments::refs_of(claimed.attachment_refs.as_ref());
            // Cleanup errors never send again: recovery deletes what is left.
            attachments::release(&self.pool, self.objects.store().await, &refs).await;
        }
        Ok(Some(ending))
    }

    /// The profile's SMTP password, opened (sealed under its own id).
    fn password(&self, profile: &SmtpProfile) -> Result<Option<String>, MailError> {
        let label = super::profiles::password_label(profile.id);
        Ok(profile
            .smtp_password_encrypted
            .as_deref()
            .map(|sealed| self.settings.unseal(&label, sealed))
            .transpose()?)
    }

    /// Where and how to connect for `profile`.
    fn server<'a>(&'a self, profile: &'a SmtpProfile, password: Option<&'a str>) -> Server<'a> {
        Server {
            host: &profile.smtp_host,
            port: u16::try_from(profile.smtp_port).unwrap_or(25),
            secure: profile.smtp_secure,
            user: profile.smtp_user.as_deref(),
            password,
            extra_roots: &self.extra_roots,
            hello: &self.hello,
        }
    }

    /// An administrator's test message through a profile, sent at once outside the queue;
    /// a failure is `smtp_failed` with the server's redacted answer.
    pub async fn test_send(&self, profile_key: &str, recipient: &str) -> Result<(), MailError> {
        let profile: Option<SmtpProfile> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SMTP_COLUMNS} FROM outgoing_mail.profiles WHERE key = $1"
        )))
        .bind(profile_key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(profile) = profile else {
            return Err(MailError::fault(
                MailCode::ProfileUnknown,
                "Unknown outgoing mail profile.",
            ));
        };
        let name = profile.name.clone();
        let password = self.password(&profile)?;
        let to = [recipient.to_string()];
        let id = Uuid::new_v4();
        let message_id = rules::message_id_header(id, &profile.from_address);
        let display_name = profile.from_name.as_deref().unwrap_or(&name);
        let subject = format!("Test message from the mail profile {profile_key}");
        let text = format!(
            "This message tests the outgoing mail profile \"{name}\" ({profile_key}). \
             It reached you, so the profile works."
        );
        let outgoing = Outgoing {
            from_address: &profile.from_address,
            display_name,
            to: &to,
            reply_to: None,
            subject: &subject,
            text: &text,
            html: None,
            headers: &[],
            message_id: &message_id,
            attachments: Vec::new(),
        };
        let server = self.server(&profile, password.as_deref());
        match smtp::send(&server, &outgoing).await {
            Ok(accepted) if accepted.rejected.is_empty() => Ok(()),
            Ok(accepted) => Err(MailError::fault(
                MailCode::SmtpFailed,
                accepted.rejected[0].reason.clone(),
            )),
            Err(failure) => Err(MailError::fault(MailCode::SmtpFailed, failure.message)),
        }
    }

    /// The recovery scan (spec §6): what it changed, and the messages and profiles now due.
    pub async fn recover(&self) -> Result<Recovery, MailError> {
        let mut found = Recovery::default();
        let mut tx = self.pool.begin().await?;
        found.requeued = sqlx::query(
            "UPDATE outgoing_mail.messages SET status = 'queued', next_attempt_at = now(),
                    updated_at = now()
              WHERE id IN (SELECT id FROM outgoing_mail.messages
                            WHERE status = 'sending'
                              AND updated_at < now() - make_interval(secs => $1)
                            ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(STALE_CLAIM.as_secs_f64())
        .bind(RECOVERY_BATCH)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let cancelled: Vec<(Uuid, Option<Value>)> = sqlx::query_as(
            "WITH t AS (SELECT id, attachment_refs FROM outgoing_mail.messages
                         WHERE status = 'queued' AND lane = 'bulk' AND profile_id IS NULL
                         LIMIT $1 FOR UPDATE SKIP LOCKED)
             UPDATE outgoing_mail.messages m
                SET status = 'cancelled', error_code = $2, error_message = $3,
                    attachment_refs = NULL, next_attempt_at = NULL, updated_at = now()
               FROM t WHERE m.id = t.id
             RETURNING m.id, t.attachment_refs",
        )
        .bind(RECOVERY_BATCH)
        .bind(MailCode::ProfileRemoved.as_str())
        .bind(PROFILE_REMOVED)
        .fetch_all(&mut *tx)
        .await?;
        let expired: Vec<(Uuid, Option<Value>)> = sqlx::query_as(
            "WITH t AS (SELECT id, attachment_refs FROM outgoing_mail.messages
                         WHERE status = 'queued' AND lane = 'bulk' AND deadline_at <= now()
                         ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED)
             UPDATE outgoing_mail.messages m
                SET status = 'failed', error_code = coalesce(m.error_code, $2),
                    error_message = coalesce(m.error_message, $3),
                    attachment_refs = NULL, next_attempt_at = NULL, updated_at = now()
               FROM t WHERE m.id = t.id
             RETURNING m.id, t.attachment_refs",
        )
        .bind(RECOVERY_BATCH)
        .bind(MailCode::SmtpFailed.as_str())
        .bind(DEADLINE_EXPIRED)
        .fetch_all(&mut *tx)
        .await?;
        let leftovers: Vec<(Uuid, Option<Value>)> = sqlx::query_as(
            "WITH t AS (SELECT id, attachment_refs FROM outgoing_mail.messages
                         WHERE attachment_refs IS NOT NULL
                           AND status IN ('sent', 'failed', 'cancelled', 'bounced')
                         LIMIT $1 FOR UPDATE SKIP LOCKED)
             UPDATE outgoing_mail.messages m SET attachment_refs = NULL
               FROM t WHERE m.id = t.id
             RETURNING m.id, t.attachment_refs",
        )
        .bind(RECOVERY_BATCH)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        found.cancelled = cancelled.len() as u64;
        found.expired = expired.len() as u64;
        found.cleaned = leftovers.len() as u64;
        let settled: Vec<Uuid> = cancelled
            .iter()
            .chain(&expired)
            .map(|(id, _)| *id)
            .collect();
        let refs: Vec<String> = cancelled
            .iter()
            .chain(&expired)
            .chain(&leftovers)
            .flat_map(|(_, refs)| attachments::refs_of(refs.as_ref()))
            .collect();
        attachments::release(&self.pool, self.objects.store().await, &refs).await;
        settle::notify_pool(&self.pool, &settled).await;
        found.messages = sqlx::query_scalar(
            "SELECT id FROM outgoing_mail.messages
              WHERE status = 'queued' AND lane = 'immediate'
                AND (next_attempt_at IS NULL OR next_attempt_at <= now() OR deadline_at <= now())
              ORDER BY coalesce(next_attempt_at, created_at), id LIMIT $1",
        )
        .bind(RECOVERY_BATCH)
        .fetch_all(&self.pool)
        .await?;
        found.profiles = sqlx::query_scalar(
            "SELECT DISTINCT profile_id FROM outgoing_mail.messages
              WHERE status = 'queued' AND lane = 'bulk' AND profile_id IS NOT NULL
                AND coalesce(next_attempt_at, created_at) <= now() AND deadline_at > now()",
        )
        .fetch_all(&self.pool)
        .await?;
        if found != Recovery::default() {
            tracing::info!(
                requeued = found.requeued,
                cancelled = found.cancelled,
                expired = found.expired,
                cleaned = found.cleaned,
                due_messages = found.messages.len(),
                due_profiles = found.profiles.len(),
                "outgoing mail recovery"
            );
        }
        Ok(found)
    }
}

fn cancelled(code: MailCode, message: &'static str) -> Ending {
    Ending::Cancelled { code, message }
}

/// Outgoing mail as one family of the bundle's outboxes: wake-ups name a message, a profile or
/// the recovery scan; the sweep is the recovery scan.
impl OutboxResolver for MailDelivery {
    fn pass(
        &self,
        target: &OutboxRef,
        deadline: Option<Instant>,
    ) -> Option<BoxFuture<'_, Result<u64, Arc<OutboxError>>>> {
        let job = Job::of(target)?;
        Some(
            async move {
                self.run(job, deadline)
                    .await
                    .map_err(|e| Arc::new(to_outbox(e)))
            }
            .boxed(),
        )
    }

    fn with_rows(&self) -> BoxFuture<'_, Result<Vec<OutboxRef>, OutboxError>> {
        async move {
            let found = self.recover().await.map_err(to_outbox)?;
            let mut targets: Vec<OutboxRef> = found
                .messages
                .iter()
                .map(|id| super::message_wakeup(*id))
                .collect();
            targets.extend(found.profiles.iter().map(|id| super::profile_wakeup(*id)));
            Ok(targets)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wakeups_name_a_message_a_profile_or_the_recovery_scan() {
        let id = Uuid::new_v4();
        assert_eq!(
            Job::of(&super::super::message_wakeup(id)),
            Some(Job::Message(id))
        );
        assert_eq!(
            Job::of(&super::super::profile_wakeup(id)),
            Some(Job::Profile(id))
        );
        assert_eq!(Job::of(&recovery_wakeup()), Some(Job::Recovery));
        let mut other = recovery_wakeup();
        other.table = "events.outbox".into();
        assert_eq!(Job::of(&other), None);
        let mut bad = super::super::message_wakeup(id);
        bad.filter.insert("id".into(), "not-a-uuid".into());
        assert_eq!(Job::of(&bad), None);
    }

    #[test]
    fn stored_headers_and_refs_read_back() {
        let headers = json!([{"name": "X-App", "value": "a"}, {"bad": 1}]);
        assert_eq!(
            crate::mail::record::stored_headers(Some(&headers)),
            vec![("X-App".to_string(), "a".to_string())]
        );
        assert_eq!(
            attachments::refs_of(Some(&json!(["k1", "k2"]))),
            vec!["k1".to_string(), "k2".to_string()]
        );
        assert!(attachments::refs_of(None).is_empty());
    }
}
