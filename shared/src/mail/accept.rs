//! Acceptance: `send` (one message, immediate lane) and `enqueue` (up to 1,000, bulk lane).
//! Checks run once before attachments are stored (so a refused call stores nothing) and again
//! inside the transaction that inserts, under the fixed lock order of [`super::locks`].

use std::collections::{BTreeMap, HashMap};
use tokio::time::Instant;

use serde_json::{Value, json};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::attachments::{self, Stored};
use super::locks::{self, MailLock, Mode};
use super::objects::ObjectStore;
use super::policy::{self, Caller, ProfileRow};
use super::record::{MESSAGE_COLUMNS, MessageRow};
use super::rules;
use super::validate::{self, MailMessage};
use super::{MailCode, MailError, message_wakeup, profile_wakeup};
use crate::audit::{self, AuditActor, AuditRecord, AuditTarget, Outcome};
use crate::outbox::Wakeups;

/// What acceptance needs of the process.
pub struct MailContext<'a> {
    pub pool: &'a PgPool,
    pub objects: &'a ObjectStore,
    pub wakeups: &'a dyn Wakeups,
    pub request_id: Option<String>,
}

/// The result of `enqueue`: the batch and every message's id in input order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailEnqueued)]
pub struct Enqueued {
    pub batch_id: Uuid,
    pub ids: Vec<Uuid>,
}

/// How long a message may wait for delivery before it fails.
pub const DELIVERY_DEADLINE_HOURS: i64 = 24;
/// The audit action of every acceptance call.
pub const SEND_ACTION: &str = "outgoing_mail.send";

/// The answer when the reply to COMMIT was lost and a re-read could not tell the outcome.
const UNKNOWN_OUTCOME: &str =
    "Outgoing mail acceptance could not be determined. Retry with the same keys.";

/// One message ready to insert.
struct NewRow<'m> {
    id: Uuid,
    message: &'m MailMessage,
    profile: ProfileRow,
    stored: Stored,
}

fn audit_actor(caller: &Caller, message: Option<&MailMessage>) -> AuditActor {
    let snapshot = message.and_then(|m| m.actor.as_ref());
    match snapshot {
        Some(actor) => AuditActor {
            user_id: match actor.kind {
                validate::ActorKind::User => actor.id.parse().ok(),
                validate::ActorKind::ServiceAccount => None,
            },
            uid: Some(actor.id.clone()),
            ..AuditActor::default()
        },
        None => AuditActor {
            uid: Some(caller.app_id.clone()),
            ..AuditActor::default()
        },
    }
}

/// What the audit row of a refused call tells of its messages: how many, to how many
/// recipients, and the actor the first names (never an address).
#[derive(Debug, Default, Clone, Copy)]
pub struct Refused<'m> {
    pub count: usize,
    pub recipients: usize,
    pub first: Option<&'m MailMessage>,
}

impl<'m> Refused<'m> {
    /// Of valid messages.
    pub fn of(messages: &'m [MailMessage]) -> Refused<'m> {
        Refused {
            count: messages.len(),
            recipients: messages.iter().map(|m| m.to.len()).sum(),
            first: messages.first(),
        }
    }

    /// Of a body that was refused before it was read as messages (one message or an array):
    /// as far as its `to` arrays can be counted.
    pub fn of_body(body: Option<&Value>) -> Refused<'m> {
        let recipients = |message: &Value| {
            message
                .get("to")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        };
        match body {
            Some(Value::Array(messages)) => Refused {
                count: messages.len(),
                recipients: messages.iter().map(recipients).sum(),
                first: None,
            },
            Some(message @ Value::Object(_)) => Refused {
                count: 1,
                recipients: recipients(message),
                first: None,
            },
            _ => Refused::default(),
        }
    }
}

