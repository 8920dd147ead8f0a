//! A router that knows its own routes.
//!
//! Every function builds its axum router through [`Routes`], which records each method and path
//! it serves. The table is what the deployment is checked against: every route a router serves
//! must be a route of `template.yaml` (same method, same path), so a handler added without its
//! API Gateway route — or the other way round — fails the tests instead of answering 404 in
//! production.

use std::convert::Infallible;

use axum::Router;
use axum::extract::Request;
use axum::handler::Handler;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, Route as AxumRoute, delete, get, options, patch, post, put};
use http::Method;
use tower::{Layer, Service};

use super::ApiError;

/// The error code of a request no route matches. Handlers answer `NOT_FOUND` for things that do
/// not exist; this code means the request never reached a handler.
pub const ROUTE_NOT_FOUND: &str = "ROUTE_NOT_FOUND";

/// The header that says which app answered. The platform itself sends `core` with
/// `ROUTE_NOT_FOUND` (and API Gateway does, through the template's gateway response for a path
/// with no route): the installed app's service worker shows its offline document for such an
/// answer to a navigation, since the part it asked for is not deployed or not running.
pub const GATEWAY_APP_HEADER: &str = "x-gateway-app";
/// The app id the platform answers as.
pub const GATEWAY_APP_CORE: &str = "core";

/// One route a router serves: a method and an axum path (`/a/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    pub method: Method,
    pub path: &'static str,
}

/// An axum router and the table of its routes, built together.
pub struct Routes<S = ()> {
    router: Router<S>,
    table: Vec<Route>,
}

impl<S: Clone + Send + Sync + 'static> Default for Routes<S> {
    fn default() -> Self {
        Routes::new()
    }
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    pub fn new() -> Routes<S> {
        Routes {
            router: Router::new(),
            table: Vec::new(),
        }
    }

    fn add(mut self, path: &'static str, methods: &[Method], service: MethodRouter<S>) -> Self {
        self.router = self.router.route(path, service);
        self.table.extend(methods.iter().map(|method| Route {
            method: method.clone(),
            path,
        }));
        self
    }

    /// `GET path` (axum answers `HEAD` from it too, which only a route declared with
    /// [`Routes::get_and_head`] receives through the API).
    pub fn get<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::GET], get(handler))
    }

    /// `GET path` and `HEAD path`, both routed by the API.
    pub fn get_and_head<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::GET, Method::HEAD], get(handler))
    }

    pub fn post<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::POST], post(handler))
    }

    pub fn put<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::PUT], put(handler))
    }

    pub fn patch<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::PATCH], patch(handler))
    }

    /// `OPTIONS path` (a CORS preflight).
    pub fn options<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::OPTIONS], options(handler))
    }

    pub fn delete<H, T>(self, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        self.add(path, &[Method::DELETE], delete(handler))
    }

    /// Both routers' routes.
    pub fn merge(mut self, other: Routes<S>) -> Self {
        self.router = self.router.merge(other.router);
        self.table.extend(other.table);
        self
    }

    /// A layer around every route so far (see [`Router::layer`]).
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<AxumRoute> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.router = self.router.layer(layer);
        self
    }

    /// Changes the router without adding routes (fallbacks for known paths, for example).
    pub fn map_router(mut self, change: impl FnOnce(Router<S>) -> Router<S>) -> Self {
        self.router = change(self.router);
        self
    }

    /// Provides the state; the table stays.
    pub fn with_state<S2>(self, state: S) -> Routes<S2> {
        Routes {
            router: self.router.with_state(state),
            table: self.table,
        }
    }

    /// The routes, in the order they were added.
    pub fn table(&self) -> &[Route] {
        &self.table
    }
}

impl Routes<()> {
    /// The router, with the JSON `ROUTE_NOT_FOUND` answer for anything no route matches.
    pub fn into_router(self) -> Router {
        self.router.fallback(route_not_found)
    }
}

/// 404 for a request no route matches, answered as the platform (`X-Gateway-App: core`).
pub async fn route_not_found() -> Response {
    let mut response = ApiError::new(
        http::StatusCode::NOT_FOUND,
        ROUTE_NOT_FOUND,
        "No route matches this request.",
    )
    .into_response();
    response.headers_mut().insert(
        GATEWAY_APP_HEADER,
        http::HeaderValue::from_static(GATEWAY_APP_CORE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn ok() -> &'static str {
        "ok"
    }

    #[test]
    fn the_table_lists_every_method_and_path_added() {
        let routes: Routes = Routes::new()
            .get("/a", ok)
            .get_and_head("/b/{file}", ok)
            .merge(Routes::new().post("/c", ok).delete("/c", ok));
        let table: Vec<(Method, &str)> = routes
            .table()
            .iter()
            .map(|r| (r.method.clone(), r.path))
            .collect();
        assert_eq!(
            table,
            vec![
                (Method::GET, "/a"),
                (Method::GET, "/b/{file}"),
                (Method::HEAD, "/b/{file}"),
                (Method::POST, "/c"),
                (Method::DELETE, "/c"),
            ]
        );
    }

    #[tokio::test]
    async fn an_unknown_path_gets_the_route_not_found_code() {
        let router = Routes::new().get("/a", ok).into_router();
        let response = router
            .oneshot(
                Request::builder()
                    .uri("/nowhere")
                    .body(axum::body::Body::empty())
                    .expect("request"),
            )
            .await
            .expect("infallible");
        assert_eq!(response.status(), 404);
        assert_eq!(
            response
                .headers()
                .get(GATEWAY_APP_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some(GATEWAY_APP_CORE)
        );
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(json["code"], ROUTE_NOT_FOUND);
    }
}
