//! Black-box and cross-function tests against a real Postgres, real HTTP and real processes.

mod identity;
mod local_runner;
mod maintenance;