/// Records a refused call (its own transaction; a failure to record is logged).
pub async fn audit_denied(
    ctx: &MailContext<'_>,
    caller: &Caller,
    refused: Refused<'_>,
    error: &MailError,
) {
    let code = error
        .code()
        .map(MailCode::as_str)
        .unwrap_or("mail_unavailable");
    let mut event = AuditRecord::new(SEND_ACTION, Outcome::Denied)
        .actor(audit_actor(caller, refused.first))
        .request_id(ctx.request_id.clone())
        .meta("app", caller.app_id.clone())
        .meta("recipientCount", refused.recipients)
        .meta("count", refused.count);
    event.error_code = Some(code.to_string());
    record_alone(ctx, caller, &event).await;
}

/// Writes an audit row of a call that changed nothing, in its own transaction; a failure to
/// record is logged.
async fn record_alone(ctx: &MailContext<'_>, caller: &Caller, event: &AuditRecord) {
    let result = async {
        let mut conn = ctx.pool.acquire().await?;
        audit::record(&mut conn, event).await?;
        Ok::<_, MailError>(())
    };
    if let Err(error) = result.await {
        tracing::warn!(app_id = %caller.app_id, action = %event.action, outcome = ?event.outcome, error = %error, "mail call not audited");
    }
}

/// The outcome of `send`: the message, and whether this call created it (a known key answers
/// the message stored under it, as it is).
#[derive(Debug, Clone)]
pub struct Sent {
    pub row: MessageRow,
    pub created: bool,
}

/// Accepts one message on the immediate lane and wakes its delivery. A known key returns the
/// message stored under it, whatever its state.
pub async fn send(
    ctx: &MailContext<'_>,
    caller: &Caller,
    message: MailMessage,
) -> Result<Sent, MailError> {
    let deadline = Instant::now() + attachments::UPLOAD_BUDGET;
    let outcome = send_checked(ctx, caller, &message, deadline).await;
    // An upload the message named and no stored message took belongs to nobody now.
    attachments::discard_uploads(ctx.pool, ctx.objects, &caller.app_id, &message.uploads()).await;
    match &outcome {
        Err(error) => {
            audit_denied(
                ctx,
                caller,
                Refused::of(std::slice::from_ref(&message)),
                error,
            )
            .await;
        }
        Ok(sent) if !sent.created => audit_known(ctx, caller, &message, &sent.row).await,
        Ok(sent) => {
            if sent.row.status == "queued" && sent.row.attempt_count == 0 {
                ctx.wakeups.wake(message_wakeup(sent.row.id)).await;
            }
        }
    }
    outcome
}

/// The audit row of an accepted message (in the acceptance transaction).
fn sent_event(
    ctx: &MailContext<'_>,
    caller: &Caller,
    message: &MailMessage,
    id: Uuid,
    profile: &str,
    attachments: usize,
) -> AuditRecord {
    AuditRecord::new(SEND_ACTION, Outcome::Allowed)
        .actor(audit_actor(caller, Some(message)))
        .target(AuditTarget::new("outgoing_mail.message", id))
        .request_id(ctx.request_id.clone())
        .meta("app", caller.app_id.clone())
        .meta("profile", profile.to_string())
        .meta("recipientCount", message.to.len())
        .meta("attachments", attachments)
        .meta("id", id.to_string())
}

/// Records a send answered with the message already stored under its key (a failure to record
/// is logged: the call changed nothing).
async fn audit_known(
    ctx: &MailContext<'_>,
    caller: &Caller,
    message: &MailMessage,
    row: &MessageRow,
) {
    let event = sent_event(ctx, caller, message, row.id, &row.profile_key, 0).meta("known", true);
    record_alone(ctx, caller, &event).await;
}

