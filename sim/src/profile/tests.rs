//! Tests of profile loading, its errors, and the bundled profiles against published figures.

use super::*;
use crate::cost::{bus_bandwidth, Algorithm, Analytic, CostModel, GroupShape};
use crate::plan::{GroupKind, Plan};
use crate::scenario::ErrorKind;
use crate::schedule::{CollectiveKind, MemCategory};
use crate::testing::small_scenario;

const A100: &str = include_str!("../../../scenarios/profiles/a100-dgx.toml");
const H100: &str = include_str!("../../../scenarios/profiles/h100-dgx.toml");
const B200: &str = include_str!("../../../scenarios/profiles/b200-dgx.toml");

fn a100() -> Profile {
    parse_str(A100, "a100-dgx.toml").unwrap()
}

fn h100() -> Profile {
    parse_str(H100, "h100-dgx.toml").unwrap()
}

fn b200() -> Profile {
    parse_str(B200, "b200-dgx.toml").unwrap()
}

#[test]
fn bundled_profiles_load_with_provenance() {
    for p in [a100(), h100(), b200()] {
        assert!(!p.name.is_empty());
        for param in [
            &p.sm_count,
            &p.peak_bf16_flops_per_s,
            &p.hbm_bandwidth_bytes_per_s,
            &p.gemm_max_efficiency,
            &p.intra.efficiency,
            &p.inter.bandwidth_bytes_per_s,
        ] {
            assert!(!param.reference.is_empty(), "{} lacks a reference", p.name);
        }
    }
    assert_eq!(a100().gpu, "a100-sxm-80gb");
    assert_eq!(a100().peak_bf16_flops_per_s.source, Source::Datasheet);
    assert_eq!(a100().gemm_max_efficiency.source, Source::Fitted);
    assert!(a100().nvls_efficiency.is_none());
    assert!(h100().nvls_efficiency.is_some());
    assert_eq!(h100().inter.efficiency.ci95, Some([0.92, 0.96]));
}

/// The A100 profile carries the fitted defaults' GEMM curve and memory efficiency: the
/// default model and the profile agree but for the attention curves and the links'
/// efficiencies.
#[test]
fn a100_profile_equals_the_default_model() {
    let s = small_scenario(8, 1, 1, 1);
    let from_profile = Analytic::from_profile(&s, &a100());
    let mut default = Analytic::new(&s);
    // Profiles state the link efficiencies per machine; the default's inter-node figure is
    // the NDR one (0.94), the A100 profile's the HDR one (0.96).
    default.links.network_efficiency = 0.96;
    // FlashAttention-2 reaches a larger share of an A100's peak than of an H100's, whose
    // figures the default curves are: the profile raises the plateaus and keeps the shape.
    let a = from_profile
        .attention
        .expect("a GPU profile prices attention");
    let d = crate::cost::DEFAULT_ATTENTION;
    assert!(a.flash.forward.max_efficiency > d.flash.forward.max_efficiency);
    assert_eq!(a.flash.forward.keys_half, d.flash.forward.keys_half);
    default.attention = Some(a);
    // The profile states the SM count (which prices SMs a TP overlap reserves); the default
    // model has none.
    assert_eq!(from_profile.sm_count, Some(108));
    default.sm_count = Some(108);
    assert_eq!(from_profile, default);
}

#[test]
fn a100_collectives_match_published_busbw() {
    let s = small_scenario(8, 1, 4, 1);
    let model = Analytic::from_profile(&s, &a100());
    let bytes = 1u64 << 30;
    // network.toml: 8x A100 NVSwitch all_reduce 230 GB/s.
    let plan = Plan::new(&s).unwrap();
    let tp = plan.group(plan.group_of(0, GroupKind::Tp));
    let t = model.collective_ns(CollectiveKind::AllReduce, tp, bytes, 1);
    let node = bus_bandwidth(CollectiveKind::AllReduce, 8, bytes, t) / 1e9;
    assert!((node - 230.0).abs() / 230.0 <= 0.10, "node busbw {node}");
    // network.toml: multi-node DGX A100 all_reduce 192 GB/s (4 nodes x 8 GPUs).
    let shape = GroupShape {
        ranks: 32,
        nodes: 4,
        max_per_node: 8,
    };
    let e = model
        .links
        .estimate(CollectiveKind::AllReduce, shape, 4 * bytes);
    let multi = bus_bandwidth(CollectiveKind::AllReduce, 32, 4 * bytes, e.time_ns) / 1e9;
    assert!(
        (multi - 192.0).abs() / 192.0 <= 0.10,
        "multi-node busbw {multi}"
    );
}

#[test]
fn h100_nvls_matches_published_busbw() {
    let tiers = h100().tiers();
    let shape = GroupShape {
        ranks: 8,
        nodes: 1,
        max_per_node: 8,
    };
    let bytes = 1u64 << 30;
    let e = tiers.estimate(CollectiveKind::AllReduce, shape, bytes);
    assert_eq!(e.algorithm, Algorithm::Nvls);
    let bus = bus_bandwidth(CollectiveKind::AllReduce, 8, bytes, e.time_ns) / 1e9;
    // network.toml: NVLS 480 GB/s for messages of 1 GB or more.
    assert!((bus - 480.0).abs() / 480.0 <= 0.10, "{bus}");
    // Forcing the ring gives the published ring figure (~370 GB/s) instead.
    let mut ring = tiers.clone();
    ring.algorithm = Some(Algorithm::Ring);
    let r = ring.estimate(CollectiveKind::AllReduce, shape, bytes);
    assert_eq!(r.algorithm, Algorithm::Ring);
    let bus = bus_bandwidth(CollectiveKind::AllReduce, 8, bytes, r.time_ns) / 1e9;
    assert!((bus - 370.0).abs() / 370.0 <= 0.10, "{bus}");
}

/// The B200 profile's GEMM plateaus are the H100 profile's times the B200/H200 ratio of the
/// sustained matmul rates one public benchmark measured on both (mamf-finder.py's MSMF,
/// stas00/ml-engineering@082816f9: bf16 1,456.3 of 2,250 and 708.5 of 989; fp8 2,795.7 of
/// 4,500 and 1,288.7 of 1,979), each family of FP8 curve by the fp8 ratio; the curves' shapes
/// are the H100 profile's.
#[test]
fn b200_plateaus_are_the_h100_fit_scaled_by_the_published_sustained_rates() {
    let (b, h) = (b200(), h100());
    assert_eq!(b.gpu, "b200-sxm-180gb");
    let bf16_ratio = (1456.3 / 2250.0) / (708.5 / 989.0);
    let fp8_ratio = (2795.7 / 4500.0) / (1288.7 / 1979.0);
    let close = |b: &Param, h: &Param, ratio: f64, what: &str| {
        let want = h.value * ratio;
        assert!(
            (b.value - want).abs() < 5e-4,
            "{what}: {} against {want:.4}",
            b.value
        );
    };
    close(
        &b.gemm_max_efficiency,
        &h.gemm_max_efficiency,
        bf16_ratio,
        "bf16",
    );
    let families = |p: &Profile| {
        [
            p.gemm_fp8.clone(),
            p.gemm_fp8_fast_accum.clone(),
            p.gemm_fp8_rowwise.clone(),
            p.gemm_fp8_blockwise.clone(),
        ]
    };
    for (i, (bc, hc)) in families(&b).into_iter().zip(families(&h)).enumerate() {
        let (bc, hc) = (bc.unwrap(), hc.unwrap());
        close(
            &bc.max_efficiency,
            &hc.max_efficiency,
            fp8_ratio,
            &format!("fp8 curve {i}"),
        );
        assert_eq!(bc.k_half.value, hc.k_half.value);
        assert_eq!(bc.ramp_ns.value, hc.ramp_ns.value);
    }
    assert_eq!(b.gemm_k_half.value, h.gemm_k_half.value);
    // What the bf16 plateau sustains on a B200: the published rate within 1%.
    let rate = b.gemm_max_efficiency.value * b.peak_bf16_flops_per_s.value;
    assert!((rate / 1456.3e12 - 1.0).abs() < 0.01, "{rate:e}");
}

#[test]
fn h100_profile_is_faster_than_a100_on_the_same_work() {
    let s = small_scenario(8, 1, 1, 1);
    let op = crate::schedule::ComputeOp {
        attention: None,
        phase: crate::schedule::Phase::Forward,
        dtype: crate::scenario::Precision::Bf16,
        gemms: vec![crate::schedule::Gemm {
            dtype: None,
            m: 8192,
            n: 8192,
            k: 8192,
            count: 1,
            batch: 1,
        }]
        .into(),
        flops: 2 * 8192u64.pow(3),
        memory_bytes: 1 << 30,
        kernels: 4,
        sms_reserved: 0,
        host_syncs: Default::default(),
    };
    let a = Analytic::from_profile(&s, &a100()).compute_ns(0, &op);
    let h = Analytic::from_profile(&s, &h100()).compute_ns(0, &op);
    assert!(h * 2 < a, "{h} vs {a}");
}

