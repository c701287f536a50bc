//! How much longer a transfer takes when the receiving core sat idle before it (the profile's
//! `[host] wake_ns` and `wake_per_idle`; twin-sim's `host_model::wake`). Two ranks on their own
//! pinned cores exchange a 4 KiB message over the runtime's TCP mesh after both idled for each
//! of `Config::wake_idle_ns`; a sample is the one-way time from the sender's write to the
//! receiver's first byte (one process, one monotonic clock). On the development VM it was
//! 37-42 µs back to back, 55-61 µs after 50 µs idle, 82 µs after 1 ms and 169 µs after 5 ms:
//! an idle vCPU takes longer to wake the longer it slept, and in a pipeline the receiver has
//! usually slept for a bubble (docs/journal/2026-11-validation-history.md, 2026-11-23). The p2p
//! benchmark's ping-pong never lets a core idle, so its latency is the back-to-back one.

use super::{Config, Counter, SizedSamples};
use crate::sample::reject_outliers;
use crate::CalibError;
use std::time::{Duration, Instant};
use twin_runtime::launch::affinity::pin_rank;
use twin_runtime::microbench::local_meshes;

const BYTES: usize = 4096;
const TIMEOUT: Duration = Duration::from_secs(30);

/// One-way times after each idle gap; `bytes` of each record is the idle time in ns.
pub fn wake(cfg: &Config, progress: &mut Counter) -> Result<Vec<SizedSamples>, CalibError> {
    let meshes = local_meshes(2, TIMEOUT)
        .map_err(|e| CalibError::Bench(format!("connecting 2 local ranks: {e}")))?;
    let (m0, m1) = match meshes.as_slice() {
        [a, b] => (a, b),
        _ => return Err(CalibError::Bench("two local ranks expected".into())),
    };
    let payload = vec![7u8; BYTES];
    let ack = [1u8; 8];
    let calls = cfg.wake.warmup + cfg.wake.timed.max(1);
    let mut out = Vec::new();
    for (gap, &idle_ns) in cfg.wake_idle_ns.iter().enumerate() {
        let base = (gap as u64) << 32;
        let (tx, rx) = std::sync::mpsc::channel::<Instant>();
        let fail = |e: twin_runtime::RuntimeError| CalibError::Bench(format!("wake-up: {e}"));
        let (times, sent) = std::thread::scope(|s| {
            let receiver = s.spawn(move || {
                pin_rank(1);
                let mut times = Vec::with_capacity(calls as usize);
                for i in 0..u64::from(calls) {
                    let (_, arrived) = m1.recv(0, 0, base | i, BYTES as u64)?;
                    let sent = rx
                        .recv()
                        .map_err(|_| twin_runtime::RuntimeError::Aborted("sender gone".into()))?;
                    times.push(arrived.saturating_duration_since(sent).as_nanos() as f64);
                    m1.send(0, 0, base | (1 << 31) | i, &ack, false)?;
                }
                Ok::<_, twin_runtime::RuntimeError>(times)
            });
            let sender = s.spawn(|| {
                pin_rank(0);
                for i in 0..u64::from(calls) {
                    if idle_ns > 0 {
                        std::thread::sleep(Duration::from_nanos(idle_ns));
                    }
                    // The instant goes first: the receiver reads it after the message.
                    if tx.send(Instant::now()).is_err() {
                        break;
                    }
                    m0.send(1, 0, base | i, &payload, false)?;
                    m0.recv(1, 0, base | (1 << 31) | i, ack.len() as u64)?;
                }
                Ok::<_, twin_runtime::RuntimeError>(())
            });
            let sent = sender.join();
            (receiver.join(), sent)
        });
        let thread = |_| CalibError::Bench("a wake-up thread panicked".into());
        sent.map_err(thread)?.map_err(fail)?;
        let times = times.map_err(thread)?.map_err(fail)?;
        let timed = times.get(cfg.wake.warmup as usize..).unwrap_or_default();
        out.push(SizedSamples::new(idle_ns, reject_outliers(timed)));
        progress.tick("wake-up after idle");
    }
    Ok(out)
}
