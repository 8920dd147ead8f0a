//! Issuance under one deadline: [`Identity::with_active_signer`].
//!
//! A token is released only while its key is active in Postgres. The key row is read
//! `FOR KEY SHARE` in the transaction that also holds the caller's writes, so an emergency
//! revocation (which takes the row `FOR UPDATE`) waits for issuance already in progress, and a
//! replica never releases a token under a key revoked behind its cache. `FOR KEY SHARE` rather
//! than `FOR SHARE`: an issuance that must widen the key's verify window updates the row, and
//! two such issuances each holding a share lock would wait for each other.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use sqlx::{Postgres, Transaction};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::Counter;
use super::{Identity, IdentityError, Metrics, Purpose, Signer, jwt};
use crate::db;

/// An error this close to the deadline is reported as the deadline passing.
const NEAR_DEADLINE: Duration = Duration::from_millis(25);
/// How long past the deadline a statement is awaited for Postgres to cancel it.
const DB_GRACE: Duration = Duration::from_millis(250);

/// Where an issuance was when its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    SignerRefresh,
    IdentitySettings,
    DatabaseConnection,
    SigningKeyCheck,
    Signing,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::SignerRefresh => "signer refresh",
            Step::IdentitySettings => "identity settings",
            Step::DatabaseConnection => "database connection",
            Step::SigningKeyCheck => "signing key check",
            Step::Signing => "signing",
        })
    }
}

/// Options of one issuance.
#[derive(Debug, Clone, Default)]
pub struct IssueOptions {
    /// The whole issuance's bound in milliseconds (default 30 000); must be finite and positive.
    pub timeout_ms: Option<f64>,
    /// Cancelled by the caller (for example when the client went away).
    pub cancel: Option<CancellationToken>,
    /// The issuer to sign for; when given, the runtime configuration is not read.
    pub issuer: Option<String>,
}

impl IssueOptions {
    pub fn timeout(ms: f64) -> IssueOptions {
        IssueOptions {
            timeout_ms: Some(ms),
            ..IssueOptions::default()
        }
    }

    fn duration(&self) -> Result<Duration, IdentityError> {
        let ms = self
            .timeout_ms
            .unwrap_or(super::REFRESH_TIMEOUT.as_millis() as f64);
        if !ms.is_finite() || ms <= 0.0 {
            return Err(IdentityError::InvalidTimeout);
        }
        Ok(Duration::from_secs_f64(ms / 1000.0))
    }
}

/// `N s` for whole seconds, else `N ms`.
pub fn describe_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// What an issuance callback works with: the active signer, the issuer, and the transaction
/// that holds the key's share lock (the callback's writes commit only if the issuance succeeds).
pub struct SigningScope {
    pub signer: Arc<Signer>,
    pub issuer: String,
    pub tx: Transaction<'static, Postgres>,
    deadline: Instant,
    metrics: Arc<Metrics>,
}

impl SigningScope {
    /// Signs `claims` with the scope's key (RS256, header `{alg, kid, typ}`).
    pub fn sign<C: Serialize>(&self, typ: &str, claims: &C) -> Result<String, IdentityError> {
        self.handle().sign(typ, claims)
    }

