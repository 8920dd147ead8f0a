//! A small HTTP client for the tests: a router served on loopback (or any base URL), the
//! credentials a caller presents, and answers read whole, so a test states only its behaviour.

use serde_json::Value;

/// A caller of one server: a base URL and the credentials it sends on every request.
#[derive(Clone)]
pub struct TestClient {
    base: String,
    http: reqwest::Client,
    cookie: Option<String>,
    bearer: Option<String>,
    headers: Vec<(String, String)>,
}

/// An answer: status, headers and the body (as JSON when it is JSON, else `Null`).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Reply {
    /// The error code of a standard error body (`{"code": …, "message": …}`).
    pub fn code(&self) -> &str {
        self.json["code"].as_str().unwrap_or_default()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl TestClient {
    /// Serves `router` on a free loopback port and calls it.
    pub async fn serve(router: axum::Router) -> TestClient {
        TestClient::at(crate::serve(router).await)
    }

    /// Calls the server at `base` (no trailing slash).
    pub fn at(base: impl Into<String>) -> TestClient {
        TestClient {
            base: base.into(),
            http: reqwest::Client::new(),
            cookie: None,
            bearer: None,
            headers: Vec::new(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same server, sending `cookie` (`name=value`).
    pub fn with_cookie(&self, cookie: impl Into<String>) -> TestClient {
        TestClient {
            cookie: Some(cookie.into()),
            ..self.clone()
        }
    }

    /// The same server, sending `Authorization: Bearer <token>`.
    pub fn with_bearer(&self, token: impl Into<String>) -> TestClient {
        TestClient {
            bearer: Some(token.into()),
            ..self.clone()
        }
    }

    /// The same server, sending one more header.
    pub fn with_header(&self, name: &str, value: impl Into<String>) -> TestClient {
        let mut client = self.clone();
        client.headers.push((name.to_string(), value.into()));
        client
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header("cookie", cookie);
        }
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    async fn send(request: reqwest::RequestBuilder) -> Reply {
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("request: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("body: {e}"));
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            text,
            json,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        TestClient::send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        TestClient::send(self.request(reqwest::Method::POST, path).json(body)).await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Reply {
        TestClient::send(self.request(reqwest::Method::PUT, path).json(body)).await
    }
}
