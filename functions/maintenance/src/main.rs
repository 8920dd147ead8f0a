use k2b_core::Core;
use k2b_core::config::{Config, Mode};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env_or_exit(Mode::Production);
    k2b_core::telemetry::init(config.log_format);
    let core = Core::new(config)?;
    // Any schedule payload (an EventBridge "Scheduled Event" envelope or a ScheduleV2 input)
    // triggers one run.
    lambda_runtime::run(service_fn(|_event: LambdaEvent<Value>| {
        let core = core.clone();
        async move {
            let report = maintenance::run(&core).await?;
            Ok::<_, Error>(serde_json::to_value(report)?)
        }
    }))
    .await
}
