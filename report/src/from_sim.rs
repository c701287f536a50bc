//! twin's results as the report's data: a simulation (headline, per-stage timeline and
//! memory from its trace, goodput against the checkpoint interval from its horizon), a sweep
//! (its layouts and ranking) and a step verification (predicted against measured). Each
//! section takes one representative rank per pipeline stage: the lowest rank of the stage
//! that the trace holds.

use crate as rep;
use std::collections::BTreeMap;
use twin_sim::faults::{self, HorizonReport, JobFacts};
use twin_sim::plan::Plan;
use twin_sim::scenario::Scenario;
use twin_sim::schedule::{MemCategory, OpKind, Schedule, Stream};
use twin_sim::simulation::Simulation;
use twin_sim::sweep::{Objective, SweepResult};
use twin_sim::trace::Trace;
use twin_sim::verify::Comparison;

/// Layouts the report lists as `--set` lines.
pub const TOP_LAYOUTS: usize = 10;

/// One executed op of a rank, as the timeline reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSpan {
    pub start_ns: u64,
    pub end_ns: u64,
    /// On the compute stream (communication, I/O otherwise).
    pub compute: bool,
}

/// The ops of each rank in `trace` that take part in the timeline (allocations and frees
/// left out), by rank.
pub fn ops_by_rank(trace: &Trace, schedule: &Schedule) -> BTreeMap<u32, Vec<OpSpan>> {
    let mut out: BTreeMap<u32, Vec<OpSpan>> = BTreeMap::new();
    for e in &trace.events {
        let kind = schedule.get_op(e.rank, e.op).map(|o| &o.kind);
        if matches!(kind, Some(OpKind::Alloc { .. } | OpKind::Free { .. })) {
            continue;
        }
        out.entry(e.rank).or_default().push(OpSpan {
            start_ns: e.start_ns,
            end_ns: e.end_ns.max(e.start_ns),
            compute: e.stream == Stream::Compute,
        });
    }
    out
}

/// The lowest rank of each pipeline stage among `ranks`: (stage, rank), by stage.
pub fn representatives(ranks: impl Iterator<Item = u32>, plan: &Plan) -> Vec<(u32, u32)> {
    let mut by_stage: BTreeMap<u32, u32> = BTreeMap::new();
    for r in ranks {
        let e = by_stage.entry(plan.stage_of(r)).or_insert(r);
        *e = (*e).min(r);
    }
    by_stage.into_iter().collect()
}

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

/// Bytes in the largest binary unit (KiB to GiB) that keeps the figure at least 1.
fn gib(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1_048_576 => format!("{:.1} KiB", b / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", b / 1_048_576.0),
        _ => format!("{:.1} GiB", b / 1_073_741_824.0),
    }
}

fn figure(label: &str, value: String) -> rep::Figure {
    rep::Figure {
        label: label.to_string(),
        value,
    }
}

