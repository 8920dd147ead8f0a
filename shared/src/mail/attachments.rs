//! Attachments of a call: each object is counted against the installation's total before it is
//! written (`outgoing_mail.attachment_objects`), stored or verified with its size and SHA-256,
//! and deleted again when the call fails. Accepted messages own their objects until delivery
//! ends or the store expires them.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::objects::{ACCOUNTED_LIFETIME, MAX_OBJECT_BYTES, ObjectStore, PresignedUpload};
use super::validate::{AttachmentInput, AttachmentSource};
use super::{MailCode, MailError};

/// Every live attachment object together: 2 GiB.
pub const MAX_TOTAL_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// How long a presigned upload URL stays valid.
pub const UPLOAD_URL_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// One budget for storing and verifying every attachment of a call: well inside the front door's
/// 20 s route budget, so a call that runs out still answers and deletes what it stored (large
/// attachments are uploaded before the call, which then only reads them back once).
pub const UPLOAD_BUDGET: Duration = Duration::from_secs(10);
/// How long after its creation an upload may still be named by a message: the message's 24 h
/// of delivery then end long before the store expires the object (48 h after it was written).
pub const UPLOAD_CLAIM_WINDOW: Duration = Duration::from_secs(60 * 60);

/// What a message keeps of one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailAttachment)]
pub struct AttachmentMeta {
    pub filename: String,
    pub content_type: String,
    /// Bytes.
    pub size: u64,
    /// The SHA-256 of the bytes, lowercase hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: String,
}

/// The objects of one call: their metadata in message order, and their keys.
#[derive(Debug, Default, Clone)]
pub struct Stored {
    pub meta: Vec<AttachmentMeta>,
    pub keys: Vec<String>,
    /// Keys of objects the app uploaded itself (claimed by the message at acceptance).
    pub uploads: Vec<String>,
}

impl Stored {
    pub fn total(&self) -> u64 {
        self.meta.iter().map(|m| m.size).sum()
    }
}

fn storage_full() -> MailError {
    MailError::fault(
        MailCode::AttachmentStorageFull,
        "Attachment storage is full; try again later.",
    )
}

/// The lock that serializes reservations against the installation's total.
const STORAGE_LOCK: &str = "outgoing_mail.storage";

/// Counts `bytes` of a new object against the total, or refuses with `attachment_storage_full`.
async fn reserve(
    pool: &PgPool,
    key: &str,
    app_id: &str,
    bytes: u64,
    upload: bool,
) -> Result<(), MailError> {
    let bytes = i64::try_from(bytes).map_err(|_| MailError::attachments_too_large())?;
    let mut tx = pool.begin().await?;
    crate::db::advisory_xact_lock(&mut tx, STORAGE_LOCK).await?;
    let used: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(bytes), 0)::bigint FROM outgoing_mail.attachment_objects
         WHERE expires_at > now()",
    )
    .fetch_one(&mut *tx)
    .await?;
    if used + bytes > MAX_TOTAL_BYTES {
        return Err(storage_full());
    }
    sqlx::query(
        "INSERT INTO outgoing_mail.attachment_objects (object_key, app_id, bytes, upload, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
    )
    .bind(key)
    .bind(app_id)
    .bind(bytes)
    .bind(upload)
    .bind(ACCOUNTED_LIFETIME.as_secs_f64())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The object keys a message's `attachment_refs` holds (none when null).
pub fn refs_of(value: Option<&serde_json::Value>) -> Vec<String> {
    value
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes objects and their accounting (failures are logged: the store expires them anyway).
pub async fn release(pool: &PgPool, store: &ObjectStore, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    if let Err(error) = store.delete_many(keys).await {
        tracing::warn!(error = %error, objects = keys.len(), "attachment objects not deleted; they expire");
    }
    let deleted =
        sqlx::query("DELETE FROM outgoing_mail.attachment_objects WHERE object_key = ANY($1)")
            .bind(keys)
            .execute(pool)
            .await;
    if let Err(error) = deleted {
        tracing::warn!(error = %error, "attachment accounting not released");
    }
}

/// Stops counting up to `batch` objects whose lifetime ended (the store expires their bytes);
/// returns how many.
pub async fn forget_expired(pool: &PgPool, batch: i64) -> Result<u64, MailError> {
    let forgotten = sqlx::query(
        "DELETE FROM outgoing_mail.attachment_objects WHERE object_key IN (
             SELECT object_key FROM outgoing_mail.attachment_objects
             WHERE expires_at <= now() ORDER BY expires_at LIMIT $1
             FOR UPDATE SKIP LOCKED)",
    )
    .bind(batch)
    .execute(pool)
    .await?;
    Ok(forgotten.rows_affected())
}

