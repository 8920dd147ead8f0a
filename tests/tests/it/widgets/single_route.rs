//! `GET /api/widgets/v1/{appId}/{widgetId}` (scenarios 1–12).

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode as AxumStatus, header};
use k2b_core::identity::workload;
use k2b_tests::LogCapture;
use reqwest::StatusCode;
use serde_json::{Value, json};
use widgets::WidgetsOptions;

use super::{ActorKind, Behaviour, Provider, Setup, answers, behaviour, register, warnings};

fn weather_widgets() -> Value {
    json!([{"id": "current", "path": "/api/weather/widget/current", "title": "Weather",
            "sizes": ["small", "medium"], "defaultSize": "small"}])
}

fn weather_body() -> Value {
    json!({"title": "Weather", "blocks": [{"kind": "stat", "value": 21, "label": "°C"}]})
}

async fn weather(setup: &Setup, behaviour: Behaviour) -> Provider {
    let provider = setup.provider(behaviour).await;
    register(&setup.core, "weather", &provider.origin, weather_widgets()).await;
    provider
}

/// Makes the registry unreadable: a route that read it would answer 503.
async fn break_registry(setup: &Setup) {
    sqlx::query("ALTER TABLE registry.apps RENAME TO apps_unavailable")
        .execute(&setup.core.pool)
        .await
        .expect("rename");
}

/// Scenario 1: OAuth credentials need `read` or `admin`; nothing runs before that check.
#[tokio::test]
async fn scenario_1_oauth_scopes_are_checked_before_anything_runs() {
    for scopes in [vec![], vec!["openid", "profile"], vec!["write"]] {
        let setup = Setup::with_actor(
            WidgetsOptions::default(),
            Some(ActorKind::OAuth(scopes.clone())),
        )
        .await;
        let provider = weather(&setup, answers(weather_body())).await;
        break_registry(&setup).await;
        let before = setup.metrics();
        let response = setup
            .get("/api/widgets/v1/weather/current")
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{scopes:?}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(
            body,
            json!({"code": "FORBIDDEN", "message": "OAuth scope read or admin is required"})
        );
        assert!(provider.requests().is_empty());
        assert_eq!(setup.metrics().signer_guards, before.signer_guards);
        assert_eq!(setup.metrics().sign_success, before.sign_success);
    }
    for scopes in [vec!["read"], vec!["admin"]] {
        let setup = Setup::with_actor(
            WidgetsOptions::default(),
            Some(ActorKind::OAuth(scopes.clone())),
        )
        .await;
        let provider = weather(&setup, answers(weather_body())).await;
        let before = setup.metrics();
        let response = setup
            .get("/api/widgets/v1/weather/current")
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::OK, "{scopes:?}");
        assert_eq!(provider.requests().len(), 1);
        assert_eq!(setup.metrics().signer_guards - before.signer_guards, 1);
        assert_eq!(setup.metrics().sign_success - before.sign_success, 1);
        let claims = provider.requests()[0].claims();
        assert_eq!(claims["credential_kind"], "oauth");
        assert_eq!(claims["scopes"], json!(scopes));
    }
}

/// Scenario 2: invalid request ids are dropped: not signed, not forwarded.
#[tokio::test]
async fn scenario_2_invalid_request_ids_are_dropped() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let provider = weather(&setup, answers(weather_body())).await;
    let long = "x".repeat(201);
    for id in ["two words".as_bytes(), "ümlaut".as_bytes(), long.as_bytes()] {
        let response = setup
            .get("/api/widgets/v1/weather/current")
            .header("x-request-id", HeaderValue::from_bytes(id).expect("value"))
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    for seen in requests {
        assert!(seen.header("x-request-id").is_none());
        assert!(seen.claims().get("request_id").is_none());
    }
    // A valid one is forwarded and signed.
    setup
        .get("/api/widgets/v1/weather/current")
        .header("x-request-id", "req-123")
        .send()
        .await
        .expect("get");
    let last = provider.requests().pop().expect("request");
    assert_eq!(last.header("x-request-id"), Some("req-123"));
    assert_eq!(last.claims()["request_id"], "req-123");
}

/// Scenario 3: an empty widget is 204 with a JSON content type; the call goes to the origin's
/// internal route with the fitted size, the invocation and never the browser's cookie.
#[tokio::test]
async fn scenario_3_empty_widget_and_the_exact_target() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let provider = weather(
        &setup,
        behaviour(|_| async { (AxumStatus::NO_CONTENT, "ignored") }),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.bytes().await.expect("body").is_empty());
    let seen = provider.requests().pop().expect("called");
    assert_eq!(seen.uri, "/api/_internal/widgets/v1/current?size=small");
    assert!(seen.header("cookie").is_none());
    let bearer = seen.header("authorization").expect("authorization");
    assert!(bearer.starts_with("Bearer ey"), "{bearer}");
    assert_eq!(seen.claims()["aud"], "app:weather");
}

