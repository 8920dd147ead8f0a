//! Outgoing mail delivery (figures, no assertions), against a real Postgres and a real SMTP
//! conversation with the harness's SMTP peer on loopback:
//! - the bulk lane: 2,000 messages enqueued on a profile paced at 6,000/min (a ceiling of 100
//!   messages/s), drained by one drain at a time as the `outbox` function runs it; messages/s
//!   sent, beside the pace's ceiling and the bare SMTP rate (the same conversations without the
//!   database: one connection per message, as delivery opens them);
//! - the immediate lane: `POST /api/mail/v1/send` through HTTP (`Prefer: wait=0`), delivery
//!   woken in process as the local runner does, to the peer's `250`: p50/p99 of the time from
//!   the call to the server's acceptance, over 300 messages one after another.
//!
//! Run: `cargo bench -p k2b-tests --bench mail_delivery`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k2b_core::identity::workload;
use k2b_core::mail::smtp::{self, Outgoing, Server};
use k2b_core::registry::store;
use k2b_core::smtp_sink::SmtpSink;
use k2b_tests::figures::{ms, percentile};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::{Value, json};
use uuid::Uuid;

const PACE_PER_MINUTE: i32 = 6000;
const BULK_MESSAGES: usize = 2000;
const IMMEDIATE_MESSAGES: usize = 300;
const BARE_MESSAGES: usize = 500;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!(
        "== mail delivery: bulk lane {BULK_MESSAGES} messages at pace {PACE_PER_MINUTE}/min; immediate lane {IMMEDIATE_MESSAGES} sends; SMTP peer on loopback =="
    );
    let db = TestDb::new().await;
    let core = core_for(&db);
    let sink = SmtpSink::start("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("smtp peer");
    let token = {
        let mut conn = core.pool.acquire().await.expect("connection");
        store::upsert(
            &mut conn,
            &json!({"id": "bulk", "name": "Bulk", "icon": "ti ti-box", "description": "d",
                    "baseUrl": "https://bulk.internal", "routes": ["/app/bulk"],
                    "platformPermissions": ["mail:send"]}),
            Duration::from_secs(3600),
        )
        .await
        .expect("register");
        workload::issue_app_credential(&mut conn, "bulk", &["mail"])
            .await
            .expect("credential")
            .0
    };
    let admin = create_user(&core, "root", true).await;
    let cookie = k2b_tests::session_cookie(&core, &admin).await;
    let origin = core.settings.public_origin().await.expect("origin");
    let base = serve(mail::router(core.clone())).await;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let response = client
        .put(format!(
            "{base}/api/admin/core/outgoing-mail/profiles/alerts"
        ))
        .header("cookie", &cookie)
        .header("origin", &origin)
        .json(&json!({
            "name": "Alerts", "fromAddress": "alerts@example.org", "smtpHost": "127.0.0.1",
            "smtpPort": sink.addr.port(), "smtpSecure": false, "smtpUser": "mailer",
            "smtpPassword": "s3cret-pass", "pacePerMinute": PACE_PER_MINUTE,
        }))
        .send()
        .await
        .expect("profile");
    assert_eq!(response.status(), 201, "profile");
    let profile: Uuid =
        sqlx::query_scalar("SELECT id FROM outgoing_mail.profiles WHERE key = 'alerts'")
            .fetch_one(&core.pool)
            .await
            .expect("profile id");

    // 0. The bare SMTP rate: the peer and the client, nothing else.
    let to = ["bare@example.org".to_string()];
    let server = Server {
        host: "127.0.0.1",
        port: sink.addr.port(),
        secure: false,
        user: Some("mailer"),
        password: Some("s3cret-pass"),
        extra_roots: &[],
        hello: "bench.localdomain",
    };
    let started = Instant::now();
    for i in 0..BARE_MESSAGES {
        let message_id = format!("<bare-{i}@example.org>");
        let outgoing = Outgoing {
            from_address: "alerts@example.org",
            display_name: "Alerts",
            to: &to,
            reply_to: None,
            subject: "Bare",
            text: "A message of the bare series.",
            html: None,
            headers: &[],
            message_id: &message_id,
            attachments: Vec::new(),
        };
        smtp::send(&server, &outgoing).await.expect("bare send");
    }
    let bare_rate = BARE_MESSAGES as f64 / started.elapsed().as_secs_f64();

    // 1. The bulk lane.
    for call in 0..BULK_MESSAGES / 1000 {
        let batch: Vec<Value> = (0..1000)
            .map(|i| {
                json!({"to": [format!("r{call}-{i}@example.org")], "subject": format!("Bulk {i}"),
                       "text": "A bulk message.", "key": format!("c{call}-{i}")})
            })
            .collect();
        let response = client
            .post(format!("{base}/api/mail/v1/enqueue"))
            .bearer_auth(&token)
            .json(&batch)
            .send()
            .await
            .expect("enqueue");
        assert_eq!(response.status(), 202, "enqueue");
    }
    let before = sink.received().len();
    let started = Instant::now();
    while sink.received().len() - before < BULK_MESSAGES {
        core.mail_delivery
            .drain_profile(profile, None)
            .await
            .expect("drain");
    }
    let bulk_elapsed = started.elapsed();
    let bulk_rate = BULK_MESSAGES as f64 / bulk_elapsed.as_secs_f64();

    // 2. The immediate lane, delivery woken in process.
    let mut wakeups = core
        .local_wakeups
        .as_ref()
        .expect("local wake-ups")
        .subscribe();
    let drainer = Arc::new(core.drainer());
    tokio::spawn(async move {
        while let Some(request) = wakeups.recv().await {
            let drainer = drainer.clone();
            tokio::spawn(async move {
                tokio::time::sleep(request.delay).await;
                drainer.run([request.target], None).await;
            });
        }
    });
    let mut latencies = Vec::with_capacity(IMMEDIATE_MESSAGES);
    for i in 0..IMMEDIATE_MESSAGES {
        let expected = sink.received().len() + 1;
        let started = Instant::now();
        let response = client
            .post(format!("{base}/api/mail/v1/send"))
            .bearer_auth(&token)
            .header("prefer", "wait=0")
            .json(
                &json!({"to": ["now@example.org"], "subject": format!("Now {i}"),
                          "text": "An immediate message."}),
            )
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 200, "send");
        sink.wait_for(expected, Duration::from_secs(30))
            .await
            .expect("delivered");
        latencies.push(ms(started.elapsed()));
    }
    latencies.sort_by(f64::total_cmp);

    println!();
    println!(
        "bare SMTP (client and peer, no database)     {bare_rate:>8.1} messages/s  ({BARE_MESSAGES} conversations)"
    );
    println!(
        "bulk lane at pace {PACE_PER_MINUTE}/min                  {bulk_rate:>8.1} messages/s  ({BULK_MESSAGES} in {:.1} s; pace ceiling 100.0/s, {:.0}% of it)",
        bulk_elapsed.as_secs_f64(),
        bulk_rate
    );
    println!(
        "immediate lane: send → 250                   p50 {:>6.2} ms  p99 {:>6.2} ms  ({IMMEDIATE_MESSAGES} messages)",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0)
    );
}
