//! The key ring against a real Postgres: scenarios 41–46 of spec/identity.md §15 and the
//! concurrency guarantees of the key ring.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::config::Secret;
use k2b_core::identity::{
    Identity, IdentityError, IssueOptions, KekSet, Metrics, Purpose, RuntimeConfigCache, Signer,
    SignerSource, keys, ring,
};
use k2b_tests::{TestDb, core_for};
use serde_json::Value;

const KEK_A: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const KEK_B: &str = "0202020202020202020202020202020202020202020202020202020202020202";

fn keks(current: &str, previous: Option<&str>, next: Option<&str>) -> KekSet {
    KekSet::parse(
        Some(&Secret::new(current)),
        previous.map(Secret::new).as_ref(),
        next.map(Secret::new).as_ref(),
    )
    .expect("kek set")
}

fn identity_with(db: &TestDb, keks: KekSet) -> Identity {
    let core = core_for(db);
    Identity::new(
        db.pool.clone(),
        Some(keks),
        core.settings.clone(),
        false,
        None,
        None,
    )
}

async fn states(db: &TestDb, purpose: Purpose) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT state, kid FROM auth.signing_keys WHERE purpose = $1 ORDER BY created_at",
    )
    .bind(purpose.as_str())
    .fetch_all(&db.pool)
    .await
    .expect("states")
}

async fn count(db: &TestDb, purpose: Purpose, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM auth.signing_keys WHERE purpose = $1 AND state = $2")
        .bind(purpose.as_str())
        .bind(state)
        .fetch_one(&db.pool)
        .await
        .expect("count")
}

async fn jwks_kids(db: &TestDb, purpose: Purpose) -> Vec<String> {
    ring::list_jwks(&db.pool, purpose)
        .await
        .expect("jwks")
        .iter()
        .filter_map(|k| k.get("kid").and_then(Value::as_str).map(str::to_string))
        .collect()
}

async fn active_kid(db: &TestDb, purpose: Purpose) -> String {
    sqlx::query_scalar("SELECT kid FROM auth.signing_keys WHERE purpose = $1 AND state = 'active'")
        .bind(purpose.as_str())
        .fetch_one(&db.pool)
        .await
        .expect("active key")
}

fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(30)
}

/// Scenario 41: a key revoked in SQL behind the cache is noticed at issuance.
#[tokio::test]
async fn scenario_41_revoked_behind_the_cache_issues_with_a_new_key() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let first = core
        .identity
        .prepare_signer(Purpose::Oauth)
        .await
        .expect("signer");
    sqlx::query(
        "UPDATE auth.signing_keys SET state = 'revoked', revoked_at = now() WHERE kid = $1",
    )
    .bind(&first.kid)
    .execute(&db.pool)
    .await
    .expect("revoke");
    let kid: String = core
        .identity
        .with_active_signer(
            Purpose::Oauth,
            IssueOptions::default(),
            |scope| async move {
                let kid = scope.signer.kid.clone();
                (scope, Ok::<_, IdentityError>(kid))
            },
        )
        .await
        .expect("issued");
    assert_ne!(kid, first.kid);
    assert_eq!(active_kid(&db, Purpose::Oauth).await, kid);
}

/// A signer source that hands out a key the database never heard of.
struct Phantom {
    prepares: Arc<AtomicUsize>,
}

