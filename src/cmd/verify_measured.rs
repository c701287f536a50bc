//! `twin verify step SCENARIO --measured TRACE [--memory-snapshot SNAP]`: a prediction against
//! a framework's real step, read from a PyTorch profiler trace (and a CUDA memory snapshot),
//! by class of work. Nothing runs: the trace is the measurement. The readers are
//! `twin_measured`, the comparison `twin_sim::verify::compare_classes`.

use super::verify::StepArgs;
use super::{load_scenario, Format};
use anyhow::Context;
use std::process::ExitCode;
use twin_measured::kineto::{self, KernelClass};
use twin_sim::verify::{compare_classes, predicted_classes, ClassTimes, CollectiveCall, WorkClass};

/// The predicted class a kernel class is compared with: memory-bound kernels of every kind
/// (norms, casts, copies, fills, unrecognised kernels) as elementwise, NCCL as communication.
fn work_class(c: KernelClass) -> WorkClass {
    match c {
        KernelClass::Gemm => WorkClass::Gemm,
        KernelClass::Attention => WorkClass::Attention,
        KernelClass::Optimizer => WorkClass::Optimizer,
        KernelClass::Collective | KernelClass::P2p => WorkClass::Communication,
        KernelClass::Norm
        | KernelClass::Elementwise
        | KernelClass::Other
        | KernelClass::Memcpy
        | KernelClass::Memset => WorkClass::Elementwise,
    }
}

/// A NCCL kernel as twin counts a collective: its kind by twin's name and its buffer in the
/// nccl-tests sense (an all-gather's output: its output message, else the input times the
/// group; every other kind's input message). Unknown sizes count as 0 bytes.
fn collective_call(c: &kineto::CollectiveInfo, ns: u64) -> CollectiveCall {
    use kineto::CollectiveKind as K;
    use twin_sim::schedule::CollectiveKind as T;
    let twin_kind = match c.kind {
        K::AllReduce => Some(T::AllReduce),
        K::AllGather => Some(T::AllGather),
        K::ReduceScatter => Some(T::ReduceScatter),
        K::AllToAll => Some(T::AllToAll),
        K::Broadcast => Some(T::Broadcast),
        _ => None,
    };
    let kind = twin_kind.map_or_else(
        || format!("{:?}", c.kind).to_ascii_lowercase(),
        |k| k.name().to_string(),
    );
    let bytes = match c.kind {
        K::AllGather => c.out_bytes.or_else(|| {
            c.bytes
                .zip(c.group_size)
                .map(|(b, g)| b.saturating_mul(u64::from(g)))
        }),
        _ => c.bytes,
    }
    .unwrap_or(0);
    CollectiveCall { kind, bytes, ns }
}

/// The predicted rank's allocated memory over its step (twin's `reserved` category left out,
/// as the peak leaves it) against the snapshot's replay, by fraction of each step.
fn memory_timeline(
    schedule: &twin_sim::schedule::Schedule,
    result: &twin_sim::engine::SimResult,
    rank: u32,
    measured: &[(f64, u64)],
) -> Option<twin_sim::verify::MemoryTimeline> {
    use twin_sim::schedule::{MemCategory, OpKind};
    use twin_sim::verify::{compare_memory_timelines, Samples, TIMELINE_BINS};
    let trace = result.trace.as_ref()?;
    let predicted: Vec<(f64, u64)> = trace
        .memory
        .iter()
        .filter(|m| m.rank == rank)
        .map(|m| {
            let reserved = m.bytes[MemCategory::Reserved as usize];
            let all = m.bytes.iter().fold(0u64, |a, b| a.saturating_add(*b));
            (m.time_ns as f64, all.saturating_sub(reserved))
        })
        .collect();
    let program = schedule.get_program(rank)?;
    let name = |t: f64| -> Option<String> {
        let e = trace.events.iter().find(|e| {
            e.rank == rank
                && (e.start_ns as f64) <= t
                && t < e.end_ns as f64
                && matches!(
                    program.ops.get(e.op as usize).map(|o| &o.kind),
                    Some(OpKind::Compute(_))
                )
        })?;
        let op = program.ops.get(e.op as usize)?;
        let OpKind::Compute(c) = &op.kind else {
            return None;
        };
        let l = &op.label;
        let mb = l.microbatch.map_or(String::new(), |m| format!(" mb {m}"));
        let layers = if l.num_layers > 0 {
            format!(
                " layers {}-{}",
                l.first_layer,
                l.first_layer + l.num_layers.saturating_sub(1)
            )
        } else {
            String::new()
        };
        Some(format!("{}{mb}{layers}", c.phase.short()))
    };
    let (start, end) = (
        measured.first().map_or(0.0, |p| p.0),
        measured.last().map_or(0.0, |p| p.0),
    );
    compare_memory_timelines(
        &Samples {
            points: &predicted,
            start: 0.0,
            end: result.step_time_ns as f64,
        },
        &Samples {
            points: measured,
            start,
            end,
        },
        TIMELINE_BINS,
        name,
    )
}

