//! The pairing area's one error type, with the fixed status, code and message of each case.

use http::StatusCode;

use crate::approvals::EligibilityError;
use crate::http::ApiError;

/// Why a pairing or device request failed. Internal failures carry only the error's name, which
/// is all that is logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PwaError {
    #[error("unavailable ({0})")]
    Unavailable(&'static str),
    #[error("reauthenticate")]
    Reauthenticate,
    #[error("forbidden")]
    Forbidden,
    #[error("account blocked")]
    AccountBlocked,
    #[error("invalid request")]
    InvalidRequest,
    #[error("not found")]
    NotFound,
    #[error("expired")]
    Expired { attempts_left: Option<i64> },
    #[error("already used")]
    AlreadyUsed,
    #[error("wrong code")]
    WrongCode { attempts_left: i64 },
    #[error("conflict")]
    Conflict,
    #[error("already paired")]
    AlreadyPaired,
    #[error("account mismatch")]
    AccountMismatch,
    #[error("limit reached")]
    LimitReached,
    #[error("unpaired")]
    Unpaired,
}

impl PwaError {
    pub const EXPIRED: PwaError = PwaError::Expired {
        attempts_left: None,
    };

    pub fn status(&self) -> StatusCode {
        match self {
            PwaError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            PwaError::Reauthenticate | PwaError::Forbidden | PwaError::AccountBlocked => {
                StatusCode::FORBIDDEN
            }
            PwaError::InvalidRequest => StatusCode::BAD_REQUEST,
            PwaError::NotFound => StatusCode::NOT_FOUND,
            PwaError::Expired { .. } => StatusCode::GONE,
            PwaError::AlreadyUsed
            | PwaError::WrongCode { .. }
            | PwaError::Conflict
            | PwaError::AlreadyPaired
            | PwaError::AccountMismatch => StatusCode::CONFLICT,
            PwaError::LimitReached => StatusCode::TOO_MANY_REQUESTS,
            PwaError::Unpaired => StatusCode::UNAUTHORIZED,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            PwaError::Unavailable(_) => "UNAVAILABLE",
            PwaError::Reauthenticate => "REAUTHENTICATE",
            PwaError::Forbidden => "FORBIDDEN",
            PwaError::AccountBlocked => "ACCOUNT_BLOCKED",
            PwaError::InvalidRequest => "INVALID_REQUEST",
            PwaError::NotFound => "NOT_FOUND",
            PwaError::Expired { .. } => "EXPIRED",
            PwaError::AlreadyUsed => "ALREADY_USED",
            PwaError::WrongCode { .. } => "WRONG_CODE",
            PwaError::Conflict => "CONFLICT",
            PwaError::AlreadyPaired => "ALREADY_PAIRED",
            PwaError::AccountMismatch => "ACCOUNT_MISMATCH",
            PwaError::LimitReached => "LIMIT_REACHED",
            PwaError::Unpaired => "UNPAIRED",
        }
    }

    pub fn message(&self) -> &'static str {
        match self {
            PwaError::Unavailable(_) => "The mobile app is not available right now.",
            PwaError::Reauthenticate => "Sign in again to pair a phone.",
            PwaError::Forbidden => "Use Cloud on the web for this.",
            PwaError::AccountBlocked => "This account cannot use the mobile app right now.",
            PwaError::InvalidRequest => "The request is not valid.",
            PwaError::NotFound => "Not found.",
            PwaError::Expired { .. } => "This pairing has expired.",
            PwaError::AlreadyUsed => "This pairing link was already used.",
            PwaError::WrongCode { .. } => "The code does not match.",
            PwaError::Conflict => "The pairing is not at this step.",
            PwaError::AlreadyPaired => "This app is paired with another account.",
            PwaError::AccountMismatch => "This browser is signed in to another account.",
            PwaError::LimitReached => "The limit for this account was reached.",
            PwaError::Unpaired => "This phone is not paired.",
        }
    }

    /// `attemptsLeft`, where the error carries it.
    pub fn attempts_left(&self) -> Option<i64> {
        match self {
            PwaError::Expired { attempts_left } => *attempts_left,
            PwaError::WrongCode { attempts_left } => Some(*attempts_left),
            _ => None,
        }
    }

    /// The error as an HTTP response body `{code, message, attemptsLeft?}`. An internal failure
    /// is logged by its name only.
    pub fn to_api_error(&self) -> ApiError {
        if let PwaError::Unavailable(name) = self {
            tracing::warn!(error = name, "pwa request failed");
        }
        let error = ApiError::new(self.status(), self.code(), self.message());
        match self.attempts_left() {
            Some(left) => error.with_field("attemptsLeft", left),
            None => error,
        }
    }
}

impl From<sqlx::Error> for PwaError {
    fn from(_: sqlx::Error) -> Self {
        PwaError::Unavailable("DatabaseError")
    }
}

impl From<crate::settings::SettingsError> for PwaError {
    fn from(_: crate::settings::SettingsError) -> Self {
        PwaError::Unavailable("SettingsError")
    }
}

impl From<crate::registry::RegistryError> for PwaError {
    fn from(_: crate::registry::RegistryError) -> Self {
        PwaError::Unavailable("RegistryError")
    }
}

impl From<crate::audit::AuditError> for PwaError {
    fn from(_: crate::audit::AuditError) -> Self {
        PwaError::Unavailable("AuditError")
    }
}

impl From<crate::auth::AuthError> for PwaError {
    fn from(_: crate::auth::AuthError) -> Self {
        PwaError::Unavailable("AuthError")
    }
}

impl From<crate::identity::IdentityError> for PwaError {
    fn from(error: crate::identity::IdentityError) -> Self {
        // The body stays the fixed 503; the log says which step of the issuance failed.
        tracing::warn!(error = %error, "pwa identity step failed");
        match error.root() {
            crate::identity::IdentityError::AccountUnavailable => PwaError::AccountBlocked,
            e if e.is_timeout() => PwaError::Unavailable("TimeoutError"),
            _ => PwaError::Unavailable("IdentityError"),
        }
    }
}

impl From<EligibilityError> for PwaError {
    fn from(error: EligibilityError) -> Self {
        match error {
            EligibilityError::Forbidden => PwaError::Forbidden,
            EligibilityError::Reauthenticate => PwaError::Reauthenticate,
            EligibilityError::Settings(_) => PwaError::Unavailable("SettingsError"),
            EligibilityError::Database(_) => PwaError::Unavailable("DatabaseError"),
        }
    }
}

impl axum::response::IntoResponse for PwaError {
    fn into_response(self) -> axum::response::Response {
        self.to_api_error().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_code_message_and_attempts() {
        let body = PwaError::WrongCode { attempts_left: 2 }
            .to_api_error()
            .body();
        assert_eq!(
            body,
            serde_json::json!({"code": "WRONG_CODE", "message": "The code does not match.", "attemptsLeft": 2})
        );
        let body = PwaError::EXPIRED.to_api_error().body();
        assert_eq!(
            body,
            serde_json::json!({"code": "EXPIRED", "message": "This pairing has expired."})
        );
        assert_eq!(
            PwaError::Unavailable("x").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(PwaError::Unpaired.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            PwaError::LimitReached.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}
