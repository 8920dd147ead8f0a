//! A per-client request limiter: at most `limit` requests per client key in each one-second
//! window, kept in process (each execution environment limits what it serves).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Windows kept before old ones are swept.
const SWEEP_AT: usize = 10_000;

/// Counts requests per key and second.
#[derive(Debug, Default)]
pub struct RateLimiter {
    windows: Mutex<HashMap<String, (u64, u32)>>,
}

impl RateLimiter {
    pub fn new() -> RateLimiter {
        RateLimiter::default()
    }

    /// Counts one request of `key`; false when the key already made `limit` requests this second.
    pub fn allow(&self, key: &str, limit: u32) -> bool {
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        self.allow_at(key, limit, second)
    }

    fn allow_at(&self, key: &str, limit: u32, second: u64) -> bool {
        let mut windows = match self.windows.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if windows.len() >= SWEEP_AT {
            windows.retain(|_, (window, _)| *window == second);
        }
        let entry = windows.entry(key.to_string()).or_insert((second, 0));
        if entry.0 != second {
            *entry = (second, 0);
        }
        if entry.1 >= limit {
            return false;
        }
        entry.1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_each_key_per_second() {
        let limiter = RateLimiter::new();
        assert!(limiter.allow_at("a", 2, 10));
        assert!(limiter.allow_at("a", 2, 10));
        assert!(!limiter.allow_at("a", 2, 10));
        assert!(limiter.allow_at("b", 2, 10), "keys are separate");
        assert!(limiter.allow_at("a", 2, 11), "a new second starts over");
    }

    #[test]
    fn old_windows_are_swept() {
        let limiter = RateLimiter::new();
        for i in 0..SWEEP_AT {
            assert!(limiter.allow_at(&format!("k{i}"), 1, 1));
        }
        assert!(limiter.allow_at("new", 1, 2));
        assert_eq!(limiter.windows.lock().map(|w| w.len()).unwrap_or(0), 1);
    }
}
