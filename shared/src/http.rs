//! HTTP building blocks shared by every function's router.

pub mod body;
pub mod cookies;
pub mod egress;
pub mod error;
pub mod etag;
pub mod headers;
pub mod locale;
pub mod openapi;
pub mod origin;
pub mod rate_limit;
pub mod routes;
pub mod text;

pub use error::ApiError;
