//! Delivery (spec mail §6, scenarios 22–26, 30, 33, 35, 38): messages accepted over HTTP are
//! claimed from Postgres and spoken to a real SMTP peer on loopback that answers per recipient.

use std::time::Duration;

use base64::Engine;
use k2b_core::mail::delivery::{Job, Recovery};
use k2b_core::smtp_sink::{Reply, SmtpSink};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{MailSite, SENDER, message};

const WAIT: Duration = Duration::from_secs(20);

impl MailSite {
    /// An SMTP peer on loopback that profile `alerts` now delivers to (plain, with the
    /// profile's user and password).
    pub async fn with_sink(&self) -> SmtpSink {
        let sink = SmtpSink::start("127.0.0.1:0".parse().expect("address"))
            .await
            .expect("smtp peer");
        self.update_profile(
            "alerts",
            json!({"smtpHost": "127.0.0.1", "smtpPort": sink.addr.port(), "smtpSecure": false,
                   "smtpPassword": "s3cret-pass"}),
        )
        .await;
        sink
    }

    /// Sends one message as `app` (answered at once, queued) and returns its id.
    pub async fn queued(&self, app: &str, message: Value) -> Uuid {
        let (status, body) = self.send(app, message).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "queued", "{body}");
        body["id"].as_str().expect("id").parse().expect("uuid")
    }

    /// One delivery pass of an immediate message; how many attempts ended.
    pub async fn deliver(&self, id: Uuid) -> u64 {
        self.core
            .mail_delivery
            .run(Job::Message(id), None)
            .await
            .expect("delivery pass")
    }

    /// The stored row, with `retryInSeconds` (from the attempt's end to the next attempt).
    pub async fn row(&self, id: Uuid) -> Value {
        sqlx::query_scalar(
            "SELECT to_jsonb(m) || jsonb_build_object(
                    'retryInSeconds', extract(epoch FROM m.next_attempt_at - m.updated_at))
               FROM outgoing_mail.messages m WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&self.core.pool)
        .await
        .expect("row")
    }

    /// Makes a queued message's retry due now.
    pub async fn make_due(&self, id: Uuid) {
        sqlx::query("UPDATE outgoing_mail.messages SET next_attempt_at = now() WHERE id = $1")
            .bind(id)
            .execute(&self.core.pool)
            .await
            .expect("due");
    }

    pub async fn exec(&self, statement: &str, id: Uuid) {
        sqlx::query(sqlx::AssertSqlSafe(statement.to_string()))
            .bind(id)
            .execute(&self.core.pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

fn answer(code: u16, text: &str) -> Reply {
    Reply::new(code, text)
}

/// Scenario 35: 550 fails; 451 is retried and then sent; all RCPT 550 fails; one of two
/// rejected is sent with one failure.
#[tokio::test]
async fn smtp_answers_decide_between_sent_retry_and_failed() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;

    sink.reply_data([answer(550, "5.7.1 message refused")]);
    let refused = site
        .queued(SENDER, message("a@example.org", "Refused"))
        .await;
    assert_eq!(site.deliver(refused).await, 1);
    let row = site.row(refused).await;
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["error_code"], "smtp_failed");
    assert_eq!(row["error_message"], "550 5.7.1 message refused");
    assert_eq!(row["smtp_response"], "550 5.7.1 message refused");

    sink.reply_data([answer(451, "4.3.0 try later")]);
    let later = site.queued(SENDER, message("b@example.org", "Later")).await;
    site.deliver(later).await;
    let row = site.row(later).await;
    assert_eq!(row["status"], "queued", "{row}");
    assert_eq!(row["attempt_count"], 1);
    assert_eq!(row["error_message"], "451 4.3.0 try later");
    // Not due yet: another pass does nothing.
    assert_eq!(site.deliver(later).await, 0);
    site.make_due(later).await;
    site.deliver(later).await;
    let row = site.row(later).await;
    assert_eq!(row["status"], "sent", "{row}");
    assert_eq!(row["attempt_count"], 2);
    assert_eq!(row["error_code"], Value::Null);
    assert_eq!(row["error_message"], Value::Null);
    assert!(
        row["smtp_response"]
            .as_str()
            .is_some_and(|r| r.starts_with("250")),
        "{row}"
    );

    sink.reply_rcpt("x@example.org", [answer(550, "5.1.1 no such user")]);
    sink.reply_rcpt("y@example.org", [answer(550, "5.1.1 no such user")]);
    let nobody = site
        .queued(
            SENDER,
            json!({"to": ["x@example.org", "y@example.org"], "subject": "Nobody", "text": "t"}),
        )
        .await;
    site.deliver(nobody).await;
    let row = site.row(nobody).await;
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["failures"].as_array().map(Vec::len), Some(2), "{row}");

    sink.reply_rcpt("gone@example.org", [answer(550, "5.1.1 gone")]);
    let half = site
        .queued(
            SENDER,
            json!({"to": ["gone@example.org", "here@example.org"], "subject": "Half", "text": "t"}),
        )
        .await;
    site.deliver(half).await;
    let row = site.row(half).await;
    assert_eq!(row["status"], "sent", "{row}");
    let failures = row["failures"].as_array().expect("failures");
    assert_eq!(failures.len(), 1, "{row}");
    assert_eq!(failures[0]["recipient"], "gone@example.org");
    assert_eq!(failures[0]["reason"], "550 5.1.1 gone");
    assert!(failures[0]["at"].is_string());
    let delivered = sink.received();
    let last = delivered.last().expect("a message");
    assert_eq!(last.to, ["here@example.org"]);

    // Through the app's log: the record shows the outcome and the failure.
    let (_, listed) = site.list(SENDER, &format!("ids={half}")).await;
    assert_eq!(listed["items"][0]["status"], "sent", "{listed}");
    assert_eq!(
        listed["items"][0]["failures"][0]["recipient"],
        "gone@example.org"
    );
}

