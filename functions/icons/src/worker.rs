//! Rendering in an isolated child process of the same binary.
//!
//! The logo is untrusted image data for native decoders. The child gets no configuration and no
//! credentials (its environment is only `PATH` and `LANG`), a 512 MiB data limit set by the shell
//! before it starts, JSON on stdin and stdout, 10 seconds, and 8 MiB of output. A decoder bomb or
//! bug costs the child, never the server. Before reading anything the child drops every
//! capability, and the serving process is not dumpable, so a compromised worker cannot read the
//! parent's environment or memory through `/proc`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k2b_core::branding::{APP_ICON_SOURCE_MAX_BYTES, AppIconSource, CLOUD_LOGO_SVG};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::render::{VariantSpec, render_all, variant_specs};

/// The argument that makes a binary run as the render worker.
pub const WORKER_FLAG: &str = "--k2b-icon-render-worker";
/// The worker is killed after this long.
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(10);
/// Four PNGs of at most 512 px in base64, plus the envelope.
pub const MAX_OUTPUT_BYTES: usize = 8 * 1024 * 1024;
/// `ulimit -d` in KiB: 512 MiB of data (heap and private mappings) for the worker.
pub const DATA_LIMIT_KIB: u64 = 524_288;
/// The two answers a failing worker gives, and nothing more.
pub const INVALID_REQUEST: &str = "Invalid icon request.";
pub const RENDER_FAILED: &str = "Icon rendering failed.";

const MAX_SOURCE_CHARS: usize = (APP_ICON_SOURCE_MAX_BYTES * 4).div_ceil(3);
const MAX_MIME_CHARS: usize = 100;
const MAX_FALLBACK_CHARS: usize = 64 * 1024;

/// What the parent sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRequest {
    pub source: String,
    pub mime: String,
    pub fallback: String,
    pub variants: Vec<VariantSpec>,
}

/// What a successful worker answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerOutput {
    pub icons: std::collections::BTreeMap<String, String>,
    pub fallback: bool,
    /// The worker's peak resident memory (KiB), for the benchmark and the logs.
    #[serde(default)]
    pub peak_rss_kib: Option<u64>,
    /// The data limit the worker ran under (bytes).
    #[serde(default)]
    pub data_limit_bytes: Option<u64>,
}

fn valid(request: &WorkerRequest) -> bool {
    let hex_color = |c: &str| {
        c.len() == 7 && c.starts_with('#') && c[1..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    request.source.len() <= MAX_SOURCE_CHARS
        && request.mime.chars().count() <= MAX_MIME_CHARS
        && request.fallback.chars().count() <= MAX_FALLBACK_CHARS
        && (1..=8).contains(&request.variants.len())
        && request.variants.iter().all(|v| {
            !v.id.is_empty()
                && v.id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && (16..=1024).contains(&v.size)
                && v.background.as_deref().is_none_or(hex_color)
                && v.box_fraction > 0.0
                && v.box_fraction <= 1.0
        })
}

/// Reads a `/proc/self/status`-style line value in KiB.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The soft `Max data size` limit from `/proc/self/limits`, in bytes.
fn data_limit_bytes() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max data size"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The worker's whole job, from request text to answer text and exit code.
pub fn handle(input: &str) -> (String, i32) {
    let failure = |message: &str| (serde_json::json!({ "error": message }).to_string(), 1);
    let Ok(request) = serde_json::from_str::<WorkerRequest>(input) else {
        return failure(INVALID_REQUEST);
    };
    if !valid(&request) {
        return failure(INVALID_REQUEST);
    }
    let Ok(source) = STANDARD.decode(request.source.as_bytes()) else {
        return failure(RENDER_FAILED);
    };
    if source.len() > APP_ICON_SOURCE_MAX_BYTES {
        return failure(RENDER_FAILED);
    }
    match render_all(&source, &request.mime, &request.fallback, &request.variants) {
        Ok((icons, fallback)) => {
            let output = WorkerOutput {
                icons: icons
                    .into_iter()
                    .map(|(id, png)| (id, STANDARD.encode(png)))
                    .collect(),
                fallback,
                peak_rss_kib: proc_status_kib("VmHWM:"),
                data_limit_bytes: data_limit_bytes(),
            };
            match serde_json::to_string(&output) {
                Ok(text) => (text, 0),
                Err(_) => failure(RENDER_FAILED),
            }
        }
        Err(_) => failure(RENDER_FAILED),
    }
}

/// Call first thing in `main`: when the process was started as the render worker, this renders
/// and exits; otherwise it returns at once.
pub fn run_if_worker() {
    if std::env::args().nth(1).as_deref() != Some(WORKER_FLAG) {
        return;
    }
    confine_or_exit();
    let mut input = String::new();
    let code = match std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut input) {
        Ok(_) => {
            let (answer, code) = handle(&input);
            let mut stdout = std::io::stdout().lock();
            if std::io::Write::write_all(&mut stdout, answer.as_bytes()).is_err() {
                1
            } else {
                code
            }
        }
        Err(_) => 1,
    };
    std::process::exit(code);
}

/// Why a run failed (the message is logged; the logo never is).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct RenderFailure(pub String);

/// The four PNGs of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedIcons {
    pub icons: std::collections::BTreeMap<String, Vec<u8>>,
    pub fallback: bool,
    pub peak_rss_kib: Option<u64>,
    pub data_limit_bytes: Option<u64>,
}

