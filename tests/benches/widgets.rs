//! Widget stream overhead on the local runner (figures, no assertions): 20 widgets per stream
//! on providers that answer at once.
//! - overhead = total stream time (request sent → `done` line) − the slowest widget's own
//!   latency (its `ms`), p50 and p99; time to the `start` line (the first byte);
//! - where the setup's time goes, from the runner's own "Widget stream set up" events: the
//!   credentials (from the request reaching the routes to the handler), the setup after them
//!   (registry read, then tokens ready), the registry read, the signer guard's part that did not
//!   overlap the signatures, the signatures, how many tokens were signed or reused, and how many
//!   streams used the tokens signed while the registry was read;
//! - one stream at a time and 8 concurrent streams, each with a new session per stream (every
//!   token signed) and with one session (still-fresh tokens reused);
//! - the CPU each stream cost the runner, this process (the 20 providers and the client) and
//!   Postgres: the floor of the concurrent figures on this machine's cores;
//! - this machine's RS256 signing rate on one core, and the CPU floor it puts under a stream
//!   whose 20 tokens are all signed (the signed cases cannot be faster than that);
//! - the runner held to a fraction of a core (a cgroup CPU quota), as Lambda gives CPU in
//!   proportion to memory (1,769 MB = one vCPU): the figures behind the widgets function's
//!   `MemorySize`.
//!
//! Goal: overhead p50 ≤ 5 ms and p99 ≤ 12 ms, one stream and 8 concurrent streams.
//!
//! Run: `cargo bench -p k2b-tests --bench widgets` (builds `k2b-local` in the bench profile);
//! `-- <text>` runs only the cases whose label contains the text (`quota` for the CPU shares).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k2b_core::Core;
use k2b_core::identity::keys;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::figures::{ms, percentile, rate};
use k2b_tests::{
    LocalRunner, TEST_APP_SECRET, TestDb, core_for, create_user, serve, session_cookie,
};
use serde_json::{Value, json};

const WIDGETS: usize = 20;
const RUNS: usize = 100;
const CONCURRENT: usize = 8;
const P50_GOAL_MS: f64 = 5.0;
const P99_GOAL_MS: f64 = 12.0;
/// Lambda's memory per vCPU.
const MB_PER_VCPU: f64 = 1769.0;

/// One stream's figures.
struct Stream {
    overhead: f64,
    start: f64,
}

async fn stream(client: &reqwest::Client, path: &str, cookie: &str) -> Stream {
    let sent = Instant::now();
    let mut response = client
        .get(path)
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    assert_eq!(response.status(), 200, "stream status");
    let mut buffer = Vec::new();
    let mut start_at = None;
    let mut slowest = 0u64;
    let mut done = false;
    while let Some(chunk) = response.chunk().await.expect("body") {
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line: Value = serde_json::from_slice(&line).expect("json line");
            match line["type"].as_str() {
                Some("start") => start_at = Some(sent.elapsed()),
                Some("widget") => {
                    assert_eq!(line["status"], "ok", "{line}");
                    slowest = slowest.max(line["ms"].as_u64().expect("ms"));
                }
                Some("done") => done = true,
                _ => {}
            }
        }
    }
    let total = sent.elapsed();
    assert!(done, "a stream ended without done");
    Stream {
        overhead: ms(total) - slowest as f64,
        start: ms(start_at.expect("start line")),
    }
}

/// CPU time (user + system) a process has used, in milliseconds, from `/proc/<pid>/stat`.
fn cpu_ms(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th, in clock ticks of 10 ms.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0)
}

/// CPU time of every Postgres process on this machine, in milliseconds.
fn postgres_cpu_ms() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return f64::NAN;
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().into_string().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == "postgres").then(|| cpu_ms(&pid)).flatten()
        })
        .sum()
}

/// CPU used so far by the runner, this process (the providers and the client) and Postgres.
#[derive(Clone, Copy)]
struct Cpu {
    runner: f64,
    bench: f64,
    postgres: f64,
}