/// Scenario 23: three 451s queue the message again with attempts 1, 2, 3 and waits of 1, 2 and
/// 4 minutes; then 250 sends it.
#[tokio::test]
async fn transient_rejections_back_off_and_then_send() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    sink.reply_rcpt(
        "slow@example.org",
        [
            answer(451, "4.7.1 greylisted"),
            answer(451, "4.7.1 greylisted"),
            answer(451, "4.7.1 greylisted"),
        ],
    );
    let id = site
        .queued(SENDER, message("slow@example.org", "Greylisted"))
        .await;
    for (attempt, minutes) in [(1, 1.0), (2, 2.0), (3, 4.0)] {
        site.deliver(id).await;
        let row = site.row(id).await;
        assert_eq!(row["status"], "queued", "{row}");
        assert_eq!(row["attempt_count"], attempt, "{row}");
        assert_eq!(row["error_code"], "smtp_failed");
        let wait = row["retryInSeconds"].as_f64().expect("a retry time");
        assert!(
            (wait - minutes * 60.0).abs() < 1.0,
            "attempt {attempt}: {wait}"
        );
        site.make_due(id).await;
    }
    site.deliver(id).await;
    let row = site.row(id).await;
    assert_eq!(row["status"], "sent", "{row}");
    assert_eq!(row["attempt_count"], 4);
    assert_eq!(sink.received().len(), 1);
}