/// Renders the four icons of a source, somehow (a worker process in production; tests may
/// substitute a stub that counts or fails).
pub trait IconRenderer: Send + Sync {
    fn render(
        &self,
        source: &AppIconSource,
    ) -> futures::future::BoxFuture<'static, Result<RenderedIcons, RenderFailure>>;
}

/// Renders in a child process: `program WORKER_FLAG`, started through `sh -c` so the data limit
/// is in place before the program runs.
pub struct WorkerRenderer {
    program: PathBuf,
    spawns: AtomicU64,
}

/// How a worker starts: `program` with [`WORKER_FLAG`] under the data limit, with an
/// environment of `PATH` and `LANG` only, piped stdin and stdout, and killed when dropped. The
/// program confines itself first ([`run_if_worker`]).
pub fn worker_command(program: &std::path::Path) -> tokio::process::Command {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        // No paths in the shell code: the program is "$0".
        .arg(format!(
            "ulimit -d {DATA_LIMIT_KIB} || exit 70; exec \"$0\" {WORKER_FLAG}"
        ))
        .arg(program)
        .env_clear()
        .env("PATH", path)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// The worker's first step: no capabilities, no way to gain any, no way to read its parent
/// ([`k2b_core::sandbox::enter_worker_sandbox`]); a worker that cannot confine itself exits
/// with 71 before reading any input.
pub fn confine_or_exit() {
    if k2b_core::sandbox::enter_worker_sandbox().is_err() {
        std::process::exit(71);
    }
}

impl WorkerRenderer {
    /// A renderer running `program` (a binary that calls [`run_if_worker`] first).
    pub fn new(program: PathBuf) -> WorkerRenderer {
        WorkerRenderer {
            program,
            spawns: AtomicU64::new(0),
        }
    }

    /// A renderer running this very binary.
    pub fn current_exe() -> Result<WorkerRenderer, RenderFailure> {
        std::env::current_exe()
            .map(WorkerRenderer::new)
            .map_err(|_| RenderFailure("the render worker binary is unknown".into()))
    }

    /// How many workers were started.
    pub fn spawns(&self) -> u64 {
        self.spawns.load(Ordering::SeqCst)
    }

    async fn run(program: PathBuf, request: String) -> Result<RenderedIcons, RenderFailure> {
        if !cfg!(target_os = "linux") {
            return Err(RenderFailure(
                "Icon rendering requires Linux with memory isolation.".into(),
            ));
        }
        let mut child = worker_command(&program)
            .spawn()
            .map_err(|e| RenderFailure(format!("the render worker did not start: {e}")))?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| RenderFailure(RENDER_FAILED.into()))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| RenderFailure(RENDER_FAILED.into()))?;
        let work = async {
            let writing = async {
                stdin.write_all(request.as_bytes()).await.ok();
                drop(stdin);
            };
            let reading = async {
                let mut output = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    let read = stdout
                        .read(&mut chunk)
                        .await
                        .map_err(|_| RenderFailure(RENDER_FAILED.into()))?;
                    if read == 0 {
                        break;
                    }
                    if output.len() + read > MAX_OUTPUT_BYTES {
                        return Err(RenderFailure("Rendered icons exceed their budget.".into()));
                    }
                    output.extend_from_slice(&chunk[..read]);
                }
                Ok(output)
            };
            let ((), output) = tokio::join!(writing, reading);
            let status = child
                .wait()
                .await
                .map_err(|_| RenderFailure(RENDER_FAILED.into()))?;
            Ok::<_, RenderFailure>((status, output?))
        };
        let outcome = tokio::time::timeout(RENDER_TIMEOUT, work).await;
        // Whatever happened, the child does not outlive the run.
        child.start_kill().ok();
        child.wait().await.ok();
        let (status, output) =
            outcome.map_err(|_| RenderFailure("Icon rendering timed out.".into()))??;
        if !status.success() || output.iter().all(u8::is_ascii_whitespace) {
            return Err(RenderFailure(RENDER_FAILED.into()));
        }
        let parsed: WorkerOutput =
            serde_json::from_slice(&output).map_err(|_| RenderFailure(RENDER_FAILED.into()))?;
        let mut icons = std::collections::BTreeMap::new();
        for spec in variant_specs() {
            let png = parsed
                .icons
                .get(&spec.id)
                .and_then(|b64| STANDARD.decode(b64).ok())
                .filter(|png| !png.is_empty())
                .ok_or_else(|| RenderFailure(RENDER_FAILED.into()))?;
            icons.insert(spec.id, png);
        }
        if parsed.fallback {
            // Never the logo or its data, only that it could not be used.
            tracing::warn!(
                "The installation logo could not be decoded; the app icons use the Cloud logo"
            );
        }
        Ok(RenderedIcons {
            icons,
            fallback: parsed.fallback,
            peak_rss_kib: parsed.peak_rss_kib,
            data_limit_bytes: parsed.data_limit_bytes,
        })
    }
}

