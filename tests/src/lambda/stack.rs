//! A deployed stack for the Lambda tests and benchmarks: a fresh database, the template's
//! parameters and resources, the emulated REST API, and a core on the same database and secrets
//! for setting things up.

use std::collections::BTreeMap;

use aws_sdk_sqs::types::QueueAttributeName;
use k2b_core::Core;
use k2b_core::auth::UserRecord;
use k2b_core::config::{Config, Mode};

use super::rest::{ApiGateway, Delivered, RestRequest};
use super::{Deployment, FunctionProcess, Outcome, function_binary};
use crate::{Moto, TEST_APP_SECRET, TestDb, create_user};

/// The key-encryption key the stack is deployed with (the `IdentityKeyEncryptionKey` parameter).
pub const TEST_KEK: &str = "5a1e0d0c0b0a09080706050403020100f0e1d2c3b4a5968778695a4b3c2d1e0f";

/// A deployed stack on a fresh database: the template's functions, their parameters, the
/// emulated REST API, and a core on the same database and secrets for setting things up.
pub struct Stack {
    pub db: TestDb,
    pub core: Core,
    pub deployment: Deployment,
    pub gateway: ApiGateway,
    /// Template parameters and resources by name, as `Ref` resolves them.
    pub values: BTreeMap<&'static str, String>,
    /// Lambda's own AWS variables for the SQS API (with a local SQS API).
    aws: Vec<(String, String)>,
    pub moto: Option<Moto>,
}

