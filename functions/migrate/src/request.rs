//! The CloudFormation custom-resource protocol: the request CloudFormation sends the function and
//! the response document it expects back at the request's pre-signed `ResponseURL`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The physical id of the schema: one per database, stable across deploys, so an update is never
/// taken for a replacement (a changed id would make CloudFormation delete the "old" resource).
pub const PHYSICAL_RESOURCE_ID: &str = "k2b-schema";

/// The property the template sets to the migrate function's published version
/// (`!Ref MigrateFunction.Version`): it changes whenever the function's code does, so every
/// deploy that can carry new migrations updates the resource.
pub const VERSION_PROPERTY: &str = "MigrateFunctionVersion";

/// CloudFormation accepts a response document of at most 4096 bytes; the reason is cut well
/// below that so the ids beside it always fit.
const MAX_REASON_CHARS: usize = 1024;

/// What CloudFormation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum RequestType {
    Create,
    Update,
    Delete,
}

impl RequestType {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestType::Create => "Create",
            RequestType::Update => "Update",
            RequestType::Delete => "Delete",
        }
    }
}

/// A custom-resource request as CloudFormation sends it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResourceRequest {
    pub request_type: RequestType,
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub resource_type: String,
    pub logical_resource_id: String,
    /// The id this function answered before (Update and Delete only).
    #[serde(default)]
    pub physical_resource_id: Option<String>,
    #[serde(default)]
    pub resource_properties: Value,
    /// The properties before this change (Update only; on a rollback, the ones that failed).
    #[serde(default)]
    pub old_resource_properties: Option<Value>,
}

impl CustomResourceRequest {
    /// Whether this Update goes back to an earlier build of the migrate function: CloudFormation
    /// rolling a failed deploy back sends an Update whose properties are the previous ones.
    /// Lambda numbers published versions upwards and never reuses a number, so a requested
    /// version below the previous one can only be a rollback.
    pub fn is_rollback(&self) -> bool {
        if self.request_type != RequestType::Update {
            return false;
        }
        let requested = published_version(&self.resource_properties);
        let previous = self
            .old_resource_properties
            .as_ref()
            .and_then(published_version);
        matches!((requested, previous), (Some(requested), Some(previous)) if requested < previous)
    }
}

/// The version number at the end of a published version's ARN (`…:function:name:7`).
fn published_version(properties: &Value) -> Option<u64> {
    properties
        .get(VERSION_PROPERTY)?
        .as_str()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// What every answer needs, read from any request that names where to answer, even one that is
/// otherwise malformed (so it can still be answered `FAILED` rather than left to time out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    pub physical_resource_id: Option<String>,
}

impl Envelope {
    /// `None` when the event has no `ResponseURL`: nobody waits for an answer.
    pub fn read(event: &Value) -> Option<Envelope> {
        let text = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_string);
        Some(Envelope {
            response_url: text("ResponseURL").filter(|url| !url.is_empty())?,
            stack_id: text("StackId").unwrap_or_default(),
            request_id: text("RequestId").unwrap_or_default(),
            logical_resource_id: text("LogicalResourceId").unwrap_or_default(),
            physical_resource_id: text("PhysicalResourceId").filter(|id| !id.is_empty()),
        })
    }

    /// The answer to this request: the physical id it was given (Update, Delete), else the
    /// schema's own.
    pub fn answer(&self, status: Status, reason: &str, data: Option<SchemaData>) -> Response {
        Response {
            status,
            reason: cut(reason, MAX_REASON_CHARS),
            physical_resource_id: self
                .physical_resource_id
                .clone()
                .unwrap_or_else(|| PHYSICAL_RESOURCE_ID.to_string()),
            stack_id: self.stack_id.clone(),
            request_id: self.request_id.clone(),
            logical_resource_id: self.logical_resource_id.clone(),
            data,
        }
    }
}

/// The outcome CloudFormation reads: `FAILED` rolls the deploy back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Success,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Success => "SUCCESS",
            Status::Failed => "FAILED",
        }
    }
}

/// The resource's attributes (`!GetAtt SchemaMigration.Version`). CloudFormation hands
/// attribute values to templates as strings, so they are sent as strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct SchemaData {
    /// The newest migration applied now (empty when the binary carries none).
    pub version: String,
    /// How many migrations this request applied.
    pub applied: String,
}

/// The response document PUT to the request's `ResponseURL`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    pub status: Status,
    pub reason: String,
    pub physical_resource_id: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<SchemaData>,
}

/// `text` cut to at most `max` characters.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(requested: &str, previous: &str) -> CustomResourceRequest {
        serde_json::from_value(json!({
            "RequestType": "Update",
            "ResponseURL": "https://example.test/response",
            "StackId": "arn:aws:cloudformation:eu-central-1:123456789012:stack/k2b/1",
            "RequestId": "r-1",
            "ResourceType": "Custom::SchemaMigration",
            "LogicalResourceId": "SchemaMigration",
            "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
            "ResourceProperties": {VERSION_PROPERTY: requested},
            "OldResourceProperties": {VERSION_PROPERTY: previous},
        }))
        .expect("request")
    }

    #[test]
    fn only_an_update_to_an_earlier_version_is_a_rollback() {
        let arn = |n: u32| format!("arn:aws:lambda:eu-central-1:123456789012:function:migrate:{n}");
        assert!(update(&arn(6), &arn(7)).is_rollback());
        assert!(!update(&arn(8), &arn(7)).is_rollback());
        assert!(!update(&arn(7), &arn(7)).is_rollback());
        assert!(!update("not a version", &arn(7)).is_rollback());
    }

    #[test]
    fn a_long_reason_is_cut_so_the_response_fits() {
        let envelope = Envelope::read(&json!({"ResponseURL": "http://x"})).expect("envelope");
        let response = envelope.answer(Status::Failed, &"é".repeat(5000), None);
        assert_eq!(response.reason.chars().count(), MAX_REASON_CHARS + 1);
        assert_eq!(response.physical_resource_id, PHYSICAL_RESOURCE_ID);
        let document = serde_json::to_vec(&response).expect("json");
        assert!(document.len() < 4096, "{}", document.len());
    }

    #[test]
    fn an_event_without_a_response_url_has_no_envelope() {
        assert_eq!(Envelope::read(&json!({"RequestType": "Create"})), None);
        assert_eq!(Envelope::read(&json!({"ResponseURL": ""})), None);
    }
}
