//! Identity benchmarks (figures, no assertions):
//! - session-token sign/s and verify/s on one core, next to `openssl speed rsa2048` measured in
//!   the same run (target: each at least half of OpenSSL's rate);
//! - full session issuance per second (family insert + signature + commit) against Postgres.
//!
//! Run: `cargo bench -p k2b-tests --bench identity`.

use std::process::Command;
use std::time::{Duration, Instant};

use k2b_core::identity::session::{SessionClaims, SessionRequest};
use k2b_core::identity::{IssueOptions, Purpose, jwt, keys};
use k2b_tests::figures::rate;
use k2b_tests::{TestDb, core_for, create_user};
use uuid::Uuid;

const MEASURE: Duration = Duration::from_secs(3);

/// `openssl speed -seconds 3 rsa2048` → (version, sign/s, verify/s).
fn openssl_rsa2048() -> Option<(String, f64, f64)> {
    let version = Command::new("openssl").arg("version").output().ok()?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let output = Command::new("openssl")
        .args(["speed", "-seconds", "3", "rsa2048"])
        .output()
        .ok()?;
    let (sign, verify) =
        k2b_tests::figures::openssl_rsa_rates(&String::from_utf8_lossy(&output.stdout), 2048)?;
    Some((version, sign, verify))
}

fn main() {
    println!("== identity benchmarks ==");
    let key = keys::generate().expect("key");
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    let decoding = keys::decoding_key(&key.public).expect("decoding key");
    let now = chrono::Utc::now().timestamp() as u64;
    let claims = SessionClaims {
        iss: "https://cloud.example.test".into(),
        aud: "cloud".into(),
        token_use: "session".into(),
        sub: Uuid::new_v4(),
        sid: Uuid::new_v4(),
        auth_epoch: 0,
        iat: now,
        exp: now + 8 * 3600,
    };
    let token = jwt::encode(&key.kid, "cloud-session+jwt", &claims, &signing).expect("token");

    let sign_rate = rate(MEASURE, || {
        jwt::encode(&key.kid, "cloud-session+jwt", &claims, &signing).expect("sign");
    });
    let verify_rate = rate(MEASURE, || {
        let parsed = jwt::parse(&token).expect("parse");
        let verified: SessionClaims = parsed.verify(&decoding).expect("verify");
        assert!(k2b_core::identity::session::check_session_claims(
            &verified,
            "https://cloud.example.test",
            chrono::Utc::now().timestamp()
        ));
    });

    println!("session token, one core (RS256 2048, header + claims + signature):");
    println!("  sign:   {sign_rate:>9.0} /s");
    println!("  verify: {verify_rate:>9.0} /s");
    match openssl_rsa2048() {
        Some((version, openssl_sign, openssl_verify)) => {
            println!("openssl speed rsa2048 ({version}; same machine, same run):");
            println!("  sign:   {openssl_sign:>9.0} /s");
            println!("  verify: {openssl_verify:>9.0} /s");
            println!(
                "ratio to OpenSSL: sign {:.2}, verify {:.2} (target >= 0.50 each)",
                sign_rate / openssl_sign,
                verify_rate / openssl_verify
            );
        }
        None => println!("openssl speed: not available on this machine"),
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let db = TestDb::new().await;
        let core = core_for(&db);
        let user = create_user(&core, "bench", false).await;
        core.identity.prepare_signer(Purpose::Session).await.expect("signer");
        for concurrency in [1usize, 8] {
            let started = Instant::now();
            let deadline = started + MEASURE;
            let mut workers = Vec::new();
            for _ in 0..concurrency {
                let core = core.clone();
                workers.push(tokio::spawn(async move {
                    let mut done = 0u64;
                    while Instant::now() < deadline {
                        core.identity
                            .issue_session(&core.settings, SessionRequest::web(user.id), IssueOptions::default())
                            .await
                            .expect("issue");
                        done += 1;
                    }
                    done
                }));
            }
            let mut total = 0;
            for worker in workers {
                total += worker.await.expect("join");
            }
            let per_second = total as f64 / started.elapsed().as_secs_f64();
            println!(
                "full session issuance (family insert + signature + commit), {concurrency} concurrent: {per_second:>7.0} /s"
            );
        }
        let families: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.session_families")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        println!("  ({families} families written)");
    });
}
