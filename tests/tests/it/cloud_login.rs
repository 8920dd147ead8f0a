//! Cloud Login (spec approvals §3, scenarios 24–30) over real HTTP through the `approvals`
//! router, with a real Postgres and a test authenticator that signs with a real P-256 key.

mod commands;
mod enrollment;
mod hints;
mod management;
mod script;
mod setup;
mod signin;

use http::Method;
use k2b_core::Core;
use k2b_core::auth::UserRecord;
use k2b_core::cloud_login::CloudLoginError;
use k2b_core::cloud_login::login::{self, LoginState};
use k2b_tests::authenticator::TestAuthenticator;
use serde_json::{Value, json};

use crate::pwa::{Jar, ORIGIN, Options, Pwa, Reply};

/// The authenticator app's origin in these tests.
pub const APP_ORIGIN: &str = "https://cloud-login.example.test";
/// The API's base path.
pub const API: &str = "/api/auth/app-approval/v1";

/// An installation with Cloud Login switched on (app origin [`APP_ORIGIN`]).
pub struct CloudLogin {
    pub pwa: Pwa,
}

impl CloudLogin {
    pub async fn new() -> CloudLogin {
        let cloud = CloudLogin::off().await;
        cloud.set("user.app_approval.enabled", json!(true)).await;
        cloud
            .set("user.app_approval.origin", json!(APP_ORIGIN))
            .await;
        cloud
    }

    /// An installation that never switched Cloud Login on.
    pub async fn off() -> CloudLogin {
        let pwa = Pwa::without_shell().await;
        pwa.core
            .settings
            .set("security.rate_limit_per_second", json!(100000))
            .await
            .expect("rate limit");
        CloudLogin { pwa }
    }

    pub fn core(&self) -> &Core {
        &self.pwa.core
    }

    pub async fn set(&self, key: &str, value: Value) {
        self.core()
            .settings
            .set(key, value)
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }

    pub async fn unset(&self, key: &str) {
        self.core()
            .settings
            .delete(key)
            .await
            .expect("delete setting");
    }

    /// A person (local account that accepted the terms) and their signed-in browser.
    pub async fn person(&self, uid: &str, admin: bool) -> (UserRecord, Jar) {
        let user = self.pwa.user(uid, admin).await;
        let browser = self.pwa.browser(&user).await;
        (user, browser)
    }

    /// A POST to `API + path` from `origin` (`None`: no Origin header).
    pub async fn post_from(
        &self,
        path: &str,
        jar: &mut Jar,
        origin: Option<&str>,
        body: Value,
    ) -> Reply {
        self.pwa
            .send(
                Method::POST,
                &format!("{API}{path}"),
                jar,
                Options {
                    body: Some(body),
                    origin: origin.map(str::to_string),
                    no_origin: origin.is_none(),
                    ..Options::default()
                },
            )
            .await
    }

    /// A POST from the installation's own origin.
    pub async fn post(&self, path: &str, jar: &mut Jar, body: Value) -> Reply {
        self.post_from(path, jar, Some(ORIGIN), body).await
    }

    /// A GET of `API + path`.
    pub async fn get(&self, path: &str, jar: &mut Jar) -> Reply {
        self.pwa.get(&format!("{API}{path}"), jar).await
    }

    /// A POST the authenticator makes (its own origin, no cookies).
    pub async fn app_post(&self, path: &str, body: Value) -> Reply {
        self.post_from(path, &mut Jar::default(), Some(APP_ORIGIN), body)
            .await
    }

    /// Starts a pairing from `browser` (for `target` when given); the 201 body.
    pub async fn start_pairing(&self, browser: &mut Jar, target: Option<uuid::Uuid>) -> Value {
        let body = match target {
            Some(id) => json!({"userId": id}),
            None => json!({}),
        };
        let reply = self.post("/manage/pairings/start", browser, body).await;
        reply.expect(201, None);
        reply.body
    }

    /// `device` claims the started pairing under `name`.
    pub async fn claim(&self, device: &TestAuthenticator, started: &Value, name: &str) -> Reply {
        let body = device.claim_body(
            ORIGIN,
            started["pairingId"].as_str().expect("pairing id"),
            started["secret"].as_str().expect("secret"),
            name,
        );
        self.app_post("/pairings/claim", body).await
    }