impl SignerSource for Phantom {
    fn prepare(&self, purpose: Purpose) -> BoxFuture<'static, Result<Arc<Signer>, IdentityError>> {
        self.prepares.fetch_add(1, Ordering::SeqCst);
        async move {
            let key = keys::generate()?;
            let encoding = keys::import(&key.kid, &key.public, &key.private)?;
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

/// Scenario 42: when the key check never finds the key, two attempts and no callback.
#[tokio::test]
async fn scenario_42_no_active_signer_after_two_checks_and_no_callback() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let prepares = Arc::new(AtomicUsize::new(0));
    let metrics = Arc::new(Metrics::default());
    let identity = Identity::from_parts(
        db.pool.clone(),
        core.config.identity.keks.clone(),
        Arc::new(Phantom {
            prepares: prepares.clone(),
        }),
        RuntimeConfigCache::new(
            Arc::new(super::FixedSettings("https://cloud.example.test".into())),
            false,
            None,
            None,
        ),
        metrics,
    );
    let callbacks = AtomicUsize::new(0);
    let error = identity
        .with_active_signer(Purpose::Oauth, IssueOptions::default(), |scope| {
            callbacks.fetch_add(1, Ordering::SeqCst);
            async move { (scope, Ok::<(), IdentityError>(())) }
        })
        .await
        .expect_err("no signer");
    assert_eq!(
        error.to_string(),
        "No active oauth identity signer is available"
    );
    assert_eq!(prepares.load(Ordering::SeqCst), 2);
    assert_eq!(callbacks.load(Ordering::SeqCst), 0);
}

/// Scenario 43: revocation waits for issuance in progress; afterwards one new active key.
#[tokio::test]
async fn scenario_43_revocation_waits_for_issuance_in_flight() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let (entered_tx, entered) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let identity = core.identity.clone();
    let issuance = tokio::spawn(async move {
        identity
            .with_active_signer(
                Purpose::Invocation,
                IssueOptions::default(),
                |scope| async move {
                    entered_tx.send(()).ok();
                    release.await.ok();
                    let kid = scope.signer.kid.clone();
                    (scope, Ok::<_, IdentityError>(kid))
                },
            )
            .await
    });
    entered.await.expect("callback started");
    let old = active_kid(&db, Purpose::Invocation).await;
    let identity = core.identity.clone();
    let revoke_kid = old.clone();
    let revocation =
        tokio::spawn(async move { identity.revoke_key(&revoke_kid, "compromised").await });
    tokio::time::sleep(Duration::from_millis(25)).await;
    assert!(
        !revocation.is_finished(),
        "revocation waits for the share lock"
    );
    release_tx.send(()).ok();
    let issued = issuance.await.expect("join").expect("issued");
    assert_eq!(issued, old);
    assert!(revocation.await.expect("join").expect("revoked"));
    assert_eq!(count(&db, Purpose::Invocation, "active").await, 1);
    assert_ne!(active_kid(&db, Purpose::Invocation).await, old);
}

/// The overlapped guard (`sign_while_guarded`): a key revoked behind the cache is noticed by
/// the check beside the signatures; their result is dropped and the work runs again with a
/// new key, which is the one released.
#[tokio::test]
async fn signing_beside_the_check_drops_what_a_revoked_key_signed() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let first = core
        .identity
        .prepare_signer(Purpose::Invocation)
        .await
        .expect("signer");
    sqlx::query(
        "UPDATE auth.signing_keys SET state = 'revoked', revoked_at = now() WHERE kid = $1",
    )
    .bind(&first.kid)
    .execute(&db.pool)
    .await
    .expect("revoke");
    let runs = AtomicUsize::new(0);
    let guards = core.identity.metrics().snapshot().signer_guards;
    let kid = core
        .identity
        .sign_while_guarded(
            Purpose::Invocation,
            IssueOptions::default(),
            |signer, issuer| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    assert!(issuer.starts_with("http"), "{issuer}");
                    signer.kid().to_string()
                }
            },
        )
        .await
        .expect("issued");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "signed again with the new key"
    );
    assert_ne!(kid, first.kid);
    assert_eq!(active_kid(&db, Purpose::Invocation).await, kid);
    assert_eq!(core.identity.metrics().snapshot().signer_guards, guards + 2);
}

/// The overlapped guard with a key the database never heard of: two attempts, nothing released.
#[tokio::test]
async fn signing_beside_the_check_releases_nothing_without_an_active_key() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let prepares = Arc::new(AtomicUsize::new(0));
    let identity = Identity::from_parts(
        db.pool.clone(),
        core.config.identity.keks.clone(),
        Arc::new(Phantom {
            prepares: prepares.clone(),
        }),
        RuntimeConfigCache::new(
            Arc::new(super::FixedSettings("https://cloud.example.test".into())),
            false,
            None,
            None,
        ),
        Arc::new(Metrics::default()),
    );
    let error = identity
        .sign_while_guarded(
            Purpose::Oauth,
            IssueOptions::default(),
            |signer, _| async move { signer.kid().to_string() },
        )
        .await
        .expect_err("no signer");
    assert_eq!(
        error.to_string(),
        "No active oauth identity signer is available"
    );
    assert_eq!(prepares.load(Ordering::SeqCst), 2);
}

