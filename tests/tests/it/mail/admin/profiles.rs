//! Profiles through the admin API (scenario 42): revisions, sealed passwords, the host rule and
//! exactly one default.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{assert_error, stored_password};
use crate::mail::{MailSite, SENDER, message, profile_body};

/// The password `profile_body` stores.
const FIRST_PASSWORD: &str = "s3cret-pass";
const SECOND_PASSWORD: &str = "an0ther-pass";

/// What a sealed password opens to, with the installation's key and the profile's label.
async fn unsealed(site: &MailSite, sealed: &str) -> String {
    let id: uuid::Uuid = sqlx::query_scalar(
        "SELECT id FROM outgoing_mail.profiles WHERE smtp_password_encrypted = $1",
    )
    .bind(sealed)
    .fetch_one(&site.core.pool)
    .await
    .expect("the profile of a password");
    site.core
        .settings
        .unseal(&k2b_core::mail::profiles::password_label(id), sealed)
        .expect("a password sealed with the installation's key")
}

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
    assert_eq!(unsealed(&site, &first).await, FIRST_PASSWORD);
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
    assert_eq!(unsealed(&site, &second).await, SECOND_PASSWORD);

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
    assert_eq!(stored_password(&site, "alerts").await, first);

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
    let mut audited: Vec<String> = site
        .audit_rows("outgoing_mail.profile.create")
        .await
        .iter()
        .filter_map(|row| row["target_id"].as_str().map(str::to_string))
        .filter(|key| key.starts_with("first-"))
        .collect();
    audited.sort();
    assert_eq!(audited, keys, "one audit row per profile created");
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

#[tokio::test]
async fn a_revision_of_a_profile_deleted_meanwhile_conflicts_instead_of_creating_it() {
    let site = MailSite::start().await;
    let mut spare = profile_body("spare@example.org");
    spare["name"] = json!("Spare");
    let (status, body) = site
        .admin(Method::PUT, "/profiles/spare", Some(spare.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _) = site.admin(Method::DELETE, "/profiles/spare", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    spare["revision"] = json!(1);
    let answer = site
        .admin(Method::PUT, "/profiles/spare", Some(spare))
        .await;
    assert_error(&answer, StatusCode::CONFLICT, "revision_conflict");
    let answer = site.admin(Method::GET, "/profiles/spare", None).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "profile_unknown");
}

#[tokio::test]
async fn malformed_profile_keys_and_fields_are_invalid_profiles() {
    let site = MailSite::start().await;
    for (method, path) in [
        (Method::GET, "/profiles/Not_A_Key"),
        (Method::DELETE, "/profiles/Not_A_Key"),
        (Method::POST, "/profiles/Not_A_Key/default"),
        (Method::PUT, "/profiles/-leading-hyphen"),
    ] {
        let body = (method == Method::PUT).then(|| profile_body("a@example.org"));
        let answer = site.admin(method.clone(), path, body).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_profile");
    }
    for (field, value) in [
        ("name", json!("n".repeat(121))),
        ("name", json!("  ")),
        ("fromAddress", json!("not an address")),
        ("fromName", json!("")),
        ("smtpHost", json!("user@smtp.example.org")),
        ("smtpHost", json!("smtp.example.org/relay")),
        ("smtpUser", json!("u".repeat(321))),
        ("smtpPassword", json!("p".repeat(16385))),
        ("smtpPort", json!(0)),
        ("pacePerMinute", json!(6001)),
        ("maxAttachmentBytes", json!(26_214_401)),
    ] {
        let mut body = profile_body("b@example.org");
        body[field] = value;
        let answer = site.admin(Method::PUT, "/profiles/other", Some(body)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_profile");
        let message = answer.1["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{field}: {message}"
        );
    }
    // The longest name and password are fine.
    let mut body = profile_body("b@example.org");
    body["name"] = json!("n".repeat(120));
    body["smtpPassword"] = json!("p".repeat(16384));
    let (status, created) = site.admin(Method::PUT, "/profiles/other", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["appCount"], 0);
}

#[tokio::test]
async fn a_profile_change_whose_audit_fails_changes_nothing() {
    let site = MailSite::start().await;
    site.break_audit("outgoing_mail.profile.update").await;
    let answer = put_alerts(&site, alerts_at(1, json!({"name": "Unaudited"}))).await;
    assert_eq!(answer.0, StatusCode::INTERNAL_SERVER_ERROR, "{}", answer.1);
    assert_eq!(answer.1["code"], "mail_unavailable");
    let stored = profile(&site, "alerts").await;
    assert_eq!(
        (stored["name"].clone(), stored["revision"].clone()),
        (json!("Alerts"), json!(1))
    );
    site.repair_audit().await;
    let (status, body) = put_alerts(&site, alerts_at(1, json!({"name": "Audited"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
