//! Issuance under one deadline (spec/identity.md §15 scenarios 47–54), with a pool of one
//! connection where the scenario says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::Core;
use k2b_core::audit::{self, AuditRecord, Outcome};
use k2b_core::identity::session::{SessionRequest, issue_in_scope};
use k2b_core::identity::{
    Identity, IdentityError, IdentitySettings, IdentitySettingsSource, IssueOptions, Metrics,
    Purpose, RuntimeConfigCache, Signer, SignerSource,
};
use k2b_tests::{TestDb, core_for, create_user, pool_with_max};
use tokio_util::sync::CancellationToken;

/// Counts settings loads and delegates to fixed values.
struct CountingSettings {
    loads: Arc<AtomicUsize>,
}

impl IdentitySettingsSource for CountingSettings {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        async {
            Ok(IdentitySettings {
                app_url: "https://cloud.example.test".into(),
                admin_groups: serde_json::json!(["admins"]),
            })
        }
        .boxed()
    }
}

/// An identity service on `pool` with counted settings loads.
fn identity_on(core: &Core, pool: sqlx::PgPool, loads: Arc<AtomicUsize>) -> Identity {
    let metrics = Arc::new(Metrics::default());
    let source = Arc::new(k2b_core::identity::DbSignerSource::new(
        pool.clone(),
        core.config.identity.keks.clone(),
        metrics.clone(),
    ));
    Identity::from_parts(
        pool,
        core.config.identity.keks.clone(),
        source,
        RuntimeConfigCache::new(Arc::new(CountingSettings { loads }), false, None, None),
        metrics,
    )
}

async fn statement_timeout(pool: &sqlx::PgPool) -> String {
    sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(pool)
        .await
        .expect("show")
}

/// Scenario 47: a cold start with one connection and six concurrent issuances: all verify, one
/// shared settings load, six audit rows committed with them.
#[tokio::test]
async fn scenario_47_cold_start_with_one_connection() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "ada", false).await;
    let pool = pool_with_max(&db, 1).await;
    let loads = Arc::new(AtomicUsize::new(0));
    let identity = identity_on(&core, pool.clone(), loads.clone());
    let mut issuances = Vec::new();
    for _ in 0..6 {
        let identity = identity.clone();
        let settings = core.settings.clone();
        issuances.push(tokio::spawn(async move {
            identity
                .with_active_signer(
                    Purpose::Session,
                    IssueOptions::default(),
                    |mut scope| async move {
                        let result = async {
                            let session = issue_in_scope(
                                &mut scope,
                                &settings,
                                &SessionRequest::web(user.id),
                            )
                            .await?;
                            audit::record(
                                &mut scope.tx,
                                &AuditRecord::new("session.issue", Outcome::Allowed)
                                    .actor(audit::AuditActor::user(user.id)),
                            )
                            .await
                            .map_err(|e| {
                                IdentityError::InvalidInvocation(Box::leak(
                                    e.to_string().into_boxed_str(),
                                ))
                            })?;
                            Ok::<_, IdentityError>(session)
                        }
                        .await;
                        (scope, result)
                    },
                )
                .await
        }));
    }
    let mut tokens = Vec::new();
    for issuance in issuances {
        tokens.push(issuance.await.expect("join").expect("issued").token);
    }
    for token in &tokens {
        assert!(identity.verify_session_token(token).await.is_some());
    }
    assert_eq!(loads.load(Ordering::SeqCst), 1, "one shared settings load");
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit.events WHERE action = 'session.issue' AND outcome = 'allowed'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(audits, 6);
}

