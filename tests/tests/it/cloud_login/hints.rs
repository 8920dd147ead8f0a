//! Scenario 30: the decision wakes a browser held in another execution environment. Each
//! environment here is a core of its own with its own connection pool; the only link between
//! them is Postgres `LISTEN/NOTIFY`.

use std::time::{Duration, Instant};

use k2b_core::Core;
use k2b_core::cloud_login::login::LoginState;
use k2b_tests::pool_with_max;
use uuid::Uuid;

use super::{CloudLogin, hold};

async fn environment(cloud: &CloudLogin) -> Core {
    Core::with_pool(cloud.pwa.db.config(), pool_with_max(&cloud.pwa.db, 4).await)
}

#[tokio::test]
async fn a_decision_in_one_environment_wakes_the_waiter_in_another() {
    let cloud = CloudLogin::new().await;
    let (_, mut browser) = cloud.person("ada", false).await;
    let device = cloud.enroll(&mut browser).await;
    let waiting_env = environment(&cloud).await;
    let started = cloud.start_login("ada", "login").await;
    let id = started["requestId"].as_str().expect("id").to_string();
    let held = {
        let started = started.clone();
        tokio::spawn(async move { hold(&waiting_env, &started, Duration::from_secs(15)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let decided = Instant::now();
    // The decision goes through the router's own environment (another pool).
    cloud
        .decide(&device, &id, "approve")
        .await
        .expect(200, None);
    let (state, at) = held.await.expect("join");
    assert_eq!(state, Ok(LoginState::Approved));
    // Well under the 2 s re-read: the notification woke it, not the poll.
    assert!(
        at - decided < Duration::from_millis(1500),
        "{:?}",
        at - decided
    );
}

/// Notifies the decision channel from a plain connection, as any environment's commit does.
async fn notify(cloud: &CloudLogin, payload: &str) {
    sqlx::query("SELECT pg_notify('app_login_decided', $1)")
        .bind(payload)
        .execute(&cloud.core().pool)
        .await
        .expect("notify");
}

#[tokio::test]
async fn only_the_notification_of_its_own_request_wakes_a_waiter() {
    let cloud = CloudLogin::new().await;
    cloud.person("ada", false).await;
    let mine = cloud.start_login("ada", "login").await;
    let other = cloud.start_login("ada", "login").await;
    let env = environment(&cloud).await;
    let id = Uuid::parse_str(mine["requestId"].as_str().expect("id")).expect("uuid");
    let held = {
        let mine = mine.clone();
        tokio::spawn(async move { hold(&env, &mine, Duration::from_secs(15)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Decided behind the waiter's back (no notification of its own), then another request's
    // notification: the waiter must not re-read for it, so it is still waiting.
    cloud
        .exec(
            "UPDATE auth.app_logins SET state = 'denied' WHERE id = $1",
            &id.to_string(),
        )
        .await;
    notify(&cloud, other["requestId"].as_str().expect("id")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !held.is_finished(),
        "woken by another request's notification"
    );
    // Its own notification wakes it at once, long before the 2 s re-read.
    let notified = Instant::now();
    notify(&cloud, &id.to_string()).await;
    let (state, at) = held.await.expect("join");
    assert_eq!(state, Ok(LoginState::Denied));
    assert!(
        at - notified < Duration::from_millis(500),
        "{:?}",
        at - notified
    );
}

#[tokio::test]
async fn many_held_requests_share_one_listening_connection() {
    let cloud = CloudLogin::new().await;
    cloud.person("ada", false).await;
    // A pool of 4 connections and 20 browsers holding their status at once.
    let env = environment(&cloud).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        let started = cloud.start_login("nobody", "login").await;
        let env = env.clone();
        held.push(tokio::spawn(async move {
            hold(&env, &started, Duration::from_secs(3)).await.0
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listening: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_one(&cloud.core().pool)
    .await
    .expect("activity");
    assert_eq!(listening, 1, "one listening connection for every waiter");
    for waiter in held {
        assert_eq!(waiter.await.expect("join"), Ok(LoginState::Pending));
    }
}
