//! Routes agree both ways — every route a router serves is a route of `template.yaml` with the
//! same method and path, and every template route reaches a handler — checked from the routers'
//! own tables and the transformed template; then every template route answers a REST event of
//! stage `live` in the function's real binary.

use k2b_tests::lambda::rest::{concrete_path, path_parameters, resource_covers};
use k2b_tests::lambda::{ApiRoute, Deployment};

use super::{Stack, routes_of};
use k2b_core::http::routes::ROUTE_NOT_FOUND;

/// A value for each path parameter name the routers use (ids are UUIDs).
pub(crate) fn sample(name: &str) -> String {
    match name {
        "file" => "pwa-icon-192.png".to_string(),
        "app_id" => "demo".to_string(),
        "widget_id" => "stock".to_string(),
        _ => "6f1c2a8e-8a55-4b8e-9d55-2f0b6c2f9e1a".to_string(),
    }
}

/// How API Gateway prefers resources for one path: literal segments over `{x}` over `{x+}`.
fn specificity(resource: &str) -> (usize, usize) {
    let segments: Vec<&str> = resource.split('/').collect();
    let literal = segments.iter().filter(|s| !s.starts_with('{')).count();
    let single = segments
        .iter()
        .filter(|s| s.starts_with('{') && !s.ends_with("+}"))
        .count();
    (literal, single)
}

fn method_matches(route: &ApiRoute, method: &str) -> bool {
    route.method == "ANY" || route.method == method
}

/// The function and API resource API Gateway routes `method path` to.
pub(crate) fn routed<'a>(
    deployment: &'a Deployment,
    method: &str,
    path: &str,
) -> Option<(&'a str, &'a ApiRoute)> {
    deployment
        .functions
        .values()
        .flat_map(|f| f.routes.iter().map(move |r| (f.binary.as_str(), r)))
        .filter(|(_, route)| method_matches(route, method))
        .filter(|(_, route)| path_parameters(&route.path, path).is_some())
        .max_by_key(|(_, route)| (specificity(&route.path), route.method != "ANY"))
}