/// The overlapped guard holds the key's share lock until the signatures are done: a
/// revocation that comes after the check waits for them, and what they signed is released.
#[tokio::test]
async fn revocation_waits_for_signatures_beside_the_check() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let old = core
        .identity
        .prepare_signer(Purpose::Invocation)
        .await
        .expect("signer")
        .kid
        .clone();
    let (release_tx, release) = tokio::sync::oneshot::channel::<()>();
    let release = std::sync::Mutex::new(Some(release));
    let identity = core.identity.clone();
    let guards = core.identity.metrics().snapshot().signer_guards;
    let issuance = tokio::spawn(async move {
        identity
            .sign_while_guarded(
                Purpose::Invocation,
                IssueOptions::default(),
                move |signer, _| {
                    let release = release.lock().expect("lock").take();
                    async move {
                        if let Some(release) = release {
                            release.await.ok();
                        }
                        signer.kid().to_string()
                    }
                },
            )
            .await
    });
    // The check has the lock once the guard is counted; the signatures are still held.
    for _ in 0..500 {
        if core.identity.metrics().snapshot().signer_guards > guards {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(core.identity.metrics().snapshot().signer_guards, guards + 1);
    let identity = core.identity.clone();
    let revoke_kid = old.clone();
    let revocation =
        tokio::spawn(async move { identity.revoke_key(&revoke_kid, "compromised").await });
    tokio::time::sleep(Duration::from_millis(25)).await;
    assert!(
        !revocation.is_finished(),
        "revocation waits for the share lock"
    );
    assert!(!issuance.is_finished(), "the signatures are still running");
    release_tx.send(()).ok();
    let issued = issuance.await.expect("join").expect("issued");
    assert_eq!(issued, old);
    assert!(revocation.await.expect("join").expect("revoked"));
    assert_ne!(active_kid(&db, Purpose::Invocation).await, old);
}

/// Scenario 44: the full cycle — concurrent initialisation, rotation, promotion, import
/// failures, KEK rollout, revocation and pruning.
#[tokio::test]
async fn scenario_44_full_key_ring_cycle() {
    let db = TestDb::new().await;
    let core = core_for(&db);

    // (a) Eight parallel initialisations: one active, at most one pending per purpose.
    let mut runs = Vec::new();
    for _ in 0..8 {
        let identity = identity_with(&db, keks(KEK_A, None, None));
        runs.push(tokio::spawn(async move { identity.initialize().await }));
    }
    for run in runs {
        run.await.expect("join").expect("initialize");
    }
    for purpose in Purpose::ALL {
        assert_eq!(count(&db, purpose, "active").await, 1, "{purpose}");
        assert!(count(&db, purpose, "pending").await <= 1, "{purpose}");
    }

    // (b) Active invocation and oauth keys 31 days old: six parallel passes, one pending each.
    sqlx::query(
        "UPDATE auth.signing_keys SET created_at = created_at - interval '31 days'
         WHERE purpose IN ('invocation', 'oauth') AND state = 'active'",
    )
    .execute(&db.pool)
    .await
    .expect("backdate");
    let keks_a = keks(KEK_A, None, None);
    let mut passes = Vec::new();
    for purpose in [Purpose::Invocation, Purpose::Oauth] {
        for _ in 0..6 {
            let pool = db.pool.clone();
            let keks = keks_a.clone();
            passes.push(tokio::spawn(async move {
                ring::maintain_purpose(&pool, &keks, purpose, deadline()).await
            }));
        }
    }
    for pass in passes {
        pass.await.expect("join").expect("maintain");
    }
    for purpose in [Purpose::Invocation, Purpose::Oauth] {
        assert_eq!(count(&db, purpose, "pending").await, 1, "{purpose}");
        assert_eq!(count(&db, purpose, "active").await, 1, "{purpose}");
    }

    // (c) The pending invocation key's time has come: promoted; the old one retired but still
    // published with the invocation keys, never with the session keys.
    let old_invocation = active_kid(&db, Purpose::Invocation).await;
    sqlx::query(
        "UPDATE auth.signing_keys SET activate_at = now() - interval '1 second'
         WHERE purpose = 'invocation' AND state = 'pending'",
    )
    .execute(&db.pool)
    .await
    .expect("due");
    let (row, changes) = ring::maintain_purpose(&db.pool, &keks_a, Purpose::Invocation, deadline())
        .await
        .expect("maintain");
    assert!(changes.promoted);
    assert_ne!(row.kid, old_invocation);
    let states = states(&db, Purpose::Invocation).await;
    assert!(states.contains(&("retired".to_string(), old_invocation.clone())));
    assert!(
        jwks_kids(&db, Purpose::Invocation)
            .await
            .contains(&old_invocation)
    );
    assert!(
        !jwks_kids(&db, Purpose::Session)
            .await
            .contains(&old_invocation)
    );

    // (d) Import failures: another KEK, a corrupt ciphertext, a foreign public key.
    let stranger = identity_with(&db, keks(KEK_B, None, None));
    let error = stranger
        .prepare_signer(Purpose::Session)
        .await
        .expect_err("wrong kek");
    assert!(
        error
            .to_string()
            .starts_with("No configured KEK can decrypt Cloud identity key"),
        "{error}"
    );
    let session_kid = active_kid(&db, Purpose::Session).await;
    let original: (String, Value) = sqlx::query_as(
        "SELECT encrypted_private_jwk, public_jwk FROM auth.signing_keys WHERE kid = $1",
    )
    .bind(&session_kid)
    .fetch_one(&db.pool)
    .await
    .expect("row");
    sqlx::query("UPDATE auth.signing_keys SET encrypted_private_jwk = 'v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' WHERE kid = $1")
        .bind(&session_kid)
        .execute(&db.pool)
        .await
        .expect("corrupt");
    let fresh = identity_with(&db, keks(KEK_A, None, None));
    assert!(
        fresh.prepare_signer(Purpose::Session).await.is_err(),
        "corrupt ciphertext"
    );
    let foreign = serde_json::to_value(keys::generate().expect("key").public).expect("json");
    sqlx::query(
        "UPDATE auth.signing_keys SET encrypted_private_jwk = $2, public_jwk = $3 WHERE kid = $1",
    )
    .bind(&session_kid)
    .bind(&original.0)
    .bind(&foreign)
    .execute(&db.pool)
    .await
    .expect("foreign public key");
    let fresh = identity_with(&db, keks(KEK_A, None, None));
    let error = fresh
        .prepare_signer(Purpose::Session)
        .await
        .expect_err("mismatch");
    assert!(error.to_string().contains("does not match"), "{error}");
    sqlx::query("UPDATE auth.signing_keys SET public_jwk = $2 WHERE kid = $1")
        .bind(&session_kid)
        .bind(&original.1)
        .execute(&db.pool)
        .await
        .expect("restore");

    // (e) KEK rollout: NEXT=B changes nothing; CURRENT=B + PREVIOUS=A rewraps every row to B.
    let with_next = identity_with(&db, keks(KEK_A, None, Some(KEK_B)));
    assert_eq!(with_next.initialize().await.expect("initialize"), 0);
    let id_a = keks(KEK_A, None, None).current.id;
    let id_b = keks(KEK_B, None, None).current.id;
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT encryption_key_id FROM auth.signing_keys")
            .fetch_all(&db.pool)
            .await
            .expect("ids");
    assert_eq!(ids, vec![id_a.clone()]);
    let rolled = identity_with(&db, keks(KEK_B, Some(KEK_A), None));
    assert!(rolled.initialize().await.expect("rewrap") > 0);
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT encryption_key_id FROM auth.signing_keys")
            .fetch_all(&db.pool)
            .await
            .expect("ids");
    assert_eq!(ids, vec![id_b.clone()]);
    // Only B reads them now.
    identity_with(&db, keks(KEK_B, None, None))
        .prepare_signer(Purpose::Session)
        .await
        .expect("B reads the rewrapped keys");

    // (f) Revoking the active invocation key: gone from the JWKS, one active key remains.
    let rolled = identity_with(&db, keks(KEK_B, None, None));
    let invocation = active_kid(&db, Purpose::Invocation).await;
    assert!(
        rolled
            .revoke_key(&invocation, "test")
            .await
            .expect("revoke")
    );
    assert!(
        !jwks_kids(&db, Purpose::Invocation)
            .await
            .contains(&invocation)
    );
    assert_eq!(count(&db, Purpose::Invocation, "active").await, 1);
    assert!(
        !rolled
            .revoke_key(&invocation, "again")
            .await
            .expect("revoked already")
    );

    // (g) A retired key past its verify window is deleted by maintenance.
    sqlx::query(
        "UPDATE auth.signing_keys SET verify_until = now() - interval '1 second',
                sign_until = LEAST(sign_until, now() - interval '2 seconds'),
                activate_at = LEAST(activate_at, now() - interval '3 seconds')
         WHERE kid = $1",
    )
    .bind(&old_invocation)
    .execute(&db.pool)
    .await
    .expect("expire");
    let report = rolled.run_key_maintenance().await.expect("maintenance");
    assert!(report.keys_pruned >= 1);
    let gone: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.signing_keys WHERE kid = $1")
        .bind(&old_invocation)
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(gone, 0);
    drop(core);
}

/// Scenario 45: recovery after downtime past both keys' signing periods.
#[tokio::test]
async fn scenario_45_downtime_recovery() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    sqlx::query(
        "UPDATE auth.signing_keys SET created_at = created_at - interval '31 days'
         WHERE purpose = 'session' AND state = 'active'",
    )
    .execute(&db.pool)
    .await
    .expect("backdate");
    let keks_a = core
        .config
        .identity
        .keks
        .clone()
        .expect("the test configuration holds the key-encryption keys");
    let (_, changes) = ring::maintain_purpose(&db.pool, &keks_a, Purpose::Session, deadline())
        .await
        .expect("maintain");
    assert!(changes.created_pending);
    let old: Vec<String> = states(&db, Purpose::Session)
        .await
        .into_iter()
        .map(|(_, kid)| kid)
        .collect();
    assert_eq!(old.len(), 2);
    sqlx::query(
        "UPDATE auth.signing_keys SET activate_at = LEAST(activate_at, now() - interval '2 seconds'),
                sign_until = now() - interval '1 second'
         WHERE purpose = 'session'",
    )
    .execute(&db.pool)
    .await
    .expect("downtime");
    let fresh = identity_with(&db, keks_a);
    fresh.initialize().await.expect("initialize");
    let signer = fresh
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    assert!(!old.contains(&signer.kid));
    assert!(signer.sign_until > chrono::Utc::now());
    let states = self::states(&db, Purpose::Session).await;
    for kid in &old {
        assert!(
            states.contains(&("retired".to_string(), kid.clone())),
            "{kid} retired"
        );
    }
    let published = jwks_kids(&db, Purpose::Session).await;
    assert!(old.iter().all(|kid| published.contains(kid)));
    assert_eq!(count(&db, Purpose::Session, "active").await, 1);
}

