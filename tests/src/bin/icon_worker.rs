//! The icon render worker for the tests (the functions run it from their own binary).

fn main() {
    icons::run_if_worker();
    eprintln!("start with {} to render icons", icons::worker::WORKER_FLAG);
    std::process::exit(2);
}
