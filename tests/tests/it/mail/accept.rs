//! Acceptance over HTTP: send and enqueue (scenarios 13–14, 18, 27–29, 32, 36).

use std::time::{Duration, Instant};

use k2b_core::mail::{message_wakeup, profile_wakeup};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Answer, MailSite, OTHER, SENDER, SILENT, SOURCE, message, profile_body};

/// The audit action of every acceptance call.
const SEND_ACTION: &str = "outgoing_mail.send";
/// What every failure that is not a domain error answers with.
const UNAVAILABLE: &str = "Outgoing mail storage is unavailable.";

#[tokio::test]
async fn a_sent_message_is_queued_listed_and_woken() {
    let mut site = MailSite::start().await;
    let (status, record) = site.send(SENDER, message("ann@example.org", "Hello")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "queued");
    assert_eq!(record["appId"], SENDER);
    assert_eq!(record["profile"], "alerts");
    assert_eq!(record["text"], "Body of Hello");
    let id = record["id"].as_str().expect("id").to_string();
    // The Message-ID is fixed at acceptance: the id at the domain of the profile's address.
    let header: String = sqlx::query_scalar(
        "SELECT message_id_header FROM outgoing_mail.messages WHERE id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&site.core.pool)
    .await
    .expect("message id header");
    assert_eq!(header, format!("<{id}@example.org>"));
    let wake = site.wakeups.recv().await.expect("a wake-up");
    assert_eq!(
        wake.target,
        k2b_core::mail::message_wakeup(id.parse().expect("uuid"))
    );
    let (status, page) = site.list(SENDER, "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 1);
    assert_eq!(page["items"][0]["id"], json!(id));
    let (status, _) = site.app(SENDER, Method::GET, "/profiles", None).await;
    assert_eq!(status, StatusCode::OK);
}

/// A message with a key.
fn keyed(to: &str, subject: &str, key: &str) -> Value {
    let mut message = message(to, subject);
    message["key"] = json!(key);
    message
}

/// A message to several recipients.
fn to_many(recipients: &[&str], subject: &str) -> Value {
    json!({"to": recipients, "subject": subject, "text": format!("Body of {subject}")})
}

/// A message carrying one small inline attachment.
fn with_attachment(to: &str, subject: &str) -> Value {
    let mut message = message(to, subject);
    message["attachments"] = json!([{
        "filename": "a.txt",
        "contentType": "text/plain",
        "content": "aGVsbG8gd29ybGQ=",
    }]);
    message
}

fn uuid_of(value: &Value) -> Uuid {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a uuid: {value}"))
}

/// Asserts an error answer `{code, message, status}` and returns its body.
fn assert_error(answer: &Answer, status: StatusCode, code: &str) -> Value {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body.clone()
}

/// Asserts `quota_exceeded` with its figures.
fn assert_quota(answer: &Answer, limit: i64, used: i64, requested: i64) {
    let body = assert_error(answer, StatusCode::BAD_REQUEST, "quota_exceeded");
    assert_eq!(body["limit"], limit, "{body}");
    assert_eq!(body["used"], used, "{body}");
    assert_eq!(body["requested"], requested, "{body}");
}

async fn batch_of(site: &MailSite, batch: Uuid) -> Vec<Uuid> {
    sqlx::query_scalar("SELECT id FROM outgoing_mail.messages WHERE batch_id = $1 ORDER BY id")
        .bind(batch)
        .fetch_all(&site.core.pool)
        .await
        .expect("batch rows")
}

async fn batch_id_of(site: &MailSite, id: Uuid) -> Option<Uuid> {
    sqlx::query_scalar("SELECT batch_id FROM outgoing_mail.messages WHERE id = $1")
        .bind(id)
        .fetch_one(&site.core.pool)
        .await
        .expect("row")
}

async fn used_last_24h(site: &MailSite, app: &str) -> Value {
    let (status, body) = site.app(app, Method::GET, "/profiles", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["items"][0]["key"], "alerts", "{body}");
    body["items"][0]["quota"]["usedLast24h"].clone()
}

fn status_counts(answers: &[Answer]) -> (usize, usize) {
    let ok = answers.iter().filter(|(s, _)| s.is_success()).count();
    (ok, answers.len() - ok)
}

// Scenario 13: identity and permissions.

#[tokio::test]
async fn requests_without_a_valid_credential_are_unauthorized_and_leave_no_trace() {
    let site = MailSite::start().await;
    let calls = [
        (
            Method::POST,
            "/send",
            Some(message("ann@example.org", "Hi")),
        ),
        (
            Method::POST,
            "/enqueue",
            Some(json!([message("ann@example.org", "Hi")])),
        ),
        (Method::GET, "/messages", None),
        (Method::GET, "/readable-apps", None),
        (Method::GET, "/profiles", None),
    ];
    for (method, path, body) in calls {
        let url = format!("{}/api/mail/v1{path}", site.base);
        for token in [
            None,
            Some("cld_not-a-credential"),
            Some("not-even-a-cld-token"),
        ] {
            let mut request = site.client.request(method.clone(), &url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = &body {
                request = request.json(body);
            }
            let response = request.send().await.expect("request");
            assert_eq!(
                response.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}"
            );
        }
    }
    assert_eq!(site.message_count().await, 0);
    // A denied audit needs a bound app: nobody was bound here.
    assert!(site.audit_rows(SEND_ACTION).await.is_empty());
}

#[tokio::test]
async fn an_app_declaring_nothing_is_refused_everywhere_and_its_send_is_audited_without_addresses()
{
    let site = MailSite::start().await;
    let address = "secret.person@example.org";
    let refused = site.send(SILENT, message(address, "Hi")).await;
    let body = assert_error(&refused, StatusCode::FORBIDDEN, "mail_not_declared");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("mail:send")),
        "{body}"
    );
    let audits = site.audit_rows(SEND_ACTION).await;
    assert_eq!(audits.len(), 1, "{audits:?}");
    let audit = &audits[0];
    assert_eq!(audit["outcome"], "denied", "{audit}");
    assert_eq!(audit["metadata"]["app"], SILENT, "{audit}");
    assert_eq!(audit["metadata"]["recipientCount"], 1, "{audit}");
    assert!(!audit.to_string().contains(address), "{audit}");

    let enqueue = site.enqueue(SILENT, json!([message(address, "Hi")])).await;
    assert_error(&enqueue, StatusCode::FORBIDDEN, "mail_not_declared");
    let profiles = site.app(SILENT, Method::GET, "/profiles", None).await;
    assert_error(&profiles, StatusCode::FORBIDDEN, "mail_not_declared");
    // Reading needs either permission, and the answer says so.
    for path in ["/messages", "/readable-apps"] {
        let answer = site.app(SILENT, Method::GET, path, None).await;
        let body = assert_error(&answer, StatusCode::FORBIDDEN, "mail_not_declared");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("mail:read")),
            "{body}"
        );
    }
    assert_eq!(site.message_count().await, 0);
    assert!(!site.all_audit_text().await.contains(address));
    // A sender gets through the same calls.
    assert_eq!(
        site.app(SENDER, Method::GET, "/readable-apps", None)
            .await
            .0,
        StatusCode::OK
    );
}

