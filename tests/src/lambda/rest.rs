//! REST API (v1) proxy events as API Gateway sends them to a function, and the function's
//! answer as API Gateway passes it on to the client.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::Deployment;

/// The API id of the emulated REST API (its execute-api host name starts with it).
pub const API_ID: &str = "k2btest42a";
/// The client address API Gateway reports.
pub const SOURCE_IP: &str = "198.51.100.7";
/// What a current desktop browser sends as its user agent.
pub const BROWSER_USER_AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";

/// The emulated REST API: its stage and binary media types come from the template.
#[derive(Debug, Clone)]
pub struct ApiGateway {
    pub stage: String,
    pub binary_media_types: Vec<String>,
}

impl ApiGateway {
    pub fn new(deployment: &Deployment) -> ApiGateway {
        ApiGateway {
            stage: deployment.stage.clone(),
            binary_media_types: deployment.binary_media_types.clone(),
        }
    }

    /// The API's host name (`<api>.execute-api.<region>.amazonaws.com`).
    pub fn host(&self) -> String {
        format!("{API_ID}.execute-api.eu-central-1.amazonaws.com")
    }

    /// The installation's URL as the stack's `ApiUrl` output names it.
    pub fn url(&self) -> String {
        format!("https://{}/{}", self.host(), self.stage)
    }

    /// The origin browsers send in `Origin`.
    pub fn origin(&self) -> String {
        format!("https://{}", self.host())
    }

    /// A request for `path` routed by the API resource `resource` (`/branding/{file}`).
    pub fn request(&self, method: &str, resource: &str, path: &str) -> RestRequest {
        RestRequest {
            gateway: self.clone(),
            method: method.to_string(),
            resource: resource.to_string(),
            path: path.to_string(),
            query: Vec::new(),
            headers: vec![
                ("Host".into(), self.host()),
                ("User-Agent".into(), BROWSER_USER_AGENT.into()),
                ("Accept-Encoding".into(), "gzip, deflate, br, zstd".into()),
                ("Accept-Language".into(), "en-US,en;q=0.9".into()),
                (
                    "X-Forwarded-For".into(),
                    format!("{SOURCE_IP}, 130.176.0.1"),
                ),
                ("X-Forwarded-Port".into(), "443".into()),
                ("X-Forwarded-Proto".into(), "https".into()),
                (
                    "X-Amzn-Trace-Id".into(),
                    "Root=1-674bd0e0-0123456789abcdef01234567".into(),
                ),
            ],
            body: None,
        }
    }

    /// Whether API Gateway treats `content_type` as binary.
    pub fn is_binary(&self, content_type: &str) -> bool {
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        self.binary_media_types.iter().any(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            pattern == "*/*"
                || pattern == mime
                || pattern
                    .strip_suffix("/*")
                    .is_some_and(|kind| mime.split('/').next() == Some(kind))
        })
    }

    /// The function's answer as the client receives it: headers merged, and a base64 body turned
    /// into bytes only when the request's first `Accept` type is a binary media type (else the
    /// client receives the base64 text).
    pub fn deliver(&self, request: &RestRequest, response: &Value) -> Delivered {
        let status = response["statusCode"].as_u64().unwrap_or(0) as u16;
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if let Some(map) = response["multiValueHeaders"].as_object() {
            for (name, values) in map {
                for value in values.as_array().into_iter().flatten() {
                    if let Some(value) = value.as_str() {
                        headers
                            .entry(name.to_ascii_lowercase())
                            .or_default()
                            .push(value.to_string());
                    }
                }
            }
        }
        if let Some(map) = response["headers"].as_object() {
            for (name, value) in map {
                if let Some(value) = value.as_str() {
                    headers
                        .entry(name.to_ascii_lowercase())
                        .or_default()
                        .push(value.to_string());
                }
            }
        }
        let is_base64_encoded = response["isBase64Encoded"].as_bool().unwrap_or(false);
        let text = response["body"].as_str().unwrap_or_default();
        let first_accept = request
            .header_value("accept")
            .and_then(|accept| accept.split(',').next())
            .unwrap_or("*/*")
            .to_string();
        let converted = is_base64_encoded && self.is_binary(&first_accept);
        let body = if converted {
            STANDARD
                .decode(text)
                .unwrap_or_else(|e| panic!("the function's base64 body does not decode: {e}"))
        } else {
            text.as_bytes().to_vec()
        };
        Delivered {
            status,
            headers,
            body,
            is_base64_encoded,
            converted_to_binary: converted,
        }
    }
}

