//! Bodies through API Gateway: binary answers reach browsers as bytes, text answers stay text,
//! request bodies that API Gateway base64-encoded arrive intact; and the same binaries answer the
//! other front doors (HTTP API v2 with a named stage, Function URL, ALB).

use image::GenericImageView;
use k2b_tests::lambda::Outcome;
use serde_json::{Value, json};

use super::Stack;
use crate::pwa::register_shell;

/// What Chromium sends for an `<img>` or an icon of the manifest.
const BROWSER_IMAGE_ACCEPT: &str =
    "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_icon_reaches_a_browser_as_png_bytes() {
    let stack = Stack::new().await;
    let mut icons = stack.start("icons").await;
    let request = stack
        .gateway
        .request("GET", "/branding/{file}", "/branding/pwa-icon-192.png")
        .header("Accept", BROWSER_IMAGE_ACCEPT);
    let delivered = stack.send(&mut icons, &request).await;
    assert_eq!(delivered.status, 200, "{}", icons.output());
    assert!(delivered.is_base64_encoded);
    assert!(
        delivered.converted_to_binary,
        "the browser would get base64 text"
    );
    assert_eq!(delivered.header("content-type"), Some("image/png"));
    assert!(delivered.body.starts_with(PNG_MAGIC));
    let image = image::load_from_memory(&delivered.body).expect("a PNG");
    assert_eq!(image.dimensions(), (192, 192));

    // Revalidation answers 304 without a body; HEAD answers the headers only.
    let etag = delivered.header("etag").expect("an etag").to_string();
    let revalidate = request.clone().header("If-None-Match", &etag);
    let not_modified = stack.send(&mut icons, &revalidate).await;
    assert_eq!(not_modified.status, 304);
    assert!(not_modified.body.is_empty());
    let head = stack
        .gateway
        .request("HEAD", "/branding/{file}", "/branding/apple-touch-icon.png")
        .header("Accept", BROWSER_IMAGE_ACCEPT);
    let head = stack.send(&mut icons, &head).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("image/png"));
    assert!(head.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_javascript_and_the_manifest_stay_text() {
    let stack = Stack::new().await;
    let mut registry = stack.start("registry").await;
    let request = stack
        .gateway
        .request(
            "GET",
            "/.well-known/cloud-session-jwks.json",
            "/.well-known/cloud-session-jwks.json",
        )
        .header("Accept", "application/json");
    let jwks = stack.send(&mut registry, &request).await;
    assert_eq!(jwks.status, 200, "{}", registry.output());
    assert!(!jwks.is_base64_encoded);
    assert_eq!(jwks.header("content-type"), Some("application/json"));
    let keys = jwks.json()["keys"].as_array().cloned().expect("keys");
    assert!(!keys.is_empty());
    assert!(
        keys.iter()
            .all(|k| k["kty"] == "RSA" && k.get("d").is_none())
    );

    let mut manifest = stack.start("manifest").await;
    for (path, content_type) in [
        ("/pwa/manifest.webmanifest", "application/manifest+json"),
        ("/pwa/sw.js", "text/javascript; charset=utf-8"),
    ] {
        let request = stack
            .gateway
            .request("GET", path, path)
            .header("Accept", "*/*");
        let delivered = stack.send(&mut manifest, &request).await;
        assert_eq!(delivered.status, 200, "{path}");
        assert_eq!(delivered.header("content-type"), Some(content_type));
        assert!(!delivered.is_base64_encoded, "{path} must stay text");
        assert!(std::str::from_utf8(&delivered.body).is_ok());
    }
}

/// With every media type binary, API Gateway base64-encodes every request body: the pairing's
/// JSON bodies still read as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_post_whose_body_api_gateway_base64_encoded_is_read() {
    let stack = Stack::new().await;
    register_shell(&stack.core).await;
    let (_, browser) = stack.admin().await;
    let origin = stack.gateway.origin();
    let mut approvals = stack.start("approvals").await;

    let start = stack
        .gateway
        .request(
            "POST",
            "/api/auth/pwa/v1/{proxy+}",
            "/api/auth/pwa/v1/pairings",
        )
        .header("Accept", "application/json")
        .header("Cookie", &browser)
        .header("Origin", &origin);
    let started = stack.send(&mut approvals, &start).await;
    assert_eq!(
        started.status,
        201,
        "{}",
        String::from_utf8_lossy(&started.body)
    );
    let started = started.json();
    let id = started["id"].as_str().expect("id").to_string();
    let secret = started["secret"].as_str().expect("secret").to_string();

    let claim = stack
        .gateway
        .request("POST", "/pwa/_auth/{proxy+}", "/pwa/_auth/pairings/claim")
        .header("Accept", "application/json")
        .header("Origin", &origin)
        .body(
            "application/json",
            json!({"secret": secret, "platform": "android"}).to_string(),
        );
    let event = claim.event();
    assert_eq!(event["isBase64Encoded"], true);
    assert!(
        !event["body"]
            .as_str()
            .unwrap_or_default()
            .contains("secret"),
        "the event carries the body base64-encoded"
    );
    let claimed = stack.send(&mut approvals, &claim).await;
    assert_eq!(
        claimed.status,
        200,
        "{}",
        String::from_utf8_lossy(&claimed.body)
    );
    let code = claimed.json()["code"].as_str().expect("code").to_string();
    assert_eq!(code.len(), 6);
    assert!(
        claimed
            .header("set-cookie")
            .is_some_and(|c| c.starts_with("pwa_pairing="))
    );

    // The browser types the code: another base64 body, read and checked.
    let confirm = |code: &str| {
        stack
            .gateway
            .request(
                "POST",
                "/api/auth/pwa/v1/{proxy+}",
                &format!("/api/auth/pwa/v1/pairings/{id}/confirm"),
            )
            .header("Cookie", &browser)
            .header("Origin", &origin)
            .body("application/json", json!({"code": code}).to_string())
    };
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let refused = stack.send(&mut approvals, &confirm(wrong)).await;
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.json()["code"], "WRONG_CODE");
    let confirmed = stack.send(&mut approvals, &confirm(&code)).await;
    assert_eq!(
        confirmed.status,
        204,
        "{}",
        String::from_utf8_lossy(&confirmed.body)
    );
}

