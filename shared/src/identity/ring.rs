//! The key ring in Postgres (`auth.signing_keys`): rotation, promotion, revocation, rewrap,
//! publication and pruning.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, PgConnection, PgPool};
use tokio::time::Instant;

use super::constants::{
    ACTIVATION_LEAD, PRUNE_FAMILIES_AFTER, PRUNE_FAMILIES_BATCH, PRUNE_KEYS_BATCH, ROLLOUT_MARGIN,
    ROTATION_AGE, SIGNING_CACHE,
};
use super::keys::{self, PrivateJwk};
use super::{IdentityError, Purpose, Signer};
use crate::db;
use crate::kek::KekSet;

/// How long a key signs: its rotation age, plus the activation lead of its successor, plus the
/// signing overlap after the successor takes over.
const SIGNING_PERIOD: Duration = Duration::from_secs(
    ROTATION_AGE.as_secs() + ROLLOUT_MARGIN.as_secs() + SIGNING_CACHE.as_secs(),
);

/// A row of `auth.signing_keys`.
#[derive(Debug, Clone, FromRow)]
pub struct KeyRow {
    pub id: uuid::Uuid,
    pub purpose: String,
    pub state: String,
    pub kid: String,
    pub alg: String,
    pub public_jwk: Value,
    pub encrypted_private_jwk: String,
    pub encryption_key_id: String,
    pub created_at: DateTime<Utc>,
    pub activate_at: DateTime<Utc>,
    pub sign_until: DateTime<Utc>,
    pub verify_until: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
    pub retired_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

const KEY_COLUMNS: &str = "id, purpose, state, kid, alg, public_jwk, encrypted_private_jwk, \
    encryption_key_id, created_at, activate_at, sign_until, verify_until, activated_at, \
    retired_at, revoked_at";

/// What one maintenance pass changed for a purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PurposeChanges {
    pub retired: u64,
    pub promoted: bool,
    pub created_active: bool,
    pub created_pending: bool,
}

impl PurposeChanges {
    pub fn is_empty(&self) -> bool {
        *self == PurposeChanges::default()
    }
}

fn rotation_age() -> chrono::Duration {
    chrono::Duration::seconds(ROTATION_AGE.as_secs() as i64)
}
fn rollout_margin() -> chrono::Duration {
    chrono::Duration::seconds(ROLLOUT_MARGIN.as_secs() as i64)
}

/// Fresh: signs for at least the rollout margin more and is younger than the rotation age.
fn is_fresh(row: &KeyRow, now: DateTime<Utc>) -> bool {
    now < row.sign_until - rollout_margin() && now < row.created_at + rotation_age()
}

/// Due for a successor: old enough, or close to the end of its signing period.
fn is_due(row: &KeyRow, now: DateTime<Utc>) -> bool {
    row.created_at + rotation_age() <= now || row.sign_until - rollout_margin() <= now
}

fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

