//! The icon worker cannot read its parent: the serving process is not dumpable, and a worker
//! started the way the icon function starts it confines itself first, so `/proc/<parent>/environ`
//! stays closed even to a worker running as root.

use std::process::Stdio;

/// Runs the probe and returns what it printed (`read <n>` or `denied <kind>`).
async fn probe(mut command: tokio::process::Command) -> String {
    let output = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .output()
        .await
        .expect("probe");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

#[tokio::test]
async fn a_confined_worker_cannot_read_the_non_dumpable_parent() {
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_sandbox_probe"));
    // The probe can tell: unconfined, beside a dumpable parent, it reads the environment.
    assert_eq!(k2b_core::sandbox::is_dumpable(), Some(true));
    let open = probe(tokio::process::Command::new(&program)).await;
    assert!(open.starts_with("read "), "{open}");

    assert!(k2b_core::sandbox::forbid_inspection());
    assert_eq!(k2b_core::sandbox::is_dumpable(), Some(false));
    let confined = probe(icons::worker::worker_command(&program)).await;
    assert!(confined.starts_with("denied "), "{confined}");
}