/// The report of one `twin simulate`: the headline, the timeline and memory of each stage's
/// representative rank (when the prediction kept a trace), and goodput against the checkpoint
/// interval (when it ran a horizon).
pub fn simulation_report(sim: &Simulation, scenario: &Scenario, plan: &Plan) -> rep::Report {
    let p = &sim.prediction;
    let r = &p.report;
    let par = &scenario.parallel;
    // Seconds from one second on, milliseconds below.
    let (scale, unit) = if r.step_time_s >= 1.0 {
        (1.0, "s")
    } else {
        (1e3, "ms")
    };
    let step = match sim.step_time_ci95_s {
        Some([lo, hi]) => format!(
            "{:.3} {unit} (95% CI {:.3}\u{2013}{:.3} {unit})",
            r.step_time_s * scale,
            lo * scale,
            hi * scale
        ),
        None => format!("{:.3} {unit}", r.step_time_s * scale),
    };
    let mut headline = vec![
        figure("scenario", r.scenario.clone()),
        figure(
            "GPUs",
            format!(
                "{} \u{00d7} {} ({} micro batches)",
                r.world, r.gpu, r.microbatches
            ),
        ),
        figure(
            "layout",
            format!(
                "tp={} pp={} dp={} cp={} ep={} vpp={}, {}",
                par.tp,
                par.pp,
                par.dp,
                par.cp,
                par.ep,
                par.vpp,
                par.schedule.as_str()
            ),
        ),
        figure("step time", step),
        figure(
            "throughput",
            format!(
                "{:.0} tokens/s ({:.0} per GPU)",
                r.tokens_per_s, r.tokens_per_s_per_gpu
            ),
        ),
        figure("MFU / HFU", format!("{} / {}", pct(r.mfu), pct(r.hfu))),
        figure("bubble", pct(r.bubble_fraction)),
        figure("exposed communication", pct(r.exposed_comm_fraction)),
        figure(
            "peak memory per GPU",
            format!(
                "{} of {} usable: {}",
                gib(r.peak_memory_bytes),
                gib(r.usable_bytes),
                if r.fits { "fits" } else { "does NOT fit" }
            ),
        ),
    ];
    if let Some(h) = &sim.horizon {
        headline.push(figure(
            "goodput",
            format!(
                "{:.4} (95% CI {:.4}\u{2013}{:.4}) over {:.0} h",
                h.goodput.mean, h.goodput.ci_low, h.goodput.ci_high, h.horizon_hours
            ),
        ));
        headline.push(figure(
            "ETTR",
            format!(
                "{:.4} (95% CI {:.4}\u{2013}{:.4})",
                h.ettr.mean, h.ettr.ci_low, h.ettr.ci_high
            ),
        ));
    }
    let mut notes = r.notes.clone();
    if let Some(o) = &r.oom {
        notes.push(format!(
            "Out of memory: rank {} exceeds the usable HBM by {} at {:.3} ms{}.",
            o.rank,
            gib(o.over_bytes),
            o.time_s * 1e3,
            o.op_name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ));
    }
    let (timeline, memory) = match &p.result.trace {
        Some(trace) => {
            let ops = ops_by_rank(trace, &p.staged.schedule);
            let ranks = ops
                .keys()
                .copied()
                .chain(trace.memory.iter().map(|m| m.rank));
            let reps = representatives(ranks, &p.staged.plan);
            (
                Some(timeline_section(&ops, &reps, p.result.step_time_ns)),
                Some(memory_section(sim, trace, &reps)),
            )
        }
        None => (None, None),
    };
    let goodput = sim.horizon.as_ref().map(|h| {
        let job = JobFacts::from_scenario(
            scenario,
            plan,
            (r.step_time_s * 1e9).round() as u64,
            r.exposed_comm_fraction,
        );
        goodput_section(h, &job)
    });
    rep::Report {
        title: format!("twin report: {}", r.scenario),
        headline,
        notes,
        timeline,
        memory,
        verify: None,
        sweep: None,
        goodput,
        variability: sim.variability.as_ref().map(|v| rep::StepSpread {
            deterministic_ns: v.deterministic_step_time_ns,
            samples_ns: v.each.iter().map(|x| x.step_time_ns).collect(),
            p50_ns: v.step_time_ns.p50,
            p95_ns: v.step_time_ns.p95,
            p99_ns: v.step_time_ns.p99,
        }),
    }
}

