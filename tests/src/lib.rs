//! The harness of the workspace-level tests: a fresh database per test (re-exported from the core
//! crate) and helpers that run the `k2b-local` binary as a black box.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod authenticator;
pub mod browser;
pub mod client;
pub mod figures;
pub mod lambda;
pub mod logs;
pub mod pgfault;
pub mod sqsfault;

pub use k2b_core::db::testing::{TEST_APP_SECRET, TestDb};
pub use logs::LogCapture;

use k2b_core::Core;
use k2b_core::auth::{self, NewUser, Profile, Provider, UserRecord};

/// The shared state of the functions, on a test database.
pub fn core_for(db: &TestDb) -> Core {
    Core::with_pool(db.config(), db.pool.clone())
}

/// A pool of at most `max` connections to the test database, checked as the platform's pools are.
pub async fn pool_with_max(db: &TestDb, max: u32) -> sqlx::PgPool {
    k2b_core::db::pool_options(max)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect(&db.url())
        .await
        .unwrap_or_else(|e| panic!("pool: {e}"))
}

/// Creates a local account (`admin` sets the stored admin flag).
pub async fn create_user(core: &Core, uid: &str, admin: bool) -> UserRecord {
    create_account(core, uid, Provider::Local, Profile::User, admin).await
}

/// Creates an account of any provider and profile.
pub async fn create_account(
    core: &Core,
    uid: &str,
    provider: Provider,
    profile: Profile,
    admin: bool,
) -> UserRecord {
    let mut conn = core
        .pool
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("connection: {e}"));
    auth::create_user(
        &mut conn,
        &NewUser {
            uid: uid.into(),
            provider,
            profile,
            display_name: Some(format!("{uid} Example")),
            mail: Some(format!("{uid}@example.test")),
            admin,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("create user {uid}: {e}"))
}

/// A signed-in browser's cookie (`session_token=…`) for `user`.
pub async fn session_cookie(core: &Core, user: &UserRecord) -> String {
    let session = core
        .identity
        .issue_session(
            &core.settings,
            k2b_core::identity::session::SessionRequest::web(user.id),
            k2b_core::identity::IssueOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("session for {}: {e}", user.uid));
    format!(
        "{}={}",
        k2b_core::identity::session::SESSION_COOKIE,
        session.token
    )
}

/// The seeded administrator's cookie, issued by `k2b-local session issue` like a developer
/// would.
pub fn admin_cookie(env: &[(&str, &str)]) -> String {
    let issued = run_local(env, &["session", "issue", "--user", "admin"], None);
    assert!(issued.status.success(), "{issued:?}");
    String::from_utf8_lossy(&issued.stdout).trim().to_string()
}

/// This machine's address on its default route (not loopback): where a server must listen for
/// a function in production mode to reach it as an app on the operator's network.
pub fn machine_address() -> std::net::IpAddr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap_or_else(|e| panic!("udp: {e}"));
    // Connecting a UDP socket sends nothing; it only picks the route and its source address.
    socket
        .connect("198.51.100.1:9")
        .unwrap_or_else(|e| panic!("no default route: {e}"));
    socket
        .local_addr()
        .unwrap_or_else(|e| panic!("address: {e}"))
        .ip()
}

/// Serves `router` on a free loopback port; returns its base URL. The server stops with the
/// test's runtime.
pub async fn serve(router: axum::Router) -> String {
    serve_on(router, std::net::Ipv4Addr::LOCALHOST.into()).await
}

/// [`serve`] on a free port of `ip`.
pub async fn serve_on(router: axum::Router, ip: std::net::IpAddr) -> String {
    let listener = tokio::net::TcpListener::bind(std::net::SocketAddr::new(ip, 0))
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let address = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("address: {e}"));
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        tcp.set_nodelay(true).ok();
    });
    tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, service).await.ok();
    });
    format!("http://{address}")
}

/// Variables the parent's environment must not leak into a runner under test.
const SCRUBBED: &[&str] = &[
    "K2B_ENV",
    "APP_URL",
    "APP_SECRET",
    "DATABASE_URL",
    "PGPORT",
    "K2B_DATA_DIR",
    "RUST_LOG",
    "K2B_LOG_FORMAT",
];

