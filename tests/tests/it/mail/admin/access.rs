//! Which profiles an app may use, as administrators set it (`PUT /apps/{appId}`).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{app_item, assert_error};
use crate::mail::{MailSite, SENDER, message};

async fn usable_profiles(site: &MailSite) -> Value {
    let (status, body) = site.app(SENDER, Method::GET, "/profiles", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["items"].clone()
}

async fn set_access(site: &MailSite, app: &str, body: Value) -> (StatusCode, Value) {
    site.admin(Method::PUT, &format!("/apps/{app}"), Some(body))
        .await
}

#[tokio::test]
async fn selected_access_limits_an_app_to_exactly_its_profiles() {
    let site = MailSite::start().await;
    let (status, app) =
        set_access(&site, SENDER, json!({"mode": "selected", "profiles": []})).await;
    assert_eq!(status, StatusCode::OK, "{app}");
    assert_eq!(
        (app["mode"].clone(), app["profiles"].clone()),
        (json!("selected"), json!([]))
    );
    assert_eq!(usable_profiles(&site).await, json!([]));
    let (status, refused) = site
        .send(SENDER, message("ann@example.org", "Blocked"))
        .await;
    assert_eq!(
        (status, &refused["code"]),
        (StatusCode::BAD_REQUEST, &json!("profile_required")),
        "{refused}"
    );
    let mut named = message("ann@example.org", "Named");
    named["profile"] = json!("alerts");
    let (status, refused) = site.send(SENDER, named.clone()).await;
    assert_eq!(
        (status, &refused["code"]),
        (StatusCode::BAD_REQUEST, &json!("profile_not_allowed")),
        "{refused}"
    );
    assert_eq!(site.message_count().await, 0);

    let (status, app) = set_access(
        &site,
        SENDER,
        json!({"mode": "selected", "profiles": ["alerts"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{app}");
    assert_eq!(app["profiles"], json!(["alerts"]));
    assert_eq!(app_item(&site, SENDER).await["profiles"], json!(["alerts"]));
    let usable = usable_profiles(&site).await;
    assert_eq!(usable.as_array().map(Vec::len), Some(1), "{usable}");
    assert_eq!(usable[0]["key"], "alerts");
    for message in [message("ann@example.org", "Allowed"), named] {
        let (status, record) = site.send(SENDER, message).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        assert_eq!(record["profile"], "alerts");
    }

    let (status, app) = set_access(&site, SENDER, json!({"mode": "default"})).await;
    assert_eq!(
        (status, &app["mode"]),
        (StatusCode::OK, &json!("default")),
        "{app}"
    );
    let rows = site.audit_rows("outgoing_mail.app_access.update").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[1]["metadata"]["profiles"], json!(["alerts"]));
    assert_eq!(rows[1]["actor_uid"], "root");
}

#[tokio::test]
async fn core_access_cannot_change_and_unknown_or_malformed_access_is_refused() {
    let site = MailSite::start().await;
    let answer = set_access(&site, "core", json!({"mode": "selected", "profiles": []})).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_profile");
    // Core's own mail always uses the default profile.
    let core = app_item(&site, "core").await;
    assert_eq!(core["mode"], "default", "{core}");
    assert_eq!(core["readDeclared"], false, "{core}");
    assert_eq!(core["logApps"], json!([]), "{core}");

    let answer = set_access(
        &site,
        SENDER,
        json!({"mode": "selected", "profiles": ["alerts", "nowhere"]}),
    )
    .await;
    assert_eq!(answer.1["code"], "profile_unknown", "{}", answer.1);
    assert_eq!(
        answer.0,
        StatusCode::BAD_REQUEST,
        "the body, not the path, names the profile"
    );
    for body in [
        json!({}),
        json!({"mode": "all"}),
        json!({"mode": "default", "profiles": []}),
        json!({"mode": "selected"}),
        json!({"mode": "selected", "profiles": ["alerts", "alerts"]}),
        json!({"mode": "selected", "profiles": [], "extra": 1}),
        json!("selected"),
    ] {
        let answer = set_access(&site, SENDER, body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_profile");
    }
    assert_eq!(app_item(&site, SENDER).await["mode"], "default");
    assert!(
        site.audit_rows("outgoing_mail.app_access.update")
            .await
            .is_empty()
    );
    let (status, record) = site
        .send(SENDER, message("ann@example.org", "Still default"))
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
}