impl Stack {
    /// The stack without queues (HTTP and scheduled functions).
    pub async fn new() -> Stack {
        let db = TestDb::new().await;
        let deployment = Deployment::load();
        let gateway = ApiGateway::new(&deployment);
        let url = db.url();
        let app_url = gateway.url();
        let config = Config::from_lookup(Mode::Local, |name| match name {
            "DATABASE_URL" => Some(url.clone()),
            "APP_SECRET" => Some(TEST_APP_SECRET.to_string()),
            "APP_URL" => Some(app_url.clone()),
            "CLOUD_IDENTITY_KEY_ENCRYPTION_KEY" => Some(TEST_KEK.to_string()),
            "K2B_SETTINGS_CACHE_MS" => Some("0".to_string()),
            _ => None,
        })
        .unwrap_or_else(|e| panic!("configuration: {e}"));
        let core = Core::with_pool(config, db.pool.clone());
        core.settings
            .set("app.url", serde_json::Value::String(gateway.url()))
            .await
            .expect("app.url");
        core.identity.initialize().await.expect("identity keys");
        let values = BTreeMap::from([
            ("DatabaseUrl", db.url()),
            ("AppSecret", TEST_APP_SECRET.to_string()),
            ("AppUrl", gateway.url()),
            ("IdentityKeyEncryptionKey", TEST_KEK.to_string()),
            ("IdentityPreviousKey", String::new()),
            ("IdentityNextKey", String::new()),
            ("LogLevel", "info".to_string()),
            // Apps the functions call listen on this machine's own network.
            ("AppNetworks", {
                let ip = crate::machine_address();
                format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 })
            }),
        ]);
        Stack {
            db,
            core,
            deployment,
            gateway,
            values,
            aws: Vec::new(),
            moto: None,
        }
    }

    /// The stack with its queues on a local SQS API (`WakeupQueue`, `LiveQueue` (FIFO)) and the
    /// mail bucket on its S3 API (`MailBucket`).
    pub async fn with_queues() -> Stack {
        let mut stack = Stack::new().await;
        let moto = Moto::start();
        let client = moto.client();
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let wakeup = create_queue(&client, &format!("wakeup-{suffix}"), false).await;
        let live = create_queue(&client, &format!("live-{suffix}.fifo"), true).await;
        stack.values.insert("WakeupQueue", wakeup);
        stack.values.insert("LiveQueue", live);
        let bucket = format!("mail-{suffix}");
        moto.s3()
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("bucket {bucket}: {e:?}"));
        stack.values.insert("MailBucket", bucket);
        stack.aws = vec![
            ("AWS_ACCESS_KEY_ID".into(), "test".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "test".into()),
            ("AWS_SESSION_TOKEN".into(), "test".into()),
            ("AWS_ENDPOINT_URL_SQS".into(), moto.endpoint.clone()),
            ("AWS_ENDPOINT_URL_S3".into(), moto.endpoint.clone()),
            // The region the queues were created in.
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
        ];
        stack.moto = Some(moto);
        stack
    }

    /// The template's environment of a function, resolved.
    pub fn environment(&self, binary: &str) -> Vec<(String, String)> {
        let mut environment = self.deployment.environment(binary, &self.values);
        environment.extend(self.aws.iter().cloned());
        environment
    }

    /// Starts a function's binary with the template's environment.
    pub async fn start(&self, binary: &str) -> FunctionProcess {
        self.start_with(binary, &self.environment(binary)).await
    }

    /// Starts a function's binary with the template's environment, some variables changed.
    pub async fn start_overriding(
        &self,
        binary: &str,
        changed: &[(&str, &str)],
    ) -> FunctionProcess {
        let mut environment = self.environment(binary);
        for (name, value) in changed {
            environment.retain(|(existing, _)| existing != name);
            environment.push((name.to_string(), value.to_string()));
        }
        self.start_with(binary, &environment).await
    }

    /// Starts a function's binary with a given environment.
    pub async fn start_with(
        &self,
        binary: &str,
        environment: &[(String, String)],
    ) -> FunctionProcess {
        FunctionProcess::start(
            &self.deployment,
            &function_binary(binary),
            binary,
            environment,
        )
        .await
    }

    /// A signed-in browser's cookie for `user`.
    pub async fn cookie(&self, user: &UserRecord) -> String {
        crate::session_cookie(&self.core, user).await
    }

    /// An administrator who accepted the terms, and their browser's cookie.
    pub async fn admin(&self) -> (UserRecord, String) {
        let user = create_user(&self.core, "ada", true).await;
        let mut conn = self.core.pool.acquire().await.expect("connection");
        k2b_core::approvals::accept_legal_terms(&mut conn, user.id)
            .await
            .expect("terms");
        let cookie = self.cookie(&user).await;
        (user, cookie)
    }

    /// Sends a request through the API to a running HTTP function and reads the answer as the
    /// client receives it (streamed answers are read to their end).
    pub async fn send(&self, function: &mut FunctionProcess, request: &RestRequest) -> Delivered {
        match function.invoke(request.event()).await {
            Outcome::Response(response) => self.gateway.deliver(request, &response),
            Outcome::Streamed(mut streamed) => {
                let body = streamed.body(std::time::Duration::from_secs(40)).await;
                let mut headers = BTreeMap::new();
                if let Some(map) = streamed.prelude["headers"].as_object() {
                    for (name, value) in map {
                        headers.insert(
                            name.to_ascii_lowercase(),
                            vec![value.as_str().unwrap_or_default().to_string()],
                        );
                    }
                }
                Delivered {
                    status: streamed.prelude["statusCode"].as_u64().unwrap_or(0) as u16,
                    headers,
                    body,
                    is_base64_encoded: false,
                    converted_to_binary: false,
                }
            }
            Outcome::Error { error_type, body } => {
                panic!(
                    "{}: invocation failed: {error_type} {body}\n{}",
                    function.name,
                    function.output()
                )
            }
        }
    }
}

/// Creates a queue (FIFO when `fifo`) on a local SQS API; returns its URL.
pub async fn create_queue(client: &aws_sdk_sqs::Client, name: &str, fifo: bool) -> String {
    let mut request = client.create_queue().queue_name(name);
    if fifo {
        request = request.attributes(QueueAttributeName::FifoQueue, "true");
    }
    request
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_string()
}
