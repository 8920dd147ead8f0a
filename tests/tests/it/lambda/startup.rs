//! What each function holds, and what it does without it: the template gives a function only
//! the variables and permissions its crate says it needs, and a function that sends to a queue
//! or signs refuses to start without its variable, naming it.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Stack, needs_of};

const KEK_VARIABLES: [&str; 3] = [
    "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY",
    "CLOUD_IDENTITY_PREVIOUS_KEY",
    "CLOUD_IDENTITY_NEXT_KEY",
];

#[test]
fn each_function_holds_only_what_it_needs() {
    let deployment = k2b_tests::lambda::Deployment::load();
    let mut problems = Vec::new();
    for function in deployment.functions.values() {
        let needs = needs_of(&function.binary);
        let held: BTreeSet<&str> = function.environment.keys().map(String::as_str).collect();
        let mut expected: BTreeSet<&str> =
            ["K2B_ENV", "K2B_LOG_FORMAT", "RUST_LOG", "DATABASE_URL"].into();
        if needs.settings {
            // `APP_URL` is the fallback of the `app.url` setting.
            expected.extend(["APP_SECRET", "APP_URL"]);
        }
        if needs.signing_keys {
            expected.extend(KEK_VARIABLES);
        }
        if needs.wakeups {
            expected.insert("K2B_WAKEUP_QUEUE_URL");
        }
        if needs.live_updates {
            expected.insert("K2B_LIVE_QUEUE_URL");
        }
        if needs.mail_objects {
            expected.insert("K2B_MAIL_BUCKET");
        }
        if needs.app_calls {
            expected.insert("K2B_APP_NETWORKS");
        }
        if held != expected {
            problems.push(format!(
                "{}: holds {held:?}, needs {expected:?}",
                function.binary
            ));
        }
        let mut allowed: BTreeSet<&str> = BTreeSet::new();
        // The admin function holds the queues only for the doctor, which reads their depth.
        let sends = function.binary != "admin";
        if needs.wakeups && sends {
            allowed.insert("sqs:SendMessage* WakeupQueue");
        }
        if needs.live_updates && sends {
            allowed.insert("sqs:SendMessage* LiveQueue");
        }
        if needs.mail_objects {
            allowed.extend([
                "s3:DeleteObject MailBucket",
                "s3:GetObject MailBucket",
                "s3:ListBucket MailBucket",
            ]);
            // Only the function that accepts mail stores attachments; delivery reads and
            // deletes them.
            if function.binary == "mail" {
                allowed.insert("s3:PutObject MailBucket");
            }
        }
        // The doctor reads the depth of both queues.
        if function.binary == "admin" {
            allowed.extend([
                "sqs:GetQueueAttributes WakeupQueue",
                "sqs:GetQueueAttributes LiveQueue",
            ]);
        }
        let granted: BTreeSet<&str> = function.allowed.iter().map(String::as_str).collect();
        if granted != allowed {
            problems.push(format!(
                "{}: may {granted:?}, needs {allowed:?}",
                function.binary
            ));
        }
        if function.environment.get("K2B_ENV").and_then(|v| v.as_str()) != Some("production") {
            problems.push(format!("{}: not in production mode", function.binary));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Without its queue, `outbox` does not fall back to memory: it exits, reports an init error to
/// the Runtime API and logs one line, both naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_missing_its_variable_refuses_to_start_naming_it() {
    let stack = Stack::with_queues().await;
    for (binary, variable) in [
        ("outbox", "K2B_LIVE_QUEUE_URL"),
        ("outbox", "K2B_WAKEUP_QUEUE_URL"),
        ("widgets", "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY"),
        ("icons", "APP_SECRET"),
        ("mail", "K2B_MAIL_BUCKET"),
        ("outbox", "K2B_MAIL_BUCKET"),
        ("maintenance", "K2B_WAKEUP_QUEUE_URL"),
    ] {
        let environment: Vec<(String, String)> = stack
            .environment(binary)
            .into_iter()
            .filter(|(name, _)| name != variable)
            .collect();
        let mut function = stack.start_with(binary, &environment).await;
        let status = function
            .exit_status(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("{binary} without {variable} kept running"));
        assert_eq!(status.code(), Some(2), "{binary} without {variable}");
        let (kind, error) = function.init_error().expect("an init error");
        assert_eq!(kind, "Runtime.ConfigError");
        let message = error["errorMessage"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("configuration error: {variable} ")),
            "{message}"
        );
        let lines: Vec<String> = function.output().lines().map(str::to_string).collect();
        assert_eq!(lines, [message.to_string()], "{binary} without {variable}");
    }
}
