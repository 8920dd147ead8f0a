//! Icon drawing (figures, no assertions). For each logo in `benches/logos`, the time to draw the
//! four app icons (a) warm in this process, at the deployed PNG compression and at the peer's
//! (zlib's default level, which Skia's PNG encoder uses), and (b) cold, through the isolated
//! worker process started from the deployed `icons` binary (bench profile, process start
//! included), with the worker's peak RSS; next to the peer measured in the same run:
//! `@napi-rs/canvas` (`infra/bench/napi-canvas`, installed with npm on first use) drawing the
//! same variants the same way, in a fresh Node process per run (started like our worker: through
//! `/bin/sh`, with an environment of `PATH` and `LANG` only) and warm in one process. PNG sizes
//! are printed beside each.
//! Goal on every logo: cold ≤ 25 % and warm (equal compression) ≤ 50 % of the peer's time.
//!
//! Run: `cargo bench -p k2b-tests --bench icons`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use icons::render::{PngCompression, render_all, render_all_with, variant_specs};
use icons::worker::worker_request;
use icons::{IconRenderer, WorkerRenderer};
use k2b_core::branding::{CLOUD_LOGO_SVG, parse_icon_source};

const WARM_RUNS: usize = 20;
const COLD_GOAL: f64 = 0.25;
const WARM_GOAL: f64 = 0.50;
const COLD_RUNS: usize = 10;

const LOGOS: [(&str, &str); 4] = [
    ("simple.svg", "image/svg+xml"),
    ("complex.svg", "image/svg+xml"),
    ("logo-1024.png", "image/png"),
    ("photo-2000x1000.jpg", "image/jpeg"),
];

/// Median and minimum of a set of durations in milliseconds.
#[derive(Clone, Copy)]
struct Figure {
    median: f64,
    min: f64,
}

impl Figure {
    fn of(mut ms: Vec<f64>) -> Figure {
        ms.sort_by(f64::total_cmp);
        Figure {
            median: ms[ms.len() / 2],
            min: ms[0],
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:8.2} ms (min {:7.2})", self.median, self.min)
    }
}

fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

/// Installs the peer's packages when missing; `None` (with the reason printed) when Node or npm
/// is not available.
fn peer_ready(dir: &Path) -> Option<()> {
    let node = Command::new("node").arg("--version").output().ok()?;
    if !node.status.success() {
        println!("peer: node not available");
        return None;
    }
    if !dir.join("node_modules/@napi-rs/canvas").exists() {
        println!("peer: installing @napi-rs/canvas with npm");
        let install = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .current_dir(dir)
            .status()
            .ok()?;
        if !install.success() {
            println!("peer: npm install failed");
            return None;
        }
    }
    Some(())
}

/// Runs the peer script with `args`, the request on stdin; returns its JSON answer.
fn run_peer(dir: &Path, args: &[&str], request: &str) -> serde_json::Value {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg("exec node render.mjs \"$@\"")
        .arg("node")
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start node");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.as_bytes())
        .expect("write request");
    let output = child.wait_with_output().expect("peer output");
    assert!(output.status.success(), "the peer failed");
    serde_json::from_slice(&output.stdout).expect("peer JSON")
}