/// A presigned (or, locally, the runner's own) upload of one attachment of `size` bytes.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailUpload)]
pub struct Upload {
    /// The id a message names in `attachments[].upload` (within an hour).
    pub upload: Uuid,
    /// The reserved size: the upload may hold at most this many bytes.
    #[schema(maximum = 26214400)]
    pub max_bytes: u64,
    #[serde(flatten)]
    pub target: PresignedUpload,
}

/// Reserves room for one upload the app performs itself. An object over 25 MiB is refused
/// before anything is stored.
pub async fn create_upload(
    pool: &PgPool,
    store: &ObjectStore,
    app_id: &str,
    size: u64,
    content_type: &str,
    local_url: impl FnOnce(Uuid) -> String,
) -> Result<Upload, MailError> {
    if size > MAX_OBJECT_BYTES {
        return Err(MailError::attachments_too_large());
    }
    let id = Uuid::new_v4();
    let key = ObjectStore::key_for(app_id, id);
    reserve(pool, &key, app_id, size, true).await?;
    let presigned = match store
        .presign_put(&key, size, content_type, UPLOAD_URL_LIFETIME)
        .await
    {
        Ok(presigned) => presigned,
        Err(error) => {
            release(pool, store, std::slice::from_ref(&key)).await;
            return Err(error);
        }
    };
    let target = presigned.unwrap_or_else(|| PresignedUpload {
        method: "PUT",
        url: local_url(id),
        headers: [("content-type".to_string(), content_type.to_string())].into(),
        expires_at: chrono::Utc::now()
            + chrono::Duration::from_std(UPLOAD_URL_LIFETIME).unwrap_or_default(),
    });
    Ok(Upload {
        upload: id,
        max_bytes: size,
        target,
    })
}

/// The reserved size of an upload of `app_id` that no message has claimed and that is young
/// enough to be named ([`UPLOAD_CLAIM_WINDOW`]), if any.
pub async fn pending_upload(
    pool: &PgPool,
    app_id: &str,
    id: Uuid,
) -> Result<Option<u64>, MailError> {
    let bytes: Option<i64> = sqlx::query_scalar(
        "SELECT bytes FROM outgoing_mail.attachment_objects
         WHERE object_key = $1 AND app_id = $2 AND upload
           AND created_at > now() - make_interval(secs => $3)",
    )
    .bind(ObjectStore::key_for(app_id, id))
    .bind(app_id)
    .bind(UPLOAD_CLAIM_WINDOW.as_secs_f64())
    .fetch_optional(pool)
    .await?;
    Ok(bytes.map(|b| b.max(0) as u64))
}

/// Deletes the uploads of `app_id` among `ids` that no message has claimed: a refused call, or
/// a message whose key was known already, leaves none behind. An upload a still-running
/// acceptance has claimed is waited for (its row is locked) and then kept.
pub async fn discard_uploads(pool: &PgPool, store: &ObjectStore, app_id: &str, ids: &[Uuid]) {
    if ids.is_empty() {
        return;
    }
    let keys: Vec<String> = ids
        .iter()
        .map(|id| ObjectStore::key_for(app_id, *id))
        .collect();
    let deleted: Result<Vec<String>, sqlx::Error> = sqlx::query_scalar(
        "DELETE FROM outgoing_mail.attachment_objects
         WHERE object_key = ANY($1) AND app_id = $2 AND upload RETURNING object_key",
    )
    .bind(&keys)
    .bind(app_id)
    .fetch_all(pool)
    .await;
    match deleted {
        Ok(keys) if keys.is_empty() => {}
        Ok(keys) => {
            if let Err(error) = store.delete_many(&keys).await {
                tracing::warn!(error = %error, objects = keys.len(), "unclaimed uploads not deleted; they expire");
            }
        }
        Err(error) => {
            tracing::warn!(error = %error, "unclaimed uploads not discarded; they expire")
        }
    }
}