/// The `k2b-local` binary next to this test binary, built on first use if missing.
pub fn local_binary() -> PathBuf {
    workspace_binary("k2b-local")
}

/// The variables cargo sets for a test or benchmark it runs (by prefix).
const CARGO_RUN_VARS: [&str; 7] = [
    "CARGO_PKG_",
    "CARGO_MANIFEST_",
    "CARGO_CRATE_",
    "CARGO_BIN_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// Removes the variables cargo sets for the running test or benchmark from a `cargo` command it
/// starts. Build scripts that watch them (ring's watches `CARGO_PKG_*`) would otherwise see a
/// change from a plain `cargo build` and rebuild, there and again in the next plain build.
pub fn without_cargo_run_vars(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if CARGO_RUN_VARS.iter().any(|prefix| text.starts_with(prefix)) {
            command.env_remove(&name);
        }
    }
}

/// A binary of the workspace in this build's profile (`target/debug` for tests,
/// `target/release` — the bench profile — for benchmarks). Missing binaries are built once per
/// process; benchmarks always build (a no-op when current), so they never measure a stale one.
pub fn workspace_binary(name: &str) -> PathBuf {
    static PROFILE_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    static BUILD: std::sync::Once = std::sync::Once::new();
    let dir = PROFILE_DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
        // target/<profile>/deps/<test binary> → target/<profile>
        exe.parent()
            .and_then(|deps| deps.parent())
            .unwrap_or_else(|| panic!("unexpected test binary location {}", exe.display()))
            .to_path_buf()
    });
    let bench = dir.ends_with("release");
    let binary = dir.join(name);
    if bench || !binary.exists() {
        BUILD.call_once(|| {
            let profile = if bench { "bench" } else { "dev" };
            let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            build.args(["build", "--profile", profile, "--workspace", "--bins"]);
            without_cargo_run_vars(&mut build);
            let status = build
                .status()
                .unwrap_or_else(|e| panic!("run cargo build: {e}"));
            assert!(status.success(), "cargo build --workspace --bins failed");
        });
    }
    binary
}

fn command(env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(local_binary());
    for name in SCRUBBED {
        command.env_remove(name);
    }
    command.env("K2B_LOG_FORMAT", "json");
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// Runs `k2b-local <args>` to completion, feeding `stdin` if given. What it printed also goes
/// to the calling test's live [`LogCapture`].
pub fn run_local(env: &[(&str, &str)], args: &[&str], stdin: Option<&str>) -> Output {
    let origin = logs::Origin::here();
    let mut child = command(env)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn k2b-local: {e}"));
    if let (Some(mut pipe), Some(input)) = (child.stdin.take(), stdin) {
        pipe.write_all(input.as_bytes())
            .unwrap_or_else(|e| panic!("write stdin: {e}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for k2b-local: {e}"));
    logs::child_output(&origin, &output);
    output
}

/// Where tests of `area` leave files for people to look at (screenshots, reports):
/// `K2B_TEST_ARTIFACTS/<area>`, else `<target>/test-artifacts/<area>`.
pub fn artifacts_dir(area: &str) -> PathBuf {
    let dir = std::env::var_os("K2B_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| crate::lambda::workspace_root().join("target"))
                .join("test-artifacts")
        })
        .join(area);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("create the artifacts folder {}: {e}", dir.display()));
    dir
}

/// A running `k2b-local serve` on a free port; what it prints also goes to the starting test's
/// live [`LogCapture`].
pub struct LocalRunner {
    pub base_url: String,
    child: Child,
    output: Arc<Mutex<String>>,
}

impl LocalRunner {
    /// Starts the server and waits until it listens (at most 60 s).
    pub fn start(env: &[(&str, &str)]) -> LocalRunner {
        LocalRunner::start_on(env, "127.0.0.1:0")
    }

