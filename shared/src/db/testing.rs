//! A fresh database per test, cloned from a migrated template so each costs a file copy rather
//! than a migration run.
//!
//! The server is found from `K2B_TEST_DATABASE_URL` or `DATABASE_URL`, else 127.0.0.1:5432; when
//! nothing answers there but PostgreSQL binaries are installed, a throwaway cluster is started in
//! a temporary directory and shared by every test process of this user
//! (`K2B_TEST_THROWAWAY_CLUSTER=1` forces that path).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use super::{MIGRATOR, connect_options};
use crate::config::{Config, Mode};

/// `APP_SECRET` of every test configuration.
pub const TEST_APP_SECRET: &str = "k2b-test-secret-0123456789abcdef0123456789";

static SERVER_URL: OnceLock<String> = OnceLock::new();

/// One test's own database, dropped when the value is dropped.
pub struct TestDb {
    pub pool: PgPool,
    pub name: String,
    server: PgConnectOptions,
    server_url: String,
}

impl TestDb {
    /// Creates a fresh, fully migrated database.
    pub async fn new() -> TestDb {
        let server_url = SERVER_URL.get_or_init(find_server).clone();
        let server = connect_options(&server_url)
            .unwrap_or_else(|_| panic!("test database URL is not a valid Postgres URL"));
        let template = ensure_template(&server).await;
        let name = format!("k2b_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = admin_connection(&server).await;
        create_from_template(&mut admin, &name, &template).await;
        admin.close().await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(server.clone().database(&name))
            .await
            .unwrap_or_else(|e| panic!("connect to test database {name}: {e}"));
        TestDb {
            pool,
            name,
            server,
            server_url,
        }
    }

    /// A connection URL for this database (to hand to a process under test).
    pub fn url(&self) -> String {
        self.url_for(&self.name)
    }

    /// A connection URL for another database on the same server.
    pub fn url_for(&self, database: &str) -> String {
        let mut url = url::Url::parse(&self.server_url)
            .unwrap_or_else(|_| panic!("test server URL is not a URL"));
        url.set_path(&format!("/{database}"));
        url.to_string()
    }

    /// A local-mode configuration pointing at this database, with a data folder of its own
    /// (never a developer's local runner's).
    pub fn config(&self) -> Config {
        let url = self.url();
        let data = std::env::temp_dir().join(&self.name);
        Config::from_lookup(Mode::Local, |name| match name {
            "DATABASE_URL" => Some(url.clone()),
            "K2B_DATA_DIR" => Some(data.display().to_string()),
            "APP_SECRET" => Some(TEST_APP_SECRET.to_string()),
            "APP_URL" => Some("https://cloud.example.test".to_string()),
            "K2B_SETTINGS_CACHE_MS" => Some("0".to_string()),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("test configuration: {e}"))
    }

    /// Drops another database on the same server (for tests that create their own).
    pub async fn drop_database(&self, name: &str) {
        let mut admin = admin_connection(&self.server).await;
        drop_database(&mut admin, name).await;
        admin.close().await.ok();
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        std::fs::remove_dir_all(std::env::temp_dir().join(&self.name)).ok();
        let server = self.server.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime, which cannot be blocked on; a short-lived thread
        // with its own runtime removes the database.
        let handle = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut admin) = server.database("postgres").connect().await {
                    drop_database(&mut admin, &name).await;
                    admin.close().await.ok();
                }
            });
        });
        handle.join().ok();
    }
}

async fn drop_database(admin: &mut PgConnection, name: &str) {
    if !super::is_plain_identifier(name) {
        return;
    }
    let statement = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(statement))
        .execute(admin)
        .await
        .ok();
}

async fn admin_connection(server: &PgConnectOptions) -> PgConnection {
    server
        .clone()
        .database("postgres")
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to the test Postgres server: {e}"))
}

/// The template's name changes with the migrations, so an edited migration gets a new template.
fn template_name() -> String {
    let mut hasher = Sha256::new();
    for migration in MIGRATOR.iter() {
        hasher.update(migration.version.to_be_bytes());
        hasher.update(&migration.checksum);
    }
    format!("k2b_tpl_{}", &hex::encode(hasher.finalize())[..16])
}

