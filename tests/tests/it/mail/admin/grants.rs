//! Log grants through the admin API (scenarios 5, 6, 41, and the table's own checks): which
//! app may read which other app's mail log.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{ADMIN_UID, app_item, assert_error, audit_meta};
use crate::mail::{MailSite, READER, SENDER, SOURCE};

#[tokio::test]
async fn log_grants_are_stored_sorted_and_audited_with_the_administrator() {
    let site = MailSite::start().await;
    let path = format!("/apps/{READER}/log-access");
    let bodies = [
        (json!({"apps": [SOURCE, "other"]}), json!(["other", SOURCE])),
        (
            json!({"apps": ["erp_v2", "ERP", SENDER]}),
            json!(["ERP", "erp_v2", SENDER]),
        ),
        (json!({"apps": []}), json!([])),
    ];
    for (index, (body, sorted)) in bodies.iter().enumerate() {
        let (status, app) = site.admin(Method::PUT, &path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::OK, "{app}");
        assert_eq!(app["appId"], READER);
        assert_eq!(app["name"], "Reader");
        assert_eq!(
            (app["mode"].clone(), app["profiles"].clone()),
            (json!("default"), json!([]))
        );
        assert_eq!(app["registered"], true);
        assert_eq!(app["declared"], true);
        assert_eq!(app["readDeclared"], true);
        assert_eq!(app["logApps"], *sorted, "{app}");
        assert_eq!(app_item(&site, READER).await["logApps"], *sorted);
        let rows = site.audit_rows("outgoing_mail.app_log_access.update").await;
        assert_eq!(rows.len(), index + 1);
        let row = &rows[index];
        assert_eq!(row["actor_uid"], ADMIN_UID);
        assert!(row["actor_user_id"].is_string(), "{row}");
        assert_eq!(row["actor_roles"], json!(["admin"]));
        assert_eq!(row["target_id"], READER);
        assert_eq!(audit_meta(row)["apps"], *sorted);
    }
    // The largest grant set.
    let hundred: Vec<String> = (0..100).map(|n| format!("app-{n:03}")).collect();
    let (status, app) = site
        .admin(Method::PUT, &path, Some(json!({"apps": hundred})))
        .await;
    assert_eq!(status, StatusCode::OK, "{app}");
    assert_eq!(app["logApps"], json!(hundred));
}

#[tokio::test]
async fn malformed_or_forbidden_log_grants_are_refused_without_an_audit() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    let path = format!("/apps/{READER}/log-access");
    let too_many: Vec<String> = (0..101).map(|n| format!("app-{n:03}")).collect();
    let invalid = [
        json!({}),
        json!("source"),
        json!([SOURCE]),
        json!(null),
        json!({"apps": "source"}),
        json!({"apps": [7]}),
        json!({"apps": ["core"]}),
        json!({"apps": [SOURCE, SOURCE]}),
        json!({"apps": [""]}),
        json!({"apps": [READER]}),
        json!({"apps": [SOURCE], "note": "x"}),
        json!({"apps": too_many}),
    ];
    for body in invalid {
        let answer = site.admin(Method::PUT, &path, Some(body.clone())).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
        // `<path>: <issue>`.
        let text = answer.1["message"].as_str().unwrap_or_default();
        let (field, issue) = text.split_once(": ").unwrap_or_default();
        assert!(
            matches!(field, "body" | "apps" | "note") && !issue.is_empty(),
            "{body}: {text}"
        );
    }
    // A reader id longer than any app id is refused, not stored.
    let long = format!("/apps/{}/log-access", "r".repeat(201));
    let answer = site
        .admin(Method::PUT, &long, Some(json!({"apps": [SOURCE]})))
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    // Core's grants cannot be set at all.
    let answer = site
        .admin(
            Method::PUT,
            "/apps/core/log-access",
            Some(json!({"apps": [SOURCE]})),
        )
        .await;
    assert_error(&answer, StatusCode::BAD_REQUEST, "bad_input");
    // An empty reader names no route.
    let (status, body) = site
        .admin(
            Method::PUT,
            "/apps//log-access",
            Some(json!({"apps": [SOURCE]})),
        )
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let empty = k2b_core::mail::admin::parse_log_access("", &json!({"apps": [SOURCE]}))
        .expect_err("an empty reader");
    assert_eq!(empty.code(), Some(k2b_core::mail::MailCode::BadInput));
    let rows = site.audit_rows("outgoing_mail.app_log_access.update").await;
    assert_eq!(rows.len(), 1, "only the harness's grant: {rows:?}");
    assert_eq!(app_item(&site, READER).await["logApps"], json!([SOURCE]));
    assert_eq!(app_item(&site, "core").await["logApps"], json!([]));
}

