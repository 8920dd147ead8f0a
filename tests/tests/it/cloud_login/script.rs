//! The README's authenticator script (`infra/cloud-login-authenticator.mjs`, Node's WebCrypto)
//! against the real router: it enrolls from the start answer and approves sign-ins. WebCrypto
//! signs with random `s` (half of its signatures are high-S), so twenty approvals check that the
//! server accepts what a real WebCrypto authenticator sends.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{API, CloudLogin, reference};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../infra/cloud-login-authenticator.mjs")
}

fn node(file: &std::path::Path, args: &[&str]) -> std::process::Child {
    Command::new("node")
        .arg(script())
        .args(args)
        .env("K2B_AUTHENTICATOR_FILE", file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("node (Node 20 or later is needed for the README's script): {e}")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_script_enrolls_and_approves_sign_ins() {
    let cloud = CloudLogin::new().await;
    // The script calls the issuer it finds in the pairing: make it this server.
    let base = cloud.pwa.base.clone();
    cloud.set("app.url", json!(base)).await;
    let (_, browser) = cloud.person("ada", false).await;
    let client = cloud.pwa.client.clone();
    let cookie = format!(
        "session_token={}",
        browser.get("session_token").expect("token")
    );
    let post = |path: &str, body: Value, with_cookie: bool| {
        let mut request = client
            .post(format!("{base}{API}{path}"))
            .header("origin", &base)
            .json(&body);
        if with_cookie {
            request = request.header("cookie", &cookie);
        }
        request.send()
    };
    let started: Value = post("/manage/pairings/start", json!({}), true)
        .await
        .expect("start")
        .json()
        .await
        .expect("json");
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("authenticator.json");
    let mut enroll = node(&file, &["enroll", &started.to_string()]);
    let mut lines = BufReader::new(enroll.stdout.take().expect("stdout")).lines();
    let claimed = tokio::task::block_in_place(|| lines.next())
        .expect("a line")
        .expect("read");
    let code = claimed
        .split_whitespace()
        .find(|w| w.len() == 6 && w.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no code in {claimed:?}"))
        .to_string();
    let confirmed = post(
        "/manage/pairings/confirm",
        json!({"pairingId": started["pairingId"], "comparison": code}),
        true,
    )
    .await
    .expect("confirm");
    assert_eq!(confirmed.status(), 200);
    let done = tokio::task::block_in_place(|| lines.next())
        .expect("a line")
        .expect("read");
    assert_eq!(done, "pairing confirmed");
    assert!(
        tokio::task::block_in_place(|| enroll.wait())
            .expect("exit")
            .success()
    );

    for _ in 0..20 {
        let login: Value = post(
            "/login/start",
            json!({"identifier": "ada", "category": "login"}),
            false,
        )
        .await
        .expect("start")
        .json()
        .await
        .expect("json");
        let comparison = login["comparison"].as_str().expect("code").to_string();
        let output = tokio::task::block_in_place(|| {
            node(&file, &["approve", &comparison]).wait_with_output()
        })
        .expect("approve");
        assert!(output.status.success());
        assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "approved");
        let complete = post("/login/complete", reference(&login), false)
            .await
            .expect("complete");
        assert_eq!(complete.status(), 204);
    }
    let approvals = cloud
        .pwa
        .audit_actions()
        .await
        .iter()
        .filter(|a| *a == "auth.app.login.approve")
        .count();
    assert_eq!(approvals, 20);
}