/// Stores or verifies every attachment of one message, in order, within `budget` bytes in
/// total and before `deadline` (the call's one [`UPLOAD_BUDGET`]). On failure every object this
/// call stored or verified is deleted again (the call that failed owned them).
pub async fn store_all(
    pool: &PgPool,
    store: &ObjectStore,
    app_id: &str,
    inputs: &[AttachmentInput],
    budget: u64,
    deadline: tokio::time::Instant,
) -> Result<Stored, MailError> {
    let mut stored = Stored::default();
    let result = tokio::time::timeout_at(
        deadline,
        store_each(pool, store, app_id, inputs, budget, &mut stored),
    )
    .await
    .unwrap_or_else(|_| {
        Err(MailError::fault(
            MailCode::BadInput,
            "The attachments could not be stored in time.",
        ))
    });
    match result {
        Ok(()) => Ok(stored),
        // Uploads it named but did not get to are discarded by the caller.
        Err(error) => {
            release(pool, store, &stored.keys).await;
            Err(error)
        }
    }
}

async fn store_each(
    pool: &PgPool,
    store: &ObjectStore,
    app_id: &str,
    inputs: &[AttachmentInput],
    budget: u64,
    stored: &mut Stored,
) -> Result<(), MailError> {
    for input in inputs {
        let left = budget.saturating_sub(stored.total());
        let object = match &input.source {
            AttachmentSource::Inline(bytes) => {
                let size = bytes.len() as u64;
                if size > left || size > MAX_OBJECT_BYTES {
                    return Err(MailError::attachments_too_large());
                }
                let key = ObjectStore::key_for(app_id, Uuid::new_v4());
                reserve(pool, &key, app_id, size, false).await?;
                stored.keys.push(key.clone());
                store.put_bytes(&key, bytes.clone()).await?
            }
            AttachmentSource::Upload(id) => {
                let Some(reserved) = pending_upload(pool, app_id, *id).await? else {
                    return Err(MailError::fault(
                        MailCode::BadInput,
                        "An attachment names an upload that does not exist or is already used.",
                    ));
                };
                let key = ObjectStore::key_for(app_id, *id);
                // Never more than was reserved: the storage total counted only that, and a
                // store that does not check the signed length (S3 does) may hold more.
                let digest = store.digest(&key, left.min(reserved)).await?;
                let Some(object) = digest else {
                    return Err(MailError::fault(
                        MailCode::BadInput,
                        "An attachment names an upload that was not completed.",
                    ));
                };
                stored.keys.push(key.clone());
                stored.uploads.push(key);
                object
            }
        };
        stored.meta.push(AttachmentMeta {
            filename: input.filename.clone(),
            content_type: input.content_type.clone(),
            size: object.size,
            sha256: object.sha256,
        });
    }
    Ok(())
}

/// Inside the acceptance transaction: the message takes its uploads (an upload serves one
/// message) and every object records its real size; false if another message took one first.
pub async fn claim(conn: &mut sqlx::PgConnection, stored: &Stored) -> Result<bool, MailError> {
    for (key, meta) in stored.keys.iter().zip(&stored.meta) {
        let updated = sqlx::query(
            "UPDATE outgoing_mail.attachment_objects SET upload = false, bytes = $2
             WHERE object_key = $1 AND (upload OR NOT $3)",
        )
        .bind(key)
        .bind(meta.size as i64)
        .bind(stored.uploads.contains(key))
        .execute(&mut *conn)
        .await?;
        if updated.rows_affected() != 1 {
            return Ok(false);
        }
    }
    Ok(true)
}
