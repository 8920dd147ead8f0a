//! The API contract: the OpenAPI 3.1 document `k2b-local openapi` prints (and the runner serves
//! at `/api/openapi.json`) names exactly the routes the routers serve and `template.yaml`
//! routes.

use std::collections::BTreeSet;
use std::process::Command;

use k2b_tests::lambda::rest::{concrete_path, resource_covers};
use k2b_tests::{LocalRunner, TEST_APP_SECRET, TestDb, local_binary};
use serde_json::Value;

use crate::lambda::Stack;
use crate::lambda::routes::{routed, sample};
use crate::lambda::routes_of;

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// `(METHOD, path)` of every operation of a document, with the router's spelling of a wildcard
/// (`/pwa/{*part}`) brought to the document's (`/pwa/{part}`).
fn operations(document: &Value) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    let paths = document["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method).is_some() {
                found.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    found
}

fn document_path(router_path: &str) -> String {
    router_path.replace("{*", "{")
}

fn printed_document() -> Value {
    let output = Command::new(local_binary())
        .arg("openapi")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run k2b-local openapi");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("the document is JSON")
}

#[tokio::test]
async fn the_document_names_exactly_the_routes_of_the_routers_and_the_template() {
    let stack = Stack::new().await;
    // `k2b-local openapi` needs nothing: no database, no variables.
    let document = printed_document();
    assert_eq!(document["openapi"], "3.1.0");
    let documented = operations(&document);

    let mut problems = Vec::new();
    let mut served = BTreeSet::new();
    for function in stack.deployment.functions.values() {
        let Some(table) = routes_of(&function.binary, &stack.core) else {
            continue;
        };
        // Each function's own part documents its own routes, no more, no fewer.
        let part = serde_json::to_value(part_of(&function.binary)).expect("part");
        let own = operations(&part);
        let routes: BTreeSet<(String, String)> = table
            .iter()
            .map(|r| (r.method.to_string(), document_path(r.path)))
            .collect();
        for missing in routes.difference(&own) {
            problems.push(format!(
                "{} {} of {} is not documented by its crate",
                missing.0, missing.1, function.binary
            ));
        }
        for extra in own.difference(&routes) {
            problems.push(format!(
                "{} {} is documented by {} but not served by its router",
                extra.0, extra.1, function.binary
            ));
        }
        served.extend(routes);
    }
    // The whole document: the union of the routers, nothing else.
    for missing in served.difference(&documented) {
        problems.push(format!(
            "{} {} is served but missing from the document",
            missing.0, missing.1
        ));
    }
    for extra in documented.difference(&served) {
        problems.push(format!(
            "{} {} is in the document but no router serves it",
            extra.0, extra.1
        ));
    }
    // Template → document: every API Gateway route leads to documented operations, and every
    // documented operation is routed by API Gateway to the function that serves it.
    for function in stack.deployment.functions.values() {
        for resource in &function.routes {
            let covered = documented.iter().any(|(method, path)| {
                (resource.method == "ANY" || resource.method == *method)
                    && resource_covers(&resource.path, path)
            });
            if !covered {
                problems.push(format!(
                    "template route {} {} of {} has no operation in the document",
                    resource.method, resource.path, function.binary
                ));
            }
        }
    }
    for (method, path) in &documented {
        let concrete = concrete_path(path, sample);
        match routed(&stack.deployment, method, &concrete) {
            Some((binary, _)) => {
                let serves = routes_of(binary, &stack.core).is_some_and(|table| {
                    table
                        .iter()
                        .any(|r| r.method.as_str() == method && document_path(r.path) == *path)
                });
                if !serves {
                    problems.push(format!(
                        "{method} {path} is routed by the template to {binary}, which does not serve it"
                    ));
                }
            }
            None => problems.push(format!("{method} {path} has no route in template.yaml")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        documented.len() > 70,
        "only {} operations",
        documented.len()
    );
}

fn part_of(binary: &str) -> utoipa::openapi::OpenApi {
    match binary {
        "registry" => registry::openapi(),
        "icons" => icons::openapi(),
        "manifest" => manifest::openapi(),
        "approvals" => approvals::openapi(),
        "widgets" => widgets::openapi(),
        "help" => help::openapi(),
        "mail" => mail::openapi(),
        other => panic!("no document part for {other}"),
    }
}

/// Every operation says who may call it, answers errors that have a body with the `Error`
/// body, and has a unique id; the security schemes it names exist.
#[test]
fn every_operation_has_an_id_its_security_and_the_error_body() {
    let document = printed_document();
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("schemes");
    for name in ["session", "appSession", "appCredential", "oauth"] {
        assert!(schemes.contains_key(name), "scheme {name}");
    }
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let name = format!("{} {path}", method.to_uppercase());
            match operation["operationId"].as_str() {
                Some(id) if ids.insert(id.to_string()) => {}
                Some(id) => problems.push(format!("{name}: operationId {id} used twice")),
                None => problems.push(format!("{name}: no operationId")),
            }
            match operation.get("security").and_then(Value::as_array) {
                Some(requirements) => {
                    for requirement in requirements {
                        for scheme in requirement.as_object().into_iter().flat_map(|o| o.keys()) {
                            if !schemes.contains_key(scheme) {
                                problems.push(format!("{name}: unknown scheme {scheme}"));
                            }
                        }
                    }
                }
                None => problems.push(format!("{name}: no security requirement")),
            }
            let responses = operation["responses"].as_object().expect("responses");
            if responses.is_empty() {
                problems.push(format!("{name}: no answers documented"));
            }
            for (status, response) in responses {
                if !status.starts_with('4') && !status.starts_with('5') {
                    continue;
                }
                // An error answer with a body has the Error body.
                let Some(content) = response.get("content").and_then(Value::as_object) else {
                    continue;
                };
                let schema = &content
                    .get("application/json")
                    .map_or(&Value::Null, |json| &json["schema"]["$ref"]);
                if *schema != "#/components/schemas/Error" {
                    problems.push(format!("{name}: {status} without the Error body"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test]
async fn the_runner_serves_the_document_it_prints() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    let runner = LocalRunner::start(&env);
    let response = reqwest::get(format!("{}/api/openapi.json", runner.base_url))
        .await
        .expect("get");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served: Value = response.json().await.expect("json");
    assert_eq!(served, printed_document());
    runner.stop();
}
