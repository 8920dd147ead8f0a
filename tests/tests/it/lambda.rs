//! What ships, answering what its front doors send: every function's real binary under the
//! emulated Lambda Runtime API, with the template's environment and nothing else, fed REST API
//! (v1) events of stage `live` for every route of `template.yaml`, the widget stream in the
//! streaming mode, SQS batches, EventBridge schedules and CloudFormation's custom-resource
//! requests.

mod admin;
mod bodies;
mod deadlines;
mod events;
mod help_api;
mod mail_api;
mod mail_delivery;
mod metrics;
pub(crate) mod routes;
mod schema_migration;
mod startup;
mod stream;

use k2b_core::Core;
use k2b_core::config::Needs;
use k2b_core::http::routes::Route;

pub use k2b_tests::lambda::stack::Stack;

/// What each function's crate says it holds, by the binary the template builds.
pub fn needs_of(binary: &str) -> Needs {
    match binary {
        "registry" => registry::FUNCTION.needs,
        "icons" => icons::FUNCTION.needs,
        "manifest" => manifest::FUNCTION.needs,
        "approvals" => approvals::FUNCTION.needs,
        "widgets" => widgets::FUNCTION.needs,
        "help" => help::FUNCTION.needs,
        "mail" => mail::FUNCTION.needs,
        "outbox" => outbox::FUNCTION.needs,
        "keys" => keys::FUNCTION.needs,
        "maintenance" => maintenance::FUNCTION.needs,
        "admin" => ::admin::NEEDS,
        "migrate" => migrate::FUNCTION.needs,
        other => panic!("a function of the template without a crate here: {other}"),
    }
}

/// The routes an HTTP function's router serves (`None` for event functions).
pub fn routes_of(binary: &str, core: &Core) -> Option<Vec<Route>> {
    let core = core.clone();
    let table = match binary {
        "registry" => registry::routes(core).table().to_vec(),
        "icons" => icons::routes(core).table().to_vec(),
        "manifest" => manifest::routes(core).table().to_vec(),
        "approvals" => approvals::routes(core).table().to_vec(),
        "widgets" => widgets::routes(core).table().to_vec(),
        "help" => help::routes(core).table().to_vec(),
        "mail" => mail::routes(core).table().to_vec(),
        "outbox" | "keys" | "maintenance" | "admin" | "migrate" => return None,
        other => panic!("a function of the template without a crate here: {other}"),
    };
    Some(table)
}