    /// [`LocalRunner::start`] listening on `listen`.
    pub fn start_on(env: &[(&str, &str)], listen: &str) -> LocalRunner {
        let mut child = command(env)
            .args(["serve", "--listen", listen])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn k2b-local serve: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let origin = logs::Origin::here();
        let (address_tx, address_rx) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let sink = output.clone();
        std::thread::spawn(move || {
            if let Some(stdout) = stdout {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(url) = line.strip_prefix("k2b-local listening on ") {
                        address_tx.send(url.trim().to_string()).ok();
                    }
                    logs::child_line(&origin, &line);
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&line);
                        text.push('\n');
                    }
                }
            }
        });
        let sink = output.clone();
        std::thread::spawn(move || {
            if let Some(stderr) = stderr {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    logs::child_line(&origin, &line);
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&line);
                        text.push('\n');
                    }
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(url) = address_rx.recv_timeout(Duration::from_millis(100)) {
                return LocalRunner {
                    base_url: url,
                    child,
                    output,
                };
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "k2b-local exited with {status} before listening:\n{}",
                    output.lock().map(|o| o.clone()).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "k2b-local did not start within 60 s"
            );
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's resident memory in KiB (`VmRSS`), if readable.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// Everything the server printed so far (stdout and stderr).
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Stops the server with SIGTERM (graceful shutdown) and returns its output.
    pub fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().ok();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child.kill().ok();
        self.child.wait().ok();
        std::thread::sleep(Duration::from_millis(50));
        self.output()
    }
}

impl Drop for LocalRunner {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

pub use k2b_core::moto::Moto;

/// A paired phone of `user` (an `auth.pwa_devices` row), for app sessions.
pub async fn pwa_device(pool: &sqlx::PgPool, user: uuid::Uuid) -> uuid::Uuid {
    let device = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO auth.pwa_devices (id, user_id, name, platform, auth_epoch, secret_hash, rotated_at)
         VALUES ($1, $2, 'iPhone', 'ios', 0, repeat('a', 64), now())",
    )
    .bind(device)
    .bind(user)
    .execute(pool)
    .await
    .unwrap_or_else(|e| panic!("device: {e}"));
    device
}

/// An active service account: delegated by `user` when given, else bound to a resource that is
/// not an app.
pub async fn service_account(pool: &sqlx::PgPool, user: Option<uuid::Uuid>) -> uuid::Uuid {
    let statement = match user {
        Some(_) => {
            "INSERT INTO auth.service_accounts (kind, name, delegated_user_id)
             VALUES ('user_delegated', 'reports cli', $1) RETURNING id"
        }
        None => {
            "INSERT INTO auth.service_accounts (kind, name, resource_type, resource_id)
             VALUES ('resource_bound', 'nightly report', 'report', 'nightly') RETURNING id"
        }
    };
    let query = sqlx::query_scalar(statement);
    let query = match user {
        Some(user) => query.bind(user),
        None => query,
    };
    query
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("service account: {e}"))
}

/// A new API key (`cld_…`) of `account` with `scopes`.
pub async fn api_key(pool: &sqlx::PgPool, account: uuid::Uuid, scopes: &[&str]) -> String {
    let token = k2b_core::identity::workload::new_token();
    sqlx::query(
        "INSERT INTO auth.service_account_credentials (service_account_id, token_hash, scopes)
         VALUES ($1, $2, $3)",
    )
    .bind(account)
    .bind(k2b_core::identity::workload::hash_token(&token))
    .bind(scopes)
    .execute(pool)
    .await
    .unwrap_or_else(|e| panic!("credential: {e}"));
    token
}

/// Registers the PWA shell app (`pwa`, owning `/pwa`), as the running shell does.
pub async fn register_pwa_shell(pool: &sqlx::PgPool) {
    let mut conn = pool
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("connection: {e}"));
    k2b_core::registry::store::upsert(
        &mut conn,
        &serde_json::json!({"id": "pwa", "name": "Shell", "icon": "ti ti-device-mobile",
                            "description": "The installed app", "baseUrl": "http://127.0.0.1:9",
                            "routes": ["/pwa"]}),
        k2b_core::registry::APP_REGISTRY_TTL,
    )
    .await
    .unwrap_or_else(|e| panic!("register the shell: {e}"));
}
