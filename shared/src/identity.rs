//! Identity: the signing-key ring, JWKS publication, session and invocation tokens, and app
//! workload credentials.
//!
//! [`Identity`] is the per-process service: it caches one signer per purpose (refreshed by a
//! single shared flight bounded at 30 s), loads the runtime configuration (issuer) the same way,
//! and runs every issuance inside [`Identity::with_active_signer`], which checks in Postgres,
//! under one deadline, that the key is still active while the token is made.

pub mod constants;
pub mod flight;
pub mod invocation;
pub mod jwt;
pub mod keys;
pub mod metrics;
pub mod oauth;
pub mod remote;
pub mod ring;
pub mod runtime;
pub mod session;
pub mod signing;
pub mod workload;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use jsonwebtoken::DecodingKey;
use serde::Serialize;
use sqlx::PgPool;

pub use crate::kek::{self, KekSet};
pub use constants::*;
pub use metrics::{Counter, Metrics, MetricsSnapshot};
pub use ring::PurposeChanges;
pub use runtime::{IdentitySettings, IdentitySettingsSource, RuntimeConfig, RuntimeConfigCache};
pub use signing::{IssueOptions, ScopeSigner, SigningScope, Step};

use crate::settings::Settings;

/// What a key signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    Session,
    Invocation,
    Oauth,
}

impl Purpose {
    /// Every purpose, in maintenance order.
    pub const ALL: [Purpose; 3] = [Purpose::Session, Purpose::Invocation, Purpose::Oauth];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Session => "session",
            Purpose::Invocation => "invocation",
            Purpose::Oauth => "oauth",
        }
    }

    pub fn parse(value: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|p| p.as_str() == value)
    }

    /// The longest lifetime of a token of this purpose, which every verify window covers.
    pub fn token_ttl(self) -> Duration {
        match self {
            Purpose::Session => Duration::from_secs(24 * 3600),
            Purpose::Invocation => Duration::from_secs(INVOCATION_TOKEN_TTL_SECONDS as u64),
            Purpose::Oauth => Duration::from_secs(2 * 3600),
        }
    }
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An imported, usable signing key.
pub struct Signer {
    pub purpose: Purpose,
    pub kid: String,
    pub key: keys::SigningKey,
    pub sign_until: DateTime<Utc>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} {})", self.purpose, self.kid)
    }
}