/// Scenario 33: one message with an attachment and HTML reaches the server once, from
/// `Inventory <alerts@example.org>`, script stripped, attachment intact; afterwards its
/// objects are gone and its refs null; one audit row, without the address.
#[tokio::test]
async fn a_message_goes_out_once_with_its_attachment_and_sender_name() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let sha = hex::encode(Sha256::digest(&bytes));
    let id = site
        .queued(
            SENDER,
            json!({
                "to": ["buyer@example.org"],
                "subject": "Stock report",
                "text": "See the attachment.",
                "html": "<p>See <b>the</b> attachment.</p><script>alert(1)</script>",
                "headers": {"X-App": "inventory"},
                "attachments": [{"filename": "stock.bin", "contentType": "application/octet-stream",
                                 "content": base64::engine::general_purpose::STANDARD.encode(&bytes)}],
            }),
        )
        .await;
    assert_eq!(site.objects().await.len(), 1);
    site.deliver(id).await;
    let received = sink.wait_for(1, WAIT).await.expect("delivered");
    assert_eq!(received.len(), 1);
    let mail = &received[0];
    assert_eq!(mail.from, "alerts@example.org");
    assert_eq!(
        mail.header("From").as_deref(),
        Some("Inventory <alerts@example.org>")
    );
    assert_eq!(mail.header("X-App").as_deref(), Some("inventory"));
    let row = site.row(id).await;
    assert_eq!(
        mail.header("Message-ID").as_deref(),
        row["message_id_header"].as_str()
    );
    assert!(!mail.data.contains("<script"), "{}", mail.data);
    assert!(mail.data.contains("<b>the</b>"));
    // The attachment part, decoded, is the bytes that were accepted.
    let part = mail
        .data
        .split("filename=\"stock.bin\"")
        .nth(1)
        .expect("the attachment part");
    let body = part.split("\r\n\r\n").nth(1).expect("its body");
    let encoded: String = body.lines().take_while(|l| !l.starts_with("--")).collect();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .expect("base64 part");
    assert_eq!(hex::encode(Sha256::digest(&decoded)), sha);
    assert_eq!(row["status"], "sent");
    assert_eq!(row["attachment_refs"], Value::Null);
    assert_eq!(row["attachments"][0]["sha256"], sha);
    assert_eq!(row["attachments"][0]["size"], bytes.len());
    assert!(
        site.objects().await.is_empty(),
        "objects deleted after delivery"
    );
    let audits = site.audit_rows("outgoing_mail.send").await;
    assert_eq!(audits.len(), 1);
    assert!(!audits[0].to_string().contains("buyer@example.org"));
    // The profile's password went to the server in AUTH and nowhere else.
    assert!(
        mail.auth
            .as_deref()
            .is_some_and(|a| a.contains("s3cret-pass"))
    );
    assert!(!row.to_string().contains("s3cret-pass"));
    assert!(!site.all_audit_text().await.contains("s3cret-pass"));
}

/// Scenario 30: a registered app that stopped declaring mail:send is cancelled, an app gone
/// from the registry still gets its mail sent, an app whose access is an empty selection is
/// cancelled before any SMTP, and a 550 fails with the server's answer.
#[tokio::test]
async fn delivery_rechecks_the_app_and_its_access() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;

    let undeclared = site.queued(SENDER, message("a@example.org", "One")).await;
    let mut conn = site.core.pool.acquire().await.expect("connection");
    k2b_core::registry::store::upsert(
        &mut conn,
        &super::entry(SENDER, &[]),
        Duration::from_secs(3600),
    )
    .await
    .expect("re-register");
    drop(conn);
    site.deliver(undeclared).await;
    let row = site.row(undeclared).await;
    assert_eq!(row["status"], "cancelled", "{row}");
    assert_eq!(row["error_code"], "profile_not_allowed");
    assert_eq!(
        row["error_message"],
        "The application no longer declares mail:send."
    );
    assert_eq!(sink.connections(), 0);

    let unregistered = site
        .queued(super::SOURCE, message("b@example.org", "Two"))
        .await;
    sqlx::query("DELETE FROM registry.apps WHERE app_id = $1")
        .bind(super::SOURCE)
        .execute(&site.core.pool)
        .await
        .expect("unregister");
    site.deliver(unregistered).await;
    assert_eq!(site.row(unregistered).await["status"], "sent");
    let sent = sink.received();
    assert_eq!(sent.len(), 1);
    // Without a registry entry the display name falls back to the app id.
    assert_eq!(
        sent[0].header("From").as_deref(),
        Some("source <alerts@example.org>")
    );

    let blocked = site
        .queued(super::OTHER, message("c@example.org", "Three"))
        .await;
    let (status, body) = site
        .admin(
            Method::PUT,
            &format!("/apps/{}", super::OTHER),
            Some(json!({"mode": "selected", "profiles": []})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let connections = sink.connections();
    site.deliver(blocked).await;
    let row = site.row(blocked).await;
    assert_eq!(row["status"], "cancelled", "{row}");
    assert_eq!(row["error_code"], "profile_not_allowed");
    assert_eq!(
        sink.connections(),
        connections,
        "no SMTP for a cancelled message"
    );

    sink.reply_rcpt("d@example.org", [answer(550, "5.1.1 unknown user")]);
    let refused = site
        .queued(super::READER, message("d@example.org", "Four"))
        .await;
    site.deliver(refused).await;
    let row = site.row(refused).await;
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["error_message"], "550 5.1.1 unknown user");
}

