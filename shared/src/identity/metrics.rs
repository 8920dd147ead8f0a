//! Identity counters: start at zero, only go up, and can be read as a snapshot. Every count also
//! goes to the invocation's EMF line ([`crate::telemetry::metrics`]) under [`Counter::name`].

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct Metrics {
    sign_success: AtomicU64,
    sign_failure: AtomicU64,
    verify_success: AtomicU64,
    verify_failure: AtomicU64,
    unknown_kid_refresh: AtomicU64,
    rotation_success: AtomicU64,
    rotation_failure: AtomicU64,
    legacy_session_use: AtomicU64,
    signer_guards: AtomicU64,
    signer_waits: AtomicU64,
    session_refreshes: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    pub sign_success: u64,
    pub sign_failure: u64,
    pub verify_success: u64,
    pub verify_failure: u64,
    pub unknown_kid_refresh: u64,
    pub rotation_success: u64,
    pub rotation_failure: u64,
    pub legacy_session_use: u64,
    /// Active-key checks held `FOR KEY SHARE` for an issuance (one per guard, however many
    /// tokens are signed inside it).
    pub signer_guards: u64,
    /// Callers that waited for a signer another caller was preparing (joined its flight).
    pub signer_waits: u64,
    /// App sessions renewed with a new device key.
    pub session_refreshes: u64,
}

/// One of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    SignSuccess,
    SignFailure,
    VerifySuccess,
    VerifyFailure,
    UnknownKidRefresh,
    RotationSuccess,
    RotationFailure,
    LegacySessionUse,
    SignerGuard,
    SignerWait,
    SessionRefresh,
}

impl Counter {
    /// The counter's EMF metric name.
    pub fn name(self) -> &'static str {
        match self {
            Counter::SignSuccess => "IdentityTokensIssued",
            Counter::SignFailure => "IdentitySignFailures",
            Counter::VerifySuccess => "IdentitySessionsVerified",
            Counter::VerifyFailure => "IdentitySessionsRejected",
            Counter::UnknownKidRefresh => "IdentityUnknownKidLookups",
            Counter::RotationSuccess => "IdentityKeyRotations",
            Counter::RotationFailure => "IdentityKeyRotationFailures",
            Counter::LegacySessionUse => "IdentityLegacySessions",
            Counter::SignerGuard => "IdentitySignerGuards",
            Counter::SignerWait => "IdentitySignerWaits",
            Counter::SessionRefresh => "IdentitySessionRefreshes",
        }
    }
}

impl Metrics {
    fn counter(&self, counter: Counter) -> &AtomicU64 {
        match counter {
            Counter::SignSuccess => &self.sign_success,
            Counter::SignFailure => &self.sign_failure,
            Counter::VerifySuccess => &self.verify_success,
            Counter::VerifyFailure => &self.verify_failure,
            Counter::UnknownKidRefresh => &self.unknown_kid_refresh,
            Counter::RotationSuccess => &self.rotation_success,
            Counter::RotationFailure => &self.rotation_failure,
            Counter::LegacySessionUse => &self.legacy_session_use,
            Counter::SignerGuard => &self.signer_guards,
            Counter::SignerWait => &self.signer_waits,
            Counter::SessionRefresh => &self.session_refreshes,
        }
    }

    pub fn add(&self, counter: Counter, amount: u64) {
        self.counter(counter).fetch_add(amount, Ordering::Relaxed);
        crate::telemetry::metrics::count(counter.name(), amount);
    }

    pub fn inc(&self, counter: Counter) {
        self.add(counter, 1);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c| self.counter(c).load(Ordering::Relaxed);
        MetricsSnapshot {
            sign_success: get(Counter::SignSuccess),
            sign_failure: get(Counter::SignFailure),
            verify_success: get(Counter::VerifySuccess),
            verify_failure: get(Counter::VerifyFailure),
            unknown_kid_refresh: get(Counter::UnknownKidRefresh),
            rotation_success: get(Counter::RotationSuccess),
            rotation_failure: get(Counter::RotationFailure),
            legacy_session_use: get(Counter::LegacySessionUse),
            signer_guards: get(Counter::SignerGuard),
            signer_waits: get(Counter::SignerWait),
            session_refreshes: get(Counter::SessionRefresh),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_start_at_zero_and_count() {
        let metrics = Metrics::default();
        assert_eq!(metrics.snapshot(), MetricsSnapshot::default());
        metrics.inc(Counter::SignSuccess);
        metrics.add(Counter::RotationSuccess, 2);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.sign_success, 1);
        assert_eq!(snapshot.rotation_success, 2);
        assert_eq!(snapshot.verify_failure, 0);
    }
}