/// The identity area's one error type. Messages are the operator-facing texts of the platform.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("Identity service did not respond within {within} ({step})")]
    Timeout { within: String, step: Step },
    #[error("Identity issuance was cancelled")]
    Cancelled,
    #[error("Identity issuance timeout must be positive")]
    InvalidTimeout,
    #[error("No active {0} identity signer is available")]
    NoActiveSigner(Purpose),
    #[error("Cloud identity signer refresh did not finish within 30 s")]
    RefreshTimeout,
    #[error("Cloud identity signer refresh was invalidated")]
    RefreshInvalidated,
    #[error("Cloud identity settings did not load within 30 s")]
    SettingsTimeout,
    #[error("Active {0} signing key is past sign_until")]
    PastSignUntil(Purpose),
    #[error("Failed to promote the pending {0} signing key")]
    PromoteFailed(Purpose),
    #[error("Failed to create initial {0} signing key")]
    CreateFailed(Purpose),
    #[error("This function holds no Cloud identity key-encryption key")]
    NoKeyEncryptionKey,
    #[error("No configured KEK can decrypt Cloud identity key {0}")]
    NoKek(String),
    #[error("Cloud identity key {0} could not be decrypted")]
    Undecryptable(String),
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    #[error("Cloud identity issuer must be an http(s) URL (app.url)")]
    InvalidIssuer,
    #[error("Cloud identity issuer must use HTTPS in production")]
    IssuerNotHttps,
    #[error("{0} must use http or https")]
    BadJwksOrigin(&'static str),
    #[error("Emergency key revocation requires a reason")]
    RevocationReason,
    #[error("Cloud session expiry must follow issuance")]
    ExpiryBeforeIssuance,
    #[error("The account cannot receive a session")]
    AccountUnavailable,
    #[error("token: {0}")]
    Encode(#[from] jwt::EncodeError),
    #[error("invalid invocation: {0}")]
    InvalidInvocation(&'static str),
    #[error("identity settings: {0}")]
    Settings(#[from] crate::settings::SettingsError),
    #[error("identity database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("the published keys at {0} cannot be read")]
    KeysUnavailable(String),
    #[error("{0}")]
    Shared(Arc<IdentityError>),
}

impl From<crate::auth::AuthError> for IdentityError {
    /// A database failure stays one (it is not a statement about the account).
    fn from(error: crate::auth::AuthError) -> Self {
        match error {
            crate::auth::AuthError::Database(e) => IdentityError::Database(e),
            crate::auth::AuthError::Settings(e) => IdentityError::Settings(e),
            _ => IdentityError::AccountUnavailable,
        }
    }
}

impl From<crate::db::DbError> for IdentityError {
    fn from(error: crate::db::DbError) -> Self {
        match error {
            crate::db::DbError::Sql(e) => IdentityError::Database(e),
            other => IdentityError::Database(sqlx::Error::Protocol(other.to_string())),
        }
    }
}

impl IdentityError {
    /// The error behind any sharing wrapper.
    pub fn root(&self) -> &IdentityError {
        match self {
            IdentityError::Shared(inner) => inner.root(),
            other => other,
        }
    }

    /// Whether this is the issuance deadline passing (the platform's `TimeoutError`).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.root(),
            IdentityError::Timeout { .. }
                | IdentityError::RefreshTimeout
                | IdentityError::SettingsTimeout
        )
    }
}

/// Prepares signers: in production, maintenance of the purpose's ring and import of its active
/// key; tests substitute sources that hang or fail.
pub trait SignerSource: Send + Sync {
    fn prepare(&self, purpose: Purpose) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>>;
}

/// The production signer source: [`ring::maintain_purpose`] bounded at 30 s, then import.
pub struct DbSignerSource {
    pool: PgPool,
    keks: Option<KekSet>,
    metrics: Arc<Metrics>,
}

impl DbSignerSource {
    pub fn new(pool: PgPool, keks: Option<KekSet>, metrics: Arc<Metrics>) -> DbSignerSource {
        DbSignerSource {
            pool,
            keks,
            metrics,
        }
    }
}

impl SignerSource for DbSignerSource {
    fn prepare(&self, purpose: Purpose) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>> {
        let pool = self.pool.clone();
        let keks = self.keks.clone();
        let metrics = self.metrics.clone();
        async move {
            let keks = keks.ok_or(IdentityError::NoKeyEncryptionKey)?;
            let deadline = tokio::time::Instant::now() + REFRESH_TIMEOUT;
            let (row, changes) = ring::maintain_purpose(&pool, &keks, purpose, deadline).await?;
            if changes.promoted || changes.created_active {
                metrics.inc(Counter::RotationSuccess);
            }
            Ok(Arc::new(ring::import_row(&keks, purpose, &row)?))
        }
        .boxed()
    }
}

/// Reads `app.url` and `freeipa.groups.admin` in parallel from settings.
struct SettingsSource(Arc<Settings>);

impl IdentitySettingsSource for SettingsSource {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
        let settings = self.0.clone();
        async move {
            let (url, groups) =
                tokio::join!(settings.app_url(), settings.get("freeipa.groups.admin"));
            Ok(IdentitySettings {
                app_url: url?,
                admin_groups: groups?,
            })
        }
        .boxed()
    }
}

struct CachedSigner {
    signer: Arc<Signer>,
    fresh_until: tokio::time::Instant,
}

type VerifyKeyCache = HashMap<(Purpose, String), (tokio::time::Instant, Arc<DecodingKey>)>;

