//! The `migrate` function: the database migrations, applied by CloudFormation on every deploy.
//!
//! The template's `SchemaMigration` custom resource names this function as its service token
//! and every other function depends on it, so CloudFormation updates the functions only after
//! the schema they expect is in place, and rolls the deploy back when it is not. For each
//! custom-resource request the function PUTs CloudFormation's response document to the
//! request's pre-signed `ResponseURL`:
//!
//! - Create and Update apply the pending migrations (idempotent; concurrent runs take turns on
//!   the migrator's lock) and answer `SUCCESS` with the schema's version, or `FAILED` naming
//!   the problem: configuration, an unreachable database, a failing migration, a schema newer
//!   than this binary, or no time left.
//! - An Update back to an earlier build (a rollback) and Delete never touch the schema and
//!   answer `SUCCESS`: migrations are never reverted, and a deploy that cannot be rolled back
//!   or a stack that cannot be deleted would be worse than a schema kept as it is.
//!
//! The function always answers, before the invocation's deadline: a bad configuration becomes
//! a `FAILED` answer rather than a refused start (which would leave CloudFormation waiting for
//! the resource's service timeout). The invocation itself fails only when the answer could not
//! be delivered, so Lambda's retries of an asynchronous invocation deliver it again.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k2b_core::config::{Config, ConfigError, LogFormat, Mode, Needs};
use k2b_core::lambda::{Error, Function};
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tokio::time::Instant;

pub mod request;
pub mod respond;
pub mod schema;

use request::{CustomResourceRequest, Envelope, RequestType, Response, Status};

/// The function: the database alone.
pub const FUNCTION: Function = Function {
    name: "migrate",
    needs: Needs::DATABASE,
};

/// Kept before the invocation's deadline for answering: a run still migrating then is answered
/// `FAILED` ("timed out"), so CloudFormation hears back even from a run that cannot finish.
pub const RESPONSE_MARGIN: Duration = Duration::from_secs(10);

/// What every invocation of one execution environment shares: its configuration, or why it has
/// none (answered to every request that needs it).
#[derive(Debug)]
pub struct Setup {
    config: Result<Config, ConfigError>,
}

impl Setup {
    /// Reads the environment and starts logging. A bad configuration does not stop the
    /// function: it is the reason of every Create and Update answer.
    pub fn from_env() -> Setup {
        let config = Config::from_env_for(Mode::Production, FUNCTION.needs);
        k2b_core::telemetry::init(
            config
                .as_ref()
                .map(|config| config.log_format)
                .unwrap_or(LogFormat::Json),
        );
        match &config {
            Ok(config) => {
                if let Some(notice) = config.local_mode_notice() {
                    tracing::warn!(function = FUNCTION.name, "{notice}");
                }
            }
            Err(error) => tracing::error!(
                function = FUNCTION.name,
                variable = error.variable,
                error = %error,
                "configuration error: every Create and Update is answered FAILED"
            ),
        }
        // The environment holds the database URL: no other process may read it.
        k2b_core::sandbox::forbid_inspection();
        Setup::new(config)
    }

    /// A setup from a configuration already read.
    pub fn new(config: Result<Config, ConfigError>) -> Setup {
        Setup { config }
    }
}

/// One invocation: answers the custom-resource request in the event to CloudFormation.
///
/// Its value is the response document sent; it fails when the event names no `ResponseURL`
/// (nobody waits for an answer) or the answer could not be delivered.
pub async fn handle(setup: &Setup, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let deadline = deadline_of(event.context.deadline);
    let Some(envelope) = Envelope::read(&event.payload) else {
        tracing::error!("not a CloudFormation custom-resource request: no ResponseURL to answer");
        return Err(Error::from(
            "not a CloudFormation custom-resource request: the event has no ResponseURL",
        ));
    };
    let (request_type, response) = answer(setup, event.payload, &envelope, deadline).await;
    let data = response.data.as_ref();
    // A FAILED answer rolls the deploy back: it is logged as the error it is.
    macro_rules! answered {
        ($level:ident) => {
            tracing::$level!(
                request_type = request_type.map(RequestType::as_str),
                stack_id = %response.stack_id,
                request_id = %response.request_id,
                logical_resource_id = %response.logical_resource_id,
                physical_resource_id = %response.physical_resource_id,
                status = response.status.as_str(),
                reason = %response.reason,
                version = data.map(|d| d.version.as_str()),
                applied = data.map(|d| d.applied.as_str()),
                "schema migration answered"
            )
        };
    }
    match response.status {
        Status::Success => answered!(info),
        Status::Failed => answered!(error),
    }
    if let Err(error) = respond::send(&envelope.response_url, &response, deadline).await {
        tracing::error!(
            status = response.status.as_str(),
            error = %error,
            "the response did not reach CloudFormation"
        );
        return Err(Error::from(format!(
            "the response did not reach CloudFormation: {error}"
        )));
    }
    Ok(serde_json::to_value(&response)?)
}

/// The response to one request (and its type, when it has one this function knows).
async fn answer(
    setup: &Setup,
    event: Value,
    envelope: &Envelope,
    deadline: Instant,
) -> (Option<RequestType>, Response) {
    let request: CustomResourceRequest = match serde_json::from_value(event) {
        Ok(request) => request,
        Err(error) => {
            let reason =
                format!("not a custom-resource request this function understands: {error}");
            return (None, envelope.answer(Status::Failed, &reason, None));
        }
    };
    let kind = Some(request.request_type);
    let response = match request.request_type {
        RequestType::Delete => envelope.answer(
            Status::Success,
            "the schema is kept: removing the resource never drops anything",
            None,
        ),
        RequestType::Update if request.is_rollback() => envelope.answer(
            Status::Success,
            "rollback to an earlier release: the schema is kept as it is (migrations are never \
             reverted)",
            None,
        ),
        RequestType::Create | RequestType::Update => {
            let config = match &setup.config {
                Ok(config) => config,
                Err(error) => {
                    let reason = schema::SchemaError::Config(error.clone()).to_string();
                    return (kind, envelope.answer(Status::Failed, &reason, None));
                }
            };
            let until = deadline
                .checked_sub(RESPONSE_MARGIN)
                .unwrap_or_else(Instant::now);
            match schema::migrate(config, until).await {
                Ok(migrated) => {
                    envelope.answer(Status::Success, &migrated.summary(), Some(migrated.data()))
                }
                Err(error) => envelope.answer(Status::Failed, &error.to_string(), None),
            }
        }
    };
    (kind, response)
}

/// The runtime's deadline (epoch milliseconds) as an instant of this process's clock.
fn deadline_of(epoch_ms: u64) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default();
    Instant::now() + Duration::from_millis(epoch_ms.saturating_sub(now_ms))
}
