//! A headless Chromium for browser tests, driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`). What WebDriver lacks — offline emulation for the page *and* its service
//! workers, the browser's installability check, the parsed manifest — goes through
//! chromedriver's DevTools endpoint (`goog/cdp/execute`).
//!
//! Each [`Browser`] is its own browser process with its own profile: two of them are two
//! devices with separate cookie jars.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The W3C WebDriver key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

fn program(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// Where browser tests write their screenshots (see [`crate::artifacts_dir`]).
pub fn artifacts_dir() -> PathBuf {
    crate::artifacts_dir("browser")
}

/// One headless Chromium with its own chromedriver and profile.
pub struct Browser {
    driver: Child,
    url: String,
    session: String,
    http: reqwest::Client,
    /// DevTools sessions attached to service workers to cut their network.
    worker_sessions: std::sync::Mutex<Vec<String>>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a browser session (a 1280×900 window).
    pub async fn start() -> Browser {
        Browser::start_sized(1280, 900).await
    }

    /// Starts a browser with a window of `width`×`height` (a phone: 412×915).
    pub async fn start_sized(width: u32, height: u32) -> Browser {
        let chromedriver = program("CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = program("CHROMIUM", "/usr/bin/chromium");
        for (binary, package) in [(&chromedriver, "chromium-driver"), (&chromium, "chromium")] {
            assert!(
                binary.is_file(),
                "{} is missing: install Debian's `{package}` (bash infra/test.sh installs it)",
                binary.display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        // Its own process group, so that the browser it starts ends with it.
        let driver = Command::new(&chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", chromedriver.display()));
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{url}/status")).send().await;
            if let Ok(response) = ready
                && let Ok(status) = response.json::<Value>().await
                && status["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap_or_else(|e| panic!("profile folder: {e}"));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let mut browser = Browser {
            driver,
            url,
            session: String::new(),
            http,
            worker_sessions: std::sync::Mutex::new(Vec::new()),
            _profile: profile,
        };
        let created = browser
            .raw("POST", "/session", Some(capabilities))
            .await
            .unwrap_or_else(|e| panic!("new browser session: {e}"));
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"))
            .to_string();
        browser
    }

    async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(body["value"].clone())
        } else {
            Err(format!(
                "{} {}: {}",
                status, body["value"]["error"], body["value"]["message"]
            ))
        }
    }

    /// A WebDriver command of this session; panics with the driver's error.
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.raw(method, &path, body)
            .await
            .unwrap_or_else(|e| panic!("WebDriver {path}: {e}"))
    }

    /// Opens `url` and waits for its load event.
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The address of the current page.
    pub async fn current_url(&self) -> String {
        let value = self.command("GET", "/url", None).await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Runs an async `script`: it calls its last argument with the result.
    pub async fn execute_async(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Runs `script` every 50 ms until it returns something other than `null`/`false` (and
    /// returns that), at most `timeout`; panics naming `what` and the page's text otherwise.
    pub async fn wait_for(&self, what: &str, script: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.execute(script, json!([])).await;
            if !(value.is_null() || value == false) {
                return value;
            }
            if Instant::now() >= deadline {
                let text = self
                    .execute(
                        "return document.body ? document.body.innerText : ''",
                        json!([]),
                    )
                    .await;
                panic!(
                    "{what}: not within {timeout:?} at {}; the page shows:\n{}",
                    self.current_url().await,
                    text.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the element `css` is shown (in the document, not hidden).
    pub async fn wait_visible(&self, css: &str, timeout: Duration) {
        let script = format!(
            "const e = document.querySelector({}); return !!e && e.checkVisibility();",
            json!(css)
        );
        self.wait_for(&format!("{css} shown"), &script, timeout)
            .await;
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    /// Clicks the element `css` as a user would.
    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Types `text` into the element `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The text of the element `css`.
    pub async fn text(&self, css: &str) -> String {
        let element = self.element(css).await;
        let value = self
            .command("GET", &format!("/element/{element}/text"), None)
            .await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// The cookies the browser sends to the current page, by name.
    pub async fn cookie_names(&self) -> Vec<String> {
        let cookies = self.command("GET", "/cookie", None).await;
        cookies
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Writes a screenshot of the window to the artifacts folder as `<name>.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let value = self.command("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("screenshot is not base64: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        let path = artifacts_dir().join(format!("{name}.png"));
        std::fs::write(&path, &png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// A DevTools command on the page's target.
    pub async fn cdp(&self, command: &str, params: Value) -> Value {
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({ "cmd": command, "params": params })),
        )
        .await
    }

    /// Cuts the network (or restores it) for the page and for every service worker: the
    /// page's emulation alone leaves a worker's `fetch` online. The worker's emulation lives in
    /// the DevTools session attached for it, which restoring the network detaches again.
    pub async fn set_offline(&self, offline: bool) {
        let conditions = json!({
            "offline": offline,
            "latency": 0,
            "downloadThroughput": -1,
            "uploadThroughput": -1,
        });
        self.cdp("Network.enable", json!({})).await;
        self.cdp("Network.emulateNetworkConditions", conditions.clone())
            .await;
        let attached: Vec<String> = match self.worker_sessions.lock() {
            Ok(mut sessions) => std::mem::take(&mut *sessions),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for session in attached {
            self.cdp("Target.detachFromTarget", json!({ "sessionId": session }))
                .await;
        }
        if !offline {
            return;
        }
        let targets = self.cdp("Target.getTargets", json!({})).await;
        let workers = targets["targetInfos"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter(|t| t["type"] == "service_worker")
                    .filter_map(|t| t["targetId"].as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for target in workers {
            let attached = self
                .cdp(
                    "Target.attachToTarget",
                    json!({"targetId": target, "flatten": false}),
                )
                .await;
            let session = attached["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for (id, (method, params)) in [
                ("Network.enable", json!({})),
                ("Network.emulateNetworkConditions", conditions.clone()),
            ]
            .into_iter()
            .enumerate()
            {
                let message = json!({"id": id + 1, "method": method, "params": params});
                self.cdp(
                    "Target.sendMessageToTarget",
                    json!({"sessionId": session, "message": message.to_string()}),
                )
                .await;
            }
            if let Ok(mut sessions) = self.worker_sessions.lock() {
                sessions.push(session);
            }
        }
    }

    /// Ends the session and the browser.
    pub async fn quit(self) {
        let path = format!("/session/{}", self.session);
        self.raw("DELETE", &path, None).await.ok();
    }
}

impl Drop for Browser {
    /// Ends chromedriver and the browser it started (its process group).
    fn drop(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.driver.id() as i32) {
            rustix::process::kill_process_group(group, rustix::process::Signal::KILL).ok();
        }
        self.driver.kill().ok();
        self.driver.wait().ok();
    }
}
