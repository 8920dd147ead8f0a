//! A database blip is a 503, not a sign-out: when the keys, the session family or the settings
//! cannot be read while a session is checked, the answer is 503 with the standard body.

use k2b_core::Core;
use k2b_tests::client::TestClient;
use k2b_tests::pgfault::{Fault, PgFaultProxy};
use k2b_tests::{TestDb, core_for, create_user, session_cookie};

/// A signed-in user's client of the widget routes, whose Core reaches the database through a
/// proxy that can break connections.
async fn start() -> (TestDb, PgFaultProxy, TestClient) {
    let db = TestDb::new().await;
    let proxy = PgFaultProxy::start(&db.url()).await;
    let direct = core_for(&db);
    let user = create_user(&direct, "ada", false).await;
    let cookie = session_cookie(&direct, &user).await;
    let config = db.config().with_database_url(proxy.url.clone());
    let core = Core::new(config).expect("core");
    let client = TestClient::serve(widgets::router(core))
        .await
        .with_cookie(cookie);
    (db, proxy, client)
}

#[tokio::test]
async fn failing_reads_while_checking_a_session_answer_503() {
    for (what, pattern) in [
        ("the signing keys", &b"FROM auth.signing_keys"[..]),
        ("the session family", &b"FROM auth.session_families f"[..]),
        ("the settings", &b"settings.entries"[..]),
    ] {
        // A fresh execution environment: nothing cached yet.
        let (_db, proxy, client) = start().await;
        proxy.arm([Fault::cut(pattern)]);
        let reply = client.get("/api/widgets/v1").await;
        assert_eq!(proxy.fired(), 1, "{what}: the fault happened");
        assert_eq!(reply.status, 503, "{what}: {}", reply.text);
        assert_eq!(reply.code(), "UNAVAILABLE", "{what}");
        assert!(reply.json["message"].is_string(), "{what}");
        // Once the database answers again, the same session is signed in.
        assert_eq!(client.get("/api/widgets/v1").await.status, 200, "{what}");
    }
}