async fn send_checked(
    ctx: &MailContext<'_>,
    caller: &Caller,
    message: &MailMessage,
    deadline: Instant,
) -> Result<Sent, MailError> {
    caller.require_send()?;
    let app = caller.app_id.as_str();
    if let Some(key) = &message.key
        && let Some(row) = find_by_key(ctx.pool, app, key).await?
    {
        return Ok(Sent {
            row,
            created: false,
        });
    }
    let stored = if message.attachments.is_empty() {
        Stored::default()
    } else {
        // Refuse before storing anything.
        let profile = {
            let mut tx = ctx.pool.begin().await?;
            locks::take(&mut tx, MailLock::Policy, Mode::Shared).await?;
            let profile = policy::resolve_profile(&mut tx, app, message.profile.as_deref()).await?;
            let used = policy::quota_used(&mut tx, app, profile.id).await?;
            policy::check_quota(profile.daily_recipient_limit, used, message.to.len() as i64)?;
            tx.rollback().await?;
            profile
        };
        attachments::store_all(
            ctx.pool,
            ctx.objects,
            app,
            &message.attachments,
            profile.max_attachment_bytes.max(0) as u64,
            deadline,
        )
        .await?
    };
    let id = Uuid::new_v4();
    match accept_one(ctx, caller, message, id, &stored).await {
        Ok(Some(row)) => Ok(Sent { row, created: true }),
        // Another call with the same key won: its message owns the outcome.
        Ok(None) => {
            attachments::release(ctx.pool, ctx.objects, &stored.keys).await;
            let key = message.key.as_deref().unwrap_or_default();
            let row = find_by_key(ctx.pool, app, key)
                .await?
                .ok_or_else(|| MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME))?;
            Ok(Sent {
                row,
                created: false,
            })
        }
        Err(error @ MailError::Fault(_)) => {
            attachments::release(ctx.pool, ctx.objects, &stored.keys).await;
            Err(error)
        }
        // The transaction's outcome may be unknown: whatever row exists owns it.
        Err(error) => {
            tracing::warn!(app_id = app, error = %error, "send acceptance failed; checking its outcome");
            match recover_send(ctx, app, message.key.as_deref(), id).await {
                Ok(Some(row)) => {
                    let created = row.id == id;
                    if !created {
                        attachments::release(ctx.pool, ctx.objects, &stored.keys).await;
                    }
                    Ok(Sent { row, created })
                }
                Ok(None) => {
                    attachments::release(ctx.pool, ctx.objects, &stored.keys).await;
                    Err(error)
                }
                // Its objects stay (they expire on their own); the same key answers the message
                // if it was stored.
                Err(_) => Err(MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME)),
            }
        }
    }
}

/// After an error that may hide a committed send: waits for the call's lock (its transaction
/// has then ended either way) and reads the message its key or id names.
async fn recover_send(
    ctx: &MailContext<'_>,
    app: &str,
    key: Option<&str>,
    id: Uuid,
) -> Result<Option<MessageRow>, MailError> {
    let mut tx = ctx.pool.begin().await?;
    locks::take(&mut tx, MailLock::Call(id), Mode::Exclusive).await?;
    let row = match key {
        Some(key) => fetch_by_key(&mut tx, app, key).await?,
        None => fetch_row(&mut tx, id).await?,
    };
    tx.rollback().await?;
    Ok(row)
}

/// The acceptance transaction of one message: `None` when its key was taken meanwhile.
async fn accept_one(
    ctx: &MailContext<'_>,
    caller: &Caller,
    message: &MailMessage,
    id: Uuid,
    stored: &Stored,
) -> Result<Option<MessageRow>, MailError> {
    let app = caller.app_id.as_str();
    let mut tx = ctx.pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Shared).await?;
    locks::take(&mut tx, MailLock::App(app), Mode::Shared).await?;
    if let Some(key) = &message.key {
        locks::take(&mut tx, MailLock::Key(app, key), Mode::Exclusive).await?;
        if key_exists(&mut tx, app, key).await? {
            return Ok(None);
        }
    }
    let profile = policy::resolve_profile(&mut tx, app, message.profile.as_deref()).await?;
    if stored.total() > profile.max_attachment_bytes.max(0) as u64 {
        return Err(MailError::attachments_too_large());
    }
    locks::take(&mut tx, MailLock::Quota(app, profile.id), Mode::Exclusive).await?;
    let used = policy::quota_used(&mut tx, app, profile.id).await?;
    policy::check_quota(profile.daily_recipient_limit, used, message.to.len() as i64)?;
    locks::take(&mut tx, MailLock::Call(id), Mode::Exclusive).await?;
    if !attachments::claim(&mut tx, stored).await? {
        return Err(MailError::fault(
            MailCode::BadInput,
            "An attachment names an upload that is already used.",
        ));
    }
    let rows = [NewRow {
        id,
        message,
        profile: profile.clone(),
        stored: stored.clone(),
    }];
    let inserted = insert(&mut tx, app, "immediate", None, &rows).await?;
    if inserted == 0 {
        return Ok(None);
    }
    let event = sent_event(ctx, caller, message, id, &profile.key, stored.meta.len());
    audit::record(&mut tx, &event).await?;
    let row = fetch_row(&mut tx, id).await?;
    tx.commit().await?;
    Ok(row)
}

