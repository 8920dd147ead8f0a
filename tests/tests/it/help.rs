//! Help against a real Postgres: the store and the reader as apps and Core use them, and the
//! `help` function over real HTTP.

mod publishing;
mod reading;
mod routes;

use k2b_core::Core;
use k2b_core::auth::{AuthUser, Profile, Provider, UserRecord, build_roles};
use k2b_core::help::reader::HelpReader;
use k2b_core::help::{CompiledHelp, compile_help, define_localized_help};
use k2b_core::registry::entry::HelpSummary;
use k2b_core::registry::{APP_REGISTRY_TTL, store};
use k2b_tests::{TestDb, core_for, create_account};
use serde_json::{Value, json};

/// The app of the store scenarios.
pub const APP: &str = "help-integration";

/// A Help source with front matter.
pub fn source(id: &str, title: &str, extra: &str, body: &str) -> String {
    format!("---\nid: {id}\ntitle: {title}\n{extra}---\n{body}\n")
}

/// The store scenarios' corpus: four English documents (one untranslated, one with a technical
/// title, one long) and a German translation of `permissions`.
pub fn inventory_help() -> CompiledHelp {
    let long_body = "Background context. ".repeat(5500);
    let en = [
        source(
            "permissions",
            "Permissions",
            "order: 10\n",
            "Editors can update inventory records.",
        ),
        source(
            "fallback",
            "Fallback",
            "order: 20\n",
            "A rare untranslated narwhal.",
        ),
        source(
            "technical",
            "example.ui.modal.dialog",
            "order: 30\n",
            "The dialog component.",
        ),
        source("long", "Long", "order: 40\n", &long_body),
    ];
    let de = [source(
        "permissions",
        "Berechtigungen",
        "",
        "Redakteure können Datensätze ändern. Formulare erstellen und bearbeiten.",
    )];
    let en: Vec<&str> = en.iter().map(String::as_str).collect();
    let de: Vec<&str> = de.iter().map(String::as_str).collect();
    let definition = define_localized_help("en", &[("en", en), ("de", de)]).expect("definition");
    compile_help(APP, Some("/app/inventory/"), &definition).expect("compile")
}

/// A registry entry for `id` advertising `help` (when given), with `nav` (when given).
pub fn entry(id: &str, name: &str, help: Option<&HelpSummary>, nav: Option<Value>) -> Value {
    let mut entry = json!({
        "id": id, "name": name, "icon": "ti ti-box", "description": format!("The {name} app"),
        "baseUrl": format!("http://{id}:3000"), "routes": [format!("/app/{id}")]
    });
    if let Some(help) = help {
        entry["help"] = serde_json::to_value(help).expect("summary");
    }
    if let Some(nav) = nav {
        entry["nav"] = nav;
    }
    entry
}

/// Advertises `entry` in the registry.
pub async fn advertise(core: &Core, entry: &Value) {
    let mut conn = core.pool.acquire().await.expect("connection");
    store::upsert(&mut conn, entry, APP_REGISTRY_TTL)
        .await
        .expect("advertise");
}

/// The document rows stored for `(app, hash)`.
pub async fn document_rows(core: &Core, app: &str, hash: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM help.documents WHERE app_id = $1 AND manifest_hash = $2",
    )
    .bind(app)
    .bind(hash)
    .fetch_one(&core.pool)
    .await
    .expect("count")
}

/// The corpora rows stored for `app`.
pub async fn corpora_rows(core: &Core, app: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM help.corpora WHERE app_id = $1")
        .bind(app)
        .fetch_one(&core.pool)
        .await
        .expect("count")
}

/// A database, its Core, and a signed-in local person of each kind.
pub struct HelpDb {
    pub _db: TestDb,
    pub core: Core,
    pub user: UserRecord,
}

impl HelpDb {
    pub async fn new() -> HelpDb {
        let db = TestDb::new().await;
        let core = core_for(&db);
        let user = create_account(&core, "ada", Provider::Local, Profile::User, false).await;
        HelpDb {
            _db: db,
            core,
            user,
        }
    }

    /// The test user as a viewer.
    pub fn viewer(&self) -> AuthUser {
        person(&self.user, false)
    }

    /// A reader of the test user in `locale`.
    pub async fn reader(&self, locale: &str) -> HelpReader {
        HelpReader::new(&self.core.pool, locale, Some(&self.viewer()), None)
            .await
            .expect("reader")
    }

    /// Publishes and advertises the inventory corpus; returns it.
    pub async fn inventory(&self) -> CompiledHelp {
        let help = inventory_help();
        k2b_core::help::store::register(&self.core.pool, &help.corpus)
            .await
            .expect("register");
        advertise(
            &self.core,
            &entry(APP, "Inventory", Some(&help.summary), None),
        )
        .await;
        help
    }

    /// A browser session cookie of `user`.
    pub async fn cookie(&self, user: &UserRecord) -> String {
        k2b_tests::session_cookie(&self.core, user).await
    }
}

/// `record` as a viewer with the roles its profile (and `admin`) give.
pub fn person(record: &UserRecord, admin: bool) -> AuthUser {
    AuthUser::from_record(
        record,
        build_roles(record.provider(), record.profile(), admin, false),
    )
}
