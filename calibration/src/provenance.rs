//! Where a calibration ran: host name, CPU model, cores (from /proc and the standard library;
//! fields that cannot be read say "unknown"), the UTC date from the system clock, and twin's
//! version.

use crate::write::Provenance;
use std::time::{SystemTime, UNIX_EPOCH};

/// CPU cores this process may use.
pub fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `secs` since the Unix epoch (proleptic Gregorian calendar).
pub fn utc_date(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Provenance of a run on this machine now.
pub fn here(backend: &str, mode: &str, command: &str, samples_file: &str) -> Provenance {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Provenance {
        hostname: read_trimmed("/proc/sys/kernel/hostname")
            .or_else(|| read_trimmed("/etc/hostname"))
            .unwrap_or_else(|| "unknown".into()),
        cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
        cores: cores(),
        date_utc: utc_date(secs),
        backend: backend.to_string(),
        twin_version: env!("CARGO_PKG_VERSION").to_string(),
        mode: mode.to_string(),
        command: command.to_string(),
        cuda_version: None,
        nccl_version: None,
        samples_file: samples_file.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day) 12:34:56.
        assert_eq!(utc_date(951_827_696), "2000-02-29T12:34:56Z");
        assert_eq!(utc_date(1_795_305_600), "2026-11-22T00:00:00Z");
    }
}
