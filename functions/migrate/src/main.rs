//! Wiring only: the setup of the execution environment, then one answer per request.

use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let setup = migrate::Setup::from_env();
    let setup = &setup;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        migrate::handle(setup, event)
    }))
    .await
}
