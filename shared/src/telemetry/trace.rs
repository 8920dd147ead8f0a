//! The trace context of the current invocation: its Lambda request id, its X-Ray trace header
//! and the W3C `traceparent` calls to apps carry on.
//!
//! The Lambda bootstrap sets it for the work of each invocation ([`scope`]); code that calls an
//! app reads it with [`current`] and adds [`TraceContext::outgoing_headers`]. It is task-local:
//! read it before spawning work (the local runner and in-process tests have none, and callers
//! then fall back to the request's own headers).

use std::future::Future;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The X-Ray trace header, as Lambda and API Gateway name it.
pub const XRAY_HEADER: &str = "x-amzn-trace-id";
/// The W3C trace context header.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// The request id header apps receive.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Where `lambda_runtime` puts the invocation's X-Ray header when the context has none.
pub const XRAY_ENV: &str = "_X_AMZN_TRACE_ID";

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// How one invocation is traced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    /// The Lambda request id of the invocation.
    pub request_id: Option<String>,
    /// The invocation's X-Ray trace header (`Root=1-…;Parent=…;Sampled=…`).
    pub xray: Option<String>,
    /// The `traceparent` for outgoing calls: the caller's when it sent a valid one, else derived
    /// from the X-Ray header.
    pub traceparent: Option<String>,
}

impl TraceContext {
    /// The context of an invocation: its request id, its X-Ray header (kept only when it has a
    /// well-formed root) and the caller's `traceparent`, if any.
    pub fn new(
        request_id: Option<String>,
        xray: Option<String>,
        incoming_traceparent: Option<&str>,
    ) -> TraceContext {
        let xray = xray.filter(|header| xray_root(header).is_some());
        let traceparent = incoming_traceparent
            .filter(|value| is_valid_traceparent(value))
            .map(str::to_string)
            .or_else(|| xray.as_deref().and_then(traceparent_from_xray));
        TraceContext {
            request_id: request_id.filter(|id| !id.is_empty()),
            xray,
            traceparent,
        }
    }

    /// The X-Ray trace id (`1-5759e988-bd862e3fe1be46a994272793`), when the header is known.
    pub fn trace_id(&self) -> Option<&str> {
        self.xray.as_deref().and_then(xray_root)
    }

    /// `X-Amzn-Trace-Id`, `traceparent` and `X-Request-Id` for a call to an app, each when known.
    pub fn outgoing_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            (XRAY_HEADER, &self.xray),
            (TRACEPARENT_HEADER, &self.traceparent),
            (REQUEST_ID_HEADER, &self.request_id),
        ] {
            if let Some(value) = value
                && let Ok(value) = HeaderValue::from_str(value)
            {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
        headers
    }
}

/// The trace context of the invocation this task serves, if the bootstrap set one.
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(Clone::clone).ok()
}

/// Runs `work` with `context` as the [`current`] trace context.
pub async fn scope<F: Future>(context: TraceContext, work: F) -> F::Output {
    CURRENT.scope(context, work).await
}

/// The X-Ray header of this invocation from the environment, as `lambda_runtime` sets it.
pub fn xray_from_env() -> Option<String> {
    std::env::var(XRAY_ENV).ok().filter(|v| !v.is_empty())
}

/// The `Root=` of an X-Ray header when it is a well-formed trace id: `1-` + 8 hex digits (the
/// epoch seconds) + `-` + 24 hex digits.
pub fn xray_root(header: &str) -> Option<&str> {
    let root = field(header, "Root")?;
    let mut parts = root.split('-');
    let well_formed = parts.next() == Some("1")
        && parts.next().is_some_and(|epoch| is_hex(epoch, 8))
        && parts.next().is_some_and(|id| is_hex(id, 24))
        && parts.next().is_none();
    well_formed.then_some(root)
}

