//! App calls cannot be aimed inward: outside local mode a widget whose app sits on loopback (by
//! address, by an IPv6 form of it, or by a name that resolves to it) settles as `error` without
//! a connection, and the refusal is logged without anything the app could have sent.

use std::sync::Arc;

use k2b_core::http::egress::AppNetworks;
use k2b_tests::LogCapture;

use super::{Widgets, ndjson};
use crate::widgets::{Counters, answers, provider, register, summary_widget};

/// The production rules with nothing listed.
async fn production() -> Widgets {
    Widgets::start(|config| {
        config.app_networks = Arc::new(AppNetworks::parse(None, false).expect("rules"));
    })
    .await
}

/// The title of the apps' answer: distinctive, so that a log line holding it can only be theirs.
const ANSWER_TITLE: &str = "Open egress probe tickets";

fn summary_answer() -> serde_json::Value {
    serde_json::json!({"title": ANSWER_TITLE, "blocks": [{"kind": "stat", "value": 3, "label": "open"}]})
}

#[tokio::test]
async fn loopback_apps_are_refused_by_address_and_by_name() {
    let w = production().await;
    let counters = Arc::new(Counters::default());
    let app = provider(counters.clone(), answers(summary_answer())).await;
    let port = app.origin.rsplit(':').next().expect("port").to_string();
    register(&w.core, "literal", &app.origin, summary_widget()).await;
    register(
        &w.core,
        "mapped",
        &format!("http://[::ffff:127.0.0.1]:{port}"),
        summary_widget(),
    )
    .await;
    register(
        &w.core,
        "named",
        &format!("http://localhost:{port}"),
        summary_widget(),
    )
    .await;
    let log = LogCapture::start();
    let reply = w.signed_in.get("/api/widgets/v1").await;
    assert_eq!(reply.status, 200);
    let lines = ndjson(&reply.text);
    let statuses: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["type"] == "widget")
        .map(|l| {
            (
                l["key"].as_str().unwrap_or_default(),
                l["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(statuses.len(), 3, "{lines:?}");
    assert!(statuses.iter().all(|(_, s)| *s == "error"), "{statuses:?}");
    assert_eq!(
        Counters::get(&counters.started),
        0,
        "no call reached the app"
    );
    let own = log.own_text();
    assert_eq!(own.matches("destination_refused").count(), 3, "{own}");
    assert!(own.contains("loopback"), "{own}");
    assert!(
        !log.text().contains(ANSWER_TITLE),
        "nothing of an answer is logged"
    );
}

#[tokio::test]
async fn the_single_widget_route_refuses_the_same_way() {
    let w = production().await;
    let counters = Arc::new(Counters::default());
    let app = provider(counters.clone(), answers(summary_answer())).await;
    register(&w.core, "inward", &app.origin, summary_widget()).await;
    let reply = w.signed_in.get("/api/widgets/v1/inward/summary").await;
    assert_ne!(reply.status, 200, "{}", reply.text);
    assert_eq!(Counters::get(&counters.started), 0);
}

#[tokio::test]
async fn local_mode_reaches_loopback_apps() {
    let w = Widgets::start(|_| {}).await;
    let counters = Arc::new(Counters::default());
    let app = provider(counters.clone(), answers(summary_answer())).await;
    register(&w.core, "local", &app.origin, summary_widget()).await;
    let reply = w.signed_in.get("/api/widgets/v1").await;
    let lines = ndjson(&reply.text);
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "widget" && l["status"] == "ok"),
        "{lines:?}"
    );
    assert_eq!(Counters::get(&counters.started), 1);
}

#[test]
fn the_variable_is_read_into_the_configuration() {
    let lookup = |value: &'static str| {
        move |name: &str| match name {
            "K2B_APP_NETWORKS" => Some(value.to_string()),
            "DATABASE_URL" => Some("postgres://x@localhost/x".to_string()),
            "APP_SECRET" => Some("s".repeat(40)),
            _ => None,
        }
    };
    let config = k2b_core::config::Config::from_lookup_for(
        k2b_core::config::Mode::Local,
        k2b_core::config::Needs::DATABASE,
        lookup("10.0.0.0/8, apps.internal"),
    )
    .expect("config");
    assert!(
        config
            .app_networks
            .check(None, "10.1.1.1".parse().expect("ip"))
            .is_ok()
    );
    let error = k2b_core::config::Config::from_lookup_for(
        k2b_core::config::Mode::Local,
        k2b_core::config::Needs::DATABASE,
        lookup("10.0.0.0/99"),
    )
    .expect_err("refused");
    assert_eq!(error.variable, "K2B_APP_NETWORKS");
}
