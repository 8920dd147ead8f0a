//! Device management and maintenance: scenarios 16 and 17 of spec/approvals.md §6, and renaming.

use http::Method;
use k2b_core::Core;
use k2b_core::pwa::devices::{self, DeviceAdministrator};
use k2b_core::pwa::{PwaError, WebActor};
use serde_json::json;

use super::{Jar, Options, Pwa};

/// Scenario 16: the owner's delete (twice), unknown ids, unpairing, and the administrator
/// service with and without the admin role.
#[tokio::test]
async fn scenario_16_revocation() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    let path = format!("/api/auth/pwa/v1/devices/{device}");
    let first = pwa
        .send(Method::DELETE, &path, &mut browser, Options::default())
        .await;
    first.expect(204, None);
    pwa.send(Method::DELETE, &path, &mut browser, Options::default())
        .await
        .expect(204, None);
    assert!(pwa.probe(&phone).await.is_none());
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));
    pwa.send(
        Method::DELETE,
        &format!("/api/auth/pwa/v1/devices/{}", uuid::Uuid::new_v4()),
        &mut browser,
        Options::default(),
    )
    .await
    .expect(404, Some("NOT_FOUND"));
    assert_eq!(pwa.device_reason(device).await.as_deref(), Some("user"));

    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    let unpaired = pwa
        .send(
            Method::DELETE,
            "/pwa/_auth/session",
            &mut phone,
            Options::default(),
        )
        .await;
    unpaired.expect(204, None);
    assert!(phone.get("pwa_device").is_none() && phone.get("pwa_session").is_none());
    assert_eq!(pwa.device_reason(device).await.as_deref(), Some("unpaired"));
    // Idempotent.
    pwa.send(
        Method::DELETE,
        "/pwa/_auth/session",
        &mut phone,
        Options::default(),
    )
    .await
    .expect(204, None);

    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    let not_admin = DeviceAdministrator {
        user_id: ada.id,
        admin: false,
    };
    assert_eq!(
        devices::admin_list(&pwa.core, not_admin, ada.id).await,
        Err(PwaError::Forbidden)
    );
    let grace = pwa.user("Grace", true).await;
    let admin = DeviceAdministrator {
        user_id: grace.id,
        admin: true,
    };
    assert_eq!(
        devices::admin_revoke(&pwa.core, admin, ada.id, device, None).await,
        Ok(true)
    );
    assert_eq!(
        devices::admin_revoke(&pwa.core, admin, ada.id, device, None).await,
        Ok(false)
    );
    assert!(pwa.probe(&phone).await.is_none());
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));
}

/// Scenario 17: maintenance revokes devices of expired accounts and deletes expired pairings;
/// extending the account afterwards does not revive the device.
#[tokio::test]
async fn scenario_17_maintenance() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    let (pairing, _) = pwa.start(&mut browser).await;
    pwa.exec(
        "UPDATE auth.pwa_pairings SET claim_until = now() - interval '20 minutes',
            expires_at = now() - interval '10 minutes', created_at = now() - interval '30 minutes'
         WHERE id = $1",
        pairing.parse().expect("uuid"),
    )
    .await;
    pwa.exec(
        "UPDATE auth.users SET account_expires = now() - interval '1 minute' WHERE id = $1",
        ada.id,
    )
    .await;
    let report = maintenance::run(&pwa.core).await.expect("maintenance");
    assert_eq!(report.pwa.devices_expired, 1);
    assert!(report.pwa.pairings_deleted >= 1);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM auth.pwa_pairings WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&pairing).expect("uuid"))
        .fetch_one(&pwa.core.pool)
        .await
        .expect("count");
    assert_eq!(left, 0);
    assert_eq!(
        pwa.device_reason(device).await.as_deref(),
        Some("account_expired")
    );
    let rows = pwa.audit_rows().await;
    let revoke = rows
        .iter()
        .rev()
        .find(|r| r["action"] == "auth.pwa.device.revoke")
        .expect("revoke audit");
    assert_eq!(revoke["metadata"]["provenance"], "system");
    assert!(revoke["actor_user_id"].is_null());

    pwa.exec(
        "UPDATE auth.users SET account_expires = NULL WHERE id = $1",
        ada.id,
    )
    .await;
    pwa.renew(&mut phone).await.expect(401, Some("UNPAIRED"));

    // Long-revoked devices without families are purged.
    pwa.exec(
        "DELETE FROM auth.session_families WHERE pwa_device_id = $1",
        device,
    )
    .await;
    pwa.exec(
        "UPDATE auth.pwa_devices SET revoked_at = now() - interval '31 days' WHERE id = $1",
        device,
    )
    .await;
    let report = maintenance::run(&pwa.core).await.expect("maintenance");
    assert_eq!(report.pwa.devices_purged, 1);
}

/// Renaming: an active device with a matching key, trimmed 1..80 characters, audited.
#[tokio::test]
async fn renaming_needs_the_device_key() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, _) = pwa.pair(&mut browser, "ios").await;
    let rename = |name: serde_json::Value| Options {
        body: Some(json!({ "name": name })),
        ..Options::default()
    };
    pwa.send(
        Method::PATCH,
        "/pwa/_auth/session",
        &mut phone,
        rename(json!("  Work phone ")),
    )
    .await
    .expect(204, None);
    let list = pwa.get("/api/auth/pwa/v1/devices", &mut browser).await;
    assert_eq!(list.body["items"][0]["name"], "Work phone");
    for bad in [json!(""), json!("   "), json!("x".repeat(81)), json!(5)] {
        pwa.send(Method::PATCH, "/pwa/_auth/session", &mut phone, rename(bad))
            .await
            .expect(400, Some("INVALID_REQUEST"));
    }
    pwa.send(
        Method::PATCH,
        "/pwa/_auth/session",
        &mut Jar::default(),
        rename(json!("x")),
    )
    .await
    .expect(401, Some("UNPAIRED"));
    assert!(
        pwa.audit_actions()
            .await
            .contains(&"auth.pwa.device.rename".to_string())
    );
}

/// The own list marks the device of this request's app session as current.
#[tokio::test]
async fn the_own_list_marks_the_current_device() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (phone, device) = pwa.pair(&mut browser, "android").await;
    let core: &Core = &pwa.core;
    let sid = super::token_sid(&browser.get("session_token").expect("token"));
    let actor = WebActor {
        user_id: ada.id,
        sid,
    };
    let items = devices::list_own(core, actor, Some(device))
        .await
        .expect("list");
    assert!(items[0].current);
    let mut both = browser.clone();
    both.set(
        "pwa_session",
        &phone.get("pwa_session").expect("session"),
        "/",
    );
    let list = pwa.get("/api/auth/pwa/v1/devices", &mut both).await;
    list.expect(200, None);
    assert_eq!(list.body["items"][0]["current"], true);
}