#[test]
fn gpu_mismatch_is_reported() {
    let s = small_scenario(8, 1, 1, 1);
    assert!(check_matches(&s, &a100()).is_ok());
    let e = check_matches(&s, &h100()).unwrap_err();
    assert!(e.to_string().contains("h100-sxm-80gb"), "{e}");
    let err = crate::predict_with(&s, &Default::default(), Some(&h100()));
    assert!(err.is_err());
}

fn error_of(text: &str) -> crate::scenario::ScenarioError {
    parse_str(text, "p.toml").unwrap_err()
}

#[test]
fn errors_are_located() {
    let bad = A100.replace("value = 0.75,", "value = 1.5,");
    assert_ne!(bad, A100);
    let e = error_of(&bad);
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "gemm.max_efficiency.value");
    let line = A100
        .lines()
        .position(|l| l.starts_with("max_efficiency"))
        .unwrap() as u32
        + 1;
    assert_eq!(e.line, Some(line));
    assert!(e.to_string().starts_with(&format!("p.toml:{line}:")), "{e}");

    let e = error_of(&A100.replace("source = \"fitted\"", "source = \"guessed\""));
    assert_eq!(e.key, "gemm.max_efficiency.source");
    assert!(e.allowed.contains("datasheet"));

    let e = error_of(&A100.replace("[kernel]", "[kernel]\nlaunch_us = 1"));
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert!(e.line.is_some());

    let e = error_of(&A100.replace("algorithm = \"auto\"", "algorithm = \"butterfly\""));
    assert_eq!(e.key, "network.algorithm");

    let e = error_of(&H100.replace("ci95 = [0.92, 0.96]", "ci95 = [0.95, 0.96]"));
    assert_eq!(e.key, "network.inter.efficiency.ci95");

    let e = error_of(
        &A100
            .replace("[memory]\n", "")
            .replace("efficiency = { value = 0.90", "x = { value = 0.90"),
    );
    assert!(
        matches!(e.kind, ErrorKind::Missing | ErrorKind::UnknownKey),
        "{e}"
    );
    let e = error_of("name = ");
    assert_eq!(e.kind, ErrorKind::Syntax);

    // ramp_per_product is a plain boolean.
    let bad = A100.replace("tile_n = {", "ramp_per_product = 1\ntile_n = {");
    assert_ne!(bad, A100);
    let e = error_of(&bad);
    assert!(e.line.is_some(), "{e}");
    assert!(e.to_string().contains("bool"), "{e}");
}

#[test]
fn memory_spill_keys_come_in_pairs() {
    let spill = "[memory]\nspill_bytes = { value = 16777216, source = \"fitted\", ref = \"t\" }\nspill_efficiency = { value = 0.3, source = \"fitted\", ref = \"t\" }\n";
    let both = A100.replace("[memory]\n", spill);
    assert_ne!(both, A100);
    let p = parse_str(&both, "p.toml").unwrap();
    assert_eq!(
        p.memory_spill_bytes.as_ref().map(|b| b.value),
        Some(16777216.0)
    );
    let cost = crate::cost::Analytic::from_profile(&crate::testing::small_scenario(1, 1, 1, 1), &p);
    assert_eq!(
        cost.memory_spill,
        Some(crate::cost::MemorySpill {
            bytes: 16777216,
            efficiency: 0.3
        })
    );
    let one = both.replace(
        "spill_efficiency = { value = 0.3, source = \"fitted\", ref = \"t\" }\n",
        "",
    );
    let e = error_of(&one);
    assert_eq!(e.key, "memory.spill_bytes");
    assert!(e.to_string().contains("spill_efficiency"), "{e}");
    assert!(e.line.is_some());
    // Absent: one bandwidth.
    assert!(a100().memory_spill_bytes.is_none());
}

#[test]
fn memory_cold_efficiency_is_read_checked_and_costed() {
    assert!(a100().memory_cold_efficiency.is_none());
    let key = "cold_efficiency = { value = 0.25, source = \"fitted\", ref = \"t\" }\n";
    let text = A100.replace("[memory]\n", &format!("[memory]\n{key}"));
    assert_ne!(text, A100);
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(
        p.memory_cold_efficiency.as_ref().map(|c| c.value),
        Some(0.25)
    );
    let cost = crate::cost::Analytic::from_profile(&crate::testing::small_scenario(1, 1, 1, 1), &p);
    assert_eq!(cost.memory_cold_efficiency, Some(0.25));
    // A fraction: 0 and above 1 are refused, naming the key.
    for bad in ["0.0", "1.5"] {
        let e = error_of(&text.replace("value = 0.25", &format!("value = {bad}")));
        assert!(e.key.starts_with("memory.cold_efficiency"), "{e}");
        assert!(e.line.is_some());
    }
}

#[test]
fn gemm_operand_keys_come_in_pairs_and_reach_the_curve() {
    assert!(a100().gemm_operand_bytes_per_s.is_none());
    assert!(a100().gemm_curve().operands.is_none());
    let keys = "operand_bytes_per_s = { value = 1.5e10, source = \"fitted\", ref = \"t\" }\noperand_cache_bytes = { value = 2097152, source = \"datasheet\", ref = \"t\" }\n";
    let text = A100.replace("[gemm]\n", &format!("[gemm]\n{keys}"));
    assert_ne!(text, A100);
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(
        p.gemm_curve().operands,
        Some(crate::cost::OperandLoad {
            bytes_per_s: 1.5e10,
            cache_bytes: 2 << 20,
            pack_bytes_per_s: None,
            cold_ramp_ns: 0,
        })
    );
    let e = error_of(&text.replace("value = 1.5e10", "value = 0.0"));
    assert!(e.key.starts_with("gemm.operand_bytes_per_s"), "{e}");
    assert!(e.line.is_some());
    let one = text.replace(
        "operand_cache_bytes = { value = 2097152, source = \"datasheet\", ref = \"t\" }\n",
        "",
    );
    let e = error_of(&one);
    assert_eq!(e.key, "gemm.operand_bytes_per_s");
    assert!(e.to_string().contains("operand_cache_bytes"), "{e}");
}

#[test]
fn gemm_packing_keys_come_in_a_pair_and_only_with_the_operand_keys() {
    let operand = "operand_bytes_per_s = { value = 1.5e10, source = \"fitted\", ref = \"t\" }\noperand_cache_bytes = { value = 2097152, source = \"datasheet\", ref = \"t\" }\n";
    let pack = "pack_bytes_per_s = { value = 4e10, source = \"fitted\", ref = \"t\" }\ncold_ramp_ns = { value = 1500, source = \"fitted\", ref = \"t\" }\n";
    let text = A100.replace("[gemm]\n", &format!("[gemm]\n{operand}{pack}"));
    let p = parse_str(&text, "p.toml").unwrap();
    let o = p.gemm_curve().operands.unwrap();
    assert_eq!((o.pack_bytes_per_s, o.cold_ramp_ns), (Some(4e10), 1500));
    // One of the pair alone names the other.
    let e = error_of(&text.replace(
        "cold_ramp_ns = { value = 1500, source = \"fitted\", ref = \"t\" }\n",
        "",
    ));
    assert_eq!(e.key, "gemm.pack_bytes_per_s");
    assert!(e.to_string().contains("cold_ramp_ns"), "{e}");
    // Packing without the operand keys is refused, with its line.
    let e = error_of(&A100.replace("[gemm]\n", &format!("[gemm]\n{pack}")));
    assert_eq!(e.key, "gemm.pack_bytes_per_s");
    assert!(
        e.line.is_some() && e.to_string().contains("operand_bytes_per_s"),
        "{e}"
    );
    // A non-positive packing rate is refused like any rate.
    let e = error_of(&text.replace("value = 4e10", "value = 0"));
    assert!(e.key.starts_with("gemm.pack_bytes_per_s"), "{e}");
}

#[test]
fn ramp_per_product_is_read_and_defaults_to_per_call() {
    assert!(!a100().gemm_ramp_per_product && !a100().gemm_curve().ramp_per_product);
    let host = parse_str(
        include_str!("../../../scenarios/profiles/host-example.toml"),
        "host-example.toml",
    )
    .unwrap();
    assert!(host.gemm_ramp_per_product && host.gemm_curve().ramp_per_product);
}

