//! Transport rules and the shell: scenarios 2, 3 and 23 of spec/approvals.md §6.

use http::Method;
use serde_json::json;

use super::{Jar, Options, Pwa, device_id};

/// Scenario 2: without the shell, start, claim, complete and renew answer 503 (a phone is never
/// signed out by it) and launch goes to the unavailable page; management still works.
#[tokio::test]
async fn scenario_2_no_shell() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (_, secret) = pwa.start(&mut browser).await;
    let (mut phone, device) = pwa.pair(&mut browser, "android").await;
    pwa.unregister_shell().await;

    pwa.post("/api/auth/pwa/v1/pairings", &mut browser, None)
        .await
        .expect(503, Some("UNAVAILABLE"));
    let claim = pwa.claim(&mut Jar::default(), &secret, "ios").await;
    claim.expect(503, Some("UNAVAILABLE"));
    assert_eq!(
        claim.body["message"],
        "The mobile app is not available right now."
    );
    pwa.complete(&mut phone)
        .await
        .expect(503, Some("UNAVAILABLE"));
    let renew = pwa.renew(&mut phone).await;
    renew.expect(503, Some("UNAVAILABLE"));
    assert!(renew.set_cookies.is_empty(), "the device cookie is kept");
    assert!(phone.get("pwa_device").is_some());
    let launch = pwa
        .get("/pwa/_auth/session/launch?to=/pwa/", &mut phone)
        .await;
    assert_eq!(launch.status.as_u16(), 302);
    assert_eq!(launch.location(), "/pwa/?pwa=unavailable");

    pwa.get("/api/auth/pwa/v1/devices", &mut browser)
        .await
        .expect(200, None);
    pwa.send(
        Method::PATCH,
        "/pwa/_auth/session",
        &mut phone,
        Options {
            body: Some(json!({"name": "Mine"})),
            ..Options::default()
        },
    )
    .await
    .expect(204, None);
    pwa.send(
        Method::DELETE,
        &format!("/api/auth/pwa/v1/devices/{device}"),
        &mut browser,
        Options::default(),
    )
    .await
    .expect(204, None);
    assert!(pwa.probe(&phone).await.is_none());

    pwa.register_shell().await;
    let (mut second, _) = pwa.pair(&mut browser, "android").await;
    pwa.unregister_shell().await;
    pwa.send(
        Method::DELETE,
        "/pwa/_auth/session",
        &mut second,
        Options::default(),
    )
    .await
    .expect(204, None);
    assert!(device_id(&second).is_none(), "device cookie cleared");
}

/// Scenario 3: the `Origin` rule, privacy headers, the body limit and bearer credentials.
#[tokio::test]
async fn scenario_3_transport_rules() {
    let pwa = Pwa::new().await;
    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let (mut phone, _) = pwa.pair(&mut browser, "android").await;

    let missing = pwa
        .send(
            Method::DELETE,
            "/pwa/_auth/session",
            &mut phone.clone(),
            Options {
                no_origin: true,
                ..Options::default()
            },
        )
        .await;
    missing.expect(403, Some("FORBIDDEN"));
    assert_eq!(missing.body["message"], "Use Cloud on the web for this.");
    pwa.send(
        Method::DELETE,
        "/pwa/_auth/session",
        &mut phone.clone(),
        Options {
            origin: Some("https://evil.example".into()),
            ..Options::default()
        },
    )
    .await
    .expect(403, Some("FORBIDDEN"));
    assert!(pwa.probe(&phone).await.is_some(), "nothing happened");
    let forwarded = pwa
        .send(
            Method::DELETE,
            "/pwa/_auth/session",
            &mut phone,
            Options {
                headers: vec![
                    ("x-forwarded-host".into(), "evil.example".into()),
                    ("x-forwarded-proto".into(), "http".into()),
                ],
                ..Options::default()
            },
        )
        .await;
    forwarded.expect(204, None);
    assert_eq!(forwarded.headers["cache-control"], "no-store");
    assert_eq!(forwarded.headers["referrer-policy"], "no-referrer");
    let vary: Vec<&str> = forwarded
        .headers
        .get_all("vary")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert!(vary.iter().any(|v| v.contains("Origin")), "{vary:?}");

    // A valid claim padded with JSON whitespace: 8192 bytes pass the limit, 8193 do not.
    let claim_body = |size: usize| {
        let body = format!(
            "{{\"secret\":\"{}\",\"platform\":\"ios\"}}",
            k2b_core::approvals::create_secret()
        );
        format!("{body}{}", " ".repeat(size - body.len()))
    };
    let claim_raw = |raw: String| Options {
        raw_body: Some(raw),
        ..Options::default()
    };
    pwa.send(
        Method::POST,
        "/pwa/_auth/pairings/claim",
        &mut Jar::default(),
        claim_raw(claim_body(8192)),
    )
    .await
    .expect(410, Some("EXPIRED"));
    pwa.send(
        Method::POST,
        "/pwa/_auth/pairings/claim",
        &mut Jar::default(),
        claim_raw(claim_body(8193)),
    )
    .await
    .expect(400, Some("INVALID_REQUEST"));
    for bad in [
        json!({"secret": "x", "platform": "ios"}),
        json!({"secret": k2b_core::approvals::create_secret(), "platform": "windows"}),
        json!({"secret": k2b_core::approvals::create_secret(), "platform": "ios", "extra": 1}),
    ] {
        pwa.post("/pwa/_auth/pairings/claim", &mut Jar::default(), Some(bad))
            .await
            .expect(400, Some("INVALID_REQUEST"));
    }

    let bearer = pwa
        .send(
            Method::GET,
            "/api/auth/pwa/v1/devices",
            &mut browser,
            Options {
                headers: vec![("authorization".into(), "Bearer cld_something".into())],
                ..Options::default()
            },
        )
        .await;
    bearer.expect(403, Some("FORBIDDEN"));
    pwa.get("/api/auth/pwa/v1/devices", &mut Jar::default())
        .await
        .expect(403, Some("REAUTHENTICATE"));
    pwa.get("/api/auth/pwa/v1/pairings/not-a-uuid", &mut browser)
        .await
        .expect(400, Some("INVALID_REQUEST"));
    let wrong_method = pwa
        .send(
            Method::PUT,
            "/pwa/_auth/session",
            &mut browser,
            Options::default(),
        )
        .await;
    wrong_method.expect(400, Some("INVALID_REQUEST"));
    assert_eq!(wrong_method.headers["cache-control"], "no-store");
}

