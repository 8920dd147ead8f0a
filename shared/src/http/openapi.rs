//! The parts of the API's OpenAPI 3.1 document every function shares — the error body, the
//! security schemes, the answers the front door gives on any route — and the assembly of the
//! functions' documents into one.
//!
//! Each function documents its own operations with `#[utoipa::path]` next to the handler and
//! `#[derive(ToSchema)]` on the serde types it reads and writes; `openapi()` in each function
//! crate collects them. [`document`] puts the parts together.

use std::collections::BTreeMap;

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr,
    ResponseBuilder,
};
use utoipa::{PartialSchema, ToSchema};

use crate::identity::session::{APP_SESSION_COOKIE, SESSION_COOKIE};

/// A browser session: the `session_token` cookie.
pub const SESSION: &str = "session";
/// An installed app's session: the `pwa_session` cookie.
pub const APP_SESSION: &str = "appSession";
/// An app's workload credential: `Authorization: Bearer cld_…`.
pub const APP_CREDENTIAL: &str = "appCredential";
/// An OAuth access token (a JWT of the identity service): `Authorization: Bearer …`.
pub const OAUTH: &str = "oauth";

/// The body of every answer that is not a success: a stable code, a fixed human-readable
/// message, and on some answers further fields (for example `attemptsLeft`).
#[derive(ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// A stable, machine-readable code, for example `INVALID_REQUEST` or `NOT_FOUND`.
    #[schema(min_length = 1, example = "INVALID_REQUEST")]
    pub code: String,
    /// A fixed message for people; never an internal error text or a request's content.
    #[schema(example = "The request is not valid.")]
    pub message: String,
}

/// The answers the front door may give on any route, whatever the handler: the request ran
/// past the route's time budget (503 `UNAVAILABLE`).
const FRONT_DOOR_ANSWERS: [(&str, &str); 1] = [(
    "503",
    "The service or one of its dependencies is unavailable, or the request ran past its time \
     budget.",
)];

/// The document's title.
pub const TITLE: &str = "K2B Cloud Functions";

/// One document from the functions' parts: their paths and schemas, the shared error body and
/// security schemes, and the front door's answers on every operation.
///
/// Fails when two parts document the same operation, or two different schemas under one name.
pub fn document(
    version: &str,
    parts: impl IntoIterator<Item = (&'static str, OpenApi)>,
) -> Result<OpenApi, String> {
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title(TITLE)
                .version(version)
                .description(Some(
                    "The platform services of K2B Cloud: registry, help, outgoing mail, \
                     pairing and app approval, widgets, branding icons and the installed \
                     app's manifest. Every answer that is not a success has the `Error` body.",
                ))
                .build(),
        )
        .build();
    let mut schemas: BTreeMap<String, (&'static str, String)> = BTreeMap::new();
    let mut operations: BTreeMap<(String, String), &'static str> = BTreeMap::new();
    for (name, part) in parts {
        for (path, item) in &part.paths.paths {
            for method in methods_of(item) {
                if let Some(other) = operations.insert((path.clone(), method.to_string()), name) {
                    return Err(format!(
                        "{method} {path} is documented by both {other} and {name}"
                    ));
                }
            }
        }
        if let Some(components) = &part.components {
            for (schema, body) in &components.schemas {
                let json = serde_json::to_string(body).map_err(|e| e.to_string())?;
                match schemas.get(schema) {
                    Some((other, known)) if *known != json => {
                        return Err(format!(
                            "schema {schema} differs between {other} and {name}"
                        ));
                    }
                    Some(_) => {}
                    None => {
                        schemas.insert(schema.clone(), (name, json));
                    }
                }
            }
        }
        doc.merge(part);
    }
    let components = ComponentsBuilder::new()
        .schema(ErrorBody::name(), ErrorBody::schema())
        .security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                SESSION_COOKIE,
                "A browser session of the platform's sign-in.",
            ))),
        )
        .security_scheme(
            APP_SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                APP_SESSION_COOKIE,
                "The session of a paired installed app (path `/`, HttpOnly).",
            ))),
        )
        .security_scheme(
            APP_CREDENTIAL,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("cld_")
                    .description(Some(
                        "An app's workload credential: `cld_` and 43 base64url characters, \
                         accepted only on the routes that name it.",
                    ))
                    .build(),
            ),
        )
        .security_scheme(
            OAUTH,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "An OAuth access token signed by the identity service (RS256), with \
                         the `read` or `admin` scope.",
                    ))
                    .build(),
            ),
        )
        .build();
    let into = doc.components.get_or_insert_with(Default::default);
    into.schemas.extend(components.schemas);
    into.security_schemes.extend(components.security_schemes);
    for item in doc.paths.paths.values_mut() {
        for operation in operations_of(item) {
            for (status, description) in FRONT_DOOR_ANSWERS {
                operation
                    .responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| error_response(description));
            }
        }
    }
    Ok(doc)
}

