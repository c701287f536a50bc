//! Branch and bound: the lower bounds never exceed what the engine simulates, and a pruned
//! search finds exactly the best layouts an exhaustive one finds, on random small spaces.

use super::*;
use crate::rng::Rng;
use crate::scenario::{Fp8Recipe, PipelineSchedule};

fn small() -> ScenarioSource {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/small.toml");
    ScenarioSource::read(&path).unwrap()
}

/// small.toml with `[model]` lines added after `vocab` and `[training]` lines after
/// `optimizer`, and an FP8 rate on its GPU (so the search tries FP8).
fn variant(model: &str, training: &str) -> ScenarioSource {
    let mut src = small();
    for needle in [
        "vocab = 1024\n",
        "optimizer = \"adam\"\n",
        "peak_bf16_flops_per_s = 100e12,",
    ] {
        assert!(src.text.contains(needle), "{needle}");
    }
    src.text = src
        .text
        .replace("vocab = 1024\n", &format!("vocab = 1024\n{model}"))
        .replace(
            "optimizer = \"adam\"\n",
            &format!("optimizer = \"adam\"\n{training}"),
        )
        .replace(
            "peak_bf16_flops_per_s = 100e12,",
            "peak_bf16_flops_per_s = 100e12, peak_fp8_flops_per_s = 180e12,",
        );
    src
}

/// Bases that exercise the bound's parts: per-layer segments and buckets (megatron-core),
/// per-parameter gradients and their accumulation (hf), FSDP units (torchtitan), a
/// data-parallel stream that dominates the step (slow), DeepSpeed's ZeRO-3 module buffers,
/// a mixture of experts with skewed routing and the all-to-all overlap, chunk granularity,
/// and a machine a bundled profile prices.
fn bases() -> Vec<(&'static str, ScenarioSource)> {
    vec![
        ("megatron-core", variant("", "")),
        ("chunk granularity", {
            let mut s = variant("", "");
            s.text = s
                .text
                .replace("granularity = \"layer\"", "granularity = \"chunk\"");
            s
        }),
        ("hf", {
            // Accelerate runs no pipeline, and tensor parallelism only under FSDP.
            let mut s = variant("", "framework = \"hf\"\n");
            s.text = s
                .text
                .replace("pp = 2\ndp = 2\nzero = 0", "pp = 1\ndp = 4\nzero = 3");
            s
        }),
        ("torchtitan", {
            // FSDP2 under tensor parallelism.
            let mut s = variant("", "framework = \"torchtitan\"\n");
            s.text = s.text.replace("zero = 0\n", "zero = 3\n");
            s
        }),
        ("slow data parallelism", {
            // Data-parallel traffic dominates: small buckets over a slow inter-node link.
            let mut s = variant("", "grad_bucket_bytes = 300000\n");
            assert!(s.text.contains("bandwidth_gb_per_s = 12.5"));
            s.text = s
                .text
                .replace("bandwidth_gb_per_s = 12.5", "bandwidth_gb_per_s = 0.5");
            s
        }),
        ("deepspeed", {
            // DeepSpeed accounting: ZeRO-3's module buffers (its pipeline engine refuses
            // ZeRO-2 and 3, so the base has none).
            let mut s = variant("", "framework = \"deepspeed\"\n");
            s.text = s
                .text
                .replace("pp = 2\ndp = 2\nzero = 0", "pp = 1\ndp = 4\nzero = 3");
            s
        }),
        ("moe", {
            let mut s = variant(
                "experts = 8\ntop_k = 2\n",
                "moe_routing = { imbalance = 1.5 }\n",
            );
            s.text = s.text.replace("zero = 0\n", "zero = 0\nep = 2\n");
            s
        }),
        ("a DGX H100, priced with its bundled profile", {
            // Every sweep prices a layout on a machine a bundled profile describes with it
            // (`Pricing::Machine`), FP8 curves and attention curves included.
            let mut s = variant("", "");
            let start = s.text.find("gpus_per_node = 4").unwrap();
            let end = s.text.find("[parallel]").unwrap();
            s.text.replace_range(
                start..end,
                "node = \"dgx-h100\"\ngpu = \"h100-sxm-80gb\"\n\n",
            );
            s
        }),
    ]
}

