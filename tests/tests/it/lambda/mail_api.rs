//! The `mail` binary behind the REST API: an app hands Core a message with an attachment and
//! its own credential, the message is stored in Postgres with the attachment in S3 and a
//! wake-up on the SQS queue, and the app lists it.

use std::time::Duration;

use base64::Engine;
use k2b_core::identity::workload;
use k2b_core::registry::store;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_sends_and_lists_its_mail_through_the_api() {
    let stack = Stack::with_queues().await;
    let (_, cookie) = stack.admin().await;
    let credential = {
        let mut conn = stack.core.pool.acquire().await.expect("connection");
        let entry = json!({
            "id": "inventory", "name": "Inventory", "icon": "ti ti-box", "description": "Stock",
            "baseUrl": "http://inventory:3000", "routes": ["/app/inventory"],
            "platformPermissions": ["mail:send"]
        });
        store::upsert(&mut conn, &entry, Duration::from_secs(600))
            .await
            .expect("register");
        workload::issue_app_credential(&mut conn, "inventory", &["mail"])
            .await
            .expect("credential")
            .0
    };
    let mut function = stack.start("mail").await;

    // The administrator creates the first profile (it becomes the default).
    let profile = stack
        .gateway
        .request(
            "PUT",
            "/api/admin/core/outgoing-mail/profiles/{key}",
            "/api/admin/core/outgoing-mail/profiles/alerts",
        )
        .header("Cookie", &cookie)
        .header("Origin", &stack.gateway.origin())
        .body(
            "application/json",
            serde_json::to_vec(&json!({
                "name": "Alerts", "fromAddress": "alerts@example.org", "smtpHost": "smtp.example.org",
                "smtpPort": 587, "smtpSecure": false
            }))
            .expect("json"),
        );
    let created = stack.send(&mut function, &profile).await;
    assert_eq!(created.status, 201, "{}", function.output());
    assert_eq!(created.json()["isDefault"], true);

    let bytes = b"quarterly figures".to_vec();
    let send = stack
        .gateway
        .request("POST", "/api/mail/v1/send", "/api/mail/v1/send")
        .header("Authorization", &format!("Bearer {credential}"))
        .header("Prefer", "wait=0")
        .body(
            "application/json",
            serde_json::to_vec(&json!({
                "to": ["ann@example.org"], "subject": "Figures", "text": "Attached.",
                "attachments": [{
                    "filename": "figures.txt", "contentType": "text/plain",
                    "content": base64::engine::general_purpose::STANDARD.encode(&bytes)
                }]
            }))
            .expect("json"),
        );
    let sent = stack.send(&mut function, &send).await;
    assert_eq!(sent.status, 200, "{}", function.output());
    let record = sent.json();
    assert_eq!(record["status"], "queued");
    assert_eq!(
        record["attachments"][0]["sha256"],
        hex::encode(Sha256::digest(&bytes))
    );
    let id = record["id"].as_str().expect("id").to_string();

    // The attachment is in the bucket, and the wake-up names the message.
    let refs: serde_json::Value = sqlx::query_scalar(
        "SELECT attachment_refs FROM outgoing_mail.messages WHERE id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&stack.core.pool)
    .await
    .expect("refs");
    let key = refs[0].as_str().expect("a key").to_string();
    let moto = stack.moto.as_ref().expect("moto");
    let object = moto
        .s3()
        .head_object()
        .bucket(&stack.values["MailBucket"])
        .key(&key)
        .send()
        .await
        .expect("the object exists");
    assert_eq!(object.content_length(), Some(bytes.len() as i64));
    let received = moto
        .client()
        .receive_message()
        .queue_url(&stack.values["WakeupQueue"])
        .max_number_of_messages(10)
        .wait_time_seconds(2)
        .send()
        .await
        .expect("receive");
    let bodies: Vec<&str> = received
        .messages()
        .iter()
        .filter_map(|m| m.body())
        .collect();
    assert_eq!(
        bodies,
        [k2b_core::mail::message_wakeup(id.parse().expect("uuid")).to_message()]
    );

    let list = stack
        .gateway
        .request("GET", "/api/mail/v1/messages", "/api/mail/v1/messages")
        .query("q", "figures")
        .header("Authorization", &format!("Bearer {credential}"));
    let listed = stack.send(&mut function, &list).await;
    assert_eq!(listed.status, 200, "{}", function.output());
    assert_eq!(listed.json()["total"], 1);
    assert_eq!(listed.json()["items"][0]["id"], json!(id));
    assert_eq!(listed.json()["items"][0]["text"], "Attached.");
}
