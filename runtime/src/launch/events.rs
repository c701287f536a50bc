//! What each rank tells the recovering launcher, readable even after the rank was SIGKILLed:
//! one JSON line per event (ready, checkpoint loaded, step done, checkpoint written, injected
//! fault) appended to `TWIN_EVENTS_DIR/rankN.jsonl`, stamped with the wall clock (the
//! launcher and its ranks share a machine, so these stamps compare directly).

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

pub const EVENTS_VAR: &str = "TWIN_EVENTS_DIR";

/// Nanoseconds since the Unix epoch, now.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Bootstrapped: store reached, schedule checked, clocks aligned, mesh connected.
    Ready { t_ns: u64 },
    /// Checkpoint chosen and restored (`step` 0 and `read_s` 0 when starting from scratch).
    Loaded {
        t_ns: u64,
        step: u64,
        read_s: f64,
        bytes: u64,
        rejected: Vec<String>,
    },
    /// Global step `step` (0-based) finished on this rank.
    Step { t_ns: u64, step: u64 },
    /// This rank's file of checkpoint `step` is durable; `write_s` from the snapshot taken
    /// to the file synced (sync mode: the stall; async: the background write).
    Checkpoint {
        t_ns: u64,
        step: u64,
        write_s: f64,
        stall_s: f64,
        bytes: u64,
    },
    /// Injected kill `id` fires now.
    Fault { t_ns: u64, id: u32 },
}

/// This rank's event file.
pub struct EventLog {
    file: Mutex<std::fs::File>,
}

impl EventLog {
    /// Open the file when the launcher asked for one (`TWIN_EVENTS_DIR` set).
    pub fn from_env(rank: u32) -> Option<EventLog> {
        let dir = std::env::var_os(EVENTS_VAR)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Path::new(&dir).join(format!("rank{rank}.jsonl")))
            .ok()?;
        Some(EventLog {
            file: Mutex::new(file),
        })
    }

    /// Append one event (one write call, so it survives a SIGKILL right after).
    pub fn record(&self, e: &Event) {
        if let (Ok(mut line), Ok(mut f)) = (serde_json::to_vec(e), self.file.lock()) {
            line.push(b'\n');
            let _ = f.write_all(&line);
        }
    }
}

/// Every event rank `rank` recorded in `dir` (unreadable lines skipped).
pub fn read(dir: &Path, rank: u32) -> Vec<Event> {
    std::fs::read_to_string(dir.join(format!("rank{rank}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_the_file() {
        let d = tempfile::tempdir().unwrap();
        let log = EventLog {
            file: Mutex::new(std::fs::File::create(d.path().join("rank2.jsonl")).unwrap()),
        };
        let evs = vec![
            Event::Ready { t_ns: 5 },
            Event::Step { t_ns: 9, step: 3 },
            Event::Fault { t_ns: 10, id: 1 },
        ];
        for e in &evs {
            log.record(e);
        }
        assert_eq!(read(d.path(), 2), evs);
        assert!(read(d.path(), 0).is_empty());
    }
}
