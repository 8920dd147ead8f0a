//! Response header helpers and the request id.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::{HeaderMap, HeaderValue, header};

/// `Cache-Control: no-store`: for anything personal, secret-bearing or changing per request.
pub const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// Sets `Cache-Control: no-store` on a response, replacing any other value.
pub fn set_no_store(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, NO_STORE);
}

/// Middleware: every response of the wrapped routes is `no-store`.
pub async fn no_store(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    set_no_store(response.headers_mut());
    response
}

/// Longest request id accepted from a client.
pub const MAX_REQUEST_ID_CHARS: usize = 200;
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The id of this request: the client's `x-request-id` when it is valid, else one of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId {
    pub value: String,
    /// Whether the client sent it (only a client's id is forwarded to other apps).
    pub from_client: bool,
}

impl RequestId {
    /// The client's id if valid, else a fresh UUID.
    pub fn from_headers(headers: &HeaderMap) -> RequestId {
        match client_request_id(headers) {
            Some(value) => RequestId {
                value,
                from_client: true,
            },
            None => RequestId {
                value: uuid::Uuid::new_v4().to_string(),
                from_client: false,
            },
        }
    }
}

/// A client's `x-request-id`, kept only when it is 1..=200 printable ASCII characters
/// (0x21–0x7E: no spaces, no controls, nothing non-ASCII). An invalid one is dropped, never an error.
pub fn client_request_id(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get(REQUEST_ID_HEADER)?.as_bytes();
    if is_valid_request_id(raw) {
        String::from_utf8(raw.to_vec()).ok()
    } else {
        None
    }
}

/// The bounded-id rule: 1..=200 bytes, each 0x21..=0x7E.
pub fn is_valid_request_id(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw.len() <= MAX_REQUEST_ID_CHARS
        && raw.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// Middleware: puts a [`RequestId`] into the request extensions and echoes it as `x-request-id`.
pub async fn request_id(mut request: Request, next: Next) -> Response {
    let id = RequestId::from_headers(request.headers());
    let header_value = HeaderValue::from_str(&id.value).ok();
    request.extensions_mut().insert(id);
    let mut response = next.run(request).await;
    if let Some(value) = header_value {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(raw: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            REQUEST_ID_HEADER,
            HeaderValue::from_bytes(raw).expect("header bytes"),
        );
        headers
    }

    #[test]
    fn keeps_valid_client_ids_and_drops_invalid_ones() {
        assert_eq!(
            client_request_id(&with_id(b"req-1")).as_deref(),
            Some("req-1")
        );
        let max = "x".repeat(200);
        assert_eq!(client_request_id(&with_id(max.as_bytes())), Some(max));
        for bad in [
            &b"two words"[..],
            "ümlaut".as_bytes(),
            &[b'x'; 201][..],
            b"tab\there",
        ] {
            assert_eq!(client_request_id(&with_id(bad)), None, "{bad:?}");
        }
        assert_eq!(client_request_id(&HeaderMap::new()), None);
    }

    #[test]
    fn generates_an_id_when_the_client_has_none() {
        let id = RequestId::from_headers(&with_id(b"two words"));
        assert!(!id.from_client);
        assert!(uuid::Uuid::parse_str(&id.value).is_ok());
    }
}
