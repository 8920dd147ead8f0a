//! Identity: key ring, issuance, session and invocation tokens, remote verification, actors.

mod actors;
mod invocation_tokens;
mod issuance;
mod keyring;
mod remote_jwks;
mod session_tokens;

use futures::FutureExt;
use futures::future::BoxFuture;
use k2b_core::identity::{IdentityError, IdentitySettings, IdentitySettingsSource};

/// Settings with a fixed `app.url`.
pub struct FixedSettings(pub String);

impl IdentitySettingsSource for FixedSettings {
    fn load(&self) -> BoxFuture<'static, Result<IdentitySettings, IdentityError>> {
        let url = self.0.clone();
        async move {
            Ok(IdentitySettings {
                app_url: url,
                admin_groups: serde_json::json!(["admins"]),
            })
        }
        .boxed()
    }
}