pub fn run(a: StepArgs) -> anyhow::Result<ExitCode> {
    let Some(trace_path) = a.measured.as_deref() else {
        anyhow::bail!("--measured is required here");
    };
    let scenario = load_scenario(&a.scenario, &a.overrides)?;
    anyhow::ensure!(
        a.rank < scenario.cluster.gpus,
        "--rank {}: the scenario has {} GPUs (ranks 0 to {})",
        a.rank,
        scenario.cluster.gpus,
        scenario.cluster.gpus.saturating_sub(1)
    );
    let profile = twin_sim::profile::load(&a.profile)?;
    let staged = twin_sim::Staged::with_profile(&scenario, Some(&profile))?;
    staged.validate()?;
    let opts = twin_sim::engine::SimOptions {
        trace: true,
        collapse: false,
        ..twin_sim::sim_options(&scenario, &twin_sim::PredictOptions::default())
    };
    let result = staged.simulate(&opts)?;
    let predicted = predicted_classes(&staged.schedule, &result, &staged.cost, a.rank);

    let traces = kineto::read_traces(trace_path)?;
    let trace = kineto::trace_of_rank(&traces, a.rank).with_context(|| {
        format!(
            "--rank {}: {} holds no trace of that rank ({} file(s))",
            a.rank,
            trace_path.display(),
            traces.len()
        )
    })?;
    let steps = trace.steps.len();
    let step = a.measured_step.unwrap_or(steps.saturating_sub(1));
    let b = kineto::breakdown(trace, step)?;
    let mut pairs: Vec<(WorkClass, u64)> = b
        .by_class_ns
        .iter()
        .map(|&(c, ns)| (work_class(c), ns))
        .collect();
    pairs.push((WorkClass::Idle, b.idle_ns));
    let mut measured = ClassTimes::new(b.step_ns, &pairs);
    if let Some(span) = trace.steps.get(step) {
        measured.collectives = trace
            .kernels
            .iter()
            .filter(|k| span.start_ns <= k.start_ns && k.start_ns < span.end_ns())
            .filter(|k| k.class == KernelClass::Collective)
            .filter_map(|k| k.collective.as_ref().map(|c| collective_call(c, k.dur_ns)))
            .collect();
    }
    let mut reserved = None;
    let mut measured_timeline: Vec<(f64, u64)> = Vec::new();
    if let Some(path) = &a.memory_snapshot {
        let snap = twin_measured::snapshot::read_snapshot(path)?;
        let device = snap
            .devices
            .iter()
            .max_by_key(|d| d.peak_allocated_bytes)
            .with_context(|| format!("{}: the snapshot holds no device", path.display()))?;
        measured.peak_allocated_bytes = Some(device.peak_allocated_bytes);
        measured.at_peak = device
            .by_category_at_peak
            .iter()
            .map(|&(c, bytes)| {
                use twin_measured::snapshot::MemoryCategory as C;
                let kind = match c {
                    C::Weights => "weights",
                    C::Gradients => "grads",
                    C::OptimizerState => "optimizer",
                    C::Activations | C::Temporaries => "activations",
                    C::Unknown => "other",
                };
                (kind.to_string(), bytes)
            })
            .collect();
        reserved = Some(device.peak_reserved_bytes);
        measured_timeline = device
            .timeline
            .iter()
            .map(|p| (p.time_us as f64, p.allocated_bytes))
            .collect();
    }
    let mut cmp = compare_classes(&predicted, &measured, reserved);
    if !measured_timeline.is_empty() {
        cmp.memory_timeline =
            memory_timeline(&staged.schedule, &result, a.rank, &measured_timeline);
    }
    if traces.len() > 1 {
        // Every rank's last step (or the one asked for), as the bubble of a pipeline.
        let mut idle = Vec::with_capacity(traces.len());
        for t in &traces {
            let n = a.measured_step.unwrap_or(t.steps.len().saturating_sub(1));
            let b = kineto::breakdown(t, n)?;
            if b.step_ns > 0 {
                idle.push(b.idle_ns as f64 / b.step_ns as f64);
            }
        }
        if !idle.is_empty() {
            let measured = idle.iter().sum::<f64>() / idle.len() as f64;
            cmp.bubble_fraction = Some([result.bubble_fraction(), measured]);
        }
    }
    match a.format {
        Format::Json => println!(
            "{}",
            twin_sim::json::document_with_layout(
                "verify-measured",
                twin_sim::json::Layout::of(&scenario),
                &cmp
            )?
        ),
        Format::Text => {
            println!(
                "measured      {} (rank {}, step {} of {}, {} kernels)",
                trace_path.display(),
                a.rank,
                step,
                steps.max(1),
                b.kernels
            );
            print!("{}", cmp.to_text());
        }
    }
    let mut violations = Vec::new();
    if let Some(max) = a.max_step_time_error {
        if cmp.step_time_error.abs() > max {
            violations.push(format!(
                "step time error {:+.1}% exceeds {:.1}%",
                100.0 * cmp.step_time_error,
                100.0 * max
            ));
        }
    }
    if let (Some(max), Some(e)) = (a.max_peak_memory_error, cmp.peak_allocated_error) {
        if e.abs() > max {
            violations.push(format!(
                "peak allocated error {:+.1}% exceeds {:.1}%",
                100.0 * e,
                100.0 * max
            ));
        }
    }
    for v in &violations {
        eprintln!("verify failed: {v}");
    }
    Ok(ExitCode::from(u8::from(!violations.is_empty())))
}
