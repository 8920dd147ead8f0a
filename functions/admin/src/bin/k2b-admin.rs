//! `k2b-admin`: the operator's command line. It reads the production configuration from the
//! environment (`K2B_ENV` defaults to `production`; the variables are the functions' own) and
//! runs one command. Exit status: 0 done, 1 the command failed (a doctor check, an unknown
//! key), 2 bad usage or configuration.

use std::io::Read;
use std::process::ExitCode;

use admin::{Command, SettingsCommand};
use k2b_core::Core;
use k2b_core::config::{Config, Mode};

fn main() -> ExitCode {
    // Help and version print and exit 0; bad usage prints clap's message and exits 2.
    let cli = admin::parse(std::env::args_os().skip(1)).unwrap_or_else(|error| error.exit());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run(cli))
}

async fn run(cli: admin::Cli) -> ExitCode {
    let needs = admin::needs_of(&cli.command, |name| {
        std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
    });
    let config = match Config::from_env_for(Mode::Production, needs) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("configuration error: {error}");
            return ExitCode::from(2);
        }
    };
    k2b_core::telemetry::init(k2b_core::config::LogFormat::Pretty);
    let mut command = cli.command;
    if let Command::Settings {
        command: SettingsCommand::Set { value, .. },
    } = &mut command
        && value == "-"
    {
        let mut input = String::new();
        if let Err(error) = std::io::stdin().read_to_string(&mut input) {
            eprintln!("error: cannot read the value from standard input: {error}");
            return ExitCode::from(2);
        }
        *value = input.trim_end_matches(['\r', '\n']).to_string();
    }
    let core = match Core::new(config) {
        Ok(core) => core,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    match admin::execute(&core, command).await {
        Ok(outcome) => {
            if cli.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&outcome.value).unwrap_or_default()
                );
            } else {
                for line in &outcome.lines {
                    println!("{line}");
                }
            }
            if outcome.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(admin::AdminError::Usage(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(1)
        }
    }
}
