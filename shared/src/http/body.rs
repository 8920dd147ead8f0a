//! Request bodies read with a hard byte limit, so an oversized body is refused without being
//! buffered, whatever its `Content-Length` claims.

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, Limited};
use serde::de::DeserializeOwned;

/// Why a body was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("request body exceeds {limit} bytes")]
    TooLarge { limit: usize },
    #[error("request body could not be read")]
    Unreadable,
    #[error("request body is not valid JSON for this request")]
    InvalidJson,
}

/// Reads at most `limit` bytes. A declared `Content-Length` above the limit is refused before any
/// byte is read; a body that streams past the limit is cut off there.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, BodyError> {
    if let Some(length) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        && length > limit as u64
    {
        return Err(BodyError::TooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(BodyError::TooLarge { limit })
        }
        Err(_) => Err(BodyError::Unreadable),
    }
}

/// Reads a limited body and parses it as `T` (strict types reject unknown fields with
/// `#[serde(deny_unknown_fields)]`). An empty body parses as JSON `null`... only if `T` accepts it.
pub async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<T, BodyError> {
    let bytes = read_limited(headers, body, limit).await?;
    serde_json::from_slice(&bytes).map_err(|_| BodyError::InvalidJson)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use http::HeaderValue;

    #[tokio::test]
    async fn accepts_a_body_at_the_limit() {
        let body = Body::from(vec![b'x'; 8192]);
        let bytes = read_limited(&HeaderMap::new(), body, 8192)
            .await
            .expect("fits");
        assert_eq!(bytes.len(), 8192);
    }

    #[tokio::test]
    async fn refuses_one_byte_more_even_without_content_length() {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            (0..3).map(|_| Ok(Bytes::from(vec![b'x'; 4096]))).collect();
        let body = Body::from_stream(stream::iter(chunks));
        let err = read_limited(&HeaderMap::new(), body, 8192)
            .await
            .expect_err("must fail");
        assert_eq!(err, BodyError::TooLarge { limit: 8192 });
    }

    #[tokio::test]
    async fn refuses_a_declared_length_above_the_limit_up_front() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("8193"));
        let err = read_limited(&headers, Body::from("{}"), 8192)
            .await
            .expect_err("must fail");
        assert_eq!(err, BodyError::TooLarge { limit: 8192 });
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Claim {
        secret: String,
    }

    #[tokio::test]
    async fn strict_json_rejects_unknown_fields_and_garbage() {
        let ok: Claim = read_json(&HeaderMap::new(), Body::from(r#"{"secret":"s"}"#), 100)
            .await
            .expect("valid");
        assert_eq!(ok.secret, "s");
        for bad in [r#"{"secret":"s","extra":1}"#, "not json", ""] {
            let err = read_json::<Claim>(&HeaderMap::new(), Body::from(bad), 100)
                .await
                .expect_err("must fail");
            assert_eq!(err, BodyError::InvalidJson, "{bad:?}");
        }
    }
}