/// An answer with the `Error` body.
pub fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                    .build(),
            )
            .build(),
    )
}

/// Answers with the `Error` body, `(status, description)` each: the body of an
/// [`utoipa::IntoResponses`] set that many operations share.
pub fn error_responses(
    answers: &[(&str, &str)],
) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
    answers
        .iter()
        .map(|(status, description)| (status.to_string(), error_response(description)))
        .collect()
}

/// The methods a path item documents, lower case as in the document.
pub fn methods_of(item: &utoipa::openapi::PathItem) -> Vec<&'static str> {
    [
        ("get", item.get.is_some()),
        ("put", item.put.is_some()),
        ("post", item.post.is_some()),
        ("delete", item.delete.is_some()),
        ("options", item.options.is_some()),
        ("head", item.head.is_some()),
        ("patch", item.patch.is_some()),
        ("trace", item.trace.is_some()),
    ]
    .into_iter()
    .filter_map(|(method, present)| present.then_some(method))
    .collect()
}

/// The methods of a path item in the document's order, as written in a serialised document.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The security schemes an operation may name.
const SCHEMES: [&str; 4] = [SESSION, APP_SESSION, APP_CREDENTIAL, OAUTH];

/// One operation of a serialised document.
pub struct DocumentedOperation<'a> {
    /// The method in capitals, as a router's table writes it.
    pub method: String,
    /// The path as the document writes it (`/pwa/{part}`).
    pub path: &'a str,
    /// The operation object.
    pub operation: &'a serde_json::Value,
}

impl DocumentedOperation<'_> {
    /// `METHOD path`, for messages.
    pub fn name(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// Every operation of a serialised document (a whole one or a function's part), by path and
/// then in [`METHODS`] order.
pub fn documented_operations(document: &serde_json::Value) -> Vec<DocumentedOperation<'_>> {
    let Some(paths) = document["paths"].as_object() else {
        return Vec::new();
    };
    paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS.iter().filter_map(move |method| {
                Some(DocumentedOperation {
                    method: method.to_uppercase(),
                    path: path.as_str(),
                    operation: item.get(*method)?,
                })
            })
        })
        .collect()
}