/// One request through the API.
#[derive(Debug, Clone)]
pub struct RestRequest {
    gateway: ApiGateway,
    pub method: String,
    /// The API resource that routed it (`/branding/{file}`).
    pub resource: String,
    /// The request path (without the stage, as the execute-api URL has it after the stage).
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Option<(String, Vec<u8>)>,
}

impl RestRequest {
    /// Adds (or replaces) a header.
    pub fn header(mut self, name: &str, value: &str) -> RestRequest {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds a query parameter.
    pub fn query(mut self, name: &str, value: &str) -> RestRequest {
        self.query.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body with its content type.
    pub fn body(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> RestRequest {
        self.body = Some((content_type.to_string(), body.into()));
        self.header("Content-Type", content_type)
    }

    /// A header's value.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The event: `path` without the stage, `requestContext.stage` and `requestContext.path`
    /// with it, both header maps, both query maps, the path parameters of the resource, and the
    /// body base64-encoded when its content type is a binary media type.
    pub fn event(&self) -> Value {
        let mut headers = Map::new();
        let mut multi_headers = Map::new();
        for (name, value) in &self.headers {
            headers.insert(name.clone(), Value::String(value.clone()));
            if let Some(values) = multi_headers
                .entry(name.clone())
                .or_insert_with(|| Value::Array(Vec::new()))
                .as_array_mut()
            {
                values.push(Value::String(value.clone()));
            }
        }
        let (query, multi_query) = if self.query.is_empty() {
            (Value::Null, Value::Null)
        } else {
            let mut single = Map::new();
            let mut multi = Map::new();
            for (name, value) in &self.query {
                single.insert(name.clone(), Value::String(value.clone()));
                if let Some(values) = multi
                    .entry(name.clone())
                    .or_insert_with(|| Value::Array(Vec::new()))
                    .as_array_mut()
                {
                    values.push(Value::String(value.clone()));
                }
            }
            (Value::Object(single), Value::Object(multi))
        };
        let parameters = path_parameters(&self.resource, &self.path)
            .map(|p| json!(p))
            .unwrap_or(Value::Null);
        let (body, encoded) = match &self.body {
            None => (Value::Null, false),
            Some((content_type, bytes)) if self.gateway.is_binary(content_type) => {
                (Value::String(STANDARD.encode(bytes)), true)
            }
            Some((_, bytes)) => (
                Value::String(String::from_utf8_lossy(bytes).into_owned()),
                false,
            ),
        };
        let now = chrono::Utc::now();
        let request_id = uuid::Uuid::new_v4().to_string();
        json!({
            "resource": self.resource,
            "path": self.path,
            "httpMethod": self.method,
            "headers": headers,
            "multiValueHeaders": multi_headers,
            "queryStringParameters": query,
            "multiValueQueryStringParameters": multi_query,
            "pathParameters": parameters,
            "stageVariables": null,
            "requestContext": {
                "resourceId": "a1b2c3",
                "resourcePath": self.resource,
                "httpMethod": self.method,
                "extendedRequestId": "Bx1yZFz0FiAEd5A=",
                "requestTime": now.format("%d/%b/%Y:%H:%M:%S +0000").to_string(),
                "path": format!("/{}{}", self.gateway.stage, self.path),
                "accountId": "123456789012",
                "protocol": "HTTP/1.1",
                "stage": self.gateway.stage,
                "domainPrefix": API_ID,
                "requestTimeEpoch": now.timestamp_millis(),
                "requestId": request_id,
                "identity": {
                    "cognitoIdentityPoolId": null,
                    "accountId": null,
                    "cognitoIdentityId": null,
                    "caller": null,
                    "sourceIp": SOURCE_IP,
                    "principalOrgId": null,
                    "accessKey": null,
                    "cognitoAuthenticationType": null,
                    "cognitoAuthenticationProvider": null,
                    "userArn": null,
                    "userAgent": self.header_value("user-agent"),
                    "user": null
                },
                "domainName": self.gateway.host(),
                "apiId": API_ID
            },
            "body": body,
            "isBase64Encoded": encoded
        })
    }
}

/// A response as the client receives it.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub status: u16,
    /// Lower-case names.
    pub headers: BTreeMap<String, Vec<String>>,
    pub body: Vec<u8>,
    /// What the function said (`isBase64Encoded`).
    pub is_base64_encoded: bool,
    /// Whether API Gateway turned the body into bytes.
    pub converted_to_binary: bool,
}

impl Delivered {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .and_then(|values| values.first())
            .map(String::as_str)
    }

    /// The body as JSON, or a failed test.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// The path parameters API Gateway extracts for `resource` from `path` (`{name}` is one segment,
/// `{name+}` the rest); `None` when the path does not fit the resource.
pub fn path_parameters(resource: &str, path: &str) -> Option<BTreeMap<String, String>> {
    let mut parameters = BTreeMap::new();
    let mut segments = path.trim_start_matches('/').split('/');
    let mut template = resource.trim_start_matches('/').split('/').peekable();
    while let Some(expected) = template.next() {
        if let Some(name) = expected
            .strip_prefix('{')
            .and_then(|e| e.strip_suffix("+}"))
        {
            let rest: Vec<&str> = segments.by_ref().collect();
            if rest.is_empty() || rest.iter().all(|s| s.is_empty()) {
                return None;
            }
            parameters.insert(name.to_string(), rest.join("/"));
            return template.peek().is_none().then_some(parameters);
        }
        let segment = segments.next()?;
        match expected.strip_prefix('{').and_then(|e| e.strip_suffix('}')) {
            Some(name) if !segment.is_empty() => {
                parameters.insert(name.to_string(), segment.to_string());
            }
            Some(_) => return None,
            None if expected == segment => {}
            None => return None,
        }
    }
    segments.next().is_none().then_some(parameters)
}

/// Whether an API resource routes every request of an axum route pattern to its function:
/// literal segments equal, `{x}` takes any one segment, `{x+}` one or more.
pub fn resource_covers(resource: &str, route: &str) -> bool {
    let mut route_segments = route.trim_start_matches('/').split('/');
    for expected in resource.trim_start_matches('/').split('/') {
        if expected.starts_with('{') && expected.ends_with("+}") {
            return route_segments.next().is_some();
        }
        let Some(segment) = route_segments.next() else {
            return false;
        };
        let is_parameter = expected.starts_with('{') && expected.ends_with('}');
        let route_is_parameter = segment.starts_with('{') && segment.ends_with('}');
        if !is_parameter && (route_is_parameter || expected != segment) {
            return false;
        }
    }
    route_segments.next().is_none()
}

/// A concrete path for an axum route pattern, each `{parameter}` replaced by `value(name)`.
pub fn concrete_path(route: &str, value: impl Fn(&str) -> String) -> String {
    route
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => value(name),
                None => segment.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_follow_the_resource() {
        let p = path_parameters("/branding/{file}", "/branding/a.png").expect("fits");
        assert_eq!(p["file"], "a.png");
        let p = path_parameters("/pwa/_auth/{proxy+}", "/pwa/_auth/session/renew").expect("fits");
        assert_eq!(p["proxy"], "session/renew");
        assert!(path_parameters("/pwa/_auth/{proxy+}", "/pwa/_auth").is_none());
        assert!(path_parameters("/branding/{file}", "/branding/a/b").is_none());
        assert!(path_parameters("/a", "/b").is_none());
        assert_eq!(path_parameters("/a", "/a"), Some(BTreeMap::new()));
    }

    #[test]
    fn resources_cover_routes() {
        assert!(resource_covers("/pwa/_auth/{proxy+}", "/pwa/_auth/session"));
        assert!(!resource_covers("/pwa/_auth/{proxy+}", "/pwa/_auth"));
        assert!(resource_covers("/branding/{file}", "/branding/{file}"));
        assert!(resource_covers(
            "/api/widgets/v1/{appId}/{widgetId}",
            "/api/widgets/v1/{app_id}/{widget_id}"
        ));
        assert!(!resource_covers(
            "/api/widgets/v1",
            "/api/widgets/v1/{app_id}/{widget_id}"
        ));
        assert!(!resource_covers("/a/b", "/a/{id}"));
    }

    #[test]
    fn binary_types_match_like_api_gateway() {
        let gateway = ApiGateway {
            stage: "live".into(),
            binary_media_types: vec!["image/*".into()],
        };
        assert!(gateway.is_binary("image/avif"));
        assert!(!gateway.is_binary("text/html"));
        let everything = ApiGateway {
            stage: "live".into(),
            binary_media_types: vec!["*/*".into()],
        };
        assert!(everything.is_binary("application/json; charset=utf-8"));
    }
}