/// Accepts a batch on the bulk lane: all or nothing. Returns at once; delivery is paced per
/// profile.
pub async fn enqueue(
    ctx: &MailContext<'_>,
    caller: &Caller,
    messages: Vec<MailMessage>,
) -> Result<Enqueued, MailError> {
    let deadline = Instant::now() + attachments::UPLOAD_BUDGET;
    let outcome = enqueue_checked(ctx, caller, &messages, deadline).await;
    // Uploads the messages named and no stored message took belong to nobody now.
    let uploads: Vec<Uuid> = messages.iter().flat_map(MailMessage::uploads).collect();
    attachments::discard_uploads(ctx.pool, ctx.objects, &caller.app_id, &uploads).await;
    match outcome {
        Ok((enqueued, profiles)) => {
            for profile in profiles {
                ctx.wakeups.wake(profile_wakeup(profile)).await;
            }
            Ok(enqueued)
        }
        Err(error) => {
            audit_denied(ctx, caller, Refused::of(&messages), &error).await;
            Err(error)
        }
    }
}

/// The profile key of a message (`None`: the default) and the map key of its resolution.
fn profile_slot(message: &MailMessage) -> String {
    message.profile.clone().unwrap_or_default()
}

/// Resolves each distinct profile of the fresh messages (sorted), and checks quota and backlog
/// per profile. Returns the profile of each slot.
async fn check_batch(
    conn: &mut PgConnection,
    app: &str,
    fresh: &[&MailMessage],
    lock: bool,
) -> Result<BTreeMap<String, ProfileRow>, MailError> {
    let mut resolved: BTreeMap<String, ProfileRow> = BTreeMap::new();
    if fresh.is_empty() {
        return Ok(resolved);
    }
    let access = policy::access_of(conn, app).await?;
    for message in fresh {
        let slot = profile_slot(message);
        if let std::collections::btree_map::Entry::Vacant(vacant) = resolved.entry(slot) {
            let profile =
                policy::resolve_profile_for(conn, &access, message.profile.as_deref()).await?;
            vacant.insert(profile);
        }
    }
    // Per profile: recipients and messages of this batch.
    let mut load: BTreeMap<Uuid, (ProfileRow, i64, i64)> = BTreeMap::new();
    for message in fresh {
        if let Some(profile) = resolved.get(&profile_slot(message)) {
            let entry = load
                .entry(profile.id)
                .or_insert_with(|| (profile.clone(), 0, 0));
            entry.1 += message.to.len() as i64;
            entry.2 += 1;
        }
    }
    if lock {
        for id in load.keys() {
            locks::take(conn, MailLock::Quota(app, *id), Mode::Exclusive).await?;
        }
        for id in load.keys() {
            locks::take(conn, MailLock::Backlog(*id), Mode::Exclusive).await?;
        }
    }
    for (profile, recipients, count) in load.values() {
        let used = policy::quota_used(conn, app, profile.id).await?;
        policy::check_quota(profile.daily_recipient_limit, used, *recipients)?;
        let queued: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outgoing_mail.messages
             WHERE status = 'queued' AND lane = 'bulk' AND profile_id = $1",
        )
        .bind(profile.id)
        .fetch_one(&mut *conn)
        .await?;
        if rules::backlog_full(queued, *count, profile.pace_per_minute) {
            return Err(MailError::fault(
                MailCode::BacklogFull,
                "This mail profile's bulk backlog is full; try again later.",
            ));
        }
    }
    Ok(resolved)
}

