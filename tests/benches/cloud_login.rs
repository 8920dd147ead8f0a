//! Cloud Login (figures, no assertions), against a real Postgres and the `approvals` router over
//! loopback HTTP:
//! - ES256 verifications per second on one core (aws-lc-rs, as the server verifies), beside
//!   `openssl speed -seconds 3 ecdsap256` run in the same process's turn;
//! - decide → held `login/status` wake-up: a browser waits with `Prefer: wait=10`, the
//!   authenticator approves; the time from the decision's answer to the browser's answer, p50/p99
//!   over 200 sign-ins;
//! - `login/start` for a known and an unknown identifier, interleaved: medians over 200 calls each.
//!
//! Run: `cargo bench -p k2b-tests --bench cloud_login`.

use std::process::Command;
use std::time::{Duration, Instant};

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k2b_tests::authenticator::TestAuthenticator;
use k2b_tests::figures::{ms, percentile};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::{Value, json};

const WAKEUPS: usize = 200;
const STARTS: usize = 200;

fn es256_per_second() -> f64 {
    let device = TestAuthenticator::new();
    let message = "[\"cloud-app-approval-v1\",\"device\",\"https://cloud.example.test\"]";
    let signature = URL_SAFE_NO_PAD
        .decode(device.sign(message))
        .expect("signature");
    let point: Vec<u8> = [
        vec![4u8],
        URL_SAFE_NO_PAD
            .decode(device.jwk["x"].as_str().expect("x"))
            .expect("x"),
        URL_SAFE_NO_PAD
            .decode(device.jwk["y"].as_str().expect("y"))
            .expect("y"),
    ]
    .concat();
    let key = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point);
    // Each round parses the key again, as the server does per command.
    let started = Instant::now();
    let mut count = 0u64;
    while started.elapsed() < Duration::from_secs(3) {
        for _ in 0..100 {
            key.verify(message.as_bytes(), &signature).expect("valid");
        }
        count += 100;
    }
    count as f64 / started.elapsed().as_secs_f64()
}

