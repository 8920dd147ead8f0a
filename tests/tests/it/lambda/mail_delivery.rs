//! The `outbox` binary delivers outgoing mail: a wake-up from the queue sends a message over
//! SMTP; a process killed in the middle of an attempt (SIGKILL, as Lambda ends a timed-out
//! environment) leaves the message `sending`, and after the recovery scan of the next schedule
//! it is sent once more at most, with the same Message-ID. The SMTP password appears in no log
//! line of either process.

use std::time::Duration;

use k2b_core::mail::accept::{self, MailContext};
use k2b_core::mail::policy::Caller;
use k2b_core::mail::profiles::{self, AdminActor, ProfileInput};
use k2b_core::mail::{message_wakeup, validate};
use k2b_core::smtp_sink::SmtpSink;
use k2b_tests::LogCapture;
use k2b_tests::lambda::{scheduled_event, sqs_batch};
use serde_json::{Value, json};

use super::Stack;

const PASSWORD: &str = "lambda-smtp-pass";

async fn row_of(stack: &Stack, id: uuid::Uuid) -> Value {
    sqlx::query_scalar("SELECT to_jsonb(m) FROM outgoing_mail.messages m WHERE id = $1")
        .bind(id)
        .fetch_one(&stack.db.pool)
        .await
        .expect("row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_killed_mid_attempt_is_sent_again_once_with_the_same_message_id() {
    let logs = LogCapture::start();
    let stack = Stack::with_queues().await;
    let sink = SmtpSink::start("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("smtp peer");
    let (admin, _) = stack.admin().await;
    let input = ProfileInput::parse(&json!({
        "name": "Alerts", "fromAddress": "alerts@example.org", "smtpHost": "127.0.0.1",
        "smtpPort": sink.addr.port(), "smtpSecure": false, "smtpUser": "mailer",
        "smtpPassword": PASSWORD
    }))
    .expect("profile");
    let actor = AdminActor {
        user_id: admin.id,
        uid: admin.uid.clone(),
        request_id: None,
    };
    profiles::put(
        &stack.core.pool,
        &stack.core.settings,
        "alerts",
        input,
        &actor,
    )
    .await
    .expect("profile stored");
    let objects = stack.core.mail_objects.store().await;
    let ctx = MailContext {
        pool: &stack.core.pool,
        objects,
        wakeups: stack.core.wakeups.as_ref(),
        request_id: None,
    };
    let message = validate::parse_message(&json!({
        "to": ["ops@example.org"], "subject": "Disk almost full", "text": "92 % used."
    }))
    .expect("message");
    let sent = accept::send(&ctx, &Caller::core(), message)
        .await
        .expect("accepted");
    let id = sent.row.id;

    // The server takes the message and never answers: the process is killed mid-attempt.
    sink.hold_data(true);
    let mut first = stack.start("outbox").await;
    let wakeup = message_wakeup(id).to_message();
    let (event, _) = sqs_batch("WakeupQueue", &[&wakeup]);
    tokio::select! {
        outcome = first.invoke(event) => panic!("the attempt ended: {:?}", outcome.response()),
        uploaded = sink.wait_for_uploads(1, Duration::from_secs(30)) => assert!(uploaded, "{}", first.output()),
    }
    first.kill();
    let row = row_of(&stack, id).await;
    assert_eq!(row["status"], "sending", "{row}");
    assert_eq!(row["attempt_count"], 1);
    assert!(sink.received().is_empty());

    // Five minutes later the schedule's recovery scan queues it again and sends it.
    sqlx::query(
        "UPDATE outgoing_mail.messages SET updated_at = now() - interval '6 minutes' WHERE id = $1",
    )
    .bind(id)
    .execute(&stack.db.pool)
    .await
    .expect("age the claim");
    sink.hold_data(false);
    // The sweep alone (no following of the live outboxes afterwards).
    let mut second = stack
        .start_overriding("outbox", &[("K2B_OUTBOX_FOLLOW_SECONDS", "0")])
        .await;
    let schedule = stack
        .deployment
        .function("outbox")
        .schedules
        .first()
        .expect("a schedule")
        .clone();
    let report = second.invoke(scheduled_event(&schedule)).await.response();
    assert!(
        report["drained"].as_u64() >= Some(1),
        "{report}\n{}",
        second.output()
    );
    let received = sink.received();
    assert_eq!(received.len(), 1, "{}", second.output());
    let uploads = sink.uploads();
    assert_eq!(uploads.len(), 2, "sent once more, not more");
    let message_ids: Vec<Option<String>> = uploads.iter().map(|u| u.header("Message-ID")).collect();
    assert_eq!(message_ids[0], message_ids[1]);
    assert_eq!(message_ids[0].as_deref(), row["message_id_header"].as_str());
    let row = row_of(&stack, id).await;
    assert_eq!(row["status"], "sent", "{row}");
    assert_eq!(row["attempt_count"], 2);
    // The password went to the server and into no log line.
    assert!(
        uploads[0]
            .auth
            .as_deref()
            .is_some_and(|a| a.contains(PASSWORD))
    );
    // Both processes' output and this process's own lines (the profile and the send ran here).
    let output = logs.text();
    for process in [first.output(), second.output()] {
        if let Some(line) = process.lines().next() {
            assert!(
                output.contains(line),
                "the capture holds its output: {output}"
            );
        }
    }
    assert!(!output.contains(PASSWORD), "{output}");
    assert!(
        !output.contains("bWFpbGVy"),
        "no base64 of the user either: {output}"
    );
    assert!(!row.to_string().contains(PASSWORD));
}
