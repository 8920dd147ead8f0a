//! Metrics as CloudWatch Embedded Metric Format (EMF): one JSON line on stdout per invocation,
//! which CloudWatch Logs turns into metrics of the namespace [`NAMESPACE`] with the one
//! dimension `FunctionName` (the Lambda function's name, so alarms can name a function the way
//! `AWS/Lambda`'s own metrics do).
//!
//! Code anywhere records into one process-wide registry: [`count`] (summed), [`observe`] (every
//! value kept, for distributions such as latencies) and [`gauge`] (the highest value). Only the
//! Lambda bootstrap calls [`flush`], once per invocation; the local runner and in-process tests
//! never do, so their registry just accumulates, bounded by [`MAX_VALUES_PER_NAME`] and
//! [`MAX_NAMES`].

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "K2BCloud";
/// The dimension every metric carries: the Lambda function's name.
pub const DIMENSION: &str = "FunctionName";
/// Values of one [`observe`] name per line: EMF takes at most 100 values in a metric's array.
/// Further values are dropped and counted under `<name>Dropped`.
pub const MAX_VALUES_PER_NAME: usize = 100;
/// Metric definitions per directive: EMF takes at most 100 in one directive, so a line with
/// more names carries several directives.
pub const MAX_METRICS_PER_DIRECTIVE: usize = 100;
/// Distinct names one line holds at most; names are static, so this only bounds a mistake.
pub const MAX_NAMES: usize = 200;

/// Root members of the line that are not metrics (a metric of the same name is ignored).
const PROPERTY_KEYS: [&str; 5] = ["_aws", DIMENSION, "Function", "requestId", "traceId"];

/// A metric's unit, as CloudWatch spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Milliseconds,
    Seconds,
}

impl Unit {
    /// The unit's CloudWatch name.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Milliseconds => "Milliseconds",
            Unit::Seconds => "Seconds",
        }
    }
}

/// Adds `n` to the count `name` (summed over the invocation).
pub fn count(name: &'static str, n: u64) {
    with_registry(|registry| registry.count(name, n));
}

/// Keeps `value` of the distribution `name` (at most [`MAX_VALUES_PER_NAME`] per line; the
/// rest are counted under `<name>Dropped`). Values that are not finite are ignored.
pub fn observe(name: &'static str, unit: Unit, value: f64) {
    with_registry(|registry| registry.observe(name, unit, value));
}

/// Raises the gauge `name` to `value` if it is higher (the invocation's maximum). Values that
/// are not finite are ignored.
pub fn gauge(name: &'static str, unit: Unit, value: f64) {
    with_registry(|registry| registry.gauge(name, unit, value));
}

/// Writes what was recorded since the last flush as one EMF line to stdout (nothing when
/// nothing was recorded) and starts over.
pub fn flush() {
    let line = with_registry(|registry| {
        let invocation = registry.properties.take();
        registry.take_line(&identity(invocation), epoch_ms())
    });
    if let Some(line) = line {
        let mut stdout = std::io::stdout().lock();
        // Best effort: a closed stdout must not fail the invocation.
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}

/// The binary's name, for the `Function` property and the fallback `FunctionName` (set by the
/// bootstrap before the first invocation).
pub(crate) fn set_function(name: &'static str) {
    let _ = FUNCTION.set(name);
}

/// The request id and X-Ray trace id the next line carries (set by the bootstrap when an
/// invocation begins).
pub(crate) fn begin_invocation(request_id: Option<String>, trace_id: Option<String>) {
    with_registry(|registry| {
        registry.properties = Some(Invocation {
            request_id,
            trace_id,
        });
    });
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry::new());
static FUNCTION: OnceLock<&'static str> = OnceLock::new();

fn with_registry<T>(change: impl FnOnce(&mut Registry) -> T) -> T {
    let mut registry = REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    change(&mut registry)
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Who wrote a line: the names of the function, and the invocation it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineIdentity {
    /// `AWS_LAMBDA_FUNCTION_NAME`, else the binary's name.
    pub function_name: String,
    /// The binary's name.
    pub function: String,
    pub invocation: Option<Invocation>,
}

/// The invocation a line belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
}

fn identity(invocation: Option<Invocation>) -> LineIdentity {
    static FUNCTION_NAME: OnceLock<String> = OnceLock::new();
    let function = FUNCTION
        .get()
        .map(|name| name.to_string())
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| "k2b".to_string());
    let function_name = FUNCTION_NAME
        .get_or_init(|| {
            std::env::var("AWS_LAMBDA_FUNCTION_NAME")
                .ok()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| function.clone())
        })
        .clone();
    LineIdentity {
        function_name,
        function,
        invocation,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Count(u64),
    Values {
        unit: Unit,
        values: Vec<f64>,
        dropped: u64,
    },
    Gauge {
        unit: Unit,
        max: f64,
    },
}

