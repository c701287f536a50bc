//! One rank of a multi-GPU CUDA run, started by the launcher (one process per GPU) exactly as
//! a host rank is: the shared [`Session`] bootstrap (store, same-schedule check, clock
//! alignment), NCCL communicators whose unique ids travel over the launcher's store, the steps
//! on GPU `LOCAL_RANK`, and the measurements handed to rank 0. A rank that fails publishes
//! its failure; every other rank then exits at once, because its NCCL calls would otherwise
//! wait forever for the dead peer (the driver releases the communicators with the process).

use super::comm::StoreRendezvous;
use super::{CudaBackend, CudaOptions};
use crate::error::RuntimeError;
use crate::exec::run_step;
use crate::launch::session::rss_peak_bytes;
use crate::launch::{RankEnv, RankMeasure, Session};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use twin_sim::plan::Plan;
use twin_sim::schedule::Schedule;

/// Run this rank for `steps` steps on GPU `env.local_rank`. Rank 0 returns every rank's
/// measurement (indexed by rank); the others `None`.
pub fn run_cuda_worker(
    env: &RankEnv,
    plan: &Plan,
    schedule: &Schedule,
    steps: u32,
    timeout: Duration,
    seed: u64,
) -> Result<Option<Vec<RankMeasure>>, RuntimeError> {
    let mut session = Session::open(env, plan, schedule, timeout)?;
    let rank = session.rank;
    // Set before this rank publishes its own failure, which it reports itself.
    let failed_here = Arc::new(AtomicBool::new(false));
    let quiet = Arc::clone(&failed_here);
    session.watch_for_failure(move |reason| {
        if !quiet.load(Ordering::SeqCst) {
            eprintln!("rank {rank} stops: {reason}");
            std::process::exit(1);
        }
    })?;
    let rendezvous = StoreRendezvous::new(session.connect()?);
    let outcome = (|| {
        let options = CudaOptions {
            device: env.local_rank as usize,
            seed,
            ..CudaOptions::default()
        };
        let mut backend = CudaBackend::with_rendezvous(options, Box::new(rendezvous))?;
        let mut spans = Vec::new();
        let mut last = None;
        for step in 0..steps.max(1) {
            session.store.start_together(
                &format!("step{step}"),
                rank,
                session.world,
                &session.clock,
                crate::launch::STEP_START_MARGIN,
            )?;
            let run = run_step(plan, schedule, rank, &mut backend)?;
            // Event times count from the step's device origin; put them on the aligned clock.
            let origin = backend.step_origin().map_or(0, |t| session.clock.at_ns(t));
            let lo = run.events.iter().map(|e| e.start_ns).min().unwrap_or(0);
            let hi = run.events.iter().map(|e| e.end_ns).max().unwrap_or(lo);
            spans.push([origin + lo, origin + hi]);
            last = Some((run, origin));
        }
        let (run, origin) = last.ok_or_else(|| RuntimeError::Aborted("no step ran".into()))?;
        Ok(aligned_measure(&run, origin, spans, &session))
    })();
    match outcome {
        Ok(measure) => session.finish(&measure),
        Err(e) => {
            failed_here.store(true, Ordering::SeqCst);
            session.publish_failure(&e);
            Err(e)
        }
    }
}

/// The rank's measurement with its last step's op times moved onto the aligned clock.
fn aligned_measure(
    run: &crate::exec::RankRun,
    origin_ns: u64,
    step_spans_ns: Vec<[u64; 2]>,
    session: &Session,
) -> RankMeasure {
    let mut m = RankMeasure::from_rank_run(run);
    for t in &mut m.op_times_ns {
        t[0] += origin_ns;
        t[1] += origin_ns;
    }
    for t in m.op_issued_ns.iter_mut().flatten() {
        *t += origin_ns;
    }
    m.step_spans_ns = step_spans_ns;
    m.clock_offset_ns = session.clock_offset_ns;
    m.clock_residual_ns = session.clock_residual_ns;
    m.rss_peak_bytes = rss_peak_bytes();
    m
}