async fn read_current(
    conn: &mut PgConnection,
    purpose: Purpose,
    lock: bool,
) -> Result<(Option<KeyRow>, Option<KeyRow>), IdentityError> {
    let statement = format!(
        "SELECT {KEY_COLUMNS} FROM auth.signing_keys WHERE purpose = $1 AND state IN ('pending', 'active')
         ORDER BY (state = 'active') DESC, created_at DESC{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(purpose.as_str())
        .fetch_all(conn)
        .await?;
    let active = rows.iter().find(|r| r.state == "active").cloned();
    let pending = rows.iter().find(|r| r.state == "pending").cloned();
    Ok((active, pending))
}

/// Generates key material off the async threads.
pub async fn generate_key() -> Result<keys::GeneratedKey, IdentityError> {
    tokio::task::spawn_blocking(keys::generate)
        .await
        .map_err(|_| IdentityError::Key(keys::KeyError::Generation))?
        .map_err(IdentityError::Key)
}

async fn insert_key(
    conn: &mut PgConnection,
    keks: &KekSet,
    purpose: Purpose,
    key: &keys::GeneratedKey,
    active: bool,
) -> Result<Option<KeyRow>, IdentityError> {
    let private = serde_json::to_vec(&key.private)
        .map_err(|_| IdentityError::Key(keys::KeyError::Generation))?;
    let sealed = keks.current.seal(&key.kid, &private);
    let public = serde_json::to_value(&key.public)
        .map_err(|_| IdentityError::Key(keys::KeyError::Generation))?;
    let lead = if active {
        0.0
    } else {
        ACTIVATION_LEAD.as_secs_f64()
    };
    let verify_extra = purpose.token_ttl().as_secs_f64()
        + super::constants::IDENTITY_CLOCK_TOLERANCE_SECONDS as f64
        + ROLLOUT_MARGIN.as_secs_f64();
    let statement = format!(
        "INSERT INTO auth.signing_keys (purpose, state, kid, public_jwk, encrypted_private_jwk,
            encryption_key_id, activate_at, sign_until, verify_until, activated_at)
         SELECT $1, $2, $3, $4, $5, $6, t.at, t.at + make_interval(secs => $7),
                t.at + make_interval(secs => $7) + make_interval(secs => $8),
                CASE WHEN $2 = 'active' THEN now() END
         FROM (SELECT now() + make_interval(secs => $9) AS at) t
         RETURNING {KEY_COLUMNS}"
    );
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .bind(purpose.as_str())
        .bind(if active { "active" } else { "pending" })
        .bind(&key.kid)
        .bind(public)
        .bind(sealed)
        .bind(&keks.current.id)
        .bind(SIGNING_PERIOD.as_secs_f64())
        .bind(verify_extra)
        .bind(lead)
        .fetch_optional(conn)
        .await?)
}