    pub async fn confirm(&self, browser: &mut Jar, started: &Value, comparison: &str) -> Reply {
        self.post(
            "/manage/pairings/confirm",
            browser,
            json!({"pairingId": started["pairingId"], "comparison": comparison}),
        )
        .await
    }

    /// The whole enrollment from `browser`: a new authenticator, enrolled and with its id.
    pub async fn enroll(&self, browser: &mut Jar) -> TestAuthenticator {
        let mut device = TestAuthenticator::new();
        let started = self.start_pairing(browser, None).await;
        let claimed = self.claim(&device, &started, "Test device").await;
        claimed.expect(200, None);
        let comparison = claimed.body["comparison"].as_str().expect("comparison");
        self.confirm(browser, &started, comparison)
            .await
            .expect(200, None);
        device.device_id = Some(
            claimed.body["deviceId"]
                .as_str()
                .expect("device id")
                .to_string(),
        );
        device
    }

    /// A signed command of `device` (issued now) to `/device`.
    pub async fn command(&self, device: &TestAuthenticator, command: Value) -> Reply {
        self.app_post("/device", device.command(ORIGIN, command))
            .await
    }

    /// A browser starts a sign-in; the 202 body.
    pub async fn start_login(&self, identifier: &str, category: &str) -> Value {
        let reply = self
            .post(
                "/login/start",
                &mut Jar::default(),
                json!({"identifier": identifier, "category": category}),
            )
            .await;
        reply.expect(202, None);
        reply.body
    }

    /// `device` lists its pending requests, finds `request_id` and decides it.
    pub async fn decide(
        &self,
        device: &TestAuthenticator,
        request_id: &str,
        decision: &str,
    ) -> Reply {
        let pending = self.command(device, json!({"operation": "pending"})).await;
        pending.expect(200, None);
        let request = pending.body["requests"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["requestId"] == request_id))
            .unwrap_or_else(|| panic!("{request_id} is not pending: {:?}", pending.body))
            .clone();
        self.command(
            device,
            json!({
                "operation": "decide", "requestId": request_id,
                "challenge": request["challenge"], "comparison": request["comparison"],
                "decision": decision,
            }),
        )
        .await
    }

    /// `device` approves a started sign-in.
    pub async fn approve(&self, device: &TestAuthenticator, started: &Value) {
        let request_id = started["requestId"].as_str().expect("request id");
        self.decide(device, request_id, "approve")
            .await
            .expect(200, None);
    }

    /// The browser's status of a started sign-in.
    pub async fn status(&self, started: &Value) -> Reply {
        self.post("/login/status", &mut Jar::default(), reference(started))
            .await
    }

    /// The browser completes a started sign-in into `jar`.
    pub async fn complete(&self, started: &Value, jar: &mut Jar) -> Reply {
        self.post("/login/complete", jar, reference(started)).await
    }

    /// One value of a row, by a statement with one `$1` parameter.
    pub async fn scalar<T>(&self, statement: &str, id: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sqlx::AssertSqlSafe(statement.to_string()))
            .bind(uuid::Uuid::parse_str(id).expect("uuid"))
            .fetch_one(&self.core().pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"))
    }

    pub async fn exec(&self, statement: &str, id: &str) {
        self.pwa
            .exec(statement, uuid::Uuid::parse_str(id).expect("uuid"))
            .await;
    }
}

/// The status of a started sign-in held up to `hold` at `core` (an execution environment),
/// with the moment it answered.
pub async fn hold(
    core: &Core,
    started: &Value,
    hold: std::time::Duration,
) -> (Result<LoginState, CloudLoginError>, std::time::Instant) {
    let id = uuid::Uuid::parse_str(started["requestId"].as_str().expect("id")).expect("uuid");
    let secret = started["browserSecret"].as_str().expect("secret");
    let state = login::status(core, id, secret, Some(hold), std::future::pending()).await;
    (state, std::time::Instant::now())
}

/// `{requestId, browserSecret}` of a started sign-in.
pub fn reference(started: &Value) -> Value {
    json!({"requestId": started["requestId"], "browserSecret": started["browserSecret"]})
}