/// Union of intervals, as sorted disjoint pairs.
fn union(mut iv: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
    for (a, b) in iv {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn covers(sorted: &[(u64, u64)], t: u64) -> bool {
    let i = sorted.partition_point(|&(a, _)| a <= t);
    i > 0 && sorted[i - 1].1 > t
}

/// Splits [0, step_ns) into compute (a compute op running), exposed communication (no
/// compute, some other op running) and idle, merging neighbours of one kind. An op's whole
/// span counts, also where it waited for a shared CPU core.
pub fn stage_spans(ops: &[OpSpan], step_ns: u64) -> Vec<rep::Span> {
    let compute = union(
        ops.iter()
            .filter(|s| s.compute)
            .map(|s| (s.start_ns, s.end_ns))
            .collect(),
    );
    let busy = union(ops.iter().map(|s| (s.start_ns, s.end_ns)).collect());
    let mut cuts: Vec<u64> = compute
        .iter()
        .chain(&busy)
        .flat_map(|&(a, b)| [a, b])
        .filter(|&t| t < step_ns)
        .chain([0, step_ns])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out: Vec<rep::Span> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let kind = if covers(&compute, a) {
            rep::SpanKind::Compute
        } else if covers(&busy, a) {
            rep::SpanKind::ExposedComm
        } else {
            rep::SpanKind::Idle
        };
        match out.last_mut() {
            Some(last) if last.kind == kind && last.end_ns == a => last.end_ns = b,
            _ => out.push(rep::Span {
                start_ns: a,
                end_ns: b,
                kind,
            }),
        }
    }
    out
}

fn timeline_section(
    ops: &BTreeMap<u32, Vec<OpSpan>>,
    reps: &[(u32, u32)],
    step_ns: u64,
) -> rep::Timeline {
    rep::Timeline {
        step_time_ns: step_ns,
        stages: reps
            .iter()
            .filter_map(|&(stage, rank)| {
                Some(rep::StageTimeline {
                    stage,
                    rank,
                    spans: stage_spans(ops.get(&rank)?, step_ns),
                })
            })
            .collect(),
    }
}

fn memory_section(sim: &Simulation, trace: &Trace, reps: &[(u32, u32)]) -> rep::Memory {
    let p = &sim.prediction;
    rep::Memory {
        categories: MemCategory::ALL
            .iter()
            .map(|c| c.name().to_string())
            .collect(),
        hbm_bytes: p.report.usable_bytes,
        step_time_ns: p.result.step_time_ns,
        stages: reps
            .iter()
            .map(|&(stage, rank)| {
                let over_hbm = p.result.ranks.get(rank as usize).and_then(|s| {
                    let op = s.over_capacity_op?;
                    Some(rep::OverHbm {
                        time_ns: s.over_capacity_time_ns,
                        op: p
                            .staged
                            .schedule
                            .get_op(rank, op)
                            .map_or_else(|| format!("op {op}"), |o| o.name()),
                    })
                });
                rep::StageMemory {
                    stage,
                    rank,
                    samples: memory_of(trace, rank),
                    over_hbm,
                }
            })
            .collect(),
    }
}

/// The memory samples of `rank`, in time order.
fn memory_of(trace: &Trace, rank: u32) -> Vec<rep::MemoryPoint> {
    let mut v: Vec<rep::MemoryPoint> = trace
        .memory
        .iter()
        .filter(|m| m.rank == rank)
        .map(|m| rep::MemoryPoint {
            time_ns: m.time_ns,
            bytes: m.bytes.to_vec(),
        })
        .collect();
    v.sort_by_key(|m| m.time_ns);
    v
}

fn ci(e: faults::Estimate) -> rep::Ci {
    rep::Ci {
        mean: e.mean,
        low: e.ci_low,
        high: e.ci_high,
    }
}

/// Trials of each interval of the checkpoint sweep, as `faults::simulate_horizon` runs it.
const SWEEP_SEEDS_MAX: u32 = 200;

/// Goodput and ETTR at each checkpoint interval of the horizon's sweep. The horizon's sweep
/// keeps goodput only; its trials are run again here (same model, seeds and intervals, so
/// the same goodput) to take ETTR from them too.
pub fn goodput_section(h: &HorizonReport, job: &JobFacts) -> rep::Goodput {
    let model = faults::Model::new(&h.config, job);
    let seeds = h.config.seeds.clamp(1, SWEEP_SEEDS_MAX);
    let points = h
        .sweep
        .iter()
        .map(|p| {
            let m = model.with_interval(p.interval_ns);
            let outs = faults::monte_carlo(&m, h.config.seed, seeds, None);
            let of = |f: fn(&faults::Outcome, u64) -> f64| {
                faults::Estimate::of(outs.iter().map(|o| f(o, m.horizon_ns)))
            };
            rep::GoodputPoint {
                interval_steps: p.interval_steps,
                goodput: ci(of(faults::goodput)),
                ettr: Some(ci(of(faults::ettr))),
            }
        })
        .collect();
    rep::Goodput {
        points,
        configured_steps: h.checkpoint_interval_steps,
        best_steps: h.best_interval_steps,
        young_steps: h.young_interval_steps,
        daly_steps: h.daly_interval_steps,
        horizon_hours: h.horizon_hours,
        seeds,
    }
}

fn objective_name(o: Objective) -> &'static str {
    match o {
        Objective::TokensPerS => "tokens/s",
        Objective::Mfu => "MFU",
        Objective::StepTime => "step time",
        Objective::Memory => "peak memory",
    }
}

