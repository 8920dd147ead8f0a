//! `k2b-local`: the whole system on one port, and the admin commands that make it easy to use.

mod admin;
mod demo;
mod openapi;
mod postgres;
mod serve;
mod shell;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use k2b_core::config::{Config, Mode, Needs};

#[derive(Parser)]
#[command(
    name = "k2b-local",
    version,
    about = "Run K2B Cloud locally and administer it"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve every function on one port (the default command).
    Serve {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:3000")]
        listen: SocketAddr,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Manage accounts.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Read and write installation settings.
    Setting {
        #[command(subcommand)]
        command: SettingCommand,
    },
    /// Manage the app registry and app credentials.
    App {
        #[command(subcommand)]
        command: AppCommand,
    },
    /// Issue sessions for manual testing.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Print the API's OpenAPI 3.1 document (JSON), as the runner serves it at
    /// `/api/openapi.json`. Needs no database.
    Openapi,
}

#[derive(Subcommand)]
enum SessionCommand {
    /// Issue a browser session for an account and print its cookie (`session_token=…`).
    Issue {
        /// The account's uid.
        #[arg(long)]
        user: String,
    },
}

#[derive(Subcommand)]
enum CredentialCommand {
    /// Issue a workload credential (`cld_…`) for an app and print it (shown only once).
    Issue { app_id: String },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create an account and print its id.
    Create {
        uid: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        mail: Option<String>,
        /// A local administrator.
        #[arg(long)]
        admin: bool,
        /// A guest rather than a full user.
        #[arg(long)]
        guest: bool,
        /// A FreeIPA account rather than a local one.
        #[arg(long)]
        ipa: bool,
    },
}

#[derive(Subcommand)]
enum SettingCommand {
    /// Store a value; `-` reads it from standard input (for values such as a logo data URI).
    Set { key: String, value: String },
    /// Print the current value.
    Get { key: String },
}

#[derive(Subcommand)]
enum AppCommand {
    /// Publish a registry entry from a JSON file (`-` for standard input).
    Register {
        file: PathBuf,
        /// How long the entry lives without renewal.
        #[arg(long, default_value_t = 180)]
        ttl_seconds: u64,
    },
    /// Manage an app's workload credentials.
    Credential {
        #[command(subcommand)]
        command: CredentialCommand,
    },
}

fn main() {
    // The icons are rendered in a child process of this same binary.
    icons::run_if_worker();
    // Like every function: the runner's environment is closed to other processes, its render
    // workers included.
    k2b_core::sandbox::forbid_inspection();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            std::process::exit(1);
        }
    };
    runtime.block_on(run());
}

async fn run() {
    let cli = Cli::parse();
    if let Some(Command::Openapi) = cli.command {
        if let Err(error) = openapi::print() {
            eprintln!("error: {error:#}");
            std::process::exit(1);
        }
        return;
    }
    let mut config = Config::from_env_or_exit(Mode::Local, Needs::ALL);
    k2b_core::telemetry::init(config.log_format);
    let database = match postgres::prepare(&mut config).await {
        Ok(database) => database,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::exit(1);
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve {
        listen: serve::DEFAULT_LISTEN,
    }) {
        Command::Serve { listen } => serve::run(config, listen).await,
        Command::Migrate => admin::migrate(config).await,
        Command::User {
            command:
                UserCommand::Create {
                    uid,
                    name,
                    mail,
                    admin,
                    guest,
                    ipa,
                },
        } => admin::create_user(config, uid, name, mail, admin, guest, ipa).await,
        Command::Setting {
            command: SettingCommand::Set { key, value },
        } => admin::set_setting(config, &key, &value).await,
        Command::Setting {
            command: SettingCommand::Get { key },
        } => admin::get_setting(config, &key).await,
        Command::App {
            command: AppCommand::Register { file, ttl_seconds },
        } => admin::register_app(config, &file, ttl_seconds).await,
        Command::App {
            command:
                AppCommand::Credential {
                    command: CredentialCommand::Issue { app_id },
                },
        } => admin::issue_app_credential(config, &app_id).await,
        Command::Session {
            command: SessionCommand::Issue { user },
        } => admin::issue_session(config, &user).await,
        Command::Openapi => openapi::print(),
    };
    database.stop().await;
    if let Err(error) = result {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}
