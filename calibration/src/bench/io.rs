//! Checkpoint writes as storage sees them: write a file of `bytes` and fsync it (the data is
//! on disk when the call returns), in a fresh directory under the system temp dir that is
//! removed afterwards.

use super::{Config, Counter, SizedSamples};
use crate::sample::measured_ns;
use crate::CalibError;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("twin-calibrate-{}", std::process::id()))
}

/// Write-and-fsync timings for each size of the sweep.
pub fn checkpoint(cfg: &Config, progress: &mut Counter) -> Result<Vec<SizedSamples>, CalibError> {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| CalibError::Bench(format!("cannot create {}: {e}", dir.display())))?;
    let result = (|| {
        let mut out = Vec::new();
        for &bytes in &cfg.checkpoint_bytes {
            let data = vec![0x5au8; usize::try_from(bytes).unwrap_or(usize::MAX)];
            let path = dir.join("shard.bin");
            let k = measured_ns(cfg.checkpoint, || {
                let t = Instant::now();
                let mut f = std::fs::File::create(&path)?;
                f.write_all(&data)?;
                f.sync_all()?;
                Ok(t.elapsed().as_nanos() as f64)
            })
            .map_err(|e: std::io::Error| {
                CalibError::Bench(format!("checkpoint write to {}: {e}", path.display()))
            })?;
            out.push(SizedSamples::new(bytes, k));
            progress.tick("checkpoint write");
        }
        Ok(out)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