#[test]
fn loading_a_missing_file_is_an_io_error() {
    let e = load(std::path::Path::new("/nonexistent/profile.toml")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
}

#[test]
fn optional_sections_and_fit_quality() {
    // The bundled profile without its own [fit] section.
    let base = A100.split("# Quality of the fit").next().unwrap();
    let text = format!(
        "{base}\n[overlap]\ncompute_slowdown = {{ value = 0.1, source = \"fitted\", ref = \"run 7\", ci95 = [0.05, 0.15] }}\n\
         [checkpoint]\nbandwidth_bytes_per_s = {{ value = 4e9, source = \"published\", ref = \"x\" }}\n\
         [fit]\nmethod = \"least squares\"\ndata = \"sweep\"\nsamples = 40\nrms_relative_error = 0.03\nmax_relative_error = 0.08\n"
    );
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(
        p.overlap_compute_slowdown.as_ref().map(|o| o.value),
        Some(0.1)
    );
    // The cost model carries it to the engine; without the key it is 0.
    let s1 = small_scenario(8, 1, 1, 1);
    assert_eq!(
        Analytic::from_profile(&s1, &p).overlap_compute_slowdown(),
        0.1
    );
    assert_eq!(
        Analytic::from_profile(&s1, &a100()).overlap_compute_slowdown(),
        0.0
    );
    assert_eq!(p.fit.as_ref().map(|f| f.samples), Some(40));
    let s = small_scenario(8, 1, 1, 1);
    assert_eq!(
        Analytic::from_profile(&s, &p).checkpoint_bandwidth_bytes_per_s,
        4e9
    );
}

#[test]
fn host_keys_alloc_rate_and_provenance() {
    let base = A100.split("# Quality of the fit").next().unwrap();
    let text = base.replace(
        "[memory]\n",
        "[memory]\nalloc_bytes_per_s = { value = 2e9, source = \"fitted\", ref = \"bench\" }\n",
    ) + "\n[host]\ncores = { value = 2, source = \"fitted\", ref = \"nproc\" }\n\
         [provenance]\nmachine = \"ci box\"\ndate = \"2026-11-22\"\nbackend = \"host\"\n";
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(p.host_cores.as_ref().map(|c| c.value), Some(2.0));
    assert_eq!(
        p.provenance.get("machine").map(String::as_str),
        Some("ci box")
    );
    assert_eq!(p.provenance.len(), 3);
    let s = small_scenario(1, 1, 1, 1);
    let cost = Analytic::from_profile(&s, &p);
    assert_eq!(cost.host_cores(), Some(2));
    // 1 GB at 2 GB/s.
    assert_eq!(
        cost.alloc_ns(MemCategory::Activations, 1_000_000_000),
        500_000_000
    );
    // Model state is allocated once per run, not per step.
    assert_eq!(cost.alloc_ns(MemCategory::Weights, 1_000_000_000), 0);
    assert_eq!(cost.alloc_ns(MemCategory::Optimizer, 1_000_000_000), 0);
    // Without the keys: each rank its own device, allocations instant, p2p at the tier's
    // collective step latency.
    let plain = Analytic::from_profile(&s, &a100());
    assert_eq!(plain.host_cores(), None);
    assert_eq!(plain.alloc_ns(MemCategory::Activations, 1 << 30), 0);
    // Out of range: located errors.
    for bad in [
        "cores = { value = 0, source = \"fitted\", ref = \"x\" }",
        "cores = { value = 1.5, source = \"fitted\", ref = \"x\" }",
    ] {
        let t = base.to_string() + "\n[host]\n" + bad + "\n";
        let e = parse_str(&t, "p.toml").unwrap_err();
        assert_eq!(e.key, "host.cores.value", "{e}");
    }
}

#[test]
fn priced_allocs_take_time_in_the_engine() {
    let base = A100.split("# Quality of the fit").next().unwrap();
    let text = base.replace(
        "[memory]\n",
        "[memory]\nalloc_bytes_per_s = { value = 1e8, source = \"fitted\", ref = \"bench\" }\n",
    );
    let priced = parse_str(&text, "p.toml").unwrap();
    let s = small_scenario(1, 2, 1, 4);
    let opts = crate::PredictOptions {
        reproducible: true,
        ..Default::default()
    };
    let free = crate::predict_with(&s, &opts, Some(&a100())).unwrap();
    let slow = crate::predict_with(&s, &opts, Some(&priced)).unwrap();
    // Allocation time is neither compute nor communication: the step grows, and so does idle
    // time (bubble), while busy compute stays.
    assert!(slow.report.step_time_s > free.report.step_time_s);
    assert!(slow.report.bubble_fraction > free.report.bubble_fraction);
    let busy = |p: &crate::Prediction| {
        p.result
            .ranks
            .iter()
            .map(|r| r.compute_busy_ns)
            .sum::<u64>()
    };
    assert_eq!(busy(&slow), busy(&free));
    // Collapsing symmetric ranks stays exact with priced allocs.
    let collapsed = crate::predict_with(
        &small_scenario(2, 2, 2, 4),
        &crate::PredictOptions {
            collapse: true,
            ..opts.clone()
        },
        Some(&priced),
    )
    .unwrap();
    let full = crate::predict_with(&small_scenario(2, 2, 2, 4), &opts, Some(&priced)).unwrap();
    assert!(collapsed.result.collapsed);
    assert_eq!(collapsed.result.step_time_ns, full.result.step_time_ns);
}

#[test]
fn p2p_latency_overrides_the_tier_latency_for_p2p_only() {
    let text = A100.replacen(
        "efficiency = { value = 0.80,",
        "p2p_latency_ns = { value = 500, source = \"fitted\", ref = \"ping-pong\" }\nefficiency = { value = 0.80,",
        1,
    );
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(
        p.intra.p2p_latency_ns.as_ref().map(|l| l.value),
        Some(500.0)
    );
    assert!(p.inter.p2p_latency_ns.is_none());
    let s = small_scenario(4, 4, 1, 4);
    let plan = Plan::new(&s).unwrap();
    let with = Analytic::from_profile(&s, &p);
    let without = Analytic::from_profile(&s, &a100());
    // Ranks 0 and 4 share a node: 2.5 us less latency; ranks 4 and 8 do not: unchanged.
    let near = without.p2p_ns(&plan, 0, 4, 1 << 20) - with.p2p_ns(&plan, 0, 4, 1 << 20);
    assert_eq!(near, 2_500);
    assert_eq!(
        with.p2p_ns(&plan, 4, 8, 1 << 20),
        without.p2p_ns(&plan, 4, 8, 1 << 20)
    );
    // Collectives keep the tier latency.
    let g = plan.group(plan.group_of(0, GroupKind::Tp));
    assert_eq!(
        with.collective_ns(CollectiveKind::AllReduce, g, 1 << 20, 1),
        without.collective_ns(CollectiveKind::AllReduce, g, 1 << 20, 1)
    );
}

#[test]
fn p2p_bandwidth_overrides_the_tier_rate_for_p2p_only() {
    // 1 GB/s achieved for sends, against the A100 profile's NVLink line rate x efficiency.
    let text = A100.replacen(
        "efficiency = { value = 0.80,",
        "p2p_bandwidth_bytes_per_s = { value = 1e9, source = \"fitted\", ref = \"ping-pong\" }\nefficiency = { value = 0.80,",
        1,
    );
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(
        p.intra.p2p_bandwidth_bytes_per_s.as_ref().map(|b| b.value),
        Some(1e9)
    );
    assert!(p.inter.p2p_bandwidth_bytes_per_s.is_none());
    let s = small_scenario(4, 4, 1, 4);
    let plan = Plan::new(&s).unwrap();
    let with = Analytic::from_profile(&s, &p);
    let without = Analytic::from_profile(&s, &a100());
    // Within a node, 1 MiB moves at 1 GB/s on top of the unchanged latency: the difference
    // of two sizes is the bytes' time alone.
    let mib = 1u64 << 20;
    let slope_ns = with.p2p_ns(&plan, 0, 4, 2 * mib) - with.p2p_ns(&plan, 0, 4, mib);
    assert!(slope_ns.abs_diff(1_048_576) <= 1, "{slope_ns}");
    assert_eq!(
        with.p2p_ns(&plan, 0, 4, 0),
        without.p2p_ns(&plan, 0, 4, 0),
        "latency unchanged"
    );
    // Across nodes, and for collectives, nothing changes.
    assert_eq!(
        with.p2p_ns(&plan, 4, 8, mib),
        without.p2p_ns(&plan, 4, 8, mib)
    );
    let g = plan.group(plan.group_of(0, GroupKind::Tp));
    assert_eq!(
        with.collective_ns(CollectiveKind::AllReduce, g, mib, 1),
        without.collective_ns(CollectiveKind::AllReduce, g, mib, 1)
    );
}

#[test]
fn a_p2p_bandwidth_must_be_positive() {
    let text = A100.replacen(
        "efficiency = { value = 0.80,",
        "p2p_bandwidth_bytes_per_s = { value = 0, source = \"fitted\", ref = \"ping-pong\" }\nefficiency = { value = 0.80,",
        1,
    );
    let e = parse_str(&text, "p.toml").unwrap_err().to_string();
    assert!(e.contains("p2p_bandwidth_bytes_per_s"), "{e}");
}

#[test]
fn alloc_fixed_cost_and_op_overhead_price_the_runtimes_own_work() {
    let text = A100
        .replacen(
            "[kernel]\n",
            "[kernel]\nop_overhead_ns = { value = 700, source = \"fitted\", ref = \"op chain\" }\n",
            1,
        )
        .replacen(
            "[memory]\n",
            "[memory]\nalloc_bytes_per_s = { value = 1e9, source = \"fitted\", ref = \"alloc\" }\nalloc_fixed_ns = { value = 5000, source = \"fitted\", ref = \"alloc\" }\n",
            1,
        );
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(p.op_overhead_ns.as_ref().map(|o| o.value), Some(700.0));
    assert_eq!(
        p.memory_alloc_fixed_ns.as_ref().map(|o| o.value),
        Some(5000.0)
    );
    let s = small_scenario(4, 4, 1, 4);
    let plan = Plan::new(&s).unwrap();
    let with = Analytic::from_profile(&s, &p);
    let without = Analytic::from_profile(&s, &a100());
    // 1 MB at 1 GB/s is 1 ms, plus the fixed cost and the op overhead.
    assert_eq!(
        with.alloc_ns(MemCategory::Activations, 1_000_000),
        1_000_000 + 5_000 + 700
    );
    // Model state is allocated once per run: only the op overhead.
    assert_eq!(with.alloc_ns(MemCategory::Weights, 1_000_000), 700);
    // A fixed cost alone (a caching allocator, as the host backend's is) prices
    // every step buffer the same, whatever its bytes.
    let fixed_only = parse_str(
        &text.replacen(
            "alloc_bytes_per_s = { value = 1e9, source = \"fitted\", ref = \"alloc\" }\n",
            "",
            1,
        ),
        "p.toml",
    )
    .unwrap();
    assert!(fixed_only.memory_alloc_bytes_per_s.is_none());
    let fixed_only = Analytic::from_profile(&s, &fixed_only);
    for bytes in [1, 1_000_000, 1 << 30] {
        assert_eq!(
            fixed_only.alloc_ns(MemCategory::Activations, bytes),
            5_000 + 700
        );
    }
    assert_eq!(with.free_ns(), 700);
    assert_eq!(without.free_ns(), 0);
    assert_eq!(
        with.p2p_ns(&plan, 0, 4, 1 << 20),
        without.p2p_ns(&plan, 0, 4, 1 << 20) + 700
    );
    let g = plan.group(plan.group_of(0, GroupKind::Tp));
    assert_eq!(
        with.collective_ns(CollectiveKind::AllReduce, g, 1 << 20, 2),
        without.collective_ns(CollectiveKind::AllReduce, g, 1 << 20, 2) + 700
    );
    assert_eq!(
        with.checkpoint_ns(1 << 20),
        without.checkpoint_ns(1 << 20) + 700
    );
}

#[test]
fn interruptions_come_as_a_pair_and_make_the_prediction_a_median() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let one = with_host(
        "cores = { value = 2, source = \"fitted\", ref = \"t\" }\ninterruptions_per_s = { value = 400, source = \"fitted\", ref = \"t\" }",
    );
    let e = parse_str(&one, "p.toml").unwrap_err().to_string();
    assert!(e.contains("host.interruption_mean_ns is missing"), "{e}");
    let both = with_host(
        "cores = { value = 2, source = \"fitted\", ref = \"t\" }\ninterruptions_per_s = { value = 400, source = \"fitted\", ref = \"t\" }\ninterruption_mean_ns = { value = 80000, source = \"fitted\", ref = \"t\" }",
    );
    let p = parse_str(&both, "p.toml").unwrap();
    let s = small_scenario(1, 2, 1, 4);
    let a = Analytic::from_profile(&s, &p);
    let i = a.interruptions.expect("both keys given");
    assert!((i.rate_per_ns - 400e-9).abs() < 1e-15);
    assert_eq!(i.mean_ns, 80_000.0);
    // The prediction: the median of the interrupted steps, above the undisturbed one, and the
    // same every time.
    let opts = crate::PredictOptions::default();
    let run = || crate::predict_with(&s, &opts, Some(&p)).unwrap();
    let (x, y) = (run(), run());
    let spread = x.report.interruptions.clone().expect("interrupted steps");
    assert_eq!(spread.runs as u64, crate::predict::INTERRUPTED_RUNS);
    assert!(x.report.step_time_s > spread.undisturbed_step_time_s);
    assert!(spread.step_time_p10_s <= x.report.step_time_s);
    assert!(x.report.step_time_s <= spread.step_time_p90_s);
    assert_eq!(x.report.step_time_s, y.report.step_time_s);
    // Without the keys: the undisturbed step, no spread.
    let plain = with_host("cores = { value = 2, source = \"fitted\", ref = \"t\" }");
    let p0 = parse_str(&plain, "p.toml").unwrap();
    let z = crate::predict_with(&s, &opts, Some(&p0)).unwrap();
    assert!(z.report.interruptions.is_none());
    assert_eq!(z.report.step_time_s, spread.undisturbed_step_time_s);
}

