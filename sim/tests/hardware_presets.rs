//! The GPU and node presets from a user's side: each parses, its datasheet figures appear in
//! the scenario written back (`to_toml`), and a GB200 NVL72 rack works as one node of 72 GPUs
//! (tensor parallelism inside it, data parallelism across racks).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use twin_sim::cost::Analytic;
use twin_sim::engine::{simulate, SimOptions};
use twin_sim::plan::{GroupKind, Plan};
use twin_sim::scenario::to_toml;
use twin_sim::schedule::generate;
use twin_sim::setup::parse_str;

fn scenario(gpu: &str, node: Option<&str>, gpus: u32, tp: u32) -> String {
    let node = node
        .map(|n| format!("node = \"{n}\"\n"))
        .unwrap_or_default();
    format!(
        "name = \"preset\"\n\
         [model]\nlayers = 4\nhidden = 1024\nheads = 16\nseq_len = 1024\nvocab = 32000\n\
         [cluster]\ngpu = \"{gpu}\"\ngpus = {gpus}\n{node}\
         [parallel]\ntp = {tp}\n\
         [training]\nglobal_batch = {gpus}\n"
    )
}

/// The emitted scenario as a TOML table.
fn emitted(text: &str) -> toml::Table {
    let s = parse_str(text, "t.toml", &[]).unwrap();
    to_toml(&s).parse::<toml::Table>().unwrap()
}

fn float(t: &toml::Table, path: &[&str]) -> f64 {
    let mut v = &t[path[0]];
    for k in &path[1..] {
        v = &v[*k];
    }
    v.as_float()
        .or_else(|| v.as_integer().map(|i| i as f64))
        .unwrap()
}

/// Each new GPU preset's figures (datasheet peaks and bandwidth, nvidia-smi's total,
/// docs/reference/scenarios.md) are in the scenario written back, and its usual node is chosen.
#[test]
fn gpu_presets_parse_and_are_written_back() {
    let want = [
        // name, bf16, fp8, HBM B/s, nvidia-smi MiB, default node's gpus, NVLink B/s
        (
            "h800-sxm-80gb",
            989e12,
            1979e12,
            3.35e12,
            81_559u64,
            8,
            200e9,
        ),
        ("b200-sxm-180gb", 2.25e15, 4.5e15, 8e12, 183_359, 8, 900e9),
        ("gb200", 2.5e15, 5e15, 8e12, 189_471, 72, 900e9),
    ];
    for (name, bf16, fp8, hbm_bw, mib, per_node, nvlink) in want {
        let t = emitted(&scenario(name, None, 8, 8));
        let gpu = ["cluster", "gpu"];
        assert_eq!(t["cluster"]["gpu"]["name"].as_str(), Some(name));
        assert_eq!(float(&t, &[gpu[0], gpu[1], "peak_bf16_flops_per_s"]), bf16);
        assert_eq!(float(&t, &[gpu[0], gpu[1], "peak_fp8_flops_per_s"]), fp8);
        assert_eq!(
            float(&t, &[gpu[0], gpu[1], "hbm_bandwidth_bytes_per_s"]),
            hbm_bw
        );
        assert_eq!(
            t["cluster"]["gpu"]["hbm_bytes"].as_integer(),
            Some((mib << 20) as i64),
            "{name}"
        );
        assert_eq!(
            t["cluster"]["gpus_per_node"].as_integer(),
            Some(per_node),
            "{name}"
        );
        assert_eq!(
            float(&t, &["cluster", "intra_node", "bandwidth_bytes_per_s"]),
            nvlink,
            "{name}"
        );
    }
}

/// Each node preset sets GPUs per node and both tiers, per GPU and direction.
#[test]
fn node_presets_parse_and_are_written_back() {
    let want = [
        ("hgx-h800", "h800-sxm-80gb", 8, 200e9, 50e9),
        ("dgx-h200", "h200-141gb", 8, 450e9, 50e9),
        ("hgx-h200", "h200-141gb", 8, 450e9, 50e9),
        ("dgx-b200", "b200-sxm-180gb", 8, 900e9, 50e9),
        ("gb200-nvl72", "gb200", 72, 900e9, 50e9),
    ];
    for (node, gpu, per_node, nvlink, nic) in want {
        let t = emitted(&scenario(gpu, Some(node), per_node, 8));
        assert_eq!(t["cluster"]["node"].as_str(), Some(node));
        assert_eq!(
            t["cluster"]["gpus_per_node"].as_integer(),
            Some(per_node as i64)
        );
        assert_eq!(
            float(&t, &["cluster", "intra_node", "bandwidth_bytes_per_s"]),
            nvlink,
            "{node}"
        );
        assert_eq!(
            float(&t, &["cluster", "inter_node", "bandwidth_bytes_per_s"]),
            nic,
            "{node}"
        );
    }
}

/// 144 GB200 GPUs, two NVL72 racks: tp = 8 stays inside a rack's NVLink domain, and each
/// data-parallel group spans both racks (72 / 8 = 9 replicas per rack), so its all-reduce
/// crosses the scale-out network. The step simulates, and the gradient all-reduce is priced
/// at the 400 Gb/s NIC tier rather than NVLink: the same job with the NIC at NVLink speed
/// is faster.
#[test]
fn a_small_job_runs_on_two_nvl72_racks() {
    let text = scenario("gb200", Some("gb200-nvl72"), 144, 8);
    let s = parse_str(&text, "t.toml", &[]).unwrap();
    assert_eq!((s.cluster.gpus_per_node, s.parallel.dp), (72, 18));
    let plan = Plan::new(&s).unwrap();
    let tp = plan.group(plan.group_of(0, GroupKind::Tp));
    assert_eq!((tp.members.len(), tp.nodes), (8, 1));
    let dp = plan.group(plan.group_of(0, GroupKind::Dp));
    assert_eq!((dp.members.len(), dp.nodes, dp.max_per_node), (18, 2, 9));
    assert_eq!(plan.node_of(71), 0);
    assert_eq!(plan.node_of(72), 1);

    let step = |s: &twin_sim::scenario::Scenario| {
        let plan = Plan::new(s).unwrap();
        let sched = generate(s, &plan).unwrap();
        sched.validate(&plan).unwrap();
        let cost = Analytic::new(s);
        simulate(&plan, &sched, &cost, &SimOptions::default())
            .unwrap()
            .step_time_ns
    };
    let racks = step(&s);
    let mut one_domain = s.clone();
    one_domain.cluster.inter_node = one_domain.cluster.intra_node.clone();
    assert!(racks > 0);
    assert!(
        step(&one_domain) < racks,
        "the data-parallel all-reduce crosses the racks' NICs"
    );
}