/// Scenario 48: the cached key revoked in SQL: issuance succeeds with a new key, no deadlock.
#[tokio::test]
async fn scenario_48_revoked_cached_key_with_one_connection() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "ada", false).await;
    let pool = pool_with_max(&db, 1).await;
    let identity = identity_on(&core, pool.clone(), Arc::new(AtomicUsize::new(0)));
    let first = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    sqlx::query(
        "UPDATE auth.signing_keys SET state = 'revoked', revoked_at = now() WHERE kid = $1",
    )
    .bind(&first.kid)
    .execute(&db.pool)
    .await
    .expect("revoke");
    let issued = tokio::time::timeout(
        Duration::from_secs(20),
        identity.issue_session(
            &core.settings,
            SessionRequest::web(user.id),
            IssueOptions::default(),
        ),
    )
    .await
    .expect("no deadlock")
    .expect("issued");
    let claims = identity
        .verify_session_token(&issued.token)
        .await
        .expect("verifies");
    let kid: String =
        sqlx::query_scalar("SELECT signing_kid FROM auth.session_families WHERE sid = $1")
            .bind(claims.sid)
            .fetch_one(&db.pool)
            .await
            .expect("family");
    assert_ne!(kid, first.kid);
}

/// Scenario 49: a callback slower than the deadline: rejected, nothing signed, the session's
/// statement_timeout back to its default, and the next issuance works.
#[tokio::test]
async fn scenario_49_slow_callback_times_out_and_leaves_the_connection_clean() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "ada", false).await;
    let pool = pool_with_max(&db, 1).await;
    let identity = identity_on(&core, pool.clone(), Arc::new(AtomicUsize::new(0)));
    identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    let signed = identity.metrics().snapshot().sign_success;
    let error = identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(50.0),
            |mut scope| async move {
                let slept = sqlx::query("SELECT pg_sleep(1)")
                    .execute(&mut *scope.tx)
                    .await;
                let result = match slept {
                    Ok(_) => scope.sign("t", &serde_json::json!({})).map(|_| ()),
                    Err(e) => Err(IdentityError::from(e)),
                };
                (scope, result)
            },
        )
        .await
        .expect_err("deadline");
    assert!(error.is_timeout(), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("Identity service did not respond within 50 ms"),
        "{error}"
    );
    assert_eq!(
        identity.metrics().snapshot().sign_success,
        signed,
        "nothing signed"
    );
    assert_eq!(statement_timeout(&pool).await, "0");
    identity
        .issue_session(
            &core.settings,
            SessionRequest::web(user.id),
            IssueOptions::default(),
        )
        .await
        .expect("next issuance works");
}

/// Scenario 50: with a row lock held on the key, issuance with a 50 ms deadline fails at the key
/// check well before a second, no callback runs, and statement_timeout reads its default.
#[tokio::test]
async fn scenario_50_row_lock_on_the_key_fails_fast_with_the_step_named() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let pool = pool_with_max(&db, 1).await;
    let identity = identity_on(&core, pool.clone(), Arc::new(AtomicUsize::new(0)));
    let signer = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    let mut holder = db.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM auth.signing_keys WHERE kid = $1 FOR UPDATE")
        .bind(&signer.kid)
        .execute(&mut *holder)
        .await
        .expect("lock");
    let callbacks = AtomicUsize::new(0);
    let started = Instant::now();
    let error = identity
        .with_active_signer(Purpose::Session, IssueOptions::timeout(50.0), |scope| {
            callbacks.fetch_add(1, Ordering::SeqCst);
            async move { (scope, Ok::<(), IdentityError>(())) }
        })
        .await
        .expect_err("deadline");
    let elapsed = started.elapsed();
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 50 ms (signing key check)"
    );
    assert!(elapsed < Duration::from_secs(1), "failed after {elapsed:?}");
    assert_eq!(callbacks.load(Ordering::SeqCst), 0);
    holder.rollback().await.expect("release");
    assert_eq!(statement_timeout(&pool).await, "0");
}