/// Scenario 38: a lost attachment fails before SMTP; a claim left `sending` by a dead worker
/// is queued again by recovery and sent.
#[tokio::test]
async fn lost_attachments_fail_and_stale_claims_are_recovered() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let id = site
        .queued(
            SENDER,
            json!({"to": ["a@example.org"], "subject": "Lost", "text": "t",
                   "attachments": [{"filename": "a.txt", "contentType": "text/plain",
                                    "content": base64::engine::general_purpose::STANDARD.encode("abc")}]}),
        )
        .await;
    for key in site.objects().await {
        site.s3
            .delete_object()
            .bucket(&site.bucket)
            .key(key)
            .send()
            .await
            .expect("delete object");
    }
    site.deliver(id).await;
    let row = site.row(id).await;
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["error_code"], "attachment_lost");
    assert_eq!(sink.connections(), 0, "no SMTP for a lost attachment");

    // A changed object (same key, other bytes) is lost too.
    let changed = site
        .queued(
            SENDER,
            json!({"to": ["a@example.org"], "subject": "Changed", "text": "t",
                   "attachments": [{"filename": "a.txt", "contentType": "text/plain",
                                    "content": base64::engine::general_purpose::STANDARD.encode("abc")}]}),
        )
        .await;
    let key = site.objects().await.pop().expect("object");
    site.s3
        .put_object()
        .bucket(&site.bucket)
        .key(&key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"abd"))
        .send()
        .await
        .expect("overwrite");
    site.deliver(changed).await;
    assert_eq!(site.row(changed).await["error_code"], "attachment_lost");

    let stale = site.queued(SENDER, message("b@example.org", "Stale")).await;
    site.exec(
        "UPDATE outgoing_mail.messages SET status = 'sending', attempt_count = 1,
                updated_at = now() - interval '6 minutes' WHERE id = $1",
        stale,
    )
    .await;
    assert_eq!(site.deliver(stale).await, 0, "a sending row is not claimed");
    let found: Recovery = site.core.mail_delivery.recover().await.expect("recovery");
    assert_eq!(found.requeued, 1);
    assert_eq!(found.messages, [stale]);
    site.core.mail_delivery.deliver_found(&found, None).await;
    let row = site.row(stale).await;
    assert_eq!(row["status"], "sent", "{row}");
    assert_eq!(row["attempt_count"], 2);
}

