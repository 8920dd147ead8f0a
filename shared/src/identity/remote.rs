//! Verification keys fetched from a JWKS URL: what an app does to verify Core's tokens, and what
//! Core does with the OAuth issuer's keys.
//!
//! The document is cached for 5 minutes. An unknown `kid` may force a refresh, at most once every
//! 30 seconds per URL; a refreshed document replaces the stored one only when the token that
//! asked for it verifies with it, so warm keys survive an outage of the JWKS endpoint. A failed
//! fetch is not tried again for 30 seconds; a document is read up to 256 KiB; one fetch runs at
//! a time, outside any lock, with at most 64 callers waiting for it (the rest answer from the
//! keys already held); and a `kid` a fresh document did not have is answered from memory for
//! the cooldown, so forged key ids cost no fetch each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use jsonwebtoken::DecodingKey;
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use super::constants::{
    JWKS_MAX_AGE_SECONDS, REMOTE_JWKS_COOLDOWN, REMOTE_JWKS_MAX_BYTES, REMOTE_JWKS_MAX_WAITERS,
    REMOTE_JWKS_TIMEOUT,
};
use super::keys;
use super::metrics::{Counter, Metrics};
use crate::telemetry::trace::{self, TraceContext};

type KeyMap = HashMap<String, Arc<DecodingKey>>;
type Flight = Shared<BoxFuture<'static, Option<Arc<KeyMap>>>>;

/// Unknown key ids remembered at most; a flood beyond it is forgotten wholesale.
const UNKNOWN_KID_CAPACITY: usize = 4096;

#[derive(Default)]
struct State {
    keys: Option<Arc<KeyMap>>,
    /// When the held document was fetched (or first tried).
    fetched_at: Option<Instant>,
    /// After a failed fetch: no other before this.
    retry_at: Option<Instant>,
    last_forced: Option<Instant>,
    /// Key ids a fresh document did not have, until when.
    unknown: HashMap<String, Instant>,
    /// The fetch in progress, whether it was forced, and how many wait for it.
    flight: Option<(Flight, bool)>,
    waiters: usize,
}

impl State {
    fn remember_unknown(&mut self, kid: &str, now: Instant) {
        if self.unknown.len() >= UNKNOWN_KID_CAPACITY {
            self.unknown.retain(|_, until| now < *until);
            if self.unknown.len() >= UNKNOWN_KID_CAPACITY {
                self.unknown.clear();
            }
        }
        self.unknown
            .entry(kid.to_string())
            .and_modify(|until| {
                if *until <= now {
                    *until = now + REMOTE_JWKS_COOLDOWN;
                }
            })
            .or_insert(now + REMOTE_JWKS_COOLDOWN);
    }
}

struct Source {
    url: String,
    client: reqwest::Client,
    fetches: AtomicU64,
}