#[tokio::test]
async fn routers_and_template_agree_both_ways() {
    let stack = Stack::new().await;
    let mut problems = Vec::new();
    let mut checked = 0;
    for function in stack.deployment.functions.values() {
        let Some(table) = routes_of(&function.binary, &stack.core) else {
            if !function.routes.is_empty() {
                problems.push(format!(
                    "{}: API routes on an event function",
                    function.binary
                ));
            }
            continue;
        };
        if table.is_empty() {
            problems.push(format!(
                "{}: an HTTP function without routes",
                function.binary
            ));
        }
        // Router → template: API Gateway sends each route's requests to this function.
        for route in &table {
            checked += 1;
            let path = concrete_path(route.path, sample);
            match routed(&stack.deployment, route.method.as_str(), &path) {
                Some((binary, _)) if binary == function.binary => {}
                Some((binary, resource)) => problems.push(format!(
                    "{} {} of {} is routed to {binary} by {} {}",
                    route.method, route.path, function.binary, resource.method, resource.path
                )),
                None => problems.push(format!(
                    "{} {} of {} has no route in template.yaml",
                    route.method, route.path, function.binary
                )),
            }
        }
        // Template → router: each resource reaches at least one handler.
        for resource in &function.routes {
            checked += 1;
            let served = table.iter().any(|route| {
                resource_covers(&resource.path, route.path)
                    && method_matches(resource, route.method.as_str())
            });
            if !served {
                problems.push(format!(
                    "template route {} {} of {} reaches no handler of its router",
                    resource.method, resource.path, function.binary
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 20, "only {checked} routes checked");
}

/// Every template route, as a REST event of stage `live` with a browser's headers and a
/// signed-in administrator's cookie, reaches its handler in the real binary: never the
/// `ROUTE_NOT_FOUND` fallback, never 405, never a server error; JSON answers are JSON, and a body
/// is base64-encoded exactly when it is not text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_template_route_answers_a_rest_event_of_its_stage() {
    // With the queues and the bucket: `mail` holds both in production mode.
    let stack = Stack::with_queues().await;
    assert_eq!(stack.deployment.stage, "live");
    let (_, cookie) = stack.admin().await;
    crate::pwa::register_shell(&stack.core).await;
    // Cloud Login answers 503 while switched off; on, every route reaches its handler.
    stack
        .core
        .settings
        .set("user.app_approval.enabled", serde_json::json!(true))
        .await
        .expect("cloud login on");
    let mut cases = Vec::new();
    let mut problems = Vec::new();
    for function in stack.deployment.functions.values() {
        let Some(table) = routes_of(&function.binary, &stack.core) else {
            continue;
        };
        let mut process = stack.start(&function.binary).await;
        for resource in &function.routes {
            for route in table.iter().filter(|route| {
                resource_covers(&resource.path, route.path)
                    && method_matches(resource, route.method.as_str())
            }) {
                let path = concrete_path(route.path, sample);
                let request = stack
                    .gateway
                    .request(route.method.as_str(), &resource.path, &path)
                    .header("Accept", "*/*")
                    .header("Cookie", &cookie)
                    .header("Origin", &stack.gateway.origin());
                let delivered = stack.send(&mut process, &request).await;
                let case = format!(
                    "{} {} ({} {})",
                    route.method, path, resource.method, resource.path
                );
                let content_type = delivered
                    .header("content-type")
                    .unwrap_or_default()
                    .to_string();
                let code = serde_json::from_slice::<serde_json::Value>(&delivered.body)
                    .ok()
                    .and_then(|body| body["code"].as_str().map(str::to_string));
                if delivered.status == 404 && code.as_deref() == Some(ROUTE_NOT_FOUND) {
                    problems.push(format!("{case}: the fallback answered"));
                }
                if delivered.status == 405 || delivered.status >= 500 {
                    problems.push(format!(
                        "{case}: {} {}",
                        delivered.status,
                        String::from_utf8_lossy(&delivered.body)
                    ));
                }
                if content_type.starts_with("application/json")
                    && !delivered.body.is_empty()
                    && serde_json::from_slice::<serde_json::Value>(&delivered.body).is_err()
                {
                    problems.push(format!("{case}: a JSON answer that is not JSON"));
                }
                let text = content_type.is_empty()
                    || content_type.starts_with("text/")
                    || content_type.contains("json")
                    || content_type.contains("javascript");
                if !resource.streamed && delivered.is_base64_encoded == text {
                    problems.push(format!(
                        "{case}: {content_type} with isBase64Encoded {}",
                        delivered.is_base64_encoded
                    ));
                }
                cases.push(format!("{case} -> {}", delivered.status));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\nall cases:\n{}",
        problems.join("\n"),
        cases.join("\n")
    );
    assert!(cases.len() > 20, "{cases:?}");
}

/// A navigation to a part of the installed app this deployment does not serve reaches the
/// `manifest` function (`/pwa/{proxy+}`) and is answered as the platform, like the runner's
/// fallback: 404 with `X-Gateway-App: core`, the header the service worker turns into its
/// offline document. Under `/pwa/_auth` the phone API's own fallback answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_app_part_is_answered_as_the_platform() {
    let stack = Stack::new().await;
    let (binary, resource) =
        routed(&stack.deployment, "GET", "/pwa/inventory").expect("a route for /pwa/inventory");
    assert_eq!(
        (binary, resource.path.as_str()),
        ("manifest", "/pwa/{proxy+}")
    );
    let mut manifest = stack.start("manifest").await;
    for path in ["/pwa/inventory", "/pwa/inventory/items/7"] {
        let request = stack
            .gateway
            .request("GET", "/pwa/{proxy+}", path)
            .header("Accept", "text/html");
        let delivered = stack.send(&mut manifest, &request).await;
        assert_eq!(delivered.status, 404, "{path}: {}", manifest.output());
        assert_eq!(delivered.header("x-gateway-app"), Some("core"), "{path}");
        assert_eq!(
            delivered.header("cache-control"),
            Some("no-store"),
            "{path}"
        );
    }
    // The routes of its own keep answering.
    let worker = stack
        .gateway
        .request("GET", "/pwa/sw.js", "/pwa/sw.js")
        .header("Accept", "*/*");
    let delivered = stack.send(&mut manifest, &worker).await;
    assert_eq!(delivered.status, 200);
    assert_eq!(delivered.header("x-gateway-app"), None);

    let mut approvals = stack.start("approvals").await;
    let request = stack
        .gateway
        .request("GET", "/pwa/_auth/{proxy+}", "/pwa/_auth/nowhere")
        .header("Accept", "text/html");
    let delivered = stack.send(&mut approvals, &request).await;
    assert_eq!(delivered.status, 404);
    assert_eq!(delivered.header("x-gateway-app"), Some("core"));
    let code =
        serde_json::from_slice::<serde_json::Value>(&delivered.body).expect("json")["code"].clone();
    assert_eq!(code, ROUTE_NOT_FOUND);
}