struct IdentityInner {
    pool: PgPool,
    keks: Option<KekSet>,
    source: Arc<dyn SignerSource>,
    runtime: RuntimeConfigCache,
    signers: Arc<Mutex<HashMap<Purpose, CachedSigner>>>,
    flights: flight::SingleFlight<Purpose, Arc<Signer>, Arc<IdentityError>>,
    verify_keys: Mutex<VerifyKeyCache>,
    /// When each purpose's verifiable keys were last loaded on a miss.
    key_set_loaded: Mutex<HashMap<Purpose, tokio::time::Instant>>,
    /// Bumped whenever cached keys are dropped: a load that began before keeps nothing.
    key_generation: std::sync::atomic::AtomicU64,
    /// The OAuth issuer's published keys (see [`oauth`]).
    oauth_keys: Mutex<Option<Arc<remote::RemoteKeySet>>>,
    metrics: Arc<Metrics>,
    refresh_timeout: Duration,
}

/// The identity service of one process. Cheap to clone.
#[derive(Clone)]
pub struct Identity(Arc<IdentityInner>);

/// How long a verification key found in the database is reused in this process.
const VERIFY_KEY_CACHE: Duration = Duration::from_secs(60);
/// A miss loads every verifiable key of the purpose; for this long afterwards an unknown `kid`
/// is answered from memory, so tokens with forged key ids cost a query per interval (and per
/// concurrent miss), not one each. Keys are published ten minutes before they sign, so a real
/// kid is rarely new; a process that makes or drops a key forgets the interval at once.
pub const UNKNOWN_KID_CACHE: Duration = Duration::from_secs(5);

impl Identity {
    /// The production service: keys in `pool`, encrypted with `keks` (`None` in a function that
    /// only verifies), issuer from `settings`.
    pub fn new(
        pool: PgPool,
        keks: Option<KekSet>,
        settings: Arc<Settings>,
        production: bool,
        jwks_origin: Option<String>,
        oauth_jwks_origin: Option<String>,
    ) -> Identity {
        let metrics = Arc::new(Metrics::default());
        let source = Arc::new(DbSignerSource {
            pool: pool.clone(),
            keks: keks.clone(),
            metrics: metrics.clone(),
        });
        let runtime = RuntimeConfigCache::new(
            Arc::new(SettingsSource(settings)),
            production,
            jwks_origin,
            oauth_jwks_origin,
        );
        Identity::from_parts(pool, keks, source, runtime, metrics)
    }

    /// A service with substituted signer and settings sources (tests).
    pub fn from_parts(
        pool: PgPool,
        keks: Option<KekSet>,
        source: Arc<dyn SignerSource>,
        runtime: RuntimeConfigCache,
        metrics: Arc<Metrics>,
    ) -> Identity {
        Identity(Arc::new(IdentityInner {
            pool,
            keks,
            source,
            runtime,
            signers: Arc::new(Mutex::new(HashMap::new())),
            flights: flight::SingleFlight::default(),
            verify_keys: Mutex::new(HashMap::new()),
            key_set_loaded: Mutex::new(HashMap::new()),
            key_generation: std::sync::atomic::AtomicU64::new(0),
            oauth_keys: Mutex::new(None),
            metrics,
            refresh_timeout: REFRESH_TIMEOUT,
        }))
    }

    pub fn pool(&self) -> &PgPool {
        &self.0.pool
    }
    /// The key-encryption keys, or an error in a function that holds none.
    pub fn keks(&self) -> Result<&KekSet, IdentityError> {
        self.0
            .keks
            .as_ref()
            .ok_or(IdentityError::NoKeyEncryptionKey)
    }
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The runtime configuration (issuer, admin groups, JWKS URLs).
    pub async fn runtime_config(&self) -> Result<Arc<RuntimeConfig>, IdentityError> {
        self.0.runtime.get().await
    }

    /// Forgets the cached runtime configuration.
    pub fn invalidate_runtime_config(&self) {
        self.0.runtime.invalidate();
    }

