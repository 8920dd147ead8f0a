//! The scheduled `keys` function (every minute): identity key maintenance.
//!
//! The first run of an execution environment also initialises the identity authority: it makes
//! sure every purpose has an active key and, while a previous key-encryption key is configured,
//! rewraps every key under the current one.

use std::sync::Arc;

use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::identity::{IdentityError, KeyMaintenanceReport};
use k2b_core::lambda::{Error, EventFuture, Function, Invocation};
use tokio::sync::OnceCell;

/// The function: the database and the identity key-encryption keys (it creates, encrypts and
/// rewraps signing keys). It reads no setting.
pub const FUNCTION: Function = Function {
    name: "keys",
    needs: Needs::DATABASE.with_signing_keys(),
};

/// The scheduled handler: any schedule payload runs one maintenance; a purpose that failed makes
/// the invocation fail (so it is retried and alarms), after the other purposes ran.
pub fn handler(core: Core) -> impl Fn(Invocation) -> EventFuture {
    let initialized = Arc::new(OnceCell::new());
    move |_invocation| {
        let core = core.clone();
        let initialized = initialized.clone();
        Box::pin(async move {
            let report = run(&core, &initialized).await?;
            if !report.failed.is_empty() {
                return Err(Error::from(format!(
                    "key maintenance failed for {}",
                    report.failed.join(", ")
                )));
            }
            Ok(serde_json::to_value(report)?)
        })
    }
}

/// One maintenance run (initialising first, once per process).
pub async fn run(
    core: &Core,
    initialized: &OnceCell<()>,
) -> Result<KeyMaintenanceReport, IdentityError> {
    initialized
        .get_or_try_init(|| async {
            let rewrapped = core.identity.initialize().await?;
            if rewrapped > 0 {
                tracing::info!(
                    rewrapped,
                    "identity keys rewrapped under the current key-encryption key"
                );
            }
            Ok::<_, IdentityError>(())
        })
        .await?;
    core.identity.run_key_maintenance().await
}
