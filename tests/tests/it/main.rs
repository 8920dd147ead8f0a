//! Black-box and cross-function tests against a real Postgres, real HTTP and real processes.

mod branding;
mod browser;
mod cloud_login;
mod hardening;
mod help;
mod identity;
mod keys_function;
mod lambda;
mod local_runner;
mod mail;
mod maintenance;
mod openapi;
mod operations;
mod outbox;
mod pwa;
mod registry_function;
mod widgets;