impl Cpu {
    fn now(runner: u32) -> Cpu {
        Cpu {
            runner: cpu_ms(&runner.to_string()).unwrap_or(f64::NAN),
            bench: cpu_ms("self").unwrap_or(f64::NAN),
            postgres: postgres_cpu_ms(),
        }
    }

    /// What each of `streams` streams cost since `before`, and the wall time that CPU takes
    /// on `cores` cores when `at_once` streams run together (everything here shares them).
    fn per_stream(self, before: Cpu, streams: usize, at_once: usize, cores: usize) -> String {
        let each = |now: f64, then: f64| (now - then) / streams as f64;
        let (runner, bench, postgres) = (
            each(self.runner, before.runner),
            each(self.bench, before.bench),
            each(self.postgres, before.postgres),
        );
        let all = runner + bench + postgres;
        format!(
            "CPU per stream: runner {runner:.2} ms, providers and client {bench:.2} ms, Postgres {postgres:.2} ms; \
             {all:.2} ms in all: {at_once} at once take at least {:.2} ms on {cores} cores",
            all * at_once as f64 / cores as f64
        )
    }
}

/// Cookies: a new session for every stream, or one session for all.
enum Sessions {
    New,
    One(String),
}

async fn cookie(core: &Core, sessions: &Sessions, user: &k2b_core::auth::UserRecord) -> String {
    match sessions {
        Sessions::One(cookie) => cookie.clone(),
        Sessions::New => session_cookie(core, user).await,
    }
}

/// The cookies of `workers` concurrent loops of streams: `runs` measured streams in all, after
/// two warm-up streams per loop.
async fn cookies(
    core: &Core,
    user: &k2b_core::auth::UserRecord,
    sessions: &Sessions,
    workers: usize,
    runs: usize,
) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for _ in 0..workers {
        let mut mine = Vec::new();
        for _ in 0..(runs / workers + 2) {
            mine.push(cookie(core, sessions, user).await);
        }
        all.push(mine);
    }
    all
}

/// One loop of streams per list of cookies, all at once; the overheads and first bytes of all
/// but each loop's first two streams.
async fn measure(path: &str, cookies: Vec<Vec<String>>) -> (Vec<f64>, Vec<f64>) {
    let client = reqwest::Client::new();
    let tasks: Vec<_> = cookies
        .into_iter()
        .map(|mine| {
            let client = client.clone();
            let path = path.to_string();
            tokio::spawn(async move {
                let mut figures = Vec::new();
                for (run, cookie) in mine.iter().enumerate() {
                    let stream = stream(&client, &path, cookie).await;
                    if run >= 2 {
                        figures.push(stream); // the first two warm the connections up
                    }
                }
                figures
            })
        })
        .collect();
    let mut overheads = Vec::new();
    let mut starts = Vec::new();
    for task in tasks {
        for stream in task.await.expect("join") {
            overheads.push(stream.overhead);
            starts.push(stream.start);
        }
    }
    overheads.sort_by(f64::total_cmp);
    starts.sort_by(f64::total_cmp);
    (overheads, starts)
}

/// Finds `name` anywhere in a JSON log line.
fn field(value: &Value, name: &str) -> Option<f64> {
    match value {
        Value::Object(map) => map
            .get(name)
            .and_then(Value::as_f64)
            .or_else(|| map.values().find_map(|v| field(v, name))),
        _ => None,
    }
}

/// Finds the boolean `name` anywhere in a JSON log line.
fn flag(value: &Value, name: &str) -> Option<bool> {
    match value {
        Value::Object(map) => map
            .get(name)
            .and_then(Value::as_bool)
            .or_else(|| map.values().find_map(|v| flag(v, name))),
        _ => None,
    }
}

