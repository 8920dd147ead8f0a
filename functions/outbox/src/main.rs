use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k2b_core::Core;
use k2b_core::config::{Config, Mode};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env_or_exit(Mode::Production);
    k2b_core::telemetry::init(config.log_format);
    let core = Core::new(config)?;
    let drainer = core.drainer();
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| {
        let drainer = &drainer;
        async move {
            // The invocation's end, from the runtime's deadline (epoch milliseconds).
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or_default();
            let remaining = Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
            let deadline = tokio::time::Instant::now() + remaining;
            Ok::<_, Error>(outbox::handle(drainer, event.payload, Some(deadline)).await?)
        }
    }))
    .await
}
