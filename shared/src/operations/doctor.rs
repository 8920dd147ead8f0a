//! The deployment doctor: one line per check, each with ok or fail and, on failure, the fix.
//!
//! Every check is bounded by [`CHECK_TIMEOUT`] (a check that cannot answer fails rather than
//! hang the command), and the checks that need the database are skipped when it cannot be
//! reached (the database check names the failure once).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::Core;
use crate::config::Mode;
use crate::db;
use crate::http::origin::canonical_origin;
use crate::identity::ring::RingHealth;

/// How long one check may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Clock skew against the database above which checks fail: invocation tokens allow 2 s.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_millis(1000);

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Fail,
    /// Not run: something it depends on failed (named by its own check).
    Skip,
}

/// One check's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable name (`database`, `migrations`, `key-encryption`, `signing-keys:session`, …).
    pub name: String,
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do about a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict: Verdict::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict: Verdict::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn skip(name: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            verdict: Verdict::Skip,
            detail: "not checked: the database cannot be reached".into(),
            fix: None,
        }
    }

    /// `ok   name  detail` or `FAIL name  detail — fix: …`.
    pub fn line(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
        };
        match &self.fix {
            Some(fix) => format!("{verdict} {:<24} {} — fix: {fix}", self.name, self.detail),
            None => format!("{verdict} {:<24} {}", self.name, self.detail),
        }
    }
}

/// Every check, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    pub checks: Vec<Check>,
}

impl DoctorReport {
    /// No check failed.
    pub fn healthy(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// The check named `name`.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// One line per check.
    pub fn lines(&self) -> Vec<String> {
        self.checks.iter().map(Check::line).collect()
    }
}

/// Runs a check within [`CHECK_TIMEOUT`]; a check past it fails.
async fn bounded(name: &str, check: impl Future<Output = Check>) -> Check {
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(check) => check,
        Err(_) => Check::fail(
            name,
            format!("no answer within {} s", CHECK_TIMEOUT.as_secs()),
            "check the network path from this function to the service (VPC routes, security groups)",
        ),
    }
}

/// Checks the installation `core` is configured for.
pub async fn run(core: &Core) -> DoctorReport {
    let mut checks = Vec::new();
    let database = bounded("database", check_database(core)).await;
    let reachable = database.verdict == Verdict::Ok;
    checks.push(database);
    if reachable {
        checks.push(bounded("migrations", check_migrations(core)).await);
        let rings = tokio::time::timeout(CHECK_TIMEOUT, core.identity.ring_health()).await;
        checks.extend(ring_checks(core, rings));
    } else {
        checks.push(Check::skip("migrations"));
        checks.push(Check::skip("key-encryption"));
        for purpose in crate::identity::Purpose::ALL {
            checks.push(Check::skip(format!("signing-keys:{}", purpose.as_str())));
        }
    }
    // One SQS client for both queues (its configuration is read once), only when one is set.
    let sqs = tokio::sync::OnceCell::new();
    checks.push(
        bounded(
            "queue:wakeup",
            check_queue(
                core,
                &sqs,
                "wakeup",
                core.config.wakeup_queue_url.as_deref(),
            ),
        )
        .await,
    );
    checks.push(
        bounded(
            "queue:live",
            check_queue(core, &sqs, "live", core.config.live_queue_url.as_deref()),
        )
        .await,
    );
    if reachable {
        checks.push(bounded("app-url", check_app_url(core)).await);
        checks.push(bounded("pwa-shell", check_pwa_shell(core)).await);
        checks.push(bounded("registry", check_registry(core)).await);
        checks.push(bounded("clock", check_clock(core)).await);
    } else {
        for name in ["app-url", "pwa-shell", "registry", "clock"] {
            checks.push(Check::skip(name));
        }
    }
    DoctorReport { checks }
}

