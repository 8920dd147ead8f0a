//! The `registry` function over real HTTP: JWKS documents and app registration by workload
//! credential.

use k2b_core::Core;
use k2b_core::identity::{Purpose, workload};
use k2b_tests::{TestDb, core_for, serve};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn entry(id: &str) -> Value {
    json!({
        "id": id, "name": "Reports", "icon": "ti ti-chart-bar", "description": "Reports",
        "baseUrl": format!("http://app-{id}:3000"), "routes": [format!("/app/{id}")]
    })
}

async fn credential(core: &Core, app: &str, scopes: &[&str]) -> String {
    let mut conn = core.pool.acquire().await.expect("conn");
    workload::issue_app_credential(&mut conn, app, scopes)
        .await
        .expect("credential")
        .0
}

async fn start() -> (TestDb, Core, String, reqwest::Client) {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let base = serve(registry::router(core.clone())).await;
    (db, core, base, reqwest::Client::new())
}

#[tokio::test]
async fn jwks_documents_carry_etag_cache_control_and_answer_304() {
    let (_db, core, base, client) = start().await;
    for purpose in Purpose::ALL {
        core.identity.prepare_signer(purpose).await.expect("signer");
    }
    let url = format!("{base}/.well-known/cloud-session-jwks.json");
    let response = client.get(&url).send().await.expect("get");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["cache-control"],
        "public, max-age=300, must-revalidate"
    );
    let etag = response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && etag.len() == 34,
        "{etag}"
    );
    let body: Value = response.json().await.expect("json");
    let keys = body["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 1);
    let mut members: Vec<&String> = keys[0].as_object().expect("jwk").keys().collect();
    members.sort();
    assert_eq!(members, ["alg", "e", "kid", "kty", "n", "use"]);

    let cached = client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(cached.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(cached.headers()["etag"], etag.as_str());
    assert_eq!(
        cached.headers()["cache-control"],
        "public, max-age=300, must-revalidate"
    );
    assert!(cached.bytes().await.expect("body").is_empty());
    let weak = client
        .get(&url)
        .header("if-none-match", format!("W/{etag}"))
        .send()
        .await
        .expect("get");
    assert_eq!(
        weak.status(),
        StatusCode::OK,
        "only an exact match is a 304"
    );

    // A revoked key leaves the document at once, and the ETag changes.
    let kid = keys[0]["kid"].as_str().expect("kid").to_string();
    core.identity
        .revoke_key(&kid, "test")
        .await
        .expect("revoke");
    let after = client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("get");
    assert_eq!(after.status(), StatusCode::OK);
    let body: Value = after.json().await.expect("json");
    assert!(
        body["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .all(|k| k["kid"] != kid.as_str())
    );

    // The invocation document holds only invocation keys.
    let invocation: Value = client
        .get(format!("{base}/.well-known/cloud-invocation-jwks.json"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let invocation_kid = core
        .identity
        .prepare_signer(Purpose::Invocation)
        .await
        .expect("signer")
        .kid
        .clone();
    assert_eq!(invocation["keys"][0]["kid"], invocation_kid.as_str());
    assert_eq!(invocation["keys"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn pending_keys_are_published_before_they_sign() {
    let (db, core, base, client) = start().await;
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("signer");
    sqlx::query("UPDATE auth.signing_keys SET created_at = created_at - interval '31 days' WHERE purpose = 'session'")
        .execute(&db.pool)
        .await
        .expect("backdate");
    core.identity
        .run_key_maintenance()
        .await
        .expect("maintenance");
    let body: Value = client
        .get(format!("{base}/.well-known/cloud-session-jwks.json"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(
        body["keys"].as_array().map(Vec::len),
        Some(2),
        "active and pending"
    );
}

#[tokio::test]
async fn an_app_publishes_its_own_entry_with_its_credential() {
    let (db, core, base, client) = start().await;
    let token = credential(&core, "reports", workload::WORKLOAD_SCOPES).await;
    let response = client
        .put(format!("{base}/api/registry/v1/apps/reports"))
        .bearer_auth(&token)
        .json(&entry("reports"))
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["id"], "reports");
    let apps = k2b_core::registry::list_apps(&db.pool).await.expect("list");
    assert_eq!(
        apps.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        vec!["reports"]
    );
    let ttl: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - now())::float8 FROM registry.apps WHERE app_id = 'reports'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("ttl");
    assert!((170.0..=180.0).contains(&ttl), "{ttl}");
}

#[tokio::test]
async fn a_credential_of_app_a_can_never_write_app_b() {
    let (db, core, base, client) = start().await;
    let token_a = credential(&core, "alpha", workload::WORKLOAD_SCOPES).await;
    credential(&core, "beta", workload::WORKLOAD_SCOPES).await;
    let response = client
        .put(format!("{base}/api/registry/v1/apps/beta"))
        .bearer_auth(&token_a)
        .json(&entry("beta"))
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["code"], "FORBIDDEN");
    // Nor by naming itself in the path while sending B's entry.
    let response = client
        .put(format!("{base}/api/registry/v1/apps/alpha"))
        .bearer_auth(&token_a)
        .json(&entry("beta"))
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        k2b_core::registry::list_apps(&db.pool)
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn unknown_revoked_or_missing_credentials_get_401_and_missing_scope_403() {
    let (db, core, base, client) = start().await;
    let put = |token: Option<String>| {
        let client = client.clone();
        let url = format!("{base}/api/registry/v1/apps/reports");
        async move {
            let mut request = client.put(url).json(&entry("reports"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.expect("put").status()
        }
    };
    assert_eq!(put(None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        put(Some(workload::new_token())).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        put(Some("not-a-cld-token".into())).await,
        StatusCode::UNAUTHORIZED
    );
    let token = credential(&core, "reports", workload::WORKLOAD_SCOPES).await;
    sqlx::query("UPDATE auth.service_account_credentials SET revoked_at = now()")
        .execute(&db.pool)
        .await
        .expect("revoke");
    assert_eq!(put(Some(token)).await, StatusCode::UNAUTHORIZED);
    let invoke_only = credential(&core, "reports", &["identity:invoke"]).await;
    assert_eq!(put(Some(invoke_only)).await, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn invalid_or_oversized_entries_are_refused() {
    let (_db, core, base, client) = start().await;
    let token = credential(&core, "reports", workload::WORKLOAD_SCOPES).await;
    let url = format!("{base}/api/registry/v1/apps/reports");
    let mut invalid = entry("reports");
    invalid["routes"] = json!(["relative"]);
    let response = client
        .put(&url)
        .bearer_auth(&token)
        .json(&invalid)
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["message"], "routes must be an array of absolute paths");
    let mut huge = entry("reports");
    huge["description"] = json!("x".repeat(70_000));
    let response = client
        .put(&url)
        .bearer_auth(&token)
        .json(&huge)
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let response = client
        .put(&url)
        .bearer_auth(&token)
        .body("{not json")
        .send()
        .await
        .expect("put");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
