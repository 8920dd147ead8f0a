//! What the code under test logs, for tests that check what never reaches a log.
//!
//! One subscriber for the whole process (installed by the first [`LogCapture`]) writes every
//! event, from any thread, as a JSON line into each live capture; the harness adds the lines its
//! child processes print ([`crate::LocalRunner`], [`crate::run_local`],
//! [`crate::lambda::FunctionProcess`]) to the captures of the test that started them. A scan
//! for a secret therefore also covers the signing pool, runtime workers, threads of other
//! runtimes and the child processes.
//!
//! `cargo test` runs the tests of a binary side by side in one process, so a capture also holds
//! their events: fine for "never contains X", not for counts. Each line remembers where it came
//! from, and [`LogCapture::own_text`] keeps the lines of the capturing test alone.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread::ThreadId;

use tracing::Metadata;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};

/// Where a line was written: a thread and the Tokio runtime it ran in, if any. A child
/// process's lines carry the origin of the code that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    thread: Option<ThreadId>,
    runtime: Option<tokio::runtime::Id>,
}

impl Origin {
    /// The current thread and runtime.
    pub(crate) fn here() -> Origin {
        thread_local! {
            static THREAD: ThreadId = std::thread::current().id();
        }
        Origin {
            // Events can fire while a thread's locals are torn down; such a line has no thread.
            thread: THREAD.try_with(|id| *id).ok(),
            runtime: tokio::runtime::Handle::try_current()
                .ok()
                .map(|handle| handle.id()),
        }
    }

    /// Whether a line from here belongs to the test that started a capture at `owner`: the same
    /// thread, or a thread of the same runtime (its workers and its blocking pool).
    fn belongs_to(&self, owner: &Origin) -> bool {
        (self.thread.is_some() && self.thread == owner.thread)
            || (self.runtime.is_some() && self.runtime == owner.runtime)
    }
}

struct Line {
    own: bool,
    text: String,
}

struct Sink {
    owner: Origin,
    lines: Mutex<Vec<Line>>,
}

/// The live captures, and how many there are (read on every event, so without a lock).
static SINKS: Mutex<Vec<Arc<Sink>>> = Mutex::new(Vec::new());
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands `text` (one or more whole lines) from `origin` to every live capture, or only to the
/// captures it belongs to.
fn deliver(origin: &Origin, text: &str, only_own: bool) {
    if text.is_empty() {
        return;
    }
    for sink in lock(&SINKS).iter() {
        let own = origin.belongs_to(&sink.owner);
        if own || !only_own {
            lock(&sink.lines).push(Line {
                own,
                text: text.to_string(),
            });
        }
    }
}

/// Hands a line a child process printed (on stdout or stderr) to the live captures of the test
/// that started it (`origin`). Other tests never see it: what a command prints on purpose (a
/// session, a setting's value) is no log line of theirs.
pub(crate) fn child_line(origin: &Origin, line: &str) {
    if LIVE.load(Ordering::Acquire) > 0 {
        deliver(origin, &format!("{line}\n"), true);
    }
}

/// Hands everything a finished child process printed to the captures of the test that ran it.
pub(crate) fn child_output(origin: &Origin, output: &std::process::Output) {
    for stream in [&output.stdout, &output.stderr] {
        for line in String::from_utf8_lossy(stream).lines() {
            child_line(origin, line);
        }
    }
}

/// Enables the capturing layer, at every level, only while a capture lives. The default
/// `callsite_enabled` answers "sometimes", so the answer is never cached per callsite.
struct WhileCapturing;

impl<S> Filter<S> for WhileCapturing {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        LIVE.load(Ordering::Acquire) > 0
    }
}

/// The subscriber's writer: one per event, made on the event's thread, delivered when dropped.
struct Broadcast;

impl<'a> MakeWriter<'a> for Broadcast {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            origin: Origin::here(),
            bytes: Vec::new(),
        }
    }
}

struct EventWriter {
    origin: Origin,
    bytes: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        deliver(&self.origin, &String::from_utf8_lossy(&self.bytes), false);
    }
}

fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .with_writer(Broadcast)
            .with_filter(WhileCapturing);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .unwrap_or_else(|e| {
                panic!("another global subscriber is installed, so nothing would be captured: {e}")
            });
    });
}

