//! What a process may see of another: functions hold secrets in their environment (database
//! password, `APP_SECRET`, key-encryption keys), and the icon function runs untrusted image data
//! through native decoders in a child process.
//!
//! [`forbid_inspection`] makes a serving process non-dumpable: its `/proc/<pid>/environ`, memory
//! and file descriptors are then closed to every process without `CAP_SYS_PTRACE`, including
//! its own children. [`enter_worker_sandbox`] is what such a child does first: it gives up every
//! capability (so even a worker started as root cannot read its parent), can never gain
//! privileges again, and dies with its parent.

/// Makes this process non-dumpable (Linux; a no-op elsewhere). Returns whether it took effect.
pub fn forbid_inspection() -> bool {
    #[cfg(target_os = "linux")]
    {
        match rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(error = %error, "the process could not be made non-dumpable");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether this process is dumpable (readable by same-user processes).
pub fn is_dumpable() -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::dumpable_behavior()
            .ok()
            .map(|behavior| behavior != rustix::process::DumpableBehavior::NotDumpable)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Confines a worker process before it touches untrusted input: no new privileges, an empty
/// capability bounding set (where it may be changed), no capabilities, non-dumpable, killed when
/// the parent dies. Fails closed: an error means the worker must not go on.
pub fn enter_worker_sandbox() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::thread::{CapabilitySet, CapabilitySets};
        rustix::thread::set_no_new_privs(true)?;
        for capability in CapabilitySet::all().iter() {
            // Needs CAP_SETPCAP; without it the bounding set cannot matter (nothing to regain).
            let _ = rustix::thread::remove_capability_from_bounding_set(capability);
        }
        rustix::thread::set_capabilities(
            None,
            CapabilitySets {
                effective: CapabilitySet::empty(),
                permitted: CapabilitySet::empty(),
                inheritable: CapabilitySet::empty(),
            },
        )?;
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::Error::other("worker sandboxing requires Linux"))
    }
}