    fn cached_signer(&self, purpose: Purpose) -> Option<Arc<Signer>> {
        let signers = self.0.signers.lock().ok()?;
        let cached = signers.get(&purpose)?;
        (cached.fresh_until > tokio::time::Instant::now() && cached.signer.sign_until > Utc::now())
            .then(|| cached.signer.clone())
    }

    fn cache_signer(signers: &Mutex<HashMap<Purpose, CachedSigner>>, signer: &Arc<Signer>) {
        // Cached for a minute at most, and never past the key's signing period.
        let signing_left = (signer.sign_until - Utc::now())
            .to_std()
            .unwrap_or_default();
        let fresh_until = tokio::time::Instant::now() + SIGNING_CACHE.min(signing_left);
        if let Ok(mut signers) = signers.lock() {
            signers.insert(
                signer.purpose,
                CachedSigner {
                    signer: signer.clone(),
                    fresh_until,
                },
            );
        }
    }

    /// The signer of a purpose: cached for up to 60 s, else refreshed by the purpose's shared
    /// flight, bounded at 30 s. When the refresh fails or stalls, a cached signer that may still
    /// sign is returned (and kept for another 60 s at most); otherwise the error.
    pub async fn prepare_signer(&self, purpose: Purpose) -> Result<Arc<Signer>, IdentityError> {
        if let Some(signer) = self.cached_signer(purpose) {
            return Ok(signer);
        }
        let start = Utc::now();
        let work = self.0.source.prepare(purpose);
        let timeout = self.0.refresh_timeout;
        let bounded = async move {
            // The work runs in its own task: a stalled refresh releases its callers at the
            // bound while its SQL ends at the same deadline through statement_timeout.
            let task = tokio::spawn(tracing::Instrument::in_current_span(work));
            match tokio::time::timeout(timeout, task).await {
                Ok(Ok(Ok(signer))) => Ok(signer),
                Ok(Ok(Err(error))) => Err(Arc::new(error)),
                Ok(Err(_)) => Err(Arc::new(IdentityError::RefreshInvalidated)),
                Err(_) => Err(Arc::new(IdentityError::RefreshTimeout)),
            }
        };
        let signers = self.0.signers.clone();
        let (result, joined) = self
            .0
            .flights
            .run_joining(purpose, bounded, move |signer| {
                Identity::cache_signer(&signers, signer)
            })
            .await;
        if joined {
            self.0.metrics.inc(Counter::SignerWait);
        }
        if result.is_ok() {
            // This process may have just made the key: its kid is not "unknown".
            self.forget_key_set_load(purpose);
        }
        let outcome = match result {
            Ok(signer) if signer.sign_until <= start => Err(IdentityError::PastSignUntil(purpose)),
            Ok(signer) => Ok(signer),
            Err(flight::FlightError::Invalidated) => Err(IdentityError::RefreshInvalidated),
            Err(flight::FlightError::Failed(error)) => Err(IdentityError::Shared(error)),
        };
        match outcome {
            Ok(signer) => Ok(signer),
            Err(error) => {
                self.0.metrics.inc(Counter::RotationFailure);
                tracing::warn!(purpose = purpose.as_str(), error = %error, "identity signer refresh failed");
                let fallback = self
                    .0
                    .signers
                    .lock()
                    .ok()
                    .and_then(|signers| signers.get(&purpose).map(|c| c.signer.clone()))
                    .filter(|signer| signer.sign_until > start);
                match fallback {
                    Some(signer) => {
                        Identity::cache_signer(&self.0.signers, &signer);
                        Ok(signer)
                    }
                    None => Err(error),
                }
            }
        }
    }

    fn key_generation(&self) -> u64 {
        self.0
            .key_generation
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn forget_key_set_load(&self, purpose: Purpose) {
        self.0
            .key_generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut loaded) = self.0.key_set_loaded.lock() {
            loaded.remove(&purpose);
        }
    }

