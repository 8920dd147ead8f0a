//! Deadlines inside the front door: with the database stalled on a lock held elsewhere, a
//! buffered route answers its own 503 and `launch` its 302, both well before API Gateway's 29 s
//! integration limit.

use std::time::Instant;

use k2b_core::lambda::ROUTE_BUDGET;
use k2b_tests::lambda::FunctionProcess;
use k2b_tests::lambda::rest::Delivered;
use serde_json::json;
use sqlx::Connection;

use super::Stack;
use crate::pwa::register_shell;

/// `name=value` of every cookie a response sets.
fn set_cookies(delivered: &Delivered) -> Vec<String> {
    delivered
        .headers
        .get("set-cookie")
        .into_iter()
        .flatten()
        .filter_map(|cookie| cookie.split(';').next())
        .map(str::to_string)
        .collect()
}

/// Pairs a phone through the approvals binary; returns the phone's cookie header.
async fn paired_phone(stack: &Stack, approvals: &mut FunctionProcess, browser: &str) -> String {
    let origin = stack.gateway.origin();
    let start = stack
        .gateway
        .request(
            "POST",
            "/api/auth/pwa/v1/{proxy+}",
            "/api/auth/pwa/v1/pairings",
        )
        .header("Cookie", browser)
        .header("Origin", &origin);
    let started = stack.send(approvals, &start).await.json();
    let id = started["id"].as_str().expect("id").to_string();
    let claim = stack
        .gateway
        .request("POST", "/pwa/_auth/{proxy+}", "/pwa/_auth/pairings/claim")
        .header("Origin", &origin)
        .body(
            "application/json",
            json!({"secret": started["secret"], "platform": "android"}).to_string(),
        );
    let claimed = stack.send(approvals, &claim).await;
    let mut phone = set_cookies(&claimed);
    let code = claimed.json()["code"].as_str().expect("code").to_string();
    let confirm = stack
        .gateway
        .request(
            "POST",
            "/api/auth/pwa/v1/{proxy+}",
            &format!("/api/auth/pwa/v1/pairings/{id}/confirm"),
        )
        .header("Cookie", browser)
        .header("Origin", &origin)
        .body("application/json", json!({"code": code}).to_string());
    assert_eq!(stack.send(approvals, &confirm).await.status, 204);
    let complete = stack
        .gateway
        .request(
            "POST",
            "/pwa/_auth/{proxy+}",
            "/pwa/_auth/pairings/complete",
        )
        .header("Cookie", &phone.join("; "))
        .header("Origin", &origin);
    let completed = stack.send(approvals, &complete).await;
    assert_eq!(
        completed.status,
        200,
        "{}",
        String::from_utf8_lossy(&completed.body)
    );
    phone = set_cookies(&completed)
        .into_iter()
        .filter(|cookie| !cookie.ends_with('='))
        .collect();
    assert!(
        phone.iter().any(|c| c.starts_with("pwa_device=")),
        "{phone:?}"
    );
    phone.join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_database_ends_in_the_routes_own_answers_in_time() {
    let stack = Stack::new().await;
    register_shell(&stack.core).await;
    let (admin, browser) = stack.admin().await;
    let mut approvals = stack.start("approvals").await;
    let phone = paired_phone(&stack, &mut approvals, &browser).await;

    // Another transaction holds the account's row (as a stuck writer elsewhere would).
    let mut holder = sqlx::PgConnection::connect(&stack.db.url())
        .await
        .expect("connection");
    let mut held = holder.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM auth.users WHERE id = $1 FOR UPDATE")
        .bind(admin.id)
        .execute(&mut *held)
        .await
        .expect("lock");

    let launch = stack
        .gateway
        .request("GET", "/pwa/_auth/{proxy+}", "/pwa/_auth/session/launch")
        .query("to", "/pwa/inbox")
        .header("Cookie", &phone);
    let asked = Instant::now();
    let stalled = stack.send(&mut approvals, &launch).await;
    let waited = asked.elapsed();
    assert_eq!(stalled.status, 302, "{}", approvals.output());
    assert_eq!(stalled.header("location"), Some("/pwa/?pwa=unavailable"));
    assert!(waited < ROUTE_BUDGET, "launch answered after {waited:?}");

    let revoke = stack
        .gateway
        .request(
            "DELETE",
            "/api/auth/pwa/v1/{proxy+}",
            "/api/auth/pwa/v1/devices/6f1c2a8e-8a55-4b8e-9d55-2f0b6c2f9e1a",
        )
        .header("Cookie", &browser)
        .header("Origin", &stack.gateway.origin());
    let asked = Instant::now();
    let refused = stack.send(&mut approvals, &revoke).await;
    let waited = asked.elapsed();
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.json()["code"], "UNAVAILABLE");
    assert!(
        waited < ROUTE_BUDGET,
        "the revoke answered after {waited:?}"
    );

    // Once the lock is gone, the same launch renews or passes through to its target.
    held.rollback().await.expect("rollback");
    let launched = stack.send(&mut approvals, &launch).await;
    assert_eq!(launched.status, 302);
    assert_eq!(
        launched.header("location"),
        Some("/pwa/inbox?pwa_launch=1"),
        "{}",
        approvals.output()
    );
}