fn main() {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let logos = manifest_dir.join("benches/logos");
    let peer_dir = manifest_dir.join("../infra/bench/napi-canvas");
    let peer = peer_ready(&peer_dir).is_some();
    let worker = WorkerRenderer::new(k2b_tests::workspace_binary("icons"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let variants = variant_specs();

    println!(
        "== icon benchmarks: four variants per logo; median (min) of {WARM_RUNS} warm / {COLD_RUNS} cold runs =="
    );
    let mut verdicts = Vec::new();
    for (file, mime) in LOGOS {
        let bytes = std::fs::read(logos.join(file)).expect("logo");
        let source = parse_icon_source(&format!("data:{mime};base64,{}", STANDARD.encode(&bytes)));
        assert!(!source.is_cloud_logo(), "{file} was not accepted as a logo");

        // (a) warm, in this process.
        let (icons, fallback) =
            render_all(&source.data, &source.mime, CLOUD_LOGO_SVG, &variants).expect("render");
        assert!(!fallback, "{file} fell back to the Cloud logo");
        let png_bytes: usize = icons.iter().map(|(_, png)| png.len()).sum();
        let warm_at = |compression: PngCompression| {
            Figure::of(
                (0..WARM_RUNS)
                    .map(|_| {
                        let started = Instant::now();
                        render_all_with(
                            &source.data,
                            &source.mime,
                            CLOUD_LOGO_SVG,
                            &variants,
                            compression,
                        )
                        .expect("render");
                        elapsed_ms(started)
                    })
                    .collect(),
            )
        };
        let warm = warm_at(icons::render::ICON_COMPRESSION);
        let warm_equal = warm_at(PngCompression::Balanced);
        let (equal_icons, _) = render_all_with(
            &source.data,
            &source.mime,
            CLOUD_LOGO_SVG,
            &variants,
            PngCompression::Balanced,
        )
        .expect("render");
        let equal_png_bytes: usize = equal_icons.iter().map(|(_, png)| png.len()).sum();

        // (b) cold: a worker process per run.
        let mut peak_rss_kib = 0;
        let cold = Figure::of(
            (0..COLD_RUNS)
                .map(|_| {
                    let started = Instant::now();
                    let icons = runtime.block_on(worker.render(&source)).expect("worker");
                    let ms = elapsed_ms(started);
                    assert!(!icons.fallback && icons.icons.len() == 4);
                    peak_rss_kib = peak_rss_kib.max(icons.peak_rss_kib.unwrap_or(0));
                    ms
                })
                .collect(),
        );

        println!("{file}");
        println!(
            "  k2b   warm {warm}   cold {cold}   worker peak RSS {:6.1} MiB   PNGs {:7} bytes (deployed compression)",
            peak_rss_kib as f64 / 1024.0,
            png_bytes
        );
        println!(
            "  k2b   warm {warm_equal}   at zlib's default level                          PNGs {equal_png_bytes:7} bytes"
        );
        if !peer {
            continue;
        }
        let request = worker_request(&source);
        let mut peer_rss_kib = 0;
        let mut peer_png_bytes = 0;
        let peer_cold = Figure::of(
            (0..COLD_RUNS)
                .map(|_| {
                    let started = Instant::now();
                    let answer = run_peer(&peer_dir, &[], &request);
                    let ms = elapsed_ms(started);
                    assert_eq!(answer["fallback"], false, "the peer fell back on {file}");
                    assert_eq!(answer["icons"].as_object().map(|o| o.len()), Some(4));
                    peer_rss_kib = peer_rss_kib.max(answer["maxRssKib"].as_u64().unwrap_or(0));
                    peer_png_bytes = answer["icons"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter_map(|(_, b64)| b64.as_str())
                        .filter_map(|b64| STANDARD.decode(b64).ok())
                        .map(|png| png.len())
                        .sum::<usize>();
                    ms
                })
                .collect(),
        );
        let answer = run_peer(&peer_dir, &["warm", &WARM_RUNS.to_string()], &request);
        let peer_warm = Figure::of(
            answer["ms"]
                .as_array()
                .expect("timings")
                .iter()
                .filter_map(serde_json::Value::as_f64)
                .collect(),
        );
        println!(
            "  peer  warm {peer_warm}   cold {peer_cold}   process peak RSS {:6.1} MiB   PNGs {:7} bytes",
            peer_rss_kib as f64 / 1024.0,
            peer_png_bytes
        );
        let warm_ratio = warm_equal.median / peer_warm.median;
        let cold_ratio = cold.median / peer_cold.median;
        println!(
            "  k2b / peer (medians): warm at equal compression {warm_ratio:.2} (goal <= {WARM_GOAL:.2}), warm as deployed {:.2}, cold {cold_ratio:.2} (goal <= {COLD_GOAL:.2})",
            warm.median / peer_warm.median
        );
        verdicts.push((file, warm_ratio <= WARM_GOAL, cold_ratio <= COLD_GOAL));
    }
    if peer {
        let all = verdicts.iter().all(|(_, warm, cold)| *warm && *cold);
        for (file, warm, cold) in &verdicts {
            println!(
                "  {file:<22} warm {}  cold {}",
                if *warm { "met" } else { "NOT met" },
                if *cold { "met" } else { "NOT met" }
            );
        }
        println!(
            "goal (every logo: cold <= {COLD_GOAL:.2} and warm <= {WARM_GOAL:.2} of the peer): {}",
            if all { "met" } else { "NOT met" }
        );
    }
}
