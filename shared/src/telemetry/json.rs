//! The JSON log line of Lambda: `timestamp`, `level`, the event's fields (`message` among them)
//! and, inside an invocation, the fields of its span (`requestId`, `traceId`, `coldStart`, …)
//! at the top level, so every line of an invocation can be found by its request or trace id.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::INVOCATION_SPAN;

/// Formats events as one JSON object per line (see the module documentation). Span fields must
/// be recorded as JSON (`JsonFields`), as the JSON builder of `tracing_subscriber` does.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = EventFields(Vec::new());
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert(
            "level".into(),
            Value::String(event.metadata().level().as_str().into()),
        );
        for (name, value) in fields.0 {
            line.insert(name, value);
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if span.name() != INVOCATION_SPAN || !span.metadata().target().starts_with("k2b") {
                    continue;
                }
                let extensions = span.extensions();
                let Some(recorded) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(span_fields)) =
                    serde_json::from_str::<Value>(recorded.as_str())
                {
                    for (name, value) in span_fields {
                        // The event's own field of the same name is the more specific one.
                        line.entry(name).or_insert(value);
                    }
                }
            }
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields as JSON values, in the order they were recorded.
struct EventFields(Vec<(String, Value)>);

impl EventFields {
    fn push(&mut self, field: &Field, value: Value) {
        let name = field.name();
        // Fields the `log` bridge adds describe the record, not the event.
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.0.push((name.to_string(), value));
    }
}

impl Visit for EventFields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, Value::from(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn lines(captured: &Captured) -> Vec<Value> {
        let bytes = captured.0.lock().expect("lock").clone();
        String::from_utf8(bytes)
            .expect("utf-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    #[test]
    fn lines_inside_an_invocation_carry_its_fields_at_the_top_level() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .with_writer(captured.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(app_id = "weather", "outside");
            let span = tracing::error_span!(
                "invocation",
                requestId = "r-1",
                traceId = tracing::field::Empty,
                coldStart = tracing::field::Empty
            );
            span.record("traceId", "1-5759e988-bd862e3fe1be46a994272793");
            span.record("coldStart", true);
            let _entered = span.enter();
            let nested = tracing::info_span!("other", hidden = 1);
            let _nested = nested.enter();
            tracing::warn!(upstream_status = 502u64, ok = false, "inside");
        });
        let lines = lines(&captured);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["message"], "outside");
        assert_eq!(lines[0]["app_id"], "weather");
        assert_eq!(lines[0]["level"], "INFO");
        assert!(lines[0].get("requestId").is_none());
        assert!(
            lines[0]["timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
        let inside = &lines[1];
        assert_eq!(inside["message"], "inside");
        assert_eq!(inside["level"], "WARN");
        assert_eq!(inside["upstream_status"], 502);
        assert_eq!(inside["ok"], false);
        assert_eq!(inside["requestId"], "r-1");
        assert_eq!(inside["traceId"], "1-5759e988-bd862e3fe1be46a994272793");
        assert_eq!(inside["coldStart"], true);
        // Other spans stay out of the line.
        assert!(inside.get("hidden").is_none());
    }
}
