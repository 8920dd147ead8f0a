//! Delivering the response document: one HTTP `PUT` of the JSON to the request's pre-signed
//! `ResponseURL` (an S3 object URL in AWS).

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use tokio::time::Instant;

use crate::request::Response;

/// One attempt at the `PUT` gives up after this long: S3 answers in well under a second.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(8);
/// Attempts while time is left: a dropped connection or an S3 `5xx` is worth repeating, since
/// without an answer CloudFormation waits for the resource's whole service timeout.
const MAX_ATTEMPTS: u32 = 3;
/// Pause between attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Left before the invocation's deadline for the invocation's own result.
const DEADLINE_RESERVE: Duration = Duration::from_secs(1);

/// Why the response could not be delivered. Never carries the URL: it is pre-signed, so anyone
/// holding it could answer in this function's place.
#[derive(Debug, thiserror::Error)]
pub enum RespondError {
    #[error("the response could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("no HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("the response URL could not be reached: {0}")]
    Transport(reqwest::Error),
    #[error("the response URL refused the response with HTTP {0}")]
    Refused(u16),
    #[error("no time was left before the invocation's deadline to send the response")]
    NoTimeLeft,
}

/// PUTs `response` to `url` before `deadline`.
///
/// The body goes with an empty `Content-Type` and its `Content-Length`: the URL is signed for no
/// content type, and S3 refuses a request whose headers differ from the signed ones.
pub async fn send(url: &str, response: &Response, deadline: Instant) -> Result<(), RespondError> {
    let body = serde_json::to_vec(response)?;
    let client = reqwest::Client::builder()
        // The URL is the whole destination: an answer that redirects is not S3 taking it.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| RespondError::Client(error.without_url()))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(DEADLINE_RESERVE);
        if left.is_zero() {
            return Err(RespondError::NoTimeLeft);
        }
        let sent = client
            .put(url)
            .header(CONTENT_TYPE, "")
            .body(body.clone())
            .timeout(ATTEMPT_TIMEOUT.min(left))
            .send()
            .await;
        let error = match sent {
            Ok(answer) if answer.status().is_success() => return Ok(()),
            Ok(answer) if answer.status().is_server_error() => {
                RespondError::Refused(answer.status().as_u16())
            }
            Ok(answer) => return Err(RespondError::Refused(answer.status().as_u16())),
            Err(error) => RespondError::Transport(error.without_url()),
        };
        if attempt >= MAX_ATTEMPTS {
            return Err(error);
        }
        tracing::warn!(attempt, error = %error, "response not delivered; trying again");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}
