//! Report tests: a snapshot of the text report for a hand-made pipeline, the out-of-memory
//! verdict, the stable JSON interface, and the arithmetic behind MFU and throughput.

use super::*;
use crate::engine::testkit::{pipeline_with_memory, FixedCost, Pipeline, PipelineMemory};
use crate::engine::{simulate, SimOptions};
use crate::testing::small_scenario;

const GIB_BYTES: u64 = 1 << 30;

/// FLOP rate of the test cost model: 150 TFLOP/s.
const FLOPS_PER_NS: u64 = 150_000;

/// tp 2, pp 4 on 8 A100s, 8 micro batches of 1F1B; forward 2 ms, backward 4 ms per stage at
/// 150 TFLOP/s, 20 GiB of weights and 2 GiB of activations per micro batch.
fn report_for(hbm_bytes: u64) -> Report {
    let (sc, plan, s, r) = simulated(hbm_bytes);
    Report::build(&sc, &plan, &s, &r, 0.125)
}

/// The scenario, plan, schedule and simulation behind [`report_for`].
fn simulated(hbm_bytes: u64) -> (Scenario, Plan, Schedule, SimResult) {
    let mut sc = small_scenario(2, 4, 1, 8);
    sc.cluster.gpu.hbm_bytes = hbm_bytes;
    let plan = Plan::new(&sc).unwrap();
    let mem = PipelineMemory {
        weights_bytes: 20 * GIB_BYTES,
        activation_bytes: 2 * GIB_BYTES,
    };
    let mut s = pipeline_with_memory(&plan, Pipeline::OneFOneB, 8, 2_000_000, 4_000_000, 0, mem);
    for op in s.programs.iter_mut().flat_map(|p| p.ops.iter_mut()) {
        if let crate::schedule::OpKind::Compute(c) = &mut op.kind {
            c.flops *= FLOPS_PER_NS;
        }
    }
    let cost = FixedCost {
        flops_per_ns: FLOPS_PER_NS,
        ..FixedCost::default()
    };
    let r = simulate(&plan, &s, &cost, &SimOptions::default()).unwrap();
    (sc, plan, s, r)
}

/// Sweep rows take their figures from [`Summary::of`], reports from the same function: the
/// two agree to the bit, and the out-of-memory rank is the first with the highest peak.
#[test]
fn summary_has_the_reports_headline_figures() {
    for hbm_bytes in [80_000_000_000, 25 * GIB_BYTES] {
        let (sc, plan, s, r) = simulated(hbm_bytes);
        let sum = Summary::of(&sc, &plan, &r);
        let rep = Report::build(&sc, &plan, &s, &r, 0.0);
        let figures = |x: &Report| {
            [
                x.step_time_s,
                x.tokens_per_s,
                x.tokens_per_s_per_gpu,
                x.model_tflops_per_gpu,
                x.hardware_tflops_per_gpu,
                x.mfu,
                x.hfu,
                x.bubble_fraction,
                x.exposed_comm_fraction,
            ]
            .map(f64::to_bits)
        };
        let summary_figures = [
            sum.step_time_s,
            sum.tokens_per_s,
            sum.tokens_per_s_per_gpu,
            sum.model_tflops_per_gpu,
            sum.hardware_tflops_per_gpu,
            sum.mfu,
            sum.hfu,
            sum.bubble_fraction,
            sum.exposed_comm_fraction,
        ]
        .map(f64::to_bits);
        assert_eq!(figures(&rep), summary_figures);
        assert_eq!(
            (sum.peak_memory_bytes, sum.fits, sum.hbm_bytes),
            (rep.peak_memory_bytes, rep.fits, rep.hbm_bytes)
        );
        // Stage 0 has the highest peak (ranks 0 and 1 alike): the first of them is named.
        assert_eq!(rep.oom.map(|o| o.rank), (!sum.fits).then_some(0));
    }
}

#[test]
fn text_report_snapshot() {
    insta::assert_snapshot!(report_for(80_000_000_000).to_text());
}

#[test]
fn out_of_memory_report_snapshot() {
    let r = report_for(25 * GIB_BYTES);
    assert!(!r.fits);
    let oom = r.oom.as_ref().unwrap();
    // Stage 0 (ranks 0 and 1) keeps 4 micro batches alive: 20 + 4 * 2 = 28 GiB.
    assert_eq!(oom.rank, 0);
    assert_eq!(oom.over_bytes, 3 * GIB_BYTES);
    insta::assert_snapshot!(r.to_text());
}