/// A space of the small scenario's layouts with every axis the bound must handle.
fn space() -> SearchSpace {
    SearchSpace {
        micro_batches: vec![1, 2],
        recompute: vec!["none", "selective", "full"],
        zero: vec![0, 1, 2, 3],
        vpp: vec![1, 2],
        cp: vec![1, 2],
        max_tp: Some(4),
        schedules: vec![
            PipelineSchedule::OneFOneB,
            PipelineSchedule::ZeroBubble,
            PipelineSchedule::DualPipe,
        ],
        fp8_recipes: vec![Fp8Recipe::Tensorwise],
        tp_comm_overlap: vec![false, true],
        dp_overlap: vec![true, false],
        offload: vec!["none", "optimizer"],
        hsdp_nodes: vec![1],
    }
}

/// Every valid layout of every base: the step bound is at most the simulated step, and the
/// memory bound at most the simulated peak. Some layouts of each base are simulated, and the
/// bounds are not trivially zero.
#[test]
fn bounds_never_exceed_the_simulated_step_or_peak() {
    for (name, src) in bases() {
        let parsed = src.parse().unwrap();
        let base = src.resolve(&[]).unwrap();
        let layouts = search(&base, &space());
        let mut checked = 0;
        for o in layouts.iter().step_by(5) {
            let Ok((s, plan)) = parsed.resolve_planned(o) else {
                continue;
            };
            let b = sizes::lower_bounds(&s, &plan, &Pricing::Machine, u64::MAX, true).unwrap();
            // The bound without the pass chain and the data-parallel stream, which the search
            // takes first, is lower, and its memory bound the same.
            let cheap = sizes::lower_bounds(&s, &plan, &Pricing::Machine, u64::MAX, false).unwrap();
            assert!(cheap.step_ns <= b.step_ns, "{name}: {o:?}");
            assert_eq!(cheap.memory_bytes, b.memory_bytes, "{name}: {o:?}");
            let Outcome::Row(row) = evaluate_planned(&s, &plan, &Pricing::Machine, 0, o.clone())
            else {
                panic!("{name}: {o:?} failed");
            };
            if !row.simulated {
                continue;
            }
            let step_ns = (row.step_time_s * 1e9).round() as u64;
            assert!(
                b.step_ns <= step_ns,
                "{name}: bound {} > step {step_ns} for {o:?}",
                b.step_ns
            );
            assert!(b.step_ns > 0, "{name}: {o:?}");
            assert!(
                b.memory_bytes <= row.peak_memory_bytes,
                "{name}: memory bound {} > peak {} for {o:?}",
                b.memory_bytes,
                row.peak_memory_bytes
            );
            checked += 1;
        }
        assert!(checked > 20, "{name}: only {checked} layouts checked");
    }
}

/// `keep` best layouts by branch and bound equal an exhaustive search's, on 20 random small
/// spaces (random values of each axis, a random base, objective and `keep`), and the bound
/// prunes some layouts.
#[test]
fn a_pruned_search_finds_the_exhaustive_winners() {
    let bases = bases();
    let mut rng = Rng::new(2026, 0);
    let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
    let mut pruned = 0;
    for trial in 0..20 {
        let (name, src) = &bases[pick(bases.len())];
        let full = space();
        // A random non-empty subset of each axis (at least its first value).
        fn subset<T: Clone>(v: &[T], mask: usize) -> Vec<T> {
            let kept: Vec<T> = v
                .iter()
                .enumerate()
                .filter(|(i, _)| *i == 0 || mask & (1 << i) != 0)
                .map(|(_, x)| x.clone())
                .collect();
            kept
        }
        let sp = SearchSpace {
            micro_batches: subset(&full.micro_batches, pick(4)),
            recompute: subset(&full.recompute, pick(8)),
            zero: subset(&full.zero, pick(8)),
            vpp: subset(&full.vpp, pick(4)),
            cp: subset(&full.cp, pick(4)),
            schedules: subset(&full.schedules, pick(4)),
            tp_comm_overlap: subset(&full.tp_comm_overlap, pick(4)),
            dp_overlap: subset(&full.dp_overlap, pick(4)),
            ..full
        };
        let objective = [
            Objective::TokensPerS,
            Objective::StepTime,
            Objective::Memory,
        ][pick(3)];
        let keep = 1 + pick(3);
        let base = src.resolve(&[]).unwrap();
        let layouts = LayoutSet::listed(search(&base, &sp));
        let machine = &Pricing::Machine;
        let exhaustive = run_set(src, name, &layouts, objective, None, machine, &|_| {});
        let bounded = run_set(src, name, &layouts, objective, Some(keep), machine, &|_| {});
        let best = |r: &SweepResult| -> Vec<(usize, u64)> {
            r.ranked()
                .iter()
                .take(keep)
                .map(|r| (r.index, (r.step_time_s * 1e9) as u64))
                .collect()
        };
        assert!(
            !best(&exhaustive).is_empty(),
            "trial {trial} ({name}): nothing fits"
        );
        assert_eq!(
            best(&bounded),
            best(&exhaustive),
            "trial {trial} ({name}, {objective:?}, keep {keep})"
        );
        assert_eq!(
            bounded.invalid + bounded.failed + bounded.pruned + bounded.rows.len(),
            exhaustive.invalid + exhaustive.failed + exhaustive.rows.len(),
            "trial {trial}: every layout counted once"
        );
        pruned += bounded.pruned;
    }
    assert!(pruned > 0);
}