// Scenario 14: errors keep their shape and status.

#[tokio::test]
async fn a_page_of_more_than_100_is_bad_input() {
    let site = MailSite::start().await;
    // Refused before the log is read: with the table locked, the answer still comes.
    let mut lock = site.core.pool.begin().await.expect("lock");
    sqlx::query("LOCK TABLE outgoing_mail.messages IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock table");
    let refused = tokio::time::timeout(Duration::from_secs(20), site.list(SENDER, "perPage=101"))
        .await
        .expect("answered without reading the table");
    lock.rollback().await.expect("unlock");
    let body = assert_error(&refused, StatusCode::BAD_REQUEST, "bad_input");
    assert_eq!(body["message"], "Invalid outgoing mail filter or page.");
    let (status, page) = site.list(SENDER, "perPage=100").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["perPage"], 100);
}

#[tokio::test]
async fn a_bcc_header_is_bad_input_and_stores_nothing() {
    let site = MailSite::start().await;
    let mut hidden = message("ann@example.org", "Hi");
    hidden["headers"] = json!({"Bcc": "spy@example.org"});
    let refused = site.send(SENDER, hidden.clone()).await;
    let body = assert_error(&refused, StatusCode::BAD_REQUEST, "bad_input");
    assert_eq!(body["message"], "Invalid outgoing mail message.");
    assert_eq!(site.message_count().await, 0);
    hidden["headers"] = json!({"X-App": "inventory"});
    let (status, record) = site.send(SENDER, hidden).await;
    assert_eq!(status, StatusCode::OK, "{record}");
}

