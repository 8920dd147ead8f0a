//! The `help` binary behind the REST API: an app publishes its corpus with its own credential
//! through API Gateway, and a signed-in person reads it in their language.

use k2b_core::help::{compile_help, define_localized_help};
use k2b_core::identity::workload;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use serde_json::json;

use super::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_publishes_and_a_person_reads_through_the_api() {
    let stack = Stack::new().await;
    let (_, cookie) = stack.admin().await;
    let en = "---\nid: start\ntitle: Start\n---\nCreate your first record.\n";
    let de = "---\nid: start\ntitle: Starten\n---\nLegen Sie Ihre Datensätze an.\n";
    let definition =
        define_localized_help("en", &[("en", vec![en]), ("de", vec![de])]).expect("definition");
    let help = compile_help("inventory", Some("/app/inventory"), &definition).expect("compile");
    let credential = {
        let mut conn = stack.core.pool.acquire().await.expect("connection");
        workload::issue_app_credential(&mut conn, "inventory", &["registry:publish"])
            .await
            .expect("credential")
            .0
    };
    let mut function = stack.start("help").await;

    let publish = stack
        .gateway
        .request(
            "PUT",
            "/api/help/v1/{appId}/corpus",
            "/api/help/v1/inventory/corpus",
        )
        .header("Authorization", &format!("Bearer {credential}"))
        .body(
            "application/json",
            serde_json::to_vec(&help.corpus).expect("json"),
        );
    let published = stack.send(&mut function, &publish).await;
    assert_eq!(published.status, 201, "{}", function.output());
    assert_eq!(published.json()["documents"], 2);
    let again = stack.send(&mut function, &publish).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["published"], false);

    let entry = json!({
        "id": "inventory", "name": "Inventory", "icon": "ti ti-box", "description": "Stock",
        "baseUrl": "http://inventory:3000", "routes": ["/app/inventory"],
        "help": serde_json::to_value(&help.summary).expect("summary")
    });
    let mut conn = stack.core.pool.acquire().await.expect("connection");
    store::upsert(&mut conn, &entry, APP_REGISTRY_TTL)
        .await
        .expect("advertise");

    let search = stack
        .gateway
        .request(
            "GET",
            "/api/help/v1/{appId}/search",
            "/api/help/v1/inventory/search",
        )
        .query("q", "Datensatz")
        .header("Cookie", &cookie)
        .header("x-cloud-locale", "de-CH");
    let found = stack.send(&mut function, &search).await;
    assert_eq!(found.status, 200, "{}", function.output());
    assert_eq!(found.json(), json!({"locale": "de-CH", "ids": ["start"]}));

    let read = stack
        .gateway
        .request(
            "GET",
            "/api/help/v1/{appId}/documents/{documentId}",
            "/api/help/v1/inventory/documents/start",
        )
        .header("Cookie", &cookie)
        .header("x-cloud-locale", "de-CH");
    let document = stack.send(&mut function, &read).await;
    assert_eq!(document.status, 200);
    assert!(!document.is_base64_encoded);
    let body = document.json();
    assert_eq!(
        (&body["locale"], &body["title"]),
        (&json!("de"), &json!("Starten"))
    );
    let etag = document.header("etag").expect("etag").to_string();
    let revalidated = stack
        .send(&mut function, &read.clone().header("If-None-Match", &etag))
        .await;
    assert_eq!(revalidated.status, 304);

    let anonymous = stack
        .gateway
        .request(
            "GET",
            "/api/help/v1/{appId}/search",
            "/api/help/v1/inventory/search",
        )
        .query("q", "start");
    assert_eq!(stack.send(&mut function, &anonymous).await.status, 401);
}