/// The W3C `traceparent` of an X-Ray header: the root's 32 hex digits as the trace id, `Parent=`
/// as the parent id (a fresh one when it has none) and `Sampled=1` as the sampled flag.
pub fn traceparent_from_xray(header: &str) -> Option<String> {
    let root = xray_root(header)?;
    let trace_id: String = root[2..].chars().filter(|c| *c != '-').collect();
    if trace_id.bytes().all(|b| b == b'0') {
        return None;
    }
    let parent = field(header, "Parent")
        .filter(|parent| is_hex(parent, 16) && parent.bytes().any(|b| b != b'0'))
        .map(str::to_ascii_lowercase)
        .unwrap_or_else(fresh_parent_id);
    let flags = if field(header, "Sampled") == Some("1") {
        "01"
    } else {
        "00"
    };
    Some(format!(
        "00-{}-{parent}-{flags}",
        trace_id.to_ascii_lowercase()
    ))
}

/// A version-00 `traceparent`: `00-<32 lowercase hex>-<16 lowercase hex>-<2 hex>`, neither id
/// all zeros.
pub fn is_valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let lower_hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let nonzero = |part: &str| part.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, parent, flags]
        if *version == "00"
            && lower_hex(trace, 32)
            && nonzero(trace)
            && lower_hex(parent, 16)
            && nonzero(parent)
            && lower_hex(flags, 2))
}

/// The value of `key=` in a `;`-separated header.
fn field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    header.split(';').find_map(|part| {
        let (name, value) = part.trim().split_once('=')?;
        (name.trim() == key).then_some(value.trim())
    })
}

fn is_hex(value: &str, len: usize) -> bool {
    value.len() == len && value.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A random, non-zero 16-hex-digit span id.
fn fresh_parent_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let parent = &id[..16];
    if parent.bytes().all(|b| b == b'0') {
        "0000000000000001".to_string()
    } else {
        parent.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn an_xray_header_becomes_a_traceparent() {
        assert_eq!(xray_root(XRAY), Some("1-5759e988-bd862e3fe1be46a994272793"));
        assert_eq!(
            traceparent_from_xray(XRAY).as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        let unsampled =
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0";
        assert_eq!(
            traceparent_from_xray(unsampled).as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
        );
        // Without a parent, the span id is fresh but the trace stays the same.
        let derived = traceparent_from_xray("Root=1-5759e988-bd862e3fe1be46a994272793")
            .expect("a traceparent");
        assert!(is_valid_traceparent(&derived), "{derived}");
        assert!(derived.starts_with("00-5759e988bd862e3fe1be46a994272793-"));
        assert!(derived.ends_with("-00"));
    }

    #[test]
    fn malformed_xray_headers_give_nothing() {
        for header in [
            "",
            "Root=",
            "Root=1-5759e988",
            "Root=1-5759e988-bd862e3fe1be46a99427279",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5f84c7a9-00000001-0000-4000-8000-00;Sampled=0",
            "Parent=53995c3f42cd8ad8;Sampled=1",
        ] {
            assert_eq!(traceparent_from_xray(header), None, "{header}");
        }
    }

    #[test]
    fn traceparents_are_checked() {
        assert!(is_valid_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        for bad in [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "garbage",
        ] {
            assert!(!is_valid_traceparent(bad), "{bad}");
        }
    }

    #[test]
    fn the_callers_traceparent_wins_over_the_derived_one() {
        let incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let context = TraceContext::new(Some("r-1".into()), Some(XRAY.into()), Some(incoming));
        assert_eq!(context.traceparent.as_deref(), Some(incoming));
        assert_eq!(
            context.trace_id(),
            Some("1-5759e988-bd862e3fe1be46a994272793")
        );
        let derived = TraceContext::new(Some("r-1".into()), Some(XRAY.into()), Some("bad"));
        assert_eq!(
            derived.traceparent.as_deref(),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        let headers = derived.outgoing_headers();
        assert_eq!(headers[XRAY_HEADER], XRAY);
        assert_eq!(headers[REQUEST_ID_HEADER], "r-1");
        assert_eq!(
            headers[TRACEPARENT_HEADER],
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
        );
        assert!(TraceContext::default().outgoing_headers().is_empty());
    }

    #[tokio::test]
    async fn the_context_is_current_inside_its_scope_only() {
        assert_eq!(current(), None);
        let context = TraceContext::new(Some("r-2".into()), Some(XRAY.into()), None);
        let seen = scope(context.clone(), async { current() }).await;
        assert_eq!(seen, Some(context));
        assert_eq!(current(), None);
    }
}
