//! A private PostgreSQL cluster for local mode: when `DATABASE_URL` is unset and nothing answers
//! on the local default (127.0.0.1, `PGPORT` or 5432), the runner starts a cluster of its own
//! from the installed server binaries, in a data folder below `K2B_DATA_DIR` that is kept
//! between runs. It listens only on a Unix socket inside that folder (no port to collide with)
//! and is stopped again when the command that started it ends.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use k2b_core::config::Config;
use k2b_core::secret::Secret;
use tokio::process::Command;

/// How long the local default gets to accept a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest Unix socket path the kernel accepts (`sun_path` less its terminating zero).
const MAX_SOCKET_PATH: usize = 107;

/// The cluster this process started; stop it with [`PrivateCluster::stop`].
pub struct PrivateCluster {
    data: PathBuf,
    bin: PathBuf,
    owner: Option<Owner>,
}

/// The account the server runs as when the runner runs as root (PostgreSQL refuses root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    uid: u32,
    gid: u32,
}

/// What local mode connects to.
pub enum Database {
    /// `DATABASE_URL`, or something answers on the local default.
    AsConfigured,
    /// A private cluster that was already running (another runner or command started it).
    Running,
    /// A private cluster this process started.
    Started(PrivateCluster),
}

/// Points `config` at a private cluster when local mode has no database to reach; says so in
/// one line. Fails with one line on how to install PostgreSQL when there is none.
pub async fn prepare(config: &mut Config) -> anyhow::Result<Database> {
    if !config.mode.is_local() || !config.local_defaults.contains(&"DATABASE_URL") {
        return Ok(Database::AsConfigured);
    }
    let options = k2b_core::db::connect_options(config.database_url.expose())?;
    let port = options.get_port();
    let address = SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), port);
    if answers(address).await {
        return Ok(Database::AsConfigured);
    }
    let Some(bin) = server_binaries(std::env::var_os("PATH"), &candidate_dirs()) else {
        bail!(
            "no PostgreSQL answers on {address} and none is installed: install it (Debian/Ubuntu: `sudo apt install postgresql`, macOS: `brew install postgresql`) or set DATABASE_URL"
        );
    };
    let data = config
        .mail_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| std::env::temp_dir().join("k2b-local"))
        .join("postgres");
    let socket = data.join(format!(".s.PGSQL.{port}"));
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        bail!(
            "the private PostgreSQL cluster's socket path {} is longer than {MAX_SOCKET_PATH} bytes: set K2B_DATA_DIR to a shorter folder",
            socket.display()
        );
    }
    let owner = server_owner()?;
    let cluster = PrivateCluster {
        data: data.clone(),
        bin,
        owner,
    };
    let created = cluster.initialize().await?;
    let running = cluster.is_running().await;
    if !running {
        cluster.start(port).await?;
    }
    let url = format!(
        "postgres://postgres@localhost:{port}/k2b_local?host={}",
        percent_encoding::utf8_percent_encode(
            &data.to_string_lossy(),
            percent_encoding::NON_ALPHANUMERIC
        )
    );
    config.database_url = Secret::new(url);
    let version = cluster.version().unwrap_or_default();
    // Standard error: admin commands print their results (a cookie, a value) on standard output.
    eprintln!(
        "no PostgreSQL on {address}: {} the private cluster in {} (PostgreSQL {version}{})",
        match (created, running) {
            (true, _) => "created and started",
            (false, true) => "using",
            (false, false) => "started",
        },
        data.display(),
        if running {
            ", already running"
        } else {
            ", stopped with the runner"
        }
    );
    Ok(if running {
        Database::Running
    } else {
        Database::Started(cluster)
    })
}

impl Database {
    /// Stops the cluster if this process started it.
    pub async fn stop(self) {
        if let Database::Started(cluster) = self {
            cluster.stop().await;
        }
    }
}

async fn answers(address: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await,
        Ok(Ok(_))
    )
}

/// Where PostgreSQL's server binaries are installed by the usual packages, newest first within
/// each kind of layout.
fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for (root, prefix) in [
        ("/usr/lib/postgresql", ""), // Debian, Ubuntu: /usr/lib/postgresql/<major>/bin
        ("/usr", "pgsql-"),          // RHEL, Fedora (PGDG): /usr/pgsql-<major>/bin
        ("/opt/homebrew/opt", "postgresql@"), // Homebrew on Apple silicon
        ("/usr/local/opt", "postgresql@"), // Homebrew on Intel
    ] {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut versions: Vec<(u32, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let version = name.strip_prefix(prefix)?.split('.').next()?.parse().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
        dirs.extend(versions.into_iter().map(|(_, dir)| dir));
    }
    dirs.push(PathBuf::from("/usr/local/pgsql/bin"));
    dirs
}

/// The first folder holding `initdb`, `pg_ctl` and `postgres`: on `PATH`, then `candidates`.
fn server_binaries(path: Option<OsString>, candidates: &[PathBuf]) -> Option<PathBuf> {
    let on_path: Vec<PathBuf> = path
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(candidates.iter().cloned())
        .find(|dir| {
            ["initdb", "pg_ctl", "postgres"]
                .iter()
                .all(|name| dir.join(name).is_file())
        })
}