#[tokio::test]
async fn quota_exceeded_carries_the_limit_the_usage_and_the_request() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"dailyRecipientLimit": 3}))
        .await;
    let two = ["a@example.org", "b@example.org"];
    let (status, record) = site.send(SENDER, to_many(&two, "First")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_quota(&site.send(SENDER, to_many(&two, "Second")).await, 3, 2, 2);
    assert_quota(
        &site.enqueue(SENDER, json!([to_many(&two, "Third")])).await,
        3,
        2,
        2,
    );
    assert_eq!(site.message_count().await, 1);
}

#[tokio::test]
async fn a_full_bulk_backlog_is_409_and_leaves_the_immediate_lane_open() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"pacePerMinute": 1}))
        .await;
    site.queue_bulk_rows(OTHER, "alerts", 1440).await;
    let refused = site
        .enqueue(SENDER, json!([message("ann@example.org", "Hi")]))
        .await;
    let body = assert_error(&refused, StatusCode::CONFLICT, "backlog_full");
    assert_eq!(body["status"], 409);
    assert_eq!(site.message_count().await, 1440);
    let (status, record) = site.send(SENDER, message("ann@example.org", "Now")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
}

// Scenarios 18 and 28: batch ids and known keys.

#[tokio::test]
async fn a_repeated_batch_returns_the_same_batch_id_and_ids() {
    let site = MailSite::start().await;
    let batch = json!([
        keyed("ann@example.org", "One", "k1"),
        keyed("bob@example.org", "Two", "k2"),
    ]);
    let (status, first) = site.enqueue(SENDER, batch.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["ids"].as_array().map(Vec::len), Some(2), "{first}");
    let (status, again) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again, first);
    assert_eq!(site.message_count().await, 2);
    let batch_id = uuid_of(&first["batchId"]);
    let mut ids: Vec<Uuid> = first["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(uuid_of)
        .collect();
    ids.sort();
    assert_eq!(batch_of(&site, batch_id).await, ids);
    let audits = site.audit_rows(SEND_ACTION).await;
    assert_eq!(audits.len(), 2, "an audit per call: {audits:?}");
    assert!(
        audits.iter().all(|a| a["outcome"] == "allowed"),
        "{audits:?}"
    );
    let text = site.all_audit_text().await;
    assert!(!text.contains("ann@example.org") && !text.contains("bob@example.org"));
}

