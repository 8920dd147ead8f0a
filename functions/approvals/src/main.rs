use k2b_core::Core;
use k2b_core::config::{Config, Mode};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let config = Config::from_env_or_exit(Mode::Production);
    k2b_core::telemetry::init(config.log_format);
    let core = Core::new(config)?;
    lambda_http::run(approvals::router(core)).await
}
