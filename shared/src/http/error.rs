//! The JSON error shape every route answers with: `{"code": "...", "message": "..."}` plus the
//! status, and optional extra fields (for example `attemptsLeft`).

use std::borrow::Cow;

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Map, Value};

/// An error as the client sees it. Messages are fixed, human-readable strings: never an internal
/// error text, a secret or a request body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Cow<'static, str>,
    pub message: Cow<'static, str>,
    pub extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// Adds a field next to `code` and `message`.
    pub fn with_field(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(name.to_string(), value.into());
        self
    }

    pub fn bad_request(message: impl Into<Cow<'static, str>>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }
    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "Authentication required",
        )
    }
    /// 401 with a route's own message.
    pub fn unauthorized_with(message: impl Into<Cow<'static, str>>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message)
    }
    pub fn forbidden(message: impl Into<Cow<'static, str>>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }
    pub fn payload_too_large(limit: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!("The request body exceeds {limit} bytes."),
        )
    }
    pub fn unavailable(message: impl Into<Cow<'static, str>>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message)
    }
    pub fn internal() -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "The server could not complete the request.",
        )
    }

    /// The JSON body: `code`, `message`, then any extra fields.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("code".into(), Value::String(self.code.to_string()));
        body.insert("message".into(), Value::String(self.message.to_string()));
        for (key, value) in &self.extra {
            body.insert(key.clone(), value.clone());
        }
        Value::Object(body)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn renders_code_message_and_extra_fields_with_the_status() {
        let response = ApiError::new(
            StatusCode::CONFLICT,
            "WRONG_CODE",
            "The code does not match.",
        )
        .with_field("attemptsLeft", 2)
        .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let json: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"code": "WRONG_CODE", "message": "The code does not match.", "attemptsLeft": 2})
        );
    }
}
