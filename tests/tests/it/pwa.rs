//! Mobile-app pairing over real HTTP through the `approvals` router, with real cookie jars (one
//! per browser or phone) and a real Postgres.

mod admin;
mod concurrency;
mod devices;
mod flow;
mod notice;
mod renewal;
mod runner;
mod transport;

use std::collections::BTreeMap;

use http::{HeaderMap, Method, StatusCode};
use k2b_core::Core;
use k2b_core::access::authenticate;
use k2b_core::auth::{Actor, UserRecord};
use k2b_core::identity::IssueOptions;
use k2b_core::identity::session::SessionRequest;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::{Value, json};
use uuid::Uuid;

pub const ORIGIN: &str = "https://cloud.example.test";
pub const IPHONE_UA: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)";

/// A cookie as a jar keeps it.
#[derive(Debug, Clone)]
pub struct StoredCookie {
    pub value: String,
}

/// A browser's (or phone's) cookies, keyed by name and path.
#[derive(Debug, Clone, Default)]
pub struct Jar {
    pub cookies: BTreeMap<(String, String), StoredCookie>,
}

impl Jar {
    /// The cookie header for a request to `path`.
    fn header_for(&self, path: &str) -> Option<String> {
        let pairs: Vec<String> = self
            .cookies
            .iter()
            .filter(|((_, cookie_path), _)| {
                path == cookie_path
                    || path.starts_with(&format!("{}/", cookie_path.trim_end_matches('/')))
            })
            .map(|((name, _), c)| format!("{name}={}", c.value))
            .collect();
        (!pairs.is_empty()).then(|| pairs.join("; "))
    }

    fn apply(&mut self, set_cookie: &str) {
        let mut parts = set_cookie.split(';');
        let Some((name, value)) = parts.next().and_then(|p| p.trim().split_once('=')) else {
            return;
        };
        let mut path = "/".to_string();
        let mut removed = false;
        for attribute in parts {
            let attribute = attribute.trim();
            if let Some(p) = attribute.strip_prefix("Path=") {
                path = p.to_string();
            }
            if attribute == "Max-Age=0" {
                removed = true;
            }
        }
        let key = (name.to_string(), path);
        if removed {
            self.cookies.remove(&key);
        } else {
            self.cookies.insert(
                key,
                StoredCookie {
                    value: value.to_string(),
                },
            );
        }
    }

    /// The value of cookie `name` (any path).
    pub fn get(&self, name: &str) -> Option<String> {
        self.cookies
            .iter()
            .find(|((n, _), _)| n == name)
            .map(|(_, c)| c.value.clone())
    }

    pub fn set(&mut self, name: &str, value: &str, path: &str) {
        self.cookies.insert(
            (name.to_string(), path.to_string()),
            StoredCookie {
                value: value.to_string(),
            },
        );
    }

    pub fn remove(&mut self, name: &str) {
        self.cookies.retain(|(n, _), _| n != name);
    }
}

/// A response as a test inspects it.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub set_cookies: Vec<String>,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or_default()
    }
    /// The `Set-Cookie` header for `name`, if any.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.set_cookies
            .iter()
            .map(String::as_str)
            .find(|c| c.starts_with(&format!("{name}=")))
    }
    pub fn location(&self) -> &str {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
    #[track_caller]
    pub fn expect(&self, status: u16, code: Option<&str>) -> &Self {
        assert_eq!(self.status.as_u16(), status, "{:?}", self.body);
        if let Some(code) = code {
            assert_eq!(self.code(), code, "{:?}", self.body);
        }
        self
    }
}

/// One request's options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub body: Option<Value>,
    pub raw_body: Option<String>,
    pub origin: Option<String>,
    pub no_origin: bool,
    pub headers: Vec<(String, String)>,
}

/// A test installation: the router on a loopback port, a database, the core.
pub struct Pwa {
    /// Keeps the test database alive.
    pub db: TestDb,
    pub core: Core,
    pub base: String,
    pub client: reqwest::Client,
}

impl Pwa {
    /// A new installation with the PWA shell registered.
    pub async fn new() -> Pwa {
        let pwa = Pwa::without_shell().await;
        pwa.register_shell().await;
        pwa
    }

    pub async fn without_shell() -> Pwa {
        let db = TestDb::new().await;
        let core = core_for(&db);
        core.identity.initialize().await.expect("identity keys");
        let base = serve(approvals::router(core.clone())).await;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        Pwa {
            db,
            core,
            base,
            client,
        }
    }

