//! The API contract: the OpenAPI 3.1 document `k2b-local openapi` prints (and the runner serves
//! at `/api/openapi.json`) names exactly the routes the routers serve and `template.yaml`
//! routes.

use std::collections::BTreeSet;
use std::process::Command;

use k2b_core::http::openapi::{contract_problems, documented_operations};
use k2b_tests::lambda::rest::{concrete_path, resource_covers};
use k2b_tests::{
    LocalRunner, TEST_APP_SECRET, TestDb, admin_cookie, artifacts_dir, local_binary, run_local,
};
use serde_json::Value;

use crate::lambda::Stack;
use crate::lambda::routes::{routed, sample};
use crate::lambda::routes_of;

/// The error answers the specs leave without a body.
const BODILESS: &[(&str, &str)] = &[];

/// `(METHOD, path)` of every operation of a document.
fn operations(document: &Value) -> BTreeSet<(String, String)> {
    documented_operations(document)
        .into_iter()
        .map(|operation| (operation.method, operation.path.to_string()))
        .collect()
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

/// Every operation of the whole document keeps the contract's rules (a unique id, one tag, its
/// security, the `Error` body on its error answers); the security schemes it names exist.
#[test]
fn every_operation_has_an_id_its_security_and_the_error_body() {
    let document = printed_document();
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("schemes");
    let names: BTreeSet<&str> = schemes.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        BTreeSet::from(["appCredential", "appSession", "oauth", "session"])
    );
    assert_eq!(contract_problems(&document, BODILESS), Vec::<String>::new());
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

/// The runner answers every operation as its document says, under schemathesis (PyPI, installed
/// by `infra/test.sh`) with the checks of `infra/schemathesis.toml`: no server error, documented
/// statuses, content types, headers and bodies, invalid input refused, and the stateful links.
/// The administrator's cookie and the demo app's credential let it past the sign-in.
#[tokio::test]
async fn every_operation_holds_to_the_document_under_schemathesis() {
    let db = TestDb::new().await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
    ];
    // Thousands of requests from one address; and Cloud Login on, so that its routes answer.
    for (key, value) in [
        ("security.rate_limit_per_second", "100000"),
        ("user.app_approval.enabled", "true"),
        ("user.app_approval.admin_pairing", "true"),
    ] {
        let set = run_local(&env, &["setting", "set", key, value], None);
        assert!(set.status.success(), "{set:?}");
    }
    let runner = LocalRunner::start(&env);
    let cookie = admin_cookie(&env);
    let session = cookie
        .strip_prefix("session_token=")
        .unwrap_or_else(|| panic!("not a session cookie: {cookie}"))
        .to_string();
    let credential = run_local(&env, &["app", "credential", "issue", "demo"], None);
    assert!(credential.status.success(), "{credential:?}");
    let credential = String::from_utf8_lossy(&credential.stdout)
        .trim()
        .to_string();

    let reports = artifacts_dir("schemathesis");
    let junit = reports.join("junit.xml");
    std::fs::remove_file(&junit).ok();
    let fuzz = Fuzz {
        base: runner.base_url.clone(),
        session,
        credential,
    };

    // The checks have teeth: a document that claims a limit the code does not enforce (the
    // administrator's `app` filter at most 10 characters; the code takes 200) fails the run.
    let mut wrong: Value = reqwest::get(format!("{}/api/openapi.json", fuzz.base))
        .await
        .expect("document")
        .json()
        .await
        .expect("json");
    let parameters = wrong["paths"]["/api/admin/core/outgoing-mail/messages"]["get"]["parameters"]
        .as_array_mut()
        .expect("parameters");
    let app = parameters
        .iter_mut()
        .find(|p| p["name"] == "app")
        .expect("the app filter");
    app["schema"]["maxLength"] = 10.into();
    let wrong_path = reports.join("wrong-max-length.json");
    std::fs::write(&wrong_path, wrong.to_string()).expect("write");
    let caught = fuzz
        .run(
            wrong_path.to_string_lossy().into_owned(),
            &["--include-operation-id", "mailAdminListMessages"],
        )
        .await;
    let caught_text = String::from_utf8_lossy(&caught.stdout);
    assert!(!caught.status.success(), "{caught_text}");
    assert!(
        caught_text.contains("Schema-violating request accepted")
            && caught_text.contains("String larger than maxLength"),
        "{caught_text}"
    );

    let junit_path = junit.to_string_lossy().into_owned();
    let run = fuzz
        .run(
            format!("{}/api/openapi.json", fuzz.base),
            &["--report", "junit", "--report-junit-path", &junit_path],
        )
        .await;
    let printed = String::from_utf8_lossy(&run.stdout);
    let junit = std::fs::read_to_string(&junit).unwrap_or_default();
    let server = runner.stop();
    assert!(
        run.status.success(),
        "schemathesis found problems:\n{printed}\n{}\nthe runner's last lines:\n{}",
        String::from_utf8_lossy(&run.stderr),
        last_lines(&server, 40)
    );
    // Every operation of the document was exercised.
    let document = printed_document();
    let missing: Vec<String> = documented_operations(&document)
        .iter()
        .map(|operation| operation.name())
        .filter(|name| !junit.contains(&format!("name=\"{name}\"")))
        .collect();
    assert!(missing.is_empty(), "not exercised: {missing:?}\n{printed}");
}

/// schemathesis with `infra/schemathesis.toml` against a runner, signed in.
struct Fuzz {
    base: String,
    session: String,
    credential: String,
}

impl Fuzz {
    /// Runs schemathesis on the document at `location` (a URL or a file) with `extra` options.
    async fn run(&self, location: String, extra: &[&str]) -> std::process::Output {
        let mut command = Command::new("schemathesis");
        command
            .arg("--config-file")
            .arg(k2b_tests::lambda::workspace_root().join("infra/schemathesis.toml"))
            .arg("run")
            .arg(location)
            .args(["--url", &self.base])
            .args(["--header", &format!("Origin: {}", self.base)])
            .args(["--seed", "20261203", "--no-color"])
            .args(extra)
            .env("K2B_FUZZ_SESSION", &self.session)
            .env("K2B_FUZZ_APP_CREDENTIAL", &self.credential);
        tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("join")
            .unwrap_or_else(|e| {
                panic!(
                    "run schemathesis ({e}): `pip install schemathesis==4.32.5`, or run `bash infra/test.sh`"
                )
            })
    }
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}
