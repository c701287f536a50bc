//! Library entry points for the CLI and calibration: a cuBLAS GEMM sweep (achieved TFLOP/s
//! per shape) and its FP8 counterpart through cuBLASLt, a single-GPU run of a schedule for several steps, and the same for a
//! single-GPU scenario's generated schedule, set beside the simulator's prediction (which the
//! caller makes).

use super::backend::{CudaBackend, CudaOptions};
use super::device::{operand_bytes, run_gemm, BlasHandle, DeviceBuffer, GemmOperands};
use super::dtype::GemmDtype;
use super::fp8::{lt_workspace_bytes, plan_fp8_gemm, Fp8Device, Role};
use super::libs::{self, cu, guard};
use super::lt::{Fp8Operands, Fp8Outcome, LtHandle};
use super::single::{check_single_gpu, compare, Comparison, Predicted};
use crate::error::RuntimeError;
use crate::exec::{run_step, RankRun};
use cudarc::driver::{sys as drv_sys, CudaContext, CudaEvent, CudaStream};
use serde::Serialize;
use std::sync::Arc;
use twin_sim::plan::Plan;
use twin_sim::scenario::{Fp8Recipe, Scenario};
use twin_sim::schedule::{Gemm, Schedule};

/// Measured time of one GEMM shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmSample {
    pub gemm: Gemm,
    pub dtype: GemmDtype,
    pub reps: u32,
    pub median_ns: u64,
    pub best_ns: u64,
    /// FLOPs / median time.
    pub achieved_flops_per_s: f64,
}

/// Time each shape `reps` times (after 3 warm-up runs) on GPU 0, one CUDA-event pair per rep.
pub fn gemm_sweep(
    shapes: &[Gemm],
    dtype: GemmDtype,
    reps: u32,
) -> Result<Vec<GemmSample>, RuntimeError> {
    let times = gemm_sweep_times(shapes, dtype, reps)?;
    Ok(shapes
        .iter()
        .zip(times)
        .map(|(g, mut times)| {
            times.sort_unstable();
            let median_ns = times.get(times.len() / 2).copied().unwrap_or(1);
            GemmSample {
                gemm: *g,
                dtype,
                reps: reps.max(1),
                median_ns,
                best_ns: times.first().copied().unwrap_or(1),
                achieved_flops_per_s: g.flops() as f64 / (median_ns as f64 * 1e-9),
            }
        })
        .collect())
}

/// Every timed repetition (ns, in order) of each shape: `reps` after 3 warm-up runs on GPU 0,
/// one CUDA-event pair per repetition around all of the shape's `count` products.
pub fn gemm_sweep_times(
    shapes: &[Gemm],
    dtype: GemmDtype,
    reps: u32,
) -> Result<Vec<Vec<u64>>, RuntimeError> {
    gemm_times(shapes, dtype, Timing::Reps(reps))
}

/// How a benchmark times its calls.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Timing {
    /// `n` repetitions after 3 warm-up calls, each between its own pair of events, the host
    /// waiting for each: short batches, the GPU below a power cap's throttle.
    Reps(u32),
    /// 3 warm-up calls, `idle` with the GPU idle, then `calls` calls issued back to back (no
    /// host wait between them), an event between each two: how the rate falls as a power cap
    /// throttles the clocks.
    BackToBack {
        calls: u32,
        idle: std::time::Duration,
    },
}

/// `g` issued `calls` times back to back on GPU 0 after the GPU idled for `idle` (3 warm-up
/// calls before the idle): each call's time in ns, in issue order. Under a power cap the first
/// calls run at the unthrottled rate and the later ones at the capped one
/// (docs/measurements/2026-11-30-h200-fp8-and-power.md).
pub fn gemm_back_to_back_times(
    g: &Gemm,
    dtype: GemmDtype,
    calls: u32,
    idle: std::time::Duration,
) -> Result<Vec<u64>, RuntimeError> {
    let timing = Timing::BackToBack { calls, idle };
    let mut out = gemm_times(std::slice::from_ref(g), dtype, timing)?;
    Ok(out.pop().unwrap_or_default())
}

/// As [`gemm_back_to_back_times`] for an FP8 GEMM through cuBLASLt, operands cast as `recipe`
/// casts them (errors as [`fp8_gemm_sweep_times`]).
pub fn fp8_gemm_back_to_back_times(
    g: &Gemm,
    recipe: Fp8Recipe,
    calls: u32,
    idle: std::time::Duration,
) -> Result<Vec<u64>, RuntimeError> {
    let timing = Timing::BackToBack { calls, idle };
    let mut out = fp8_gemm_times(std::slice::from_ref(g), recipe, timing)?;
    Ok(out.pop().unwrap_or_default())
}

