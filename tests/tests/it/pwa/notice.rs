//! The "new phone paired" notice (spec approvals §2.5): after a real pairing, maintenance hands
//! outgoing mail one notice for the device, delivery sends it over SMTP, and later runs send
//! nothing more. The mail carries no secret of the pairing.

use std::time::Duration;

use k2b_core::mail::profiles::{self, AdminActor, ProfileInput};
use k2b_core::smtp_sink::SmtpSink;
use serde_json::json;

use super::Pwa;

#[tokio::test]
async fn a_paired_phone_is_announced_once_by_mail_without_its_secrets() {
    let pwa = Pwa::new().await;
    let sink = SmtpSink::start("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("smtp peer");
    let admin = pwa.user("root", true).await;
    let input = ProfileInput::parse(&json!({
        "name": "Notices", "fromAddress": "cloud@example.org", "smtpHost": "127.0.0.1",
        "smtpPort": sink.addr.port(), "smtpSecure": false
    }))
    .expect("profile");
    let actor = AdminActor {
        user_id: admin.id,
        uid: admin.uid.clone(),
        request_id: None,
    };
    profiles::put(&pwa.core.pool, &pwa.core.settings, "notices", input, &actor)
        .await
        .expect("profile stored");

    let user = pwa.user("alice", false).await;
    let mut browser = pwa.browser(&user).await;
    let (id, secret) = pwa.start(&mut browser).await;
    let mut phone = super::Jar::default();
    let claimed = pwa.claim(&mut phone, &secret, "ios").await;
    claimed.expect(200, None);
    let code = claimed.body["code"].as_str().expect("code").to_string();
    pwa.confirm(&mut browser, &id, &code)
        .await
        .expect(204, None);
    pwa.complete(&mut phone).await.expect(200, None);
    let device = super::device_id(&phone).expect("device");

    let first = maintenance::run(&pwa.core).await.expect("maintenance");
    assert_eq!(first.pairing_notices.sent, 1, "{first:?}");
    let found = pwa.core.mail_delivery.recover().await.expect("recovery");
    pwa.core.mail_delivery.deliver_found(&found, None).await;
    let received = sink
        .wait_for(1, Duration::from_secs(20))
        .await
        .expect("notice delivered");
    let mail = &received[0];
    assert_eq!(mail.to, ["alice@example.test"]);
    assert_eq!(mail.header("Subject").as_deref(), Some("New phone paired"));
    let notified: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT notified_at FROM auth.pwa_devices WHERE id = $1")
            .bind(device)
            .fetch_one(&pwa.core.pool)
            .await
            .expect("device");
    assert!(notified.is_some());

    // Nothing of the pairing's secrets: link secret, comparison code, device key, hashes.
    let (secret_hash, pairing_hashes): (String, Vec<String>) = sqlx::query_as(
        "SELECT d.secret_hash,
                (SELECT array_agg(coalesce(link_secret_hash, '') || coalesce(completion_secret_hash, ''))
                   FROM auth.pwa_pairings)
           FROM auth.pwa_devices d WHERE d.id = $1",
    )
    .bind(device)
    .fetch_one(&pwa.core.pool)
    .await
    .unwrap_or_else(|_| (String::new(), Vec::new()));
    let stored: String = sqlx::query_scalar(
        "SELECT to_jsonb(m)::text FROM outgoing_mail.messages m WHERE app_id = 'core'",
    )
    .fetch_one(&pwa.core.pool)
    .await
    .expect("stored notice");
    let device_key = phone.get("pwa_device").expect("device cookie").to_string();
    let mut secrets = vec![secret.clone(), code.clone(), device_key, secret_hash];
    secrets.extend(pairing_hashes.into_iter().filter(|h| !h.is_empty()));
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        assert!(!mail.data.contains(secret.as_str()), "mail holds {secret}");
        assert!(
            !stored.contains(secret.as_str()),
            "stored notice holds {secret}"
        );
    }

    // Later runs send nothing more, even with the notice forgotten by a crash in between.
    let second = maintenance::run(&pwa.core).await.expect("maintenance");
    assert_eq!(second.pairing_notices.sent, 0);
    sqlx::query("UPDATE auth.pwa_devices SET notified_at = NULL WHERE id = $1")
        .bind(device)
        .execute(&pwa.core.pool)
        .await
        .expect("forget");
    maintenance::run(&pwa.core).await.expect("maintenance");
    let found = pwa.core.mail_delivery.recover().await.expect("recovery");
    pwa.core.mail_delivery.deliver_found(&found, None).await;
    let messages: i64 = sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.messages")
        .fetch_one(&pwa.core.pool)
        .await
        .expect("count");
    assert_eq!(messages, 1, "one notice per device");
    assert_eq!(sink.received().len(), 1, "sent once, never twice");
}
