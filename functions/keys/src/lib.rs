//! The scheduled `keys` function (every minute): identity key maintenance.
//!
//! The first run of an execution environment also initialises the identity authority: it makes
//! sure every purpose has an active key and, while a previous key-encryption key is configured,
//! rewraps every key under the current one.

use k2b_core::Core;
use k2b_core::identity::{IdentityError, KeyMaintenanceReport};
use tokio::sync::OnceCell;

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
