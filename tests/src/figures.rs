//! The arithmetic of the benchmarks' printed figures.

use std::time::{Duration, Instant};

/// A duration in milliseconds.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The `p`-th percentile (nearest rank) of values sorted ascending; the first for `p = 0`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The middle value; the mean of the two middle ones for an even count.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Runs `op` for about `measure` after a warm-up of 50 runs; operations per second.
pub fn rate(measure: Duration, mut op: impl FnMut()) -> f64 {
    for _ in 0..50 {
        op();
    }
    let started = Instant::now();
    let mut count = 0u64;
    while started.elapsed() < measure {
        for _ in 0..20 {
            op();
        }
        count += 20;
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// The sign/s and verify/s rates of `bits`-bit RSA in the output of `openssl speed rsa<bits>`.
///
/// The columns are read by their header names, so both layouts parse: OpenSSL 3.0 and 3.1 print
/// `sign verify sign/s verify/s`, 3.2 and later add encrypt/decrypt columns
/// (`sign verify encrypt decrypt sign/s verify/s encr./s decr./s`) and pad the key size.
pub fn openssl_rsa_rates(output: &str, bits: u32) -> Option<(f64, f64)> {
    let header: Vec<&str> = output
        .lines()
        .find(|line| line.split_whitespace().any(|word| word == "sign/s"))?
        .split_whitespace()
        .collect();
    let bits = bits.to_string();
    let values: Vec<f64> = output.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("rsa")
            && words.next() == Some(bits.as_str())
            && words.next() == Some("bits"))
        .then(|| {
            words
                .map(|word| word.trim_end_matches('s').parse::<f64>().ok())
                .collect::<Option<Vec<f64>>>()
        })
        .flatten()
    })?;
    if values.len() != header.len() {
        return None;
    }
    let column = |name: &str| {
        header
            .iter()
            .position(|word| *word == name)
            .map(|index| values[index])
    };
    Some((column("sign/s")?, column("verify/s")?))
}

/// The figures of one `wrk --latency` run.
pub struct WrkFigures {
    pub requests_per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub non_2xx_3xx: u64,
}

/// `500.00us`, `1.20ms`, `2.00s` → milliseconds.
pub fn wrk_duration_ms(text: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Requests/s, p50, p99 and the count of answers that were not 2xx/3xx, from `wrk --latency`.
pub fn parse_wrk(output: &str) -> Option<WrkFigures> {
    let mut figures = WrkFigures {
        requests_per_second: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        non_2xx_3xx: 0,
    };
    for line in output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", rate] => figures.requests_per_second = rate.parse().ok()?,
            ["50%", value] => figures.p50_ms = wrk_duration_ms(value)?,
            ["99%", value] => figures.p99_ms = wrk_duration_ms(value)?,
            ["Non-2xx", "or", "3xx", "responses:", count] => {
                figures.non_2xx_3xx = count.parse().ok()?
            }
            _ => {}
        }
    }
    (figures.requests_per_second > 0.0).then_some(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_speed_parses_both_layouts() {
        let v3_0 = "                  sign    verify    sign/s verify/s\n\
                    rsa 2048 bits 0.000236s 0.000014s   4244.9  69210.5\n";
        assert_eq!(openssl_rsa_rates(v3_0, 2048), Some((4244.9, 69210.5)));
        let v3_5 = "version: 3.5.0\n\
                    built on: Tue Apr  8 00:00:00 2025 UTC\n\
                    \x20                  sign    verify    encrypt   decrypt   sign/s verify/s  encr./s  decr./s\n\
                    rsa   512 bits 0.000040s 0.000003s 0.000003s 0.000041s  25000.0 333333.3 333333.3  24390.2\n\
                    rsa  2048 bits 0.000688s 0.000020s 0.000020s 0.000702s   1453.7  49193.7  49062.6   1424.0\n";
        assert_eq!(openssl_rsa_rates(v3_5, 2048), Some((1453.7, 49193.7)));
        assert_eq!(openssl_rsa_rates(v3_5, 4096), None);
        assert_eq!(openssl_rsa_rates("rsa 2048 bits 1 2 3 4\n", 2048), None);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(ms(Duration::from_micros(1500)), 1.5);
    }

    #[test]
    fn the_median_is_the_middle_or_the_mean_of_the_two_middle_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
    }

    #[test]
    fn wrk_output_parses() {
        let output = "Running 5s test @ http://127.0.0.1:1/\n  2 threads and 50 connections\n  Latency Distribution\n     50%  512.00us\n     75%    1.10ms\n     90%    2.00ms\n     99%    3.50ms\n  100 requests in 5.00s\n  Non-2xx or 3xx responses: 3\nRequests/sec:  83500.12\n";
        let figures = parse_wrk(output).expect("parsed");
        assert_eq!(figures.requests_per_second, 83500.12);
        assert!((figures.p50_ms - 0.512).abs() < 1e-9);
        assert_eq!(figures.p99_ms, 3.5);
        assert_eq!(figures.non_2xx_3xx, 3);
        assert_eq!(wrk_duration_ms("1.5s"), Some(1500.0));
    }
}