async fn check_database(core: &Core) -> Check {
    let started = std::time::Instant::now();
    match sqlx::query_scalar::<_, String>("SHOW server_version")
        .fetch_one(&core.pool)
        .await
    {
        Ok(version) => Check::ok(
            "database",
            format!(
                "reachable (PostgreSQL {version}, {} ms)",
                started.elapsed().as_millis()
            ),
        ),
        Err(error) => Check::fail(
            "database",
            format!("cannot be reached: {error}"),
            "check DATABASE_URL, that the database accepts connections from this network \
             (security group, pg_hba) and that it is running",
        ),
    }
}

async fn check_migrations(core: &Core) -> Check {
    const NAME: &str = "migrations";
    let applied = match db::applied_versions(&core.pool).await {
        Ok(applied) => applied,
        Err(error) => {
            return Check::fail(
                NAME,
                format!("cannot read the migration table: {error}"),
                "run `k2b-admin migrate`",
            );
        }
    };
    let known = db::known_migrations();
    let missing: Vec<String> = known
        .iter()
        .filter(|v| !applied.contains(v))
        .map(|v| v.to_string())
        .collect();
    let unknown: Vec<String> = applied
        .iter()
        .filter(|v| !known.contains(v))
        .map(|v| v.to_string())
        .collect();
    if !unknown.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "the schema has migration {} that this release does not know",
                unknown.join(", ")
            ),
            "deploy the release that applied it (an older release must not run against a newer schema)",
        );
    }
    if !missing.is_empty() {
        return Check::fail(
            NAME,
            format!("migration {} not applied", missing.join(", ")),
            "deploy (the SchemaMigration resource migrates before the functions are updated) or \
             run `k2b-admin migrate`",
        );
    }
    Check::ok(
        NAME,
        format!(
            "up to date ({} migrations, latest {})",
            applied.len(),
            applied.last().copied().unwrap_or_default()
        ),
    )
}

fn ring_checks(
    core: &Core,
    rings: Result<
        Result<Vec<RingHealth>, crate::identity::IdentityError>,
        tokio::time::error::Elapsed,
    >,
) -> Vec<Check> {
    let rings = match rings {
        Ok(Ok(rings)) => rings,
        other => {
            let detail = match other {
                Ok(Err(error)) => format!("cannot read the key ring: {error}"),
                _ => format!(
                    "the key ring did not answer within {} s",
                    CHECK_TIMEOUT.as_secs()
                ),
            };
            let mut checks = vec![Check::fail(
                "key-encryption",
                detail,
                "check the database and run `k2b-admin migrate`",
            )];
            for purpose in crate::identity::Purpose::ALL {
                checks.push(Check::skip(format!("signing-keys:{}", purpose.as_str())));
            }
            return checks;
        }
    };
    let mut checks = Vec::new();
    let problems: Vec<String> = rings
        .iter()
        .flat_map(|ring| {
            ring.sealed_problems.iter().map(move |p| {
                format!(
                    "{} key {} ({}) sealed with key-encryption key {}: {}",
                    ring.purpose.as_str(),
                    p.kid,
                    p.state,
                    p.encryption_key_id,
                    p.reason
                )
            })
        })
        .collect();
    let keks = core.config.identity.keks.as_ref();
    let configured = keks
        .map(|keks| {
            let mut ids = vec![format!("current {}", keks.current.id)];
            ids.extend(keks.previous.iter().map(|k| format!("previous {}", k.id)));
            ids.extend(keks.next.iter().map(|k| format!("next {}", k.id)));
            ids.join(", ")
        })
        .unwrap_or_else(|| "none".into());
    if keks.is_none() {
        checks.push(Check::fail(
            "key-encryption",
            "no key-encryption key is configured",
            "set CLOUD_IDENTITY_KEY_ENCRYPTION_KEY to the installation's key (64 hex characters)",
        ));
    } else if !problems.is_empty() {
        checks.push(Check::fail(
            "key-encryption",
            format!("{} (configured: {configured})", problems.join("; ")),
            "configure the key-encryption key each key was sealed with (as \
             CLOUD_IDENTITY_PREVIOUS_KEY while rolling), or revoke the key with \
             `k2b-admin keys revoke <kid> --reason …` so a new one replaces it",
        ));
    } else {
        let opened: usize = rings
            .iter()
            .map(|r| usize::from(r.active.is_some()) + usize::from(r.pending.is_some()))
            .sum();
        checks.push(Check::ok(
            "key-encryption",
            format!("{opened} signing keys open and pair-check ({configured})"),
        ));
    }
    for ring in &rings {
        let purpose = ring.purpose.as_str();
        let name = format!("signing-keys:{purpose}");
        let rotate = format!("`k2b-admin keys rotate --purpose {purpose}`");
        let check = match (&ring.active, &ring.pending) {
            (None, _) => Check::fail(
                name,
                format!("no active {purpose} key: nothing can be signed"),
                format!(
                    "{rotate} creates one at once; then check that the scheduled `keys` function \
                     runs (its Errors alarm)"
                ),
            ),
            (Some(active), None) if ring.successor_due => Check::fail(
                name,
                format!("active {active} is due for a successor and none is published"),
                format!("check that the scheduled `keys` function runs every minute, or {rotate}"),
            ),
            (Some(active), Some((pending, at))) => Check::ok(
                name,
                format!("active {active}, successor {pending} published, signs from {at}"),
            ),
            (Some(active), None) => {
                Check::ok(name, format!("active {active}, no successor due yet"))
            }
        };
        checks.push(check);
    }
    checks
}