/// The report of a sweep: its counts and the Pareto plot of the simulated layouts, with the
/// best [`TOP_LAYOUTS`] as `--set` lines. `hbm_bytes` is the usable HBM per GPU, if known.
pub fn sweep_report(result: &SweepResult, hbm_bytes: Option<u64>) -> rep::Report {
    let simulated: Vec<&twin_sim::sweep::SweepRow> =
        result.rows.iter().filter(|r| r.simulated).collect();
    let points: Vec<rep::SweepPoint> = simulated
        .iter()
        .map(|r| rep::SweepPoint {
            label: format!(
                "tp={} pp={} dp={} cp={} ep={} vpp={} mb={}",
                r.tp, r.pp, r.dp, r.cp, r.ep, r.vpp, r.micro_batch
            ),
            set_line: r
                .overrides
                .iter()
                .map(|o| format!("--set {o}"))
                .collect::<Vec<_>>()
                .join(" "),
            tokens_per_s: r.tokens_per_s,
            peak_bytes: r.peak_memory_bytes,
            fits: r.fits,
        })
        .collect();
    let top: Vec<usize> = result
        .ranked()
        .into_iter()
        .filter_map(|best| simulated.iter().position(|r| r.index == best.index))
        .take(TOP_LAYOUTS)
        .collect();
    let pareto: Vec<usize> = result
        .pareto
        .iter()
        .filter_map(|i| simulated.iter().position(|r| r.index == *i))
        .collect();
    let fitting = result.rows.iter().filter(|r| r.fits).count();
    let headline = vec![
        figure("scenario", result.scenario.clone()),
        figure("layouts", result.layouts.to_string()),
        figure(
            "simulated",
            format!(
                "{} ({} did not fit by a lower bound of memory)",
                simulated.len(),
                result.rows.len() - simulated.len()
            ),
        ),
        figure("fit in memory", fitting.to_string()),
        figure(
            "invalid / failed",
            format!("{} / {}", result.invalid, result.failed),
        ),
        figure("pruned by bound", result.pruned.to_string()),
    ];
    rep::Report {
        title: format!("twin sweep: {}", result.scenario),
        headline,
        sweep: (!points.is_empty()).then(|| rep::Sweep {
            points,
            top,
            pareto,
            objective: objective_name(result.objective).into(),
            hbm_bytes,
        }),
        ..Default::default()
    }
}

fn error_text(e: Option<f64>) -> String {
    e.map_or_else(|| "\u{2013}".into(), |e| format!("{:+.1}%", e * 100.0))
}