/// The Pareto front keeps exactly the fitting simulated layouts no other beats on both
/// tokens/s and memory, fastest first.
#[test]
fn the_pareto_front_keeps_the_layouts_nothing_beats_on_both() {
    let row = |index: usize, tokens_per_s: f64, peak: u64, fits: bool, simulated: bool| {
        let s = small().resolve(&[]).unwrap();
        SweepRow {
            tokens_per_s,
            step_time_s: 1.0 / tokens_per_s,
            peak_memory_bytes: peak,
            fits,
            simulated,
            ..SweepRow::fill(index, Vec::new(), &s)
        }
    };
    let mut r = SweepResult::empty("t", Objective::TokensPerS, 7);
    r.rows = vec![
        row(0, 100.0, 50, true, true),  // fastest
        row(1, 90.0, 60, true, true),   // slower and larger than 0: dominated
        row(2, 80.0, 30, true, true),   // front
        row(3, 80.0, 30, true, true),   // equal to 2: the first by index is kept
        row(4, 200.0, 10, false, true), // does not fit
        row(5, 70.0, 30, true, true),   // as large as 2 and slower: dominated
        row(6, 10.0, 5, true, true),    // smallest
    ];
    r.finish();
    assert_eq!(r.pareto, vec![0, 2, 6]);
}

/// A shard's count and positions agree, and the shards of a search cover it once.
#[test]
fn layout_set_shards_cover_the_search_once() {
    let src = small();
    let base = src.resolve(&[]).unwrap();
    let set = LayoutSet::listed(search(&base, &space()));
    let total = set.total();
    let mut seen = vec![0u32; total];
    for i in 0..4 {
        let shard = LayoutSet {
            shard: Some(Shard { index: i, count: 4 }),
            ..set.clone()
        };
        assert_eq!(shard.len(), shard.positions().count());
        for p in shard.positions() {
            seen[p] += 1;
            assert_eq!(shard.overrides(p), set.overrides(p));
        }
    }
    assert!(seen.iter().all(|&n| n == 1));
}

/// Under `tp_comm_overlap` on a machine whose profile slows compute beside communication, the
/// bound prices each pass as the emitter runs it (GEMMs cut into chunks on the SMs the
/// overlap leaves) and counts the least slowdown its hidden chunks cause. On one stage, where
/// little else is left out, it comes within 3% of the simulated step (priced as the work holds
/// the ops, without the slowdown, it was 35-61% below on these layouts: this model's GEMMs
/// are small, and a chunk of them runs far less efficiently).
#[test]
fn the_bound_prices_tp_overlapped_passes_as_they_run() {
    let (_, src) = bases().pop().unwrap();
    let parsed = src.parse().unwrap();
    for (tp, dp) in [(8, 1), (4, 2), (2, 4)] {
        let o: Vec<String> = vec![
            format!("parallel.tp={tp}"),
            "parallel.pp=1".into(),
            format!("parallel.dp={dp}"),
            "training.tp_comm_overlap=true".into(),
            "training.precision=\"fp8\"".into(),
            "training.fp8_recipe=\"tensorwise\"".into(),
        ];
        let (s, plan) = parsed.resolve_planned(&o).unwrap();
        let b = sizes::lower_bounds(&s, &plan, &Pricing::Machine, u64::MAX, true).unwrap();
        let Outcome::Row(row) = evaluate_planned(&s, &plan, &Pricing::Machine, 0, o.clone()) else {
            panic!("{o:?} failed");
        };
        let step_ns = (row.step_time_s * 1e9).round() as u64;
        let ratio = b.step_ns as f64 / step_ns as f64;
        assert!(b.step_ns <= step_ns, "{o:?}");
        assert!(
            ratio >= 0.97,
            "tp {tp}: bound {} of step {step_ns}",
            b.step_ns
        );
    }
}