#[test]
fn wake_keys_come_as_a_pair_and_reach_the_cost_model() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let cores = "cores = { value = 2, source = \"fitted\", ref = \"t\" }\n";
    let e = parse_str(
        &with_host(&format!(
            "{cores}wake_ns = {{ value = 8000, source = \"fitted\", ref = \"t\" }}"
        )),
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("host.wake_per_idle is missing"), "{e}");
    let p = parse_str(
        &with_host(&format!(
            "{cores}wake_ns = {{ value = 8000, source = \"fitted\", ref = \"t\" }}\nwake_per_idle = {{ value = 0.02, source = \"fitted\", ref = \"t\" }}"
        )),
        "p.toml",
    )
    .unwrap();
    let a = Analytic::from_profile(&small_scenario(1, 2, 1, 4), &p);
    assert_eq!(
        a.wake(),
        Some(crate::host_model::Wake {
            ns: 8000.0,
            per_idle: 0.02
        })
    );
    assert!(Analytic::from_profile(&small_scenario(1, 2, 1, 4), &a100())
        .wake()
        .is_none());
}

#[test]
fn the_hand_off_key_reaches_the_cost_model_and_must_not_be_negative() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let cores = "cores = { value = 2, source = \"fitted\", ref = \"t\" }\n";
    let p = parse_str(
        &with_host(&format!(
            "{cores}handoff_ns = {{ value = 4000, source = \"fitted\", ref = \"t\", ci95 = [3900, 4100] }}"
        )),
        "p.toml",
    )
    .unwrap();
    let s = small_scenario(1, 2, 1, 4);
    assert_eq!(Analytic::from_profile(&s, &p).handoff_ns(), 4000);
    assert_eq!(Analytic::from_profile(&s, &a100()).handoff_ns(), 0);
    let e = parse_str(
        &with_host(&format!(
            "{cores}handoff_ns = {{ value = -1, source = \"fitted\", ref = \"t\" }}"
        )),
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("host.handoff_ns.value"), "{e}");
}

#[test]
fn the_compute_weight_key_reaches_the_cost_model_and_must_not_be_negative() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let cores = "cores = { value = 2, source = \"fitted\", ref = \"t\" }\n";
    let p = parse_str(
        &with_host(&format!(
            "{cores}compute_weight = {{ value = 0.05, source = \"fitted\", ref = \"t\", ci95 = [0.01, 0.09] }}"
        )),
        "p.toml",
    )
    .unwrap();
    let s = small_scenario(1, 2, 1, 4);
    assert_eq!(Analytic::from_profile(&s, &p).compute_weight(), 0.05);
    // Without the key: the kernel's weight for the compute thread's nice level.
    assert_eq!(
        Analytic::from_profile(&s, &a100()).compute_weight(),
        crate::cost::host_compute_weight()
    );
    let e = parse_str(
        &with_host(&format!(
            "{cores}compute_weight = {{ value = -0.1, source = \"fitted\", ref = \"t\" }}"
        )),
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("host.compute_weight.value"), "{e}");
}

/// Rank 0's optimizer op.
fn optimizer_op(staged: &crate::predict::Staged) -> crate::schedule::ComputeOp {
    use crate::schedule::{OpKind, Phase};
    staged
        .schedule
        .program(0)
        .ops
        .iter()
        .find_map(|o| match &o.kind {
            OpKind::Compute(c) if c.phase == Phase::Optimizer => Some(c.clone()),
            _ => None,
        })
        .expect("an optimizer op")
}

/// The four `memory.state_*` keys, as `twin calibrate host` writes them.
const STATE_KEYS: &str = "state_weight = { value = 2, source = \"fitted\", ref = \"t\" }\n\
state_resident_bytes = { value = 41943040, source = \"fitted\", ref = \"t\" }\n\
state_evicted_bytes = { value = 125829120, source = \"fitted\", ref = \"t\" }\n\
state_resident_efficiency = { value = 0.7, source = \"fitted\", ref = \"t\", ci95 = [0.65, 0.75] }\n\
state_evicted_efficiency = { value = 0.3, source = \"fitted\", ref = \"t\" }\n";

#[test]
fn memory_state_keys_are_read_together_and_reach_the_cost_model() {
    assert!(a100().memory_state.is_none());
    let text = A100.replace("[memory]\n", &format!("[memory]\n{STATE_KEYS}"));
    assert_ne!(text, A100);
    let p = parse_str(&text, "p.toml").unwrap();
    let cost = crate::cost::Analytic::from_profile(&crate::testing::small_scenario(1, 1, 1, 1), &p);
    assert_eq!(
        cost.state_cache,
        Some(crate::cost::StateCache {
            state_weight: 2.0,
            resident_bytes: 41943040,
            evicted_bytes: 125829120,
            resident_efficiency: 0.7,
            evicted_efficiency: 0.3,
            decay: None,
        })
    );
    // The step's footprint is the pipeline's to set.
    assert_eq!(cost.node_step_bytes, None);
    // One key missing: refused, naming the state keys.
    for drop in ["state_evicted_bytes", "state_resident_efficiency"] {
        let line = STATE_KEYS.lines().find(|l| l.starts_with(drop)).unwrap();
        let e = error_of(&text.replace(&format!("{line}\n"), ""));
        assert!(e.key.starts_with("memory.state_"), "{e}");
        assert!(e.to_string().contains("state_"), "{e}");
    }
    // The resident size must be below the evicted one.
    let e = error_of(&text.replace("value = 41943040", "value = 125829120"));
    assert_eq!(e.key, "memory.state_evicted_bytes", "{e}");
    // A weight without the other keys is refused, not ignored.
    let weight = STATE_KEYS.lines().next().unwrap();
    let e = error_of(&A100.replace("[memory]\n", &format!("[memory]\n{weight}\n")));
    assert_eq!(e.key, "memory.state_weight", "{e}");
    assert!(e.line.is_some(), "{e}");
    // A negative efficiency is refused.
    let e = error_of(&text.replace("value = 0.3,", "value = -0.3,"));
    assert!(e.key.starts_with("memory.state_evicted_efficiency"), "{e}");
}