/// Keeps one purpose's ring healthy and returns its active key: retires keys past their signing
/// period, promotes a pending key whose time has come, creates an active key when none is usable
/// and a pending successor when the active key is due. Every statement is bounded by `deadline`
/// (transaction-local `statement_timeout`), and the writing part holds the purpose's advisory
/// lock so replicas take turns.
pub async fn maintain_purpose(
    pool: &PgPool,
    keks: &KekSet,
    purpose: Purpose,
    deadline: Instant,
) -> Result<(KeyRow, PurposeChanges), IdentityError> {
    // Fast path, without the lock: a fresh active key and no pending key that is due.
    let mut tx = db::begin_bounded(pool, remaining(deadline)).await?;
    let (active, pending) = read_current(&mut tx, purpose, false).await?;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    if let Some(active) = &active
        && is_fresh(active, now)
        && pending.as_ref().is_none_or(|p| p.activate_at > now)
    {
        return Ok((active.clone(), PurposeChanges::default()));
    }
    // Key generation takes a while: do it before taking the lock.
    let needs_key = match &active {
        None => true,
        Some(active) => active.sign_until <= now || (pending.is_none() && !is_fresh(active, now)),
    };
    let mut pregenerated = if needs_key {
        Some(generate_key().await?)
    } else {
        None
    };

    let mut tx = db::begin_bounded(pool, remaining(deadline)).await?;
    db::advisory_xact_lock(
        &mut tx,
        &format!("cloud:identity-keyring:{}", purpose.as_str()),
    )
    .await?;
    let mut changes = PurposeChanges::default();
    // Issuance holds its key `FOR KEY SHARE`; only `FOR UPDATE` waits for it to finish, so the
    // rows change state only after the tokens being signed under them are out.
    sqlx::query(
        "SELECT id FROM auth.signing_keys WHERE purpose = $1 AND state IN ('pending', 'active')
         FOR UPDATE",
    )
    .bind(purpose.as_str())
    .execute(&mut *tx)
    .await?;
    let retired = sqlx::query(
        "UPDATE auth.signing_keys SET state = 'retired', retired_at = now()
         WHERE purpose = $1 AND state IN ('pending', 'active') AND sign_until <= now()",
    )
    .bind(purpose.as_str())
    .execute(&mut *tx)
    .await?;
    changes.retired = retired.rows_affected();
    let (mut current, pending) = read_current(&mut tx, purpose, true).await?;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;

    if let Some(pending) = &pending
        && pending.activate_at <= now
    {
        let overlap_verify = SIGNING_CACHE.as_secs_f64()
            + purpose.token_ttl().as_secs_f64()
            + super::constants::IDENTITY_CLOCK_TOLERANCE_SECONDS as f64
            + ROLLOUT_MARGIN.as_secs_f64();
        sqlx::query(
            "UPDATE auth.signing_keys SET state = 'retired', retired_at = now(),
                sign_until = GREATEST(activate_at, LEAST(sign_until, now() + make_interval(secs => $2))),
                verify_until = GREATEST(verify_until, now() + make_interval(secs => $3))
             WHERE purpose = $1 AND state = 'active'",
        )
        .bind(purpose.as_str())
        .bind(SIGNING_CACHE.as_secs_f64())
        .bind(overlap_verify)
        .execute(&mut *tx)
        .await?;
        let statement = format!(
            "UPDATE auth.signing_keys SET state = 'active', activated_at = now()
             WHERE id = $1 AND state = 'pending' RETURNING {KEY_COLUMNS}"
        );
        let promoted: Option<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
            .bind(pending.id)
            .fetch_optional(&mut *tx)
            .await?;
        current = Some(promoted.ok_or(IdentityError::PromoteFailed(purpose))?);
        changes.promoted = true;
    }
    if current.is_none() {
        let key = match pregenerated.take() {
            Some(key) => key,
            None => generate_key().await?,
        };
        let row = insert_key(&mut tx, keks, purpose, &key, true)
            .await?
            .ok_or(IdentityError::CreateFailed(purpose))?;
        current = Some(row);
        changes.created_active = true;
    }
    let current = current.ok_or(IdentityError::CreateFailed(purpose))?;
    if !changes.promoted && pending.is_none() && is_due(&current, now) {
        let key = match pregenerated.take() {
            Some(key) => key,
            None => generate_key().await?,
        };
        insert_key(&mut tx, keks, purpose, &key, false).await?;
        changes.created_pending = true;
    }
    tx.commit().await?;
    Ok((current, changes))
}

/// Decrypts and checks an active row, giving the signer.
pub fn import_row(keks: &KekSet, purpose: Purpose, row: &KeyRow) -> Result<Signer, IdentityError> {
    if row.alg != super::constants::ALGORITHM || row.state != "active" {
        return Err(IdentityError::Key(keys::KeyError::Invalid(row.kid.clone())));
    }
    let (public, private) = decrypt_row(keks, row)?;
    let key = keys::import(&row.kid, &public, &private)?;
    Ok(Signer {
        purpose,
        kid: row.kid.clone(),
        key,
        sign_until: row.sign_until,
    })
}

fn decrypt_row(
    keks: &KekSet,
    row: &KeyRow,
) -> Result<(keys::PublicJwk, PrivateJwk), IdentityError> {
    let kek = keks
        .by_id(&row.encryption_key_id)
        .ok_or_else(|| IdentityError::NoKek(row.kid.clone()))?;
    let plaintext = kek
        .open(&row.kid, &row.encrypted_private_jwk)
        .ok_or_else(|| IdentityError::Undecryptable(row.kid.clone()))?;
    let private: PrivateJwk = serde_json::from_slice(&plaintext)
        .map_err(|_| IdentityError::Key(keys::KeyError::Invalid(row.kid.clone())))?;
    let public = keys::parse_public(&row.public_jwk)
        .ok_or_else(|| IdentityError::Key(keys::KeyError::Invalid(row.kid.clone())))?;
    Ok((public, private))
}