/// Scenario 4: one signer guard, the invocation's claims, and the forwarded headers.
#[tokio::test]
async fn scenario_4_the_invocation_and_forwarded_headers() {
    let setup = Setup::with_actor(WidgetsOptions::default(), Some(ActorKind::Session)).await;
    let provider = weather(&setup, answers(weather_body())).await;
    let before = setup.metrics();
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .header("authorization", "Bearer source-oauth")
        .header("x-cloud-locale", "de-CH")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .header("tracestate", "vendor=value")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(setup.metrics().signer_guards - before.signer_guards, 1);

    let seen = provider.requests().pop().expect("called");
    let claims = seen.claims();
    assert_eq!(claims["aud"], "app:weather");
    assert_eq!(claims["act"], json!({"sub": "app:core"}));
    assert_eq!(claims["op"], "widget.read:current");
    assert_eq!(claims["schema_hash"], Value::Null);
    assert_eq!(claims["token_use"], "invocation");
    assert_eq!(claims["sub"], setup.user.id.to_string());
    assert_eq!(claims["access_subject_id"], setup.user.id.to_string());
    assert_eq!(claims["credential_kind"], "session");
    assert_eq!(
        claims["exp"].as_u64(),
        claims["iat"].as_u64().map(|i| i + 30)
    );

    let bearer = seen.header("authorization").expect("authorization");
    assert_ne!(bearer, "Bearer source-oauth");
    assert!(seen.header("cookie").is_none());
    assert_eq!(seen.header("x-cloud-locale"), Some("de-CH"));
    assert_eq!(
        seen.header("x-cloud-invocation-operation"),
        Some("widget.read:current")
    );
    assert_eq!(
        seen.header("traceparent"),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(seen.header("tracestate"), Some("vendor=value"));
}

/// Scenario 5: unknown widgets and apps are 404.
#[tokio::test]
async fn scenario_5_unknown_widgets_are_not_found() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let provider = weather(&setup, answers(weather_body())).await;
    for path in [
        "/api/widgets/v1/weather/missing",
        "/api/widgets/v1/other/current",
    ] {
        let response = setup.get(path).send().await.expect("get");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["message"], "Widget not found");
    }
    assert!(provider.requests().is_empty());
}

/// Scenario 6: an app's workload credential used as an API key is refused.
#[tokio::test]
async fn scenario_6_reserved_workload_credentials_are_refused() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let provider = weather(&setup, answers(weather_body())).await;
    for scope in ["identity:invoke", "identity:oauth-issue"] {
        let mut conn = setup.core.pool.acquire().await.expect("conn");
        let (token, _) = workload::issue_app_credential(&mut conn, "weather", &[scope])
            .await
            .expect("credential");
        let response = setup
            .client
            .get(format!("{}/api/widgets/v1/weather/current", setup.base))
            .bearer_auth(&token)
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{scope}");
        let body: Value = response.json().await.expect("json");
        assert_eq!(
            body,
            json!({"code": "FORBIDDEN", "message": "App workload credentials require a dedicated Core authority route"})
        );
    }
    // No credential at all is 401.
    let anonymous = setup
        .client
        .get(format!("{}/api/widgets/v1/weather/current", setup.base))
        .send()
        .await
        .expect("get");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let body: Value = anonymous.json().await.expect("json");
    assert_eq!(body["message"], "Authentication required");
    assert!(provider.requests().is_empty());
}

/// Scenario 7: the parsed value is re-serialized; the provider's headers never pass.
#[tokio::test]
async fn scenario_7_provider_headers_are_not_forwarded() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    weather(
        &setup,
        behaviour(|_| async {
            (
                [
                    (header::CONTENT_TYPE, "text/html"),
                    (header::SET_COOKIE, "tracking=1; Path=/"),
                ],
                weather_body().to_string(),
            )
        }),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().get("set-cookie").is_none());
    let body: Value = response.json().await.expect("json");
    assert_eq!(body, weather_body());
}

/// Scenario 8: an unsafe link or an oversized body is a 502 with a JSON body.
#[tokio::test]
async fn scenario_8_unsafe_or_oversized_answers_are_bad_gateway() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let unsafe_body = json!({"title": "W", "href": "javascript:alert(1)", "blocks": []});
    let big = json!({"title": "W", "meta": "x".repeat(140 * 1024), "blocks": []});
    for (body, message) in [
        (unsafe_body, "Widget returned an invalid response"),
        (big, "Widget returned invalid or oversized JSON"),
    ] {
        let setup_app = weather(&setup, answers(body)).await;
        let response = setup
            .get("/api/widgets/v1/weather/current")
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["message"], message);
        assert_eq!(setup_app.requests().len(), 1);
    }
    // A streamed body over the limit (no Content-Length) is cut off too.
    weather(
        &setup,
        behaviour(|_| async {
            let chunks = (0..20).map(|_| Ok::<_, std::io::Error>(vec![b' '; 8 * 1024]));
            axum::body::Body::from_stream(futures::stream::iter(chunks))
        }),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "Widget returned invalid or oversized JSON");
}