#[tokio::test]
async fn a_partly_known_batch_gets_a_new_batch_id_holding_only_its_new_row() {
    let site = MailSite::start().await;
    let (status, first) = site
        .enqueue(
            SENDER,
            json!([
                keyed("ann@example.org", "One", "k1"),
                keyed("bob@example.org", "Two", "k2"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let first_batch = uuid_of(&first["batchId"]);
    let (status, again) = site
        .enqueue(SENDER, json!([keyed("ann@example.org", "One", "k1")]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    // All known, one earlier batch: that batch, this call's one id.
    assert_eq!(uuid_of(&again["batchId"]), first_batch);
    assert_eq!(again["ids"], json!([first["ids"][0]]));
    let (status, mixed) = site
        .enqueue(
            SENDER,
            json!([
                keyed("ann@example.org", "One", "k1"),
                keyed("cy@example.org", "Three", "k3"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{mixed}");
    let mixed_batch = uuid_of(&mixed["batchId"]);
    assert_ne!(mixed_batch, first_batch);
    assert_eq!(mixed["ids"][0], first["ids"][0], "the old id at its index");
    let new_id = uuid_of(&mixed["ids"][1]);
    assert_ne!(mixed["ids"][1], first["ids"][0]);
    assert_ne!(mixed["ids"][1], first["ids"][1]);
    assert_eq!(batch_of(&site, mixed_batch).await, vec![new_id]);
    assert_eq!(
        batch_id_of(&site, uuid_of(&first["ids"][0])).await,
        Some(first_batch)
    );
    assert_eq!(batch_of(&site, first_batch).await.len(), 2);
    assert_eq!(site.message_count().await, 3);
    let audits = site.audit_rows(SEND_ACTION).await;
    assert_eq!(audits.len(), 3, "an audit per call: {audits:?}");
    let text = site.all_audit_text().await;
    for address in ["ann@example.org", "bob@example.org", "cy@example.org"] {
        assert!(!text.contains(address), "{address} in the audit");
    }
}

#[tokio::test]
async fn known_keys_from_different_batches_or_a_send_get_a_new_batch_id_and_no_rows() {
    let site = MailSite::start().await;
    let (_, one) = site
        .enqueue(SENDER, json!([keyed("a@example.org", "A", "k1")]))
        .await;
    let (_, two) = site
        .enqueue(SENDER, json!([keyed("b@example.org", "B", "k2")]))
        .await;
    let (status, both) = site
        .enqueue(
            SENDER,
            json!([
                keyed("a@example.org", "A", "k1"),
                keyed("b@example.org", "B", "k2")
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{both}");
    assert_eq!(both["ids"], json!([one["ids"][0], two["ids"][0]]));
    let batch = uuid_of(&both["batchId"]);
    assert_ne!(batch, uuid_of(&one["batchId"]));
    assert_ne!(batch, uuid_of(&two["batchId"]));
    assert!(batch_of(&site, batch).await.is_empty());

    // A key first used by `send` has no batch: enqueueing it again is a new batch.
    let (status, sent) = site.send(SENDER, keyed("c@example.org", "C", "k3")).await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    let (status, resent) = site
        .enqueue(SENDER, json!([keyed("c@example.org", "C", "k3")]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{resent}");
    assert_eq!(resent["ids"], json!([sent["id"]]));
    assert!(
        batch_of(&site, uuid_of(&resent["batchId"]))
            .await
            .is_empty()
    );
    assert_eq!(batch_id_of(&site, uuid_of(&sent["id"])).await, None);
    assert_eq!(site.message_count().await, 3);

    // Unkeyed messages are always new.
    let unkeyed = json!([message("d@example.org", "D")]);
    let (_, first) = site.enqueue(SENDER, unkeyed.clone()).await;
    let (_, second) = site.enqueue(SENDER, unkeyed).await;
    assert_ne!(first["batchId"], second["batchId"]);
    assert_ne!(first["ids"], second["ids"]);
    assert_eq!(site.message_count().await, 5);
}

// Scenario 27: keys and quotas under concurrency.

// Several workers, so the racing requests really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keyed_send_and_an_enqueue_of_the_same_key_race_to_one_row() {
    let site = MailSite::start().await;
    for round in 0..5 {
        let key = format!("race-{round}");
        let (sent, enqueued) = tokio::join!(
            site.send(SENDER, keyed("ann@example.org", "Race", &key)),
            site.enqueue(SENDER, json!([keyed("ann@example.org", "Race", &key)])),
        );
        assert_eq!(sent.0, StatusCode::OK, "{}", sent.1);
        assert_eq!(enqueued.0, StatusCode::ACCEPTED, "{}", enqueued.1);
        assert_eq!(enqueued.1["ids"], json!([sent.1["id"]]), "round {round}");
        let rows: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outgoing_mail.messages WHERE idempotency_key = $1",
        )
        .bind(&key)
        .fetch_one(&site.core.pool)
        .await
        .expect("count");
        assert_eq!(rows, 1, "round {round}");
    }
    assert_eq!(site.message_count().await, 5);
}

#[tokio::test]
async fn a_batch_over_the_quota_is_refused_whole_before_its_attachments_are_stored() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"dailyRecipientLimit": 2}))
        .await;
    let batch = json!([
        to_many(&["a@example.org", "b@example.org"], "Two"),
        with_attachment("c@example.org", "One"),
    ]);
    assert_quota(&site.enqueue(SENDER, batch).await, 2, 0, 3);
    assert_eq!(site.message_count().await, 0);
    assert!(site.objects().await.is_empty());
}

// Several workers, so the racing requests really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_enqueue_and_a_send_racing_for_the_last_of_the_quota_only_one_wins() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"dailyRecipientLimit": 2}))
        .await;
    for round in 0..4 {
        let (enqueued, sent) = tokio::join!(
            site.enqueue(
                SENDER,
                json!([to_many(&["a@example.org", "b@example.org"], "Bulk")])
            ),
            site.send(SENDER, message("c@example.org", "Now")),
        );
        let winners = [&enqueued, &sent]
            .iter()
            .filter(|(s, _)| s.is_success())
            .count();
        assert_eq!(winners, 1, "round {round}: {enqueued:?} {sent:?}");
        if enqueued.0.is_success() {
            assert_quota(&sent, 2, 2, 1);
        } else {
            assert_quota(&enqueued, 2, 1, 2);
        }
        let used: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(recipient_count), 0)::bigint FROM outgoing_mail.messages
             WHERE created_at > now() - interval '24 hours'",
        )
        .fetch_one(&site.core.pool)
        .await
        .expect("used");
        assert!(used <= 2, "round {round}: {used} recipients accepted");
        // The next round starts with a fresh day.
        site.age_messages(25).await;
    }
}

// Scenario 29: the backlog under concurrency.

/// Profile pace `pace`, 1,439 bulk messages of another app queued, then one enqueue each from
/// two apps at once.
async fn race_two_apps_for_the_backlog(pace: i64) -> (Answer, Answer, MailSite) {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"pacePerMinute": pace}))
        .await;
    site.queue_bulk_rows(OTHER, "alerts", 1439).await;
    let (a, b) = tokio::join!(
        site.enqueue(SENDER, json!([message("a@example.org", "A")])),
        site.enqueue(SOURCE, json!([message("b@example.org", "B")])),
    );
    (a, b, site)
}

// Several workers, so the racing requests really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apps_racing_for_the_last_backlog_slot_one_gets_backlog_full() {
    let (a, b, site) = race_two_apps_for_the_backlog(1).await;
    let answers = [a, b];
    assert_eq!(status_counts(&answers), (1, 1), "{answers:?}");
    let loser = answers
        .iter()
        .find(|(s, _)| !s.is_success())
        .expect("a loser");
    assert_error(loser, StatusCode::CONFLICT, "backlog_full");
    assert_eq!(site.message_count().await, 1440);
}

// Several workers, so the racing requests really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apps_racing_with_pace_two_are_both_accepted() {
    let (a, b, site) = race_two_apps_for_the_backlog(2).await;
    assert_eq!(a.0, StatusCode::ACCEPTED, "{}", a.1);
    assert_eq!(b.0, StatusCode::ACCEPTED, "{}", b.1);
    assert_eq!(site.message_count().await, 1441);
}

// Scenario 32: the audit is part of acceptance.

#[tokio::test]
async fn an_enqueue_whose_audit_fails_is_refused_and_leaves_no_rows_or_objects() {
    let site = MailSite::start().await;
    site.break_audit(SEND_ACTION).await;
    let refused = site
        .enqueue(SENDER, json!([with_attachment("ann@example.org", "Hi")]))
        .await;
    let body = assert_error(
        &refused,
        StatusCode::INTERNAL_SERVER_ERROR,
        "mail_unavailable",
    );
    assert_eq!(body["message"], UNAVAILABLE);
    assert!(!body.to_string().contains("audit store down"), "{body}");
    assert_eq!(site.message_count().await, 0);
    assert!(
        site.objects().await.is_empty(),
        "{:?}",
        site.objects().await
    );
    let accounted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.attachment_objects")
            .fetch_one(&site.core.pool)
            .await
            .expect("count");
    assert_eq!(accounted, 0);

    site.repair_audit().await;
    let (status, body) = site
        .enqueue(SENDER, json!([with_attachment("ann@example.org", "Hi")]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(site.objects().await.len(), 1);
}

#[tokio::test]
async fn a_send_whose_audit_fails_is_refused_and_leaves_no_rows_or_objects() {
    let site = MailSite::start().await;
    site.break_audit(SEND_ACTION).await;
    let refused = site
        .send(SENDER, with_attachment("ann@example.org", "Hi"))
        .await;
    let body = assert_error(
        &refused,
        StatusCode::INTERNAL_SERVER_ERROR,
        "mail_unavailable",
    );
    assert_eq!(body["message"], UNAVAILABLE);
    assert!(!body.to_string().contains("audit store down"), "{body}");
    assert_eq!(site.message_count().await, 0);
    assert!(site.objects().await.is_empty());
}

// Scenario 36: the daily quota under concurrency.

// Several workers, so the racing requests really run in parallel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_sends_under_a_limit_of_five_accept_exactly_five() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"dailyRecipientLimit": 5}))
        .await;
    let answers = futures::future::join_all(
        (0..10).map(|i| site.send(SENDER, message(&format!("r{i}@example.org"), "Count"))),
    )
    .await;
    assert_eq!(status_counts(&answers), (5, 5), "{answers:?}");
    for answer in answers.iter().filter(|(s, _)| !s.is_success()) {
        assert_quota(answer, 5, 5, 1);
    }
    assert_eq!(used_last_24h(&site, SENDER).await, 5);
    let (_, profiles) = site.app(SENDER, Method::GET, "/profiles", None).await;
    assert_eq!(
        profiles["items"][0]["quota"]["dailyRecipients"], 5,
        "{profiles}"
    );
    // Another app's quota on the same profile is its own.
    assert_eq!(used_last_24h(&site, SOURCE).await, 0);

    let accepted = answers
        .iter()
        .find(|(s, _)| s.is_success())
        .expect("an accepted send");
    let id = accepted.1["id"].as_str().expect("id");
    let (status, cancelled) = site
        .admin(Method::POST, &format!("/messages/{id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(used_last_24h(&site, SENDER).await, 4);
    let (status, record) = site
        .send(SENDER, message("again@example.org", "Freed"))
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_quota(
        &site.send(SENDER, message("more@example.org", "Full")).await,
        5,
        5,
        1,
    );

    site.age_messages(25).await;
    assert_eq!(used_last_24h(&site, SENDER).await, 0);
    for i in 0..5 {
        let (status, record) = site
            .send(SENDER, message(&format!("n{i}@example.org"), "New day"))
            .await;
        assert_eq!(status, StatusCode::OK, "{record}");
    }
}

// Idempotency and wake-ups.

#[tokio::test]
async fn a_repeated_keyed_send_returns_the_stored_message() {
    let site = MailSite::start().await;
    let (status, first) = site
        .send(SENDER, keyed("ann@example.org", "First", "order-1"))
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, again) = site
        .send(SENDER, keyed("bob@example.org", "Changed", "order-1"))
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["subject"], "First");
    assert_eq!(again["to"], json!(["ann@example.org"]));
    assert_eq!(site.message_count().await, 1);
    // Keys are per app and case-sensitive.
    let (_, other) = site
        .send(SOURCE, keyed("ann@example.org", "First", "order-1"))
        .await;
    let (_, upper) = site
        .send(SENDER, keyed("ann@example.org", "First", "ORDER-1"))
        .await;
    assert_ne!(other["id"], first["id"]);
    assert_ne!(upper["id"], first["id"]);
    assert_eq!(site.message_count().await, 3);
}

#[tokio::test]
async fn a_send_wakes_exactly_its_message() {
    let mut site = MailSite::start().await;
    let (status, record) = site.send(SENDER, message("ann@example.org", "Hi")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    let wake = site.wakeups.recv().await.expect("a wake-up");
    assert_eq!(wake.target, message_wakeup(uuid_of(&record["id"])));
    assert_eq!(wake.delay, Duration::ZERO);
    assert!(site.wakeups.try_recv().is_err(), "one wake-up only");
}

#[tokio::test]
async fn an_enqueue_wakes_each_of_its_profiles_once() {
    let mut site = MailSite::start().await;
    let mut news = profile_body("news@example.org");
    news["name"] = json!("News");
    let (status, body) = site.admin(Method::PUT, "/profiles/news", Some(news)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = site
        .admin(
            Method::PUT,
            &format!("/apps/{SENDER}"),
            Some(json!({"mode": "selected", "profiles": ["alerts", "news"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut for_news = message("c@example.org", "C");
    for_news["profile"] = json!("news");
    let (status, body) = site
        .enqueue(
            SENDER,
            json!([
                message("a@example.org", "A"),
                for_news,
                message("b@example.org", "B"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let mut woken = Vec::new();
    while let Ok(wake) = site.wakeups.try_recv() {
        woken.push(wake.target);
    }
    let alerts = profile_wakeup(site.profile_id("alerts").await);
    let news = profile_wakeup(site.profile_id("news").await);
    assert_eq!(woken.len(), 2, "{woken:?}");
    assert!(
        woken.contains(&alerts) && woken.contains(&news),
        "{woken:?}"
    );
}

#[tokio::test]
async fn prefer_wait_holds_the_answer_and_returns_the_queued_record() {
    let site = MailSite::start().await;
    let started = Instant::now();
    let response = site
        .client
        .post(format!("{}/api/mail/v1/send", site.base))
        .bearer_auth(&site.tokens[SENDER])
        .header("prefer", "wait=2")
        .json(&message("ann@example.org", "Wait"))
        .send()
        .await
        .expect("request");
    let elapsed = started.elapsed();
    assert_eq!(response.status(), StatusCode::OK);
    let record: Value = response.json().await.expect("record");
    assert_eq!(record["status"], "queued", "{record}");
    assert_eq!(record["attempts"], 0, "{record}");
    assert!(elapsed >= Duration::from_millis(1900), "{elapsed:?}");
}

// Scenario 15 over HTTP: the batch size.

#[tokio::test]
async fn a_batch_of_1001_is_refused_and_a_batch_of_1000_is_accepted() {
    let site = MailSite::start().await;
    let batch = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| message(&format!("r{i}@example.org"), &format!("M{i}")))
                .collect(),
        )
    };
    let refused = site.enqueue(SENDER, batch(1001)).await;
    let body = assert_error(&refused, StatusCode::BAD_REQUEST, "bad_input");
    assert_eq!(
        body["message"],
        "Provide 1–1000 valid messages with distinct keys."
    );
    assert_eq!(site.message_count().await, 0);
    let (status, body) = site.enqueue(SENDER, batch(1000)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["ids"].as_array().map(Vec::len), Some(1000));
    assert_eq!(site.message_count().await, 1000);
    let batch_id = uuid_of(&body["batchId"]);
    assert_eq!(batch_of(&site, batch_id).await.len(), 1000);
}

// The order of the checks, and what every refusal leaves.

#[tokio::test]
async fn the_permission_is_checked_before_the_body_and_every_refusal_is_audited() {
    let site = MailSite::start().await;
    // An app that declares nothing learns that first, whatever its body.
    let answer = site.send(SILENT, json!({"to": []})).await;
    assert_error(&answer, StatusCode::FORBIDDEN, "mail_not_declared");
    let answer = site.enqueue(SILENT, json!("not a batch")).await;
    assert_error(&answer, StatusCode::FORBIDDEN, "mail_not_declared");
    // A sender's invalid message or batch is refused, and audited without its addresses.
    let mut bcc = message("hidden.person@example.org", "Hi");
    bcc["headers"] = json!({"Bcc": "another.hidden@example.org"});
    let answer = site.send(SENDER, bcc).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    let answer = site
        .enqueue(
            SENDER,
            json!([
                message("hidden.person@example.org", "One"),
                {"to": ["x@example.org", "y@example.org"]}
            ]),
        )
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    // The contract takes a batch as an array, never a lone message.
    let answer = site
        .enqueue(SENDER, message("hidden.person@example.org", "Lone"))
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    let audits = site.audit_rows(SEND_ACTION).await;
    let summary: Vec<(String, String, String, i64, i64)> = audits
        .iter()
        .map(|a| {
            (
                a["outcome"].as_str().unwrap_or_default().to_string(),
                a["metadata"]["app"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                a["error_code"].as_str().unwrap_or_default().to_string(),
                a["metadata"]["count"].as_i64().unwrap_or(-1),
                a["metadata"]["recipientCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    let denied = |app: &str, code: &str, count: i64, recipients: i64| {
        (
            "denied".to_string(),
            app.to_string(),
            code.to_string(),
            count,
            recipients,
        )
    };
    assert_eq!(
        summary,
        vec![
            denied(SILENT, "mail_not_declared", 1, 0),
            denied(SILENT, "mail_not_declared", 0, 0),
            denied(SENDER, "bad_input", 1, 1),
            denied(SENDER, "bad_input", 2, 3),
            denied(SENDER, "bad_input", 1, 1),
        ],
        "{audits:?}"
    );
    let text = site.all_audit_text().await;
    assert!(!text.contains("hidden.person") && !text.contains("another.hidden"));
    assert_eq!(site.message_count().await, 0);
}

#[tokio::test]
async fn a_known_key_answers_its_message_at_once_and_is_audited_as_known() {
    let site = MailSite::start().await;
    let (status, first) = site
        .send(SENDER, keyed("ann@example.org", "Once", "order-7"))
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    // Without `Prefer: wait=0` a new message would wait for delivery; a known one does not.
    let asked = Instant::now();
    let response = site
        .client
        .post(format!("{}/api/mail/v1/send", site.base))
        .bearer_auth(&site.tokens[SENDER])
        .json(&keyed("ann@example.org", "Once", "order-7"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    let again: Value = response.json().await.expect("json");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "a known key waited {:?}",
        asked.elapsed()
    );
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["status"], "queued");
    let audits = site.audit_rows(SEND_ACTION).await;
    assert_eq!(audits.len(), 2, "{audits:?}");
    assert_eq!(audits[1]["outcome"], "allowed");
    assert_eq!(audits[1]["metadata"]["known"], true, "{}", audits[1]);
    assert_eq!(audits[1]["target_id"], first["id"], "{}", audits[1]);
    assert_eq!(site.message_count().await, 1);
}

/// Holds the policy lock every acceptance takes first, until both calls wait behind it, so
/// they start their race together.
async fn start_together<F1, F2>(site: &MailSite, first: F1, second: F2) -> (F1::Output, F2::Output)
where
    F1: std::future::Future,
    F2: std::future::Future,
{
    let mut gate = site.core.pool.begin().await.expect("gate");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('outgoing_mail.policy', 0))")
        .execute(&mut *gate)
        .await
        .expect("policy lock");
    let pool = site.core.pool.clone();
    let release = async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(&pool)
            .await
            .expect("waiters");
            if waiting >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "the calls never met at the gate");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.rollback().await.expect("open the gate");
    };
    let (a, b, ()) = tokio::join!(first, second, release);
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_send_and_enqueue_starting_together_share_one_row_one_object_and_one_recipient() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"dailyRecipientLimit": 1}))
        .await;
    let mut message = with_attachment("ann@example.org", "Same");
    message["key"] = json!("same");
    let ((sent_status, sent), (batch_status, batch)) = start_together(
        &site,
        site.send(SENDER, message.clone()),
        site.enqueue(SENDER, json!([message])),
    )
    .await;
    assert_eq!(sent_status, StatusCode::OK, "{sent}");
    assert_eq!(batch_status, StatusCode::ACCEPTED, "{batch}");
    assert_eq!(batch["ids"], json!([sent["id"]]));
    assert_eq!(site.message_count().await, 1);
    // The loser's attachment is gone; the winner's stays with its message.
    assert_eq!(site.objects().await.len(), 1, "{:?}", site.objects().await);
    assert_eq!(used_last_24h(&site, SENDER).await, 1);
}

#[tokio::test]
async fn a_repeated_batch_with_attachments_stores_nothing_new() {
    let site = MailSite::start().await;
    let batch = json!([
        {"key": "a", "to": ["ann@example.org"], "subject": "A", "text": "A",
         "attachments": [{"filename": "a.txt", "contentType": "text/plain", "content": "YQ=="}]},
        {"key": "b", "to": ["bob@example.org"], "subject": "B", "text": "B",
         "attachments": [{"filename": "b.txt", "contentType": "text/plain", "content": "Yg=="}]},
    ]);
    let (status, first) = site.enqueue(SENDER, batch.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let objects = site.objects().await;
    assert_eq!(objects.len(), 2);
    let (status, again) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again, first);
    assert_eq!(site.objects().await, objects);
    let accounted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.attachment_objects")
            .fetch_one(&site.core.pool)
            .await
            .expect("count");
    assert_eq!(accounted, 2);
    let batch_id = first["batchId"].as_str().expect("batch id");
    let (status, page) = site.list(SENDER, &format!("batchId={batch_id}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 2, "{page}");
}

#[tokio::test]
async fn a_batch_only_part_of_which_fits_the_backlog_is_refused_whole() {
    let site = MailSite::start().await;
    site.update_profile("alerts", json!({"pacePerMinute": 1}))
        .await;
    site.queue_bulk_rows(OTHER, "alerts", 1439).await;
    let answer = site
        .enqueue(
            SENDER,
            json!([message("a@example.org", "A"), message("b@example.org", "B")]),
        )
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "backlog_full");
    assert_eq!(site.message_count().await, 1439);
    let (status, body) = site
        .enqueue(SENDER, json!([message("a@example.org", "A")]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

#[tokio::test]
async fn cores_own_mail_uses_only_the_default_profile() {
    use k2b_core::mail::accept::{self, MailContext};
    use k2b_core::mail::policy::Caller;
    use k2b_core::mail::validate::parse_message;

    let site = MailSite::start().await;
    let mut spare = profile_body("spare@example.org");
    spare["name"] = json!("Spare");
    let (status, body) = site
        .admin(Method::PUT, "/profiles/spare", Some(spare))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let objects = site.core.mail_objects.store().await;
    let ctx = MailContext {
        pool: &site.core.pool,
        objects,
        wakeups: site.core.wakeups.as_ref(),
        request_id: None,
    };
    let mut named = message("admin@example.org", "Notice");
    named["profile"] = json!("spare");
    let refused = accept::send(&ctx, &Caller::core(), parse_message(&named).expect("valid"))
        .await
        .expect_err("core may not name another profile");
    assert_eq!(
        refused.code(),
        Some(k2b_core::mail::MailCode::ProfileNotAllowed)
    );
    let sent = accept::send(
        &ctx,
        &Caller::core(),
        parse_message(&message("admin@example.org", "Notice")).expect("valid"),
    )
    .await
    .expect("the default profile");
    assert_eq!(sent.row.profile_key, "alerts");
    assert_eq!(sent.row.app_id, "core");
}
