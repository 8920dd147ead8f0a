//! Identity constants, with their units in their names.

use std::time::Duration;

/// The application id the identity services require (`APP_ID`): this bundle is Cloud Core, the
/// only application that may hold the identity signing keys.
pub use crate::config::CORE_APP_ID;

pub const SESSION_JWKS_PATH: &str = "/.well-known/cloud-session-jwks.json";
pub const INVOCATION_JWKS_PATH: &str = "/.well-known/cloud-invocation-jwks.json";
pub const OAUTH_JWKS_PATH: &str = "/.well-known/jwks.json";
pub const SESSION_TOKEN_TYPE: &str = "cloud-session+jwt";
pub const SESSION_AUDIENCE: &str = "cloud";
pub const INVOCATION_TOKEN_TYPE: &str = "cloud-invocation+jwt";
pub const INVOCATION_PROTOCOL_VERSION: u32 = 1;
/// Exact lifetime of an invocation token: long enough for one call, short enough to be useless
/// when stolen.
pub const INVOCATION_TOKEN_TTL_SECONDS: i64 = 30;
pub const ALGORITHM: &str = "RS256";
/// Clock skew accepted on session tokens (also part of every verify window).
pub const IDENTITY_CLOCK_TOLERANCE_SECONDS: i64 = 30;
/// Clock skew accepted on invocation tokens.
pub const INVOCATION_CLOCK_TOLERANCE_SECONDS: i64 = 2;
/// JWKS `max-age` and the remote verifier's cache lifetime.
pub const JWKS_MAX_AGE_SECONDS: u64 = 300;
/// A pending key is published this long before it signs: longer than any verifier's cache.
pub const ACTIVATION_LEAD: Duration = Duration::from_secs(600);
/// Signer cache lifetime, the retired key's signing overlap, and the maintenance period.
pub const SIGNING_CACHE: Duration = Duration::from_secs(60);
/// Bound on one shared signer refresh or settings load; also the default issuance deadline.
pub const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);
/// A key is rotated after this age.
pub const ROTATION_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Added to every window so a key outlives the slowest rollout of a new one.
pub const ROLLOUT_MARGIN: Duration = Duration::from_secs(600);
/// Largest compact token accepted or produced.
pub const MAX_COMPACT_TOKEN_BYTES: usize = 4096;
/// Largest public JWK and encrypted private JWK stored.
pub const MAX_JWK_BYTES: usize = 16_384;
pub const MAX_CIPHERTEXT_BYTES: usize = 32_768;
/// Runtime configuration (issuer, admin groups) is reused this long.
pub const RUNTIME_CONFIG_CACHE: Duration = Duration::from_secs(60);
/// Remote JWKS: forced refreshes on an unknown kid are at least this far apart.
pub const REMOTE_JWKS_COOLDOWN: Duration = Duration::from_secs(30);
/// Remote JWKS fetch timeout.
pub const REMOTE_JWKS_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest remote JWKS document read (a dozen 4096-bit keys take about 10 KiB).
pub const REMOTE_JWKS_MAX_BYTES: usize = 256 * 1024;
/// Callers that wait for one remote JWKS fetch; more answer from the keys already held.
pub const REMOTE_JWKS_MAX_WAITERS: usize = 64;
/// Session families pruned per maintenance run, and the age after which they go.
pub const PRUNE_FAMILIES_BATCH: i64 = 500;
pub const PRUNE_FAMILIES_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Retired keys deleted per maintenance run.
pub const PRUNE_KEYS_BATCH: i64 = 100;