/// The setup events in a stretch of the runner's output.
fn setup_breakdown(output: &str) -> Option<String> {
    let events: Vec<Value> = output
        .lines()
        .filter(|line| line.contains("Widget stream set up"))
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    if events.is_empty() {
        return None;
    }
    let p50 = |name: &str| {
        let mut values: Vec<f64> = events.iter().filter_map(|e| field(e, name)).collect();
        values.sort_by(f64::total_cmp);
        if values.is_empty() {
            f64::NAN
        } else {
            percentile(&values, 50.0)
        }
    };
    let sum = |name: &str| -> f64 { events.iter().filter_map(|e| field(e, name)).sum() };
    let speculated = events
        .iter()
        .filter(|e| flag(e, "speculated") == Some(true))
        .count();
    Some(format!(
        "credentials {:.2} ms, then setup {:.2} ms: registry read {:.2} ms beside the issuance \
         (signer guard {:.2} ms not overlapping signatures {:.2} ms) (p50); tokens signed {:.0}, \
         reused {:.0}; signed while the registry was read: {speculated} of {} streams",
        p50("credentials_ms"),
        p50("setup_ms"),
        p50("registry_ms"),
        p50("guard_ms"),
        p50("signing_ms"),
        sum("signed"),
        sum("reused"),
        events.len()
    ))
}

/// A cgroup (v1 `cpu` controller) holding a process to a share of one core.
struct CpuQuota {
    dir: PathBuf,
}

impl CpuQuota {
    fn hold(pid: u32, cores: f64) -> Option<CpuQuota> {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/k2b-bench-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).ok()?;
        let quota = CpuQuota { dir };
        quota.set(cores)?;
        std::fs::write(quota.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(quota)
    }

    fn set(&self, cores: f64) -> Option<()> {
        std::fs::write(self.dir.join("cpu.cfs_period_us"), "100000").ok()?;
        let quota = ((cores * 100_000.0) as i64).max(1000);
        std::fs::write(self.dir.join("cpu.cfs_quota_us"), quota.to_string()).ok()
    }

    fn release(self, pid: u32) {
        std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", pid.to_string()).ok();
        std::fs::remove_dir(&self.dir).ok();
    }
}

/// RS256 signatures per second on one core (2048-bit key, an invocation-sized message).
fn rs256_per_second() -> f64 {
    let key = keys::generate().expect("key");
    let signing = keys::import(&key.kid, &key.public, &key.private).expect("import");
    let message = [b'x'; 600];
    rate(Duration::from_secs(1), || {
        signing.sign(&message).expect("sign");
    })
}