/// Scenario 23: the shell is only app `pwa` owning `/pwa`; the status never carries the code;
/// the waiting answer carries its fields.
#[tokio::test]
async fn scenario_23_shell_and_contract_shapes() {
    let pwa = Pwa::without_shell().await;
    assert!(
        !k2b_core::pwa::shell_available(&pwa.core)
            .await
            .expect("shell")
    );
    let mut conn = pwa.core.pool.acquire().await.expect("connection");
    let entry = |id: &str, route: &str| {
        json!({"id": id, "name": "Shell", "icon": "ti ti-device-mobile", "description": "d",
               "baseUrl": "http://127.0.0.1:9", "routes": [route]})
    };
    k2b_core::registry::store::upsert(
        &mut conn,
        &entry("pwa", "/other"),
        k2b_core::registry::APP_REGISTRY_TTL,
    )
    .await
    .expect("upsert");
    assert!(
        !k2b_core::pwa::shell_available(&pwa.core)
            .await
            .expect("shell")
    );
    // Only the shell app may claim /pwa at all.
    assert!(
        k2b_core::registry::store::upsert(
            &mut conn,
            &entry("shell", "/pwa"),
            k2b_core::registry::APP_REGISTRY_TTL,
        )
        .await
        .is_err()
    );
    assert!(
        !k2b_core::pwa::shell_available(&pwa.core)
            .await
            .expect("shell")
    );
    pwa.register_shell().await;
    assert!(
        k2b_core::pwa::shell_available(&pwa.core)
            .await
            .expect("shell")
    );

    let ada = pwa.user("Ada", false).await;
    let mut browser = pwa.browser(&ada).await;
    let mut phone = Jar::default();
    let (id, secret) = pwa.start(&mut browser).await;
    let status = pwa
        .get(&format!("/api/auth/pwa/v1/pairings/{id}"), &mut browser)
        .await;
    status.expect(200, None);
    assert_eq!(status.body["state"], "pending");
    assert_eq!(status.body["device"], serde_json::Value::Null);
    let keys: Vec<&String> = status.body.as_object().expect("object").keys().collect();
    assert_eq!(
        keys,
        ["attemptsLeft", "claimUntil", "device", "expiresAt", "state"]
    );
    pwa.claim(&mut phone, &secret, "other")
        .await
        .expect(200, None);
    let status = pwa
        .get(&format!("/api/auth/pwa/v1/pairings/{id}"), &mut browser)
        .await;
    assert!(status.body.get("code").is_none());
    assert_eq!(status.body["device"]["name"], "Phone");
    let waiting = pwa.complete(&mut phone).await;
    waiting.expect(202, None);
    for field in ["state", "code", "account", "expiresAt"] {
        assert!(waiting.body.get(field).is_some(), "{field}");
    }
}

/// Per-client rate limit (`security.rate_limit_per_second`): over the limit a route answers
/// 429 with `Retry-After`.
#[tokio::test]
async fn requests_over_the_rate_limit_are_refused() {
    let pwa = Pwa::new().await;
    pwa.core
        .settings
        .set("security.rate_limit_per_second", json!(1))
        .await
        .expect("setting");
    let mut refused = Vec::new();
    for _ in 0..5 {
        let reply = pwa
            .post(
                "/pwa/_auth/pairings/claim",
                &mut Jar::default(),
                Some(json!({"secret": k2b_core::approvals::create_secret(), "platform": "ios"})),
            )
            .await;
        if reply.status.as_u16() == 429 {
            refused.push(reply);
        } else {
            reply.expect(410, Some("EXPIRED"));
        }
    }
    assert!(refused.len() >= 3, "at most one request per second passes");
    assert_eq!(refused[0].code(), "RATE_LIMITED");
    assert_eq!(refused[0].headers["retry-after"], "1");
    assert_eq!(refused[0].headers["cache-control"], "no-store");
}