/// Marks a key revoked (waiting for issuance in flight, which holds the row `FOR KEY SHARE`:
/// the row is taken `FOR UPDATE` first, the one lock that waits for it).
/// Returns the key's purpose when a row changed.
pub async fn revoke(
    pool: &PgPool,
    kid: &str,
    reason: &str,
) -> Result<Option<Purpose>, IdentityError> {
    let reason: String = reason.trim().chars().take(500).collect();
    if reason.is_empty() {
        return Err(IdentityError::RevocationReason);
    }
    let purpose: Option<String> = sqlx::query_scalar(
        "WITH target AS (
           SELECT id FROM auth.signing_keys WHERE kid = $1 AND state <> 'revoked' FOR UPDATE)
         UPDATE auth.signing_keys k SET state = 'revoked', revoked_at = now(), revoke_reason = $2
         FROM target WHERE k.id = target.id AND k.state <> 'revoked' RETURNING k.purpose",
    )
    .bind(kid)
    .bind(reason)
    .fetch_optional(pool)
    .await?;
    Ok(purpose.as_deref().and_then(Purpose::parse))
}

/// What [`rotate`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Rotation {
    /// A successor was created; it is published now and signs from `activate_at`.
    Scheduled { kid: String, activate_at: String },
    /// A successor was already waiting: nothing new was created.
    AlreadyScheduled { kid: String, activate_at: String },
    /// The purpose had no usable active key: one was created and signs at once.
    CreatedActive { kid: String },
}

/// Rotates a purpose on an operator's request: a pending successor published now that takes over
/// after the activation lead (so every verifier knows it before it signs), or, when the purpose
/// has no usable active key, an active key at once. Takes the purpose's advisory lock like the
/// scheduled maintenance, so the two never create two successors.
pub async fn rotate(
    pool: &PgPool,
    keks: &KekSet,
    purpose: Purpose,
) -> Result<Rotation, IdentityError> {
    // Key generation takes a while: before the lock.
    let key = generate_key().await?;
    let mut tx = pool.begin().await?;
    db::advisory_xact_lock(
        &mut tx,
        &format!("cloud:identity-keyring:{}", purpose.as_str()),
    )
    .await?;
    let (active, pending) = read_current(&mut tx, purpose, true).await?;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await?;
    let rotation = match (active.filter(|a| a.sign_until > now), pending) {
        (_, Some(pending)) => Rotation::AlreadyScheduled {
            kid: pending.kid,
            activate_at: iso(pending.activate_at),
        },
        (Some(_), None) => {
            let row = insert_key(&mut tx, keks, purpose, &key, false)
                .await?
                .ok_or(IdentityError::CreateFailed(purpose))?;
            Rotation::Scheduled {
                kid: row.kid,
                activate_at: iso(row.activate_at),
            }
        }
        (None, None) => {
            let row = insert_key(&mut tx, keks, purpose, &key, true)
                .await?
                .ok_or(IdentityError::CreateFailed(purpose))?;
            Rotation::CreatedActive { kid: row.kid }
        }
    };
    tx.commit().await?;
    Ok(rotation)
}

/// A signing key that the configured key-encryption keys cannot open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SealedKeyProblem {
    pub kid: String,
    pub state: String,
    /// The id of the key-encryption key it was sealed with.
    pub encryption_key_id: String,
    pub reason: String,
}

/// How one purpose's ring stands, as an operator's check sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RingHealth {
    pub purpose: Purpose,
    /// The active key that may still sign.
    pub active: Option<String>,
    /// The published successor and when it takes over.
    pub pending: Option<(String, String)>,
    /// The active key is old enough (or close enough to the end of its signing period) that a
    /// successor should be published by now.
    pub successor_due: bool,
    /// Keys that sign or will sign (pending, active) and do not decrypt under the configured
    /// key-encryption keys, or decrypt to a broken pair.
    pub sealed_problems: Vec<SealedKeyProblem>,
}

