//! Icon drawing (figures, no assertions). For each logo in `benches/logos`, the time to draw the
//! four app icons (a) warm in this process, at the deployed PNG compression and at the peer's
//! (zlib's default level, which Skia's PNG encoder uses), and (b) cold, through the isolated
//! worker process started from the deployed `icons` binary (bench profile, process start
//! included), with the worker's peak RSS; next to the peer measured in the same run:
//! `@napi-rs/canvas` (`infra/bench/napi-canvas`, installed with npm on first use) drawing the
//! same variants the same way, in a fresh Node process per run (started like our worker: through
//! `/bin/sh`, with an environment of `PATH` and `LANG` only) and warm in one process per round.
//! Ours and the peer's runs sit side by side and take turns at going first (each cold run with
//! one of the peer's, the warm runs in rounds of a few), and each ratio is the median of the
//! ratios within the pairs or rounds, so a noisy machine slows both sides of a ratio alike. PNG
//! sizes are printed beside each.
//! For an SVG logo it also prints the drawing alone (the four sizes from a parsed tree, no PNG) by
//! `icons::vector` beside `resvg::render`, in rounds that take turns at going first.
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
use k2b_tests::figures::median;

/// Warm runs: rounds of a few runs each, ours and the peer's side by side.
const WARM_ROUNDS: usize = 5;
const WARM_PER_ROUND: usize = 4;
const WARM_RUNS: usize = WARM_ROUNDS * WARM_PER_ROUND;
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
    fn of(ms: Vec<f64>) -> Figure {
        Figure {
            median: median(&ms),
            min: ms.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:8.2} ms (min {:7.2})", self.median, self.min)
    }
}

/// The four sizes drawn from one parsed tree, by `icons::vector` and by `resvg::render`, in
/// rounds taking turns at going first: both medians and the median of the rounds' ratios.
fn drawing_alone(svg: &str, variants: &[icons::render::VariantSpec]) -> (Figure, Figure, f64) {
    use resvg::tiny_skia::{Pixmap, PixmapMut, Transform};
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).expect("svg");
    let (width, height) = (tree.size().width(), tree.size().height());
    let placed: Vec<(u32, Transform)> = variants
        .iter()
        .map(|variant| (variant.size, variant.placement(width, height)))
        .collect();
    let time = |draw: &dyn Fn(&resvg::usvg::Tree, Transform, &mut PixmapMut)| {
        let started = Instant::now();
        for (size, transform) in &placed {
            let mut canvas = Pixmap::new(*size, *size).expect("canvas");
            draw(&tree, *transform, &mut canvas.as_mut());
        }
        elapsed_ms(started)
    };
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..WARM_RUNS {
        let (k2b, resvg_ms) = in_turns(
            round,
            || time(&icons::vector::render),
            || time(&resvg::render),
        );
        ours.push(k2b);
        theirs.push(resvg_ms);
        ratios.push(k2b / resvg_ms);
    }
    (Figure::of(ours), Figure::of(theirs), median(&ratios))
}

