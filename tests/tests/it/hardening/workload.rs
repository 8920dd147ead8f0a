//! App workload credentials are not generic API keys: a `cld_` credential of an app's own account
//! works where the app acts as itself (its registry entry) and is refused everywhere else,
//! whatever its scopes.

use k2b_core::identity::workload;
use k2b_tests::client::TestClient;
use serde_json::json;

use super::Widgets;

#[tokio::test]
async fn an_app_credential_is_refused_on_reading_routes_whatever_its_scopes() {
    let w = Widgets::start(|_| {}).await;
    let help = TestClient::serve(help::router(w.core.clone())).await;
    let registry = TestClient::serve(registry::router(w.core.clone())).await;
    for scopes in [&["read"][..], &["registry:publish", "read"][..], &[][..]] {
        let token = {
            let mut conn = w.core.pool.acquire().await.expect("conn");
            workload::issue_app_credential(&mut conn, "reports", scopes)
                .await
                .expect("credential")
                .0
        };
        for (name, reply) in [
            (
                "widgets",
                w.client.with_bearer(&token).get("/api/widgets/v1").await,
            ),
            ("help", help.with_bearer(&token).get("/api/help/v1").await),
        ] {
            assert_eq!(reply.status, 403, "{name} {scopes:?}: {}", reply.text);
            assert_eq!(
                reply.json["message"],
                "App workload credentials require a dedicated Core authority route"
            );
        }
        // Where the app acts as itself, the credential works when it carries the scope.
        let entry = json!({
            "id": "reports", "name": "Reports", "icon": "ti ti-chart-bar",
            "description": "Reports", "baseUrl": "http://reports:3000", "routes": ["/app/reports"]
        });
        let published = registry
            .with_bearer(&token)
            .put_json("/api/registry/v1/apps/reports", &entry)
            .await;
        let expected = if scopes.contains(&"registry:publish") {
            200
        } else {
            403
        };
        assert_eq!(published.status, expected, "{scopes:?}: {}", published.text);
    }
}