async fn check_queue(
    core: &Core,
    sqs: &tokio::sync::OnceCell<aws_sdk_sqs::Client>,
    label: &str,
    url: Option<&str>,
) -> Check {
    let name = format!("queue:{label}");
    let variable = match label {
        "wakeup" => "K2B_WAKEUP_QUEUE_URL",
        _ => "K2B_LIVE_QUEUE_URL",
    };
    let Some(url) = url else {
        return if core.config.mode.is_local() {
            Check::ok(name, "in process (local mode)")
        } else {
            Check::fail(
                name,
                format!("{variable} is not set"),
                format!("set {variable} to the queue's URL (the stack output)"),
            )
        };
    };
    let client = sqs
        .get_or_init(crate::outbox::live::sqs_client_from_env)
        .await;
    match client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
    {
        Ok(answer) => {
            let waiting = answer
                .attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                })
                .cloned()
                .unwrap_or_else(|| "?".into());
            Check::ok(name, format!("reachable, {waiting} messages waiting"))
        }
        Err(error) => Check::fail(
            name,
            format!(
                "{url} cannot be read: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&error)
            ),
            format!(
                "check {variable}, the role's sqs:GetQueueAttributes permission and the VPC's \
                 route to SQS (an interface endpoint or a NAT gateway)"
            ),
        ),
    }
}

async fn check_app_url(core: &Core) -> Check {
    const NAME: &str = "app-url";
    let set =
        "`k2b-admin settings set app.url https://cloud.example.com` (or the AppUrl parameter)";
    let url = match core.settings.app_url().await {
        Ok(url) => url,
        Err(error) => {
            return Check::fail(NAME, format!("cannot be read: {error}"), "check APP_SECRET");
        }
    };
    let Some(origin) = canonical_origin(&url) else {
        return Check::fail(NAME, format!("`{url}` is not an http(s) URL"), set);
    };
    let explicit =
        core.settings.is_stored("app.url").await.unwrap_or(false) || core.config.app_url.is_some();
    match core.config.mode {
        Mode::Production if !explicit => Check::fail(
            NAME,
            format!("not set (the default `{url}` is in use)"),
            set,
        ),
        Mode::Production if !origin.starts_with("https://") => Check::fail(
            NAME,
            format!("{origin} is not https: sessions and token issuers need it"),
            set,
        ),
        Mode::Production => Check::ok(NAME, origin),
        Mode::Local => Check::ok(NAME, format!("{origin} (local mode allows http)")),
    }
}

