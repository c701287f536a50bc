//! One rank of a CUDA run started by the launcher (one process per GPU): the device worker
//! ([`run_device_worker`]) on GPU `LOCAL_RANK`, with NCCL communicators whose unique ids travel
//! over the launcher's store. With checkpoints the backend keeps its model state in real
//! device buffers for them to copy.

use super::comm::StoreRendezvous;
use super::{CudaBackend, CudaOptions};
use crate::error::RuntimeError;
use crate::launch::{run_device_worker, DeviceWorkerOptions, RankEnv, RankMeasure};
use twin_sim::plan::Plan;
use twin_sim::schedule::Schedule;

/// Run this rank on GPU `env.local_rank`. Rank 0 returns every rank's measurement (indexed by
/// rank); the others `None`.
pub fn run_cuda_worker(
    env: &RankEnv,
    plan: &Plan,
    schedule: &Schedule,
    opts: &DeviceWorkerOptions,
) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
    run_device_worker(env, plan, schedule, opts, |session| {
        let options = CudaOptions {
            device: env.local_rank as usize,
            seed: opts.durable.seed,
            keep_state: opts.durable.checkpoint.is_some(),
            ..CudaOptions::default()
        };
        let rendezvous = StoreRendezvous::new(session.connect()?);
        CudaBackend::with_rendezvous(options, Box::new(rendezvous))
    })
}