/// Scenario 46: running every migration's SQL again changes no index or constraint.
#[tokio::test]
async fn scenario_46_migrations_are_idempotent() {
    let db = TestDb::new().await;
    let snapshot = || async {
        let indexes: Vec<(String, String)> = sqlx::query_as(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname IN ('auth', 'settings', 'audit', 'registry') ORDER BY 1",
        )
        .fetch_all(&db.pool)
        .await
        .expect("indexes");
        let constraints: Vec<(String, String)> = sqlx::query_as(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
             WHERE connamespace IN (SELECT oid FROM pg_namespace WHERE nspname IN ('auth', 'settings', 'audit', 'registry'))
             ORDER BY 1, 2",
        )
        .fetch_all(&db.pool)
        .await
        .expect("constraints");
        (indexes, constraints)
    };
    let before = snapshot().await;
    assert!(
        before
            .0
            .iter()
            .any(|(name, _)| name == "signing_keys_one_active_idx")
    );
    for migration in k2b_core::db::MIGRATOR.iter() {
        sqlx::raw_sql(sqlx::AssertSqlSafe(migration.sql.as_str().to_string()))
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("migration {} again: {e}", migration.version));
    }
    assert_eq!(snapshot().await, before);
    // And the migrator itself applies nothing a second time.
    let report = k2b_core::db::migrate(&db.pool).await.expect("migrate");
    assert!(report.applied.is_empty());
}

#[tokio::test]
async fn the_database_refuses_a_second_active_or_pending_key_and_bad_windows() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    let duplicate = sqlx::query(
        "INSERT INTO auth.signing_keys (purpose, state, kid, public_jwk, encrypted_private_jwk,
           encryption_key_id, activate_at, sign_until, verify_until, activated_at)
         SELECT purpose, 'active', '00000000-0000-4000-8000-000000000000', public_jwk,
           encrypted_private_jwk, encryption_key_id, activate_at, sign_until, verify_until, now()
         FROM auth.signing_keys WHERE purpose = 'session'",
    )
    .execute(&db.pool)
    .await;
    assert!(duplicate.is_err(), "one active key per purpose");
    let bad_window = sqlx::query(
        "UPDATE auth.signing_keys SET verify_until = sign_until - interval '1 second' WHERE purpose = 'session'",
    )
    .execute(&db.pool)
    .await;
    assert!(bad_window.is_err(), "verify_until >= sign_until");
    let unstamped =
        sqlx::query("UPDATE auth.signing_keys SET state = 'revoked' WHERE purpose = 'session'")
            .execute(&db.pool)
            .await;
    assert!(unstamped.is_err(), "revoked needs revoked_at");
}