/// What was recorded since the last line. A name keeps the kind (and unit) it was first
/// recorded with; a call of another kind under the same name is ignored.
#[derive(Debug)]
pub(crate) struct Registry {
    entries: BTreeMap<&'static str, Entry>,
    properties: Option<Invocation>,
}

impl Registry {
    pub(crate) const fn new() -> Registry {
        Registry {
            entries: BTreeMap::new(),
            properties: None,
        }
    }

    /// The entry of `name`, made by `make` when the name is new and there is room for it.
    fn entry(&mut self, name: &'static str, make: impl FnOnce() -> Entry) -> Option<&mut Entry> {
        if name.is_empty() || PROPERTY_KEYS.contains(&name) {
            return None;
        }
        if !self.entries.contains_key(name) && self.entries.len() >= MAX_NAMES {
            return None;
        }
        Some(self.entries.entry(name).or_insert_with(make))
    }

    pub(crate) fn count(&mut self, name: &'static str, n: u64) {
        if let Some(Entry::Count(total)) = self.entry(name, || Entry::Count(0)) {
            *total = total.saturating_add(n);
        }
    }

    pub(crate) fn observe(&mut self, name: &'static str, unit: Unit, value: f64) {
        if !value.is_finite() {
            return;
        }
        let make = || Entry::Values {
            unit,
            values: Vec::new(),
            dropped: 0,
        };
        if let Some(Entry::Values {
            values, dropped, ..
        }) = self.entry(name, make)
        {
            if values.len() < MAX_VALUES_PER_NAME {
                values.push(value);
            } else {
                *dropped += 1;
            }
        }
    }

    pub(crate) fn gauge(&mut self, name: &'static str, unit: Unit, value: f64) {
        if !value.is_finite() {
            return;
        }
        if let Some(Entry::Gauge { max, .. }) =
            self.entry(name, || Entry::Gauge { unit, max: value })
            && value > *max
        {
            *max = value;
        }
    }