/// Scenario 51: the only connection is busy and the caller gives up after 25 ms: rejected, no
/// callback, and the pool works afterwards.
#[tokio::test]
async fn scenario_51_caller_abort_while_waiting_for_a_connection() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let pool = pool_with_max(&db, 1).await;
    let identity = identity_on(&core, pool.clone(), Arc::new(AtomicUsize::new(0)));
    identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    identity.runtime_config().await.expect("warm settings");
    let busy = pool.acquire().await.expect("the only connection");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(25)).await;
        trigger.cancel();
    });
    let callbacks = AtomicUsize::new(0);
    let error = identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions {
                cancel: Some(cancel),
                ..IssueOptions::default()
            },
            |scope| {
                callbacks.fetch_add(1, Ordering::SeqCst);
                async move { (scope, Ok::<(), IdentityError>(())) }
            },
        )
        .await
        .expect_err("cancelled");
    assert!(matches!(error, IdentityError::Cancelled), "{error}");
    assert_eq!(callbacks.load(Ordering::SeqCst), 0);
    drop(busy);
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&pool)
        .await
        .expect("usable");
    assert_eq!(one, 1);
}

/// A signer source that never answers.
struct Hung;

impl SignerSource for Hung {
    fn prepare(&self, _: Purpose) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>> {
        futures::future::pending().boxed()
    }
}

/// A settings source that never answers.
struct HungSettings;

impl IdentitySettingsSource for HungSettings {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
        futures::future::pending().boxed()
    }
}

fn lazy_pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new().connect_lazy_with(
        k2b_core::db::connect_options("postgres://nobody@127.0.0.1:1/none").expect("options"),
    )
}

fn test_keks() -> k2b_core::identity::KekSet {
    k2b_core::identity::KekSet::parse(
        Some(&k2b_core::config::Secret::new(
            "0101010101010101010101010101010101010101010101010101010101010101",
        )),
        None,
        None,
    )
    .expect("keks")
}

/// Scenario 52: a hung refresh releases its callers at 30 s; the next call starts afresh; a
/// cached signer that may still sign is returned instead of the error.
#[tokio::test(start_paused = true)]
async fn scenario_52_hung_refresh_is_bounded_at_30_seconds() {
    let identity = Identity::from_parts(
        lazy_pool(),
        Some(test_keks()),
        Arc::new(Hung),
        RuntimeConfigCache::new(
            Arc::new(super::FixedSettings("https://cloud.example.test".into())),
            false,
            None,
            None,
        ),
        Arc::new(Metrics::default()),
    );
    let started = tokio::time::Instant::now();
    let error = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect_err("hung");
    assert_eq!(
        error.to_string(),
        "Cloud identity signer refresh did not finish within 30 s"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(identity.metrics().snapshot().rotation_failure, 1);
    // The failed flight is gone: the next call starts a new one (and waits its own 30 s).
    let error = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect_err("hung again");
    assert!(error.is_timeout());
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

/// Scenario 52, second half: with a cached signer still able to sign, the hung refresh returns it.
#[tokio::test(start_paused = true)]
async fn scenario_52_hung_refresh_falls_back_to_a_cached_signer() {
    struct OnceThenHang(AtomicUsize);
    impl SignerSource for OnceThenHang {
        fn prepare(
            &self,
            purpose: Purpose,
        ) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>> {
            if self.0.fetch_add(1, Ordering::SeqCst) > 0 {
                return futures::future::pending().boxed();
            }
            async move {
                let key = k2b_core::identity::keys::generate()?;
                let encoding =
                    k2b_core::identity::keys::import(&key.kid, &key.public, &key.private)?;
                Ok(Arc::new(Signer {
                    purpose,
                    kid: key.kid,
                    key: encoding,
                    sign_until: chrono::Utc::now() + chrono::Duration::hours(1),
                }))
            }
            .boxed()
        }
    }
    let identity = Identity::from_parts(
        lazy_pool(),
        Some(test_keks()),
        Arc::new(OnceThenHang(AtomicUsize::new(0))),
        RuntimeConfigCache::new(
            Arc::new(super::FixedSettings("https://cloud.example.test".into())),
            false,
            None,
            None,
        ),
        Arc::new(Metrics::default()),
    );
    let first = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("first");
    // The cache entry lapses after a minute; the key may sign for an hour yet.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let started = tokio::time::Instant::now();
    let again = identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("falls back");
    assert_eq!(again.kid, first.kid);
    assert_eq!(started.elapsed(), Duration::from_secs(30));
    assert_eq!(identity.metrics().snapshot().rotation_failure, 1);
}

/// Scenario 53: where the deadline hits decides the message.
#[tokio::test(start_paused = true)]
async fn scenario_53_stall_in_signer_refresh_or_settings() {
    let hung_refresh = Identity::from_parts(
        lazy_pool(),
        Some(test_keks()),
        Arc::new(Hung),
        RuntimeConfigCache::new(
            Arc::new(super::FixedSettings("https://cloud.example.test".into())),
            false,
            None,
            None,
        ),
        Arc::new(Metrics::default()),
    );
    let error = hung_refresh
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(5000.0),
            |scope| async move { (scope, Ok::<(), IdentityError>(())) },
        )
        .await
        .expect_err("stalls");
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 5 s (signer refresh)"
    );

    struct Ready;
    impl SignerSource for Ready {
        fn prepare(
            &self,
            purpose: Purpose,
        ) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>> {
            async move {
                let key = k2b_core::identity::keys::generate()?;
                let encoding =
                    k2b_core::identity::keys::import(&key.kid, &key.public, &key.private)?;
                Ok(Arc::new(Signer {
                    purpose,
                    kid: key.kid,
                    key: encoding,
                    sign_until: chrono::Utc::now() + chrono::Duration::hours(1),
                }))
            }
            .boxed()
        }
    }
    let hung_settings = Identity::from_parts(
        lazy_pool(),
        Some(test_keks()),
        Arc::new(Ready),
        RuntimeConfigCache::new(Arc::new(HungSettings), false, None, None),
        Arc::new(Metrics::default()),
    );
    let error = hung_settings
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(5000.0),
            |scope| async move { (scope, Ok::<(), IdentityError>(())) },
        )
        .await
        .expect_err("stalls");
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 5 s (identity settings)"
    );
}