    pub async fn register_shell(&self) {
        register_shell(&self.core).await;
    }

    pub async fn unregister_shell(&self) {
        sqlx::query("DELETE FROM registry.apps WHERE app_id = 'pwa'")
            .execute(&self.core.pool)
            .await
            .expect("unregister");
    }

    /// A local account that accepted the terms (display name "<uid> Example").
    pub async fn user(&self, uid: &str, admin: bool) -> UserRecord {
        let user = create_user(&self.core, uid, admin).await;
        let mut conn = self.core.pool.acquire().await.expect("connection");
        k2b_core::approvals::accept_legal_terms(&mut conn, user.id)
            .await
            .expect("terms");
        user
    }

    /// A browser signed in as `user`.
    pub async fn browser(&self, user: &UserRecord) -> Jar {
        let session = self
            .core
            .identity
            .issue_session(
                &self.core.settings,
                SessionRequest::web(user.id),
                IssueOptions::default(),
            )
            .await
            .expect("web session");
        let mut jar = Jar::default();
        jar.set("session_token", &session.token, "/");
        jar
    }

    pub async fn send(&self, method: Method, path: &str, jar: &mut Jar, options: Options) -> Reply {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(cookie) = jar.header_for(path.split('?').next().unwrap_or(path)) {
            request = request.header("cookie", cookie);
        }
        let safe = method == Method::GET || method == Method::HEAD;
        if !options.no_origin && (!safe || options.origin.is_some()) {
            request = request.header(
                "origin",
                options.origin.clone().unwrap_or_else(|| ORIGIN.to_string()),
            );
        }
        for (name, value) in &options.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(body) = &options.body {
            request = request.json(body);
        } else if let Some(raw) = &options.raw_body {
            request = request
                .header("content-type", "application/json")
                .body(raw.clone());
        }
        let response = request.send().await.expect("request");
        let status = response.status();
        let headers = response.headers().clone();
        let set_cookies: Vec<String> = headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        for cookie in &set_cookies {
            jar.apply(cookie);
        }
        let bytes = response.bytes().await.expect("body");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            set_cookies,
        }
    }

    pub async fn get(&self, path: &str, jar: &mut Jar) -> Reply {
        self.send(Method::GET, path, jar, Options::default()).await
    }

    pub async fn post(&self, path: &str, jar: &mut Jar, body: Option<Value>) -> Reply {
        self.send(
            Method::POST,
            path,
            jar,
            Options {
                body,
                ..Options::default()
            },
        )
        .await
    }

    /// Starts a pairing from `browser`; returns (id, secret).
    pub async fn start(&self, browser: &mut Jar) -> (String, String) {
        let reply = self.post("/api/auth/pwa/v1/pairings", browser, None).await;
        reply.expect(201, None);
        (
            reply.body["id"].as_str().expect("id").to_string(),
            reply.body["secret"].as_str().expect("secret").to_string(),
        )
    }

    /// The phone claims with `secret` on `platform`; returns the reply.
    pub async fn claim(&self, phone: &mut Jar, secret: &str, platform: &str) -> Reply {
        self.send(
            Method::POST,
            "/pwa/_auth/pairings/claim",
            phone,
            Options {
                body: Some(json!({"secret": secret, "platform": platform})),
                headers: vec![("user-agent".into(), IPHONE_UA.into())],
                ..Options::default()
            },
        )
        .await
    }

    pub async fn confirm(&self, browser: &mut Jar, id: &str, code: &str) -> Reply {
        self.post(
            &format!("/api/auth/pwa/v1/pairings/{id}/confirm"),
            browser,
            Some(json!({"code": code})),
        )
        .await
    }

    pub async fn complete(&self, phone: &mut Jar) -> Reply {
        self.post("/pwa/_auth/pairings/complete", phone, None).await
    }

    pub async fn renew(&self, phone: &mut Jar) -> Reply {
        self.post("/pwa/_auth/session/renew", phone, None).await
    }

    /// Starts a pairing from `browser` and claims it with `phone`; returns (id, code).
    pub async fn claimed(
        &self,
        browser: &mut Jar,
        phone: &mut Jar,
        platform: &str,
    ) -> (String, String) {
        let (id, secret) = self.start(browser).await;
        let claimed = self.claim(phone, &secret, platform).await;
        claimed.expect(200, None);
        let code = claimed.body["code"].as_str().expect("code").to_string();
        (id, code)
    }

    /// Pairs a phone with `browser`'s account on `platform`: the whole flow; returns the phone's
    /// jar and the device id.
    pub async fn pair(&self, browser: &mut Jar, platform: &str) -> (Jar, Uuid) {
        self.pair_into(browser, Jar::default(), platform).await
    }

    /// The flow with a phone jar that may already hold cookies.
    pub async fn pair_into(
        &self,
        browser: &mut Jar,
        mut phone: Jar,
        platform: &str,
    ) -> (Jar, Uuid) {
        let (id, secret) = self.start(browser).await;
        let claimed = self.claim(&mut phone, &secret, platform).await;
        claimed.expect(200, None);
        let code = claimed.body["code"].as_str().expect("code").to_string();
        self.confirm(browser, &id, &code).await.expect(204, None);
        let done = self.complete(&mut phone).await;
        done.expect(200, None);
        let device = device_id(&phone).expect("device key");
        (phone, device)
    }

    /// What another app sees of the phone's app session.
    pub async fn probe(&self, phone: &Jar) -> Option<Actor> {
        let token = phone.get("pwa_session")?;
        let mut headers = HeaderMap::new();
        headers.insert(
            "cookie",
            format!("pwa_session={token}").parse().expect("header"),
        );
        match authenticate(&self.core, &headers)
            .await
            .expect("authenticate")
        {
            Actor::Anonymous => None,
            actor => Some(actor),
        }
    }

    /// Every audit row as JSON text, oldest first.
    pub async fn audit_rows(&self) -> Vec<Value> {
        sqlx::query_scalar("SELECT to_jsonb(e) FROM audit.events e ORDER BY id")
            .fetch_all(&self.core.pool)
            .await
            .expect("audit rows")
    }

    pub async fn audit_actions(&self) -> Vec<String> {
        self.audit_rows()
            .await
            .iter()
            .map(|row| row["action"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub async fn exec(&self, statement: &str, id: Uuid) {
        sqlx::query(sqlx::AssertSqlSafe(statement.to_string()))
            .bind(id)
            .execute(&self.core.pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    pub async fn sign_out_everywhere(&self, user: Uuid) {
        let mut tx = self.core.pool.begin().await.expect("tx");
        k2b_core::pwa::devices::sign_out_everywhere(&mut tx, user, Some(user), None)
            .await
            .expect("sign out everywhere");
        tx.commit().await.expect("commit");
    }

    pub async fn device_reason(&self, device: Uuid) -> Option<String> {
        sqlx::query_scalar("SELECT revocation_reason FROM auth.pwa_devices WHERE id = $1")
            .bind(device)
            .fetch_one(&self.core.pool)
            .await
            .expect("device")
    }
}

/// The device id in a phone's `pwa_device` cookie.
pub fn device_id(phone: &Jar) -> Option<Uuid> {
    let key = phone.get("pwa_device")?;
    Uuid::parse_str(key.split('.').next()?).ok()
}

/// The sid of a session token (decoded, not verified).
pub fn token_sid(token: &str) -> Uuid {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("jwt");
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64"),
    )
    .expect("claims");
    Uuid::parse_str(claims["sid"].as_str().expect("sid")).expect("uuid")
}

/// Whether `text` holds the six-digit `code` as a number of its own (not inside a longer digit
/// run or the fraction of a timestamp).
pub fn contains_code(text: &str, code: &str) -> bool {
    let bytes = text.as_bytes();
    text.match_indices(code).any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + code.len()).copied();
        !before.is_some_and(|b| b.is_ascii_digit() || b == b'.')
            && !after.is_some_and(|b| b.is_ascii_digit())
    })
}

/// Registers the PWA shell app (pairing needs a live app `pwa` owning `/pwa`).
pub async fn register_shell(core: &Core) {
    let mut conn = core.pool.acquire().await.expect("connection");
    store::upsert(
        &mut conn,
        &json!({
            "id": "pwa", "name": "Mobile app", "icon": "ti ti-device-mobile",
            "description": "The installed web app's shell",
            "baseUrl": "http://127.0.0.1:9", "routes": ["/pwa"]
        }),
        APP_REGISTRY_TTL,
    )
    .await
    .expect("register the shell");
}