    /// Drops the cached signer of `purpose` (only if it is `kid`, when given) and any flight.
    pub fn invalidate_signer(&self, purpose: Purpose, kid: Option<&str>) {
        self.forget_key_set_load(purpose);
        if let Ok(mut signers) = self.0.signers.lock() {
            let matches = signers
                .get(&purpose)
                .is_some_and(|cached| kid.is_none_or(|kid| cached.signer.kid == kid));
            if matches {
                signers.remove(&purpose);
                self.0.flights.invalidate(&purpose);
            }
        }
        if let Ok(mut keys) = self.0.verify_keys.lock() {
            keys.retain(|(p, k), _| *p != purpose || kid.is_some_and(|kid| k != kid));
        }
    }

    /// Drops every cached signer and flight.
    pub fn invalidate_all_signers(&self) {
        self.0
            .key_generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut loaded) = self.0.key_set_loaded.lock() {
            loaded.clear();
        }
        if let Ok(mut signers) = self.0.signers.lock() {
            signers.clear();
        }
        self.0.flights.invalidate_all();
        if let Ok(mut keys) = self.0.verify_keys.lock() {
            keys.clear();
        }
    }

    /// The verification key of `kid` for `purpose` from the database (cached for 60 s), if the
    /// key is not revoked and inside its verify window; `None` also when it cannot be read.
    pub async fn verification_key(&self, purpose: Purpose, kid: &str) -> Option<Arc<DecodingKey>> {
        self.find_verification_key(purpose, kid)
            .await
            .ok()
            .flatten()
    }

    /// [`Identity::verification_key`], telling an unknown key (`Ok(None)`) from a database that
    /// cannot be asked (`Err`). A miss loads every verifiable key of the purpose at once and is
    /// not repeated for [`UNKNOWN_KID_CACHE`].
    pub async fn find_verification_key(
        &self,
        purpose: Purpose,
        kid: &str,
    ) -> Result<Option<Arc<DecodingKey>>, IdentityError> {
        let now = tokio::time::Instant::now();
        let cache_key = (purpose, kid.to_string());
        if let Ok(keys) = self.0.verify_keys.lock()
            && let Some((fresh_until, key)) = keys.get(&cache_key)
            && now < *fresh_until
        {
            return Ok(Some(key.clone()));
        }
        if let Ok(loaded) = self.0.key_set_loaded.lock()
            && loaded
                .get(&purpose)
                .is_some_and(|at| now.duration_since(*at) < UNKNOWN_KID_CACHE)
        {
            return Ok(None);
        }
        self.0.metrics.inc(Counter::UnknownKidRefresh);
        let generation = self.key_generation();
        // An outage is not an answer: nothing is remembered, the next caller asks again.
        let published = ring::list_jwks(&self.0.pool, purpose).await?;
        let mut found = None;
        if let Ok(mut keys) = self.0.verify_keys.lock()
            // Keys dropped while the query ran (a revocation) are not brought back.
            && self.key_generation() == generation
        {
            for jwk in &published {
                let Some(public) = keys::parse_public(jwk) else {
                    continue;
                };
                let Ok(key) = keys::decoding_key(&public) else {
                    continue;
                };
                let key = Arc::new(key);
                if public.kid == kid {
                    found = Some(key.clone());
                }
                keys.insert((purpose, public.kid), (now + VERIFY_KEY_CACHE, key));
            }
        }
        // Marked once loaded: callers that arrived while the load ran asked themselves.
        if let Ok(mut loaded) = self.0.key_set_loaded.lock()
            && self.key_generation() == generation
        {
            loaded.insert(purpose, tokio::time::Instant::now());
        }
        Ok(found)
    }

    /// Prepares the session, invocation and OAuth signers, then rewraps every key when a
    /// previous KEK is configured. Returns the number of keys rewrapped.
    pub async fn initialize(&self) -> Result<u64, IdentityError> {
        for purpose in Purpose::ALL {
            self.prepare_signer(purpose).await?;
        }
        let keks = self.keks()?;
        if keks.previous.is_some() {
            let count = ring::rewrap(&self.0.pool, keks).await?;
            self.invalidate_all_signers();
            return Ok(count);
        }
        Ok(0)
    }

    /// Emergency revocation: the key stops signing and verifying at once (waiting for issuance
    /// in flight), the cache forgets it, and a successor is made active. Returns whether a row
    /// changed.
    pub async fn revoke_key(&self, kid: &str, reason: &str) -> Result<bool, IdentityError> {
        let Some(purpose) = ring::revoke(&self.0.pool, kid, reason).await? else {
            return Ok(false);
        };
        self.invalidate_signer(purpose, None);
        if let Ok(mut keys) = self.0.verify_keys.lock() {
            keys.retain(|(_, k), _| k != kid);
        }
        tracing::warn!(
            purpose = purpose.as_str(),
            kid,
            "identity signing key revoked"
        );
        self.prepare_signer(purpose).await?;
        Ok(true)
    }

    /// An operator's rotation of one purpose (see [`ring::rotate`]). A key created active
    /// replaces the cached signer at once.
    pub async fn rotate_key(&self, purpose: Purpose) -> Result<ring::Rotation, IdentityError> {
        let rotation = ring::rotate(&self.0.pool, self.keks()?, purpose).await?;
        tracing::info!(
            purpose = purpose.as_str(),
            rotation = ?rotation,
            "identity signing key rotation requested"
        );
        if matches!(rotation, ring::Rotation::CreatedActive { .. }) {
            self.invalidate_signer(purpose, None);
            self.0.metrics.inc(Counter::RotationSuccess);
        }
        Ok(rotation)
    }

    /// The health of every purpose's key ring under this function's key-encryption keys.
    pub async fn ring_health(&self) -> Result<Vec<ring::RingHealth>, IdentityError> {
        ring::health(&self.0.pool, self.0.keks.as_ref()).await
    }

    /// The scheduled key maintenance: each purpose with its own 30 s deadline, then verify
    /// windows and pruning (unbounded). Logs one line saying what changed.
    pub async fn run_key_maintenance(&self) -> Result<KeyMaintenanceReport, IdentityError> {
        let mut report = KeyMaintenanceReport::default();
        for purpose in Purpose::ALL {
            let deadline = tokio::time::Instant::now() + REFRESH_TIMEOUT;
            let keks = self.keks()?;
            match ring::maintain_purpose(&self.0.pool, keks, purpose, deadline).await {
                Ok((_, changes)) => {
                    if changes.promoted || changes.created_active {
                        self.0.metrics.inc(Counter::RotationSuccess);
                        self.invalidate_signer(purpose, None);
                    }
                    report.purposes.insert(purpose.as_str(), changes);
                }
                Err(error) => {
                    self.0.metrics.inc(Counter::RotationFailure);
                    tracing::error!(purpose = purpose.as_str(), error = %error, "identity key maintenance failed");
                    report.failed.push(purpose.as_str());
                }
            }
        }
        report.windows_raised = ring::maintain_verification_windows(&self.0.pool).await?;
        report.families_pruned = ring::prune_families(&self.0.pool).await?;
        report.keys_pruned = ring::prune_keys(&self.0.pool).await?;
        let changed: Vec<String> = report
            .purposes
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .map(|(p, c)| format!("{p}:{}", serde_json::to_string(c).unwrap_or_default()))
            .collect();
        tracing::info!(
            changed = %changed.join(" "),
            failed = ?report.failed,
            windows_raised = report.windows_raised,
            families_pruned = report.families_pruned,
            keys_pruned = report.keys_pruned,
            "identity key maintenance"
        );
        Ok(report)
    }
}

/// What one maintenance run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KeyMaintenanceReport {
    pub purposes: std::collections::BTreeMap<&'static str, PurposeChanges>,
    pub failed: Vec<&'static str>,
    pub windows_raised: u64,
    pub families_pruned: u64,
    pub keys_pruned: u64,
}