async fn ensure_template(server: &PgConnectOptions) -> String {
    let template = template_name();
    let mut admin = admin_connection(server).await;
    if database_exists(&mut admin, &template).await {
        admin.close().await.ok();
        return template;
    }
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('k2b-test-template', 0))")
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("template lock: {e}"));
    if !database_exists(&mut admin, &template).await {
        let building = format!("{template}_build");
        drop_database(&mut admin, &building).await;
        let create = format!("CREATE DATABASE \"{building}\"");
        sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("create template database: {e}"));
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(server.clone().database(&building))
            .await
            .unwrap_or_else(|e| panic!("connect to template database: {e}"));
        MIGRATOR
            .run(&pool)
            .await
            .unwrap_or_else(|e| panic!("migrate template database: {e}"));
        pool.close().await;
        let rename = format!("ALTER DATABASE \"{building}\" RENAME TO \"{template}\"");
        sqlx::query(sqlx::AssertSqlSafe(rename))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("publish template database: {e}"));
        // Templates of earlier migration sets are of no further use.
        let stale: Vec<String> = sqlx::query_scalar(
            "SELECT datname FROM pg_database WHERE datname LIKE 'k2b\\_tpl\\_%' AND datname <> $1",
        )
        .bind(&template)
        .fetch_all(&mut admin)
        .await
        .unwrap_or_default();
        for name in stale {
            drop_database(&mut admin, &name).await;
        }
    }
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended('k2b-test-template', 0))")
        .execute(&mut admin)
        .await
        .ok();
    admin.close().await.ok();
    template
}

async fn database_exists(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(admin)
        .await
        .unwrap_or_else(|e| panic!("query pg_database: {e}"))
}

async fn create_from_template(admin: &mut PgConnection, name: &str, template: &str) {
    let statement = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
    // Copies from one template serialise; a copy that starts while another holds the template
    // briefly sees it "in use" and simply tries again.
    for attempt in 0..100 {
        match sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut *admin)
            .await
        {
            Ok(_) => return,
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some("55006") && attempt < 99 =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("create test database from template: {e}"),
        }
    }
}

fn find_server() -> String {
    for variable in ["K2B_TEST_DATABASE_URL", "DATABASE_URL"] {
        if let Ok(url) = std::env::var(variable)
            && !url.trim().is_empty()
        {
            return url.trim().to_string();
        }
    }
    let default: SocketAddr = ([127, 0, 0, 1], 5432).into();
    let forced = std::env::var("K2B_TEST_THROWAWAY_CLUSTER").is_ok_and(|v| v == "1");
    if !forced && TcpStream::connect_timeout(&default, Duration::from_secs(1)).is_ok() {
        return "postgres://postgres@127.0.0.1:5432/postgres".to_string();
    }
    throwaway_cluster().unwrap_or_else(|reason| {
        panic!("no Postgres for tests: set DATABASE_URL, start a server on 127.0.0.1:5432, or install PostgreSQL binaries ({reason})")
    })
}

/// Starts (or reuses) a private cluster under the temporary directory and returns its URL.
fn throwaway_cluster() -> Result<String, String> {
    let bin = postgres_bin_dir().ok_or("no initdb/pg_ctl found")?;
    let root = std::env::temp_dir().join(format!("k2b-test-pg-{}", current_uid()));
    std::fs::create_dir_all(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let lock = std::fs::File::create(root.join("lock")).map_err(|e| e.to_string())?;
    lock.lock().map_err(|e| e.to_string())?;
    let data = root.join("data");
    let port_file = root.join("port");
    if let Ok(port) = std::fs::read_to_string(&port_file)
        && let Ok(port) = port.trim().parse::<u16>()
        && TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1))
            .is_ok()
    {
        return Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"));
    }
    let as_root = current_uid() == "0";
    if as_root {
        // initdb refuses to run as root; the cluster belongs to the `postgres` system user.
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&root)
            .status()
            .map_err(|e| e.to_string())?;
    }
    if !data.join("PG_VERSION").exists() {
        run_pg(
            &bin.join("initdb"),
            as_root,
            &[
                "-D",
                &data.to_string_lossy(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        )?;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let options = format!(
        "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c max_connections=300",
        root.display()
    );
    run_pg(
        &bin.join("pg_ctl"),
        as_root,
        &[
            "-D",
            &data.to_string_lossy(),
            "-l",
            &root.join("log").to_string_lossy(),
            "-o",
            &options,
            "-w",
            "start",
        ],
    )?;
    std::fs::write(&port_file, port.to_string()).map_err(|e| e.to_string())?;
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

fn run_pg(program: &Path, as_root: bool, args: &[&str]) -> Result<(), String> {
    let status = if as_root {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(args)
            .status()
    } else {
        Command::new(program).args(args).status()
    };
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{} exited with {s}", program.display())),
        Err(e) => Err(format!("{}: {e}", program.display())),
    }
}

fn postgres_bin_dir() -> Option<PathBuf> {
    if let Ok(paths) = std::env::var("PATH") {
        for dir in std::env::split_paths(&paths) {
            if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
                return Some(dir);
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

fn current_uid() -> String {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|uid| !uid.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
