//! A resolved scenario written back as TOML with every value explicit (no presets, no
//! defaults), so a run can be archived next to its results and reproduced exactly even if
//! presets or defaults change later. Parsing the output gives back an equal [`Scenario`].

use super::parse::{
    name_of, ACCOUNTINGS, AXES, GRANULARITIES, OFFLOADS, OPTIMIZERS, PRECISIONS, RECOMPUTES,
};
use super::types::*;
use toml_edit::{value, Array, DocumentMut, InlineTable, Item, Table, Value};

fn int(v: u64) -> Item {
    value(i64::try_from(v).unwrap_or(i64::MAX))
}

fn link_table(link: &Link) -> Item {
    let mut t = Table::new();
    t.insert("bandwidth_bytes_per_s", value(link.bandwidth_bytes_per_s));
    t.insert("latency_ns", int(link.latency_ns));
    Item::Table(t)
}

/// Sections of a scenario file that [`to_toml`] does not emit because they are not part of
/// the resolved [`Scenario`]: `[faults]` and `[checks]` (parsed beside it).
pub const SIDE_SECTIONS: [&str; 2] = ["faults", "checks"];

/// `emitted` (a [`to_toml`] output) with the [`SIDE_SECTIONS`] of `original` (the scenario
/// file it came from) copied over verbatim, so a saved what-if keeps its failure model and
/// CI thresholds. An `original` that is not valid TOML adds nothing.
pub fn with_side_sections(emitted: &str, original: &str) -> String {
    let (Ok(mut doc), Ok(orig)) = (
        emitted.parse::<DocumentMut>(),
        original.parse::<DocumentMut>(),
    ) else {
        return emitted.to_string();
    };
    for key in SIDE_SECTIONS {
        if let Some(item) = orig.get(key) {
            doc.insert(key, item.clone());
        }
    }
    doc.to_string()
}

/// `emitted` (a [`to_toml`] output) without the `(section, key)` entries of `keys`; an
/// `emitted` that is not valid TOML is returned as it is.
pub(crate) fn without<'a>(
    emitted: &str,
    keys: impl Iterator<Item = &'a (&'a str, &'a str)>,
) -> String {
    let Ok(mut doc) = emitted.parse::<DocumentMut>() else {
        return emitted.to_string();
    };
    for (section, key) in keys {
        if let Some(t) = doc.get_mut(section).and_then(Item::as_table_mut) {
            t.remove(key);
        }
    }
    doc.to_string()
}

/// `training.moe_routing` as written: nothing for the default, a name, or a one-key table.
fn moe_routing(r: &MoeRouting) -> Option<Value> {
    let table = |key: &str, v: Value| {
        let mut t = InlineTable::new();
        t.insert(key, v);
        Value::InlineTable(t)
    };
    Some(match r {
        MoeRouting::Balanced => return None,
        MoeRouting::ForceBalanced => Value::from("force-balanced"),
        MoeRouting::Capacity { factor } => table("capacity_factor", Value::from(*factor)),
        MoeRouting::Imbalance { max_load } => table("imbalance", Value::from(*max_load)),
        MoeRouting::ExpertLoads(loads) => table(
            "expert_loads",
            Value::Array(loads.iter().copied().collect::<Array>()),
        ),
        MoeRouting::ExpertLoadCv { cv } => table("expert_load_cv", Value::from(*cv)),
    })
}

