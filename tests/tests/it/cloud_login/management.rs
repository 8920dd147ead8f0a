//! Scenario 29 (management and maintenance): device updates, administrators' device routes,
//! bounded cleanup of expired rows, and the one-time notices through outgoing mail.

use std::time::Duration;

use http::Method;
use k2b_core::mail::profiles::{self, AdminActor, ProfileInput};
use k2b_core::smtp_sink::SmtpSink;
use serde_json::json;

use super::CloudLogin;
use crate::pwa::{Jar, ORIGIN, Options};

/// A default mail profile delivering to a fresh SMTP peer.
async fn mail_to_sink(cloud: &CloudLogin, admin: &k2b_core::auth::UserRecord) -> SmtpSink {
    let sink = SmtpSink::start("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("smtp peer");
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
    profiles::put(
        &cloud.core().pool,
        &cloud.core().settings,
        "notices",
        input,
        &actor,
    )
    .await
    .expect("profile stored");
    sink
}

#[tokio::test]
async fn people_rename_and_revoke_only_their_own_devices() {
    let cloud = CloudLogin::new().await;
    let (_, mut owner) = cloud.person("ada", false).await;
    let (_, mut other) = cloud.person("grace", false).await;
    let device = cloud.enroll(&mut owner).await;
    let id = device.device_id.clone().expect("id");
    cloud
        .post(
            "/manage/devices/update",
            &mut owner,
            json!({"deviceId": id}),
        )
        .await
        .expect(400, Some("INVALID_REQUEST"));
    cloud
        .post(
            "/manage/devices/update",
            &mut owner,
            json!({"operation": "rename", "deviceId": id, "name": "  "}),
        )
        .await
        .expect(400, Some("INVALID_REQUEST"));
    cloud
        .post(
            "/manage/devices/update",
            &mut other,
            json!({"operation": "rename", "deviceId": id, "name": "Mine"}),
        )
        .await
        .expect(404, Some("UNAVAILABLE"));
    cloud
        .post(
            "/manage/devices/update",
            &mut owner,
            json!({"operation": "rename", "deviceId": id, "name": " Renamed "}),
        )
        .await
        .expect(204, None);
    let page = cloud.get("/manage/devices", &mut owner).await;
    assert_eq!(page.body["items"][0]["name"], "Renamed");
    cloud
        .get("/manage/devices", &mut Jar::default())
        .await
        .expect(401, Some("UNAUTHORIZED"));
    cloud
        .get("/manage/devices?after=nope", &mut owner)
        .await
        .expect(400, Some("INVALID_REQUEST"));
    let actions = cloud.pwa.audit_actions().await;
    assert_eq!(
        actions.last().map(String::as_str),
        Some("auth.app.device.rename")
    );
}

#[tokio::test]
async fn the_device_list_pages_by_id() {
    let cloud = CloudLogin::new().await;
    let (user, mut owner) = cloud.person("ada", false).await;
    sqlx::query(
        "INSERT INTO auth.app_devices (id, issuer, user_id, name, public_key, assisted)
         SELECT gen_random_uuid(), $1, $2, 'Device ' || i,
                jsonb_build_object('kty', 'EC', 'crv', 'P-256',
                  'x', rpad(i::text, 42, 'A') || 'A', 'y', rpad(i::text, 42, 'B') || 'A'),
                false
           FROM generate_series(1, 45) AS i",
    )
    .bind(ORIGIN)
    .bind(user.id)
    .execute(&cloud.core().pool)
    .await
    .expect("devices");
    let mut seen = Vec::new();
    let mut path = "/manage/devices".to_string();
    loop {
        let page = cloud.get(&path, &mut owner).await;
        page.expect(200, None);
        let items = page.body["items"].as_array().expect("items").clone();
        assert!(items.len() <= 20);
        seen.extend(
            items
                .iter()
                .map(|d| d["id"].as_str().expect("id").to_string()),
        );
        match page.body["nextCursor"].as_str() {
            Some(cursor) => path = format!("/manage/devices?after={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 45);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "by id");
}

#[tokio::test]
async fn administrators_list_and_revoke_another_persons_authenticators() {
    let cloud = CloudLogin::new().await;
    let (admin, mut admin_browser) = cloud.person("root", true).await;
    let (owner, mut owner_browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut owner_browser).await;
    let id = device.device_id.clone().expect("id");
    let list = format!("/api/accounts/users/{}/devices", owner.id);
    let listed = cloud.pwa.get(&list, &mut admin_browser).await;
    listed.expect(200, None);
    assert_eq!(listed.body["devices"][0]["id"], id.as_str());
    assert_eq!(listed.body["devices"][0]["name"], "Test device");
    // Not an administrator; anonymous.
    cloud
        .pwa
        .get(&list, &mut owner_browser)
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .pwa
        .get(&list, &mut Jar::default())
        .await
        .expect(401, None);

    let path = format!("{list}/{id}");
    let delete = |jar: &mut Jar, origin: Option<&str>| {
        let options = Options {
            origin: origin.map(str::to_string),
            no_origin: origin.is_none(),
            ..Options::default()
        };
        let jar = jar.clone();
        let path = path.clone();
        let pwa = &cloud.pwa;
        async move {
            let mut jar = jar;
            pwa.send(Method::DELETE, &path, &mut jar, options).await
        }
    };
    delete(&mut admin_browser, Some("https://evil.example.test"))
        .await
        .expect(403, None);
    let first = delete(&mut admin_browser, Some(ORIGIN)).await;
    first.expect(200, None);
    assert_eq!(
        first.body,
        json!({"revoked": true, "device": {"name": "Test device"}})
    );
    let again = delete(&mut admin_browser, Some(ORIGIN)).await;
    assert_eq!(
        again.body,
        json!({"revoked": false, "device": {"name": "Test device"}})
    );
    let unknown = format!("{list}/{}", uuid::Uuid::new_v4());
    cloud
        .pwa
        .send(
            Method::DELETE,
            &unknown,
            &mut admin_browser,
            Options::default(),
        )
        .await
        .expect(404, Some("UNAVAILABLE"));
    // The device is gone for commands; the owner's web session stays valid.
    cloud
        .command(&device, json!({"operation": "pending"}))
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .get("/manage/devices", &mut owner_browser)
        .await
        .expect(200, None);
    let rows = cloud.pwa.audit_rows().await;
    let revoke = rows
        .iter()
        .find(|r| r["action"] == "auth.app.device.revoke")
        .expect("revoke audited");
    assert_eq!(revoke["actor_user_id"], admin.id.to_string());
    assert_eq!(revoke["metadata"]["reason"], "admin");
    assert_eq!(revoke["metadata"]["targetUserId"], owner.id.to_string());
    assert_eq!(
        rows.iter()
            .filter(|r| r["action"] == "auth.app.device.revoke")
            .count(),
        1,
        "the second revoke changed nothing"
    );
}

#[tokio::test]
async fn cleanup_deletes_expired_rows_a_hundred_at_a_time() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    cloud.enroll(&mut browser).await;
    let started = cloud.start_login("ada", "login").await;
    cloud
        .exec(
            "UPDATE auth.app_logins SET expires_at = created_at + interval '1 millisecond' WHERE id = $1",
            started["requestId"].as_str().expect("id"),
        )
        .await;
    sqlx::query(
        "INSERT INTO auth.app_logins (id, issuer, category, browser_hash, challenge, comparison,
                                      created_at, expires_at)
         SELECT gen_random_uuid(), $1, 'login', repeat('a', 64), repeat('A', 43), '123456',
                now() - interval '1 hour', now() - interval '1 minute'
           FROM generate_series(1, 150)",
    )
    .bind(ORIGIN)
    .execute(&cloud.core().pool)
    .await
    .expect("expired decoys");
    let report = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(report.cloud_login.logins, 100, "{report:?}");
    let report = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(report.cloud_login.logins, 51, "{report:?}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.app_logins")
        .fetch_one(&cloud.core().pool)
        .await
        .expect("count");
    assert_eq!(left, 0);
    cloud
        .status(&started)
        .await
        .expect(404, Some("UNAVAILABLE"));
}

#[tokio::test]
async fn a_failed_enrollment_notice_is_retried_and_delivered_once() {
    let cloud = CloudLogin::new().await;
    let (admin, _) = cloud.person("root", true).await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let id = device.device_id.clone().expect("id");
    // No outgoing mail yet: the notice waits.
    let first = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(first.authenticator_notices.deferred, 1, "{first:?}");
    let notified: Option<chrono::DateTime<chrono::Utc>> = cloud
        .scalar(
            "SELECT notified_at FROM auth.app_devices WHERE id = $1",
            &id,
        )
        .await;
    assert!(notified.is_none());

    let sink = mail_to_sink(&cloud, &admin).await;
    let second = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(second.authenticator_notices.sent, 1, "{second:?}");
    let third = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(third.authenticator_notices, Default::default(), "{third:?}");
    let found = cloud
        .core()
        .mail_delivery
        .recover()
        .await
        .expect("recovery");
    cloud.core().mail_delivery.deliver_found(&found, None).await;
    let received = sink
        .wait_for(1, Duration::from_secs(20))
        .await
        .expect("notice delivered");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].to, ["ada@example.test"]);
    assert_eq!(
        received[0].header("Subject").as_deref(),
        Some("New sign-in app enrolled")
    );
    let text = received[0].data.clone();
    assert!(text.contains("Test device"), "{text}");
}