/// Scenario 9: signing that does not finish within the budget is a 504.
#[tokio::test]
async fn scenario_9_signing_past_the_budget_is_a_gateway_timeout() {
    let setup = Setup::new(WidgetsOptions {
        timeout: Duration::from_millis(400),
        ..WidgetsOptions::default()
    })
    .await;
    let provider = weather(&setup, answers(weather_body())).await;
    // Another session holds the invocation key row: the signer guard's FOR SHARE waits.
    let mut blocker = setup.core.pool.begin().await.expect("begin");
    sqlx::query("SELECT kid FROM auth.signing_keys WHERE purpose = 'invocation' FOR UPDATE")
        .fetch_all(&mut *blocker)
        .await
        .expect("lock");
    let log = LogCapture::start();
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "Widget deadline exceeded");
    assert!(provider.requests().is_empty());
    let logged = warnings(&log.own_text());
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["fields"]["phase"], "signing");
    assert_eq!(logged[0]["fields"]["reason"], "deadline_exceeded");
    blocker.rollback().await.expect("rollback");
}

/// Scenario 10: unknown fields are dropped, safe links kept.
#[tokio::test]
async fn scenario_10_extensions_are_stripped_and_links_kept() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    weather(
        &setup,
        answers(
            json!({"title": "W", "href": "https://weather.example/today",
                       "extension": {"x": 1}, "blocks": []}),
        ),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        json!({"title": "W", "href": "https://weather.example/today", "blocks": []})
    );
}

/// Scenario 11: a schema violation is one warning with ids, phase and reason, and nothing of
/// the provider's answer.
#[tokio::test]
async fn scenario_11_schema_violations_are_logged_once_without_content() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    weather(
        &setup,
        answers(json!({"title": "Secret provider title", "blocks": [{"kind": "unknown"}]})),
    )
    .await;
    let log = LogCapture::start();
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let text = log.own_text();
    let logged = warnings(&text);
    assert_eq!(logged.len(), 1, "{text}");
    assert_eq!(
        logged[0]["fields"]["message"],
        "Widget proxy rejected response"
    );
    assert_eq!(logged[0]["fields"]["source"], "widgets");
    assert_eq!(logged[0]["fields"]["app_id"], "weather");
    assert_eq!(logged[0]["fields"]["widget_id"], "current");
    assert_eq!(logged[0]["fields"]["phase"], "response");
    assert_eq!(logged[0]["fields"]["reason"], "invalid_schema");
    assert!(!log.text().contains("Secret provider title"));
}

/// Scenario 12: a provider past the budget, or answering 504, is a 504 without its text.
#[tokio::test]
async fn scenario_12_provider_timeouts_are_gateway_timeouts() {
    let setup = Setup::new(WidgetsOptions {
        timeout: Duration::from_millis(1500),
        ..WidgetsOptions::default()
    })
    .await;
    weather(
        &setup,
        behaviour(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            axum::Json(weather_body())
        }),
    )
    .await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "Widget deadline exceeded");

    weather(
        &setup,
        behaviour(|_| async { (AxumStatus::GATEWAY_TIMEOUT, "upstream says: too slow") }),
    )
    .await;
    let log = LogCapture::start();
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let text = response.text().await.expect("body");
    assert!(!text.contains("too slow"));
    let logged = warnings(&log.own_text());
    assert_eq!(logged[0]["fields"]["reason"], "upstream_timeout");
    assert_eq!(logged[0]["fields"]["upstream_status"], 504);
}

/// Scenario 16 (single route): the size query is fitted to the widget.
#[tokio::test]
async fn scenario_16_single_route_asks_the_fitted_size() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    let provider = weather(&setup, answers(weather_body())).await;
    for (query, asked) in [
        ("?size=medium", "medium"),
        ("?size=large", "small"),
        ("", "small"),
    ] {
        let response = setup
            .get(&format!("/api/widgets/v1/weather/current{query}"))
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), StatusCode::OK);
        let seen = provider.requests().pop().expect("called");
        assert_eq!(
            seen.uri,
            format!("/api/_internal/widgets/v1/current?size={asked}")
        );
    }
}

/// Other non-2xx answers and unreachable providers are 502, logged with their reason.
#[tokio::test]
async fn failing_and_unreachable_providers_are_bad_gateway() {
    let setup = Setup::new(WidgetsOptions::default()).await;
    weather(
        &setup,
        behaviour(|_| async { (AxumStatus::NOT_FOUND, "nope") }),
    )
    .await;
    let log = LogCapture::start();
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "Widget is unavailable");
    let logged = warnings(&log.own_text());
    assert_eq!(logged[0]["fields"]["reason"], "upstream_status");
    assert_eq!(logged[0]["fields"]["upstream_status"], 404);

    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let origin = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    register(&setup.core, "weather", &origin, weather_widgets()).await;
    let response = setup
        .get("/api/widgets/v1/weather/current")
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let logged = warnings(&log.own_text());
    assert_eq!(
        logged.last().expect("logged")["fields"]["reason"],
        "operation_failed"
    );
}
