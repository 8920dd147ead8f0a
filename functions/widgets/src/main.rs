use k2b_core::Core;
use k2b_core::config::{Config, Mode};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let config = Config::from_env_or_exit(Mode::Production);
    k2b_core::telemetry::init(config.log_format);
    let core = Core::new(config)?;
    // The stream's lines leave as they are written: the response is streamed, never buffered.
    lambda_http::run_with_streaming_response(widgets::router(core)).await
}
