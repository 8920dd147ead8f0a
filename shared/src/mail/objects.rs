//! The attachment object store of outgoing mail: S3 when deployed, a directory in local mode.
//!
//! Objects are named `att/<app_id>/<uuid>`, hold at most [`MAX_OBJECT_BYTES`] and live at most
//! [`OBJECT_LIFETIME`]. Size and SHA-256 are computed while the bytes pass, so acceptance never
//! reads an attachment twice and delivery can prove that what it sends is what was accepted.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

use super::MailError;

/// The largest object the store keeps: 25 MiB (the profile limit `max_attachment_bytes` never
/// exceeds it).
pub const MAX_OBJECT_BYTES: u64 = 25 * 1024 * 1024;
/// How long an object is kept at most: 48 h, well past the 24 h delivery deadline, so a message
/// still being retried never loses its attachments (an S3 lifecycle rule expires them when
/// deployed; [`ObjectStore::purge_expired`] does it locally).
pub const OBJECT_LIFETIME: Duration = Duration::from_secs(48 * 60 * 60);
/// How long an object counts against the installation's total: S3 expires objects the given
/// number of days after they were written, rounded up to the next midnight UTC, so one may stay
/// a day longer than [`OBJECT_LIFETIME`].
pub const ACCOUNTED_LIFETIME: Duration = Duration::from_secs(72 * 60 * 60);

/// S3 refuses a DeleteObjects call naming more keys than this.
const DELETE_BATCH_KEYS: usize = 1000;
/// S3's limit on a key's length in bytes.
const MAX_KEY_BYTES: usize = 1024;
/// Bytes read per chunk from a local file: large enough to keep the hashing cheap, small enough
/// that a dozen concurrent deliveries hold little memory.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Local uploads land under this name first; valid keys never start a segment with a dot, so no
/// key can name one.
const PARTIAL_PREFIX: &str = ".partial-";

/// Size and SHA-256 (lowercase hex) of a stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub key: String,
    pub size: u64,
    pub sha256: String,
}

/// A presigned upload the app performs itself (PUT `url` with `headers`, body exactly `size`
/// bytes).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MailPresignedUpload)]
pub struct PresignedUpload {
    /// Always `PUT`.
    #[schema(value_type = String, pattern = "^PUT$")]
    pub method: &'static str,
    /// Where to send the bytes: the object store's presigned URL, or locally
    /// `/api/mail/v1/uploads/{id}` (with the app's credential).
    pub url: String,
    /// The headers to send with the bytes (lowercase names).
    pub headers: BTreeMap<String, String>,
    /// When the URL stops working.
    pub expires_at: DateTime<Utc>,
}

/// Where attachment bytes live between acceptance and delivery.
#[derive(Clone)]
pub enum ObjectStore {
    S3 {
        client: aws_sdk_s3::Client,
        bucket: String,
    },
    Local {
        dir: PathBuf,
    },
}

/// Names the bucket or directory only: the client's configuration has no place in a log.
impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectStore::S3 { bucket, .. } => f.debug_struct("S3").field("bucket", bucket).finish(),
            ObjectStore::Local { dir } => f.debug_struct("Local").field("dir", dir).finish(),
        }
    }
}

