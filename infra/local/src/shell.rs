//! The demo shell: plain pages the runner serves so that a newcomer can try every browser side
//! of the bundle — the start page, the installed app's page (`/pwa/`, the phone side of
//! pairing), the web side of pairing with its QR code, and a dashboard that draws the widget
//! stream as it arrives. No build step and no framework; none of it ships in a function.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use k2b_core::Core;
use k2b_core::access::CurrentActor;
use k2b_core::http::ApiError;
use k2b_core::http::cookies::SetCookie;
use k2b_core::http::routes::Routes;
use k2b_core::http::text::escape_html;
use k2b_core::identity::session::SESSION_COOKIE;

use crate::{admin, demo};

const START: &str = include_str!("../shell/start.html");
const PWA: &str = include_str!("../shell/pwa.html");
const PAIR: &str = include_str!("../shell/pair.html");
const DASHBOARD: &str = include_str!("../shell/dashboard.html");
const CSS: &str = include_str!("../shell/shell.css");
const COMMON_JS: &str = include_str!("../shell/common.js");
const PHONE_JS: &str = include_str!("../shell/phone.js");
const PAIR_JS: &str = include_str!("../shell/pair.js");
const DASHBOARD_JS: &str = include_str!("../shell/dashboard.js");

/// The sign-in shortcut's path (a runner route: loopback only).
pub const SIGN_IN_PATH: &str = "/_local/sign-in";
/// The longest text the QR route encodes (a pairing link is about 70 characters).
pub const MAX_QR_TEXT: usize = 1024;

/// The shell's pages and assets.
pub fn routes() -> Routes<Core> {
    Routes::new()
        .get("/", start_page)
        .get("/pwa/", pwa_page)
        .get("/shell/pair", pair_page)
        .get("/shell/dashboard", dashboard_page)
        .get("/shell/shell.css", || async {
            asset(CSS, "text/css; charset=utf-8")
        })
        .get("/shell/common.js", || async {
            asset(COMMON_JS, JAVASCRIPT)
        })
        .get("/shell/phone.js", || async { asset(PHONE_JS, JAVASCRIPT) })
        .get("/shell/pair.js", || async { asset(PAIR_JS, JAVASCRIPT) })
        .get("/shell/dashboard.js", || async {
            asset(DASHBOARD_JS, JAVASCRIPT)
        })
        .post("/shell/qr", qr_code)
}

/// The sign-in shortcut for the seeded administrator (merged behind the loopback guard).
pub fn local_routes() -> Routes<Core> {
    Routes::new().post(SIGN_IN_PATH, sign_in)
}

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `template` with each `{{name}}` replaced by its value (values are HTML already).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    values
        .iter()
        .fold(template.to_string(), |page, (name, value)| {
            page.replace(&format!("{{{{{name}}}}}"), value)
        })
}

fn page(body: String) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    response
}

fn unavailable(error: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %error, "shell page: settings unavailable");
    ApiError::unavailable("The installation's settings cannot be read right now.").into_response()
}

async fn installation_name(core: &Core) -> Result<String, Response> {
    match core.settings.app_name().await {
        Ok(name) if !name.trim().is_empty() => Ok(escape_html(&name)),
        Ok(_) => Ok("Cloud".into()),
        Err(error) => Err(unavailable(error)),
    }
}

async fn start_page(State(core): State<Core>, CurrentActor(actor): CurrentActor) -> Response {
    let name = match installation_name(&core).await {
        Ok(name) => name,
        Err(response) => return response,
    };
    let account = match actor.person() {
        Some(person) => format!(
            "Signed in as <strong id=\"signed-in\">{}</strong>.",
            escape_html(person.display_name.as_deref().unwrap_or(&person.uid))
        ),
        None => "Not signed in.".to_string(),
    };
    let sign_in = if core.config.mode.is_local() {
        format!(
            "<form method=\"post\" action=\"{SIGN_IN_PATH}\"><button id=\"sign-in\" type=\"submit\">Sign in as the local admin (<code>{}</code>)</button></form>",
            escape_html(demo::ADMIN_UID)
        )
    } else {
        String::new()
    };
    page(fill(
        START,
        &[
            ("name", &name),
            ("account", &account),
            ("sign_in", &sign_in),
        ],
    ))
}

async fn pwa_page(State(core): State<Core>) -> Response {
    let name = match installation_name(&core).await {
        Ok(name) => name,
        Err(response) => return response,
    };
    let version = match core.app_icon_source().await {
        Ok(source) => escape_html(&source.version),
        Err(error) => return unavailable(error),
    };
    page(fill(PWA, &[("name", &name), ("version", &version)]))
}

async fn pair_page(State(core): State<Core>) -> Response {
    match installation_name(&core).await {
        Ok(name) => page(fill(PAIR, &[("name", &name)])),
        Err(response) => response,
    }
}