#[tokio::test]
async fn an_administrators_revocation_is_announced_to_the_owner_once() {
    let cloud = CloudLogin::new().await;
    let (admin, mut admin_browser) = cloud.person("root", true).await;
    let (owner, mut browser) = cloud.person("ada", false).await;
    let sink = mail_to_sink(&cloud, &admin).await;
    let device = cloud.enroll(&mut browser).await;
    let id = device.device_id.clone().expect("id");
    maintenance::run(cloud.core())
        .await
        .expect("enrollment notice");
    let path = format!("/api/accounts/users/{}/devices/{id}", owner.id);
    for _ in 0..2 {
        cloud
            .pwa
            .send(
                Method::DELETE,
                &path,
                &mut admin_browser,
                Options::default(),
            )
            .await
            .expect(200, None);
    }
    let run = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(run.authenticator_notices.sent, 1, "{run:?}");
    let again = maintenance::run(cloud.core()).await.expect("maintenance");
    assert_eq!(again.authenticator_notices.sent, 0, "{again:?}");
    let found = cloud
        .core()
        .mail_delivery
        .recover()
        .await
        .expect("recovery");
    cloud.core().mail_delivery.deliver_found(&found, None).await;
    let received = sink
        .wait_for(2, Duration::from_secs(20))
        .await
        .expect("both notices delivered");
    let subjects: Vec<Option<String>> = received.iter().map(|m| m.header("Subject")).collect();
    assert!(
        subjects.contains(&Some("Sign-in app removed".to_string())),
        "{subjects:?}"
    );
    assert!(
        subjects.contains(&Some("New sign-in app enrolled".to_string())),
        "{subjects:?}"
    );
}