pub(crate) fn to_toml(s: &Scenario) -> String {
    let mut doc = DocumentMut::new();
    doc.insert("name", value(s.name.as_str()));

    let m = &s.model;
    let mut model = Table::new();
    model.insert("name", value(m.name.as_str()));
    model.insert("layers", int(u64::from(m.layers)));
    model.insert("hidden", int(m.hidden));
    model.insert("heads", int(u64::from(m.heads)));
    model.insert("kv_heads", int(u64::from(m.kv_heads)));
    if let Some(d) = m.head_dim {
        model.insert("head_dim", int(d));
    }
    model.insert("ffn_hidden", int(m.ffn_hidden));
    model.insert("seq_len", int(m.seq_len));
    model.insert("vocab", int(m.vocab));
    model.insert("gated_mlp", value(m.gated_mlp));
    model.insert("tied_embeddings", value(m.tied_embeddings));
    if m.qkv_bias {
        model.insert("qkv_bias", value(true));
    }
    if m.mtp_layers > 0 {
        model.insert("mtp_layers", int(u64::from(m.mtp_layers)));
    }
    if let Some(w) = &m.sliding_window {
        model.insert("sliding_window", int(w.tokens));
        model.insert("sliding_window_every", int(u64::from(w.every)));
    }
    if m.attention_sinks {
        model.insert("attention_sinks", value(true));
    }
    if let Some(moe) = &m.moe {
        model.insert("experts", int(u64::from(moe.experts)));
        model.insert("top_k", int(u64::from(moe.top_k)));
        // A hybrid pattern places the MoE layers itself (and refuses these keys).
        if m.hybrid.is_none() {
            model.insert("moe_every", int(u64::from(moe.moe_every)));
        }
        model.insert("moe_ffn_hidden", int(moe.ffn_hidden));
        model.insert("shared_experts", int(u64::from(moe.shared_experts)));
        if moe.shared_experts > 0 {
            model.insert("shared_expert_ffn_hidden", int(moe.shared_ffn_hidden));
        }
        if m.hybrid.is_none() {
            model.insert("dense_layers", int(u64::from(moe.dense_layers)));
        }
        model.insert("dense_ffn_hidden", int(moe.dense_ffn_hidden));
        if moe.router_groups.0 > 1 {
            model.insert("router_groups", int(u64::from(moe.router_groups.0)));
            model.insert("router_group_top_k", int(u64::from(moe.router_groups.1)));
        }
    }
    if let Some(mla) = &m.mla {
        let mut t = Table::new();
        t.insert("q_lora_rank", int(mla.q_lora_rank));
        t.insert("kv_lora_rank", int(mla.kv_lora_rank));
        t.insert("qk_nope_head_dim", int(mla.qk_nope_head_dim));
        t.insert("qk_rope_head_dim", int(mla.qk_rope_head_dim));
        t.insert("v_head_dim", int(mla.v_head_dim));
        model.insert("mla", Item::Table(t));
    }
    if let Some(h) = &m.hybrid {
        model.insert("hybrid_pattern", value(h.pattern.as_str()));
        if let Some(mamba) = &h.mamba {
            let mut t = Table::new();
            t.insert("heads", int(mamba.heads));
            t.insert("head_dim", int(mamba.head_dim));
            t.insert("state", int(mamba.state));
            t.insert("groups", int(mamba.groups));
            t.insert("conv_kernel", int(mamba.conv_kernel));
            t.insert("chunk", int(mamba.chunk));
            model.insert("mamba", Item::Table(t));
        }
    }
    doc.insert("model", Item::Table(model));

    let c = &s.cluster;
    let mut cluster = Table::new();
    let mut gpu = InlineTable::new();
    let g = &c.gpu;
    gpu.insert("name", Value::from(g.name.as_str()));
    gpu.insert(
        "peak_fp32_flops_per_s",
        Value::from(g.peak.fp32_flops_per_s),
    );
    gpu.insert(
        "peak_tf32_flops_per_s",
        Value::from(g.peak.tf32_flops_per_s),
    );
    gpu.insert(
        "peak_fp16_flops_per_s",
        Value::from(g.peak.fp16_flops_per_s),
    );
    gpu.insert(
        "peak_bf16_flops_per_s",
        Value::from(g.peak.bf16_flops_per_s),
    );
    gpu.insert("peak_fp8_flops_per_s", Value::from(g.peak.fp8_flops_per_s));
    gpu.insert(
        "hbm_bytes",
        Value::from(i64::try_from(g.hbm_bytes).unwrap_or(i64::MAX)),
    );
    gpu.insert(
        "driver_reserved_bytes",
        Value::from(i64::try_from(g.driver_reserved_bytes).unwrap_or(i64::MAX)),
    );
    gpu.insert(
        "hbm_bandwidth_bytes_per_s",
        Value::from(g.hbm_bandwidth_bytes_per_s),
    );
    cluster.insert("gpu", value(gpu));
    cluster.insert("gpus", int(u64::from(c.gpus)));
    cluster.insert("gpus_per_node", int(u64::from(c.gpus_per_node)));
    // Every node field below is explicit, so naming the preset only records the name; a node
    // the GPU preset chose is left for it to choose again.
    if !c.node_from_gpu {
        cluster.insert("node", value(c.node.as_str()));
    }
    cluster.insert("intra_node", link_table(&c.intra_node));
    cluster.insert("inter_node", link_table(&c.inter_node));
    if !c.topology.is_default() {
        let t = &c.topology;
        let mut topo = Table::new();
        let model = name_of(&super::topology::NETWORK_MODELS, t.model);
        let fabric = name_of(&super::topology::FABRICS, t.fabric);
        topo.insert("model", value(model));
        topo.insert("fabric", value(fabric));
        topo.insert("nics_per_node", int(u64::from(t.nics_per_node)));
        topo.insert("nodes_per_leaf", int(u64::from(t.nodes_per_leaf)));
        topo.insert("oversubscription", value(t.oversubscription));
        cluster.insert("topology", Item::Table(topo));
    }
    doc.insert("cluster", Item::Table(cluster));

    let p = &s.parallel;
    let mut parallel = Table::new();
    for (key, v) in [
        ("tp", p.tp),
        ("pp", p.pp),
        ("dp", p.dp),
        ("vpp", p.vpp),
        ("ep", p.ep),
        ("cp", p.cp),
    ] {
        parallel.insert(key, int(u64::from(v)));
    }
    if let Some(etp) = p.etp {
        parallel.insert("etp", int(u64::from(etp)));
    }
    parallel.insert("cp_algorithm", value(p.cp_algorithm.as_str()));
    parallel.insert("zero", int(u64::from(p.zero)));
    parallel.insert("fsdp", value(p.fsdp));
    if let Some(f) = p.fsdp_degree {
        parallel.insert("fsdp_degree", int(u64::from(f)));
    }
    parallel.insert("sequence_parallel", value(p.sequence_parallel));
    parallel.insert("schedule", value(p.schedule.as_str()));
    if let Some(part) = &p.layer_partition {
        let arr: Array = part.iter().map(|&x| i64::from(x)).collect();
        parallel.insert("layer_partition", value(arr));
    }
    for (key, set) in [
        (
            "account_for_embedding_in_pipeline_split",
            p.account_for_embedding_in_pipeline_split,
        ),
        (
            "account_for_loss_in_pipeline_split",
            p.account_for_loss_in_pipeline_split,
        ),
    ] {
        if set {
            parallel.insert(key, value(true));
        }
    }
    let order: Array = p.order.iter().map(|&a| name_of(&AXES, a)).collect();
    parallel.insert("order", value(order));
    doc.insert("parallel", Item::Table(parallel));

    let t = &s.training;
    let mut training = Table::new();
    training.insert("global_batch", int(t.global_batch));
    training.insert("micro_batch", int(t.micro_batch));
    if let Some(tokens) = t.tokens {
        training.insert("tokens", int(tokens));
    }
    let precision = name_of(&PRECISIONS, t.precision);
    training.insert("precision", value(precision));
    training.insert("fp8_recipe", value(t.fp8_recipe.as_str()));
    if t.fp8_param_gather {
        training.insert("fp8_param_gather", value(true));
    }
    let recompute = name_of(&RECOMPUTES, t.recompute);
    training.insert("recompute", value(recompute));
    if let Some(n) = t.recompute_layers {
        training.insert("recompute_layers", int(u64::from(n)));
    }
    if let Some(modules) = &t.recompute_modules {
        let mut list = Array::new();
        for name in modules.names() {
            list.push(name);
        }
        training.insert("recompute_modules", value(list));
    }
    training.insert("overlap_grad_reduce", value(t.overlap_grad_reduce));
    training.insert("overlap_param_gather", value(t.overlap_param_gather));
    let compression = match t.grad_compression {
        GradCompression::None => "none".to_string(),
        GradCompression::Fp16 => "fp16".to_string(),
        GradCompression::Int8 => "int8".to_string(),
        GradCompression::Topk(f) => format!("topk:{f}"),
    };
    training.insert("grad_compression", value(compression));
    if let Some(d) = t.grad_reduce_dtype {
        training.insert("grad_reduce_dtype", value(d.as_str()));
    }
    if let Some(d) = t.optimizer_state_dtype {
        training.insert("optimizer_state_dtype", value(d.as_str()));
    }
    if !t.grad_clip {
        training.insert("grad_clip", value(false));
    }
    if let Some(k) = t.optimizer_kernel {
        training.insert("optimizer_kernel", value(k.as_str()));
    }
    let sync = match t.sync {
        SyncMode::Sync => "sync".to_string(),
        SyncMode::Delayed(n) => format!("delayed:{n}"),
        SyncMode::Async => "async".to_string(),
    };
    training.insert("sync", value(sync));
    let optimizer = name_of(&OPTIMIZERS, t.optimizer);
    training.insert("optimizer", value(optimizer));
    let offload = name_of(&OFFLOADS, t.offload);
    training.insert("offload", value(offload));
    training.insert("flash_attention", value(t.flash_attention));
    match &t.framework.origin {
        super::framework::Origin::Bundled(b) => training.insert("framework", value(b.name())),
        super::framework::Origin::File(path) => {
            training.insert("framework_file", value(path.as_str()))
        }
    };
    training.insert("tp_comm_overlap", value(t.tp_comm_overlap));
    training.insert("overlap_p2p_comm", value(t.overlap_p2p_comm));
    training.insert("compile", value(t.compile));
    training.insert("cuda_graphs", value(t.cuda_graphs));
    if let Some(routing) = moe_routing(&t.moe_routing) {
        training.insert("moe_routing", value(routing));
    }
    if t.moe_a2a_overlap {
        training.insert("moe_a2a_overlap", value(true));
    }
    if t.moe_dispatcher != MoeDispatcher::AllToAll {
        training.insert("moe_dispatcher", value(t.moe_dispatcher.as_str()));
    }
    training.insert("grad_bucket_bytes", int(t.grad_bucket_bytes));
    doc.insert("training", Item::Table(training));

    let mut memory = Table::new();
    memory.insert("reserved_bytes", int(s.memory.reserved_bytes));
    memory.insert(
        "allocator_slack_fraction",
        value(s.memory.allocator_slack_fraction),
    );
    let accounting = name_of(&ACCOUNTINGS, s.memory.accounting);
    memory.insert("accounting", value(accounting));
    doc.insert("memory", Item::Table(memory));

    let r = &s.run;
    let mut run = Table::new();
    run.insert("iterations", int(u64::from(r.iterations)));
    run.insert("seed", int(r.seed));
    let granularity = name_of(&GRANULARITIES, r.granularity);
    run.insert("granularity", value(granularity));
    doc.insert("run", Item::Table(run));

    doc.to_string()
}

