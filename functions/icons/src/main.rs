use k2b_core::Core;
use k2b_core::config::{Config, Mode};

fn main() -> Result<(), lambda_http::Error> {
    // The same binary renders the icons in an isolated child process.
    icons::run_if_worker();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let config = Config::from_env_or_exit(Mode::Production);
            k2b_core::telemetry::init(config.log_format);
            let core = Core::new(config)?;
            lambda_http::run(icons::router(core)).await
        })
}