/// The verdict compares the peak against the usable bytes (the driver's share left out) and
/// names both; a run that measured its peak (no op crossed a capacity) names no op.
#[test]
fn verdict_is_against_the_usable_bytes_and_names_only_known_ops() {
    // Stage 0 peaks at 28 GiB: it fits 29 GiB of HBM, not 29 GiB less 2 GiB for the driver.
    let (mut sc, plan, s, mut r) = simulated(29 * GIB_BYTES);
    sc.cluster.gpu.driver_reserved_bytes = 2 * GIB_BYTES;
    let rep = Report::build(&sc, &plan, &s, &r, 0.0);
    assert!(!rep.fits);
    assert_eq!(
        (rep.hbm_bytes, rep.usable_bytes),
        (29 * GIB_BYTES, 27 * GIB_BYTES)
    );
    assert_eq!(rep.oom.as_ref().unwrap().over_bytes, GIB_BYTES);
    assert!(
        rep.verdict().contains("peak 28.00 GiB of 27.00 GiB usable"),
        "{}",
        rep.verdict()
    );
    assert!(rep.verdict().contains(" at op "), "{}", rep.verdict());
    for rank in &mut r.ranks {
        rank.peak_op = None;
        rank.over_capacity_op = None;
    }
    let measured = Report::build(&sc, &plan, &s, &r, 0.0);
    let v = measured.verdict();
    assert_eq!(
        v,
        "OUT OF MEMORY by 1.00 GiB on rank 0 (peak 28.00 GiB of 27.00 GiB usable)"
    );
    assert!(!measured.to_json().contains("op_name"));
}

#[test]
fn headline_numbers_follow_from_the_simulation() {
    let r = report_for(80_000_000_000);
    // Step = (m + p - 1)(f + b) = 11 * 6 ms.
    assert!((r.step_time_s - 0.066).abs() < 1e-12);
    // small_scenario: seq_len 1024, global batch 8.
    assert!((r.tokens_per_s - 8.0 * 1024.0 / 0.066).abs() < 1e-6);
    assert!((r.tokens_per_s_per_gpu * 8.0 - r.tokens_per_s).abs() < 1e-6);
    // Each rank does 8 * 6 ms of model work at 150 TFLOP/s in a 66 ms step.
    let per_gpu = 150e12 * 8.0 * 6e-3 / 0.066;
    assert!((r.model_tflops_per_gpu - per_gpu / 1e12).abs() < 1e-9);
    assert!((r.mfu - per_gpu / 312e12).abs() < 1e-12);
    assert_eq!(
        r.mfu, r.hfu,
        "no recompute: hardware FLOPs equal model FLOPs"
    );
    assert!((r.bubble_fraction - 3.0 / 11.0).abs() < 1e-12);
    assert_eq!(r.exposed_comm_fraction, 0.0);
    assert_eq!(r.peak_memory_bytes, 28 * GIB_BYTES);
    assert_eq!(r.hbm_free_bytes, 80_000_000_000 - 28 * GIB_BYTES);
    // Four stages, two identical ranks each.
    assert_eq!(r.ranks.len(), 4);
    assert_eq!(r.ranks[1].ranks.as_deref(), Some("2-3"));
    assert_eq!(r.ranks[1].rank, None);
    assert_eq!(r.ranks[3].memory_breakdown.activations, 2 * GIB_BYTES);
}

#[test]
fn json_has_the_stable_top_level_fields_and_is_deterministic() {
    let a = report_for(80_000_000_000).without_wall_time();
    let b = report_for(80_000_000_000).without_wall_time();
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.sim_wall_s, 0.0);
    let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
    let obj = v.as_object().unwrap();
    for key in [
        "step_time_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
        "mfu",
        "hfu",
        "bubble_fraction",
        "exposed_comm_fraction",
        "peak_memory_bytes",
        "fits",
        "events",
        "sim_wall_s",
        "ranks",
    ] {
        assert!(obj.contains_key(key), "missing {key}");
    }
    // Field order in the text is declaration order (serde_json's Value sorts its keys, so
    // check positions in the text itself).
    let json = a.to_json();
    let pos = |k: &str| json.find(&format!("\"{k}\"")).unwrap();
    assert!(pos("step_time_s") < pos("tokens_per_s") && pos("tokens_per_s") < pos("mfu"));
    assert!(pos("weights") < pos("grads") && pos("activations") < pos("reserved"));
    let entry = &v["ranks"][0];
    assert_eq!(entry["ranks"], "0-1");
    assert_eq!(entry["stage"], 0);
    assert!(entry.get("rank").is_none());
    let bd = entry["memory_breakdown"].as_object().unwrap();
    let keys: Vec<&String> = bd.keys().collect();
    assert_eq!(
        keys,
        [
            "activations",
            "buffers",
            "grads",
            "optimizer",
            "reserved",
            "weights"
        ]
    );
    assert_eq!(bd["weights"], 20 * GIB_BYTES);
    assert!(v.get("oom").is_none());
    // An even split is not reported.
    assert!(v.get("layer_partition").is_none());
}