/// Known keys of an app: key → (id, batch id).
async fn known_keys(
    conn: &mut PgConnection,
    app: &str,
    keys: &[String],
) -> Result<HashMap<String, (Uuid, Option<Uuid>)>, MailError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, Uuid, Option<Uuid>)> = sqlx::query_as(
        "SELECT idempotency_key, id, batch_id FROM outgoing_mail.messages
         WHERE app_id = $1 AND idempotency_key = ANY($2)",
    )
    .bind(app)
    .bind(keys)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(key, id, batch)| (key, (id, batch)))
        .collect())
}

async fn enqueue_checked(
    ctx: &MailContext<'_>,
    caller: &Caller,
    messages: &[MailMessage],
    deadline: Instant,
) -> Result<(Enqueued, Vec<Uuid>), MailError> {
    caller.require_send()?;
    let app = caller.app_id.as_str();
    let keys: Vec<String> = messages.iter().filter_map(|m| m.key.clone()).collect();
    // Refuse before storing anything (a call without attachments has nothing to store, and
    // its acceptance transaction checks everything).
    let (known_before, profiles) = if messages.iter().all(|m| m.attachments.is_empty()) {
        (HashMap::new(), BTreeMap::new())
    } else {
        let mut tx = ctx.pool.begin().await?;
        locks::take(&mut tx, MailLock::Policy, Mode::Shared).await?;
        locks::take(&mut tx, MailLock::App(app), Mode::Exclusive).await?;
        let known = known_keys(&mut tx, app, &keys).await?;
        let fresh: Vec<&MailMessage> = messages
            .iter()
            .filter(|m| m.key.as_ref().is_none_or(|k| !known.contains_key(k)))
            .collect();
        let profiles = check_batch(&mut tx, app, &fresh, false).await?;
        tx.rollback().await?;
        (known, profiles)
    };
    // Store the attachments of the fresh messages, one message after the other, under one
    // deadline for the whole call.
    let mut stored: Vec<Option<Stored>> = Vec::with_capacity(messages.len());
    let mut all_keys: Vec<String> = Vec::new();
    for message in messages {
        let is_known = message
            .key
            .as_ref()
            .is_some_and(|k| known_before.contains_key(k));
        if is_known || message.attachments.is_empty() {
            stored.push(None);
            continue;
        }
        // Every fresh message's profile was resolved above.
        let stored_now = match profiles.get(&profile_slot(message)) {
            Some(profile) => {
                let budget = profile.max_attachment_bytes.max(0) as u64;
                attachments::store_all(
                    ctx.pool,
                    ctx.objects,
                    app,
                    &message.attachments,
                    budget,
                    deadline,
                )
                .await
            }
            None => Err(MailError::fault(
                MailCode::MailUnavailable,
                super::UNAVAILABLE_MESSAGE,
            )),
        };
        match stored_now {
            Ok(objects) => {
                all_keys.extend(objects.keys.iter().cloned());
                stored.push(Some(objects));
            }
            Err(error) => {
                attachments::release(ctx.pool, ctx.objects, &all_keys).await;
                return Err(error);
            }
        }
    }
    // Ids are chosen before the transaction, so a caller that lost the reply to COMMIT can
    // look for exactly its own rows.
    let ids: Vec<Uuid> = messages.iter().map(|_| Uuid::new_v4()).collect();
    let batch_lock = Uuid::new_v4();
    let attempt = accept_batch(
        ctx,
        caller,
        messages,
        &ids,
        &stored,
        &known_before,
        batch_lock,
    )
    .await;
    let accepted = match attempt {
        Ok(accepted) => accepted,
        Err(error @ MailError::Fault(_)) => {
            attachments::release(ctx.pool, ctx.objects, &all_keys).await;
            return Err(error);
        }
        Err(error) => {
            tracing::warn!(app_id = app, error = %error, "batch acceptance failed; checking its outcome");
            match recover_batch(ctx, app, messages, &ids, batch_lock).await {
                // The reply to COMMIT was lost and the batch is stored: it is accepted.
                Ok(Some(accepted)) => accepted,
                Ok(None) => {
                    attachments::release(ctx.pool, ctx.objects, &all_keys).await;
                    return Err(error);
                }
                // Whether it is stored cannot be told: its objects stay (they expire on their
                // own), and the same keys will return the batch if it was.
                Err(_) => return Err(MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME)),
            }
        }
    };
    // Objects of messages that were not created by this call belong to nobody.
    let orphaned: Vec<String> = stored
        .iter()
        .zip(&ids)
        .filter(|(_, id)| !accepted.created.contains(id))
        .filter_map(|(objects, _)| objects.as_ref())
        .flat_map(|objects| objects.keys.iter().cloned())
        .collect();
    attachments::release(ctx.pool, ctx.objects, &orphaned).await;
    Ok((accepted.enqueued, accepted.profiles))
}

