fn main() -> Result<(), k2b_core::lambda::Error> {
    // The stream's lines leave as they are written: the response is streamed, never buffered.
    k2b_core::lambda::serve_http_streaming(widgets::FUNCTION, widgets::routes)
}
