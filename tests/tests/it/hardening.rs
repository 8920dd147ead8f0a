//! What a hostile app, an expired account or a failing dependency can do: each test shows one
//! boundary holding through the production request path.

mod egress;
mod expiry;
mod limits;
mod oauth;
mod outage;
mod sandbox;
mod workload;

use k2b_core::Core;
use k2b_core::auth::UserRecord;
use k2b_core::config::Config;
use k2b_tests::client::TestClient;
use k2b_tests::{TestDb, create_user, session_cookie};

/// A test database, a Core on it (with `change` applied to its configuration), a signed-in
/// user, and clients of the widget routes.
pub struct Widgets {
    pub _db: TestDb,
    pub core: Core,
    pub user: UserRecord,
    /// The widget routes, anonymous.
    pub client: TestClient,
    /// The widget routes with the user's browser session.
    pub signed_in: TestClient,
}

impl Widgets {
    pub async fn start(change: impl FnOnce(&mut Config)) -> Widgets {
        let db = TestDb::new().await;
        let mut config = db.config();
        change(&mut config);
        let core = Core::with_pool(config, db.pool.clone());
        let user = create_user(&core, "ada", false).await;
        core.identity
            .prepare_signer(k2b_core::identity::Purpose::Invocation)
            .await
            .expect("invocation signer");
        let cookie = session_cookie(&core, &user).await;
        let client = TestClient::serve(widgets::router(core.clone())).await;
        Widgets {
            signed_in: client.with_cookie(cookie),
            client,
            _db: db,
            core,
            user,
        }
    }
}

/// The lines of an NDJSON stream.
pub fn ndjson(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}
