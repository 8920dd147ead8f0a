//! The widget stream and the single-widget route over real HTTP, with real widget providers:
//! small servers on loopback that each test scripts, registered in the registry like apps.

mod issuance;
mod provider_side;
mod reuse;
mod runner;
mod single_route;
mod stream;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use http::HeaderMap;
use k2b_core::Core;
use k2b_core::auth::{Actor, AuthUser, OAuthUserActor, UserRecord};
use k2b_core::identity::session::SessionRequest;
use k2b_core::identity::{IssueOptions, MetricsSnapshot, Purpose};
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::{TestDb, core_for, create_user, serve};
use serde_json::{Value, json};
use widgets::WidgetsOptions;

/// A request a provider received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
}

impl Seen {
    /// The claims of the invocation token it carried (decoded, not verified).
    pub fn claims(&self) -> Value {
        let token = self.headers["authorization"]
            .to_str()
            .expect("ascii")
            .strip_prefix("Bearer ")
            .expect("a bearer token");
        let payload = token.split('.').nth(1).expect("a JWT");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64")).expect("json")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Counts shared by the providers of one test.
#[derive(Debug, Default)]
pub struct Counters {
    pub started: AtomicUsize,
    pub finished: AtomicUsize,
    pub aborted: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub peak: AtomicUsize,
}

impl Counters {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

/// Counts a provider call as aborted when it is dropped before it finished.
struct CallGuard {
    counters: Arc<Counters>,
    finished: bool,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.finished {
            self.counters.finished.fetch_add(1, Ordering::SeqCst);
        } else {
            self.counters.aborted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub type Behaviour = Arc<dyn Fn(Seen) -> BoxFuture<'static, Response> + Send + Sync>;

/// A provider behaviour from an async closure.
pub fn behaviour<F, Fut, R>(f: F) -> Behaviour
where
    F: Fn(Seen) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoResponse,
{
    Arc::new(move |seen| {
        let fut = f(seen);
        Box::pin(async move { fut.await.into_response() })
    })
}

/// A provider answering `body` as JSON.
pub fn answers(body: Value) -> Behaviour {
    behaviour(move |_| {
        let body = body.clone();
        async move { axum::Json(body) }
    })
}

/// A running provider: its origin and what it received.
pub struct Provider {
    pub origin: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Provider {
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }
}

/// Starts a provider on loopback that records every request and runs `behaviour`.
pub async fn provider(counters: Arc<Counters>, behaviour: Behaviour) -> Provider {
    provider_on(counters, behaviour, std::net::Ipv4Addr::LOCALHOST.into()).await
}

/// [`provider`] listening on `ip`.
pub async fn provider_on(
    counters: Arc<Counters>,
    behaviour: Behaviour,
    ip: std::net::IpAddr,
) -> Provider {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let router = Router::new().fallback(move |request: Request| {
        let behaviour = behaviour.clone();
        let counters = counters.clone();
        let record = record.clone();
        async move {
            let seen = Seen {
                uri: request
                    .uri()
                    .path_and_query()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_default(),
                headers: request.headers().clone(),
            };
            record.lock().expect("seen").push(seen.clone());
            counters.started.fetch_add(1, Ordering::SeqCst);
            let now = counters.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            counters.peak.fetch_max(now, Ordering::SeqCst);
            let mut guard = CallGuard {
                counters,
                finished: false,
            };
            let response = behaviour(seen).await;
            guard.finished = true;
            response
        }
    });
    Provider {
        origin: k2b_tests::serve_on(router, ip).await,
        seen,
    }
}

/// Publishes an app with `widgets` whose base URL has a path of its own (only the origin is
/// used for widget calls).
pub async fn register(core: &Core, id: &str, origin: &str, widgets: Value) {
    let entry = json!({
        "id": id, "name": id, "icon": "ti ti-apps", "description": format!("The {id} app"),
        "baseUrl": format!("{origin}/custom/path"), "routes": [format!("/app/{id}")],
        "widgets": widgets
    });
    let mut conn = core.pool.acquire().await.expect("conn");
    store::upsert(&mut conn, &entry, APP_REGISTRY_TTL)
        .await
        .expect("register");
}

/// The `summary` widget every `app-<i>` of [`Setup::apps`] declares: all sizes, default medium.
pub fn summary_widget() -> Value {
    json!([{"id": "summary", "path": "/api/summary/widget", "title": "Summary",
            "sizes": ["small", "medium", "large"], "defaultSize": "medium"}])
}

/// A test's Core with the widget routes served, a signed-in user and a client.
pub struct Setup {
    pub _db: TestDb,
    pub core: Core,
    pub base: String,
    pub client: reqwest::Client,
    pub user: UserRecord,
    pub cookie: String,
    pub counters: Arc<Counters>,
}

impl Setup {
    pub async fn new(options: WidgetsOptions) -> Setup {
        Setup::with_actor(options, None).await
    }

    /// Serves the routes; `actor` (when given) is placed on every request as the authenticated
    /// actor, the way an authentication layer in front of the routes would.
    pub async fn with_actor(options: WidgetsOptions, actor: Option<ActorKind>) -> Setup {
        let db = TestDb::new().await;
        let core = core_for(&db);
        let user = create_user(&core, "ada", false).await;
        core.identity
            .prepare_signer(Purpose::Invocation)
            .await
            .expect("invocation signer");
        let token = core
            .identity
            .issue_session(
                &core.settings,
                SessionRequest::web(user.id),
                IssueOptions::default(),
            )
            .await
            .expect("session")
            .token;
        let mut router = widgets::router_with(core.clone(), options);
        if let Some(kind) = actor {
            let actor = kind.actor(&user);
            router = router.layer(axum::Extension(actor));
        }
        let base = serve(router).await;
        Setup {
            _db: db,
            core,
            base,
            client: reqwest::Client::new(),
            user,
            cookie: format!("session_token={token}"),
            counters: Arc::new(Counters::default()),
        }
    }

    /// A provider counted in this test's counters.
    pub async fn provider(&self, behaviour: Behaviour) -> Provider {
        provider(self.counters.clone(), behaviour).await
    }

    /// `app-0` … `app-<n-1>`, each with a `summary` widget on a provider of its own.
    pub async fn apps(&self, behaviours: Vec<Behaviour>) -> Vec<Provider> {
        let mut providers = Vec::new();
        for (i, behaviour) in behaviours.into_iter().enumerate() {
            let provider = self.provider(behaviour).await;
            register(
                &self.core,
                &format!("app-{i:02}"),
                &provider.origin,
                summary_widget(),
            )
            .await;
            providers.push(provider);
        }
        providers
    }

    /// `GET path` with the session cookie.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.core.identity.metrics().snapshot()
    }
}

/// Actors the tests place in front of the routes.
#[derive(Debug, Clone)]
pub enum ActorKind {
    /// A browser session of the test user.
    Session,
    /// The test user through an OAuth client with these scopes.
    OAuth(Vec<&'static str>),
}

impl ActorKind {
    fn actor(&self, user: &UserRecord) -> Actor {
        let person = AuthUser::from_record(user, vec![k2b_core::auth::Role::User]);
        match self {
            ActorKind::Session => Actor::User(k2b_core::auth::UserActor {
                user: person,
                sid: uuid::Uuid::new_v4(),
                session: k2b_core::auth::SessionKind::Web,
            }),
            ActorKind::OAuth(scopes) => Actor::OAuthUser(OAuthUserActor {
                user: person,
                client_id: "reports-cli".into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }
}

/// The widget's key in `app-<i>` naming.
pub fn key(i: usize) -> String {
    format!("app-{i:02}/summary")
}

/// Reads an NDJSON body to its end.
pub async fn lines(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.expect("body");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Reads NDJSON lines as they arrive.
pub struct LineReader {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl LineReader {
    pub fn new(response: reqwest::Response) -> LineReader {
        LineReader {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next line, or `None` at the end of the body.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(serde_json::from_slice(&line).expect("a JSON line"));
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("a chunk within 30 s")
                .expect("body")?;
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// The next line within `wait`, or `None` when none arrived in time.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.next()).await.ok().flatten()
    }
}

/// The widget lines of a stream by key.
pub fn widget_lines(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "widget").collect()
}

/// Log lines at WARN.
pub fn warnings(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["level"] == "WARN")
        .collect()
}