/// Runs both sides of a comparison, `ours` first on even turns and `theirs` first on odd ones.
fn in_turns<A, B>(turn: usize, ours: impl FnOnce() -> A, theirs: impl FnOnce() -> B) -> (A, B) {
    if turn.is_multiple_of(2) {
        let a = ours();
        (a, theirs())
    } else {
        let b = theirs();
        (ours(), b)
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
        let request = worker_request(&source);
        let timed = |compression: PngCompression, runs: usize| -> Vec<f64> {
            (0..runs)
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
                .collect()
        };
        // In rounds: ours at both compressions, then (or first, in turns) a warm peer process,
        // so both see the same moment of a noisy machine; the warm ratio is the median of the
        // rounds' ratios.
        let (mut warm_ms, mut equal_ms, mut peer_warm_ms) = (Vec::new(), Vec::new(), Vec::new());
        let mut warm_round_ratios = Vec::with_capacity(WARM_ROUNDS);
        for round in 0..WARM_ROUNDS {
            let theirs = || {
                let answer = run_peer(&peer_dir, &["warm", &WARM_PER_ROUND.to_string()], &request);
                answer["ms"]
                    .as_array()
                    .expect("timings")
                    .iter()
                    .filter_map(serde_json::Value::as_f64)
                    .collect::<Vec<f64>>()
            };
            let ((deployed, equal), peer_round) = in_turns(
                round,
                || {
                    (
                        timed(icons::render::ICON_COMPRESSION, WARM_PER_ROUND),
                        timed(PngCompression::Balanced, WARM_PER_ROUND),
                    )
                },
                || peer.then(theirs),
            );
            if let Some(peer_round) = peer_round {
                warm_round_ratios.push(median(&equal) / median(&peer_round));
                peer_warm_ms.extend(peer_round);
            }
            warm_ms.extend(deployed);
            equal_ms.extend(equal);
        }
        let warm = Figure::of(warm_ms);
        let warm_equal = Figure::of(equal_ms);
        let (equal_icons, _) = render_all_with(
            &source.data,
            &source.mime,
            CLOUD_LOGO_SVG,
            &variants,
            PngCompression::Balanced,
        )
        .expect("render");
        let equal_png_bytes: usize = equal_icons.iter().map(|(_, png)| png.len()).sum();

        // (b) cold: a worker process per run, each next to a fresh peer process (when there is
        // one), the two taking turns at going first, so both see the same moment of a noisy
        // machine; the cold ratio is the median of the ratios within each pair.
        let mut peak_rss_kib = 0;
        let mut peer_rss_kib = 0;
        let mut peer_png_bytes = 0;
        let mut ours_ms = Vec::with_capacity(COLD_RUNS);
        let mut peer_ms = Vec::with_capacity(COLD_RUNS);
        let mut pair_ratios = Vec::with_capacity(COLD_RUNS);
        for run in 0..COLD_RUNS {
            let ours = || {
                let started = Instant::now();
                let icons = runtime.block_on(worker.render(&source)).expect("worker");
                let ms = elapsed_ms(started);
                assert!(!icons.fallback && icons.icons.len() == 4);
                peak_rss_kib = peak_rss_kib.max(icons.peak_rss_kib.unwrap_or(0));
                ms
            };
            let theirs = || {
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
            };
            let (k2b, peer_run) = in_turns(run, ours, || peer.then(theirs));
            ours_ms.push(k2b);
            if let Some(peer_run) = peer_run {
                peer_ms.push(peer_run);
                pair_ratios.push(k2b / peer_run);
            }
        }
        let cold = Figure::of(ours_ms);

        println!("{file}");
        if mime == "image/svg+xml" {
            let text = std::str::from_utf8(&bytes).expect("svg text");
            let (ours, theirs, ratio) = drawing_alone(text, &variants);
            println!(
                "  k2b   drawing alone {ours}   resvg {theirs}   k2b / resvg {ratio:.2} (median of {WARM_RUNS} rounds' ratios)"
            );
        }
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
        let peer_cold = Figure::of(peer_ms);
        let peer_warm = Figure::of(peer_warm_ms);
        println!(
            "  peer  warm {peer_warm}   cold {peer_cold}   process peak RSS {:6.1} MiB   PNGs {:7} bytes",
            peer_rss_kib as f64 / 1024.0,
            peer_png_bytes
        );
        let warm_ratio = median(&warm_round_ratios);
        let cold_ratio = median(&pair_ratios);
        println!(
            "  k2b / peer: warm at equal compression {warm_ratio:.2} (goal <= {WARM_GOAL:.2}; median of {WARM_ROUNDS} rounds' ratios, ratio of the medians {:.2}), warm as deployed {:.2}; cold {cold_ratio:.2} (goal <= {COLD_GOAL:.2}; median of {COLD_RUNS} paired runs, ratio of the medians {:.2})",
            warm_equal.median / peer_warm.median,
            warm.median / peer_warm.median,
            cold.median / peer_cold.median
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