/// Log lines (JSON, one per line) written while the returned guard lives: by any thread of this
/// process, and by the child processes the harness runs for this test.
pub struct LogCapture {
    sink: Arc<Sink>,
}

impl LogCapture {
    /// Starts capturing; the first capture of the process installs its subscriber.
    pub fn start() -> LogCapture {
        install();
        let sink = Arc::new(Sink {
            owner: Origin::here(),
            lines: Mutex::new(Vec::new()),
        });
        lock(&SINKS).push(sink.clone());
        LIVE.fetch_add(1, Ordering::AcqRel);
        LogCapture { sink }
    }

    /// Everything captured, from every thread and this test's child processes, including the
    /// events of tests running beside this one in the same process: scan this for what must
    /// never be logged.
    pub fn text(&self) -> String {
        self.collect(|_| true)
    }

    /// The lines of this test alone: logged on the thread that started the capture or on any
    /// thread of its Tokio runtime (workers, blocking pool), and the output of child processes
    /// started there. Use it to count lines or to check that nothing was logged; a thread of
    /// its own (`std::thread::spawn`, another runtime) is only in [`LogCapture::text`].
    pub fn own_text(&self) -> String {
        self.collect(|line| line.own)
    }

    fn collect(&self, keep: impl Fn(&Line) -> bool) -> String {
        lock(&self.sink.lines)
            .iter()
            .filter(|line| keep(line))
            .map(|line| line.text.as_str())
            .collect()
    }
}

impl Drop for LogCapture {
    fn drop(&mut self) {
        lock(&SINKS).retain(|sink| !Arc::ptr_eq(sink, &self.sink));
        LIVE.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_from_a_thread_of_its_own_is_captured() {
        let capture = LogCapture::start();
        std::thread::spawn(|| tracing::info!("logged on a plain thread: K2B-PLAIN-THREAD"))
            .join()
            .expect("thread");
        assert!(
            capture.text().contains("K2B-PLAIN-THREAD"),
            "{}",
            capture.text()
        );
    }

    #[tokio::test]
    async fn a_line_from_the_blocking_pool_is_captured_as_the_tests_own() {
        let capture = LogCapture::start();
        tokio::task::spawn_blocking(|| tracing::warn!("logged while signing: K2B-BLOCKING-POOL"))
            .await
            .expect("task");
        assert!(
            capture.text().contains("K2B-BLOCKING-POOL"),
            "{}",
            capture.text()
        );
        assert!(capture.own_text().contains("K2B-BLOCKING-POOL"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_line_from_a_runtime_worker_is_captured_as_the_tests_own() {
        let capture = LogCapture::start();
        tokio::spawn(async { tracing::info!("logged on a worker: K2B-RUNTIME-WORKER") })
            .await
            .expect("task");
        assert!(
            capture.own_text().contains("K2B-RUNTIME-WORKER"),
            "{}",
            capture.text()
        );
    }

    #[test]
    fn a_line_from_another_runtime_is_captured_but_not_the_tests_own() {
        let capture = LogCapture::start();
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            runtime.block_on(async { tracing::info!("another runtime: K2B-OTHER-RUNTIME") });
        })
        .join()
        .expect("thread");
        assert!(
            capture.text().contains("K2B-OTHER-RUNTIME"),
            "{}",
            capture.text()
        );
        assert!(!capture.own_text().contains("K2B-OTHER-RUNTIME"));
    }

    #[test]
    fn lines_are_json_at_every_level() {
        let capture = LogCapture::start();
        tracing::trace!(detail = "K2B-TRACE-LEVEL", "fine-grained");
        let own = capture.own_text();
        let line: serde_json::Value = serde_json::from_str(own.lines().next().expect("a line"))
            .unwrap_or_else(|e| panic!("not JSON: {e}: {own}"));
        assert_eq!(line["level"], "TRACE");
        assert_eq!(line["fields"]["detail"], "K2B-TRACE-LEVEL");
    }

    #[test]
    fn what_a_child_process_prints_is_captured_as_the_tests_own() {
        let capture = LogCapture::start();
        let output = crate::run_local(&[("K2B_DB_MAX_CONNECTIONS", "lots")], &["migrate"], None);
        assert!(!output.status.success());
        assert!(
            capture
                .own_text()
                .contains("K2B_DB_MAX_CONNECTIONS must be"),
            "{}",
            capture.text()
        );
    }
}
