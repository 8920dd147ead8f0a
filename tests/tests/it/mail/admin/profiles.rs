//! Profiles through the admin API (scenario 42): revisions, sealed passwords, the host rule and
//! exactly one default.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{assert_error, stored_password};
use crate::mail::{MailSite, SENDER, message, profile_body};

/// The password `profile_body` stores.
const FIRST_PASSWORD: &str = "s3cret-pass";
const SECOND_PASSWORD: &str = "an0ther-pass";

async fn profile(site: &MailSite, key: &str) -> Value {
    let (status, body) = site
        .admin(Method::GET, &format!("/profiles/{key}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// `alerts`' body at `revision` with `changes` applied (a `null` change removes the field).
fn alerts_at(revision: i64, changes: Value) -> Value {
    let mut body = profile_body("alerts@example.org");
    body["revision"] = json!(revision);
    body.as_object_mut().expect("object").remove("smtpPassword");
    for (name, value) in changes.as_object().expect("object") {
        body[name] = value.clone();
    }
    body
}

async fn put_alerts(site: &MailSite, body: Value) -> (StatusCode, Value) {
    site.admin(Method::PUT, "/profiles/alerts", Some(body))
        .await
}

#[tokio::test]
async fn replacing_a_profile_needs_its_current_revision() {
    let site = MailSite::start().await;
    assert_eq!(profile(&site, "alerts").await["revision"], 1);
    let answer = put_alerts(&site, profile_body("alerts@example.org")).await;
    assert_error(&answer, StatusCode::CONFLICT, "profile_exists");
    let answer = put_alerts(&site, alerts_at(2, json!({"name": "Later"}))).await;
    assert_error(&answer, StatusCode::CONFLICT, "revision_conflict");
    assert_eq!(profile(&site, "alerts").await["name"], "Alerts");

    let (status, body) = put_alerts(&site, alerts_at(1, json!({"name": "Renamed"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["revision"], 2);
    assert_eq!(body["name"], "Renamed");
    assert_eq!(body["isDefault"], true);
    // The revision it was read at is stale now.
    let answer = put_alerts(&site, alerts_at(1, json!({"name": "Lost update"}))).await;
    assert_error(&answer, StatusCode::CONFLICT, "revision_conflict");
    let stored = profile(&site, "alerts").await;
    assert_eq!(
        (stored["name"].clone(), stored["revision"].clone()),
        (json!("Renamed"), json!(2))
    );
    let updates = site.audit_rows("outgoing_mail.profile.update").await;
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert_eq!(updates[0]["actor_uid"], "root");

    let answer = site.admin(Method::GET, "/profiles/nowhere", None).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "profile_unknown");
}

#[tokio::test]
async fn a_password_is_kept_when_omitted_cleared_by_null_and_stored_only_sealed() {
    let site = MailSite::start().await;
    let first = stored_password(&site, "alerts")
        .await
        .expect("a sealed password");
    assert!(!first.contains(FIRST_PASSWORD), "{first}");
    assert_eq!(profile(&site, "alerts").await["hasPassword"], true);

    let (status, body) = put_alerts(&site, alerts_at(1, json!({"smtpPort": 2525}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hasPassword"], true);
    assert_eq!(body["smtpPort"], 2525);
    assert_eq!(
        stored_password(&site, "alerts").await.as_ref(),
        Some(&first)
    );

    let replace = alerts_at(2, json!({"smtpPassword": SECOND_PASSWORD}));
    let (status, body) = put_alerts(&site, replace).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hasPassword"], true);
    let second = stored_password(&site, "alerts")
        .await
        .expect("a sealed password");
    assert_ne!(second, first);
    assert!(!second.contains(SECOND_PASSWORD), "{second}");

    let (status, body) = put_alerts(&site, alerts_at(3, json!({"smtpPassword": null}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hasPassword"], false);
    assert_eq!(body["revision"], 4);
    assert_eq!(stored_password(&site, "alerts").await, None);

    // Neither answers nor audits ever carry a password.
    let (_, listed) = site.admin(Method::GET, "/profiles", None).await;
    let audits = site.all_audit_text().await;
    for text in [listed.to_string(), audits] {
        assert!(
            !text.contains(FIRST_PASSWORD) && !text.contains(SECOND_PASSWORD),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_new_smtp_host_needs_the_password_again() {
    let site = MailSite::start().await;
    let first = stored_password(&site, "alerts").await;
    let moved = alerts_at(1, json!({"smtpHost": "smtp2.example.org"}));
    let answer = put_alerts(&site, moved).await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_profile");
    assert!(
        answer.1["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("smtpPassword: ")
    );
    let stored = profile(&site, "alerts").await;
    assert_eq!(stored["smtpHost"], "smtp.example.org");
    assert_eq!(stored["revision"], 1);

    // The same host in other case and spacing is no move.
    let same = alerts_at(1, json!({"smtpHost": "  SMTP.Example.ORG "}));
    let (status, body) = put_alerts(&site, same).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored_password(&site, "alerts").await, first);

    let moved = alerts_at(
        2,
        json!({"smtpHost": "smtp2.example.org", "smtpPassword": SECOND_PASSWORD}),
    );
    let (status, body) = put_alerts(&site, moved).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["smtpHost"], "smtp2.example.org");
    assert_eq!(body["hasPassword"], true);

    let cleared = alerts_at(
        3,
        json!({"smtpHost": "smtp3.example.org", "smtpPassword": null}),
    );
    let (status, body) = put_alerts(&site, cleared).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["hasPassword"], false);
    // Without a stored password there is nothing to re-enter.
    let (status, body) = put_alerts(
        &site,
        alerts_at(4, json!({"smtpHost": "smtp4.example.org"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn concurrent_first_profiles_elect_exactly_one_default() {
    let site = MailSite::start().await;
    sqlx::query("DELETE FROM outgoing_mail.profiles")
        .execute(&site.core.pool)
        .await
        .expect("empty profiles");
    let keys: Vec<String> = (0..8).map(|n| format!("first-{n}")).collect();
    let site = &site;
    let answers = futures::future::join_all(keys.iter().map(|key| async move {
        site.admin(
            Method::PUT,
            &format!("/profiles/{key}"),
            Some(profile_body(&format!("{key}@example.org"))),
        )
        .await
    }))
    .await;
    let mut defaults = Vec::new();
    for ((status, body), key) in answers.iter().zip(&keys) {
        assert_eq!(*status, StatusCode::CREATED, "{key}: {body}");
        if body["isDefault"] == true {
            defaults.push(key.clone());
        }
    }
    assert_eq!(defaults.len(), 1, "{answers:?}");
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT key FROM outgoing_mail.profiles WHERE is_default")
            .fetch_all(&site.core.pool)
            .await
            .expect("defaults");
    assert_eq!(stored, defaults);
    let (_, apps) = site.admin(Method::GET, "/apps", None).await;
    assert_eq!(apps["defaultProfile"], json!(defaults[0]));
}

#[tokio::test]
async fn the_default_profile_is_deleted_only_after_another_becomes_default() {
    let site = MailSite::start().await;
    let (status, spare) = site
        .admin(
            Method::PUT,
            "/profiles/spare",
            Some(profile_body("spare@example.org")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{spare}");
    assert_eq!(spare["isDefault"], false);
    let answer = site.admin(Method::DELETE, "/profiles/alerts", None).await;
    assert_error(&answer, StatusCode::CONFLICT, "profile_is_default");
    assert_eq!(profile(&site, "alerts").await["isDefault"], true);

    let (status, body) = site
        .admin(Method::POST, "/profiles/spare/default", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["isDefault"], true);
    assert_eq!(body["revision"], 2);
    let alerts = profile(&site, "alerts").await;
    assert_eq!(
        (alerts["isDefault"].clone(), alerts["revision"].clone()),
        (json!(false), json!(2))
    );
    // Apps in the default mode follow the default.
    let (status, record) = site.send(SENDER, message("ann@example.org", "Moved")).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["profile"], "spare");

    let (status, body) = site.admin(Method::DELETE, "/profiles/alerts", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let answer = site.admin(Method::GET, "/profiles/alerts", None).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "profile_unknown");
    let answer = site.admin(Method::DELETE, "/profiles/alerts", None).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "profile_unknown");
    let answer = site
        .admin(Method::POST, "/profiles/alerts/default", None)
        .await;
    assert_error(&answer, StatusCode::NOT_FOUND, "profile_unknown");
    assert_eq!(
        site.audit_rows("outgoing_mail.profile.delete").await.len(),
        1
    );
    assert_eq!(
        site.audit_rows("outgoing_mail.profile.default").await.len(),
        1
    );
}