/// A split twin derived is in both reports: 10 layers on pp 3 with vpp 2 (10 % 6 = 4,
/// 12 % 6 = 0), so the embedding and the loss take a slot each: 1, 2, 2, 2, 2, 1.
#[test]
fn a_derived_split_is_reported_in_text_and_json() {
    let mut sc = small_scenario(1, 3, 1, 6);
    sc.model.layers = 10;
    sc.parallel.vpp = 2;
    sc.parallel.schedule = crate::scenario::PipelineSchedule::Interleaved1F1B;
    let plan = Plan::new(&sc).unwrap();
    let s = crate::schedule::generate(&sc, &plan).unwrap();
    let r = simulate(&plan, &s, &FixedCost::default(), &SimOptions::default()).unwrap();
    let rep = Report::build(&sc, &plan, &s, &r, 0.0);
    let v: serde_json::Value = serde_json::from_str(&rep.to_json()).unwrap();
    assert_eq!(
        v["layer_partition"],
        serde_json::json!({
            "rule": "slots",
            "embedding": true,
            "loss": true,
            "automatic": true,
            "layers_per_virtual_stage": [1, 2, 2, 2, 2, 1],
            "layers_per_stage": [3, 4, 3],
        })
    );
    let text = rep.to_text();
    assert!(
        text.contains(
            "layer split     1, 2 x4, 1 layers per virtual stage: embedding and loss each \
             counted as a layer (automatic: the layers do not divide pp*vpp)\n"
        ),
        "{text}"
    );
}

#[test]
fn rank_ranges_compress_runs() {
    assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    assert_eq!(rank_ranges(&[3]), "3");
    assert_eq!(rank_ranges(&[]), "");
}

#[test]
fn thousands_are_grouped() {
    assert_eq!(group_thousands(1_234_567.8), "1,234,568");
    assert_eq!(group_thousands(999.0), "999");
    assert_eq!(group_thousands(f64::NAN), "0");
}

#[test]
fn empty_result_gives_zeros_not_nan() {
    let sc = small_scenario(1, 1, 1, 1);
    let plan = Plan::new(&sc).unwrap();
    let s = Schedule {
        programs: vec![Default::default()],
        program_of: vec![0],
    };
    let r = simulate(&plan, &s, &FixedCost::default(), &SimOptions::default()).unwrap();
    let rep = Report::build(&sc, &plan, &s, &r, 0.0);
    assert_eq!(rep.tokens_per_s, 0.0);
    assert_eq!(rep.mfu, 0.0);
    assert!(rep.fits);
    assert!(!rep.to_json().contains("null"));
}

/// A report says when the optimizer's update runs an operation at a time, what that costs
/// against a fused kernel and which key says so; a fused update says nothing.
#[test]
fn an_unfused_optimizer_is_named_with_its_bytes() {
    use crate::scenario::framework::OptimizerKernel;
    let (mut sc, plan, s, r) = simulated(80 * GIB_BYTES);
    let note = |rep: &Report| {
        rep.notes
            .iter()
            .find(|n| n.starts_with("the optimizer step"))
            .cloned()
    };
    assert_eq!(note(&Report::build(&sc, &plan, &s, &r, 0.0)), None);
    sc.training.optimizer_kernel = Some(OptimizerKernel::Foreach);
    let rep = Report::build(&sc, &plan, &s, &r, 0.0);
    let n = note(&rep).unwrap_or_default();
    // bf16 over fp32 masters: norm 4 + AdamW's passes 80 + the copy back 6, against the
    // norm and one fused pass (4 + 30).
    assert!(
        n.contains("(foreach, training.optimizer_kernel): 90 bytes a parameter where a fused kernel moves 34"),
        "{n}"
    );
    assert!(rep.to_text().contains("note            the optimizer step"));
}

/// A report of an offloading scenario says which host figures priced the offload and that
/// they are peaks (a note line in text, an entry of `notes` in JSON). One without offload
/// says nothing.
#[test]
fn an_offloading_scenario_is_told_how_its_host_time_is_priced() {
    let (mut sc, plan, s, r) = simulated(80 * GIB_BYTES);
    let note = |rep: &Report| {
        rep.notes
            .iter()
            .find(|n| n.starts_with("training.offload moves"))
            .cloned()
    };
    assert_eq!(note(&Report::build(&sc, &plan, &s, &r, 0.0)), None);
    for offload in [
        crate::scenario::Offload::Optimizer,
        crate::scenario::Offload::Params,
    ] {
        sc.training.offload = offload;
        let rep = Report::build(&sc, &plan, &s, &r, 0.0);
        let n = note(&rep).unwrap_or_default();
        assert!(
            n.contains("lower bound") && n.contains("GB/s per GPU each way"),
            "{n}"
        );
        assert!(rep
            .to_text()
            .contains("note            training.offload moves"));
    }
}
