//! Invocation tokens for a dashboard: one signer guard (the active key checked and held `FOR
//! KEY SHARE` once), and under it one token per widget, signed off the async workers in at most
//! one job per core (and no more than `concurrency`), each job signing its share in turn; jobs
//! of all requests take turns on the process's cores. The signatures start beside the key check
//! ([`k2b_core::identity::Identity::sign_while_guarded`]) and are released only once it found
//! the key active and they all finished under its lock, before any widget is called.
//! A token that cannot be signed fails only its widget.
//!
//! A token this environment released earlier is released again instead of a new signature when
//! everything it says is what a new one would say — the same key (still the active one: the
//! guard just checked it), the same session, authority, app, operation and request id — and it
//! stays valid long enough for its widget: until the latest moment the widget can still be
//! running (its wave of `concurrency` widgets times the per-widget budget), plus a margin. Only
//! its `jti`, `iat` and `exp` differ from a new token's; the app's check of a bearer invocation
//! is the same for both. A revoked session never gets here (its request has no actor), and a
//! revoked or rotated key ends reuse because the guard's key must match the token's.
//!
//! The issuance runs as its own task, bounded by its budget: a client that goes away mid-way
//! never interrupts a statement inside the guard's transaction.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k2b_core::Core;
use k2b_core::auth::Actor;
use k2b_core::identity::invocation::{
    InvocationAuthority, InvocationClaims, InvocationRequest, build_claims,
};
use k2b_core::identity::{
    INVOCATION_TOKEN_TYPE, IdentityError, IssueOptions, Purpose, ScopeSigner,
};
use k2b_core::telemetry::metrics;
use k2b_core::widgets::{DashboardWidget, widget_operation};
use tracing::Instrument;
use uuid::Uuid;

/// The app id Core signs invocations as.
const CALLER_APP: &str = "core";
/// Lifetime a reused token keeps beyond the latest moment its widget may run (clock skew, the
/// time between the issuance and the fan-out).
pub(crate) const REUSE_MARGIN: Duration = Duration::from_secs(2);
/// Tokens kept for reuse per execution environment.
const MAX_KEPT_TOKENS: usize = 4096;

/// Released invocation tokens, by everything they say but their `jti`, `iat` and `exp`.
#[derive(Default)]
pub(crate) struct TokenCache {
    tokens: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    token: String,
    /// `exp`, in Unix seconds.
    expires: u64,
}

