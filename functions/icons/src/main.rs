fn main() -> Result<(), k2b_core::lambda::Error> {
    // The same binary renders the icons in an isolated child process.
    icons::run_if_worker();
    k2b_core::lambda::serve_http(icons::FUNCTION, icons::routes)
}