fn gemm_times(
    shapes: &[Gemm],
    dtype: GemmDtype,
    timing: Timing,
) -> Result<Vec<Vec<u64>>, RuntimeError> {
    libs::load()?;
    guard("gemm_sweep", || {
        let timer = Timer::new()?;
        let h = BlasHandle::new(timer.stream.cu_stream())?;
        let mut out = Vec::with_capacity(shapes.len());
        for g in shapes {
            let [a, b, c] = operand_bytes(g, dtype);
            let ops = GemmOperands {
                a: DeviceBuffer::new(a)?,
                b: DeviceBuffer::new(b)?,
                c: DeviceBuffer::new(c)?,
            };
            ops.a.fill_random(1)?;
            ops.b.fill_random(2)?;
            out.push(timer.run(timing, || run_gemm(&h, &ops, g, dtype))?);
        }
        Ok(out)
    })
}

/// GPU 0's FP8 GEMMs: the compute capability and recipe they run under, or why the GPU (or
/// the libraries found) cannot run them.
pub fn fp8_device(recipe: Fp8Recipe) -> Result<Result<Fp8Device, String>, RuntimeError> {
    let libs = libs::load()?;
    guard("fp8_device", || {
        if let Err(why) = &libs.cublas_lt {
            return Ok(Err(why.clone()));
        }
        let ctx = CudaContext::new(0).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| cu("cuDeviceGetAttribute", e))?;
        Ok(Fp8Device::check(
            (major.max(0) as u32, minor.max(0) as u32),
            recipe,
        ))
    })
}

/// An event pair's milliseconds as whole ns, at least 1.
fn event_ns(ms: f32) -> u64 {
    (f64::from(ms) * 1e6).round().max(1.0) as u64
}

/// A stream on GPU 0 and the pair of events that times work issued on it.
struct Timer {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
}

impl Timer {
    fn new() -> Result<Timer, RuntimeError> {
        let ctx = CudaContext::new(0).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
        let stream = ctx.new_stream().map_err(|e| cu("cuStreamCreate", e))?;
        let timing = Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).map_err(|e| cu("cuEventCreate", e))?;
        let end = ctx.new_event(timing).map_err(|e| cu("cuEventCreate", e))?;
        Ok(Timer {
            ctx,
            stream,
            start,
            end,
        })
    }

    /// The calls `timing` asks for: their times in ns (at least 1 each), in order.
    fn run(
        &self,
        timing: Timing,
        issue: impl FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Vec<u64>, RuntimeError> {
        match timing {
            Timing::Reps(reps) => self.times(reps, issue),
            Timing::BackToBack { calls, idle } => self.back_to_back(calls, idle, issue),
        }
    }

    /// `issue` three times to warm up, the stream drained, `idle` asleep, then `calls` times
    /// (at least once) back to back with an event recorded before the first and after each:
    /// each call's time in ns (at least 1), in order.
    fn back_to_back(
        &self,
        calls: u32,
        idle: std::time::Duration,
        mut issue: impl FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Vec<u64>, RuntimeError> {
        for _ in 0..3 {
            issue()?;
        }
        self.stream
            .synchronize()
            .map_err(|e| cu("cuStreamSynchronize", e))?;
        std::thread::sleep(idle);
        let timing = Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT);
        let events = (0..=calls.max(1))
            .map(|_| self.ctx.new_event(timing))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cu("cuEventCreate", e))?;
        let record = |e: &CudaEvent| e.record(&self.stream).map_err(|e| cu("cuEventRecord", e));
        let (first, rest) = events.split_first().ok_or_else(|| {
            RuntimeError::Unsupported("back-to-back timing without events".into())
        })?;
        record(first)?;
        for e in rest {
            issue()?;
            record(e)?;
        }
        events
            .windows(2)
            .map(|w| {
                let ms = w[0]
                    .elapsed_ms(&w[1])
                    .map_err(|e| cu("cuEventElapsedTime", e))?;
                Ok(event_ns(ms))
            })
            .collect()
    }

    /// `issue` run three times to warm up, then `reps` times (at least once), each between
    /// the two events: the times in ns (at least 1 each).
    fn times(
        &self,
        reps: u32,
        mut issue: impl FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Vec<u64>, RuntimeError> {
        for _ in 0..3 {
            issue()?;
        }
        let reps = reps.max(1);
        let mut times: Vec<u64> = Vec::with_capacity(reps as usize);
        for _ in 0..reps {
            let record = |e: &CudaEvent| e.record(&self.stream).map_err(|e| cu("cuEventRecord", e));
            record(&self.start)?;
            issue()?;
            record(&self.end)?;
            let ms = self
                .start
                .elapsed_ms(&self.end)
                .map_err(|e| cu("cuEventElapsedTime", e))?;
            times.push(event_ns(ms));
        }
        Ok(times)
    }
}