/// Scenario 38: without a worker, `send` answers queued when its wait ends; with one running
/// while it waits, the settle signal answers it the moment the message is sent.
#[tokio::test]
async fn send_waits_for_the_outcome_within_its_limit() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let send = |subject: &'static str, wait: u64| {
        let request = site
            .client
            .post(format!("{}/api/mail/v1/send", site.base))
            .bearer_auth(&site.tokens[SENDER])
            .header("prefer", format!("wait={wait}"))
            .json(&message("a@example.org", subject));
        async move {
            let started = std::time::Instant::now();
            let response = request.send().await.expect("send");
            let body: Value = response.json().await.expect("json");
            (started.elapsed(), body)
        }
    };
    let (took, body) = send("Nobody delivers", 2).await;
    assert_eq!(body["status"], "queued", "{body}");
    assert!(took >= Duration::from_secs(2), "{took:?}");
    let id: Uuid = body["id"].as_str().expect("id").parse().expect("uuid");
    // Once a worker runs, the message goes out once.
    site.deliver(id).await;
    assert_eq!(sink.received().len(), 1);
    assert_eq!(site.deliver(id).await, 0);

    // A worker that starts while the call waits: the answer is the sent record, well before
    // the 12 s the call would wait at most.
    let worker = {
        let delivery = site.core.mail_delivery.clone();
        let pool = site.core.pool.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let due: Vec<Uuid> = sqlx::query_scalar(
                    "SELECT id FROM outgoing_mail.messages WHERE status = 'queued'",
                )
                .fetch_all(&pool)
                .await
                .expect("queued");
                if let Some(id) = due.first() {
                    delivery.run(Job::Message(*id), None).await.expect("pass");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (took, body) = send("Delivered while waiting", 12).await;
    worker.await.expect("worker");
    assert_eq!(body["status"], "sent", "{body}");
    assert!(
        took < Duration::from_secs(6),
        "answered by the settle signal, not the poll: {took:?}"
    );
}

/// Scenario 22: two claims at an open gate: one takes the slot and the message, the slot moves
/// 1000 ms past the clock at pace 60; then 120 keyed messages all go out once, each with its
/// own Message-ID.
#[tokio::test]
async fn the_bulk_gate_grants_one_claim_per_slot_and_every_message_goes_once() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let batch: Vec<Value> = (0..120)
        .map(|i| {
            json!({"to": [format!("r{i}@example.org")], "subject": format!("Bulk {i}"),
                   "text": "t", "key": format!("k{i}")})
        })
        .collect();
    let (status, body) = site.enqueue(SENDER, Value::Array(batch)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let profile = site.profile_id("alerts").await;
    let delivery = &site.core.mail_delivery;
    let (a, b) = tokio::join!(delivery.claim_bulk(profile), delivery.claim_bulk(profile));
    let claims = [a.expect("claim"), b.expect("claim")].map(|c| c.expect("profile"));
    let granted: Vec<_> = claims.iter().filter(|c| c.granted).collect();
    assert_eq!(granted.len(), 1, "{claims:?}");
    let winner = granted[0];
    assert_eq!((winner.gate - winner.clock).num_milliseconds(), 1000);
    let loser = claims.iter().find(|c| !c.granted).expect("a refused claim");
    assert!(loser.message.is_none());
    let claimed = winner.message.clone().expect("a message with the slot");
    let ending = delivery.attempt(&claimed).await;
    delivery.finish(&claimed, ending).await.expect("finish");

    site.update_profile("alerts", json!({"pacePerMinute": 6000}))
        .await;
    // The gate is a second ahead; the drain waits for it and then sends the rest.
    delivery.drain_profile(profile, None).await.expect("drain");
    let received = sink.wait_for(120, WAIT).await.expect("all delivered");
    assert_eq!(received.len(), 120);
    let mut ids: Vec<String> = received
        .iter()
        .map(|m| m.header("Message-ID").expect("message id"))
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 120, "distinct Message-IDs, none sent twice");
    let sent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outgoing_mail.messages WHERE status = 'sent' AND attempt_count = 1",
    )
    .fetch_one(&site.core.pool)
    .await
    .expect("count");
    assert_eq!(sent, 120);
}