/// A JWKS document at one URL and its cached keys.
pub struct RemoteKeySet {
    source: Arc<Source>,
    state: Arc<Mutex<State>>,
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

impl Source {
    /// The document's keys, or `None` when it cannot be had: an error status, a redirect, more
    /// than [`REMOTE_JWKS_MAX_BYTES`], or no JSON object with a `keys` array.
    async fn fetch(&self, trace: Option<TraceContext>) -> Option<Arc<KeyMap>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let mut request = self.client.get(&self.url);
        if let Some(trace) = trace {
            request = request.headers(trace.outgoing_headers());
        }
        let mut response = request.send().await.ok()?;
        if !response.status().is_success()
            || response
                .content_length()
                .is_some_and(|length| length > REMOTE_JWKS_MAX_BYTES as u64)
        {
            return None;
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            if body.len() + chunk.len() > REMOTE_JWKS_MAX_BYTES {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        let document: Document = serde_json::from_slice(&body).ok()?;
        let keys = document
            .keys
            .iter()
            .filter_map(keys::parse_public)
            .filter_map(|jwk| Some((jwk.kid.clone(), Arc::new(keys::decoding_key(&jwk).ok()?))))
            .collect();
        Some(Arc::new(keys))
    }
}

/// The published keys could not be read (and the keys held do not have the kid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

/// One caller waiting for a fetch; counted down when it stops waiting, however it stops.
struct Waiting<'a>(&'a Mutex<State>);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = lock(self.0);
        state.waiters = state.waiters.saturating_sub(1);
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RemoteKeySet {
    pub fn new(url: impl Into<String>, metrics: Arc<Metrics>) -> RemoteKeySet {
        RemoteKeySet::with_max_age(url, metrics, Duration::from_secs(JWKS_MAX_AGE_SECONDS))
    }

    /// A key set whose document is refreshed after `max_age` (tests shorten it).
    pub fn with_max_age(
        url: impl Into<String>,
        metrics: Arc<Metrics>,
        max_age: Duration,
    ) -> RemoteKeySet {
        let client = reqwest::Client::builder()
            .timeout(REMOTE_JWKS_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        RemoteKeySet {
            source: Arc::new(Source {
                url: url.into(),
                client,
                fetches: AtomicU64::new(0),
            }),
            state: Arc::new(Mutex::new(State::default())),
            metrics,
            max_age,
        }
    }

    /// The URL of the document.
    pub fn url(&self) -> &str {
        &self.source.url
    }

    /// How many times the document was requested.
    pub fn fetch_count(&self) -> u64 {
        self.source.fetches.load(Ordering::SeqCst)
    }

    /// Starts a fetch in a task of its own (it finishes even when every waiter goes away) and
    /// records its outcome: a routine document replaces the held one; a failure holds off the
    /// next fetch for the cooldown.
    fn start_flight(&self, forced: bool) -> Flight {
        let source = self.source.clone();
        let state = self.state.clone();
        // The fetch is traced as part of the invocation that started it.
        let context = trace::current();
        let task = tokio::spawn(
            async move {
                let fresh = source.fetch(context).await;
                let now = Instant::now();
                let mut state = lock(&state);
                state.flight = None;
                match &fresh {
                    Some(fresh) if !forced => {
                        state.keys = Some(fresh.clone());
                        state.fetched_at = Some(now);
                        state.retry_at = None;
                    }
                    Some(_) => {}
                    None => {
                        state.retry_at = Some(now + REMOTE_JWKS_COOLDOWN);
                        if state.fetched_at.is_none() {
                            state.fetched_at = Some(now);
                        }
                    }
                }
                fresh
            }
            .in_current_span(),
        );
        async move { task.await.ok().flatten() }.boxed().shared()
    }

    /// The key for `kid`, if the cached document (refreshed when older than 5 minutes) has it,
    /// else from a forced refresh when the cooldown allows. A key from a forced refresh must be
    /// confirmed with [`RemoteKeySet::confirm`] once the token verified.
    pub async fn candidate(&self, kid: &str) -> Option<Candidate> {
        self.lookup(kid).await.ok().flatten()
    }

    /// [`RemoteKeySet::candidate`], telling an unknown `kid` (`Ok(None)`) from keys that cannot
    /// be had right now (`Err`: the document could not be fetched, and the keys held, if any,
    /// do not have the kid).
    pub async fn lookup(&self, kid: &str) -> Result<Option<Candidate>, Unavailable> {
        let now = Instant::now();
        let warm = |key: Arc<DecodingKey>| Candidate { key, pending: None };
        let (flight, forced, known) = {
            let mut state = lock(&self.state);
            let stale = state
                .fetched_at
                .is_none_or(|at| now.duration_since(at) >= self.max_age);
            let may_fetch = state.retry_at.is_none_or(|at| now >= at);
            let known = state.keys.as_ref().and_then(|keys| keys.get(kid)).cloned();
            let routine = stale && may_fetch;
            if !routine && let Some(key) = known {
                return Ok(Some(warm(key)));
            }
            // A fetch in progress is joined (up to the bound), whatever started it.
            let joined = match &state.flight {
                Some((flight, forced)) if state.waiters < REMOTE_JWKS_MAX_WAITERS => {
                    Some((flight.clone(), *forced))
                }
                Some(_) => return known.map(warm).map(Some).ok_or(Unavailable),
                None => None,
            };
            let (flight, forced) = match joined {
                Some(joined) => joined,
                None => {
                    if !routine {
                        let remembered = state.unknown.get(kid).is_some_and(|until| now < *until);
                        let cooling = state
                            .last_forced
                            .is_some_and(|at| now.duration_since(at) < REMOTE_JWKS_COOLDOWN);
                        if !may_fetch {
                            // The last fetch failed: the kid may be real.
                            return Err(Unavailable);
                        }
                        if remembered || cooling {
                            return Ok(None);
                        }
                        state.last_forced = Some(now);
                        self.metrics.inc(Counter::UnknownKidRefresh);
                    }
                    let flight = self.start_flight(!routine);
                    state.flight = Some((flight.clone(), !routine));
                    (flight, !routine)
                }
            };
            state.waiters += 1;
            (flight, forced, known)
        };
        // The count of waiters drops however this call ends (a dropped request included).
        let _waiting = Waiting(&self.state);
        match flight.await {
            // The refresh failed: the keys held before still count.
            None => known.map(warm).map(Some).ok_or(Unavailable),
            Some(fresh) => match fresh.get(kid) {
                Some(key) => Ok(Some(Candidate {
                    key: key.clone(),
                    pending: forced.then_some(fresh.clone()),
                })),
                None => {
                    lock(&self.state).remember_unknown(kid, Instant::now());
                    Ok(None)
                }
            },
        }
    }

    /// Keeps the refreshed document a verified token came with.
    pub async fn confirm(&self, candidate: &Candidate) {
        if let Some(fresh) = &candidate.pending {
            let mut state = lock(&self.state);
            state.keys = Some(fresh.clone());
            state.fetched_at = Some(Instant::now());
            state.retry_at = None;
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

    /// Verifies tokens of `issuer` with the keys of `keys`.
    pub fn with_key_set(keys: RemoteKeySet, issuer: impl Into<String>) -> RemoteVerifier {
        RemoteVerifier {
            keys,
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
