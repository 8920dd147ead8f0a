//! Verification keys fetched from a JWKS URL, for apps that verify Core's tokens.
//!
//! The document is cached for 5 minutes. An unknown `kid` may force a refresh, at most once every
//! 30 seconds per URL; a refreshed document replaces the stored one only when the token that
//! asked for it verifies with it, so warm keys survive an outage of the JWKS endpoint.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jsonwebtoken::DecodingKey;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::constants::{JWKS_MAX_AGE_SECONDS, REMOTE_JWKS_COOLDOWN, REMOTE_JWKS_TIMEOUT};
use super::keys;
use super::metrics::{Counter, Metrics};

type KeyMap = HashMap<String, Arc<DecodingKey>>;

struct State {
    keys: Option<Arc<KeyMap>>,
    fetched_at: Option<Instant>,
    last_forced: Option<Instant>,
}

/// A JWKS document at one URL and its cached keys.
pub struct RemoteKeySet {
    url: String,
    client: reqwest::Client,
    state: Mutex<State>,
    fetches: AtomicU64,
    metrics: Arc<Metrics>,
    max_age: Duration,
}

#[derive(Deserialize)]
struct Document {
    keys: Vec<Value>,
}

/// A key a caller found, and whether it came from a forced refresh that must be confirmed.
pub struct Candidate {
    pub key: Arc<DecodingKey>,
    pending: Option<Arc<KeyMap>>,
}

impl RemoteKeySet {
    pub fn new(url: impl Into<String>, metrics: Arc<Metrics>) -> RemoteKeySet {
        let client = reqwest::Client::builder()
            .timeout(REMOTE_JWKS_TIMEOUT)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        RemoteKeySet {
            url: url.into(),
            client,
            state: Mutex::new(State {
                keys: None,
                fetched_at: None,
                last_forced: None,
            }),
            fetches: AtomicU64::new(0),
            metrics,
            max_age: Duration::from_secs(JWKS_MAX_AGE_SECONDS),
        }
    }

    /// How many times the document was requested.
    pub fn fetch_count(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }

    async fn fetch(&self) -> Option<Arc<KeyMap>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let response = self.client.get(&self.url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let document: Document = response.json().await.ok()?;
        let keys = document
            .keys
            .iter()
            .filter_map(keys::parse_public)
            .filter_map(|jwk| Some((jwk.kid.clone(), Arc::new(keys::decoding_key(&jwk).ok()?))))
            .collect();
        Some(Arc::new(keys))
    }

    /// The key for `kid`, if the cached document (refreshed when older than 5 minutes) has it,
    /// else from a forced refresh when the cooldown allows. A key from a forced refresh must be
    /// confirmed with [`RemoteKeySet::confirm`] once the token verified.
    pub async fn candidate(&self, kid: &str) -> Option<Candidate> {
        let mut state = self.state.lock().await;
        let stale = state
            .fetched_at
            .is_none_or(|at| at.elapsed() >= self.max_age);
        if stale {
            // A routine refresh; on failure the warm keys stay.
            if let Some(fresh) = self.fetch().await {
                state.keys = Some(fresh);
                state.fetched_at = Some(Instant::now());
            } else if state.fetched_at.is_none() {
                state.fetched_at = Some(Instant::now());
            }
        }
        if let Some(key) = state.keys.as_ref().and_then(|keys| keys.get(kid)) {
            return Some(Candidate {
                key: key.clone(),
                pending: None,
            });
        }
        if stale {
            // The routine refresh just ran and does not know the kid either.
            state.last_forced = Some(Instant::now());
            return None;
        }
        if state
            .last_forced
            .is_some_and(|at| at.elapsed() < REMOTE_JWKS_COOLDOWN)
        {
            return None;
        }
        state.last_forced = Some(Instant::now());
        self.metrics.inc(Counter::UnknownKidRefresh);
        let fresh = self.fetch().await?;
        let key = fresh.get(kid)?.clone();
        Some(Candidate {
            key,
            pending: Some(fresh),
        })
    }

    /// Keeps the refreshed document a verified token came with.
    pub async fn confirm(&self, candidate: &Candidate) {
        if let Some(fresh) = &candidate.pending {
            let mut state = self.state.lock().await;
            state.keys = Some(fresh.clone());
            state.fetched_at = Some(Instant::now());
        }
    }
}

/// Verifies Core's tokens against its published JWKS (what an app does).
pub struct RemoteVerifier {
    keys: RemoteKeySet,
    issuer: String,
}

impl RemoteVerifier {
    /// Verifies tokens of `issuer` with the keys published at `jwks_url`.
    pub fn new(
        jwks_url: impl Into<String>,
        issuer: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> RemoteVerifier {
        RemoteVerifier {
            keys: RemoteKeySet::new(jwks_url, metrics),
            issuer: issuer.into(),
        }
    }

    /// The key set (for its fetch count).
    pub fn key_set(&self) -> &RemoteKeySet {
        &self.keys
    }

    /// A session token's claims, if its signature and claims are valid (no family check: that
    /// needs Core's database).
    pub async fn verify_session(&self, token: &str) -> Option<super::session::SessionClaims> {
        let parsed = super::jwt::parse(token)?;
        if parsed.typ != super::constants::SESSION_TOKEN_TYPE
            || !super::jwt::is_session_kid(&parsed.kid)
        {
            return None;
        }
        let candidate = self.keys.candidate(&parsed.kid).await?;
        let claims: super::session::SessionClaims = parsed.verify(&candidate.key)?;
        if !super::session::check_session_claims(
            &claims,
            &self.issuer,
            chrono::Utc::now().timestamp(),
        ) {
            return None;
        }
        self.keys.confirm(&candidate).await;
        Some(claims)
    }

    /// An invocation token's claims, if it is valid for this app, operation and schema.
    pub async fn verify_invocation(
        &self,
        token: &str,
        target_app: &str,
        operation: &str,
        schema_hash: Option<&str>,
        defer_schema_binding: bool,
    ) -> Option<super::invocation::InvocationClaims> {
        let kid = super::jwt::parse(token)?.kid;
        if !super::jwt::is_strict_uuid(&kid) {
            return None;
        }
        let candidate = self.keys.candidate(&kid).await?;
        let expected = super::invocation::InvocationExpectation {
            issuer: &self.issuer,
            target_app,
            operation,
            schema_hash,
            defer_schema_binding,
        };
        let key = candidate.key.clone();
        let claims = super::invocation::verify_invocation(
            token,
            &expected,
            chrono::Utc::now().timestamp(),
            |_| async move { Some(key) },
        )
        .await?;
        self.keys.confirm(&candidate).await;
        Some(claims)
    }
}