    /// The EMF line of everything recorded (`None` when nothing was), and an empty registry.
    pub(crate) fn take_line(
        &mut self,
        identity: &LineIdentity,
        timestamp_ms: u64,
    ) -> Option<String> {
        let entries = std::mem::take(&mut self.entries);
        if entries.is_empty() {
            return None;
        }
        let mut root = Map::new();
        let mut definitions = Vec::new();
        let mut add = |root: &mut Map<String, Value>, name: String, unit: Unit, value: Value| {
            definitions.push(json!({"Name": name, "Unit": unit.as_str()}));
            root.insert(name, value);
        };
        for (name, entry) in entries {
            match entry {
                Entry::Count(total) => add(&mut root, name.to_string(), Unit::Count, json!(total)),
                Entry::Values {
                    unit,
                    values,
                    dropped,
                } => {
                    add(&mut root, name.to_string(), unit, json!(values));
                    if dropped > 0 {
                        add(
                            &mut root,
                            format!("{name}Dropped"),
                            Unit::Count,
                            json!(dropped),
                        );
                    }
                }
                Entry::Gauge { unit, max } => add(&mut root, name.to_string(), unit, json!(max)),
            }
        }
        let directives: Vec<Value> = definitions
            .chunks(MAX_METRICS_PER_DIRECTIVE)
            .map(|metrics| {
                json!({
                    "Namespace": NAMESPACE,
                    "Dimensions": [[DIMENSION]],
                    "Metrics": metrics,
                })
            })
            .collect();
        root.insert(
            "_aws".into(),
            json!({"Timestamp": timestamp_ms, "CloudWatchMetrics": directives}),
        );
        root.insert(DIMENSION.into(), json!(identity.function_name));
        root.insert("Function".into(), json!(identity.function));
        if let Some(invocation) = &identity.invocation {
            if let Some(id) = &invocation.request_id {
                root.insert("requestId".into(), json!(id));
            }
            if let Some(trace) = &invocation.trace_id {
                root.insert("traceId".into(), json!(trace));
            }
        }
        serde_json::to_string(&Value::Object(root)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> LineIdentity {
        LineIdentity {
            function_name: "k2b-widgets-AbC123".into(),
            function: "widgets".into(),
            invocation: Some(Invocation {
                request_id: Some("8f3c-request".into()),
                trace_id: Some("1-5759e988-bd862e3fe1be46a994272793".into()),
            }),
        }
    }

    fn line(registry: &mut Registry) -> Value {
        let text = registry
            .take_line(&identity(), 1_795_000_000_123)
            .expect("a line");
        assert!(!text.contains('\n'), "one line: {text}");
        serde_json::from_str(&text).expect("JSON")
    }

    /// What EMF requires of a document: metadata with a millisecond timestamp, directives with
    /// a namespace, dimension sets naming present string members, at most 100 definitions, and
    /// every defined metric present as a number or an array of at most 100 numbers.
    fn assert_valid_emf(document: &Value) {
        let aws = &document["_aws"];
        assert!(aws["Timestamp"].is_u64(), "{document}");
        let directives = aws["CloudWatchMetrics"].as_array().expect("directives");
        assert!(!directives.is_empty());
        for directive in directives {
            assert_eq!(directive["Namespace"], NAMESPACE);
            let sets = directive["Dimensions"].as_array().expect("dimension sets");
            for set in sets {
                for dimension in set.as_array().expect("a set") {
                    let key = dimension.as_str().expect("a name");
                    assert!(document[key].is_string(), "dimension {key} in {document}");
                }
            }
            let metrics = directive["Metrics"].as_array().expect("metrics");
            assert!(metrics.len() <= MAX_METRICS_PER_DIRECTIVE);
            for metric in metrics {
                let name = metric["Name"].as_str().expect("a name");
                let unit = metric["Unit"].as_str().expect("a unit");
                assert!(["Count", "Milliseconds", "Seconds"].contains(&unit));
                match &document[name] {
                    Value::Number(_) => {}
                    Value::Array(values) => {
                        assert!(values.len() <= MAX_VALUES_PER_NAME);
                        assert!(values.iter().all(Value::is_number), "{name}: {values:?}");
                    }
                    other => panic!("metric {name} is {other}"),
                }
            }
        }
    }

    fn definitions(document: &Value) -> Vec<(String, String)> {
        document["_aws"]["CloudWatchMetrics"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["Metrics"].as_array().cloned().unwrap_or_default())
            .map(|m| {
                (
                    m["Name"].as_str().unwrap_or_default().to_string(),
                    m["Unit"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn nothing_recorded_writes_no_line() {
        let mut registry = Registry::new();
        assert_eq!(registry.take_line(&identity(), 1), None);
    }

    #[test]
    fn a_line_sums_counts_keeps_values_and_the_highest_gauge() {
        let mut registry = Registry::new();
        registry.count("WidgetOk", 2);
        registry.count("WidgetOk", 3);
        registry.observe("WidgetLatency", Unit::Milliseconds, 12.0);
        registry.observe("WidgetLatency", Unit::Milliseconds, 7.5);
        registry.gauge("OutboxOldestDueAgeSeconds", Unit::Seconds, 4.0);
        registry.gauge("OutboxOldestDueAgeSeconds", Unit::Seconds, 9.0);
        registry.gauge("OutboxOldestDueAgeSeconds", Unit::Seconds, 1.0);
        let document = line(&mut registry);
        assert_valid_emf(&document);
        assert_eq!(document["WidgetOk"], 5);
        assert_eq!(document["WidgetLatency"], json!([12.0, 7.5]));
        assert_eq!(document["OutboxOldestDueAgeSeconds"], 9.0);
        assert_eq!(
            definitions(&document),
            [
                (
                    "OutboxOldestDueAgeSeconds".to_string(),
                    "Seconds".to_string()
                ),
                ("WidgetLatency".to_string(), "Milliseconds".to_string()),
                ("WidgetOk".to_string(), "Count".to_string()),
            ]
        );
    }

    #[test]
    fn the_line_names_the_function_and_the_invocation() {
        let mut registry = Registry::new();
        registry.count("ColdStart", 1);
        let document = line(&mut registry);
        assert_eq!(document["_aws"]["Timestamp"], 1_795_000_000_123u64);
        let directive = &document["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "K2BCloud");
        assert_eq!(directive["Dimensions"], json!([["FunctionName"]]));
        assert_eq!(document["FunctionName"], "k2b-widgets-AbC123");
        assert_eq!(document["Function"], "widgets");
        assert_eq!(document["requestId"], "8f3c-request");
        assert_eq!(document["traceId"], "1-5759e988-bd862e3fe1be46a994272793");
    }

    #[test]
    fn a_flush_starts_over() {
        let mut registry = Registry::new();
        registry.count("OutboxPublished", 4);
        line(&mut registry);
        assert_eq!(registry.take_line(&identity(), 2), None);
        registry.count("OutboxPublished", 1);
        assert_eq!(line(&mut registry)["OutboxPublished"], 1);
    }

    #[test]
    fn values_past_the_cap_are_dropped_and_counted() {
        let mut registry = Registry::new();
        for value in 0..(MAX_VALUES_PER_NAME + 7) {
            registry.observe("WidgetLatency", Unit::Milliseconds, value as f64);
        }
        let document = line(&mut registry);
        assert_valid_emf(&document);
        assert_eq!(
            document["WidgetLatency"].as_array().map(Vec::len),
            Some(MAX_VALUES_PER_NAME)
        );
        assert_eq!(document["WidgetLatencyDropped"], 7);
        assert!(definitions(&document).contains(&("WidgetLatencyDropped".into(), "Count".into())));
    }

    #[test]
    fn more_than_a_directive_of_names_spreads_over_directives() {
        // Names must be static: leak a fixed set once for this test.
        let names: Vec<&'static str> = (0..150)
            .map(|i| &*Box::leak(format!("Metric{i:03}").into_boxed_str()))
            .collect();
        let mut registry = Registry::new();
        for name in &names {
            registry.count(name, 1);
        }
        let document = line(&mut registry);
        assert_valid_emf(&document);
        let directives = document["_aws"]["CloudWatchMetrics"]
            .as_array()
            .expect("array");
        assert_eq!(directives.len(), 2);
        assert_eq!(definitions(&document).len(), 150);
    }

    #[test]
    fn names_are_bounded_and_properties_are_never_metrics() {
        let names: Vec<&'static str> = (0..MAX_NAMES + 10)
            .map(|i| &*Box::leak(format!("Name{i:04}").into_boxed_str()))
            .collect();
        let mut registry = Registry::new();
        for name in &names {
            registry.count(name, 1);
        }
        registry.count("Function", 1);
        registry.count("requestId", 1);
        let document = line(&mut registry);
        assert_eq!(definitions(&document).len(), MAX_NAMES);
        assert_eq!(document["Function"], "widgets");
        assert_eq!(document["requestId"], "8f3c-request");
    }

    #[test]
    fn a_name_keeps_its_first_kind_and_ignores_non_finite_values() {
        let mut registry = Registry::new();
        registry.count("Mixed", 1);
        registry.observe("Mixed", Unit::Milliseconds, 3.0);
        registry.gauge("Mixed", Unit::Seconds, 3.0);
        registry.observe("Latency", Unit::Milliseconds, f64::NAN);
        registry.gauge("Age", Unit::Seconds, f64::INFINITY);
        let document = line(&mut registry);
        assert_valid_emf(&document);
        assert_eq!(document["Mixed"], 1);
        assert!(document.get("Latency").is_none());
        assert!(document.get("Age").is_none());
    }

    #[test]
    fn a_line_without_an_invocation_still_names_the_function() {
        let mut registry = Registry::new();
        registry.count("IconRenders", 1);
        let identity = LineIdentity {
            invocation: None,
            ..identity()
        };
        let document: Value =
            serde_json::from_str(&registry.take_line(&identity, 5).expect("a line")).expect("JSON");
        assert_valid_emf(&document);
        assert!(document.get("requestId").is_none());
        assert_eq!(document["FunctionName"], "k2b-widgets-AbC123");
    }
}
