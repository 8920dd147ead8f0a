#!/usr/bin/env bash
# Every check CI runs, in CI's order: formatting, supply chain, lints, the whole test suite, the
# template lint.
# Installs what a fresh machine lacks and starts what the tests need; needs no input.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

# --- tools ------------------------------------------------------------------------------------
pip_missing=()
command -v cfn-lint >/dev/null 2>&1 || pip_missing+=("cfn-lint")
command -v moto_server >/dev/null 2>&1 || pip_missing+=("moto[server]")
command -v cargo-lambda >/dev/null 2>&1 || pip_missing+=("cargo-lambda")
# An independent SMTP server for the delivery tests (STARTTLS on a self-signed certificate).
python3 -c 'import aiosmtpd' >/dev/null 2>&1 || pip_missing+=("aiosmtpd")
# The API contract's fuzzer (tests/tests/it/openapi.rs, infra/schemathesis.toml); pinned, since
# its checks and configuration change between releases.
[[ "$(schemathesis --version 2>/dev/null)" == *"version 4.32.5" ]] || pip_missing+=("schemathesis==4.32.5")
if ((${#pip_missing[@]})); then
  log "installing from PyPI: ${pip_missing[*]}"
  python3 -m pip install --quiet --disable-pip-version-check "${pip_missing[@]}"
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
  hash -r
fi
# The service worker tests run the worker in Node; the browser tests drive headless Chromium
# over WebDriver.
apt_missing=()
command -v node >/dev/null 2>&1 || apt_missing+=("nodejs")
[[ -x /usr/bin/chromium ]] || apt_missing+=("chromium")
[[ -x /usr/bin/chromedriver ]] || apt_missing+=("chromium-driver")
if ((${#apt_missing[@]})); then
  log "installing Debian packages: ${apt_missing[*]}"
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${apt_missing[@]}"
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest"
  cargo install --locked cargo-nextest
fi
# Supply-chain checks (deny.toml); pinned, since newer releases may need a newer rustc.
if ! cargo deny --version >/dev/null 2>&1; then
  log "installing cargo-deny"
  cargo install --locked cargo-deny --version 0.20.2
fi

# --- services ---------------------------------------------------------------------------------
# The test harness uses DATABASE_URL, else 127.0.0.1:5432, else a throwaway cluster of its own.
if [[ -z "${DATABASE_URL:-}" ]] && command -v pg_isready >/dev/null 2>&1 \
   && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && [[ -d /etc/postgresql ]]; then
    log "starting the installed PostgreSQL cluster"
    for version in /etc/postgresql/*; do
      pg_ctlcluster --skip-systemctl-redirect "$(basename "$version")" main start || true
    done
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
fi

# The SQS tests talk to a local SQS API (moto); one server serves the whole run.
if [[ -z "${K2B_TEST_SQS_ENDPOINT:-}" ]]; then
  moto_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  moto_server -H 127.0.0.1 -p "$moto_port" >/dev/null 2>&1 &
  moto_pid=$!
  trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
  for _ in $(seq 1 60); do
    (echo > "/dev/tcp/127.0.0.1/$moto_port") 2>/dev/null && break
    sleep 0.5
  done
  export K2B_TEST_SQS_ENDPOINT="http://127.0.0.1:$moto_port"
  log "moto SQS API on $K2B_TEST_SQS_ENDPOINT"
fi

# --- checks -----------------------------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo deny check bans licenses sources"
cargo deny check bans licenses sources

log "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets -- -D warnings

log "build binaries (the black-box tests run k2b-local)"
cargo build --workspace --bins
# `cargo lambda watch` runs `cargo run --bin widgets`: the widgets package alone, with its own
# feature set; built here so that the test through it starts at once.
cargo build --bin widgets

log "tests"
cargo nextest run --workspace --no-fail-fast

log "cfn-lint template.yaml"
cfn-lint template.yaml

log "template routes after the SAM transform"
python3 infra/check_template.py

log "all checks passed"