/// What breaks the rules every operation of the contract keeps, one line per problem: an
/// `operationId` used once, one tag, a security requirement naming only the shared schemes,
/// at least one answer, and the `Error` body on every error answer that has a body.
/// Answers listed in `bodiless` (`("METHOD path", "status")`) must have no body at all: the
/// specs name a few empty error answers.
pub fn contract_problems(document: &serde_json::Value, bodiless: &[(&str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for operation in documented_operations(document) {
        let name = operation.name();
        let body = operation.operation;
        match body["operationId"].as_str() {
            Some(id) if ids.insert(id) => {}
            Some(id) => problems.push(format!("{name}: operationId {id} used twice")),
            None => problems.push(format!("{name}: no operationId")),
        }
        if body["tags"].as_array().map(Vec::len) != Some(1) {
            problems.push(format!("{name}: not exactly one tag"));
        }
        match body["security"].as_array() {
            Some(requirements) if !requirements.is_empty() => {
                for requirement in requirements {
                    match requirement.as_object() {
                        Some(schemes) => {
                            for scheme in schemes.keys() {
                                if !SCHEMES.contains(&scheme.as_str()) {
                                    problems.push(format!("{name}: unknown scheme {scheme}"));
                                }
                            }
                        }
                        None => problems
                            .push(format!("{name}: a security requirement is not an object")),
                    }
                }
            }
            _ => problems.push(format!("{name}: no security requirement")),
        }
        let Some(responses) = body["responses"].as_object() else {
            problems.push(format!("{name}: no answers"));
            continue;
        };
        if responses.is_empty() {
            problems.push(format!("{name}: no answers"));
        }
        for (status, response) in responses {
            if !status.starts_with('4') && !status.starts_with('5') {
                continue;
            }
            let empty = bodiless.contains(&(name.as_str(), status.as_str()));
            match (response.get("content"), empty) {
                (None, true) => {}
                (Some(_), true) => problems.push(format!("{name}: {status} must have no body")),
                (content, false) => {
                    let schema = content.map_or(&serde_json::Value::Null, |c| {
                        &c["application/json"]["schema"]["$ref"]
                    });
                    if schema != "#/components/schemas/Error" {
                        problems.push(format!("{name}: {status} without the Error body"));
                    }
                }
            }
        }
    }
    problems
}

fn operations_of(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.options.as_mut(),
        item.head.as_mut(),
        item.patch.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
    use utoipa::openapi::{ObjectBuilder, PathsBuilder};

    fn part(path: &str, method: HttpMethod, schema: Option<(&str, bool)>) -> OpenApi {
        let mut components = ComponentsBuilder::new();
        if let Some((name, nullable)) = schema {
            let object = if nullable {
                ObjectBuilder::new().description(Some("b")).build()
            } else {
                ObjectBuilder::new().description(Some("a")).build()
            };
            components = components.schema(name, object);
        }
        OpenApiBuilder::new()
            .paths(
                PathsBuilder::new()
                    .path(path, PathItem::new(method, OperationBuilder::new().build())),
            )
            .components(Some(components.build()))
            .build()
    }

    #[test]
    fn parts_become_one_document_with_the_shared_components() {
        let doc = document(
            "1.0.0",
            [
                ("a", part("/a", HttpMethod::Get, Some(("Thing", false)))),
                ("b", part("/a", HttpMethod::Post, Some(("Thing", false)))),
            ],
        )
        .expect("document");
        let json = serde_json::to_value(&doc).expect("json");
        assert_eq!(json["openapi"], "3.1.0");
        assert_eq!(json["info"]["title"], TITLE);
        assert!(json["paths"]["/a"]["get"].is_object());
        assert!(json["paths"]["/a"]["post"].is_object());
        assert_eq!(
            json["paths"]["/a"]["post"]["responses"]["503"]["content"]["application/json"]["schema"]
                ["$ref"],
            "#/components/schemas/Error"
        );
        let schemes = &json["components"]["securitySchemes"];
        assert_eq!(schemes[SESSION]["in"], "cookie");
        assert_eq!(schemes[SESSION]["name"], SESSION_COOKIE);
        assert_eq!(schemes[APP_SESSION]["name"], APP_SESSION_COOKIE);
        assert_eq!(schemes[APP_CREDENTIAL]["scheme"], "bearer");
        assert_eq!(
            json["components"]["schemas"]["Error"]["required"],
            serde_json::json!(["code", "message"])
        );
    }

    #[test]
    fn the_contract_rules_name_each_broken_operation() {
        let error = serde_json::json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
        let document = serde_json::json!({"paths": {
            "/a": {
                "get": {"operationId": "good", "tags": [], "security": [{"cookie": []}],
                    "responses": {"200": {}, "400": {"content": {"text/plain": {}}}}},
                "post": {"responses": {}}
            },
            "/b": {"get": {"operationId": "good", "tags": ["t"], "security": [{"session": []}],
                "responses": {"200": {}, "404": error, "403": {}}}}
        }});
        let names: Vec<String> = documented_operations(&document)
            .iter()
            .map(DocumentedOperation::name)
            .collect();
        assert_eq!(names, ["GET /a", "POST /a", "GET /b"]);
        assert_eq!(
            contract_problems(&document, &[("GET /b", "403")]),
            [
                "GET /a: not exactly one tag",
                "GET /a: unknown scheme cookie",
                "GET /a: 400 without the Error body",
                "POST /a: no operationId",
                "POST /a: not exactly one tag",
                "POST /a: no security requirement",
                "POST /a: no answers",
                "GET /b: operationId good used twice",
            ]
        );
        assert_eq!(
            contract_problems(&document, &[])
                .iter()
                .filter(|p| p.starts_with("GET /b"))
                .collect::<Vec<_>>(),
            [
                "GET /b: operationId good used twice",
                "GET /b: 403 without the Error body"
            ]
        );
        assert_eq!(
            contract_problems(&document, &[("GET /b", "404"), ("GET /b", "403")])
                .iter()
                .filter(|p| p.starts_with("GET /b"))
                .collect::<Vec<_>>(),
            [
                "GET /b: operationId good used twice",
                "GET /b: 404 must have no body"
            ]
        );
    }

    fn refusal(result: Result<OpenApi, String>) -> String {
        match result {
            Ok(_) => panic!("accepted"),
            Err(error) => error,
        }
    }

    #[test]
    fn an_operation_documented_twice_is_refused() {
        let error = refusal(document(
            "1.0.0",
            [
                ("a", part("/a", HttpMethod::Get, None)),
                ("b", part("/a", HttpMethod::Get, None)),
            ],
        ));
        assert_eq!(error, "get /a is documented by both a and b");
    }

    #[test]
    fn two_schemas_under_one_name_are_refused() {
        let error = refusal(document(
            "1.0.0",
            [
                ("a", part("/a", HttpMethod::Get, Some(("Thing", false)))),
                ("b", part("/b", HttpMethod::Get, Some(("Thing", true)))),
            ],
        ));
        assert_eq!(error, "schema Thing differs between a and b");
    }
}