/// Scenario 24: an expired bulk row whose retry is an hour away is neither claimable nor due;
/// recovery fails it with its last answer, attempts unchanged, gate untouched.
#[tokio::test]
async fn recovery_fails_expired_bulk_rows_without_touching_the_gate() {
    let site = MailSite::start().await;
    let _sink = site.with_sink().await;
    site.queue_bulk_rows(SENDER, "alerts", 1).await;
    sqlx::query(
        "UPDATE outgoing_mail.messages SET deadline_at = now() - interval '1 second',
                next_attempt_at = now() + interval '1 hour', error_code = 'smtp_failed',
                error_message = '451 4.7.1 later'",
    )
    .execute(&site.core.pool)
    .await
    .expect("expire");
    let profile = site.profile_id("alerts").await;
    let delivery = &site.core.mail_delivery;
    let claim = delivery
        .claim_bulk(profile)
        .await
        .expect("claim")
        .expect("profile");
    assert!(claim.message.is_none(), "not claimable");
    assert_eq!(delivery.continuation(profile).await.expect("due"), None);
    let gate = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT next_bulk_slot_at FROM outgoing_mail.profiles WHERE key = 'alerts'",
        )
        .fetch_one(&pool)
        .await
        .expect("gate")
    };
    let before = gate(site.core.pool.clone()).await;
    let found = delivery.recover().await.expect("recovery");
    assert_eq!(found.expired, 1);
    assert!(found.profiles.is_empty());
    let row: Value = sqlx::query_scalar("SELECT to_jsonb(m) FROM outgoing_mail.messages m")
        .fetch_one(&site.core.pool)
        .await
        .expect("row");
    assert_eq!(row["status"], "failed");
    assert_eq!(row["error_message"], "451 4.7.1 later");
    assert_eq!(row["attempt_count"], 0);
    assert_eq!(gate(site.core.pool.clone()).await, before);
}

