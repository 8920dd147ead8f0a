//! What operators run against an installation: outbox health and the deployment doctor.
//!
//! The top floor of the core: it reads the tables of every area (the outboxes of live updates
//! and outgoing mail, the key ring, the registry) and imports no floor above it. The `admin`
//! function and the `k2b-admin` command line print what it returns.

pub mod doctor;
pub mod outbox;

/// The error of an operator's command.
#[derive(Debug, thiserror::Error)]
pub enum OperationsError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error(transparent)]
    Migrations(#[from] crate::db::DbError),
    #[error(transparent)]
    Identity(#[from] crate::identity::IdentityError),
    #[error(transparent)]
    Settings(#[from] crate::settings::SettingsError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
}
