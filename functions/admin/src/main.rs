//! The `admin` function: the operator commands inside the VPC, for `aws lambda invoke`.
//!
//! The payload names the command as its words, `{"command": ["keys", "revoke", "<kid>",
//! "--reason", "leaked"]}` (a single string is split at spaces); the answer is `{"ok", "output",
//! "result"}` — the lines the command line prints, and the same value its `--json` prints. A
//! command that could not run (bad words, an unreachable database) fails the invocation with
//! the reason.

use admin::{AdminError, NEEDS};
use k2b_core::lambda::{Error, Function, serve_events};
use serde_json::{Value, json};

const FUNCTION: Function = Function {
    name: "admin",
    needs: NEEDS,
};

fn words(payload: &Value) -> Result<Vec<String>, Error> {
    match payload.get("command") {
        Some(Value::Array(words)) => words
            .iter()
            .map(|w| {
                w.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::from("every word of `command` must be a string"))
            })
            .collect(),
        Some(Value::String(line)) => Ok(line.split_whitespace().map(str::to_string).collect()),
        _ => Err(Error::from(
            "the payload must be {\"command\": [\"doctor\"]} (the command's words)",
        )),
    }
}

fn main() -> Result<(), Error> {
    serve_events(FUNCTION, |core| {
        move |invocation: k2b_core::lambda::Invocation| {
            let core = core.clone();
            async move {
                let words = words(&invocation.payload)?;
                let cli = admin::parse(&words).map_err(|e| Error::from(e.render().to_string()))?;
                if matches!(
                    &cli.command,
                    admin::Command::Settings {
                        command: admin::SettingsCommand::Set { value, .. }
                    } if value == "-"
                ) {
                    return Err(Error::from(
                        "`-` (standard input) is for the command line: give the value itself",
                    ));
                }
                let name = words.first().cloned().unwrap_or_default();
                match admin::execute(&core, cli.command).await {
                    Ok(outcome) => {
                        tracing::info!(command = %name, ok = outcome.ok, "admin command");
                        Ok(json!({
                            "ok": outcome.ok,
                            "output": outcome.lines.join("\n"),
                            "result": outcome.value,
                        }))
                    }
                    Err(error @ AdminError::Usage(_)) => Err(Error::from(error.to_string())),
                    Err(error) => {
                        tracing::error!(command = %name, error = %error, "admin command failed");
                        Err(Error::from(error.to_string()))
                    }
                }
            }
        }
    })
}