/// The two `memory.state_*` decay keys.
const DECAY_KEYS: &str = "state_decay_after_ns = { value = 4000000, source = \"fitted\", ref = \"t\", ci95 = [3000000, 5000000] }\n\
state_lifetime_ns = { value = 25000000, source = \"fitted\", ref = \"t\", ci95 = [20000000, 30000000] }\n";

#[test]
fn the_state_decay_keys_come_together_and_only_with_the_state_keys() {
    let with = A100.replace("[memory]\n", &format!("[memory]\n{STATE_KEYS}{DECAY_KEYS}"));
    let p = parse_str(&with, "p.toml").unwrap();
    let cost = crate::cost::Analytic::from_profile(&crate::testing::small_scenario(1, 1, 1, 1), &p);
    assert_eq!(
        cost.state_cache.unwrap().decay,
        Some(crate::cost::StateDecay {
            after_ns: 4_000_000,
            lifetime_ns: 25_000_000
        })
    );
    // Sampled for the prediction's interval with the other fitted keys.
    let mut q = p.clone();
    let n = q.params_mut().len();
    let without = parse_str(
        &A100.replace("[memory]\n", &format!("[memory]\n{STATE_KEYS}")),
        "p.toml",
    )
    .unwrap();
    assert_eq!(n, without.clone().params_mut().len() + 2);
    // One of the two: refused, naming the other.
    for (drop, keep) in [
        ("state_lifetime_ns", "memory.state_decay_after_ns"),
        ("state_decay_after_ns", "memory.state_lifetime_ns"),
    ] {
        let line = DECAY_KEYS.lines().find(|l| l.starts_with(drop)).unwrap();
        let e = error_of(&with.replace(&format!("{line}\n"), ""));
        assert_eq!(e.key, keep, "{e}");
        assert!(e.to_string().contains(drop), "{e}");
    }
    // Without the state keys: refused with its line, not ignored.
    let e = error_of(&A100.replace("[memory]\n", &format!("[memory]\n{DECAY_KEYS}")));
    assert_eq!(e.key, "memory.state_decay_after_ns", "{e}");
    assert!(e.line.is_some(), "{e}");
    // A lifetime of zero is refused.
    let e = error_of(&with.replace("value = 25000000,", "value = 0,"));
    assert_eq!(e.key, "memory.state_lifetime_ns.value", "{e}");
}

#[test]
fn the_optimizer_pays_for_the_state_time_took_from_the_cache() {
    use crate::schedule::{OpKind, Phase};
    let host = include_str!("../../../scenarios/profiles/host-example.toml");
    let plain = host
        .lines()
        .filter(|l| !l.starts_with("state_decay_after_ns") && !l.starts_with("state_lifetime_ns"))
        .collect::<Vec<_>>()
        .join("\n");
    let decayed = plain.replace("[memory]\n", &format!("[memory]\n{DECAY_KEYS}"));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/host/pp.toml");
    let s = crate::setup::load(std::path::Path::new(path), &[]).unwrap();
    let run = |text: &str| {
        let p = parse_str(text, "host.toml").unwrap();
        let staged = crate::predict::Staged::with_profile(&s, Some(&p)).unwrap();
        let opts = crate::engine::SimOptions {
            trace: true,
            ..crate::engine::SimOptions::default()
        };
        let r = staged.simulate(&opts).unwrap();
        (staged, r)
    };
    let (base, r0) = run(&plain);
    let (aged, r1) = run(&decayed);
    let optimizer_index = aged
        .schedule
        .program(0)
        .ops
        .iter()
        .position(|o| matches!(&o.kind, OpKind::Compute(c) if c.phase == Phase::Optimizer))
        .unwrap() as u32;
    let optimizer = |r: &crate::engine::SimResult| {
        r.trace
            .as_ref()
            .unwrap()
            .events
            .iter()
            .find(|e| e.rank == 0 && e.op == optimizer_index)
            .map(|e| (e.start_ns, e.end_ns - e.start_ns))
            .unwrap()
    };
    let (start0, dur0) = optimizer(&r0);
    let (start1, dur1) = optimizer(&r1);
    // The ops before it are priced alike.
    assert_eq!(start0, start1);
    let op = optimizer_op(&aged);
    use crate::cost::CostModel;
    assert!(
        base.cost.state_aging(&op).is_none(),
        "no decay keys: no aging"
    );
    let aging = aged.cost.state_aging(&op).expect("decay keys: aging");
    // pp.toml's optimizer starts past the decay's 4 ms.
    assert!(start1 > 4_000_000 && aging.extra_ns(start1) > 0, "{start1}");
    assert_eq!(dur1 - dur0, aging.extra_ns(start1), "{dur0} {dur1}");
    // What it pays is the update priced at that age less the update priced fresh.
    let c = aged.cost.state_cache.unwrap();
    let at = |t: u64| aged.cost.state_update_s(op.memory_bytes, t).unwrap();
    let want = (at(start1) - at(0)) * 1e9;
    assert!(
        (aging.extra_ns(start1) as f64 - want).abs() <= 1.0 + 1e-6 * want,
        "{want}"
    );
    // Long after, all the resident part is lost: the evicted rate for all of it.
    let gone = aged.cost.state_update_s(op.memory_bytes, u64::MAX).unwrap();
    let hbm = aged.cost.hbm_bandwidth_bytes_per_s;
    assert!((gone / (op.memory_bytes as f64 / (hbm * c.evicted_efficiency)) - 1.0).abs() < 1e-12);
}

#[test]
fn a_profile_with_state_keys_prices_the_optimizer_by_the_nodes_footprint() {
    use crate::schedule::Phase;
    let host = include_str!("../../../scenarios/profiles/host-example.toml");
    let text = if host.contains("state_resident_bytes") {
        host.to_string()
    } else {
        host.replace("[memory]\n", &format!("[memory]\n{STATE_KEYS}"))
    };
    let p = parse_str(&text, "host.toml").unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/host/pp.toml");
    let s = crate::setup::load(std::path::Path::new(path), &[]).unwrap();
    let staged = crate::predict::Staged::with_profile(&s, Some(&p)).unwrap();
    let d = staged.cost.node_step_bytes.expect("set from the schedule");
    // Both ranks share the node: the sum of their programs' footprints.
    let sum: u64 = (0..2)
        .map(|r| crate::cost::footprint::program_step_bytes(staged.schedule.program(r)))
        .sum();
    assert_eq!(d, sum);
    // Priced by the state cache at that footprint, not by the cold pass.
    let c = staged.cost.state_cache.unwrap();
    let optimizer = optimizer_op(&staged);
    let b = optimizer.memory_bytes as f64;
    let hbm = staged.cost.hbm_bandwidth_bytes_per_s;
    let state = optimizer.memory_bytes / 2;
    let h = c.resident_fraction(d - state, state);
    let want = h * b / (hbm * c.resident_efficiency) + (1.0 - h) * b / (hbm * c.evicted_efficiency);
    let got = staged
        .cost
        .memory_pass_s(Phase::Optimizer, optimizer.memory_bytes);
    assert!((got / want - 1.0).abs() < 1e-12, "{got} {want}");
    // Without the footprint the cold pass prices it, as before.
    let mut cold = staged.cost.clone();
    cold.node_step_bytes = None;
    let e = cold.memory_cold_efficiency.unwrap();
    assert_eq!(
        cold.memory_pass_s(Phase::Optimizer, optimizer.memory_bytes),
        b / (hbm * e)
    );
}

#[test]
fn with_a_profile_the_report_divides_by_the_profiles_peak() {
    // host-example.toml calibrates a core at about 225 GFLOP/s; pp-wide.toml names 50.
    let p = parse_str(
        include_str!("../../../scenarios/profiles/host-example.toml"),
        "host.toml",
    )
    .unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/host/pp-wide.toml"
    );
    let s = crate::setup::load(std::path::Path::new(path), &[]).unwrap();
    assert_ne!(
        s.cluster.gpu.peak,
        p.peak(),
        "the test needs the two to differ"
    );
    let staged = crate::predict::Staged::with_profile(&s, Some(&p)).unwrap();
    assert_eq!(staged.scenario.cluster.gpu.peak, p.peak());
    let plain = crate::predict::Staged::with_profile(&s, None).unwrap();
    assert_eq!(plain.scenario.cluster.gpu.peak, s.cluster.gpu.peak);
}