impl TokenCache {
    fn with_tokens<T>(&self, change: impl FnOnce(&mut HashMap<String, Kept>) -> T) -> T {
        match self.tokens.lock() {
            Ok(mut tokens) => change(&mut tokens),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }

    /// A kept token for `key` that is valid for at least `needed` more.
    fn find(&self, key: &str, needed: Duration, now: f64) -> Option<String> {
        self.with_tokens(|tokens| {
            tokens
                .get(key)
                .filter(|kept| kept.expires as f64 - now >= needed.as_secs_f64())
                .map(|kept| kept.token.clone())
        })
    }

    fn keep(&self, key: String, token: String, expires: u64, now: f64) {
        self.with_tokens(|tokens| {
            if tokens.len() >= MAX_KEPT_TOKENS {
                tokens.retain(|_, kept| kept.expires as f64 > now);
                if tokens.len() >= MAX_KEPT_TOKENS {
                    tokens.clear();
                }
            }
            tokens.insert(key, Kept { token, expires });
        });
    }
}

/// What one token says, without its `jti`, `iat`, `nbf` and `exp`, under one key and one
/// session.
fn reuse_key(kid: &str, session: Option<Uuid>, claims: &InvocationClaims) -> Option<String> {
    let timeless = InvocationClaims {
        jti: String::new(),
        iat: 0,
        nbf: 0,
        exp: 0,
        ..claims.clone()
    };
    let mut key = String::with_capacity(512);
    key.push_str(kid);
    key.push('\n');
    if let Some(sid) = session {
        key.push_str(&sid.to_string());
    }
    key.push('\n');
    key.push_str(&serde_json::to_string(&timeless).ok()?);
    Some(key)
}

fn unix_now() -> f64 {
    chrono::Utc::now().timestamp_millis() as f64 / 1000.0
}

/// How long the token of the widget at `index` must stay valid: widgets start in order with at
/// most `concurrency` running, each settling within `widget_budget`, so the widget at `index`
/// starts within `index / concurrency` budgets and ends one budget later (and never after the
/// stream's end).
pub(crate) fn needed_lifetime(
    index: usize,
    concurrency: usize,
    widget_budget: Duration,
    stream_left: Duration,
) -> Duration {
    let waves = (index / concurrency.max(1)) as u32 + 1;
    widget_budget.saturating_mul(waves).min(stream_left) + REUSE_MARGIN
}

/// One widget's token: a kept one, or claims to sign (and the key to keep the token under).
enum Work {
    Kept(String),
    Sign(Box<InvocationClaims>, Option<String>),
}

/// The tokens of one issuance and where its time went.
pub(crate) struct Issued {
    /// One token per widget, in order.
    pub tokens: Vec<Result<String, IdentityError>>,
    pub signed: usize,
    pub reused: usize,
    /// The signatures' share of the issuance (the rest is the part of the guard that did not
    /// overlap them: its connection, key check and commit).
    pub signing: Duration,
    /// The whole issuance, from its start to its tokens.
    pub total: Duration,
    /// New tokens to keep for reuse once the guard released them: key, token, `exp`.
    kept: Vec<(String, String, u64)>,
}

/// One token per widget (in order), or the guard's error. `needed[i]` is how long the token of
/// widget `i` must stay valid for a kept token to be released again.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn sign_all(
    core: &Core,
    cache: &Arc<TokenCache>,
    actor: &Actor,
    widgets: Vec<DashboardWidget>,
    needed: Vec<Duration>,
    request_id: Option<String>,
    budget: Duration,
    concurrency: usize,
) -> Result<Issued, IdentityError> {
    start_signing(
        core,
        cache,
        actor,
        widgets,
        needed,
        request_id,
        budget,
        concurrency,
    )
    .await
    .map_err(|_| IdentityError::InvalidInvocation("signing task"))?
}

/// [`sign_all`] started at once as its own task: awaited, or left to finish on its own (its
/// new tokens are then only kept for reuse).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_signing(
    core: &Core,
    cache: &Arc<TokenCache>,
    actor: &Actor,
    widgets: Vec<DashboardWidget>,
    needed: Vec<Duration>,
    request_id: Option<String>,
    budget: Duration,
    concurrency: usize,
) -> tokio::task::JoinHandle<Result<Issued, IdentityError>> {
    let core = core.clone();
    let cache = cache.clone();
    let authority = InvocationAuthority::from_actor(actor);
    let session = match actor {
        Actor::User(user) => Some(user.sid),
        _ => None,
    };
    let started = Instant::now();
    tokio::spawn(
        async move {
            let mut issued = sign_in_guard(
                &core,
                &cache,
                authority,
                session,
                &widgets,
                &needed,
                request_id.as_deref(),
                budget,
                concurrency,
            )
            .await?;
            let now = unix_now();
            for (key, token, expires) in std::mem::take(&mut issued.kept) {
                cache.keep(key, token, expires, now);
            }
            if issued.reused > 0 {
                metrics::count("WidgetTokensReused", issued.reused as u64);
            }
            issued.total = started.elapsed();
            Ok(issued)
        }
        .in_current_span(),
    )
}