/// The request a worker gets for a source.
pub fn worker_request(source: &AppIconSource) -> String {
    serde_json::to_string(&WorkerRequest {
        source: STANDARD.encode(&source.data),
        mime: source.mime.clone(),
        fallback: CLOUD_LOGO_SVG.to_string(),
        variants: variant_specs(),
    })
    .unwrap_or_default()
}

impl IconRenderer for WorkerRenderer {
    fn render(
        &self,
        source: &AppIconSource,
    ) -> futures::future::BoxFuture<'static, Result<RenderedIcons, RenderFailure>> {
        self.spawns.fetch_add(1, Ordering::SeqCst);
        let request = worker_request(source);
        let program = self.program.clone();
        Box::pin(WorkerRenderer::run(program, request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(variants: serde_json::Value) -> String {
        serde_json::json!({
            "source": STANDARD.encode(CLOUD_LOGO_SVG),
            "mime": "image/svg+xml",
            "fallback": CLOUD_LOGO_SVG,
            "variants": variants,
        })
        .to_string()
    }

    #[test]
    fn requests_are_validated_with_the_two_fixed_answers() {
        let ok =
            request(serde_json::json!([{"id": "a", "size": 32, "background": null, "box": 0.5}]));
        let (answer, code) = handle(&ok);
        assert_eq!(code, 0, "{answer}");
        let output: WorkerOutput = serde_json::from_str(&answer).expect("output");
        assert!(!output.fallback);
        assert!(output.icons.contains_key("a"));
        for bad in [
            serde_json::json!([]),
            serde_json::json!([{"id": "A", "size": 32, "background": null, "box": 0.5}]),
            serde_json::json!([{"id": "a", "size": 8, "background": null, "box": 0.5}]),
            serde_json::json!([{"id": "a", "size": 32, "background": "red", "box": 0.5}]),
            serde_json::json!([{"id": "a", "size": 32, "background": null, "box": 0}]),
            serde_json::json!([{"id": "a", "size": 32, "background": null, "box": 1.5}]),
            serde_json::json!([{"id": "a", "size": 32.5, "background": null, "box": 0.5}]),
        ] {
            let (answer, code) = handle(&request(bad.clone()));
            assert_eq!(
                (answer.as_str(), code),
                (r#"{"error":"Invalid icon request."}"#, 1),
                "{bad}"
            );
        }
        assert_eq!(
            handle("not json"),
            (r#"{"error":"Invalid icon request."}"#.to_string(), 1)
        );
        let too_many: Vec<_> = (0..9).map(|i| serde_json::json!({"id": format!("v{i}"), "size": 16, "background": null, "box": 1})).collect();
        assert_eq!(handle(&request(serde_json::json!(too_many))).1, 1);
    }

    #[test]
    fn a_broken_fallback_fails_the_run_with_the_fixed_message() {
        let input = serde_json::json!({
            "source": STANDARD.encode(b"not an image"),
            "mime": "image/png",
            "fallback": "<not svg",
            "variants": [{"id": "a", "size": 32, "background": null, "box": 0.5}],
        })
        .to_string();
        assert_eq!(
            handle(&input),
            (r#"{"error":"Icon rendering failed."}"#.to_string(), 1)
        );
    }
}
