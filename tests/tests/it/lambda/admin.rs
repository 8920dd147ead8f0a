//! The `admin` function: the operator's commands inside the VPC, invoked directly
//! (`aws lambda invoke`) with the template's environment.

use k2b_tests::lambda::Outcome;
use serde_json::{Value, json};

use super::Stack;

#[tokio::test]
async fn the_admin_function_runs_the_operator_commands() {
    let stack = Stack::with_queues().await;
    k2b_tests::register_pwa_shell(&stack.db.pool).await;
    let mut process = stack.start("admin").await;

    let doctor: Value = process
        .invoke(json!({"command": ["doctor"]}))
        .await
        .response();
    let checks = doctor["result"]["checks"].as_array().expect("checks");
    let verdict = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["verdict"].clone())
            .unwrap_or_else(|| panic!("no check {name}: {doctor}"))
    };
    // The template gives the function what every check needs: the queues are read on the SQS
    // API, the keys open under the installation's key-encryption key.
    for name in [
        "database",
        "migrations",
        "key-encryption",
        "signing-keys:session",
        "queue:wakeup",
        "queue:live",
        "app-url",
        "pwa-shell",
        "registry",
        "clock",
    ] {
        assert_eq!(verdict(name), "ok", "{name}: {}", doctor["output"]);
    }
    assert_eq!(doctor["ok"], true, "{}", doctor["output"]);
    let output = doctor["output"].as_str().expect("output");
    assert_eq!(output.lines().count(), checks.len() + 1, "{output}");
    assert!(output.ends_with("all passed"), "{output}");

    let status: Value = process
        .invoke(json!({"command": "keys status"}))
        .await
        .response();
    assert_eq!(status["ok"], true);
    let keys = status["result"]["keys"].as_array().expect("keys");
    let kid = keys
        .iter()
        .find(|k| k["purpose"] == "session" && k["state"] == "active")
        .and_then(|k| k["kid"].as_str())
        .expect("active session key")
        .to_string();
    let revoked: Value = process
        .invoke(json!({"command": ["keys", "revoke", kid, "--reason", "leaked in a log"]}))
        .await
        .response();
    assert_eq!(revoked["ok"], true, "{revoked}");
    let state: String = sqlx::query_scalar("SELECT state FROM auth.signing_keys WHERE kid = $1")
        .bind(&kid)
        .fetch_one(&stack.db.pool)
        .await
        .expect("state");
    assert_eq!(state, "revoked");

    // Words it does not know fail the invocation with the reason.
    match process.invoke(json!({"command": ["reboot"]})).await {
        Outcome::Error { body, .. } => {
            assert!(
                body["errorMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains("reboot")),
                "{body}"
            );
        }
        other => panic!("expected an invocation error, got {other:?}"),
    }
    match process.invoke(json!({"words": 1})).await {
        Outcome::Error { .. } => {}
        other => panic!("expected an invocation error, got {other:?}"),
    }
}
