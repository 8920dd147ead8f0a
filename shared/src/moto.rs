//! A local AWS API for tests: the moto server the test command started
//! (`K2B_TEST_SQS_ENDPOINT`; moto serves SQS and S3 on one port), or one this process starts
//! from `moto_server` on a free port and stops when the value is dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a freshly started moto server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running moto server.
pub struct Moto {
    pub endpoint: String,
    child: Option<Child>,
}

impl Moto {
    pub fn start() -> Moto {
        if let Ok(endpoint) = std::env::var("K2B_TEST_SQS_ENDPOINT")
            && !endpoint.trim().is_empty()
        {
            return Moto {
                endpoint: endpoint.trim().to_string(),
                child: None,
            };
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("free port: {e}"));
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("moto_server is needed for the AWS tests (pip install 'moto[server]'): {e}")
            });
        let moto = Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            child: Some(child),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// An SQS client for this endpoint (fixed region, static test credentials).
    pub fn client(&self) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "k2b-tests",
            ))
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// An S3 client for this endpoint (fixed region, static test credentials, path-style
    /// addressing).
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "k2b-tests",
            ))
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            child.kill().ok();
            child.wait().ok();
        }
    }
}