fn openssl_verify_per_second() -> Option<f64> {
    let output = Command::new("openssl")
        .args(["speed", "-seconds", "3", "ecdsap256"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    // "256 bits ecdsa (nistp256)   0.0000s   0.0001s  40000.0  12000.0": sign/s then verify/s.
    let line = text.lines().find(|l| l.contains("(nistp256)"))?;
    line.split_whitespace().last()?.parse().ok()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("== cloud login: ES256 verify, decision wake-up, decoy timing ==");
    let ours = tokio::task::spawn_blocking(es256_per_second)
        .await
        .expect("verify");
    let theirs = openssl_verify_per_second();
    match theirs {
        Some(openssl) => println!(
            "ES256 verify, one core     aws-lc-rs {ours:>9.0}/s   openssl speed {openssl:>9.0}/s   {:.0} % of OpenSSL (goal ≥ 80 %)",
            100.0 * ours / openssl
        ),
        None => {
            println!("ES256 verify, one core     aws-lc-rs {ours:>9.0}/s   (openssl not found)")
        }
    }

    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity.initialize().await.expect("identity keys");
    for (key, value) in [
        ("user.app_approval.enabled", json!(true)),
        (
            "user.app_approval.origin",
            json!("https://cloud-login.example.test"),
        ),
        ("security.rate_limit_per_second", json!(100000)),
    ] {
        core.settings.set(key, value).await.expect("setting");
    }
    let user = create_user(&core, "ada", false).await;
    {
        let mut conn = core.pool.acquire().await.expect("connection");
        k2b_core::approvals::accept_legal_terms(&mut conn, user.id)
            .await
            .expect("terms");
    }
    let cookie = k2b_tests::session_cookie(&core, &user).await;
    let origin = core.settings.public_origin().await.expect("origin");
    let base = serve(approvals::router(core.clone())).await;
    let api = format!("{base}/api/auth/app-approval/v1");
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value, from: &str| {
        client
            .post(format!("{api}{path}"))
            .header("origin", from)
            .header("cookie", &cookie)
            .json(&body)
            .send()
    };
    let json_of = |response: reqwest::Response| async move {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{status}: {body}");
        body
    };

    // Enroll one authenticator.
    let mut device = TestAuthenticator::new();
    let started = json_of(
        post("/manage/pairings/start", json!({}), &origin)
            .await
            .expect("start"),
    )
    .await;
    let claim = device.claim_body(
        &origin,
        started["pairingId"].as_str().expect("id"),
        started["secret"].as_str().expect("secret"),
        "Bench phone",
    );
    let claimed = json_of(
        post("/pairings/claim", claim, &origin)
            .await
            .expect("claim"),
    )
    .await;
    json_of(
        post(
            "/manage/pairings/confirm",
            json!({"pairingId": started["pairingId"], "comparison": claimed["comparison"]}),
            &origin,
        )
        .await
        .expect("confirm"),
    )
    .await;
    device.device_id = claimed["deviceId"].as_str().map(str::to_string);

    let mut wakeups = Vec::with_capacity(WAKEUPS);
    for _ in 0..WAKEUPS {
        let login = json_of(
            post(
                "/login/start",
                json!({"identifier": "ada", "category": "login"}),
                &origin,
            )
            .await
            .expect("login"),
        )
        .await;
        let reference =
            json!({"requestId": login["requestId"], "browserSecret": login["browserSecret"]});
        let held = client
            .post(format!("{api}/login/status"))
            .header("origin", &origin)
            .header("prefer", "wait=10")
            .json(&reference)
            .send();
        let held = tokio::spawn(async move {
            let response = held.await.expect("status");
            let body: Value = response.json().await.expect("json");
            (body, Instant::now())
        });
        // Let the status reach its wait before the decision.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let pending = json_of(
            post(
                "/device",
                device.command(&origin, json!({"operation": "pending"})),
                &origin,
            )
            .await
            .expect("pending"),
        )
        .await;
        let request = pending["requests"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["requestId"] == login["requestId"]))
            .expect("pending request")
            .clone();
        let decision = device.command(
            &origin,
            json!({"operation": "decide", "requestId": login["requestId"],
                   "challenge": request["challenge"], "comparison": request["comparison"],
                   "decision": "approve"}),
        );
        json_of(post("/device", decision, &origin).await.expect("decide")).await;
        let decided = Instant::now();
        let (body, answered) = held.await.expect("join");
        assert_eq!(body["state"], "approved");
        wakeups.push(ms(answered.saturating_duration_since(decided)));
        // Keep the person under the open-request limit.
        json_of(
            post("/login/complete", reference, &origin)
                .await
                .expect("complete"),
        )
        .await;
    }
    wakeups.sort_by(f64::total_cmp);
    println!(
        "decide → held status       p50 {:>6.2} ms   p99 {:>6.2} ms   over {WAKEUPS} sign-ins (goal p50 ≤ 50 ms)",
        percentile(&wakeups, 50.0),
        percentile(&wakeups, 99.0),
    );

    sqlx::query("DELETE FROM auth.app_logins")
        .execute(&core.pool)
        .await
        .expect("reset");
    let mut known = Vec::with_capacity(STARTS);
    let mut unknown = Vec::with_capacity(STARTS);
    for i in 0..STARTS * 2 {
        let identifier = if i % 2 == 0 {
            "ada"
        } else {
            "nobody@example.test"
        };
        let since = Instant::now();
        let response = post(
            "/login/start",
            json!({"identifier": identifier, "category": "login"}),
            &origin,
        )
        .await
        .expect("start");
        let status = response.status();
        let _ = response.bytes().await;
        let took = since.elapsed();
        assert_eq!(status, 202);
        if i % 2 == 0 {
            known.push(ms(took));
        } else {
            unknown.push(ms(took));
        }
        // The known account's open requests stay under the limit (a sixth would be a decoy).
        if i % 8 == 6 {
            sqlx::query("UPDATE auth.app_logins SET state = 'consumed' WHERE user_id IS NOT NULL")
                .execute(&core.pool)
                .await
                .expect("settle");
        }
    }
    known.sort_by(f64::total_cmp);
    unknown.sort_by(f64::total_cmp);
    let (k, u) = (percentile(&known, 50.0), percentile(&unknown, 50.0));
    println!(
        "login/start known          p50 {k:>6.2} ms   unknown p50 {u:>6.2} ms   difference {:.1} % (goal within 10 %)",
        100.0 * (k - u).abs() / k.min(u)
    );
}