/// `None` for a normal account; as root, the `postgres` account (which the server packages
/// create), since PostgreSQL refuses to run as root.
fn server_owner() -> anyhow::Result<Option<Owner>> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    match account(&passwd, "postgres") {
        Some(owner) => Ok(Some(owner)),
        None => bail!(
            "PostgreSQL does not run as root and there is no `postgres` account to run the private cluster as: run k2b-local as a normal user, or set DATABASE_URL"
        ),
    }
}

/// The uid and gid of `name` in an `/etc/passwd` text.
fn account(passwd: &str, name: &str) -> Option<Owner> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then_some(())?;
        let _password = fields.next()?;
        Some(Owner {
            uid: fields.next()?.parse().ok()?,
            gid: fields.next()?.parse().ok()?,
        })
    })
}

impl PrivateCluster {
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .stdin(std::process::Stdio::null());
        if let Some(parent) = self.data.parent() {
            command.current_dir(parent);
        }
        if let Some(owner) = self.owner {
            command.uid(owner.uid).gid(owner.gid);
        }
        command
    }

    async fn run(&self, mut command: Command, what: &str) -> anyhow::Result<()> {
        let output = command
            .output()
            .await
            .with_context(|| format!("cannot run {what}"))?;
        if !output.status.success() {
            bail!(
                "{what} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// Creates the cluster unless its folder holds one. Returns whether it was created.
    async fn initialize(&self) -> anyhow::Result<bool> {
        if self.data.join("PG_VERSION").is_file() {
            return Ok(false);
        }
        std::fs::create_dir_all(&self.data)
            .with_context(|| format!("cannot create {}", self.data.display()))?;
        if let Some(owner) = self.owner {
            std::os::unix::fs::chown(&self.data, Some(owner.uid), Some(owner.gid))
                .with_context(|| format!("cannot hand {} to postgres", self.data.display()))?;
        }
        let mut initdb = self.command("initdb");
        initdb
            .arg("--pgdata")
            .arg(&self.data)
            .args(["--username=postgres", "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-instructions"]);
        self.run(initdb, "initdb").await?;
        Ok(true)
    }

    async fn is_running(&self) -> bool {
        let mut status = self.command("pg_ctl");
        status.arg("status").arg("--pgdata").arg(&self.data);
        matches!(status.output().await, Ok(output) if output.status.success())
    }

    async fn start(&self, port: u16) -> anyhow::Result<()> {
        let mut start = self.command("pg_ctl");
        start
            .arg("start")
            .arg("--pgdata")
            .arg(&self.data)
            .args(["--wait", "--timeout=60", "--silent"])
            .arg("--log")
            .arg(self.data.join("server.log"))
            .arg("-o")
            // Only the socket in the data folder (whose 0700 mode keeps other accounts out).
            .arg(format!(
                "-c listen_addresses='' -c unix_socket_directories='{}' -p {port}",
                self.data.display()
            ));
        self.run(start, "pg_ctl start").await.with_context(|| {
            format!(
                "the private PostgreSQL cluster did not start (see {})",
                self.data.join("server.log").display()
            )
        })
    }

    /// Stops the server, letting it finish what it is doing (fast shutdown).
    pub async fn stop(&self) {
        let mut stop = self.command("pg_ctl");
        stop.arg("stop").arg("--pgdata").arg(&self.data).args([
            "--mode=fast",
            "--wait",
            "--silent",
        ]);
        if let Err(error) = self.run(stop, "pg_ctl stop").await {
            eprintln!("the private PostgreSQL cluster did not stop: {error:#}");
        }
    }

    fn version(&self) -> Option<String> {
        std::fs::read_to_string(self.data.join("PG_VERSION"))
            .ok()
            .map(|version| version.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binaries_are_found_on_path_before_the_usual_places() {
        let root = tempfile::tempdir().expect("temp dir");
        let make = |name: &str, programs: &[&str]| {
            let dir = root.path().join(name);
            std::fs::create_dir_all(&dir).expect("dir");
            for program in programs {
                std::fs::write(dir.join(program), "").expect("file");
            }
            dir
        };
        let partial = make("partial", &["pg_ctl", "postgres"]);
        let packaged = make("packaged", &["initdb", "pg_ctl", "postgres"]);
        let on_path = make("on-path", &["initdb", "pg_ctl", "postgres"]);
        let path = std::env::join_paths([&partial, &on_path]).expect("path");
        assert_eq!(
            server_binaries(Some(path), std::slice::from_ref(&packaged)),
            Some(on_path)
        );
        let path = std::env::join_paths([&partial]).expect("path");
        assert_eq!(
            server_binaries(Some(path), std::slice::from_ref(&packaged)),
            Some(packaged)
        );
        assert_eq!(server_binaries(None, &[partial]), None, "initdb is missing");
    }

    #[test]
    fn accounts_are_read_from_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\npostgres:x:104:110:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(
            account(passwd, "postgres"),
            Some(Owner { uid: 104, gid: 110 })
        );
        assert_eq!(account(passwd, "nobody"), None);
        assert_eq!(account("postgres:x:oops", "postgres"), None);
    }
}