    /// The scope's key as a handle that can sign on other threads (for example many tokens in
    /// parallel on blocking threads). Use it only while the scope is held: the scope's lock is
    /// what keeps the key from being revoked meanwhile.
    pub fn handle(&self) -> ScopeSigner {
        ScopeSigner {
            signer: self.signer.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Time left before the issuance deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// The key of a [`SigningScope`], cheap to clone and `Send`.
#[derive(Clone)]
pub struct ScopeSigner {
    signer: Arc<Signer>,
    metrics: Arc<Metrics>,
}

impl ScopeSigner {
    /// The key's id (the tokens' `kid`).
    pub fn kid(&self) -> &str {
        &self.signer.kid
    }

    /// Signs `claims` (RS256, header `{alg, kid, typ}`).
    pub fn sign<C: Serialize>(&self, typ: &str, claims: &C) -> Result<String, IdentityError> {
        match jwt::encode(&self.signer.kid, typ, claims, &self.signer.key) {
            Ok(token) => {
                self.metrics.inc(Counter::SignSuccess);
                Ok(token)
            }
            Err(error) => {
                self.metrics.inc(Counter::SignFailure);
                Err(error.into())
            }
        }
    }
}

struct Deadline {
    at: Instant,
    within: String,
    cancel: Option<CancellationToken>,
}

impl Deadline {
    fn check(&self, step: Step) -> Result<(), IdentityError> {
        if self
            .cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Err(IdentityError::Cancelled);
        }
        if Instant::now() >= self.at {
            return Err(self.timeout(step));
        }
        Ok(())
    }

    fn timeout(&self, step: Step) -> IdentityError {
        IdentityError::Timeout {
            within: self.within.clone(),
            step,
        }
    }

    /// Runs one step: checks first, then races it against the deadline and the cancellation.
    /// An error after the deadline or a cancellation reports those instead (a Postgres
    /// statement timeout surfaces as the named deadline).
    async fn wait<V>(&self, step: Step, work: impl Future<Output = V>) -> Result<V, IdentityError> {
        self.check(step)?;
        let cancelled = async {
            match &self.cancel {
                Some(token) => token.cancelled().await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = cancelled => Err(IdentityError::Cancelled),
            result = tokio::time::timeout_at(self.at, work) => result.map_err(|_| self.timeout(step)),
        }
    }

    /// Runs a step that talks to Postgres inside the transaction. Its statements end at the
    /// deadline through statement_timeout, so it is awaited a little past the deadline rather
    /// than dropped mid-statement (which would leave the pooled connection unusable); a result
    /// that arrives after the deadline still reports the deadline.
    async fn wait_db<V>(
        &self,
        step: Step,
        work: impl Future<Output = V>,
    ) -> Result<V, IdentityError> {
        self.check(step)?;
        let result = tokio::time::timeout_at(self.at + DB_GRACE, work)
            .await
            .map_err(|_| self.timeout(step))?;
        self.check(step)?;
        Ok(result)
    }

    async fn run_db<V, X: Into<IdentityError>>(
        &self,
        step: Step,
        work: impl Future<Output = Result<V, X>>,
    ) -> Result<V, IdentityError> {
        let result = self.wait_db(step, work).await;
        self.settle(step, result)
    }

    async fn run<V, X: Into<IdentityError>>(
        &self,
        step: Step,
        work: impl Future<Output = Result<V, X>>,
    ) -> Result<V, IdentityError> {
        let result = self.wait(step, work).await;
        self.settle(step, result)
    }

    fn settle<V, X: Into<IdentityError>>(
        &self,
        step: Step,
        result: Result<Result<V, X>, IdentityError>,
    ) -> Result<V, IdentityError> {
        match result? {
            Ok(value) => Ok(value),
            Err(error) => {
                self.check(step)?;
                let error = error.into();
                // The transaction's statement_timeout is the time left, so Postgres cancelling
                // a statement for it is this deadline passing (its timer may fire a hair early).
                if let IdentityError::Database(sql) = error.root()
                    && db::is_timeout(sql)
                {
                    return Err(self.timeout(step));
                }
                Err(error)
            }
        }
    }
}

impl Identity {
    /// Runs `callback` with the purpose's active signer inside a transaction that holds the
    /// key `FOR KEY SHARE`, all under one deadline (default 30 s). Up to two attempts: when the cached
    /// key turns out inactive, the cache is dropped and the next attempt prepares a fresh signer.
    /// The callback returns the scope with its result; an error or a passed deadline rolls its
    /// writes back. A timeout names the step that was running.
    pub async fn with_active_signer<T, E, F, Fut>(
        &self,
        purpose: Purpose,
        options: IssueOptions,
        callback: F,
    ) -> Result<T, E>
    where
        F: FnOnce(SigningScope) -> Fut,
        Fut: Future<Output = (SigningScope, Result<T, E>)>,
        E: From<IdentityError>,
    {
        let timeout = options.duration()?;
        let issuer_override = options.issuer.clone();
        let deadline = Deadline {
            at: Instant::now() + timeout,
            within: describe_duration(timeout),
            cancel: options.cancel,
        };
        let mut callback = Some(callback);
        for _attempt in 0..2 {
            let signer = deadline
                .run(Step::SignerRefresh, self.prepare_signer(purpose))
                .await?;
            let issuer = match &issuer_override {
                Some(issuer) => issuer.clone(),
                None => deadline
                    .run(Step::IdentitySettings, self.runtime_config())
                    .await?
                    .issuer
                    .clone(),
            };
            // Every statement of the guard's transaction ends by the deadline.
            let remaining = deadline.at.saturating_duration_since(Instant::now());
            let mut tx = deadline
                .run(
                    Step::DatabaseConnection,
                    db::begin_bounded(self.pool(), remaining),
                )
                .await?;
            deadline.check(Step::SigningKeyCheck)?;
            let active: Option<String> = deadline
                .run_db(Step::SigningKeyCheck, async {
                    sqlx::query_scalar(
                        "SELECT kid FROM auth.signing_keys
                         WHERE purpose = $1 AND kid = $2 AND state = 'active' AND sign_until > now()
                         FOR KEY SHARE",
                    )
                    .bind(purpose.as_str())
                    .bind(&signer.kid)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(IdentityError::from)
                })
                .await?;
            deadline.check(Step::SigningKeyCheck)?;
            self.0.metrics.inc(Counter::SignerGuard);
            if active.is_none() {
                drop(tx);
                self.invalidate_signer(purpose, Some(&signer.kid));
                continue;
            }
            let Some(callback) = callback.take() else {
                break;
            };
            let scope = SigningScope {
                signer,
                issuer,
                tx,
                deadline: deadline.at,
                metrics: self.0.metrics.clone(),
            };
            let (scope, result) = deadline.wait_db(Step::Signing, callback(scope)).await?;
            deadline.check(Step::Signing)?;
            let value = match result {
                Ok(value) => value,
                // The callback's statements end at the deadline through statement_timeout,
                // whose timer may fire a hair before ours: an error that close is the deadline.
                Err(_) if deadline.at.saturating_duration_since(Instant::now()) < NEAR_DEADLINE => {
                    return Err(deadline.timeout(Step::Signing).into());
                }
                Err(error) => return Err(error),
            };
            deadline.run_db(Step::Signing, scope.tx.commit()).await?;
            return Ok(value);
        }
        Err(IdentityError::NoActiveSigner(purpose).into())
    }

    /// Issuance that writes nothing, with the key check beside the signatures instead of before
    /// them: `sign` starts at once with the active signer held in memory while the key row is
    /// read `FOR KEY SHARE`, and what it returns is released only when the check found the key
    /// active and `sign` finished while the lock was held (the lock is released after, in the
    /// background). A key
    /// found inactive drops the result and the cached signer, and `sign` runs again with a fresh
    /// one (at most two attempts, as [`Identity::with_active_signer`]). One deadline bounds it
    /// all; a timeout names the step that was running. The lock's transaction writes nothing,
    /// so its commit does not wait for the disk.
    pub async fn sign_while_guarded<T, F, Fut>(
        &self,
        purpose: Purpose,
        options: IssueOptions,
        sign: F,
    ) -> Result<T, IdentityError>
    where
        F: Fn(ScopeSigner, String) -> Fut,
        Fut: Future<Output = T>,
    {
        let timeout = options.duration()?;
        let deadline = Deadline {
            at: Instant::now() + timeout,
            within: describe_duration(timeout),
            cancel: options.cancel.clone(),
        };
        for _attempt in 0..2 {
            let signer = deadline
                .run(Step::SignerRefresh, self.prepare_signer(purpose))
                .await?;
            let issuer = match &options.issuer {
                Some(issuer) => issuer.clone(),
                None => deadline
                    .run(Step::IdentitySettings, self.runtime_config())
                    .await?
                    .issuer
                    .clone(),
            };
            let check = async {
                let remaining = deadline.at.saturating_duration_since(Instant::now());
                let mut tx = deadline
                    .run(
                        Step::DatabaseConnection,
                        db::begin_bounded_lock_only(self.pool(), remaining),
                    )
                    .await?;
                let active: Option<String> = deadline
                    .run_db(Step::SigningKeyCheck, async {
                        sqlx::query_scalar(
                            "SELECT kid FROM auth.signing_keys
                             WHERE purpose = $1 AND kid = $2 AND state = 'active'
                               AND sign_until > now()
                             FOR KEY SHARE",
                        )
                        .bind(purpose.as_str())
                        .bind(&signer.kid)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(IdentityError::from)
                    })
                    .await?;
                self.0.metrics.inc(Counter::SignerGuard);
                Ok::<_, IdentityError>(active.map(|_| tx))
            };
            let handle = ScopeSigner {
                signer: signer.clone(),
                metrics: self.0.metrics.clone(),
            };
            let work = deadline.wait(Step::Signing, sign(handle, issuer));
            let mut check = std::pin::pin!(check);
            let mut work = std::pin::pin!(work);
            // A failed check ends the issuance at once (the signatures are only dropped); a
            // check still running is awaited to its end, never dropped inside a statement.
            let (checked, signed) = tokio::select! {
                checked = &mut check => {
                    let checked = checked?;
                    (checked, work.await)
                }
                signed = &mut work => (check.await?, signed),
            };
            let Some(tx) = checked else {
                self.invalidate_signer(purpose, Some(&signer.kid));
                continue;
            };
            let value = signed?;
            deadline.check(Step::Signing)?;
            // The result is released now; the lock goes with the commit, in the background
            // (it writes nothing, so nothing waits on its outcome).
            tokio::spawn(async move {
                if let Err(error) = tx.commit().await {
                    tracing::debug!(error = %error, "signer guard commit failed");
                }
            });
            return Ok(value);
        }
        Err(IdentityError::NoActiveSigner(purpose))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_described_in_seconds_or_milliseconds() {
        assert_eq!(describe_duration(Duration::from_millis(30_000)), "30 s");
        assert_eq!(describe_duration(Duration::from_millis(5_000)), "5 s");
        assert_eq!(describe_duration(Duration::from_millis(50)), "50 ms");
        assert_eq!(describe_duration(Duration::from_millis(1_500)), "1500 ms");
    }

    /// Scenario 54: a timeout that is not finite and positive is refused before anything runs.
    #[test]
    fn scenario_54_invalid_timeouts() {
        for ms in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = IssueOptions::timeout(ms).duration().expect_err("invalid");
            assert_eq!(
                error.to_string(),
                "Identity issuance timeout must be positive"
            );
        }
        assert_eq!(
            IssueOptions::default().duration().expect("default"),
            Duration::from_secs(30)
        );
    }
}