/// What a stored batch is: the answer, the ids this call created, and the profiles to wake.
struct AcceptedBatch {
    enqueued: Enqueued,
    created: Vec<Uuid>,
    profiles: Vec<Uuid>,
}

/// After an error that may hide a committed batch: waits for the call's lock (the batch's
/// transaction has then ended either way) and reads what it stored. `None`: nothing.
async fn recover_batch(
    ctx: &MailContext<'_>,
    app: &str,
    messages: &[MailMessage],
    ids: &[Uuid],
    lock: Uuid,
) -> Result<Option<AcceptedBatch>, MailError> {
    let mut tx = ctx.pool.begin().await?;
    locks::take(&mut tx, MailLock::Call(lock), Mode::Exclusive).await?;
    let rows: Vec<(Uuid, Option<Uuid>)> = sqlx::query_as(
        "SELECT id, profile_id FROM outgoing_mail.messages WHERE batch_id = $1 AND id = ANY($2)",
    )
    .bind(lock)
    .bind(ids)
    .fetch_all(&mut *tx)
    .await?;
    if rows.is_empty() {
        tx.rollback().await?;
        return Ok(None);
    }
    let keys: Vec<String> = messages.iter().filter_map(|m| m.key.clone()).collect();
    let known = known_keys(&mut tx, app, &keys).await?;
    tx.rollback().await?;
    let created: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
    let answer = messages
        .iter()
        .zip(ids)
        .map(
            |(message, id)| match message.key.as_ref().and_then(|k| known.get(k)) {
                Some((known_id, _)) => Some(*known_id),
                None => created.contains(id).then_some(*id),
            },
        )
        .collect::<Option<Vec<Uuid>>>()
        .ok_or_else(|| MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME))?;
    let mut profiles: Vec<Uuid> = rows.iter().filter_map(|(_, profile)| *profile).collect();
    profiles.sort();
    profiles.dedup();
    Ok(Some(AcceptedBatch {
        enqueued: Enqueued {
            batch_id: lock,
            ids: answer,
        },
        created,
        profiles,
    }))
}