/// As [`gemm_sweep_times`] for FP8: each shape as the forward GEMM of a linear layer through
/// cuBLASLt (`fp8::plan_fp8_gemm`), operands cast as `recipe` casts them. A shape FP8 cannot
/// run, or a GPU without FP8, is an error naming it; so is a shape that would run with other
/// scales than the recipe's (the per-tensor fallback where the GPU or cuBLASLt lacks the
/// recipe's scale mode): a sweep times the recipe it is asked for or nothing.
pub fn fp8_gemm_sweep_times(
    shapes: &[Gemm],
    recipe: Fp8Recipe,
    reps: u32,
) -> Result<Vec<Vec<u64>>, RuntimeError> {
    fp8_gemm_times(shapes, recipe, Timing::Reps(reps))
}

fn fp8_gemm_times(
    shapes: &[Gemm],
    recipe: Fp8Recipe,
    timing: Timing,
) -> Result<Vec<Vec<u64>>, RuntimeError> {
    let device = fp8_device(recipe)?.map_err(RuntimeError::Unsupported)?;
    guard("fp8_gemm_sweep", || {
        let timer = Timer::new()?;
        let mut lt = LtHandle::new(lt_workspace_bytes(device.compute_capability))?;
        let mut out = Vec::with_capacity(shapes.len());
        for g in shapes {
            let (plan, note) =
                plan_fp8_gemm(g, Role::Forward, &device).map_err(RuntimeError::Unsupported)?;
            if let Some(why) = note {
                return Err(RuntimeError::Unsupported(why));
            }
            let [a, b] = plan.operand_bytes();
            let scales = plan.scale_bytes().into_iter().max().unwrap_or(4);
            let ops = Fp8Operands::new([a, b, scales], recipe, 1)?;
            let c = DeviceBuffer::new(plan.m * plan.n * 2)?;
            let s = timer.stream.cu_stream();
            let issue = || match lt.run(&ops, &c, &plan, s)? {
                Fp8Outcome::Ran(None) => Ok(()),
                Fp8Outcome::Ran(Some(why)) | Fp8Outcome::Unsupported(why) => {
                    Err(RuntimeError::Unsupported(why))
                }
            };
            out.push(timer.run(timing, issue)?);
        }
        Ok(out)
    })
}

/// Run a single-rank schedule on GPU 0 for `steps` steps (the first warms up cuBLAS, the
/// allocator and NCCL). Returns the last step, with every step's time in `step_times_ns`.
pub fn run_single_gpu(
    scenario: &Scenario,
    plan: &Plan,
    schedule: &Schedule,
    steps: u32,
) -> Result<RankRun, RuntimeError> {
    run_single_gpu_with(scenario, plan, schedule, steps, CudaOptions::default())
}

/// As [`run_single_gpu`], with backend options (the fill seed and the FP8 recipe come from
/// the scenario).
pub fn run_single_gpu_with(
    scenario: &Scenario,
    plan: &Plan,
    schedule: &Schedule,
    steps: u32,
    options: CudaOptions,
) -> Result<RankRun, RuntimeError> {
    let gpus = CudaBackend::device_count()?;
    let ranks = schedule.world();
    if ranks > gpus {
        return Err(RuntimeError::TooManyRanks { ranks, gpus });
    }
    if ranks != 1 {
        return Err(RuntimeError::NeedsLauncher { ranks });
    }
    let options = CudaOptions {
        seed: scenario.run.seed,
        fp8_recipe: scenario.training.fp8_recipe,
        ..options
    };
    let mut backend = CudaBackend::new(options)?;
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..steps.max(1) {
        let run = run_step(plan, schedule, 0, &mut backend)?;
        times.push(run.step_time_ns);
        last = Some(run);
    }
    let mut run = last.ok_or_else(|| RuntimeError::Unsupported("no step ran".into()))?;
    run.step_times_ns = times;
    Ok(run)
}

/// A single-GPU scenario run for real: the measured last step and its comparison with the
/// simulator's prediction of the same generated schedule.
pub struct ScenarioRun {
    pub run: RankRun,
    pub comparison: Comparison,
}

/// Run the schedule of a single-GPU scenario (pp = tp = dp = cp = ep = 1), as the caller
/// predicted it (with a trace), on GPU 0 for `steps` steps, and set the last step beside the
/// prediction. A scenario of more than one GPU is refused before any device work, naming its
/// degrees.
pub fn run_scenario_single_gpu(
    predicted: &Predicted<'_>,
    steps: u32,
    options: CudaOptions,
) -> Result<ScenarioRun, RuntimeError> {
    check_single_gpu(predicted.scenario)?;
    let run = run_single_gpu_with(
        predicted.scenario,
        predicted.plan,
        predicted.schedule,
        steps,
        options,
    )?;
    let comparison = compare(predicted, &run)?;
    Ok(ScenarioRun { run, comparison })
}