async fn dashboard_page(State(core): State<Core>) -> Response {
    match installation_name(&core).await {
        Ok(name) => page(fill(DASHBOARD, &[("name", &name)])),
        Err(response) => response,
    }
}

/// `POST /shell/qr`: the body's text (a pairing link) as a QR code in SVG.
async fn qr_code(body: Bytes) -> Response {
    if body.is_empty() || body.len() > MAX_QR_TEXT {
        return ApiError::bad_request(format!(
            "The text to encode must be 1 to {MAX_QR_TEXT} bytes."
        ))
        .into_response();
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return ApiError::bad_request("The text to encode must be UTF-8.").into_response();
    };
    match qr_svg(text) {
        Ok(svg) => (
            [
                (header::CONTENT_TYPE, "image/svg+xml"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            svg,
        )
            .into_response(),
        Err(error) => {
            ApiError::bad_request(format!("The text cannot be encoded: {error}.")).into_response()
        }
    }
}

/// `text` as a QR code (error correction M), drawn as SVG with a quiet zone.
pub fn qr_svg(text: &str) -> Result<String, qrcode::types::QrError> {
    let code = qrcode::QrCode::with_error_correction_level(text, qrcode::EcLevel::M)?;
    Ok(code
        .render::<qrcode::render::svg::Color>()
        .min_dimensions(220, 220)
        .quiet_zone(true)
        .build())
}

/// `POST /_local/sign-in`: a web session for the seeded administrator, then the start page.
async fn sign_in(State(core): State<Core>, headers: HeaderMap) -> Response {
    if !core.config.mode.is_local() {
        return ApiError::forbidden("The sign-in shortcut exists only in local mode.")
            .into_response();
    }
    let issued = admin::web_session(&core, demo::ADMIN_UID).await;
    let session = match issued {
        Ok(session) => session,
        Err(error) => {
            tracing::warn!(error = %error, "sign-in shortcut failed");
            return ApiError::unavailable("The session cannot be issued right now.")
                .into_response();
        }
    };
    let max_age = (session.expires_at - chrono::Utc::now())
        .num_seconds()
        .max(1);
    let mut response = Redirect::to(back_to(&headers)).into_response();
    *response.status_mut() = StatusCode::SEE_OTHER;
    SetCookie::new(SESSION_COOKIE, session.token, max_age)
        .secure(false)
        .append_to(response.headers_mut());
    response
}

/// Where the shortcut returns to: the page that sent the form when it is one of the shell's,
/// else the start page.
fn back_to(headers: &HeaderMap) -> &'static str {
    let referer = headers
        .get(header::REFERER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    ["/shell/pair", "/shell/dashboard"]
        .into_iter()
        .find(|path| referer.ends_with(path))
        .unwrap_or("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_nothing_else_changes() {
        let page = fill(
            "<title>{{name}}</title>{{name}} {{other}}",
            &[("name", "A &amp; B")],
        );
        assert_eq!(page, "<title>A &amp; B</title>A &amp; B {{other}}");
    }

    #[test]
    fn every_template_placeholder_is_one_the_pages_fill() {
        for (template, names) in [
            (START, &["name", "account", "sign_in"][..]),
            (PWA, &["name", "version"][..]),
            (PAIR, &["name"][..]),
            (DASHBOARD, &["name"][..]),
        ] {
            let values: Vec<(&str, &str)> = names.iter().map(|name| (*name, "x")).collect();
            let filled = fill(template, &values);
            assert!(!filled.contains("{{"), "{filled}");
        }
    }

    #[test]
    fn a_pairing_link_becomes_an_svg_qr_code() {
        let link = "http://127.0.0.1:3000/pwa/#pair=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let svg = qr_svg(link).expect("encodes");
        assert!(svg.starts_with("<?xml"), "{svg}");
        assert!(svg.contains("<svg") && svg.contains("<path"), "{svg}");
        // The same text always draws the same code; another text draws another.
        assert_eq!(svg, qr_svg(link).expect("encodes"));
        assert_ne!(svg, qr_svg("http://127.0.0.1:3000/pwa/").expect("encodes"));
        assert!(
            qr_svg(&"x".repeat(8000)).is_err(),
            "too long for any QR code"
        );
    }

    #[test]
    fn the_shortcut_returns_only_to_the_shells_pages() {
        let mut headers = HeaderMap::new();
        assert_eq!(back_to(&headers), "/");
        headers.insert(
            header::REFERER,
            HeaderValue::from_static("http://127.0.0.1:3000/shell/pair"),
        );
        assert_eq!(back_to(&headers), "/shell/pair");
        headers.insert(
            header::REFERER,
            HeaderValue::from_static("https://evil.example/x"),
        );
        assert_eq!(back_to(&headers), "/");
    }
}
