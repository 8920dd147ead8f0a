//! Messages and batches through the admin API (scenario 31 and the message routes): reading
//! content (audited), cancelling queued mail and deleting its attachments.

use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use super::{CANCELLED, assert_error, attachment_refs, queued_message, status_of, with_attachment};
use crate::mail::{MailSite, SENDER, message};

#[tokio::test]
async fn an_admin_reads_a_message_and_its_content_until_it_is_purged() {
    let site = MailSite::start().await;
    let mut sent = message("ann@example.org", "Invoice 7");
    sent["html"] = json!("<p>Hi</p><script>alert(1)</script>");
    sent["headers"] = json!({"X-App": "one"});
    let id = queued_message(&site, sent).await;

    let (status, record) = site
        .admin(Method::GET, &format!("/messages/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(
        (record["id"].as_str(), record["appId"].as_str()),
        (Some(id.as_str()), Some(SENDER))
    );
    assert_eq!(record["status"], "queued");
    assert!(
        record.get("text").is_none() && record.get("html").is_none(),
        "{record}"
    );
    let (status, page) = site
        .admin(Method::GET, &format!("/messages?app={SENDER}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["items"][0]["id"], json!(id));
    let missing = Uuid::new_v4();
    for path in [
        format!("/messages/{missing}"),
        format!("/messages/{missing}/content"),
    ] {
        let answer = site.admin(Method::GET, &path, None).await;
        assert_error(&answer, StatusCode::NOT_FOUND, "message_unknown");
    }
    // A malformed id is the caller's mistake, not an unknown message.
    for path in ["/messages/not-a-uuid", "/messages/not-a-uuid/content"] {
        let answer = site.admin(Method::GET, path, None).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    }
    let answer = site
        .admin(Method::POST, "/messages/not-a-uuid/cancel", None)
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    assert!(
        site.audit_rows("outgoing_mail.message.read")
            .await
            .is_empty()
    );

    let (status, content) = site
        .admin(Method::GET, &format!("/messages/{id}/content"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{content}");
    assert_eq!(content["purged"], false);
    assert_eq!(content["text"], "Body of Invoice 7");
    let html = content["html"].as_str().expect("html");
    assert!(
        html.contains("<p>Hi</p>") && !html.contains("script"),
        "{html}"
    );
    assert_eq!(content["headers"], json!({"X-App": "one"}));
    let reads = site.audit_rows("outgoing_mail.message.read").await;
    assert_eq!(reads.len(), 1);
    assert_eq!(
        (
            reads[0]["target_id"].as_str(),
            reads[0]["actor_uid"].as_str()
        ),
        (Some(id.as_str()), Some("root"))
    );
    assert_eq!(reads[0]["metadata"]["appId"], SENDER, "{}", reads[0]);

    sqlx::query(
        "UPDATE outgoing_mail.messages SET text_body = NULL, html_body = NULL, headers = NULL,
             content_purged_at = now() WHERE id = $1",
    )
    .bind(Uuid::parse_str(&id).expect("uuid"))
    .execute(&site.core.pool)
    .await
    .expect("purge");
    let (status, content) = site
        .admin(Method::GET, &format!("/messages/{id}/content"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{content}");
    assert_eq!(content["purged"], true);
    assert!(content["contentPurgedAt"].is_string(), "{content}");
    assert!(content.get("text").is_none(), "{content}");
    assert_eq!(site.audit_rows("outgoing_mail.message.read").await.len(), 2);
}

#[tokio::test]
async fn an_admin_cancels_a_queued_message_once_and_its_attachment_goes() {
    let site = MailSite::start().await;
    let id = queued_message(
        &site,
        with_attachment("ann@example.org", "Doomed", "doomed"),
    )
    .await;
    let refs = attachment_refs(&site, &id).await;
    assert_eq!(refs.len(), 1);
    assert!(site.objects().await.contains(&refs[0]));

    let (status, record) = site
        .admin(Method::POST, &format!("/messages/{id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["error"], CANCELLED);
    assert_eq!(record["errorCode"], "cancelled_by_admin");
    assert!(!site.objects().await.contains(&refs[0]));
    assert!(attachment_refs(&site, &id).await.is_empty());
    let (status, again) = site
        .admin(Method::GET, &format!("/messages/{id}"), None)
        .await;
    assert_eq!(
        (status, &again["status"]),
        (StatusCode::OK, &json!("cancelled"))
    );

    let answer = site
        .admin(Method::POST, &format!("/messages/{id}/cancel"), None)
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "message_not_queued");
    let sent = queued_message(&site, message("bob@example.org", "Gone")).await;
    sqlx::query("UPDATE outgoing_mail.messages SET status = 'sent', sent_at = now() WHERE id = $1")
        .bind(Uuid::parse_str(&sent).expect("uuid"))
        .execute(&site.core.pool)
        .await
        .expect("mark sent");
    let answer = site
        .admin(Method::POST, &format!("/messages/{sent}/cancel"), None)
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "message_not_queued");
    assert_eq!(status_of(&site, &sent).await, ("sent".to_string(), None));
    let answer = site
        .admin(
            Method::POST,
            &format!("/messages/{}/cancel", Uuid::new_v4()),
            None,
        )
        .await;
    assert_error(&answer, StatusCode::NOT_FOUND, "message_unknown");
    let rows = site.audit_rows("outgoing_mail.message.cancel").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["target_id"], json!(id));
}

#[tokio::test]
async fn batch_cancel_cancels_only_queued_members_and_deletes_their_objects() {
    let site = MailSite::start().await;
    let batch = json!([
        with_attachment("ann@example.org", "One", "one"),
        with_attachment("bob@example.org", "Two", "two"),
        with_attachment("cid@example.org", "Three", "three"),
    ]);
    let (status, enqueued) = site.enqueue(SENDER, batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{enqueued}");
    let batch_id = enqueued["batchId"].as_str().expect("batchId").to_string();
    let ids: Vec<String> = enqueued["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("id").to_string())
        .collect();
    let refs: Vec<Vec<String>> =
        futures::future::join_all(ids.iter().map(|id| attachment_refs(&site, id))).await;
    assert!(refs.iter().all(|r| r.len() == 1), "{refs:?}");
    let uuid = |id: &str| Uuid::parse_str(id).expect("uuid");
    sqlx::query("UPDATE outgoing_mail.messages SET status = 'sent', sent_at = now() WHERE id = $1")
        .bind(uuid(&ids[1]))
        .execute(&site.core.pool)
        .await
        .expect("mark sent");
    sqlx::query(
        "UPDATE outgoing_mail.messages SET status = 'sending', attempt_count = 1 WHERE id = $1",
    )
    .bind(uuid(&ids[2]))
    .execute(&site.core.pool)
    .await
    .expect("mark sending");

    let path = format!("/batches/{batch_id}/cancel");
    let (status, body) = site.admin(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"batchId": batch_id, "cancelled": 1}));
    let cancelled = (
        "cancelled".to_string(),
        Some("cancelled_by_admin".to_string()),
    );
    assert_eq!(status_of(&site, &ids[0]).await, cancelled);
    assert_eq!(status_of(&site, &ids[1]).await, ("sent".to_string(), None));
    assert_eq!(
        status_of(&site, &ids[2]).await,
        ("sending".to_string(), None)
    );
    let objects = site.objects().await;
    assert!(!objects.contains(&refs[0][0]), "{objects:?}");
    assert!(
        objects.contains(&refs[1][0]) && objects.contains(&refs[2][0]),
        "{objects:?}"
    );
    assert_eq!(attachment_refs(&site, &ids[2]).await, refs[2]);
    let rows = site.audit_rows("outgoing_mail.batch.cancel").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["target_id"], json!(batch_id));
    assert_eq!(rows[0]["actor_uid"], "root");
    assert_eq!(rows[0]["metadata"]["appIds"], json!([SENDER]));
    assert_eq!(rows[0]["metadata"]["count"], 1);

    let (status, body) = site.admin(Method::POST, &path, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cancelled"], 0);
    assert_eq!(status_of(&site, &ids[1]).await.0, "sent");

    let answer = site
        .admin(
            Method::POST,
            &format!("/batches/{}/cancel", Uuid::new_v4()),
            None,
        )
        .await;
    assert_error(&answer, StatusCode::NOT_FOUND, "batch_unknown");
    let answer = site
        .admin(Method::POST, "/batches/not-a-uuid/cancel", None)
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
}