/// The report of `twin verify step`: predicted against measured step time, exposed
/// communication and each op group's time, with a table of every compared figure.
pub fn verify_report(title: &str, c: &Comparison) -> rep::Report {
    let pair = |label: &str, p: f64, m: f64| rep::VerifyPair {
        label: label.to_string(),
        predicted_s: p,
        measured_s: m,
    };
    let mut times = vec![pair(
        "step",
        c.step_time_predicted_s,
        c.step_time_measured_s,
    )];
    if c.exposed_comm_predicted_s > 0.0 && c.exposed_comm_measured_s > 0.0 {
        times.push(pair(
            "exposed comm",
            c.exposed_comm_predicted_s,
            c.exposed_comm_measured_s,
        ));
    }
    times.extend(
        c.op_groups
            .iter()
            .map(|g| pair(&g.group, g.predicted_s, g.measured_s)),
    );
    let ms = |s: f64| format!("{:.3} ms", s * 1e3);
    let mut rows = vec![
        vec![
            "step time".into(),
            ms(c.step_time_predicted_s),
            ms(c.step_time_measured_s),
            error_text(Some(c.step_time_error)),
        ],
        vec![
            "bubble".into(),
            pct(c.bubble_fraction_predicted),
            pct(c.bubble_fraction_measured),
            format!("{:+.1} points", c.bubble_fraction_error_points),
        ],
        vec![
            "exposed communication".into(),
            pct(c.exposed_comm_fraction_predicted),
            pct(c.exposed_comm_fraction_measured),
            format!("{:+.1} points", c.exposed_comm_error_points),
        ],
    ];
    for m in &c.peak_memory {
        rows.push(vec![
            format!("peak memory, rank {}", m.rank),
            gib(m.predicted_bytes),
            gib(m.measured_bytes),
            error_text(Some(m.error)),
        ]);
    }
    for g in &c.op_groups {
        rows.push(vec![
            format!("{} ({} ops)", g.group, g.ops),
            ms(g.predicted_s),
            ms(g.measured_s),
            error_text(g.error),
        ]);
    }
    rep::Report {
        title: title.to_string(),
        headline: vec![
            figure(
                "step time",
                format!(
                    "predicted {}, measured {} ({})",
                    ms(c.step_time_predicted_s),
                    ms(c.step_time_measured_s),
                    error_text(Some(c.step_time_error))
                ),
            ),
            figure(
                "peak memory error (worst rank)",
                error_text(Some(c.peak_memory_error)),
            ),
        ],
        notes: vec!["Errors are (measured - predicted) / measured.".into()],
        verify: Some(rep::Verify {
            times,
            table: rep::Table {
                header: vec![
                    "figure".into(),
                    "predicted".into(),
                    "measured".into(),
                    "error".into(),
                ],
                rows,
            },
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(compute: bool, a: u64, b: u64) -> OpSpan {
        OpSpan {
            start_ns: a,
            end_ns: b,
            compute,
        }
    }

    #[test]
    fn spans_split_the_step_into_compute_exposed_comm_and_idle() {
        // Compute 0-10 and 30-40; a transfer 5-20 (hidden until 10, exposed 10-20); another
        // 35-45 (exposed 40-45); idle 20-30 and 45-50.
        let ops = vec![
            op(true, 0, 10),
            op(false, 5, 20),
            op(true, 30, 40),
            op(false, 35, 45),
        ];
        let got: Vec<(u64, u64, rep::SpanKind)> = stage_spans(&ops, 50)
            .iter()
            .map(|s| (s.start_ns, s.end_ns, s.kind))
            .collect();
        use rep::SpanKind::*;
        assert_eq!(
            got,
            vec![
                (0, 10, Compute),
                (10, 20, ExposedComm),
                (20, 30, Idle),
                (30, 40, Compute),
                (40, 45, ExposedComm),
                (45, 50, Idle),
            ]
        );
    }

    fn small() -> (Scenario, twin_sim::Prediction) {
        let s = twin_sim::testing::small_scenario(2, 4, 2, 1);
        let opts = twin_sim::PredictOptions {
            trace: true,
            reproducible: true,
            collapse: true,
            ..Default::default()
        };
        let p = twin_sim::predict(&s, &opts).expect("the small scenario simulates");
        (s, p)
    }

    #[test]
    fn spans_of_the_engine_add_up_to_its_rank_statistics() {
        let (_, p) = small();
        let trace = p.result.trace.as_ref().expect("a trace was asked for");
        let ops = ops_by_rank(trace, &p.staged.schedule);
        let reps = representatives(ops.keys().copied(), &p.staged.plan);
        assert_eq!(
            reps.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![0, 1, 2, 3],
            "one representative per stage"
        );
        for (_, rank) in reps {
            let spans = stage_spans(&ops[&rank], p.result.step_time_ns);
            let sum = |k: rep::SpanKind| -> u64 {
                spans
                    .iter()
                    .filter(|s| s.kind == k)
                    .map(|s| s.end_ns - s.start_ns)
                    .sum()
            };
            let stats = &p.result.ranks[rank as usize];
            assert_eq!(
                (
                    sum(rep::SpanKind::Compute),
                    sum(rep::SpanKind::ExposedComm),
                    sum(rep::SpanKind::Idle)
                ),
                (stats.compute_busy_ns, stats.comm_exposed_ns, stats.idle_ns),
                "rank {rank}"
            );
        }
    }

    #[test]
    fn a_simulation_report_has_a_row_per_stage_and_memory_peaking_as_the_engine_says() {
        let (s, p) = small();
        let plan = p.staged.plan.clone();
        let sim = Simulation {
            prediction: p,
            step_time_ci95_s: None,
            horizon: None,
            variability: None,
            time_to_train: None,
            time_by_class: None,
        };
        let r = simulation_report(&sim, &s, &plan);
        let (t, m) = (r.timeline.unwrap(), r.memory.unwrap());
        assert_eq!(t.stages.len(), 4);
        assert_eq!(m.stages.len(), 4);
        assert!(r.goodput.is_none(), "no horizon, no goodput");
        for st in &m.stages {
            let peak = st.samples.iter().map(rep::MemoryPoint::total_bytes).max();
            let stats = &sim.prediction.result.ranks[st.rank as usize];
            assert_eq!(peak, Some(stats.peak_memory_bytes), "stage {}", st.stage);
        }
    }

    #[test]
    fn goodput_rerun_matches_the_horizons_own_sweep_and_adds_ettr() {
        let (s, p) = small();
        let r = &p.report;
        let step_ns = (r.step_time_s * 1e9).round() as u64;
        let job = JobFacts::from_scenario(&s, &p.staged.plan, step_ns, r.exposed_comm_fraction);
        let config = twin_sim::scenario::FaultConfig {
            seeds: 20,
            ..Default::default()
        };
        let h = faults::simulate_horizon(&config, &job, None).expect("the horizon simulates");
        let g = goodput_section(&h, &job);
        assert!(!g.points.is_empty());
        assert_eq!(g.points.len(), h.sweep.len());
        for (a, b) in g.points.iter().zip(&h.sweep) {
            assert_eq!(a.interval_steps, b.interval_steps);
            assert_eq!(a.goodput.mean, b.goodput.mean, "same trials, same goodput");
            let e = a.ettr.expect("ETTR at every interval");
            assert!(e.low <= e.mean && e.mean <= e.high && (0.0..=1.0).contains(&e.mean));
        }
        assert_eq!(g.best_steps, h.best_interval_steps);
    }

    #[test]
    fn the_first_op_over_hbm_is_marked_on_its_stage() {
        let opts = twin_sim::PredictOptions {
            trace: true,
            reproducible: true,
            collapse: true,
            ..Default::default()
        };
        let mut s = twin_sim::testing::small_scenario(1, 2, 1, 1);
        let fits = twin_sim::predict(&s, &opts).expect("simulates");
        // Usable HBM at half the smaller stage peak: both stages cross it.
        let least = fits.result.ranks.iter().map(|r| r.peak_memory_bytes).min();
        s.cluster.gpu.hbm_bytes = s.cluster.gpu.driver_reserved_bytes + least.unwrap() / 2;
        let p = twin_sim::predict(&s, &opts).expect("simulates");
        assert!(p.result.ranks.iter().all(|r| r.over_capacity_op.is_some()));
        let oom = p.report.oom.clone().expect("the step runs out of memory");
        let plan = p.staged.plan.clone();
        let sim = Simulation {
            prediction: p,
            step_time_ci95_s: None,
            horizon: None,
            variability: None,
            time_to_train: None,
            time_by_class: None,
        };
        let m = simulation_report(&sim, &s, &plan).memory.unwrap();
        assert_eq!(m.hbm_bytes, s.cluster.gpu.usable_bytes());
        let stage = m
            .stages
            .iter()
            .find(|st| st.rank == oom.rank)
            .expect("the OOM rank is a representative");
        let over = stage.over_hbm.as_ref().expect("marked");
        assert_eq!(Some(&over.op), oom.op_name.as_ref());
        // At that time live memory is above HBM, and before it never was.
        let live_at = |t: u64| {
            stage
                .samples
                .iter()
                .rfind(|x| x.time_ns <= t)
                .map_or(0, rep::MemoryPoint::total_bytes)
        };
        assert!(live_at(over.time_ns) > m.hbm_bytes);
        assert!(stage
            .samples
            .iter()
            .filter(|x| x.time_ns < over.time_ns)
            .all(|x| x.total_bytes() <= m.hbm_bytes));
    }
}
