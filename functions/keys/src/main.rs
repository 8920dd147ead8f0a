use k2b_core::Core;
use k2b_core::config::{Config, Mode};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;
use tokio::sync::OnceCell;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env_or_exit(Mode::Production);
    k2b_core::telemetry::init(config.log_format);
    let core = Core::new(config)?;
    let initialized = OnceCell::new();
    lambda_runtime::run(service_fn(|_event: LambdaEvent<Value>| {
        let core = core.clone();
        let initialized = &initialized;
        async move {
            let report = keys::run(&core, initialized).await?;
            if !report.failed.is_empty() {
                return Err(Error::from(format!(
                    "key maintenance failed for {}",
                    report.failed.join(", ")
                )));
            }
            Ok::<_, Error>(serde_json::to_value(report)?)
        }
    }))
    .await
}