/// Scenario 53: a stall waiting for the only connection.
#[tokio::test]
async fn scenario_53_stall_in_database_connection() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let pool = pool_with_max(&db, 1).await;
    let identity = identity_on(&core, pool.clone(), Arc::new(AtomicUsize::new(0)));
    identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    identity.runtime_config().await.expect("warm settings");
    let _busy = pool.acquire().await.expect("the only connection");
    let error = identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(5000.0),
            |scope| async move { (scope, Ok::<(), IdentityError>(())) },
        )
        .await
        .expect_err("stalls");
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 5 s (database connection)"
    );
}

/// Scenario 53: a stall at the key check (a row lock held elsewhere).
#[tokio::test]
async fn scenario_53_stall_in_signing_key_check() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let signer = core
        .identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    let mut holder = db.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM auth.signing_keys WHERE kid = $1 FOR UPDATE")
        .bind(&signer.kid)
        .execute(&mut *holder)
        .await
        .expect("lock");
    let error = core
        .identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(5000.0),
            |scope| async move { (scope, Ok::<(), IdentityError>(())) },
        )
        .await
        .expect_err("stalls");
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 5 s (signing key check)"
    );
    holder.rollback().await.expect("release");
}

/// Scenario 53: a slow callback — its writes are rolled back.
#[tokio::test]
async fn scenario_53_stall_in_signing_rolls_back_the_callback() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("warm");
    let error = core
        .identity
        .with_active_signer(
            Purpose::Session,
            IssueOptions::timeout(5000.0),
            |mut scope| async move {
                let written = audit::record(
                    &mut scope.tx,
                    &AuditRecord::new("slow.write", Outcome::Allowed),
                )
                .await;
                assert!(written.is_ok());
                tokio::time::sleep(Duration::from_secs(6)).await;
                (scope, Ok::<(), IdentityError>(()))
            },
        )
        .await
        .expect_err("stalls");
    assert_eq!(
        error.to_string(),
        "Identity service did not respond within 5 s (signing)"
    );
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit.events WHERE action = 'slow.write'")
            .fetch_one(&db.pool)
            .await
            .expect("count");
    assert_eq!(rows, 0, "the callback's write was rolled back");
}