/// Scenario 25: a due retry goes before mail that came later; a deleted profile cancels its
/// queued and stale sending bulk rows and their objects go.
#[tokio::test]
async fn due_retries_go_first_and_a_deleted_profile_cancels_its_bulk_rows() {
    let site = MailSite::start().await;
    let _sink = site.with_sink().await;
    site.queue_bulk_rows(SENDER, "alerts", 2).await;
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outgoing_mail.messages ORDER BY id")
        .fetch_all(&site.core.pool)
        .await
        .expect("ids");
    let (retry, fresh) = (ids[0], ids[1]);
    site.exec(
        "UPDATE outgoing_mail.messages SET created_at = now() - interval '10 minutes',
                next_attempt_at = now() - interval '2 minutes', attempt_count = 1 WHERE id = $1",
        retry,
    )
    .await;
    site.exec(
        "UPDATE outgoing_mail.messages SET created_at = now() - interval '1 minute' WHERE id = $1",
        fresh,
    )
    .await;
    let profile = site.profile_id("alerts").await;
    let claim = site
        .core
        .mail_delivery
        .claim_bulk(profile)
        .await
        .expect("claim")
        .expect("profile");
    assert_eq!(claim.message.expect("claimed").id, retry);

    // A second profile's bulk rows with attachments; one is stuck in `sending`.
    let (status, body) = site
        .admin(
            Method::PUT,
            "/profiles/second",
            Some(super::profile_body("second@example.org")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = site
        .admin(
            Method::PUT,
            &format!("/apps/{SENDER}"),
            Some(json!({"mode": "selected", "profiles": ["alerts", "second"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let attachment = json!([{"filename": "a.txt", "contentType": "text/plain",
                            "content": base64::engine::general_purpose::STANDARD.encode("abc")}]);
    let (status, body) = site
        .enqueue(
            SENDER,
            json!([
                {"to": ["a@example.org"], "subject": "S1", "text": "t", "profile": "second",
                 "attachments": attachment},
                {"to": ["b@example.org"], "subject": "S2", "text": "t", "profile": "second",
                 "attachments": attachment},
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(site.objects().await.len(), 2);
    let second: Vec<Uuid> = body["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("id").parse().expect("uuid"))
        .collect();
    site.exec(
        "UPDATE outgoing_mail.messages SET status = 'sending', attempt_count = 1,
                updated_at = now() - interval '6 minutes' WHERE id = $1",
        second[0],
    )
    .await;
    let (status, body) = site.admin(Method::DELETE, "/profiles/second", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let found = site.core.mail_delivery.recover().await.expect("recovery");
    assert_eq!(found.requeued, 1);
    assert_eq!(found.cancelled, 2);
    for id in second {
        let row = site.row(id).await;
        assert_eq!(row["status"], "cancelled", "{row}");
        assert_eq!(row["error_code"], "profile_removed");
        assert_eq!(row["attachment_refs"], Value::Null);
    }
    assert!(site.objects().await.is_empty(), "objects deleted");
}

/// Scenario 26: a claim waiting behind an acceptance's share lock on the profile is granted
/// once it is released; at pace 6 the slot moves 10 s; the next claim gets nothing.
#[tokio::test]
async fn a_claim_waits_for_the_profile_lock_and_the_slot_is_ten_seconds_at_pace_six() {
    let site = MailSite::start().await;
    let _sink = site.with_sink().await;
    site.update_profile("alerts", json!({"pacePerMinute": 6}))
        .await;
    site.queue_bulk_rows(SENDER, "alerts", 2).await;
    let profile = site.profile_id("alerts").await;
    let mut holder = site.core.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM outgoing_mail.profiles WHERE id = $1 FOR SHARE")
        .bind(profile)
        .execute(&mut *holder)
        .await
        .expect("share lock");
    let delivery = site.core.mail_delivery.clone();
    let claim = tokio::spawn(async move { delivery.claim_bulk(profile).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!claim.is_finished(), "the claim waits for the lock");
    holder.commit().await.expect("release");
    let granted = claim.await.expect("task").expect("claim").expect("profile");
    assert!(granted.granted);
    assert!(granted.message.is_some());
    assert_eq!((granted.gate - granted.clock).num_milliseconds(), 10_000);
    let next = site
        .core
        .mail_delivery
        .claim_bulk(profile)
        .await
        .expect("claim")
        .expect("profile");
    assert!(!next.granted);
    assert!(next.message.is_none());
    assert_eq!(next.gate, granted.gate, "a refused claim leaves the gate");
}

/// The SMTP password never reaches a stored answer: a server that echoes the credentials in
/// its refusal has them redacted.
#[tokio::test]
async fn credentials_echoed_by_the_server_are_redacted() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let token = base64::engine::general_purpose::STANDARD.encode("\0mailer\0s3cret-pass");
    sink.reply_data([answer(
        554,
        &format!("5.7.0 rejected for mailer/s3cret-pass ({token})"),
    )]);
    let id = site.queued(SENDER, message("a@example.org", "Echo")).await;
    site.deliver(id).await;
    let row = site.row(id).await;
    assert_eq!(row["status"], "failed", "{row}");
    let text = row.to_string();
    assert!(!text.contains("s3cret-pass"), "{text}");
    assert!(!text.contains(&token), "{text}");
    assert!(text.contains("[REDACTED]"), "{text}");
}

/// The administrators' test send (§8): audited first, the mail goes out; a refusal answers
/// `smtp_failed` 502 with the redacted answer.
#[tokio::test]
async fn an_administrator_tests_a_profile() {
    let site = MailSite::start().await;
    let sink = site.with_sink().await;
    let (status, body) = site
        .admin(
            Method::POST,
            "/profiles/alerts/test",
            Some(json!({"recipient": "ops@example.org"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"ok": true}));
    let received = sink.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].to, ["ops@example.org"]);
    assert_eq!(site.audit_rows("outgoing_mail.profile.test").await.len(), 1);

    sink.reply_rcpt(
        "ops@example.org",
        [answer(550, "5.1.1 mailer s3cret-pass unknown")],
    );
    let (status, body) = site
        .admin(
            Method::POST,
            "/profiles/alerts/test",
            Some(json!({"recipient": "ops@example.org"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["code"], "smtp_failed");
    assert!(!body.to_string().contains("s3cret-pass"), "{body}");
    assert_eq!(site.audit_rows("outgoing_mail.profile.test").await.len(), 2);

    let (status, _) = site
        .admin(
            Method::POST,
            "/profiles/alerts/test",
            Some(json!({"recipient": "not an address"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = site
        .admin(
            Method::POST,
            "/profiles/nothing/test",
            Some(json!({"recipient": "ops@example.org"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
