//! Delivery to an independent SMTP server: `aiosmtpd` (PyPI) requiring STARTTLS with a
//! self-signed certificate. The certificate is trusted only as an extra root; without it the
//! attempt fails on TLS and is retried, never sent in the clear.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k2b_core::mail::delivery::{Job, MailDelivery};
use serde_json::json;

use super::{MailSite, SENDER, message};

/// `python3 -m aiosmtpd` on a free port with STARTTLS required; its printed messages go to a
/// file. Killed on drop.
struct Aiosmtpd {
    port: u16,
    child: Child,
    output: std::path::PathBuf,
    _dir: tempfile::TempDir,
    certificate: Vec<u8>,
}

impl Aiosmtpd {
    /// STARTTLS required, or (`smtps`) TLS from the first byte.
    fn start(smtps: bool) -> Aiosmtpd {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let made = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            // A server's own certificate, not a CA's: WebPKI refuses a CA as an end entity.
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-addext", "extendedKeyUsage=serverAuth"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(made.success(), "self-signed certificate");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let output = dir.path().join("received.txt");
        let child = Command::new("python3")
            .args(["-u", "-m", "aiosmtpd", "-n"])
            .arg("-l")
            .arg(format!("127.0.0.1:{port}"))
            .arg(if smtps { "--smtpscert" } else { "--tlscert" })
            .arg(&cert)
            .arg(if smtps { "--smtpskey" } else { "--tlskey" })
            .arg(&key)
            .stdout(std::fs::File::create(&output).expect("output file"))
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m aiosmtpd (pip install aiosmtpd)");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Aiosmtpd {
            port,
            child,
            certificate: std::fs::read(&cert).expect("certificate"),
            output,
            _dir: dir,
        }
    }

    fn received(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// What the server printed once it printed a whole message (or after 5 s).
    async fn printed_message(&self) -> String {
        let mut printed = String::new();
        for _ in 0..50 {
            printed = self.received();
            if printed.contains("END MESSAGE") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        printed
    }
}

impl MailSite {
    /// Points profile `alerts` at `server` (no SMTP user), with TLS from the first byte or not.
    async fn use_aiosmtpd(&self, server: &Aiosmtpd, secure: bool) {
        self.update_profile(
            "alerts",
            json!({"smtpHost": "127.0.0.1", "smtpPort": server.port, "smtpSecure": secure,
                   "smtpUser": null, "smtpPassword": null}),
        )
        .await;
    }

    /// A delivery of this site's core that trusts `roots` besides the public ones.
    fn delivery_trusting(&self, roots: Vec<Vec<u8>>) -> MailDelivery {
        let core = &self.core;
        MailDelivery::new(
            core.pool.clone(),
            core.settings.clone(),
            core.mail_objects.clone(),
            core.wakeups.clone(),
            roots,
        )
    }
}

impl Drop for Aiosmtpd {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

#[tokio::test]
async fn delivery_to_aiosmtpd_uses_starttls_and_checks_the_certificate() {
    let server = Aiosmtpd::start(false);
    let site = MailSite::start().await;
    site.use_aiosmtpd(&server, false).await;

    // Not trusted: the attempt fails on TLS (no SMTP code), to be retried.
    let untrusted = site
        .queued(SENDER, message("first@example.org", "Untrusted"))
        .await;
    site.delivery_trusting(Vec::new())
        .run(Job::Message(untrusted), None)
        .await
        .expect("pass");
    let row = site.row(untrusted).await;
    assert_eq!(row["status"], "queued", "{row}");
    assert_eq!(row["attempt_count"], 1);
    assert!(row["smtp_response"].is_null(), "{row}");
    assert!(!server.received().contains("Untrusted"));

    // Trusted as an extra root: STARTTLS, then the message.
    let trusted = site.delivery_trusting(vec![server.certificate.clone()]);
    let id = site
        .queued(SENDER, message("second@example.org", "Over STARTTLS"))
        .await;
    trusted.run(Job::Message(id), None).await.expect("pass");
    let row = site.row(id).await;
    assert_eq!(row["status"], "sent", "{row}");
    assert!(
        row["smtp_response"]
            .as_str()
            .is_some_and(|r| r.starts_with("250")),
        "{row}"
    );
    let printed = server.printed_message().await;
    assert!(printed.contains("Subject: Over STARTTLS"), "{printed}");
    assert!(
        printed.contains(row["message_id_header"].as_str().expect("id")),
        "{printed}"
    );
    assert!(printed.contains("To: second@example.org"), "{printed}");
}

/// A profile with `smtpSecure`: TLS from the first byte (SMTPS), verified like STARTTLS.
#[tokio::test]
async fn delivery_to_aiosmtpd_over_implicit_tls() {
    let server = Aiosmtpd::start(true);
    let site = MailSite::start().await;
    site.use_aiosmtpd(&server, true).await;
    let delivery = site.delivery_trusting(vec![server.certificate.clone()]);
    let id = site
        .queued(SENDER, message("third@example.org", "Over SMTPS"))
        .await;
    delivery.run(Job::Message(id), None).await.expect("pass");
    let row = site.row(id).await;
    assert_eq!(row["status"], "sent", "{row}");
    let printed = server.printed_message().await;
    assert!(printed.contains("Subject: Over SMTPS"), "{printed}");
}
