//! Cloud Login's one error type, with the fixed status, code and message of each case. Bodies
//! never carry SQL, secrets, signatures or keys; internal failures log only their name.

use http::StatusCode;

use crate::approvals::EligibilityError;
use crate::http::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudLoginError {
    /// Switched off, not set up, or an internal failure (its name is logged).
    #[error("unavailable ({0})")]
    Unavailable(&'static str),
    /// A wrong signature, secret, clock, device or account; nothing says which.
    #[error("forbidden")]
    Forbidden,
    /// A recent web sign-in is needed.
    #[error("reauthenticate")]
    Reauthenticate,
    #[error("invalid request")]
    InvalidRequest,
    /// Not at this step: already used, wrong code, replayed, or another state.
    #[error("conflict")]
    Conflict,
    #[error("limit reached")]
    LimitReached,
    /// No such pairing, device or sign-in for this caller.
    #[error("not found")]
    Missing,
    /// The management routes need a signed-in browser.
    #[error("unauthenticated")]
    Unauthenticated,
    #[error("payload too large")]
    TooLarge,
}

impl CloudLoginError {
    pub fn status(&self) -> StatusCode {
        match self {
            CloudLoginError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            CloudLoginError::Forbidden | CloudLoginError::Reauthenticate => StatusCode::FORBIDDEN,
            CloudLoginError::InvalidRequest => StatusCode::BAD_REQUEST,
            CloudLoginError::Conflict => StatusCode::CONFLICT,
            CloudLoginError::LimitReached => StatusCode::TOO_MANY_REQUESTS,
            CloudLoginError::Missing => StatusCode::NOT_FOUND,
            CloudLoginError::Unauthenticated => StatusCode::UNAUTHORIZED,
            CloudLoginError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            // A missing pairing or sign-in says as little as a switched-off feature.
            CloudLoginError::Unavailable(_) | CloudLoginError::Missing => "UNAVAILABLE",
            CloudLoginError::Forbidden => "FORBIDDEN",
            CloudLoginError::Reauthenticate => "REAUTHENTICATE",
            CloudLoginError::InvalidRequest => "INVALID_REQUEST",
            CloudLoginError::Conflict => "CONFLICT",
            CloudLoginError::LimitReached => "LIMIT_REACHED",
            CloudLoginError::Unauthenticated => "UNAUTHORIZED",
            CloudLoginError::TooLarge => "PAYLOAD_TOO_LARGE",
        }
    }

    pub fn message(&self) -> &'static str {
        match self {
            CloudLoginError::Unavailable(_) => "Cloud Login is not available right now.",
            CloudLoginError::Forbidden => "This is not allowed.",
            CloudLoginError::Reauthenticate => "Sign in again to continue.",
            CloudLoginError::InvalidRequest => "The request is not valid.",
            CloudLoginError::Conflict => "This request is not at this step.",
            CloudLoginError::LimitReached => "The limit for this account was reached.",
            CloudLoginError::Missing => "Not found.",
            CloudLoginError::Unauthenticated => "Sign in first.",
            CloudLoginError::TooLarge => "The request is too large.",
        }
    }

    /// The error as an HTTP body `{code, message}`; an internal failure is logged by name.
    pub fn to_api_error(&self) -> ApiError {
        if let CloudLoginError::Unavailable(name) = self {
            tracing::warn!(error = name, "cloud login request failed");
        }
        ApiError::new(self.status(), self.code(), self.message())
    }
}

impl From<sqlx::Error> for CloudLoginError {
    fn from(_: sqlx::Error) -> Self {
        CloudLoginError::Unavailable("DatabaseError")
    }
}

impl From<crate::settings::SettingsError> for CloudLoginError {
    fn from(_: crate::settings::SettingsError) -> Self {
        CloudLoginError::Unavailable("SettingsError")
    }
}

impl From<crate::audit::AuditError> for CloudLoginError {
    fn from(_: crate::audit::AuditError) -> Self {
        CloudLoginError::Unavailable("AuditError")
    }
}

impl From<crate::auth::AuthError> for CloudLoginError {
    fn from(_: crate::auth::AuthError) -> Self {
        CloudLoginError::Unavailable("AuthError")
    }
}

impl From<EligibilityError> for CloudLoginError {
    fn from(error: EligibilityError) -> Self {
        match error {
            EligibilityError::Forbidden => CloudLoginError::Forbidden,
            EligibilityError::Reauthenticate => CloudLoginError::Reauthenticate,
            EligibilityError::Settings(_) => CloudLoginError::Unavailable("SettingsError"),
            EligibilityError::Database(_) => CloudLoginError::Unavailable("DatabaseError"),
        }
    }
}

impl axum::response::IntoResponse for CloudLoginError {
    fn into_response(self) -> axum::response::Response {
        self.to_api_error().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_its_status_and_code() {
        let cases = [
            (CloudLoginError::Unavailable("x"), 503, "UNAVAILABLE"),
            (CloudLoginError::Forbidden, 403, "FORBIDDEN"),
            (CloudLoginError::Reauthenticate, 403, "REAUTHENTICATE"),
            (CloudLoginError::InvalidRequest, 400, "INVALID_REQUEST"),
            (CloudLoginError::Conflict, 409, "CONFLICT"),
            (CloudLoginError::LimitReached, 429, "LIMIT_REACHED"),
            (CloudLoginError::Missing, 404, "UNAVAILABLE"),
            (CloudLoginError::Unauthenticated, 401, "UNAUTHORIZED"),
            (CloudLoginError::TooLarge, 413, "PAYLOAD_TOO_LARGE"),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.status().as_u16(), status, "{error:?}");
            let body = error.to_api_error().body();
            assert_eq!(body["code"], code);
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }
}