#[tokio::test]
async fn a_grant_for_an_unregistered_reader_lists_it_with_sorted_sources() {
    let site = MailSite::start().await;
    site.grant("offline", &["zebra", "alpha"]).await;
    let offline = app_item(&site, "offline").await;
    assert_eq!(offline["registered"], false, "{offline}");
    assert_eq!(offline["declared"], false, "{offline}");
    assert_eq!(offline["readDeclared"], false, "{offline}");
    assert_eq!(offline["mode"], "default", "{offline}");
    assert_eq!(offline["logApps"], json!(["alpha", "zebra"]), "{offline}");
    let rows = site.audit_rows("outgoing_mail.app_log_access.update").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["target_id"], "offline");
    assert_eq!(audit_meta(&rows[0])["apps"], json!(["alpha", "zebra"]));
    let core = app_item(&site, "core").await;
    assert_eq!(core["readDeclared"], false, "{core}");
    assert_eq!(core["logApps"], json!([]), "{core}");
    // Sources are not apps of the page; only the reader holds a grant.
    let (_, apps) = site.admin(Method::GET, "/apps", None).await;
    let ids: Vec<&str> = apps["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|item| item["appId"].as_str())
        .collect();
    assert!(
        !ids.contains(&"zebra") && !ids.contains(&"alpha"),
        "{ids:?}"
    );
}

#[tokio::test]
async fn a_grant_whose_audit_fails_keeps_the_old_grants() {
    let site = MailSite::start().await;
    site.grant(READER, &[SOURCE]).await;
    site.break_audit("outgoing_mail.app_log_access.update")
        .await;
    let answer = site
        .admin(
            Method::PUT,
            &format!("/apps/{READER}/log-access"),
            Some(json!({"apps": ["other"]})),
        )
        .await;
    assert_error(
        &answer,
        StatusCode::INTERNAL_SERVER_ERROR,
        "mail_unavailable",
    );
    assert!(
        !answer.1.to_string().contains("audit store down"),
        "{}",
        answer.1
    );
    site.repair_audit().await;
    assert_eq!(app_item(&site, READER).await["logApps"], json!([SOURCE]));
    let sources: Vec<String> = sqlx::query_scalar(
        "SELECT source_app_id FROM outgoing_mail.app_log_access WHERE app_id = $1",
    )
    .bind(READER)
    .fetch_all(&site.core.pool)
    .await
    .expect("grants");
    assert_eq!(sources, vec![SOURCE.to_string()]);
    assert_eq!(
        site.audit_rows("outgoing_mail.app_log_access.update")
            .await
            .len(),
        1
    );
}

#[tokio::test]
async fn the_database_refuses_grants_to_oneself_or_of_core() {
    let site = MailSite::start().await;
    for (source, constraint) in [
        (READER, "app_log_access_not_self"),
        ("core", "app_log_access_not_core"),
    ] {
        let error = sqlx::query(
            "INSERT INTO outgoing_mail.app_log_access (app_id, source_app_id) VALUES ($1, $2)",
        )
        .bind(READER)
        .bind(source)
        .execute(&site.core.pool)
        .await
        .expect_err("a check violation");
        let error = error.as_database_error().expect("a database error");
        assert_eq!(error.code().as_deref(), Some("23514"), "{error}");
        assert_eq!(error.constraint(), Some(constraint));
    }
}