async fn check_pwa_shell(core: &Core) -> Check {
    const NAME: &str = "pwa-shell";
    match crate::pwa::shell_available(core).await {
        Ok(true) => Check::ok(
            NAME,
            format!(
                "app `{}` is registered and owns {}",
                crate::pwa::SHELL_APP_ID,
                crate::pwa::SHELL_ROUTE
            ),
        ),
        Ok(false) => Check::fail(
            NAME,
            format!(
                "no live registry entry `{}` owns {}: pairing and the installed app answer 503",
                crate::pwa::SHELL_APP_ID,
                crate::pwa::SHELL_ROUTE
            ),
            "deploy or start the PWA shell app (it publishes its registry entry and renews it)",
        ),
        Err(error) => Check::fail(
            NAME,
            format!("the registry cannot be read: {error}"),
            "check the database",
        ),
    }
}

async fn check_registry(core: &Core) -> Check {
    const NAME: &str = "registry";
    let rows: Result<Vec<(String, DateTime<Utc>)>, sqlx::Error> =
        sqlx::query_as("SELECT app_id, expires_at FROM registry.apps ORDER BY app_id")
            .fetch_all(&core.pool)
            .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(error) => {
            return Check::fail(
                NAME,
                format!("cannot be read: {error}"),
                "check the database",
            );
        }
    };
    let now = Utc::now();
    let expired: Vec<String> = rows
        .iter()
        .filter(|(_, expires)| *expires <= now)
        .map(|(app, expires)| format!("{app} (expired {} s ago)", (now - *expires).num_seconds()))
        .collect();
    if expired.is_empty() {
        Check::ok(NAME, format!("{} entries, all renewed in time", rows.len()))
    } else {
        Check::fail(
            NAME,
            format!("stale entries: {}", expired.join(", ")),
            "the app stopped renewing its entry: check that it runs and can reach the registry \
             (the maintenance function prunes stale entries)",
        )
    }
}

async fn check_clock(core: &Core) -> Check {
    const NAME: &str = "clock";
    let before = Utc::now();
    let database: Result<DateTime<Utc>, sqlx::Error> =
        sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&core.pool)
            .await;
    let after = Utc::now();
    let database = match database {
        Ok(time) => time,
        Err(error) => {
            return Check::fail(
                NAME,
                format!("cannot be read: {error}"),
                "check the database",
            );
        }
    };
    // The database read its clock somewhere inside the round trip: compare with its middle.
    let local = before + (after - before) / 2;
    let skew_ms = (database - local).num_milliseconds();
    let detail = format!(
        "{skew_ms:+} ms against the database (round trip {} ms)",
        (after - before).num_milliseconds()
    );
    if skew_ms.unsigned_abs() as u128 > MAX_CLOCK_SKEW.as_millis() {
        Check::fail(
            NAME,
            detail,
            format!(
                "synchronise the clocks (NTP / chrony): tokens are checked with a tolerance of 2 s, \
                 more than {} ms of skew rejects fresh ones",
                MAX_CLOCK_SKEW.as_millis()
            ),
        )
    } else {
        Check::ok(NAME, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_verdict_and_the_fix() {
        let ok = Check::ok("database", "reachable");
        assert!(ok.line().starts_with("ok   database"));
        let fail = Check::fail("clock", "+3000 ms", "sync");
        assert!(fail.line().starts_with("FAIL clock"));
        assert!(fail.line().ends_with("— fix: sync"));
        let report = DoctorReport {
            checks: vec![ok.clone(), Check::skip("registry")],
        };
        assert!(report.healthy());
        let report = DoctorReport {
            checks: vec![ok, fail],
        };
        assert!(!report.healthy());
        assert_eq!(
            report.check("clock").map(|c| c.verdict),
            Some(Verdict::Fail)
        );
    }
}
