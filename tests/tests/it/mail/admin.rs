//! The administrators' API under `/api/admin/core/outgoing-mail` (scenarios 5, 6, 31, 40–42):
//! who may call it, retention, log grants, profiles, app access, and cancelling messages.

mod access;
mod grants;
mod messages;
mod profiles;

use reqwest::header::{CACHE_CONTROL, HeaderMap};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Answer, MailSite, READER, SENDER, SOURCE, message, profile_body};

/// The path prefix of every admin route.
const ADMIN: &str = "/api/admin/core/outgoing-mail";
/// The administrator `MailSite` signs in as (the audit actor of every admin change).
const ADMIN_UID: &str = "root";
/// The message every admin cancellation leaves on the row.
const CANCELLED: &str = "Cancelled by an administrator.";

/// A request under the admin API with exactly the headers given (no cookie, no Origin unless
/// listed): status, headers and JSON body.
async fn raw(
    site: &MailSite,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = site
        .client
        .request(method, format!("{}{ADMIN}{path}", site.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, body)
}

/// Asserts a domain error answer `{error, code, message}`.
fn assert_error(answer: &Answer, status: StatusCode, code: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["error"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

fn audit_meta(row: &Value) -> &Value {
    &row["metadata"]
}

/// The app item `app_id` of `GET /apps`.
async fn app_item(site: &MailSite, app_id: &str) -> Value {
    let (status, apps) = site.admin(Method::GET, "/apps", None).await;
    assert_eq!(status, StatusCode::OK, "{apps}");
    apps["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|item| item["appId"] == app_id)
        .unwrap_or_else(|| panic!("{app_id} in {apps}"))
        .clone()
}

async fn retention(site: &MailSite) -> Value {
    let (status, body) = site.admin(Method::GET, "/retention", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// A queued message of `SENDER`; returns its id.
async fn queued_message(site: &MailSite, message: Value) -> String {
    let (status, record) = site.send(SENDER, message).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "queued", "{record}");
    record["id"].as_str().expect("id").to_string()
}

async fn stored_password(site: &MailSite, key: &str) -> Option<String> {
    sqlx::query_scalar("SELECT smtp_password_encrypted FROM outgoing_mail.profiles WHERE key = $1")
        .bind(key)
        .fetch_one(&site.core.pool)
        .await
        .expect("profile row")
}

async fn attachment_refs(site: &MailSite, id: &str) -> Vec<String> {
    let refs: Option<Value> =
        sqlx::query_scalar("SELECT attachment_refs FROM outgoing_mail.messages WHERE id = $1")
            .bind(Uuid::parse_str(id).expect("uuid"))
            .fetch_one(&site.core.pool)
            .await
            .expect("message row");
    refs.and_then(|r| r.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|k| k.as_str().expect("object key").to_string())
        .collect()
}

async fn status_of(site: &MailSite, id: &str) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, error_code FROM outgoing_mail.messages WHERE id = $1")
        .bind(Uuid::parse_str(id).expect("uuid"))
        .fetch_one(&site.core.pool)
        .await
        .expect("message row")
}

/// A message with one small inline attachment.
fn with_attachment(to: &str, subject: &str, key: &str) -> Value {
    let mut message = message(to, subject);
    message["key"] = json!(key);
    message["attachments"] =
        json!([{"filename": "note.txt", "contentType": "text/plain", "content": "aGVsbG8="}]);
    message
}

#[tokio::test]
async fn every_admin_route_refuses_anonymous_callers_plain_users_and_apps() {
    let site = MailSite::start().await;
    let id = queued_message(&site, message("ann@example.org", "Kept")).await;
    let batch = Uuid::new_v4();
    // Every route of `routes()`, with bodies an administrator would succeed with.
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, "/retention".into(), None),
        (
            Method::PUT,
            "/retention".into(),
            Some(json!({"contentDays": 10, "recordDays": 20})),
        ),
        (Method::GET, "/messages".into(), None),
        (Method::GET, format!("/messages/{id}"), None),
        (Method::GET, format!("/messages/{id}/content"), None),
        (Method::POST, format!("/messages/{id}/cancel"), None),
        (Method::POST, format!("/batches/{batch}/cancel"), None),
        (Method::GET, "/profiles".into(), None),
        (Method::GET, "/profiles/alerts".into(), None),
        (
            Method::PUT,
            "/profiles/spare".into(),
            Some(profile_body("spare@example.org")),
        ),
        (Method::DELETE, "/profiles/alerts".into(), None),
        (Method::POST, "/profiles/alerts/default".into(), None),
        (Method::GET, "/apps".into(), None),
        (
            Method::PUT,
            format!("/apps/{SENDER}"),
            Some(json!({"mode": "selected", "profiles": []})),
        ),
        (
            Method::PUT,
            format!("/apps/{READER}/log-access"),
            Some(json!({"apps": [SOURCE]})),
        ),
    ];
    let audits_before = site.all_audit_text().await;
    let bearer = format!("Bearer {}", site.tokens[SENDER]);
    for (method, path, body) in &routes {
        let origin = ("origin", site.origin.as_str());
        let (status, headers, answer) =
            raw(&site, method.clone(), path, &[origin], body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {answer}"
        );
        assert_eq!(headers[CACHE_CONTROL], "no-store", "{method} {path}");
        let (status, answer) = site
            .as_cookie(&site.user_cookie, method.clone(), path, body.clone())
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        // An app's workload credential is judged alone, even next to an administrator's cookie.
        for headers in [
            vec![origin, ("authorization", bearer.as_str())],
            vec![
                origin,
                ("authorization", bearer.as_str()),
                ("cookie", &site.admin_cookie),
            ],
        ] {
            let (status, _, answer) =
                raw(&site, method.clone(), path, &headers, body.clone()).await;
            assert!(
                matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN),
                "{method} {path} with an app credential: {status} {answer}"
            );
        }
    }
    // Nothing any of them asked for happened.
    assert_eq!(site.all_audit_text().await, audits_before);
    assert_eq!(status_of(&site, &id).await.0, "queued");
    assert_eq!(
        retention(&site).await,
        json!({"contentDays": 90, "recordDays": 365})
    );
    let (status, profiles) = site.admin(Method::GET, "/profiles", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        profiles["items"].as_array().map(Vec::len),
        Some(1),
        "{profiles}"
    );
    assert_eq!(app_item(&site, SENDER).await["mode"], "default");
    assert_eq!(app_item(&site, READER).await["logApps"], json!([]));
}

#[tokio::test]
async fn admin_changes_need_the_installation_origin() {
    let site = MailSite::start().await;
    let cookie = ("cookie", site.admin_cookie.as_str());
    let change = json!({"contentDays": 10, "recordDays": 20});
    for origin in [vec![("origin", "https://evil.example")], vec![]] {
        let headers = [origin.as_slice(), &[cookie]].concat();
        let (status, _, body) = raw(
            &site,
            Method::PUT,
            "/retention",
            &headers,
            Some(change.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, _, body) =
            raw(&site, Method::DELETE, "/profiles/alerts", &headers, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    assert_eq!(
        retention(&site).await,
        json!({"contentDays": 90, "recordDays": 365})
    );
    assert!(
        site.audit_rows("outgoing_mail.retention.update")
            .await
            .is_empty()
    );
    // Reading needs no Origin, and no answer is cached.
    let (status, headers, body) = raw(&site, Method::GET, "/retention", &[cookie], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers[CACHE_CONTROL], "no-store");
}

#[tokio::test]
async fn retention_rejects_anything_but_two_ordered_whole_numbers_of_days() {
    let site = MailSite::start().await;
    assert_eq!(
        retention(&site).await,
        json!({"contentDays": 90, "recordDays": 365})
    );
    let invalid = [
        json!({}),
        json!({"contentDays": 30}),
        json!({"recordDays": 400}),
        json!({"contentDays": 30.5, "recordDays": 400}),
        json!({"contentDays": 0, "recordDays": 400}),
        json!({"contentDays": -1, "recordDays": 400}),
        json!({"contentDays": 30, "recordDays": 36501}),
        json!({"contentDays": "30", "recordDays": 400}),
        json!({"contentDays": 30, "recordDays": null}),
        json!({"contentDays": 400, "recordDays": 30}),
        json!({"contentDays": 30, "recordDays": 400, "purge": true}),
        json!([30, 400]),
        json!("30/400"),
    ];
    for body in invalid {
        let answer = site
            .admin(Method::PUT, "/retention", Some(body.clone()))
            .await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
        assert!(
            answer.1["message"]
                .as_str()
                .unwrap_or_default()
                .contains(": "),
            "{body}"
        );
    }
    let reversed = site
        .admin(
            Method::PUT,
            "/retention",
            Some(json!({"contentDays": 400, "recordDays": 30})),
        )
        .await;
    assert_eq!(reversed.1["message"], "recordDays: at least contentDays");
    assert_eq!(
        retention(&site).await,
        json!({"contentDays": 90, "recordDays": 365})
    );
    assert!(
        site.audit_rows("outgoing_mail.retention.update")
            .await
            .is_empty()
    );
    // A whole number is whole however JSON writes it.
    let (status, body) = site
        .admin(
            Method::PUT,
            "/retention",
            Some(json!({"contentDays": 30.0, "recordDays": 400})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"contentDays": 30, "recordDays": 400}));
}

#[tokio::test]
async fn a_retention_change_is_stored_and_audited_with_old_and_new_values() {
    let site = MailSite::start().await;
    let new = json!({"contentDays": 36500, "recordDays": 36500});
    let (status, body) = site
        .admin(Method::PUT, "/retention", Some(new.clone()))
        .await;
    assert_eq!((status, &body), (StatusCode::OK, &new));
    assert_eq!(retention(&site).await, new);
    let smallest = json!({"contentDays": 1, "recordDays": 1});
    let (status, _) = site
        .admin(Method::PUT, "/retention", Some(smallest.clone()))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(retention(&site).await, smallest);
    let rows = site.audit_rows("outgoing_mail.retention.update").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["actor_uid"], ADMIN_UID);
    assert_eq!(
        audit_meta(&rows[0])["old"],
        json!({"contentDays": 90, "recordDays": 365})
    );
    assert_eq!(audit_meta(&rows[0])["new"], new);
    assert_eq!(audit_meta(&rows[1])["old"], new);
    assert_eq!(audit_meta(&rows[1])["new"], smallest);
}