/// The JWKS route through the other front doors a Lambda HTTP function can sit behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_binary_answers_http_api_function_url_and_alb_events() {
    let stack = Stack::new().await;
    let mut registry = stack.start("registry").await;
    let path = "/.well-known/cloud-session-jwks.json";
    let host = stack.gateway.host();
    let v2 = |stage: &str, raw_path: String| {
        json!({
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": "",
            "headers": {"host": host, "accept": "application/json", "user-agent": "curl/8"},
            "requestContext": {
                "accountId": "123456789012", "apiId": "k2btest42a", "domainName": host,
                "domainPrefix": "k2btest42a",
                "http": {"method": "GET", "path": raw_path, "protocol": "HTTP/1.1",
                         "sourceIp": "198.51.100.7", "userAgent": "curl/8"},
                "requestId": "v2-request", "routeKey": "$default", "stage": stage,
                "time": "01/Dec/2026:00:00:00 +0000", "timeEpoch": 1_795_000_000_000u64
            },
            "isBase64Encoded": false
        })
    };
    let alb = json!({
        "requestContext": {"elb": {"targetGroupArn":
            "arn:aws:elasticloadbalancing:eu-central-1:123456789012:targetgroup/k2b/0123456789abcdef"}},
        "httpMethod": "GET",
        "path": path,
        "queryStringParameters": {},
        "headers": {"host": "cloud.example.test", "accept": "application/json"},
        "body": "",
        "isBase64Encoded": false
    });
    for (door, event) in [
        ("HTTP API, stage live", v2("live", format!("/live{path}"))),
        ("Function URL", v2("$default", path.to_string())),
        ("ALB", alb),
    ] {
        let response = match registry.invoke(event).await {
            Outcome::Response(response) => response,
            other => panic!("{door}: {other:?}"),
        };
        assert_eq!(response["statusCode"], 200, "{door}: {response}");
        assert_eq!(response["isBase64Encoded"], false, "{door}");
        let body: Value =
            serde_json::from_str(response["body"].as_str().unwrap_or_default()).expect("json");
        assert!(
            body["keys"].as_array().is_some_and(|k| !k.is_empty()),
            "{door}"
        );
    }
}
