//! HTTP throughput of the small GET routes (figures, no assertions): `wrk` against the local
//! runner (bench profile) — JWKS 200 and 304, an icon 304, `healthz` — beside nginx serving a
//! 200-byte file, measured in the same run with the same `wrk` settings (`-t2 -c50`, 5 s after a
//! 1 s warm-up). Prints req/s, p50/p99 and each route's ratio to nginx.
//!
//! Goal: every route ≥ 50 % of nginx's req/s with p99 ≤ 10 ms.
//!
//! Run: `cargo bench -p k2b-tests --bench http` (needs Debian's `wrk` and `nginx-light`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k2b_core::identity::Purpose;
use k2b_tests::figures::{WrkFigures, parse_wrk};
use k2b_tests::{LocalRunner, TEST_APP_SECRET, TestDb, core_for};

const P99_GOAL_MS: f64 = 10.0;
const RATIO_GOAL: f64 = 0.50;

fn wrk(url: &str, header: Option<&str>, seconds: u32) -> WrkFigures {
    let mut command = Command::new("wrk");
    command.args(["-t2", "-c50", &format!("-d{seconds}s"), "--latency"]);
    if let Some(header) = header {
        command.args(["-H", header]);
    }
    let output = command
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("run wrk (Debian package wrk): {e}"));
    let text = String::from_utf8_lossy(&output.stdout);
    parse_wrk(&text).unwrap_or_else(|| panic!("unreadable wrk output:\n{text}"))
}

fn measure(url: &str, header: Option<&str>) -> WrkFigures {
    wrk(url, header, 1);
    wrk(url, header, 5)
}

/// nginx serving a 200-byte file from a directory of its own, on a free port.
struct Nginx {
    child: Child,
    url: String,
}

impl Nginx {
    fn start(dir: &Path) -> Nginx {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap_or_else(|e| panic!("free port: {e}"));
        std::fs::create_dir_all(dir.join("www")).expect("nginx dir");
        std::fs::write(dir.join("www/file.json"), [b'x'; 200]).expect("file");
        let config = format!(
            "worker_processes auto;\n\
             pid {dir}/nginx.pid;\n\
             error_log {dir}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {dir}/body;\n\
               proxy_temp_path {dir}/proxy;\n\
               fastcgi_temp_path {dir}/fastcgi;\n\
               uwsgi_temp_path {dir}/uwsgi;\n\
               scgi_temp_path {dir}/scgi;\n\
               server {{ listen 127.0.0.1:{port}; root {dir}/www; }}\n\
             }}\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("nginx.conf"), config).expect("nginx.conf");
        let child = Command::new("nginx")
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start nginx (Debian package nginx-light): {e}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            url: format!("http://127.0.0.1:{port}/file.json"),
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

async fn etag(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.expect("get");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.headers()["etag"]
        .to_str()
        .expect("etag")
        .to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    core.identity
        .prepare_signer(Purpose::Session)
        .await
        .expect("session key");
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("RUST_LOG", "warn"),
    ];
    let runner = LocalRunner::start(&env);
    let dir = std::env::temp_dir().join(format!("k2b-bench-nginx-{}", std::process::id()));
    let nginx = Nginx::start(&dir);
    let client = reqwest::Client::new();
    let base = &runner.base_url;
    let jwks = format!("{base}/.well-known/cloud-session-jwks.json");
    let icon = format!("{base}/branding/pwa-icon-192.png");
    let jwks_etag = etag(&client, &jwks).await;
    let icon_etag = etag(&client, &icon).await;

    let wrk_version = Command::new("wrk")
        .arg("-v")
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stdout).to_string()
                + &String::from_utf8_lossy(&o.stderr);
            text.lines().next().unwrap_or_default().to_string()
        })
        .unwrap_or_default();
    println!(
        "== small GET routes: k2b-local (bench profile) beside nginx, wrk -t2 -c50 -d5s, {} cores ==",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("({wrk_version})");
    let peer = measure(&nginx.url, None);
    println!(
        "  nginx, 200-byte file:  {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        peer.requests_per_second, peer.p50_ms, peer.p99_ms
    );
    let jwks_match = format!("If-None-Match: {jwks_etag}");
    let icon_match = format!("If-None-Match: {icon_etag}");
    let routes: [(&str, &str, Option<&str>); 4] = [
        ("JWKS 200", &jwks, None),
        ("JWKS 304", &jwks, Some(&jwks_match)),
        ("icon 304", &icon, Some(&icon_match)),
        ("healthz", &format!("{base}/healthz"), None),
    ];
    let mut met = true;
    for (label, url, header) in routes {
        let figures = measure(url, header);
        let ratio = figures.requests_per_second / peer.requests_per_second;
        let ok = ratio >= RATIO_GOAL && figures.p99_ms <= P99_GOAL_MS && figures.non_2xx_3xx == 0;
        met &= ok;
        println!(
            "  {label:<22} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ratio to nginx {ratio:.2}{}  {}",
            figures.requests_per_second,
            figures.p50_ms,
            figures.p99_ms,
            if figures.non_2xx_3xx > 0 {
                format!("  ({} answers not 2xx/3xx)", figures.non_2xx_3xx)
            } else {
                String::new()
            },
            if ok { "met" } else { "NOT met" }
        );
    }
    println!(
        "goal (every route >= {RATIO_GOAL:.2} of nginx, p99 <= {P99_GOAL_MS} ms): {}",
        if met { "met" } else { "NOT met" }
    );
    drop(nginx);
    std::fs::remove_dir_all(&dir).ok();
    runner.stop();
}