/// Scenario 54: invalid deadlines are refused before anything runs.
#[tokio::test]
async fn scenario_54_invalid_timeouts_run_nothing() {
    let identity = Identity::from_parts(
        lazy_pool(),
        Some(test_keks()),
        Arc::new(Hung),
        RuntimeConfigCache::new(Arc::new(HungSettings), false, None, None),
        Arc::new(Metrics::default()),
    );
    for ms in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let callbacks = AtomicUsize::new(0);
        let error = identity
            .with_active_signer(Purpose::Session, IssueOptions::timeout(ms), |scope| {
                callbacks.fetch_add(1, Ordering::SeqCst);
                async move { (scope, Ok::<(), IdentityError>(())) }
            })
            .await
            .expect_err("invalid");
        assert_eq!(
            error.to_string(),
            "Identity issuance timeout must be positive"
        );
        assert_eq!(callbacks.load(Ordering::SeqCst), 0);
    }
}

/// Eight concurrent maintenance passes per purpose: exactly one active and at most one pending.
#[tokio::test]
async fn eight_concurrent_maintenance_runs_keep_one_active_key_per_purpose() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let mut runs = Vec::new();
    for _ in 0..8 {
        let identity = core.identity.clone();
        runs.push(tokio::spawn(
            async move { identity.run_key_maintenance().await },
        ));
    }
    for run in runs {
        let report = run.await.expect("join").expect("maintenance");
        assert!(report.failed.is_empty());
    }
    for purpose in Purpose::ALL {
        let (active, pending): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE state = 'active'), count(*) FILTER (WHERE state = 'pending')
             FROM auth.signing_keys WHERE purpose = $1",
        )
        .bind(purpose.as_str())
        .fetch_one(&db.pool)
        .await
        .expect("counts");
        assert_eq!(active, 1, "{purpose}");
        assert!(pending <= 1, "{purpose}");
    }
}

/// Sessions longer than a day widen their key's verify window inside the issuance that holds
/// the key row; eight concurrent 48 h issuances all complete (none is chosen as a deadlock
/// victim, none waits out its deadline).
#[tokio::test]
async fn concurrent_long_sessions_widen_the_verify_window_without_deadlock() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.settings
        .set("user.session.expiry_hours", serde_json::json!(48))
        .await
        .expect("48 h sessions");
    let users = {
        let mut users = Vec::new();
        for i in 0..8 {
            users.push(create_user(&core, &format!("user{i}"), false).await);
        }
        users
    };
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    // A key near the end of its signing period verifies a day past it: shorter than 48 h.
    sqlx::query(
        "UPDATE auth.signing_keys SET sign_until = now() + interval '30 minutes',
                verify_until = now() + interval '1 day 30 minutes'
         WHERE purpose = 'session' AND state = 'active'",
    )
    .execute(&core.pool)
    .await
    .expect("an ageing key");
    let before: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT verify_until FROM auth.signing_keys WHERE purpose = 'session' AND state = 'active'",
    )
    .fetch_one(&core.pool)
    .await
    .expect("window");
    let issued = futures::future::join_all(users.iter().map(|user| {
        core.identity.issue_session(
            &core.settings,
            SessionRequest::web(user.id),
            IssueOptions::timeout(10_000.0),
        )
    }))
    .await;
    for (i, result) in issued.iter().enumerate() {
        assert!(result.is_ok(), "issuance {i}: {result:?}");
    }
    let after: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT verify_until FROM auth.signing_keys WHERE purpose = 'session' AND state = 'active'",
    )
    .fetch_one(&core.pool)
    .await
    .expect("window");
    assert!(
        after > before && after >= chrono::Utc::now() + chrono::Duration::hours(48),
        "{before} -> {after}"
    );
}
