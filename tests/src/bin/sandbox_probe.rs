//! Tries what a compromised render worker would: reading its parent's environment. Started with
//! the worker flag it first confines itself exactly as the icon worker does. Prints `read <n>`
//! or `denied <error kind>`.

fn main() {
    if std::env::args().nth(1).as_deref() == Some(icons::worker::WORKER_FLAG) {
        icons::worker::confine_or_exit();
    }
    let parent = std::os::unix::process::parent_id();
    match std::fs::read(format!("/proc/{parent}/environ")) {
        Ok(bytes) => println!("read {}", bytes.len()),
        Err(error) => println!("denied {:?}", error.kind()),
    }
}