#[allow(clippy::too_many_arguments)]
async fn sign_in_guard(
    core: &Core,
    cache: &TokenCache,
    authority: Option<InvocationAuthority>,
    session: Option<Uuid>,
    widgets: &[DashboardWidget],
    needed: &[Duration],
    request_id: Option<&str>,
    budget: Duration,
    concurrency: usize,
) -> Result<Issued, IdentityError> {
    let options = IssueOptions::timeout(budget.as_secs_f64() * 1000.0);
    let batch = Batch {
        cache,
        authority: authority.as_ref(),
        session,
        widgets,
        needed,
        request_id,
        concurrency,
    };
    core.identity
        .sign_while_guarded(Purpose::Invocation, options, |signer, issuer| {
            batch.sign(signer, issuer)
        })
        .await
}

/// What one dashboard's tokens say, before a key signs them.
struct Batch<'a> {
    cache: &'a TokenCache,
    authority: Option<&'a InvocationAuthority>,
    session: Option<Uuid>,
    widgets: &'a [DashboardWidget],
    needed: &'a [Duration],
    request_id: Option<&'a str>,
    concurrency: usize,
}

impl Batch<'_> {
    /// One token per widget with `signer`: kept ones released again, the others signed.
    async fn sign(&self, signer: ScopeSigner, issuer: String) -> Issued {
        let started = Instant::now();
        let kid = signer.kid().to_string();
        let now = unix_now();
        let mut reused = 0;
        let work: Vec<_> = self
            .widgets
            .iter()
            .enumerate()
            .map(|(index, widget)| {
                let authority = self
                    .authority
                    .ok_or(IdentityError::InvalidInvocation("authority"))?;
                let claims = build_claims(
                    &issuer,
                    &InvocationRequest {
                        target_app: &widget.app_id,
                        caller_app: CALLER_APP,
                        operation: &widget_operation(&widget.widget_id),
                        schema_hash: None,
                        authority,
                        request_id: self.request_id,
                        issued_at: None,
                        jti: None,
                    },
                )?;
                let key = reuse_key(&kid, self.session, &claims);
                let lifetime = self.needed.get(index).copied().unwrap_or(Duration::MAX);
                if let Some(token) = key
                    .as_deref()
                    .and_then(|key| self.cache.find(key, lifetime, now))
                {
                    reused += 1;
                    return Ok(Work::Kept(token));
                }
                Ok(Work::Sign(Box::new(claims), key))
            })
            .collect::<Vec<Result<Work, IdentityError>>>();
        // The signatures run in one job per core at most, each signing its share in sequence:
        // a hand-off to a blocking thread per token costs more than it spreads.
        let mut tokens: Vec<Option<Result<String, IdentityError>>> = Vec::new();
        let mut to_sign = Vec::new();
        for (index, item) in work.into_iter().enumerate() {
            match item {
                Ok(Work::Kept(token)) => tokens.push(Some(Ok(token))),
                Ok(Work::Sign(claims, key)) => {
                    tokens.push(None);
                    to_sign.push((index, claims, key));
                }
                Err(error) => tokens.push(Some(Err(error))),
            }
        }
        let signed = to_sign.len();
        let jobs = k2b_core::cpu::cores()
            .min(self.concurrency.max(1))
            .min(signed.max(1));
        let mut shares: Vec<Vec<_>> = (0..jobs).map(|_| Vec::new()).collect();
        for (n, item) in to_sign.into_iter().enumerate() {
            shares[n % jobs].push(item);
        }
        // A job that failed leaves its widgets unsigned: they fail with "signing task".
        let results =
            futures::future::join_all(shares.into_iter().filter(|share| !share.is_empty()).map(
                |share| {
                    let signer = signer.clone();
                    k2b_core::cpu::run(move || {
                        share
                            .into_iter()
                            .map(|(index, claims, key)| {
                                let token = signer.sign(INVOCATION_TOKEN_TYPE, &*claims);
                                (index, token, claims.exp, key)
                            })
                            .collect::<Vec<_>>()
                    })
                },
            ))
            .await;
        let mut kept = Vec::new();
        for (index, token, expires, key) in results.into_iter().flatten().flatten() {
            if let (Ok(token), Some(key)) = (&token, key) {
                kept.push((key, token.clone(), expires));
            }
            tokens[index] = Some(token);
        }
        let tokens: Vec<Result<String, IdentityError>> = tokens
            .into_iter()
            .map(|token| token.unwrap_or(Err(IdentityError::InvalidInvocation("signing task"))))
            .collect();
        Issued {
            tokens,
            signed,
            reused,
            signing: started.elapsed(),
            total: Duration::ZERO,
            kept,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_widget_needs_its_wave_of_budgets() {
        let budget = Duration::from_secs(8);
        let stream = Duration::from_secs(30);
        assert_eq!(needed_lifetime(0, 8, budget, stream), budget + REUSE_MARGIN);
        assert_eq!(needed_lifetime(7, 8, budget, stream), budget + REUSE_MARGIN);
        assert_eq!(
            needed_lifetime(8, 8, budget, stream),
            Duration::from_secs(16) + REUSE_MARGIN
        );
        assert_eq!(
            needed_lifetime(19, 8, budget, stream),
            Duration::from_secs(24) + REUSE_MARGIN
        );
        // Never past the stream's end.
        assert_eq!(
            needed_lifetime(40, 8, budget, stream),
            stream + REUSE_MARGIN
        );
    }

    #[test]
    fn the_reuse_key_is_all_a_token_says_but_its_moments() {
        let authority =
            InvocationAuthority::for_session(Uuid::new_v4(), k2b_core::auth::SessionKind::Web);
        let claims = |app: &str, operation: &str, request_id: Option<&str>| {
            build_claims(
                "https://cloud.example",
                &InvocationRequest {
                    target_app: app,
                    caller_app: CALLER_APP,
                    operation,
                    schema_hash: None,
                    authority: &authority,
                    request_id,
                    issued_at: None,
                    jti: None,
                },
            )
            .expect("claims")
        };
        let sid = Some(Uuid::new_v4());
        let key = |kid: &str, sid: Option<Uuid>, claims: &InvocationClaims| {
            reuse_key(kid, sid, claims).expect("key")
        };
        let first = claims("weather", "widget.read:current", Some("r1"));
        let mut later = claims("weather", "widget.read:current", Some("r1"));
        later.jti = "another".into();
        later.iat += 5;
        later.nbf += 5;
        later.exp += 5;
        assert_eq!(key("k1", sid, &first), key("k1", sid, &later));
        for (other_kid, other_sid, other) in [
            (
                "k2",
                sid,
                claims("weather", "widget.read:current", Some("r1")),
            ),
            (
                "k1",
                Some(Uuid::from_u128(8)),
                claims("weather", "widget.read:current", Some("r1")),
            ),
            (
                "k1",
                None,
                claims("weather", "widget.read:current", Some("r1")),
            ),
            ("k1", sid, claims("news", "widget.read:current", Some("r1"))),
            (
                "k1",
                sid,
                claims("weather", "widget.read:forecast", Some("r1")),
            ),
            (
                "k1",
                sid,
                claims("weather", "widget.read:current", Some("r2")),
            ),
            ("k1", sid, claims("weather", "widget.read:current", None)),
        ] {
            assert_ne!(key("k1", sid, &first), key(other_kid, other_sid, &other));
        }
    }

    #[test]
    fn kept_tokens_are_found_only_with_enough_life_left() {
        let cache = TokenCache::default();
        cache.keep("k".into(), "token".into(), 1_030, 1_000.0);
        assert_eq!(
            cache.find("k", Duration::from_secs(10), 1_000.0).as_deref(),
            Some("token")
        );
        assert_eq!(cache.find("k", Duration::from_secs(10), 1_021.0), None);
        assert_eq!(cache.find("other", Duration::from_secs(1), 1_000.0), None);
    }
}