/// The health of every purpose's ring. Without key-encryption keys, every key that signs is a
/// problem (nothing can open it).
pub async fn health(
    pool: &PgPool,
    keks: Option<&KekSet>,
) -> Result<Vec<RingHealth>, IdentityError> {
    let mut report = Vec::new();
    for purpose in Purpose::ALL {
        let mut conn = pool.acquire().await?;
        let statement = format!(
            "SELECT {KEY_COLUMNS} FROM auth.signing_keys
             WHERE purpose = $1 AND state IN ('pending', 'active') ORDER BY created_at"
        );
        let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
            .bind(purpose.as_str())
            .fetch_all(&mut *conn)
            .await?;
        let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *conn)
            .await?;
        let active = rows
            .iter()
            .rev()
            .find(|r| r.state == "active" && r.sign_until > now);
        let pending = rows.iter().rev().find(|r| r.state == "pending");
        let mut sealed_problems = Vec::new();
        for row in &rows {
            let opened = match keks {
                None => Err(IdentityError::NoKeyEncryptionKey),
                Some(keks) => decrypt_row(keks, row)
                    .and_then(|(public, private)| Ok(keys::import(&row.kid, &public, &private)?)),
            };
            if let Err(error) = opened {
                sealed_problems.push(SealedKeyProblem {
                    kid: row.kid.clone(),
                    state: row.state.clone(),
                    encryption_key_id: row.encryption_key_id.clone(),
                    reason: error.to_string(),
                });
            }
        }
        report.push(RingHealth {
            purpose,
            active: active.map(|a| a.kid.clone()),
            pending: pending.map(|p| (p.kid.clone(), iso(p.activate_at))),
            successor_due: active.is_some_and(|a| is_due(a, now)),
            sealed_problems,
        });
    }
    Ok(report)
}

/// One key as operators see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    pub purpose: String,
    pub state: String,
    pub kid: String,
    pub alg: String,
    pub encryption_key_id: String,
    pub created_at: String,
    pub activate_at: String,
    pub sign_until: String,
    pub verify_until: String,
    pub revoked_at: Option<String>,
}

fn iso(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Every key, by purpose, newest first.
pub async fn status(pool: &PgPool) -> Result<Vec<KeyStatus>, IdentityError> {
    let statement =
        format!("SELECT {KEY_COLUMNS} FROM auth.signing_keys ORDER BY purpose, created_at DESC");
    let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| KeyStatus {
            purpose: row.purpose,
            state: row.state,
            kid: row.kid,
            alg: row.alg,
            encryption_key_id: row.encryption_key_id,
            created_at: iso(row.created_at),
            activate_at: iso(row.activate_at),
            sign_until: iso(row.sign_until),
            verify_until: iso(row.verify_until),
            revoked_at: row.revoked_at.map(iso),
        })
        .collect())
}

