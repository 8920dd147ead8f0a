//! Scenarios 16 and 17: the service worker's lifecycle and fetch rules, run in Node.

use serde_json::Value;

use super::setup;

/// Runs the served worker in the Node harness and returns its report.
async fn run_worker() -> Value {
    let (_db, core) = setup().await;
    core.settings
        .set("app.name", serde_json::json!("Example Cloud"))
        .await
        .expect("name");
    let base = k2b_tests::serve(manifest::router(core.clone())).await;
    let script = reqwest::get(format!("{base}/pwa/sw.js"))
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    let dir = tempfile_dir();
    let path = dir.join("sw.js");
    std::fs::write(&path, script).expect("write sw.js");
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/js/sw-harness.mjs");
    let output = std::process::Command::new("node")
        .arg(harness)
        .arg(&path)
        .output()
        .expect("node is needed to run the service worker");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
    serde_json::from_slice(&output.stdout).expect("report")
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("k2b-sw-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Scenario 16: install skips waiting once, activate claims clients once, no CacheStorage.
#[tokio::test]
async fn scenario_16_lifecycle() {
    let report = run_worker().await;
    assert_eq!(
        report["lifecycle"],
        serde_json::json!({"skipWaiting": 1, "claim": 1, "cacheStorage": 0})
    );
}

/// Scenario 17: which navigations get the offline page, which pass through, which are left alone.
#[tokio::test]
async fn scenario_17_fetch_rules() {
    let report = run_worker().await;
    let results: Vec<&Value> = report["fetch"]
        .as_array()
        .expect("results")
        .iter()
        .collect();
    let find = |name: &str| {
        *results
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    for name in ["network error", "502", "503", "504", "core 404"] {
        let result = find(name);
        assert_eq!(result["intercepted"], true, "{name}");
        assert_eq!(result["status"], 200, "{name}");
        assert_eq!(result["contentType"], "text/html; charset=utf-8", "{name}");
        assert_eq!(result["offline"], true, "{name}");
    }
    for (name, status) in [
        ("page", 200),
        ("core 404 under _auth", 404),
        ("core 404 at _auth", 404),
        ("inventory 404", 404),
        ("500", 500),
    ] {
        let result = find(name);
        assert_eq!(result["intercepted"], true, "{name}");
        assert_eq!(result["status"], status, "{name}");
        assert_eq!(result["offline"], false, "{name}");
    }
    for name in ["cors api", "cors in scope", "outside scope", "other origin"] {
        assert_eq!(find(name)["intercepted"], false, "{name}");
    }
    assert!(
        results.iter().all(|r| r["cacheStorage"] == 0),
        "CacheStorage untouched"
    );
}