async fn accept_batch(
    ctx: &MailContext<'_>,
    caller: &Caller,
    messages: &[MailMessage],
    ids: &[Uuid],
    stored: &[Option<Stored>],
    known_before: &HashMap<String, (Uuid, Option<Uuid>)>,
    batch_lock: Uuid,
) -> Result<AcceptedBatch, MailError> {
    let app = caller.app_id.as_str();
    let keys: Vec<String> = messages.iter().filter_map(|m| m.key.clone()).collect();
    let mut tx = ctx.pool.begin().await?;
    locks::take(&mut tx, MailLock::Policy, Mode::Shared).await?;
    locks::take(&mut tx, MailLock::App(app), Mode::Exclusive).await?;
    let known = known_keys(&mut tx, app, &keys).await?;
    if known_before.keys().any(|k| !known.contains_key(k)) {
        return Err(MailError::fault(
            MailCode::MailUnavailable,
            "A message of this batch was removed meanwhile; retry the batch.",
        ));
    }
    let fresh_indexes: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.key.as_ref().is_none_or(|k| !known.contains_key(k)))
        .map(|(i, _)| i)
        .collect();
    let fresh: Vec<&MailMessage> = fresh_indexes.iter().map(|&i| &messages[i]).collect();
    let profiles = check_batch(&mut tx, app, &fresh, true).await?;
    locks::take(&mut tx, MailLock::Call(batch_lock), Mode::Exclusive).await?;
    // The earlier batch id is kept only when the whole call repeats one earlier batch.
    let earlier: Vec<Option<Uuid>> = messages
        .iter()
        .map(|m| {
            m.key
                .as_ref()
                .and_then(|k| known.get(k))
                .and_then(|(_, b)| *b)
        })
        .collect();
    let repeat = fresh.is_empty()
        && earlier.first().copied().flatten().is_some()
        && earlier.iter().all(|b| *b == earlier[0]);
    let batch_id = match earlier.first().copied().flatten() {
        Some(id) if repeat => id,
        _ => batch_lock,
    };
    let mut rows = Vec::with_capacity(fresh.len());
    for &index in &fresh_indexes {
        let message = &messages[index];
        let profile = profiles
            .get(&profile_slot(message))
            .cloned()
            .ok_or_else(|| MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME))?;
        let objects = stored[index].clone().unwrap_or_default();
        if objects.total() > profile.max_attachment_bytes.max(0) as u64 {
            return Err(MailError::attachments_too_large());
        }
        if !attachments::claim(&mut tx, &objects).await? {
            return Err(MailError::fault(
                MailCode::BadInput,
                "An attachment names an upload that is already used.",
            ));
        }
        rows.push(NewRow {
            id: ids[index],
            message,
            profile,
            stored: objects,
        });
    }
    let inserted = insert(&mut tx, app, "bulk", Some(batch_id), &rows).await?;
    if inserted != rows.len() as u64 {
        return Err(MailError::fault(MailCode::MailUnavailable, UNKNOWN_OUTCOME));
    }
    let answer: Vec<Uuid> = messages
        .iter()
        .zip(ids)
        .map(|(m, id)| match m.key.as_ref().and_then(|k| known.get(k)) {
            Some((known_id, _)) => *known_id,
            None => *id,
        })
        .collect();
    let recipients: usize = fresh.iter().map(|m| m.to.len()).sum();
    let mut profile_keys: Vec<String> = rows.iter().map(|r| r.profile.key.clone()).collect();
    profile_keys.sort();
    profile_keys.dedup();
    let actors: Vec<String> = {
        let mut ids: Vec<String> = fresh
            .iter()
            .filter_map(|m| m.actor.as_ref().map(|a| a.id.clone()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    let event = AuditRecord::new(SEND_ACTION, Outcome::Allowed)
        .actor(audit_actor(caller, None))
        .target(AuditTarget::new("outgoing_mail.batch", batch_id))
        .request_id(ctx.request_id.clone())
        .meta("app", app)
        .meta("profiles", json!(profile_keys))
        .meta("recipientCount", recipients)
        .meta("actors", json!(actors))
        .meta("count", rows.len())
        .meta("known", messages.len() - rows.len());
    audit::record(&mut tx, &event).await?;
    tx.commit().await?;
    let mut profiles: Vec<Uuid> = rows.iter().map(|r| r.profile.id).collect();
    profiles.sort();
    profiles.dedup();
    Ok(AcceptedBatch {
        enqueued: Enqueued {
            batch_id,
            ids: answer,
        },
        created: rows.iter().map(|r| r.id).collect(),
        profiles,
    })
}

/// Inserts messages in one statement; returns how many rows were written (a row whose key is
/// already taken is skipped).
async fn insert(
    conn: &mut PgConnection,
    app: &str,
    lane: &str,
    batch_id: Option<Uuid>,
    rows: &[NewRow<'_>],
) -> Result<u64, MailError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let payload: Vec<Value> = rows
        .iter()
        .map(|row| {
            let m = row.message;
            let headers = (!m.headers.is_empty()).then(|| {
                Value::Array(
                    m.headers
                        .iter()
                        .map(|(name, value)| json!({"name": name, "value": value}))
                        .collect(),
                )
            });
            json!({
                "id": row.id,
                "profile_id": row.profile.id,
                "profile_key": row.profile.key,
                "idempotency_key": m.key,
                "ref_scope": m.reference.as_ref().map(|r| &r.scope),
                "ref_id": m.reference.as_ref().map(|r| &r.id),
                "to_addresses": m.to,
                "subject": m.subject,
                "text_body": m.text,
                "html_body": m.html.as_deref().map(ammonia::clean),
                "headers": headers,
                "from_name": m.from_name,
                "reply_to": m.reply_to,
                "message_id_header": rules::message_id_header(row.id, &row.profile.from_address),
                "attachments": row.stored.meta,
                "attachment_refs": (!row.stored.keys.is_empty()).then_some(&row.stored.keys),
                "actor_type": m.actor.as_ref().map(|a| a.kind.as_str()),
                "actor_id": m.actor.as_ref().map(|a| &a.id),
                "actor_name": m.actor.as_ref().and_then(|a| a.name.as_ref()),
            })
        })
        .collect();
    let result = sqlx::query(
        "INSERT INTO outgoing_mail.messages (
             id, app_id, profile_id, profile_key, batch_id, lane, idempotency_key, ref_scope,
             ref_id, to_addresses, recipient_count, subject, text_body, html_body, headers,
             from_name, reply_to, message_id_header, attachments, attachment_refs, status,
             deadline_at, actor_type, actor_id, actor_name)
         SELECT r.id, $1, r.profile_id, r.profile_key, $2, $3, r.idempotency_key, r.ref_scope,
             r.ref_id, r.to_addresses, cardinality(r.to_addresses), r.subject, r.text_body,
             r.html_body, r.headers, r.from_name, r.reply_to, r.message_id_header,
             coalesce(r.attachments, '[]'), r.attachment_refs, 'queued',
             now() + make_interval(hours => $4), r.actor_type, r.actor_id, r.actor_name
         FROM jsonb_to_recordset($5) AS r(
             id uuid, profile_id uuid, profile_key text, idempotency_key text, ref_scope text,
             ref_id text, to_addresses text[], subject text, text_body text, html_body text,
             headers jsonb, from_name text, reply_to text, message_id_header text,
             attachments jsonb, attachment_refs jsonb, actor_type text, actor_id text,
             actor_name text)
         ON CONFLICT (app_id, idempotency_key) DO NOTHING",
    )
    .bind(app)
    .bind(batch_id)
    .bind(lane)
    .bind(DELIVERY_DEADLINE_HOURS as i32)
    .bind(Value::Array(payload))
    .execute(conn)
    .await?;
    Ok(result.rows_affected())
}

async fn key_exists(conn: &mut PgConnection, app: &str, key: &str) -> Result<bool, MailError> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM outgoing_mail.messages
                        WHERE app_id = $1 AND idempotency_key = $2)",
    )
    .bind(app)
    .bind(key)
    .fetch_one(conn)
    .await?)
}

async fn fetch_row(conn: &mut PgConnection, id: Uuid) -> Result<Option<MessageRow>, MailError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {MESSAGE_COLUMNS} FROM outgoing_mail.messages m WHERE m.id = $1"
    )))
    .bind(id)
    .fetch_optional(conn)
    .await?)
}

/// The message of one id.
pub async fn find_by_id(pool: &PgPool, id: Uuid) -> Result<Option<MessageRow>, MailError> {
    let mut conn = pool.acquire().await?;
    fetch_row(&mut conn, id).await
}

/// The message an app stored under an idempotency key.
pub async fn find_by_key(
    pool: &PgPool,
    app: &str,
    key: &str,
) -> Result<Option<MessageRow>, MailError> {
    let mut conn = pool.acquire().await?;
    fetch_by_key(&mut conn, app, key).await
}

async fn fetch_by_key(
    conn: &mut PgConnection,
    app: &str,
    key: &str,
) -> Result<Option<MessageRow>, MailError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {MESSAGE_COLUMNS} FROM outgoing_mail.messages m
         WHERE m.app_id = $1 AND m.idempotency_key = $2"
    )))
    .bind(app)
    .bind(key)
    .fetch_optional(conn)
    .await?)
}