#[cfg(test)]
mod tests {
    use super::super::{to_toml, Document};
    use super::with_side_sections;

    fn bundled(name: &str) -> String {
        let path = format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn side_sections_survive_a_round_trip_through_the_emitter() {
        let text = bundled("512xA100-faults.toml");
        let src = Document::parse(&text, "faults").unwrap();
        let valid = src.validate(&[]).unwrap();
        let (scenario, faults) = (valid.scenario, valid.faults);
        let plain = to_toml(&scenario);
        assert!(
            !plain.contains("[faults"),
            "the emitter alone drops [faults]"
        );
        let kept = with_side_sections(&plain, &text);
        let again = Document::parse(&kept, "kept").unwrap();
        let valid = again.validate(&[]).unwrap();
        let (scenario2, faults2) = (valid.scenario, valid.faults);
        assert_eq!(scenario, scenario2);
        assert_eq!(faults, faults2);
        assert!(faults2.is_some());

        let text = bundled("checks/small-fail.toml");
        let doc = Document::parse(&text, "checks").unwrap();
        let valid = doc.validate(&[]).unwrap();
        let (s, checks) = (valid.scenario, valid.checks);
        let kept = with_side_sections(&to_toml(&s), &text);
        let doc2 = Document::parse(&kept, "kept").unwrap();
        let valid2 = doc2.validate(&[]).unwrap();
        let (s2, checks2) = (valid2.scenario, valid2.checks);
        assert_eq!(s, s2);
        assert_eq!(checks, checks2);
        assert!(!checks2.is_empty());
        // Not TOML: nothing is added, nothing breaks.
        assert_eq!(with_side_sections(&to_toml(&s), "= ["), to_toml(&s));
    }

    /// Every `moe_routing` form is written back and parses to the same scenario; the default
    /// is not written.
    #[test]
    fn moe_routing_forms_survive_a_round_trip() {
        use super::super::MoeRouting;
        let moe = "[model]\nlayers = 2\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n\
                   experts = 4\ntop_k = 2\n[cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 8\n\
                   [parallel]\nep = 2\n[training]\nglobal_batch = 8\n";
        let cases = [
            ("\"balanced\"", MoeRouting::Balanced),
            ("\"force-balanced\"", MoeRouting::ForceBalanced),
            (
                "{ capacity_factor = 1.25 }",
                MoeRouting::Capacity { factor: 1.25 },
            ),
            ("{ imbalance = 2 }", MoeRouting::Imbalance { max_load: 2.0 }),
            (
                "{ expert_loads = [1, 0.1, 0, 3e-7] }",
                MoeRouting::ExpertLoads(vec![1.0, 0.1, 0.0, 3e-7]),
            ),
            (
                "{ expert_load_cv = 0.3 }",
                MoeRouting::ExpertLoadCv { cv: 0.3 },
            ),
        ];
        for (form, want) in cases {
            let text = format!("{moe}moe_routing = {form}\n");
            let s = Document::parse(&text, "moe.toml")
                .and_then(|d| d.validate(&[]).map(|v| v.scenario))
                .unwrap_or_else(|e| panic!("{form}: {e}"));
            assert_eq!(s.training.moe_routing, want, "{form}");
            let emitted = to_toml(&s);
            assert_eq!(
                emitted.contains("moe_routing"),
                want != MoeRouting::Balanced,
                "{emitted}"
            );
            let again = Document::parse(&emitted, "emitted.toml")
                .and_then(|d| d.validate(&[]).map(|v| v.scenario))
                .unwrap_or_else(|e| panic!("{form}: {e}\n{emitted}"));
            assert_eq!(again, s, "{form}");
        }
    }

    /// `moe_a2a_overlap = true` is written back and parses to the same scenario; false, the
    /// default, is not written.
    #[test]
    fn moe_a2a_overlap_survives_a_round_trip() {
        let moe = "[model]\nlayers = 2\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n\
                   experts = 4\ntop_k = 2\n[cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 8\n\
                   [parallel]\nep = 2\n[training]\nglobal_batch = 8\n";
        for on in [false, true] {
            let text = format!("{moe}moe_a2a_overlap = {on}\n");
            let s = Document::parse(&text, "moe.toml")
                .and_then(|d| d.validate(&[]).map(|v| v.scenario))
                .unwrap_or_else(|e| panic!("{on}: {e}"));
            assert_eq!(s.training.moe_a2a_overlap, on);
            let emitted = to_toml(&s);
            assert_eq!(emitted.contains("moe_a2a_overlap = true"), on, "{emitted}");
            assert_eq!(emitted.contains("moe_a2a_overlap"), on, "{emitted}");
            let again = Document::parse(&emitted, "emitted.toml")
                .and_then(|d| d.validate(&[]).map(|v| v.scenario))
                .unwrap_or_else(|e| panic!("{on}: {e}\n{emitted}"));
            assert_eq!(again, s, "{on}");
        }
    }
}
