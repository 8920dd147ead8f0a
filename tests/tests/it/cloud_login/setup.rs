//! Scenario 24: Cloud Login is off by default, its app origin defaults to the public
//! authenticator, and a malformed origin fails closed for the feature while the person's own
//! device management keeps working.

use serde_json::json;

use super::CloudLogin;
use crate::pwa::{Jar, ORIGIN};

/// The feature routes (discovery, sign-in, enrollment) all answer 503 `UNAVAILABLE`.
async fn feature_unavailable(cloud: &CloudLogin, browser: &mut Jar) {
    cloud
        .get("/info", &mut Jar::default())
        .await
        .expect(503, Some("UNAVAILABLE"));
    cloud
        .post(
            "/login/start",
            &mut Jar::default(),
            json!({"identifier": "ada", "category": "login"}),
        )
        .await
        .expect(503, Some("UNAVAILABLE"));
    cloud
        .post("/manage/pairings/start", browser, json!({}))
        .await
        .expect(503, Some("UNAVAILABLE"));
}

#[tokio::test]
async fn it_is_off_by_default_and_every_feature_route_says_unavailable() {
    let cloud = CloudLogin::off().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    feature_unavailable(&cloud, &mut browser).await;
    // Management of one's own devices works while the feature is off.
    let page = cloud.get("/manage/devices", &mut browser).await;
    page.expect(200, None);
    assert_eq!(page.body, json!({"items": [], "nextCursor": null}));
}

#[tokio::test]
async fn the_app_origin_defaults_to_the_public_authenticator() {
    let cloud = CloudLogin::off().await;
    cloud.set("user.app_approval.enabled", json!(true)).await;
    let info = cloud.get("/info", &mut Jar::default()).await;
    info.expect(200, None);
    assert_eq!(info.body["appOrigin"], "https://cloud-login.pwa.k2b.dev");
    assert_eq!(info.body["issuer"], ORIGIN);
    assert_eq!(
        info.body["api"],
        format!("{ORIGIN}/api/auth/app-approval/v1")
    );
    assert_eq!(info.body["protocol"], "cloud-app-approval-v1");
    assert_eq!(info.body["algorithm"], "ES256");
    assert_eq!(info.body["limits"]["bodyBytes"], 8192);
    assert_eq!(info.body["limits"]["pendingPerAccount"], 5);
}

#[tokio::test]
async fn an_origin_with_a_path_fails_closed() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    cloud
        .set(
            "user.app_approval.origin",
            json!("https://auth.example.test/path"),
        )
        .await;
    feature_unavailable(&cloud, &mut browser).await;
}

#[tokio::test]
async fn with_an_empty_origin_owners_still_list_and_revoke_but_nothing_else_works() {
    let cloud = CloudLogin::new().await;
    let (_, mut owner) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut owner).await;
    let id = device.device_id.clone().expect("id");
    let (_, mut stranger) = cloud.person("stranger", false).await;
    cloud.set("user.app_approval.origin", json!("")).await;

    let page = cloud.get("/manage/devices", &mut owner).await;
    page.expect(200, None);
    assert_eq!(page.body["items"][0]["id"], id.as_str());
    feature_unavailable(&cloud, &mut owner).await;
    // Someone else's device is not found, with the same code.
    cloud
        .post(
            "/manage/devices/update",
            &mut stranger,
            json!({"operation": "revoke", "deviceId": id}),
        )
        .await
        .expect(404, Some("UNAVAILABLE"));
    cloud
        .post_from(
            "/manage/devices/update",
            &mut owner,
            Some("https://foreign.example.test"),
            json!({"operation": "revoke", "deviceId": id}),
        )
        .await
        .expect(403, Some("FORBIDDEN"));
    cloud
        .post(
            "/manage/devices/update",
            &mut owner,
            json!({"operation": "revoke", "deviceId": id}),
        )
        .await
        .expect(204, None);
    let page = cloud.get("/manage/devices", &mut owner).await;
    assert!(
        page.body["items"][0]["revokedAt"].is_string(),
        "{:?}",
        page.body
    );
}

#[tokio::test]
async fn a_setting_of_the_wrong_type_is_unavailable_not_enabled() {
    let cloud = CloudLogin::new().await;
    // Stored behind the validation, as a damaged or hand-edited row would be.
    let sealed = cloud
        .core()
        .settings
        .seal("user.app_approval.enabled", "\"yes\"")
        .expect("seal");
    sqlx::query("UPDATE settings.entries SET value = $1 WHERE key = 'user.app_approval.enabled'")
        .bind(sealed)
        .execute(&cloud.core().pool)
        .await
        .expect("tamper");
    cloud
        .get("/info", &mut Jar::default())
        .await
        .expect(503, Some("UNAVAILABLE"));
}