#[test]
fn shape_factors_are_read_checked_and_scale_the_gemm_they_match() {
    let rows = "shape_factors = [\n  [64, 1024, 256, 1.12],\n  [64, 256, 128, 0.9],\n]\n";
    let with = A100.replace("\n[memory]\n", &format!("{rows}\n[memory]\n"));
    assert_ne!(with, A100);
    let p = parse_str(&with, "p.toml").unwrap();
    assert_eq!(p.gemm_shape_factors.len(), 2);
    assert_eq!(p.gemm_shape_factors[0].factor, 1.12);
    assert!(a100().gemm_shape_factors.is_empty());
    // The cost model prices a timed shape at the curve times its factor, and leaves a shape
    // far from every timed one alone.
    let s = small_scenario(1, 1, 1, 1);
    let plain = crate::cost::Analytic::from_profile(&s, &a100());
    let scaled = crate::cost::Analytic::from_profile(&s, &p);
    let price =
        |m: &crate::cost::Analytic, g: crate::schedule::Gemm| m.gemm.gemm_s(&g, 2, 312e12, 2e12);
    let timed = crate::schedule::Gemm::single(64, 1024, 256, 1);
    let ratio = price(&scaled, timed) / price(&plain, timed);
    assert!((ratio - 1.12).abs() < 1e-12, "{ratio}");
    let far = crate::schedule::Gemm::single(8192, 8192, 8192, 1);
    assert_eq!(price(&scaled, far), price(&plain, far));
    // A row that is not [m, n, k, factor] with whole dimensions and a positive factor is
    // refused with its line and the allowed form.
    for bad in [
        "[64, 1024, 256]",
        "[64, 1024, 256, 0]",
        "[64.5, 1024, 256, 1.1]",
        "[0, 1, 1, 1.0]",
    ] {
        let text = A100.replace(
            "\n[memory]\n",
            &format!("shape_factors = [\n  [64, 256, 128, 0.9],\n  {bad},\n]\n\n[memory]\n"),
        );
        let e = error_of(&text);
        assert_eq!(e.key, "gemm.shape_factors", "{bad}: {e}");
        assert!(e.line.is_some(), "{e}");
        assert!(
            e.to_string().contains("row 2") && e.to_string().contains("[m, n, k, factor]"),
            "{e}"
        );
    }
}

#[test]
fn the_p2p_cpu_share_key_reaches_the_cost_model_and_must_be_a_fraction() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let cores = "cores = { value = 2, source = \"fitted\", ref = \"t\" }\n";
    let share = |v: &str| {
        with_host(&format!(
            "{cores}p2p_cpu_share = {{ value = {v}, source = \"fitted\", ref = \"t\" }}"
        ))
    };
    let p = parse_str(&share("0.45"), "p.toml").unwrap();
    let s = small_scenario(1, 2, 1, 4);
    assert_eq!(Analytic::from_profile(&s, &p).p2p_cpu_share(), 0.45);
    // Without the key: all of a p2p is CPU work.
    assert_eq!(Analytic::from_profile(&s, &a100()).p2p_cpu_share(), 1.0);
    for bad in ["1.5", "0", "-0.2"] {
        let e = parse_str(&share(bad), "p.toml").unwrap_err().to_string();
        assert!(e.contains("host.p2p_cpu_share.value"), "{bad}: {e}");
    }
}

#[test]
fn the_memory_cores_key_reaches_the_cost_model_and_must_be_at_least_one() {
    let with_host = |host: &str| A100.replacen("[gpu]", &format!("[host]\n{host}\n[gpu]"), 1);
    let cores = "cores = { value = 2, source = \"fitted\", ref = \"t\" }\n";
    let key = |v: &str| {
        with_host(&format!(
            "{cores}memory_cores = {{ value = {v}, source = \"fitted\", ref = \"t\", ci95 = [1.3, 1.6] }}"
        ))
    };
    let p = parse_str(&key("1.49"), "p.toml").unwrap();
    let s = small_scenario(1, 2, 1, 4);
    assert_eq!(Analytic::from_profile(&s, &p).memory_cores(), Some(1.49));
    // Without the key every core has its own.
    assert_eq!(Analytic::from_profile(&s, &a100()).memory_cores(), None);
    for bad in ["0.9", "0", "-1", "inf"] {
        let e = parse_str(&key(bad), "p.toml").unwrap_err().to_string();
        assert!(e.contains("host.memory_cores.value"), "{bad}: {e}");
        assert!(e.contains(">= 1"), "{bad}: {e}");
    }
    // Draws for the step-time interval stay >= 1.
    let mut rng = crate::profile::sample::Rng::new(3);
    for _ in 0..200 {
        let d = p.sample(&mut rng);
        let v = d.host_memory_cores.as_ref().unwrap().value;
        assert!(v >= 1.0, "{v}");
    }
}

const H200: &str = include_str!("../../../scenarios/profiles/h200-dgx.toml");

fn h200_scenario() -> Scenario {
    let mut s = small_scenario(1, 1, 1, 1);
    s.cluster.gpu = crate::scenario::gpu_preset("h200-141gb").unwrap();
    s
}

/// The H200 profile gives its fitted GEMM rate and memory-bound bandwidth as absolute
/// numbers, and the cost model prices with them, not with the datasheet times a fraction.
#[test]
fn absolute_rates_price_gemms_and_memory_bound_work() {
    let p = parse_str(H200, "h200-dgx.toml").unwrap();
    assert_eq!(p.gpu, "h200-141gb");
    let bw = p.memory_bandwidth_bytes_per_s.clone().unwrap();
    assert_eq!((bw.value, bw.ci95), (4.262e12, Some([4.056e12, 4.490e12])));
    let rate = p.gemm_bf16_flops_per_s.clone().unwrap();
    assert_eq!((rate.value, rate.source), (704.0e12, Source::Fitted));
    // The fractions are derived, with no interval of their own.
    assert_eq!(p.memory_efficiency.value, 4.262e12 / 4.8e12);
    assert_eq!(p.memory_efficiency.ci95, None);
    assert_eq!(p.gemm_curve().max_efficiency, 704.0e12 / 989e12);
    let s = h200_scenario();
    check_matches(&s, &p).unwrap();
    let cost = Analytic::from_profile(&s, &p);
    let bytes = 1u64 << 30;
    let secs = cost.memory_pass_s(crate::schedule::Phase::Forward, bytes);
    assert_eq!(secs, bytes as f64 / 4.262e12);
    // Both rates are sampled for the step time's interval.
    assert!(p.has_intervals());
    let mut rng = Rng::new(3);
    let drawn = p.sample(&mut rng);
    assert_ne!(
        drawn.memory_bandwidth_bytes_per_s,
        p.memory_bandwidth_bytes_per_s
    );
    assert_ne!(drawn.gemm_bf16_flops_per_s, p.gemm_bf16_flops_per_s);
}

/// An absolute rate above the datasheet loads whole: nothing clips it to the datasheet.
#[test]
fn an_absolute_rate_above_the_datasheet_is_kept() {
    let text = H100.replace(
        "efficiency = { value = 0.90, source = \"fitted\", ref = \"carried over from the A100 fit; twin calibrate --backend cuda on H100 SXM GPUs measured memory-bound copies at 3.05-3.15 TB/s, 0.91-0.94 of 3.35; the first fit's 95% interval, 0.887-0.934, holds 0.90 (docs/measurements/2026-11-23-h100-calibrate-verify.md, 2026-11-23-h100-session5-check.md, 2026-11-24-h100-session13-check.md)\" }",
        "bandwidth_bytes_per_s = { value = 4.2e12, source = \"fitted\", ref = \"r\", ci95 = [4.0e12, 4.4e12] }",
    );
    let p = parse_str(&text, "p.toml").unwrap();
    assert_eq!(p.memory_bandwidth_bytes_per_s.unwrap().value, 4.2e12);
    assert!(p.memory_efficiency.value > 1.0);
    let s = small_scenario(1, 1, 1, 1);
    let mut s = s;
    s.cluster.gpu = crate::scenario::gpu_preset("h100-sxm-80gb").unwrap();
    let cost = Analytic::from_profile(&s, &parse_str(&text, "p.toml").unwrap());
    let secs = cost.memory_pass_s(crate::schedule::Phase::Forward, 1 << 20);
    assert_eq!(secs, (1u64 << 20) as f64 / 4.2e12);
}