fn line(label: &str, overheads: &[f64], starts: &[f64]) -> bool {
    let (p50, p99) = (percentile(overheads, 50.0), percentile(overheads, 99.0));
    let met = p50 <= P50_GOAL_MS && p99 <= P99_GOAL_MS;
    println!(
        "  {label:<46} overhead p50 {p50:6.2} ms  p99 {p99:6.2} ms  first byte p50 {:6.2} ms  {}",
        percentile(starts, 50.0),
        if met { "met" } else { "NOT met" }
    );
    met
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let db = TestDb::new().await;
    let core = core_for(&db);
    let user = create_user(&core, "bench", false).await;
    let url = db.url();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("APP_SECRET", TEST_APP_SECRET),
        ("RUST_LOG", "warn,widgets=debug"),
    ];
    let runner = LocalRunner::start(&env);

    let mut query = Vec::new();
    for i in 0..WIDGETS {
        let app = format!("bench-{i:02}");
        let body = json!({"title": app, "blocks": [{"kind": "stat", "value": i, "label": "n"}]});
        let router = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move { axum::Json(body) }
        });
        let origin = serve(router).await;
        let entry = json!({
            "id": app, "name": app, "icon": "i", "description": "d",
            "baseUrl": origin, "routes": [format!("/app/{app}")],
            "widgets": [{"id": "summary", "path": "/w", "title": "Summary"}]
        });
        let mut conn = db.pool.acquire().await.expect("conn");
        store::upsert(&mut conn, &entry, APP_REGISTRY_TTL)
            .await
            .expect("register");
        query.push(format!("widget={app}/summary"));
    }
    let path = format!("{}/api/widgets/v1?{}", runner.base_url, query.join("&"));
    let one = Sessions::One(session_cookie(&core, &user).await);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "== widget stream: {WIDGETS} instant widgets per stream, k2b-local (bench profile), {cores} cores =="
    );

    let rate = rs256_per_second();
    let one_core_ms = WIDGETS as f64 * 1000.0 / rate;
    println!(
        "  RS256 on this machine: {rate:.0} signatures/s on one core; a stream's {WIDGETS} signed tokens: \
         {one_core_ms:.2} ms of CPU, at least {:.2} ms spread over {cores} cores",
        one_core_ms / cores as f64
    );

    // `cargo bench … -- <text>`: only the cases whose label contains it.
    let filter: Option<String> = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let wanted = |label: &str| filter.as_deref().is_none_or(|text| label.contains(text));
    let mut met = true;
    let cases: [(&str, &Sessions, usize, usize); 4] = [
        (
            "1 stream at a time, new session each",
            &Sessions::New,
            1,
            RUNS,
        ),
        ("1 stream at a time, one session (reuse)", &one, 1, RUNS),
        (
            "8 concurrent streams, new session each",
            &Sessions::New,
            CONCURRENT,
            2 * RUNS,
        ),
        (
            "8 concurrent streams, one session (reuse)",
            &one,
            CONCURRENT,
            2 * RUNS,
        ),
    ];
    for (label, sessions, workers, runs) in cases {
        if !wanted(label) {
            continue;
        }
        let before = runner.output().len();
        let cookies = cookies(&core, &user, sessions, workers, runs).await;
        let streams: usize = cookies.iter().map(Vec::len).sum();
        let cpu = Cpu::now(runner.pid());
        let (overheads, starts) = measure(&path, cookies).await;
        let used = Cpu::now(runner.pid()).per_stream(cpu, streams, workers, cores);
        met &= line(label, &overheads, &starts);
        if let Some(breakdown) = setup_breakdown(&runner.output()[before..]) {
            println!("      setup: {breakdown}");
        }
        println!("      {used}");
    }
    println!(
        "goal (overhead p50 <= {P50_GOAL_MS} ms, p99 <= {P99_GOAL_MS} ms on this machine): {}",
        if met { "met" } else { "NOT met" }
    );

    if !wanted("quota") {
        runner.stop();
        return;
    }
    println!(
        "held to a share of one core (cgroup CPU quota; Lambda: {MB_PER_VCPU:.0} MB = 1 vCPU):"
    );
    let pid = runner.pid();
    let mut quota: Option<CpuQuota> = None;
    for memory in [256.0, 512.0, 1024.0, 1769.0] {
        let share = memory / MB_PER_VCPU;
        match &quota {
            Some(held) => {
                held.set(share);
            }
            None => match CpuQuota::hold(pid, share) {
                Some(held) => quota = Some(held),
                None => {
                    println!("  (no writable cgroup cpu controller on this machine: not measured)");
                    break;
                }
            },
        }
        for (label, sessions) in [("new session each", &Sessions::New), ("one session", &one)] {
            let before = runner.output().len();
            let cookies = cookies(&core, &user, sessions, 1, RUNS / 2).await;
            let (overheads, starts) = measure(&path, cookies).await;
            line(
                &format!("{memory:.0} MB ({share:.2} core), {label}"),
                &overheads,
                &starts,
            );
            if let Some(breakdown) = setup_breakdown(&runner.output()[before..]) {
                println!("      setup: {breakdown}");
            }
        }
    }
    if let Some(held) = quota {
        held.release(pid);
    }
    runner.stop();
}
