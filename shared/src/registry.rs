//! The live app registry: entries apps publish about themselves, validated when read, and the
//! audience rules that decide who may see an app.

pub mod audience;
pub mod entry;
pub mod rules;
pub mod store;

pub use audience::{app_audience_roles, can_see_app, has_any_app_role};
pub use entry::{AppNav, AppRegistryEntry, RegistryWidget, is_valid_app_id, validate_entry};
pub use store::{APP_REGISTRY_TTL, LiveApp, RegistrySnapshot, get_app, list_apps, read_snapshot};

/// The registry area's one error type.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("app registry contains no valid entries ({rejected} rejected)")]
    NoValidEntries { rejected: usize },
    #[error("invalid registry entry: {0}")]
    Invalid(String),
    #[error("registry entry of {bytes} bytes exceeds 65536 bytes")]
    TooLarge { bytes: usize },
    #[error("registry database error: {0}")]
    Database(#[from] sqlx::Error),
}