impl ObjectStore {
    /// An S3 store with a client from the environment (region, credentials,
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`).
    pub async fn s3_from_env(bucket: impl Into<String>) -> ObjectStore {
        ObjectStore::s3(s3_client_from_env().await, bucket)
    }

    /// An S3 store over a client built elsewhere (tests, a client several stores share).
    pub fn s3(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> ObjectStore {
        ObjectStore::S3 {
            client,
            bucket: bucket.into(),
        }
    }

    /// A store of files under `dir` (created on first write).
    pub fn local(dir: impl Into<PathBuf>) -> ObjectStore {
        ObjectStore::Local { dir: dir.into() }
    }

    /// The key of an attachment: `att/<app_id>/<id>`.
    pub fn key_for(app_id: &str, id: Uuid) -> String {
        format!("att/{app_id}/{id}")
    }

    /// Stores a body read chunk by chunk, computing size and SHA-256 as it goes; more than
    /// `limit` bytes (never more than [`MAX_OBJECT_BYTES`]) → `attachments_too_large`, with
    /// nothing left behind, even when the caller drops the future half way.
    pub async fn put_stream<S, E>(
        &self,
        key: &str,
        body: S,
        limit: u64,
    ) -> Result<StoredObject, MailError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
        E: Display,
    {
        check_key(key)?;
        let tally = Tally::new(limit);
        match self {
            ObjectStore::S3 { client, bucket } => put_s3(client, bucket, key, body, tally).await,
            ObjectStore::Local { dir } => put_local(dir, key, body, tally).await,
        }
    }

    /// Stores bytes already in memory (at most [`MAX_OBJECT_BYTES`]).
    pub async fn put_bytes(&self, key: &str, bytes: Bytes) -> Result<StoredObject, MailError> {
        let body = stream::iter([Ok::<_, Infallible>(bytes)]);
        self.put_stream(key, body, MAX_OBJECT_BYTES).await
    }

    /// Reads an object through, computing its size and SHA-256; `None` when missing; more than
    /// `limit` bytes → `attachments_too_large` (the object is left for the caller to delete).
    pub async fn digest(&self, key: &str, limit: u64) -> Result<Option<StoredObject>, MailError> {
        let Some(mut chunks) = self.open(key).await? else {
            return Ok(None);
        };
        let mut tally = Tally::new(limit);
        while let Some(chunk) = chunks.next().await {
            tally.add(&chunk?)?;
        }
        Ok(Some(tally.finish(key).0))
    }

    /// The object's bytes as a stream (delivery reads attachments this way), `None` when
    /// missing.
    pub async fn open(
        &self,
        key: &str,
    ) -> Result<Option<BoxStream<'static, Result<Bytes, MailError>>>, MailError> {
        check_key(key)?;
        match self {
            ObjectStore::S3 { client, bucket } => {
                let response = client.get_object().bucket(bucket).key(key).send().await;
                let output = match response {
                    Ok(output) => output,
                    Err(e) if is_missing(&e) => return Ok(None),
                    Err(e) => return Err(s3_failed("get_object", key, e)),
                };
                let key = key.to_string();
                let chunks = stream::try_unfold(output.body, move |mut body| {
                    let key = key.clone();
                    async move {
                        match body.next().await {
                            Some(Ok(chunk)) => Ok(Some((chunk, body))),
                            Some(Err(e)) => Err(store_failed("read_object", &key, e)),
                            None => Ok(None),
                        }
                    }
                });
                Ok(Some(chunks.boxed()))
            }
            ObjectStore::Local { dir } => {
                let path = dir.join(key);
                let file = match tokio::fs::File::open(&path).await {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(store_failed("open_file", key, e)),
                };
                let key = key.to_string();
                let chunks = stream::try_unfold(file, move |mut file| {
                    let key = key.clone();
                    async move {
                        let mut chunk = BytesMut::with_capacity(READ_CHUNK_BYTES);
                        match file.read_buf(&mut chunk).await {
                            Ok(0) => Ok(None),
                            Ok(_) => Ok(Some((chunk.freeze(), file))),
                            Err(e) => Err(store_failed("read_file", &key, e)),
                        }
                    }
                });
                Ok(Some(chunks.boxed()))
            }
        }
    }

    /// Deletes an object; a missing one is fine.
    pub async fn delete(&self, key: &str) -> Result<(), MailError> {
        check_key(key)?;
        match self {
            ObjectStore::S3 { client, bucket } => {
                client
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|e| s3_failed("delete_object", key, e))?;
                Ok(())
            }
            ObjectStore::Local { dir } => match tokio::fs::remove_file(dir.join(key)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(store_failed("remove_file", key, e)),
            },
        }
    }

    /// Deletes objects (S3: DeleteObjects, 1000 keys a call); missing ones are fine. Every batch
    /// is attempted even after one fails, so a failure leaves as little behind as possible.
    pub async fn delete_many(&self, keys: &[String]) -> Result<(), MailError> {
        for key in keys {
            check_key(key)?;
        }
        let mut first_failure = None;
        match self {
            ObjectStore::S3 { client, bucket } => {
                for batch in keys.chunks(DELETE_BATCH_KEYS) {
                    if let Err(e) = delete_batch(client, bucket, batch).await {
                        first_failure.get_or_insert(e);
                    }
                }
            }
            ObjectStore::Local { .. } => {
                for key in keys {
                    if let Err(e) = self.delete(key).await {
                        first_failure.get_or_insert(e);
                    }
                }
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// S3: a presigned PUT for exactly `size` bytes of `content_type`, valid `expires_in` (at
    /// most 7 days). Content-Length is among the signed headers, so S3 refuses a body of any
    /// other size. Local: `None` (the runner's own upload route takes the body).
    pub async fn presign_put(
        &self,
        key: &str,
        size: u64,
        content_type: &str,
        expires_in: Duration,
    ) -> Result<Option<PresignedUpload>, MailError> {
        check_key(key)?;
        let ObjectStore::S3 { client, bucket } = self else {
            return Ok(None);
        };
        if size > MAX_OBJECT_BYTES {
            return Err(MailError::attachments_too_large());
        }
        let length = i64::try_from(size).map_err(|_| MailError::attachments_too_large())?;
        let start = SystemTime::now();
        let config = PresigningConfig::builder()
            .start_time(start)
            .expires_in(expires_in)
            .build()
            .map_err(|e| store_failed("presign_put", key, e))?;
        let request = client
            .put_object()
            .bucket(bucket)
            .key(key)
            .content_length(length)
            .content_type(content_type)
            .presigned(config)
            .await
            .map_err(|e| s3_failed("presign_put", key, e))?;
        let headers = request
            .headers()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.to_string()))
            .collect();
        Ok(Some(PresignedUpload {
            method: "PUT",
            url: request.uri().to_string(),
            headers,
            expires_at: DateTime::<Utc>::from(start + expires_in),
        }))
    }

    /// Local: removes files (objects and abandoned partial uploads) older than
    /// [`OBJECT_LIFETIME`]; returns how many. S3: `Ok(0)` (the lifecycle rule does it).
    pub async fn purge_expired(&self) -> Result<u64, MailError> {
        let ObjectStore::Local { dir } = self else {
            return Ok(0);
        };
        let Some(cutoff) = SystemTime::now().checked_sub(OBJECT_LIFETIME) else {
            return Ok(0);
        };
        let root = dir.clone();
        tokio::task::spawn_blocking(move || purge_older_than(&root, cutoff))
            .await
            .map_err(|e| batch_failed("purge_expired", &e))?
            .map_err(|e| batch_failed("purge_expired", &e))
    }
}

/// Creates an S3 client from the environment. Path-style addressing when an endpoint is
/// configured: local S3 APIs (moto) do not serve bucket subdomains.
async fn s3_client_from_env() -> aws_sdk_s3::Client {
    let shared = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let mut config = aws_sdk_s3::config::Builder::from(&shared);
    let endpoint_set = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .any(|name| std::env::var(name).is_ok_and(|value| !value.trim().is_empty()));
    if endpoint_set {
        config = config.force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(config.build())
}

/// Size and hash of the bytes seen so far, refusing any byte past the limit.
struct Tally {
    limit: u64,
    size: u64,
    hasher: Sha256,
}

impl Tally {
    fn new(limit: u64) -> Tally {
        Tally {
            limit: limit.min(MAX_OBJECT_BYTES),
            size: 0,
            hasher: Sha256::new(),
        }
    }

    fn add(&mut self, chunk: &[u8]) -> Result<(), MailError> {
        self.size = self.size.saturating_add(chunk.len() as u64);
        if self.size > self.limit {
            return Err(MailError::attachments_too_large());
        }
        self.hasher.update(chunk);
        Ok(())
    }

    /// The object's description and its raw digest.
    fn finish(self, key: &str) -> (StoredObject, [u8; 32]) {
        let digest: [u8; 32] = self.hasher.finalize().into();
        let stored = StoredObject {
            key: key.to_string(),
            size: self.size,
            sha256: hex::encode(digest),
        };
        (stored, digest)
    }
}

async fn put_s3<S, E>(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    mut body: S,
    mut tally: Tally,
) -> Result<StoredObject, MailError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: Display,
{
    // PutObject needs the length before the first byte, so the body is gathered first; the
    // limit bounds what is held.
    let mut chunks = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(body_failed)?;
        tally.add(&chunk)?;
        chunks.push(chunk);
    }
    let (stored, digest) = tally.finish(key);
    let bytes = match <[Bytes; 1]>::try_from(chunks) {
        Ok([single]) => single,
        Err(chunks) => {
            let mut joined = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for chunk in &chunks {
                joined.extend_from_slice(chunk);
            }
            joined.freeze()
        }
    };
    let length = i64::try_from(stored.size).map_err(|_| MailError::attachments_too_large())?;
    // The SHA-256 lets S3 refuse a body damaged on the way; it also spares the SDK its own
    // checksum pass.
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .content_length(length)
        .checksum_sha256(BASE64.encode(digest))
        .body(ByteStream::from(bytes))
        .send()
        .await
        .map_err(|e| s3_failed("put_object", key, e))?;
    Ok(stored)
}

async fn put_local<S, E>(
    dir: &Path,
    key: &str,
    mut body: S,
    mut tally: Tally,
) -> Result<StoredObject, MailError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: Display,
{
    let target = dir.join(key);
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| store_failed("create_dir", key, e))?;
    // Written beside the objects (same file system, so the rename is atomic) and renamed only
    // when complete: a reader never sees half an object.
    let path = dir.join(format!("{PARTIAL_PREFIX}{}", Uuid::new_v4()));
    let partial = PartialFile(Some(path.clone()));
    let mut file = tokio::fs::File::create(&path)
        .await
        .map_err(|e| store_failed("create_file", key, e))?;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(body_failed)?;
        tally.add(&chunk)?;
        file.write_all(&chunk)
            .await
            .map_err(|e| store_failed("write_file", key, e))?;
    }
    // tokio writes in the background: flush waits for the last write to land.
    file.flush()
        .await
        .map_err(|e| store_failed("write_file", key, e))?;
    drop(file);
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| store_failed("create_dir", key, e))?;
    }
    tokio::fs::rename(&path, &target)
        .await
        .map_err(|e| store_failed("rename_file", key, e))?;
    partial.keep();
    Ok(tally.finish(key).0)
}

/// A partial upload, removed when dropped unless kept: covers every early return and a caller
/// that drops the upload future (a timed-out upload budget).
struct PartialFile(Option<PathBuf>);

impl PartialFile {
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take()
            && let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(error = %e, "attachment partial upload could not be removed");
        }
    }
}

async fn delete_batch(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    keys: &[String],
) -> Result<(), MailError> {
    let objects = keys
        .iter()
        .map(|key| ObjectIdentifier::builder().key(key).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| batch_failed("delete_objects", &e))?;
    let delete = Delete::builder()
        .set_objects(Some(objects))
        .quiet(true)
        .build()
        .map_err(|e| batch_failed("delete_objects", &e))?;
    let output = client
        .delete_objects()
        .bucket(bucket)
        .delete(delete)
        .send()
        .await
        .map_err(|e| batch_failed("delete_objects", &describe(&e)))?;
    // A missing key is a success for DeleteObjects; anything listed here is a real refusal.
    let refused = output.errors();
    if let Some(first) = refused.first() {
        let key = first.key().unwrap_or_default();
        let code = first.code().unwrap_or("unknown");
        tracing::warn!(
            operation = "delete_objects",
            key,
            code,
            refused = refused.len(),
            "attachment object store refused deletes"
        );
        return Err(MailError::Objects(format!(
            "delete_objects refused {} key(s), first {key}: {code}",
            refused.len()
        )));
    }
    Ok(())
}

fn purge_older_than(root: &Path, cutoff: SystemTime) -> std::io::Result<u64> {
    use std::io::ErrorKind::NotFound;
    let mut removed = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(entry.path());
                continue;
            }
            // Symbolic links are not the store's own: never followed, never removed.
            if !kind.is_file() {
                continue;
            }
            // Another purge or a delete may have removed the file since it was listed.
            let modified = match entry.metadata().and_then(|m| m.modified()) {
                Ok(modified) => modified,
                Err(e) if e.kind() == NotFound => continue,
                Err(e) => return Err(e),
            };
            if modified < cutoff {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(removed)
}

/// Accepts keys of `[A-Za-z0-9/_.-]` made of non-empty segments that do not start with a dot
/// and hold no `..`: such a key always names a path under the store's directory, and never a
/// partial upload.
fn check_key(key: &str) -> Result<(), MailError> {
    let allowed = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'.' | b'-'));
    let segments_ok = key
        .split('/')
        .all(|segment| !segment.is_empty() && !segment.starts_with('.'));
    if key.is_empty() || key.len() > MAX_KEY_BYTES || !allowed || !segments_ok || key.contains("..")
    {
        return Err(MailError::Objects(format!(
            "refused attachment object key {key:?}"
        )));
    }
    Ok(())
}

/// The caller's body failed (an aborted upload): not the store's failure, so not logged here.
fn body_failed(error: impl Display) -> MailError {
    MailError::Objects(format!("attachment body failed: {error}"))
}

fn store_failed(operation: &'static str, key: &str, error: impl Display) -> MailError {
    tracing::warn!(operation, key, error = %error, "attachment object store failed");
    MailError::Objects(format!("{operation} failed: {error}"))
}

/// A failure of a call that names no single object.
fn batch_failed(operation: &'static str, error: &dyn Display) -> MailError {
    tracing::warn!(operation, error = %error, "attachment object store failed");
    MailError::Objects(format!("{operation} failed: {error}"))
}

fn s3_failed<E, R>(operation: &'static str, key: &str, error: SdkError<E, R>) -> MailError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    store_failed(operation, key, describe(&error))
}

/// S3's own code and message when it answered, else the whole chain (a connection or timeout
/// failure); never the raw response, which would fill the log with headers.
fn describe<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match error.code() {
        Some(code) => format!("{code}: {}", error.message().unwrap_or("no message")),
        None => DisplayErrorContext(error).to_string(),
    }
}

/// GetObject's "no such key", told apart from a missing bucket (also a 404, but a fault).
fn is_missing<R>(error: &SdkError<GetObjectError, R>) -> bool {
    error.as_service_error().is_some_and(|e| e.is_no_such_key())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use proptest::prelude::*;

    use super::*;
    use crate::mail::MailCode;
    use crate::moto::Moto;

    fn sha256_hex(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Bytes that differ from chunk to chunk, so a reordered or dropped chunk changes the hash.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
            .collect()
    }

    fn chunked(
        bytes: &[u8],
        chunk: usize,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Unpin + use<> {
        let chunks: Vec<_> = bytes
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(chunks)
    }

    fn files_under(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    found.push(path);
                }
            }
        }
        found
    }

    fn local() -> (tempfile::TempDir, ObjectStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ObjectStore::local(dir.path().join("objects"));
        (dir, store)
    }

    fn key() -> String {
        ObjectStore::key_for("crm", Uuid::new_v4())
    }

    async fn read_all(store: &ObjectStore, key: &str) -> Vec<u8> {
        let mut chunks = store.open(key).await.expect("open").expect("present");
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            bytes.extend_from_slice(&chunk.expect("chunk"));
        }
        bytes
    }

    #[test]
    fn keys_name_the_app_and_the_attachment() {
        let id = Uuid::new_v4();
        let key = ObjectStore::key_for("crm", id);
        assert_eq!(key, format!("att/crm/{id}"));
        check_key(&key).expect("valid");
    }

    #[test]
    fn keys_that_could_leave_the_directory_are_refused() {
        for bad in [
            "",
            "/etc/passwd",
            "att/../../etc/passwd",
            "att/crm/..",
            "att/crm/a..b",
            "att//x",
            "att/crm/",
            "att/./x",
            "att/crm/.partial-1",
            "att/crm/a b",
            "att/crm/a\\b",
            "att/crm/ä",
            "att/crm/x\n",
        ] {
            let refused = check_key(bad).expect_err(bad);
            assert!(matches!(refused, MailError::Objects(_)), "{bad:?}");
        }
        check_key(&"a".repeat(MAX_KEY_BYTES + 1)).expect_err("too long");
    }

    proptest! {
        #[test]
        fn an_accepted_key_always_names_a_path_inside_the_directory(key in "[a-z./_-]{1,24}") {
            if check_key(&key).is_ok() {
                let path = Path::new(&key);
                prop_assert!(path.components().all(|c| matches!(c, std::path::Component::Normal(_))));
                prop_assert!(!path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')));
            }
        }
    }

    #[tokio::test]
    async fn put_stream_stores_the_bytes_with_their_size_and_sha256() {
        let (_tmp, store) = local();
        let key = key();
        let body = pattern(300_000);
        let stored = store
            .put_stream(&key, chunked(&body, 7_000), MAX_OBJECT_BYTES)
            .await
            .expect("put");
        assert_eq!(
            stored,
            StoredObject {
                key: key.clone(),
                size: body.len() as u64,
                sha256: sha256_hex(&body),
            }
        );
        let digest = store.digest(&key, MAX_OBJECT_BYTES).await.expect("digest");
        assert_eq!(digest, Some(stored));
        assert_eq!(read_all(&store, &key).await, body);
        let ObjectStore::Local { dir } = &store else {
            unreachable!()
        };
        assert_eq!(files_under(dir), vec![dir.join(&key)]);
    }

    #[tokio::test]
    async fn a_body_of_exactly_the_limit_is_accepted() {
        let (_tmp, store) = local();
        let body = pattern(1000);
        let stored = store
            .put_stream(&key(), chunked(&body, 300), 1000)
            .await
            .expect("put");
        assert_eq!(stored.size, 1000);
    }

    #[tokio::test]
    async fn an_empty_body_is_an_empty_object() {
        let (_tmp, store) = local();
        let key = key();
        let stored = store.put_bytes(&key, Bytes::new()).await.expect("put");
        assert_eq!(stored.size, 0);
        assert_eq!(stored.sha256, sha256_hex(b""));
        assert!(read_all(&store, &key).await.is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_and_leaves_no_file() {
        let (tmp, store) = local();
        let key = key();
        let refused = store
            .put_stream(&key, chunked(&pattern(18), 6), 10)
            .await
            .expect_err("over the limit");
        assert_eq!(refused.code(), Some(MailCode::AttachmentsTooLarge));
        assert!(files_under(tmp.path()).is_empty());
        assert_eq!(
            store.digest(&key, MAX_OBJECT_BYTES).await.expect("digest"),
            None
        );
    }

    #[tokio::test]
    async fn the_limit_never_exceeds_the_object_maximum() {
        let (tmp, store) = local();
        let body = Bytes::from(vec![7u8; MAX_OBJECT_BYTES as usize + 1]);
        let refused = store
            .put_stream(&key(), stream::iter([Ok::<_, Infallible>(body)]), u64::MAX)
            .await
            .expect_err("over the maximum");
        assert_eq!(refused.code(), Some(MailCode::AttachmentsTooLarge));
        assert!(files_under(tmp.path()).is_empty());
    }

    #[tokio::test]
    async fn a_failing_body_stores_nothing() {
        let (tmp, store) = local();
        let body = stream::iter([
            Ok(Bytes::from_static(b"first")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let failed = store
            .put_stream(&key(), body, MAX_OBJECT_BYTES)
            .await
            .expect_err("body failed");
        assert!(matches!(failed, MailError::Objects(_)));
        assert!(files_under(tmp.path()).is_empty());
    }

    #[tokio::test]
    async fn an_upload_abandoned_half_way_leaves_no_partial_file() {
        let (tmp, store) = local();
        let (mut sender, body) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(1);
        sender
            .try_send(Ok(Bytes::from_static(b"first")))
            .expect("first chunk");
        let key = key();
        let mut upload = Box::pin(store.put_stream(&key, body, MAX_OBJECT_BYTES));
        let deadline = Instant::now() + Duration::from_secs(10);
        while files_under(tmp.path()).is_empty() {
            assert!(
                Instant::now() < deadline,
                "the upload never started writing"
            );
            tokio::select! {
                _ = &mut upload => panic!("the body never ends"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        drop(upload);
        assert!(files_under(tmp.path()).is_empty());
        drop(sender);
    }

    #[tokio::test]
    async fn digest_and_open_of_a_missing_object_are_none() {
        let (_tmp, store) = local();
        assert_eq!(
            store
                .digest(&key(), MAX_OBJECT_BYTES)
                .await
                .expect("digest"),
            None
        );
        assert!(store.open(&key()).await.expect("open").is_none());
    }

    #[tokio::test]
    async fn digest_of_an_object_over_the_limit_is_refused_and_keeps_it() {
        let (_tmp, store) = local();
        let key = key();
        store
            .put_bytes(&key, Bytes::from(pattern(200_000)))
            .await
            .expect("put");
        let refused = store.digest(&key, 100_000).await.expect_err("too large");
        assert_eq!(refused.code(), Some(MailCode::AttachmentsTooLarge));
        assert!(store.open(&key).await.expect("open").is_some());
    }

    #[tokio::test]
    async fn delete_is_idempotent() {
        let (_tmp, store) = local();
        let key = key();
        store
            .put_bytes(&key, Bytes::from_static(b"body"))
            .await
            .expect("put");
        store.delete(&key).await.expect("delete");
        store.delete(&key).await.expect("delete again");
        assert!(store.open(&key).await.expect("open").is_none());
    }

    #[tokio::test]
    async fn delete_many_removes_present_and_ignores_missing_keys() {
        let (_tmp, store) = local();
        let keys: Vec<String> = (0..3).map(|_| key()).collect();
        for key in &keys[..2] {
            store
                .put_bytes(key, Bytes::from_static(b"body"))
                .await
                .expect("put");
        }
        store.delete_many(&keys).await.expect("delete_many");
        for key in &keys {
            assert!(store.open(key).await.expect("open").is_none());
        }
    }

    #[tokio::test]
    async fn invalid_keys_are_refused_by_every_operation() {
        let (tmp, store) = local();
        let bad = "att/../escape";
        let body = Bytes::from_static(b"x");
        let objects = |r: Result<_, MailError>| matches!(r, Err(MailError::Objects(_)));
        assert!(objects(store.put_bytes(bad, body).await.map(|_| ())));
        assert!(objects(store.digest(bad, 10).await.map(|_| ())));
        assert!(objects(store.open(bad).await.map(|_| ())));
        assert!(objects(store.delete(bad).await));
        assert!(objects(store.delete_many(&[key(), bad.into()]).await));
        let presigned = store.presign_put(bad, 1, "text/plain", Duration::from_secs(60));
        assert!(objects(presigned.await.map(|_| ())));
        assert!(files_under(tmp.path()).is_empty());
    }

    #[tokio::test]
    async fn the_local_store_presigns_nothing() {
        let (_tmp, store) = local();
        let presigned = store
            .presign_put(&key(), 10, "text/plain", Duration::from_secs(60))
            .await
            .expect("presign");
        assert!(presigned.is_none());
    }

    #[tokio::test]
    async fn purge_expired_removes_only_files_older_than_the_lifetime() {
        let (_tmp, store) = local();
        let ObjectStore::Local { dir } = &store else {
            unreachable!()
        };
        assert_eq!(store.purge_expired().await.expect("purge of nothing"), 0);
        let (expired, fresh, young) = (key(), key(), key());
        for key in [&expired, &fresh, &young] {
            store
                .put_bytes(key, Bytes::from_static(b"body"))
                .await
                .expect("put");
        }
        let abandoned = dir.join(format!("{PARTIAL_PREFIX}{}", Uuid::new_v4()));
        std::fs::write(&abandoned, b"half").expect("partial");
        let age = |path: &Path, by: Duration| {
            let file = std::fs::File::options()
                .write(true)
                .open(path)
                .expect("open");
            file.set_modified(SystemTime::now() - by).expect("mtime");
        };
        let hour = Duration::from_secs(3600);
        age(&dir.join(&expired), OBJECT_LIFETIME + hour);
        age(&abandoned, OBJECT_LIFETIME + hour);
        age(&dir.join(&young), OBJECT_LIFETIME - hour);

        assert_eq!(store.purge_expired().await.expect("purge"), 2);
        assert!(store.open(&expired).await.expect("open").is_none());
        assert!(!abandoned.exists());
        assert!(store.open(&fresh).await.expect("open").is_some());
        assert!(store.open(&young).await.expect("open").is_some());
    }

    #[test]
    fn uploads_can_run_on_any_worker_thread() {
        fn assert_send<T: Send>(_: T) {}
        let store = ObjectStore::local("unused");
        assert_send(store.put_stream("att/a/b", chunked(b"x", 1), 1));
        assert_send(store.digest("att/a/b", 1));
        assert_send(store.presign_put("att/a/b", 1, "text/plain", Duration::from_secs(1)));
    }

    // --- S3, against moto -------------------------------------------------------------------

    /// A store over a bucket of its own on `moto`.
    async fn s3_store(moto: &Moto) -> (aws_sdk_s3::Client, ObjectStore) {
        let client = moto.s3();
        let bucket = format!("k2b-test-{}", Uuid::new_v4());
        client
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .expect("create bucket");
        (client.clone(), ObjectStore::s3(client, bucket))
    }

    fn bucket(store: &ObjectStore) -> &str {
        match store {
            ObjectStore::S3 { bucket, .. } => bucket,
            ObjectStore::Local { .. } => unreachable!(),
        }
    }

    const MIB: usize = 1024 * 1024;

    #[tokio::test]
    async fn s3_keeps_a_20_mib_stream_with_its_size_and_sha256() {
        let moto = Moto::start();
        let (_client, store) = s3_store(&moto).await;
        let key = key();
        let body = pattern(20 * MIB);
        let stored = store
            .put_stream(&key, chunked(&body, MIB), MAX_OBJECT_BYTES)
            .await
            .expect("put");
        assert_eq!(stored.size, body.len() as u64);
        assert_eq!(stored.sha256, sha256_hex(&body));
        let digest = store.digest(&key, MAX_OBJECT_BYTES).await.expect("digest");
        assert_eq!(digest, Some(stored));
        assert!(read_all(&store, &key).await == body);
    }

    #[tokio::test]
    async fn s3_refuses_a_26_mib_stream_and_keeps_nothing() {
        let moto = Moto::start();
        let (client, store) = s3_store(&moto).await;
        let key = key();
        let refused = store
            .put_stream(&key, chunked(&pattern(26 * MIB), MIB), MAX_OBJECT_BYTES)
            .await
            .expect_err("over the maximum");
        assert_eq!(refused.code(), Some(MailCode::AttachmentsTooLarge));
        let head = client
            .head_object()
            .bucket(bucket(&store))
            .key(&key)
            .send()
            .await
            .expect_err("nothing stored");
        assert!(head.as_service_error().is_some_and(|e| e.is_not_found()));
        assert_eq!(
            store.digest(&key, MAX_OBJECT_BYTES).await.expect("digest"),
            None
        );
    }

    #[tokio::test]
    async fn s3_presigned_put_takes_a_body_of_the_signed_size() {
        let moto = Moto::start();
        let (_client, store) = s3_store(&moto).await;
        let key = key();
        let body = pattern(100_000);
        let upload = store
            .presign_put(
                &key,
                body.len() as u64,
                "application/pdf",
                Duration::from_secs(600),
            )
            .await
            .expect("presign")
            .expect("S3 presigns");
        assert_eq!(upload.method, "PUT");
        assert_eq!(
            upload.headers.get("content-length").map(String::as_str),
            Some("100000")
        );
        assert!(upload.expires_at > Utc::now() + chrono::Duration::seconds(590));
        // moto checks no presigned signature, so S3's refusal of another size cannot be seen
        // here: check instead that the size is signed.
        let url = url::Url::parse(&upload.url).expect("url");
        let signed = url
            .query_pairs()
            .find(|(name, _)| name == "X-Amz-SignedHeaders")
            .map(|(_, value)| value.into_owned())
            .expect("signed headers");
        assert!(signed.split(';').any(|h| h == "content-length"), "{signed}");
        assert!(signed.split(';').any(|h| h == "content-type"), "{signed}");

        let mut request = reqwest::Client::new().put(&upload.url).body(body.clone());
        for (name, value) in &upload.headers {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("upload");
        assert!(response.status().is_success(), "{}", response.status());

        let digest = store.digest(&key, MAX_OBJECT_BYTES).await.expect("digest");
        assert_eq!(
            digest,
            Some(StoredObject {
                key,
                size: body.len() as u64,
                sha256: sha256_hex(&body),
            })
        );
    }

    #[tokio::test]
    async fn s3_refuses_presigned_uploads_over_the_object_maximum() {
        let moto = Moto::start();
        let (_client, store) = s3_store(&moto).await;
        let refused = store
            .presign_put(
                &key(),
                MAX_OBJECT_BYTES + 1,
                "text/plain",
                Duration::from_secs(60),
            )
            .await
            .expect_err("too large");
        assert_eq!(refused.code(), Some(MailCode::AttachmentsTooLarge));
    }

    #[tokio::test]
    async fn s3_failures_are_store_errors_not_missing_objects() {
        let moto = Moto::start();
        let (client, _store) = s3_store(&moto).await;
        let store = ObjectStore::s3(client, format!("k2b-absent-{}", Uuid::new_v4()));
        let failed = store
            .digest(&key(), MAX_OBJECT_BYTES)
            .await
            .expect_err("no bucket");
        let MailError::Objects(message) = failed else {
            panic!("{failed:?}")
        };
        assert!(
            message.starts_with("get_object failed: NoSuchBucket"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn s3_delete_many_removes_every_key() {
        let moto = Moto::start();
        let (_client, store) = s3_store(&moto).await;
        let keys: Vec<String> = (0..3).map(|_| key()).collect();
        for key in &keys[..2] {
            store
                .put_bytes(key, Bytes::from_static(b"body"))
                .await
                .expect("put");
        }
        store.delete_many(&keys).await.expect("delete_many");
        store.delete_many(&[]).await.expect("nothing to delete");
        store
            .delete(&keys[0])
            .await
            .expect("delete of a missing key");
        for key in &keys {
            assert!(store.open(key).await.expect("open").is_none());
        }
        assert_eq!(store.purge_expired().await.expect("purge"), 0);
    }
}