#[test]
fn a_fraction_and_its_absolute_rate_are_exclusive() {
    let both = H100.replace(
        "[memory]\n",
        "[memory]\nbandwidth_bytes_per_s = { value = 3e12, source = \"fitted\", ref = \"r\" }\n",
    );
    let e = error_of(&both);
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "memory.bandwidth_bytes_per_s");
    assert!(
        e.to_string().contains("memory.efficiency is also given"),
        "{e}"
    );
    let mut section = "";
    let neither: String = H100
        .lines()
        .filter(|l| {
            if l.starts_with('[') {
                section = l;
            }
            !(section == "[gemm]" && l.starts_with("max_efficiency"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let e = error_of(&neither);
    assert_eq!(e.kind, ErrorKind::Missing);
    let t = e.to_string();
    assert!(
        t.contains("gemm.max_efficiency") && t.contains("gemm.bf16_flops_per_s"),
        "{t}"
    );
    let zero = H200.replace(
        "bf16_flops_per_s = { value = 704.0e12",
        "bf16_flops_per_s = { value = 0",
    );
    let e = error_of(&zero);
    assert_eq!(e.key, "gemm.bf16_flops_per_s.value");
}

/// A profile may name its GPU by a preset's alias: it matches scenarios on that preset, as a
/// scenario's alias does.
#[test]
fn a_profile_naming_a_gpu_alias_matches_its_preset() {
    let mut p = parse_str(H200, "h200-dgx.toml").unwrap();
    p.gpu = "h200-sxm-141gb".into();
    check_matches(&h200_scenario(), &p).unwrap();
    let e = check_matches(&small_scenario(1, 1, 1, 1), &p).unwrap_err();
    assert_eq!(e.profile_gpu, "h200-sxm-141gb");
}

/// `[attention]`: the H200 profile's curves (flash, cudnn, triton) become the cost model's; a
/// curve changed in the file changes that backend's only; a host profile without the section
/// runs attention as GEMMs; an older profile's `backend` is still read and does not choose the
/// kernel (the scenario's framework does), an unknown one is refused with its key, line and
/// the allowed names.
#[test]
fn attention_section_sets_the_curves() {
    use crate::cost::DEFAULT_ATTENTION;
    let p = parse_str(H200, "h200-dgx.toml").unwrap();
    let m = p.attention_model().unwrap();
    assert_eq!(m, DEFAULT_ATTENTION);
    let a = p.attention.as_ref().unwrap();
    assert_eq!(
        a.flash_forward.as_ref().unwrap().keys_half.source,
        Source::Fitted
    );
    assert_eq!(
        a.triton_backward.as_ref().unwrap().keys_half.source,
        Source::Published
    );

    let slower = H200.replacen(
        "max_efficiency = { value = 0.18,",
        "max_efficiency = { value = 0.09,",
        1,
    );
    assert_ne!(slower, H200);
    let m = parse_str(&slower, "h200-dgx.toml")
        .unwrap()
        .attention_model()
        .unwrap();
    assert_eq!(m.triton.forward.max_efficiency, 0.09);
    assert_eq!(m.triton.backward, DEFAULT_ATTENTION.triton.backward);
    assert_eq!(
        (m.flash, m.cudnn, m.backend),
        (
            DEFAULT_ATTENTION.flash,
            DEFAULT_ATTENTION.cudnn,
            DEFAULT_ATTENTION.backend
        )
    );

    let host = include_str!("../../../scenarios/profiles/host-example.toml");
    assert_eq!(
        parse_str(host, "host.toml").unwrap().attention_model(),
        None
    );
    // Without the section a GPU profile takes the defaults.
    let start = H200.find("[attention.").unwrap();
    let end = H200.find("[network]").unwrap();
    let bare = format!("{}{}", &H200[..start], &H200[end..]);
    assert_eq!(
        parse_str(&bare, "h200-dgx.toml").unwrap().attention_model(),
        Some(DEFAULT_ATTENTION)
    );

    // A profile written when `[attention] backend` chose the kernel still reads, to the
    // same model.
    let old = H200.replacen(
        "[attention.flash.forward]",
        "[attention]\nbackend = \"cudnn\"\n\n[attention.flash.forward]",
        1,
    );
    assert_eq!(
        parse_str(&old, "h200-dgx.toml").unwrap().attention_model(),
        Some(DEFAULT_ATTENTION)
    );
    let e = error_of(&old.replace("backend = \"cudnn\"", "backend = \"fa3\""));
    assert_eq!(e.key, "attention.backend");
    assert_eq!(e.allowed, "\"flash\", \"cudnn\", \"triton\"");
    let line = old
        .lines()
        .position(|l| l.starts_with("backend ="))
        .unwrap() as u32
        + 1;
    assert_eq!(e.line, Some(line));
}

/// A malformed `[attention.triton.*]` section is refused where it is: a value out of range
/// with its key and line, a key the section does not have, a section the format does not
/// have.
#[test]
fn a_malformed_triton_section_is_refused_with_its_location() {
    let header = "[attention.triton.backward]\nmax_efficiency = { value = 0.1508,";
    assert!(H200.contains(header));
    let bad = H200.replace(
        header,
        "[attention.triton.backward]\nmax_efficiency = { value = -0.1508,",
    );
    let e = error_of(&bad);
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "attention.triton.backward.max_efficiency.value");
    let line = bad
        .lines()
        .position(|l| l.starts_with("[attention.triton.backward]"))
        .unwrap() as u32
        + 2;
    assert_eq!(e.line, Some(line));

    let bad = H200.replace(
        "[attention.triton.forward]\n",
        "[attention.triton.forward]\nplateau = 0.2\n",
    );
    let e = error_of(&bad);
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert!(e.message.contains("`plateau`"), "{e}");
    let line = bad.lines().position(|l| l.starts_with("plateau")).unwrap() as u32 + 1;
    assert_eq!(e.line, Some(line));

    let e = error_of(&H200.replace("[attention.triton.forward]", "[attention.tritn.forward]"));
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert!(
        e.message.contains("`tritn`") && e.message.contains("`triton`"),
        "{e}"
    );
}

/// Every bundled GPU profile's Triton curves are its own flash curves carried through the
/// published Triton / FlashAttention-2 ratio (`cost::attention_fit`), as written (four
/// decimals).
#[test]
fn bundled_triton_curves_are_the_fit_of_each_profiles_flash_curves() {
    use crate::cost::attention_fit::triton_curves_from_flash;
    let round4 = |x: f64| (x * 1e4).round() / 1e4;
    let grand_teton = include_str!("../../../scenarios/profiles/h100-grand-teton.toml");
    for (name, text) in [
        ("a100-dgx", A100),
        ("h100-dgx", H100),
        ("h100-grand-teton", grand_teton),
        ("h200-dgx", H200),
    ] {
        let m = parse_str(text, name).unwrap().attention_model().unwrap();
        let (fwd, bwd) = triton_curves_from_flash(&m.flash).unwrap();
        for (fit, stated) in [(fwd, m.triton.forward), (bwd, m.triton.backward)] {
            assert_eq!(
                round4(fit.curve.max_efficiency),
                stated.max_efficiency,
                "{name}"
            );
            assert_eq!(fit.curve.keys_half, stated.keys_half, "{name}");
            assert_eq!(fit.curve.head_dim_half, stated.head_dim_half, "{name}");
        }
    }
}

/// `[gemm.fp8_rowwise]` and `[gemm.fp8_blockwise]` are read with the bundled Hopper profiles,
/// and a value out of range is refused with its own key and line.
#[test]
fn the_per_scale_fp8_curves_are_read_and_checked() {
    let p = parse_str(H200, "h200.toml").unwrap();
    let rowwise = p.gemm_fp8_rowwise.as_ref().unwrap();
    let blockwise = p.gemm_fp8_blockwise.as_ref().unwrap();
    for (table, c, want) in [
        ("fp8_rowwise", rowwise, (0.6517, 326.0)),
        ("fp8_blockwise", blockwise, (0.6164, 288.0)),
    ] {
        assert_eq!((c.max_efficiency.value, c.k_half.value), want, "{table}");
        let header = format!("[gemm.{table}]\nmax_efficiency = {{ value = {},", want.0);
        assert!(H200.contains(&header), "{header}");
        let bad = H200.replace(
            &header,
            &format!("[gemm.{table}]\nmax_efficiency = {{ value = 1{},", want.0),
        );
        let e = error_of(&bad);
        assert_eq!(e.kind, ErrorKind::Invalid);
        assert_eq!(e.key, format!("gemm.{table}.max_efficiency.value"));
        let line = bad
            .lines()
            .position(|l| l == format!("[gemm.{table}]"))
            .unwrap() as u32
            + 2;
        assert_eq!(e.line, Some(line));
    }
}

/// Offload's host figures: a GPU profile keeps the node preset's (a DGX A100's PCIe 4.0 link
/// and its DRAM per GPU); a host profile prices its backend's copies as memory passes over
/// each byte read and written, at its own measured bandwidth.
#[test]
fn offload_is_priced_by_the_node_for_gpus_and_by_memory_for_the_host_backend() {
    use crate::cost::{CostModel, HostWork};
    let s = small_scenario(8, 1, 1, 1);
    let gpu = Analytic::from_profile(&s, &a100());
    assert_eq!(gpu.host_link_bandwidth_bytes_per_s, 31.5e9);
    assert_eq!(gpu.host_memory_bandwidth_bytes_per_s, 409.6e9 / 8.0);
    assert_eq!(gpu.host_ns(HostWork::Copy { bytes: 63_000_000 }), 2_000_000);
    let host = parse_str(
        include_str!("../../../scenarios/profiles/host-example.toml"),
        "host-example.toml",
    )
    .unwrap();
    let priced = Analytic::from_profile(&s, &host);
    let rate = priced.hbm_bandwidth_bytes_per_s * priced.memory_efficiency;
    let bytes = 1u64 << 30;
    let want = (2.0 * bytes as f64 / rate * 1e9).round() as u64 + priced.op_overhead_ns;
    assert!(priced.host_ns(HostWork::Copy { bytes }).abs_diff(want) <= 1);
}

/// small.toml's model on 8 GPUs of preset `gpu`, in node `node`'s preset links, with
/// `sets` as `--set` overrides.
fn scenario_on(gpu: &str, node: &str, sets: &[&str]) -> crate::scenario::Scenario {
    let small = include_str!("../../../scenarios/small.toml");
    let model = &small[small.find("[model]").unwrap()..small.find("[cluster]").unwrap()];
    let rest = &small[small.find("[parallel]").unwrap()..];
    let text = format!(
        "name = \"small\"\n{model}[cluster]\ngpus = 8\ngpu = \"{gpu}\"\nnode = \"{node}\"\n\n{rest}"
    );
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    crate::setup::parse_str(&text, "small.toml", &sets).unwrap()
}

/// The text of a bundled profile, by its path.
fn bundled_text(path: &str) -> &'static str {
    match path {
        "scenarios/profiles/a100-dgx.toml" => A100,
        "scenarios/profiles/h100-dgx.toml" => H100,
        "scenarios/profiles/h100-grand-teton.toml" => {
            include_str!("../../../scenarios/profiles/h100-grand-teton.toml")
        }
        "scenarios/profiles/h200-dgx.toml" => {
            include_str!("../../../scenarios/profiles/h200-dgx.toml")
        }
        "scenarios/profiles/b200-dgx.toml" => B200,
        "scenarios/profiles/h800-hgx.toml" => H800,
        "scenarios/profiles/gb200-nvl72.toml" => GB200,
        other => panic!("no bundled profile at {other}"),
    }
}

const H800: &str = include_str!("../../../scenarios/profiles/h800-hgx.toml");
const GB200: &str = include_str!("../../../scenarios/profiles/gb200-nvl72.toml");

/// The GB200 NVL72 profile is the DGX B200 profile, as fractions of the peak, on the GB200's
/// datasheet peaks: only `[gpu]`, the name and the links' citations differ. So a GB200 GEMM
/// runs at the B200's fraction of a peak 11% higher.
#[test]
fn the_gb200_profile_is_the_b200_profile_on_its_own_peaks() {
    let b200 = parse_str(B200, "b200-dgx.toml").unwrap();
    let gb200 = parse_str(GB200, "gb200-nvl72.toml").unwrap();
    assert_eq!(gb200.gpu, "gb200");
    assert_eq!(gb200.peak_bf16_flops_per_s.value, 2.5e15);
    assert_eq!(
        gb200.gemm_max_efficiency.value,
        b200.gemm_max_efficiency.value
    );
    let mut same = gb200.clone();
    same.name = b200.name.clone();
    same.description = b200.description.clone();
    same.gpu = b200.gpu.clone();
    same.sm_count = b200.sm_count.clone();
    same.hbm_bandwidth_bytes_per_s = b200.hbm_bandwidth_bytes_per_s.clone();
    same.peak_fp32_flops_per_s = b200.peak_fp32_flops_per_s.clone();
    same.peak_tf32_flops_per_s = b200.peak_tf32_flops_per_s.clone();
    same.peak_fp16_flops_per_s = b200.peak_fp16_flops_per_s.clone();
    same.peak_bf16_flops_per_s = b200.peak_bf16_flops_per_s.clone();
    same.peak_fp8_flops_per_s = b200.peak_fp8_flops_per_s.clone();
    same.intra.bandwidth_bytes_per_s.reference = b200.intra.bandwidth_bytes_per_s.reference.clone();
    same.inter.bandwidth_bytes_per_s.reference = b200.inter.bandwidth_bytes_per_s.reference.clone();
    assert_eq!(same, b200);
}

/// The HGX H800 profile is the DGX H100 profile on the same die but for what the H800 changes:
/// its name, its 400 GB/s NVLink (at DeepSeek's reported rate, without NVLink SHARP) and its
/// NICs' citation. Every curve, peak and efficiency is carried over unchanged.
#[test]
fn the_h800_profile_is_the_h100_profile_but_its_nvlink() {
    let h100 = parse_str(H100, "h100-dgx.toml").unwrap();
    let h800 = parse_str(H800, "h800-hgx.toml").unwrap();
    assert_eq!(h800.gpu, "h800-sxm-80gb");
    assert_eq!(h800.intra.bandwidth_bytes_per_s.value, 200e9);
    assert_eq!(h800.intra.efficiency.value, 0.80);
    assert!(h800.nvls_efficiency.is_none());
    let mut same = h800.clone();
    same.name = h100.name.clone();
    same.description = h100.description.clone();
    same.gpu = h100.gpu.clone();
    same.sm_count.reference = h100.sm_count.reference.clone();
    same.intra = h100.intra.clone();
    same.inter.bandwidth_bytes_per_s.reference = h100.inter.bandwidth_bytes_per_s.reference.clone();
    same.nvls_efficiency = h100.nvls_efficiency.clone();
    same.nvls_min_bytes = h100.nvls_min_bytes.clone();
    assert_eq!(same, h100);
}

/// Each bundled profile describes the GPU and nodes the table says: it names that GPU preset,
/// and its link tiers are those of each node preset listed, so a scenario on that machine
/// loses nothing of its own by taking the profile.
#[test]
fn bundled_profiles_describe_the_machines_they_are_listed_for() {
    for b in bundled::BUNDLED {
        let p = parse_str(bundled_text(b.path), b.path).unwrap();
        assert_eq!(p.gpu, b.gpu, "{}", b.path);
        for node in b.nodes {
            let s = scenario_on(b.gpu, node, &[]);
            let c = &s.cluster;
            assert_eq!(
                c.intra_node.bandwidth_bytes_per_s, p.intra.bandwidth_bytes_per_s.value,
                "{} on {node}",
                b.path
            );
            assert_eq!(
                c.inter_node.bandwidth_bytes_per_s, p.inter.bandwidth_bytes_per_s.value,
                "{} on {node}",
                b.path
            );
            assert_eq!(bundled::for_cluster(c), Some(&b), "{} on {node}", b.path);
        }
        // The copy built into the binary is the file, marked as bundled.
        let built = b.profile().unwrap();
        assert_eq!(built.bundled, Some(b.path));
        let mut unmarked = (*built).clone();
        unmarked.bundled = None;
        assert_eq!(unmarked, p, "{}", b.path);
    }
}

/// On a machine a bundled profile describes, `Pricing::Machine` prices with that profile and
/// predicts what the file given as a profile predicts; the report names the bundled profile,
/// and a report priced with the defaults there names the profile it passed over. A profile
/// read from a file and a changed machine get neither note. A DGX A100 takes its profile too.
#[test]
fn the_bundled_profile_of_a_machine_prices_it_unless_told_otherwise() {
    use bundled::Pricing;
    let priced = |s: &crate::scenario::Scenario, p: Option<&Profile>| {
        let opts = crate::PredictOptions::default();
        crate::predict_with(s, &opts, p).unwrap().report
    };
    let note_of = |r: &crate::report::Report| {
        r.notes
            .iter()
            .find(|n| n.starts_with("priced with"))
            .cloned()
    };
    let dgx = scenario_on("h100-sxm-80gb", "dgx-h100", &[]);
    let machine = Pricing::Machine
        .profile_for(&dgx)
        .unwrap()
        .expect("a DGX H100");
    let with_bundled = priced(&dgx, Some(&machine));
    let with_file = priced(&dgx, Some(&h100()));
    assert_eq!(with_bundled.step_time_s, with_file.step_time_s);
    let note = note_of(&with_bundled).expect("a note on the bundled profile");
    assert!(
        note.starts_with("priced with the bundled profile scenarios/profiles/h100-dgx.toml"),
        "{note}"
    );
    assert_eq!(note_of(&with_file), None, "priced with a given profile");
    let defaults = priced(&dgx, None);
    assert_ne!(defaults.step_time_s, with_bundled.step_time_s);
    let note = note_of(&defaults).expect("a note on the defaults");
    assert!(
        note.starts_with("priced with twin's default cost model")
            && note.contains("scenarios/profiles/h100-dgx.toml describes"),
        "{note}"
    );
    assert_eq!(Pricing::Defaults.profile_for(&dgx).unwrap(), None);
    let slower_nic = scenario_on(
        "h100-sxm-80gb",
        "dgx-h100",
        &["cluster.inter_node.bandwidth_bytes_per_s=25e9"],
    );
    assert_eq!(Pricing::Machine.profile_for(&slower_nic).unwrap(), None);
    assert_eq!(note_of(&priced(&slower_nic, None)), None, "another machine");
    // The A100's profile shares the defaults' GEMM curve but not their attention curves.
    let a100 = scenario_on("a100-sxm-80gb", "dgx-a100", &[]);
    let a100_machine = Pricing::Machine
        .profile_for(&a100)
        .unwrap()
        .expect("a DGX A100");
    assert_eq!(
        a100_machine.bundled,
        Some("scenarios/profiles/a100-dgx.toml")
    );
    assert_eq!(
        priced(&a100, Some(&a100_machine)).step_time_s,
        priced(&a100, Some(&super::tests::a100())).step_time_s
    );
    // A given profile of another GPU is refused, as `twin simulate --profile` refuses it.
    let given = Pricing::Profile(std::sync::Arc::new(h100()));
    assert!(given.profile_for(&a100).is_err());
}