/// Re-encrypts every key not under the current KEK. All rows must decrypt and pass the pair
/// check first, or nothing changes; the writes are one transaction. Returns how many changed.
pub async fn rewrap(pool: &PgPool, keks: &KekSet) -> Result<u64, IdentityError> {
    let statement = format!("SELECT {KEY_COLUMNS} FROM auth.signing_keys ORDER BY created_at");
    let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(statement))
        .fetch_all(pool)
        .await?;
    let mut updates = Vec::new();
    for row in &rows {
        let (public, private) = decrypt_row(keks, row)?;
        keys::import(&row.kid, &public, &private)?;
        if row.encryption_key_id != keks.current.id {
            let plaintext = serde_json::to_vec(&private)
                .map_err(|_| IdentityError::Key(keys::KeyError::Invalid(row.kid.clone())))?;
            let sealed = keks.current.seal(&row.kid, &plaintext);
            let reopened = keks
                .current
                .open(&row.kid, &sealed)
                .ok_or_else(|| IdentityError::Undecryptable(row.kid.clone()))?;
            if reopened != plaintext {
                return Err(IdentityError::Undecryptable(row.kid.clone()));
            }
            updates.push((row.id, sealed));
        }
    }
    let mut tx = pool.begin().await?;
    for (id, sealed) in &updates {
        sqlx::query(
            "UPDATE auth.signing_keys SET encrypted_private_jwk = $2, encryption_key_id = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(sealed)
        .bind(&keks.current.id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(updates.len() as u64)
}

/// The published keys of a purpose: pending, active and retired keys still inside their verify
/// window, oldest first. Revoked keys are never published.
pub async fn list_jwks(pool: &PgPool, purpose: Purpose) -> Result<Vec<Value>, IdentityError> {
    Ok(sqlx::query_scalar(
        "SELECT public_jwk FROM auth.signing_keys
         WHERE purpose = $1 AND state IN ('pending', 'active', 'retired') AND verify_until > now()
         ORDER BY created_at, kid",
    )
    .bind(purpose.as_str())
    .fetch_all(pool)
    .await?)
}

/// The public JWK of one verifiable key (not revoked, inside its window).
pub async fn find_public_jwk(
    pool: &PgPool,
    purpose: Purpose,
    kid: &str,
) -> Result<Option<Value>, IdentityError> {
    Ok(sqlx::query_scalar(
        "SELECT public_jwk FROM auth.signing_keys
         WHERE kid = $1 AND purpose = $2 AND state <> 'revoked' AND verify_until > now()",
    )
    .bind(kid)
    .bind(purpose.as_str())
    .fetch_optional(pool)
    .await?)
}

/// Raises each session key's verify window to cover its latest family (revoked ones too).
pub async fn maintain_verification_windows(pool: &PgPool) -> Result<u64, IdentityError> {
    let extra =
        super::constants::IDENTITY_CLOCK_TOLERANCE_SECONDS as f64 + ROLLOUT_MARGIN.as_secs_f64();
    let result = sqlx::query(
        "UPDATE auth.signing_keys k SET verify_until = m.latest + make_interval(secs => $1)
         FROM (SELECT signing_kid, max(expires_at) AS latest FROM auth.session_families GROUP BY signing_kid) m
         WHERE k.kid = m.signing_kid AND k.purpose = 'session' AND k.state <> 'revoked'
           AND k.verify_until < m.latest + make_interval(secs => $1)",
    )
    .bind(extra)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

/// Deletes up to 500 families that expired or were revoked more than a day ago.
pub async fn prune_families(pool: &PgPool) -> Result<u64, IdentityError> {
    let result = sqlx::query(
        "DELETE FROM auth.session_families WHERE sid IN (
           SELECT sid FROM auth.session_families
           WHERE expires_at < now() - make_interval(secs => $1)
              OR revoked_at < now() - make_interval(secs => $1)
           ORDER BY COALESCE(revoked_at, expires_at) LIMIT $2 FOR UPDATE SKIP LOCKED)",
    )
    .bind(PRUNE_FAMILIES_AFTER.as_secs_f64())
    .bind(PRUNE_FAMILIES_BATCH)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}

/// Deletes up to 100 retired keys past their verify window that no family references.
pub async fn prune_keys(pool: &PgPool) -> Result<u64, IdentityError> {
    let result = sqlx::query(
        "DELETE FROM auth.signing_keys WHERE id IN (
           SELECT id FROM auth.signing_keys k
           WHERE k.state = 'retired' AND k.verify_until < now()
             AND NOT EXISTS (SELECT 1 FROM auth.session_families f WHERE f.signing_kid = k.kid)
           ORDER BY k.verify_until LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind(PRUNE_KEYS_BATCH)
    .execute(pool)
    .await?;
    Ok(result.rows_affected())
}
