fn main() -> Result<(), k2b_core::lambda::Error> {
    k2b_core::lambda::serve_http(mail::FUNCTION, mail::routes)
}
