//! Retention (spec mail §10, scenario 39): content purged after the content retention, records
//! deleted after the record retention in batches of 1000, a shorter record retention wins, and
//! the daily run happens once a day.

use k2b_core::mail::admin::Retention;
use k2b_core::mail::retention;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{MailSite, SENDER, message};

impl MailSite {
    /// Stores a sent message that is `days` old; returns its id.
    async fn old_message(&self, days: i32) -> uuid::Uuid {
        let id = self
            .queued(SENDER, message("a@example.org", "Old news"))
            .await;
        sqlx::query(
            "UPDATE outgoing_mail.messages SET status = 'sent', sent_at = now(),
                    created_at = now() - make_interval(days => $2) WHERE id = $1",
        )
        .bind(id)
        .bind(days)
        .execute(&self.core.pool)
        .await
        .expect("age");
        id
    }

    /// Makes today's retention run look like yesterday's.
    async fn ran_yesterday(&self) {
        sqlx::query("UPDATE outgoing_mail.daily_runs SET last_day = last_day - 1")
            .execute(&self.core.pool)
            .await
            .expect("yesterday");
    }

    async fn retention_step(&self, content_days: i64, record_days: i64) -> retention::Removed {
        retention::step(
            &self.core.pool,
            self.core.mail_objects.store().await,
            Retention {
                content_days,
                record_days,
            },
        )
        .await
        .expect("retention step")
    }
}

#[tokio::test]
async fn old_content_is_purged_and_the_record_stays() {
    let site = MailSite::start().await;
    let old = site.old_message(100).await;
    let recent = site.old_message(10).await;
    let removed = site.retention_step(90, 365).await;
    assert_eq!(
        removed,
        retention::Removed {
            deleted: 0,
            purged: 1
        }
    );
    let row = site.row(old).await;
    assert_eq!(row["subject"], "Old news");
    assert_eq!(row["text_body"], Value::Null);
    assert!(row["content_purged_at"].is_string(), "{row}");
    assert!(site.row(recent).await["text_body"].is_string());
    let (status, content) = site
        .admin(Method::GET, &format!("/messages/{old}/content"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{content}");
    assert_eq!(content["purged"], true, "{content}");
    // The app's own log still lists the record, without its text.
    let (_, listed) = site.list(SENDER, &format!("ids={old}")).await;
    assert_eq!(listed["items"][0]["subject"], "Old news", "{listed}");
    assert!(listed["items"][0].get("text").is_none_or(Value::is_null));
}

#[tokio::test]
async fn old_records_are_deleted_a_thousand_at_a_time_and_free_their_keys() {
    let site = MailSite::start().await;
    sqlx::query(
        "INSERT INTO outgoing_mail.messages (id, app_id, profile_id, profile_key, lane,
             to_addresses, recipient_count, subject, text_body, message_id_header, status,
             deadline_at, created_at, idempotency_key)
         SELECT gen_random_uuid(), $1, p.id, p.key, 'bulk', ARRAY['old@example.org'], 1, 'Old',
             'Old', '<' || gen_random_uuid() || '@example.org>', 'sent',
             now() - interval '399 days', now() - interval '400 days', 'key-' || n
         FROM outgoing_mail.profiles p, generate_series(1, 1001) AS n WHERE p.key = 'alerts'",
    )
    .bind(SENDER)
    .execute(&site.core.pool)
    .await
    .expect("old rows");
    assert_eq!(site.retention_step(90, 365).await.deleted, 1000);
    assert_eq!(site.retention_step(90, 365).await.deleted, 1);
    assert_eq!(site.message_count().await, 0);
    // A deleted record's key is free again.
    let (status, body) = site
        .send(
            SENDER,
            json!({"to": ["a@example.org"], "subject": "Again", "text": "t", "key": "key-7"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["subject"], "Again");
}

#[tokio::test]
async fn a_shorter_record_retention_deletes_before_content_is_purged() {
    let site = MailSite::start().await;
    let sixty = site.old_message(60).await;
    let twenty = site.old_message(20).await;
    let removed = site.retention_step(90, 30).await;
    assert_eq!(removed.deleted, 1);
    let gone: i64 = sqlx::query_scalar("SELECT count(*) FROM outgoing_mail.messages WHERE id = $1")
        .bind(sixty)
        .fetch_one(&site.core.pool)
        .await
        .expect("count");
    assert_eq!(gone, 0);
    assert!(site.row(twenty).await["text_body"].is_string());
}

#[tokio::test]
async fn the_daily_run_happens_once_a_day() {
    let site = MailSite::start().await;
    assert!(
        retention::claim_today(&site.core.pool)
            .await
            .expect("claim")
    );
    assert!(
        !retention::claim_today(&site.core.pool)
            .await
            .expect("claim")
    );
    site.ran_yesterday().await;
    assert!(
        retention::claim_today(&site.core.pool)
            .await
            .expect("claim")
    );
    // The scheduled run of the outbox function does it, with the stored retention.
    site.ran_yesterday().await;
    let old = site.old_message(100).await;
    let drainer = site.core.drainer();
    let report = outbox::scheduled(&site.core, &drainer, None)
        .await
        .expect("scheduled run");
    assert_eq!(
        report.mail_retention,
        Some(retention::Removed {
            deleted: 0,
            purged: 1
        })
    );
    assert_eq!(site.row(old).await["text_body"], Value::Null);
    let again = outbox::scheduled(&site.core, &drainer, None)
        .await
        .expect("scheduled run");
    assert_eq!(again.mail_retention, None);
}
