//! Acceptance when the database connection fails at the worst moment: the reply to COMMIT is
//! lost, and perhaps the re-read that would tell the outcome fails too (scenarios 14 and 32);
//! and the constant number of advisory locks a large batch takes (scenario 32).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k2b_tests::pgfault::Fault;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{MailSite, SENDER, message};

/// The audit action every acceptance writes in its own transaction.
const SEND_ACTION: &[u8] = b"outgoing_mail.send";

/// A keyed message with one small inline attachment.
fn keyed_with_attachment(to: &str, key: &str) -> Value {
    let mut message = message(to, key);
    message["key"] = json!(key);
    message["attachments"] = json!([{
        "filename": "a.txt",
        "contentType": "text/plain",
        "content": "aGVsbG8gd29ybGQ=",
    }]);
    message
}

/// The reply to the COMMIT of the acceptance transaction (the one that wrote the audit row).
fn lost_commit() -> Fault {
    Fault::lose_reply(b"COMMIT").after(SEND_ACTION)
}

async fn row_of_key(site: &MailSite, key: &str) -> (Uuid, Option<Uuid>, Value) {
    sqlx::query_as(
        "SELECT id, batch_id, coalesce(attachment_refs, 'null') FROM outgoing_mail.messages
         WHERE app_id = $1 AND idempotency_key = $2",
    )
    .bind(SENDER)
    .bind(key)
    .fetch_one(&site.core.pool)
    .await
    .unwrap_or_else(|e| panic!("the row of {key}: {e}"))
}

async fn send_outcomes(site: &MailSite) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT outcome::text FROM audit.events WHERE action = 'outgoing_mail.send' ORDER BY 1",
    )
    .fetch_all(&site.core.pool)
    .await
    .expect("audit outcomes")
}

fn ids_of(body: &Value) -> Vec<Uuid> {
    body["ids"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(|id| id.as_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_batch_whose_reply_to_commit_is_lost_is_accepted_all_the_same() {
    let site = MailSite::start().await;
    let (proxy, base) = site.behind_faults().await;
    proxy.arm([lost_commit()]);
    let batch = json!([
        keyed_with_attachment("ann@example.org", "first"),
        keyed_with_attachment("bob@example.org", "second"),
    ]);
    let (status, body) = site
        .app_at(&base, SENDER, Method::POST, "/enqueue", Some(batch.clone()))
        .await;
    assert_eq!(proxy.fired(), 1, "the reply to COMMIT was lost");
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let ids = ids_of(&body);
    let (first, first_batch, refs) = row_of_key(&site, "first").await;
    let (second, _, _) = row_of_key(&site, "second").await;
    assert_eq!(ids, vec![first, second]);
    assert_eq!(
        first_batch.map(|b| b.to_string()),
        body["batchId"].as_str().map(str::to_string)
    );
    assert_eq!(refs.as_array().map(Vec::len), Some(1), "{refs}");
    assert_eq!(site.objects().await.len(), 2, "both attachments are kept");
    assert_eq!(send_outcomes(&site).await, ["allowed"]);
    // The same keys return the same batch.
    let (status, again) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again, body);
    assert_eq!(site.message_count().await, 2);
}

#[tokio::test]
async fn a_batch_whose_outcome_cannot_be_told_keeps_its_objects_and_its_keys_return_it() {
    let site = MailSite::start().await;
    let (proxy, base) = site.behind_faults().await;
    // The re-read waits for the call's lock first: that is where it fails.
    proxy.arm([lost_commit(), Fault::cut(b"outgoing_mail.call")]);
    let batch = json!([keyed_with_attachment("ann@example.org", "unknown-commit")]);
    let (status, body) = site
        .app_at(&base, SENDER, Method::POST, "/enqueue", Some(batch.clone()))
        .await;
    assert_eq!(proxy.fired(), 2, "the reply and the re-read were lost");
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["code"], "mail_unavailable");
    assert_eq!(
        body["message"],
        "Outgoing mail acceptance could not be determined. Retry with the same keys."
    );
    let (id, batch_id, refs) = row_of_key(&site, "unknown-commit").await;
    assert_eq!(refs.as_array().map(Vec::len), Some(1), "{refs}");
    assert_eq!(site.objects().await.len(), 1, "the attachment stays");
    assert_eq!(send_outcomes(&site).await, ["allowed", "denied"]);
    let (status, again) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(ids_of(&again), vec![id]);
    assert_eq!(
        again["batchId"].as_str().map(str::to_string),
        batch_id.map(|b| b.to_string())
    );
    assert_eq!(site.message_count().await, 1);
    assert_eq!(site.objects().await.len(), 1);
}

#[tokio::test]
async fn a_send_whose_reply_to_commit_is_lost_answers_its_stored_message() {
    let site = MailSite::start().await;
    let (proxy, base) = site.behind_faults().await;
    proxy.arm([lost_commit()]);
    let (status, record) = site
        .app_at(
            &base,
            SENDER,
            Method::POST,
            "/send",
            Some(keyed_with_attachment("ann@example.org", "lost-send")),
        )
        .await;
    assert_eq!(proxy.fired(), 1, "the reply to COMMIT was lost");
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "queued");
    let (id, _, _) = row_of_key(&site, "lost-send").await;
    assert_eq!(record["id"], json!(id));
    assert_eq!(site.objects().await.len(), 1);
    assert_eq!(send_outcomes(&site).await, ["allowed"]);
}

#[tokio::test]
async fn a_send_whose_outcome_cannot_be_told_answers_retry_with_the_same_keys() {
    let site = MailSite::start().await;
    let (proxy, base) = site.behind_faults().await;
    // The re-read looks the key up: that is where it fails.
    proxy.arm([lost_commit(), Fault::cut(b"unknown-send")]);
    let message = keyed_with_attachment("ann@example.org", "unknown-send");
    let (status, body) = site
        .app_at(&base, SENDER, Method::POST, "/send", Some(message.clone()))
        .await;
    assert_eq!(proxy.fired(), 2, "the reply and the re-read were lost");
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["code"], "mail_unavailable");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("Retry with the same keys.")),
        "{body}"
    );
    assert_eq!(site.objects().await.len(), 1, "the attachment stays");
    let (id, _, _) = row_of_key(&site, "unknown-send").await;
    let (status, record) = site.send(SENDER, message).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["id"], json!(id));
    assert_eq!(site.message_count().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_1000_keys_holds_a_constant_number_of_advisory_locks() {
    let site = MailSite::start().await;
    let done = Arc::new(AtomicBool::new(false));
    let pool = site.core.pool.clone();
    let watching = done.clone();
    let watcher = tokio::spawn(async move {
        let (mut most, mut samples) = (0_i64, 0_u32);
        while !watching.load(Ordering::SeqCst) {
            let held: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(&pool)
            .await
            .expect("advisory locks");
            most = most.max(held);
            samples += 1;
        }
        (most, samples)
    });
    let batch: Vec<Value> = (0..1000)
        .map(|i| {
            let mut message = message(&format!("r{i}@example.org"), &format!("M{i}"));
            message["key"] = json!(format!("lock-{i}"));
            message
        })
        .collect();
    let (status, body) = site.enqueue(SENDER, Value::Array(batch)).await;
    done.store(true, Ordering::SeqCst);
    let (most, samples) = watcher.await.expect("watcher");
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(samples > 1, "the locks were sampled {samples} times");
    assert!(most > 0, "no advisory lock was seen in {samples} samples");
    assert!(most <= 10, "{most} advisory locks held at once");
}
