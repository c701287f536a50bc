//! The framework files: the bundled ones parse and say what twin models, the format's errors
//! are located and name what is allowed, and a scenario a framework cannot launch is refused
//! with the framework, the keys and the reason.

use super::*;
use crate::scenario::{to_toml, Document, MemorySettings, Scenario};

fn bundled_text(name: &str) -> String {
    let path = format!(
        "{}/../scenarios/frameworks/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

fn scenario_text(name: &str) -> String {
    let path = format!("{}/../scenarios/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

fn resolve(text: &str, overrides: &[&str]) -> Result<Scenario, ScenarioError> {
    let doc = Document::parse(text, "scenario.toml")?;
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    doc.validate(&overrides).map(|v| v.scenario)
}

#[test]
fn every_bundled_file_parses_under_its_own_name() {
    for b in Bundled::ALL {
        let fw = b.framework().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fw.name, b.name());
        assert_eq!(fw.origin, Origin::Bundled(b));
        // The embedded text is the file in scenarios/frameworks/.
        assert_eq!(b.text(), bundled_text(b.name()));
    }
    for (name, b) in FRAMEWORKS {
        assert!(name == b.name() || (name == "nemo" && b == Bundled::MegatronCore));
    }
}

/// The default framework is what twin's model does: the defaults of `[memory]` and the fp32
/// softmax the head's activations count, and no layout refused but FP8 scaled per row (which
/// Transformer Engine has no recipe for).
#[test]
fn megatron_core_describes_what_twin_models() {
    let fw = default_framework().unwrap();
    assert_eq!(fw.name, "megatron-core");
    assert_eq!(fw.attention_backend, AttentionBackend::Flash);
    assert_eq!(
        fw.memory.allocator_slack_fraction,
        MemorySettings::DEFAULT_ALLOCATOR_SLACK_FRACTION
    );
    assert_eq!(fw.memory.loss_logits_bytes, 4);
    let refused: Vec<String> = fw.cannot_run.iter().map(Limit::describe).collect();
    assert_eq!(
        refused,
        ["training.precision = fp8 and training.fp8_recipe in [rowwise]"]
    );
    assert!(fw.cannot_run[0]
        .reference
        .starts_with("NVIDIA/TransformerEngine@"));
    assert_eq!(fw.overlaps.grad_reduce, GradReduce::LastMicrobatch);
    assert_eq!(
        fw.overlaps.param_gather,
        ParamGather::FirstMicrobatchForward
    );
    assert_eq!(fw.recompute.selective, SelectiveRecompute::AttentionCore);
    let s = resolve(&scenario_text("512xA100.toml"), &[]).unwrap();
    assert_eq!(s.training.framework, fw);
    assert!(!s.training.compile && !s.training.cuda_graphs);
    let nemo = resolve(
        &scenario_text("512xA100.toml"),
        &["training.framework=\"nemo\""],
    )
    .unwrap();
    assert_eq!(nemo.training.framework, fw);
}

/// `text` with `old` replaced (once, and it must be there).
/// The attention kernel by GPU: a file with `backend_from_sm90` runs that kernel from compute
/// capability 9.0 on and `backend` below and on a GPU of unknown capability; a file without it
/// runs its `backend` everywhere; a bad name there is refused with its key and the names.
#[test]
fn attention_backend_follows_the_gpus_compute_capability() {
    let tt = Bundled::Torchtitan.framework().unwrap();
    assert_eq!(tt.attention_backend_from_sm90, None);
    for cc in [Some((8, 0)), Some((9, 0)), None] {
        assert_eq!(tt.attention_backend_on(cc), AttentionBackend::Flash);
    }
    let line = "backend = { value = \"flash\", ref = \"t\" }";
    let text = bundled_text("torchtitan");
    let start = text.find("backend = {").unwrap();
    let end = start + text[start..].find('\n').unwrap();
    let base = format!("{}{line}{}", &text[..start], &text[end..]);
    let split = with(
        &base,
        line,
        &format!("{line}\nbackend_from_sm90 = {{ value = \"cudnn\", ref = \"t\" }}"),
    );
    let fw = parse_str(&split, "split.toml").unwrap();
    assert_eq!(
        fw.attention_backend_from_sm90,
        Some(AttentionBackend::Cudnn)
    );
    assert_eq!(
        fw.attention_backend_on(Some((9, 0))),
        AttentionBackend::Cudnn
    );
    assert_eq!(
        fw.attention_backend_on(Some((10, 0))),
        AttentionBackend::Cudnn
    );
    assert_eq!(
        fw.attention_backend_on(Some((8, 0))),
        AttentionBackend::Flash
    );
    assert_eq!(fw.attention_backend_on(None), AttentionBackend::Flash);
    assert_eq!(
        crate::scenario::gpu_compute_capability("a100-sxm-80gb"),
        Some((8, 0))
    );
    assert_eq!(
        crate::scenario::gpu_compute_capability("h200-sxm-141gb"),
        Some((9, 0))
    );
    assert_eq!(
        crate::scenario::gpu_compute_capability("gb200"),
        Some((10, 0))
    );
    assert_eq!(crate::scenario::gpu_compute_capability("custom"), None);

    let bad = split.replace("value = \"cudnn\"", "value = \"xformers\"");
    let e = parse_str(&bad, "split.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "attention.backend_from_sm90.value");
    assert_eq!(e.allowed, "`flash`, `cudnn`, `triton`");
}

fn with(text: &str, old: &str, new: &str) -> String {
    assert!(text.contains(old), "{old}");
    text.replacen(old, new, 1)
}

#[test]
fn format_errors_name_the_file_line_key_and_what_is_allowed() {
    let base = bundled_text("deepspeed");
    let line_of = |text: &str, needle: &str| -> u32 {
        let i = text.find(needle).unwrap();
        text[..i].lines().count() as u32 + u32::from(text[..i].ends_with('\n'))
    };

    // An unknown key inside a section.
    let text = with(&base, "[launch]\n", "[launch]\ngraph_gap_ns = 3\n");
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!(e.origin, "my.toml");
    assert_eq!(e.line, Some(line_of(&text, "graph_gap_ns")));
    assert_eq!(e.key, "graph_gap_ns");
    assert_eq!(
        e.allowed,
        "`cuda_graphs_kernel_gap_ns`, `host_per_kernel_ns`, `compiled_host_per_kernel_ns`, \
         `cuda_graphs_host_per_kernel_ns`"
    );

    // A name that is not allowed: did-you-mean and the list.
    let text = with(&base, "value = \"flash\"", "value = \"flsh\"");
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "attention.backend.value");
    assert_eq!(e.value, "\"flsh\"");
    assert!(e.message.contains("did you mean `flash`"), "{e}");
    assert_eq!(e.allowed, "`flash`, `cudnn`, `triton`");
    assert_eq!(e.line, Some(line_of(&text, "\"flsh\"")));

    // A value without its source.
    let text = base.replace(
        "loss_logits_bytes = { value = 4, ref = \"the wrapped model's loss, as hf.toml (huggingface/transformers@d0fed636753eeb35d790126c4496d06847983d60:src/transformers/loss/loss_utils.py ForCausalLMLoss upcasts the logits)\" }",
        "loss_logits_bytes = { value = 4, ref = \"  \" }",
    );
    assert_ne!(text, base);
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.key, "memory.loss_logits_bytes.ref");
    assert!(e.message.contains("source"), "{e}");

    // Out of range.
    let text = with(
        &base,
        "loss_logits_bytes = { value = 4,",
        "loss_logits_bytes = { value = 9,",
    );
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.key, "memory.loss_logits_bytes.value");
    assert_eq!(e.allowed, "0 ..= 8");

    // A limit's condition names an unknown schedule, and a key a limit cannot test.
    let text = with(&base, "\"zero-bubble\"]", "\"zero-bubbles\"]");
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.key, "cannot_run[1].when.schedule");
    assert!(e.message.contains("did you mean `zero-bubble`"), "{e}");
    let text = with(
        &base,
        "when = { zero = { min = 2 }",
        "when = { zeros = { min = 2 }",
    );
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::UnknownKey);
    assert_eq!(e.key, "zeros");
    assert!(
        e.allowed.contains("`zero`") && e.allowed.contains("`schedule`"),
        "{e}"
    );
    // A range with no bound.
    let text = with(&base, "when = { zero = { min = 2 }", "when = { zero = { }");
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.key, "cannot_run[0].when.zero");
}

#[test]
fn deepspeed_refuses_zero_2_and_3_with_pipeline_parallelism() {
    let text = scenario_text("512xA100.toml");
    // 512xA100 is pp 8, zero 1: deepspeed launches it.
    let ok = resolve(&text, &["training.framework=\"deepspeed\""]).unwrap();
    assert_eq!(ok.training.framework.name, "deepspeed");
    for zero in [2, 3] {
        let set = format!("parallel.zero={zero}");
        let e = resolve(&text, &["training.framework=\"deepspeed\"", &set]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::CrossField);
        // The latest override among the keys involved is blamed.
        assert_eq!(e.key, "parallel.zero");
        assert_eq!(e.origin, format!("--set {set}"));
        for part in [
            "framework deepspeed cannot launch this layout",
            &format!("parallel.zero = {zero}"),
            "parallel.pp = 8",
            "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
            "microsoft/DeepSpeed@",
        ] {
            assert!(e.message.contains(part), "{part}: {e}");
        }
        assert_eq!(
            e.allowed,
            "a layout outside parallel.pp >= 2 and parallel.zero >= 2, or another framework"
        );
    }
    // With the framework written in the file, the layout key set by --set is blamed.
    let in_file = with(
        &text,
        "[training]\n",
        "[training]\nframework = \"deepspeed\"\n",
    );
    let e = resolve(&in_file, &["parallel.zero=3"]).unwrap_err();
    assert_eq!(e.key, "parallel.zero");
    // megatron-core launches the same layout.
    resolve(&text, &["parallel.zero=3"]).unwrap();
}

#[test]
fn torchtitan_and_hf_limits() {
    let text = scenario_text("512xA100.toml");
    let e = resolve(&text, &["training.framework=\"torchtitan\""]).unwrap_err();
    assert!(e.message.contains("FSDP2"), "{e}");
    assert_eq!(e.key, "training.framework");
    resolve(
        &text,
        &["training.framework=\"torchtitan\"", "parallel.zero=3"],
    )
    .unwrap();
    let e = resolve(
        &text,
        &["training.framework=\"torchtitan\"", "parallel.zero=0"],
    )
    .unwrap_err();
    assert!(e.message.contains("DDP has not supported > 1D"), "{e}");
    let e = resolve(&text, &["training.framework=\"hf\"", "parallel.zero=3"]).unwrap_err();
    assert!(e.message.contains("no pipeline"), "{e}");
}

#[test]
fn framework_file_is_read_relative_to_the_scenario_and_written_back() {
    let dir = std::env::temp_dir().join(format!("twin-framework-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("fw")).unwrap();
    let mine = with(
        &bundled_text("megatron-core"),
        "allocator_slack_fraction = { value = 0.0,",
        "allocator_slack_fraction = { value = 0.05,",
    );
    let mine = with(&mine, "name = \"megatron-core\"", "name = \"mine\"");
    std::fs::write(dir.join("fw/mine.toml"), &mine).unwrap();
    let text = with(
        &scenario_text("small.toml"),
        "[training]\n",
        "[training]\nframework_file = \"fw/mine.toml\"\ncuda_graphs = true\n",
    );
    let origin = dir.join("s.toml").display().to_string();
    let doc = Document::parse(&text, &origin).unwrap();
    let s = doc.validate(&[]).unwrap().scenario;
    assert_eq!(s.training.framework.name, "mine");
    assert!(s.training.cuda_graphs);
    // The framework's slack is [memory]'s default; the key still overrides it.
    assert_eq!(s.memory.allocator_slack_fraction, 0.05);
    let set = ["memory.allocator_slack_fraction=0.1".to_string()];
    assert_eq!(
        doc.validate(&set)
            .unwrap()
            .scenario
            .memory
            .allocator_slack_fraction,
        0.1
    );
    // Written back with the file's absolute path, it reads back equal from anywhere.
    let emitted = to_toml(&s);
    assert!(emitted.contains("framework_file = "), "{emitted}");
    let again = Document::parse(&emitted, "elsewhere/x.toml")
        .unwrap()
        .validate(&[])
        .unwrap()
        .scenario;
    assert_eq!(again, s);

    // Both keys, and a file that is not there.
    let both = with(&text, "[training]\n", "[training]\nframework = \"hf\"\n");
    let e = Document::parse(&both, &origin)
        .unwrap()
        .validate(&[])
        .unwrap_err();
    assert_eq!(e.key, "training.framework_file");
    assert!(e
        .allowed
        .contains("either training.framework or training.framework_file"));
    let missing = with(&text, "fw/mine.toml", "fw/none.toml");
    let e = Document::parse(&missing, &origin)
        .unwrap()
        .validate(&[])
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert_eq!(e.key, "training.framework_file");
    assert!(e.message.contains("none.toml"), "{e}");
    // An error inside the user's file names that file.
    std::fs::write(
        dir.join("fw/mine.toml"),
        mine.replace("[launch]", "[lunch]"),
    )
    .unwrap();
    let e = doc.validate(&[]).unwrap_err();
    assert!(e.origin.ends_with("mine.toml"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bundled_frameworks_compile_and_cuda_graphs_round_trip() {
    let text = scenario_text("small.toml");
    let s = resolve(
        &text,
        &[
            "training.framework=\"torchtitan\"",
            "parallel.zero=3",
            "training.compile=true",
            "training.cuda_graphs=true",
        ],
    )
    .unwrap();
    assert_eq!(s.training.framework.name, "torchtitan");
    assert!(s.training.compile && s.training.cuda_graphs);
    let again = resolve(&to_toml(&s), &[]).unwrap();
    assert_eq!(again, s);
}

/// torchtitan's per-op selective checkpointing saves every second matmul; a name outside the
/// two policies is refused with the list.
#[test]
fn selective_recompute_policy_is_read_and_checked() {
    let tt = Bundled::Torchtitan.framework().unwrap();
    assert_eq!(
        tt.recompute.selective,
        SelectiveRecompute::EverySecondMatmul
    );
    let text = with(
        &bundled_text("torchtitan"),
        "value = \"every-second-matmul\"",
        "value = \"every-matmul\"",
    );
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.key, "recompute.selective.value");
    assert_eq!(e.allowed, "`attention-core`, `every-second-matmul`");
}

/// llm-foundry's file (MosaicML Composer + FSDP1, MPT): every value as the file states it, and
/// the layouts it refuses (no tensor, pipeline, context or expert parallelism, nothing that
/// shards only the optimizer state) against the FSDP layout its benchmarks ran.
#[test]
fn llm_foundry_file_says_what_composer_and_mpt_do() {
    let fw = Bundled::LlmFoundry.framework().unwrap();
    assert_eq!(fw.name, "llm-foundry");
    assert_eq!(fw.origin, Origin::Bundled(Bundled::LlmFoundry));
    assert_eq!(fw.attention_backend, AttentionBackend::Triton);
    assert_eq!(fw.attention_backend_from_sm90, None);
    let o = &fw.overlaps;
    assert_eq!(o.grad_reduce, GradReduce::EveryMicrobatch);
    assert!(o.grad_reduce_bucketed);
    assert_eq!(o.param_gather, ParamGather::PerLayer);
    assert_eq!(o.fsdp_prefetch, 1);
    assert_eq!(o.reshard_after_forward, Reshard::Always);
    assert!(!o.tp_comm_overlap && !o.p2p_overlap);
    let eager = fw.fusions.eager;
    assert_eq!(
        (eager.kernels, eager.hidden_passes, eager.ffn_passes),
        (5, 10, 3)
    );
    let compiled = fw.fusions.compiled;
    assert_eq!(
        (
            compiled.kernels,
            compiled.hidden_passes,
            compiled.ffn_passes
        ),
        (4, 9, 3)
    );
    assert_eq!(
        fw.optimizer,
        OptimizerImpl {
            kernel: OptimizerKernel::ForLoop,
            master_weights: Dtype::Fp32,
            grad_buffer: Dtype::Fp32,
            clip_scale: ClipScale::Always,
        }
    );
    let m = fw.memory;
    assert!(m.contiguous_grad_buffer && !m.autocast_weight_copies);
    // The fused cross entropy keeps the bf16 logits, not an fp32 softmax.
    assert_eq!(m.loss_logits_bytes, 2);
    assert_eq!(
        m.allocator_slack_fraction,
        MemorySettings::DEFAULT_ALLOCATOR_SLACK_FRACTION
    );
    assert_eq!(fw.launch.cuda_graphs_kernel_gap_ns, 500);
    let refused: Vec<String> = fw.cannot_run.iter().map(Limit::describe).collect();
    assert_eq!(
        refused,
        [
            "parallel.tp >= 2",
            "parallel.pp >= 2",
            "parallel.cp >= 2",
            "parallel.ep >= 2",
            "parallel.zero = 1",
            "training.precision = fp8 and training.fp8_recipe in [rowwise]",
            "training.fp8_param_gather = true",
        ]
    );
    for l in &fw.cannot_run[..5] {
        assert!(l.reference.starts_with("mosaicml/"), "{}", l.reference);
    }

    // The benchmarks' layout: FSDP FULL_SHARD over every GPU.
    let text = scenario_text("small.toml");
    let fsdp = [
        "training.framework=\"llm-foundry\"",
        "parallel.tp=1",
        "parallel.pp=1",
        "parallel.dp=8",
        "parallel.sequence_parallel=false",
        "parallel.zero=3",
    ];
    let s = resolve(&text, &fsdp).unwrap();
    assert_eq!(s.training.framework, fw);
    // small.toml is tp 2, pp 2: refused, blaming the framework set last.
    let e = resolve(&text, &["training.framework=\"llm-foundry\""]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CrossField);
    assert_eq!(e.key, "training.framework");
    for part in [
        "framework llm-foundry cannot launch this layout",
        "parallel.tp = 2",
        "no tensor parallelism",
        "mosaicml/llm-foundry@061f2c7ce64e655100286584a7629e2a09f827ba",
    ] {
        assert!(e.message.contains(part), "{part}: {e}");
    }
    let one_more = |set: &[&str]| {
        let mut all = fsdp.to_vec();
        all.extend_from_slice(set);
        resolve(&text, &all)
    };
    let e = one_more(&["parallel.zero=1"]).unwrap_err();
    assert_eq!(e.key, "parallel.zero");
    assert!(e.message.contains("only the optimizer state"), "{e}");
    let e = one_more(&["parallel.dp=4", "parallel.cp=2"]).unwrap_err();
    assert_eq!(e.key, "parallel.cp");
    assert!(e.message.contains("no context parallelism"), "{e}");
    // What Composer's FSDP does run: NO_SHARD (zero 0) and SHARD_GRAD_OP (zero 2).
    for zero in ["parallel.zero=0", "parallel.zero=2"] {
        one_more(&[zero]).unwrap();
    }
}

/// Without `parallel.cp_algorithm` a scenario takes its framework's: Megatron-Core's ring
/// (`--cp-comm-type p2p`), torchtitan's all-gather; the key, when written, wins.
#[test]
fn cp_algorithm_defaults_to_the_framework_s() {
    use crate::scenario::CpAlgorithm;
    let text = scenario_text("512xA100.toml");
    let mc = resolve(&text, &[]).unwrap();
    assert_eq!(mc.parallel.cp_algorithm, CpAlgorithm::Ring);
    let tt = resolve(
        &text,
        &["training.framework=\"torchtitan\"", "parallel.zero=3"],
    )
    .unwrap();
    assert_eq!(tt.parallel.cp_algorithm, CpAlgorithm::AllGather);
    let set = resolve(&text, &["parallel.cp_algorithm=\"ulysses\""]).unwrap();
    assert_eq!(set.parallel.cp_algorithm, CpAlgorithm::Ulysses);
    // Written back, the resolved value is explicit and survives a change of framework.
    let again = resolve(&to_toml(&tt), &["training.framework=\"megatron-core\""]).unwrap();
    assert_eq!(again.parallel.cp_algorithm, CpAlgorithm::AllGather);
}

/// `overlaps.moe_a2a_overlap`: megatron-core can overlap the expert-parallel all-to-alls and
/// every other bundled file says it cannot; a file without the key cannot; an empty `ref` or a
/// value that is not a boolean is refused at its line and key; and a file of the user's that
/// says it can lets a scenario set `moe_a2a_overlap`.
#[test]
fn moe_a2a_overlap_capability_is_read_and_defaults_to_false() {
    for b in Bundled::ALL {
        let fw = b.framework().unwrap();
        assert_eq!(
            fw.overlaps.moe_a2a_overlap,
            b == Bundled::MegatronCore,
            "{}",
            b.name()
        );
        // Every bundled file says so explicitly, with its source.
        let text = bundled_text(b.name());
        let line = text
            .lines()
            .find(|l| l.starts_with("moe_a2a_overlap = { value = "))
            .unwrap_or_else(|| panic!("{}: no overlaps.moe_a2a_overlap", b.name()));
        assert!(!line.contains("ref = \"\""), "{line}");
    }
    let text = bundled_text("megatron-core");
    let line = text
        .lines()
        .find(|l| l.starts_with("moe_a2a_overlap = "))
        .unwrap();
    let without = with(&text, &format!("{line}\n"), "");
    assert!(
        !parse_str(&without, "mine.toml")
            .unwrap()
            .overlaps
            .moe_a2a_overlap
    );

    let line_no = text
        .lines()
        .position(|l| l.starts_with("moe_a2a_overlap = "))
        .unwrap() as u32
        + 1;
    let empty_ref = with(
        &text,
        line,
        "moe_a2a_overlap = { value = true, ref = \"\" }",
    );
    let e = parse_str(&empty_ref, "mine.toml").unwrap_err();
    assert_eq!(
        (e.key.as_str(), e.line),
        ("overlaps.moe_a2a_overlap.ref", Some(line_no)),
        "{e}"
    );
    let not_bool = with(
        &text,
        line,
        "moe_a2a_overlap = { value = \"yes\", ref = \"r\" }",
    );
    let e = parse_str(&not_bool, "mine.toml").unwrap_err();
    assert_eq!(e.line, Some(line_no), "{e}");

    // torchtitan's file, told it can: a scenario may then set the flag.
    let dir = std::env::temp_dir().join(format!("twin-a2a-fw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tt = bundled_text("torchtitan");
    let tt_line = tt
        .lines()
        .find(|l| l.starts_with("moe_a2a_overlap = "))
        .unwrap();
    let can = with(
        &tt,
        tt_line,
        "moe_a2a_overlap = { value = true, ref = \"mine\" }",
    );
    std::fs::write(dir.join("tt-can.toml"), can).unwrap();
    let moe = "[model]\nlayers = 2\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n\
               experts = 4\ntop_k = 2\n[cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 8\n\
               [parallel]\nep = 2\n[training]\nglobal_batch = 8\nmoe_a2a_overlap = true\n";
    let origin = dir.join("moe.toml").display().to_string();
    let mine = format!("{moe}framework_file = \"tt-can.toml\"\n");
    let s = Document::parse(&mine, &origin)
        .unwrap()
        .validate(&[])
        .unwrap()
        .scenario;
    assert!(s.training.moe_a2a_overlap && s.training.framework.overlaps.moe_a2a_overlap);
    let e = resolve(moe, &["training.framework=\"torchtitan\""]).unwrap_err();
    assert_eq!(e.key, "training.framework", "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `memory.loss_backward_bytes` is optional (0 when absent, as in Megatron-Core's file, whose
/// fused cross entropy writes the gradient into its saved softmax); the Hugging Face file sets
/// it; a value out of `0 ..= 64` is refused at its line and key.
#[test]
fn loss_backward_bytes_is_optional_and_bounded() {
    assert_eq!(
        Bundled::MegatronCore
            .framework()
            .unwrap()
            .memory
            .loss_backward_bytes,
        0
    );
    let hf = bundled_text("hf");
    assert_eq!(
        parse_str(&hf, "hf.toml")
            .unwrap()
            .memory
            .loss_backward_bytes,
        14
    );
    let line = hf
        .lines()
        .find(|l| l.starts_with("loss_backward_bytes = "))
        .unwrap();
    let line_no = hf.lines().position(|l| l == line).unwrap() as u32 + 1;
    let huge = with(
        &hf,
        line,
        "loss_backward_bytes = { value = 65, ref = \"r\" }",
    );
    let e = parse_str(&huge, "mine.toml").unwrap_err();
    assert_eq!(
        (e.key.as_str(), e.line),
        ("memory.loss_backward_bytes.value", Some(line_no)),
        "{e}"
    );
    let without = with(&hf, &format!("{line}\n"), "");
    assert_eq!(
        parse_str(&without, "mine.toml")
            .unwrap()
            .memory
            .loss_backward_bytes,
        0
    );
}

/// torchtitan's file states PyTorch's fp32 context-parallel merges and pipelined FSDP2's
/// reduction; both keys are optional (megatron-core leaves them out: fused merges, reduction as
/// `grad_reduce` says), and an unknown name is refused with the key, its line and the names.
#[test]
fn cp_merge_and_pipelined_reduction_are_optional_and_checked() {
    let tt = Bundled::Torchtitan.framework().unwrap();
    assert_eq!(tt.cp_merge, CpMerge::EagerFp32);
    assert_eq!(
        tt.overlaps.grad_reduce_pipelined,
        Some(GradReduce::AfterBackward)
    );
    let mc = Bundled::MegatronCore.framework().unwrap();
    assert_eq!(mc.cp_merge, CpMerge::Fused);
    assert_eq!(mc.overlaps.grad_reduce_pipelined, None);
    let text = bundled_text("torchtitan");
    for (prefix, key, allowed) in [
        (
            "cp_merge = ",
            "attention.cp_merge.value",
            "`fused`, `eager-fp32`",
        ),
        (
            "grad_reduce_pipelined = ",
            "overlaps.grad_reduce_pipelined.value",
            "`last-microbatch`, `every-microbatch`, `after-backward`",
        ),
    ] {
        let line = text.lines().find(|l| l.starts_with(prefix)).unwrap();
        let line_no = text.lines().position(|l| l == line).unwrap() as u32 + 1;
        let bad = with(
            &text,
            line,
            &format!("{prefix}{{ value = \"eager\", ref = \"r\" }}"),
        );
        let e = parse_str(&bad, "mine.toml").unwrap_err();
        assert_eq!((e.key.as_str(), e.line), (key, Some(line_no)), "{e}");
        assert_eq!(e.allowed, allowed, "{e}");
    }
}

#[test]
fn host_issue_keys_are_optional_and_default_from_the_eager_value() {
    let base = bundled_text("deepspeed");
    let fw = parse_str(&base, "my.toml").unwrap();
    assert_eq!(fw.launch.host_per_kernel_ns, 0);
    assert_eq!(fw.launch.compiled_host_per_kernel_ns, 0);
    assert_eq!(fw.launch.cuda_graphs_host_per_kernel_ns, 0);

    let text = with(
        &base,
        "[launch]\n",
        "[launch]\nhost_per_kernel_ns = { value = 7000, ref = \"a trace\" }\n",
    );
    let fw = parse_str(&text, "my.toml").unwrap();
    assert_eq!(fw.launch.host_per_kernel_ns, 7000);
    // Unstated: compiled takes the eager value, CUDA graphs none.
    assert_eq!(fw.launch.compiled_host_per_kernel_ns, 7000);
    assert_eq!(fw.launch.cuda_graphs_host_per_kernel_ns, 0);

    let text = with(
        &text,
        "[launch]\n",
        "[launch]\ncompiled_host_per_kernel_ns = { value = 2000000000, ref = \"x\" }\n",
    );
    let e = parse_str(&text, "my.toml").unwrap_err();
    assert_eq!(e.key, "launch.compiled_host_per_kernel_ns.value");
    assert_eq!(e.allowed, "0 ..= 1000000000");
}

#[test]
fn kernels_round_the_head_dimension_up_to_the_one_they_were_compiled_for() {
    use AttentionBackend::*;
    // FlashAttention-2's HEADDIM_SWITCH: 32, 64, 96, 128, 160, 192, 256.
    for (d, k) in [
        (1, 32),
        (32, 32),
        (33, 64),
        (80, 96),
        (112, 128),
        (128, 128),
        (129, 160),
        (192, 192),
        (200, 256),
        (256, 256),
        (300, 300),
    ] {
        assert_eq!(Flash.kernel_head_dim(d), k, "flash d {d}");
    }
    // The Triton kernel: the next power of two, at least 16.
    for (d, k) in [
        (1, 16),
        (16, 16),
        (24, 32),
        (80, 128),
        (112, 128),
        (128, 128),
    ] {
        assert_eq!(Triton.kernel_head_dim(d), k, "triton d {d}");
    }
    for d in [1, 80, 112, 128, 300] {
        assert_eq!(Cudnn.kernel_head_dim(d), d);
    }
}

/// `report.attention_flops` says how the framework's logs count the attention core: each
/// bundled file states it; a file without the section counts the full square (twin's own
/// model FLOPs); an unknown name is refused with its key, line and the names.
#[test]
fn attention_flops_convention_is_read_and_checked() {
    let want = [
        (Bundled::MegatronCore, AttentionFlops::Causal),
        (Bundled::Torchtitan, AttentionFlops::Full),
        (Bundled::Deepspeed, AttentionFlops::Full),
        (Bundled::Hf, AttentionFlops::None),
        (Bundled::LlmFoundry, AttentionFlops::Full),
    ];
    for (b, conv) in want {
        assert_eq!(b.framework().unwrap().attention_flops, conv, "{}", b.name());
    }
    let text = bundled_text("megatron-core");
    let line = text
        .lines()
        .find(|l| l.starts_with("attention_flops = "))
        .unwrap();
    let line_no = text.lines().position(|l| l == line).unwrap() as u32 + 1;
    let bad = with(
        &text,
        line,
        "attention_flops = { value = \"casual\", ref = \"r\" }",
    );
    let e = parse_str(&bad, "mine.toml").unwrap_err();
    assert_eq!(
        (e.key.as_str(), e.line),
        ("report.attention_flops.value", Some(line_no)),
        "{e}"
    );
    assert_eq!(e.allowed, "`full`, `causal`, `none`", "{e}");
    assert!(e.message.contains("did you mean `causal`"), "{e}");
    let without = with(&text, line, "");
    assert_eq!(
        parse_str(&without, "mine.toml").unwrap().attention_flops,
        AttentionFlops::Full
    );
    // The count: twin's model FLOPs with the attention core replaced.
    assert_eq!(AttentionFlops::Full.model_flops(100, 30, 16), 100);
    assert_eq!(AttentionFlops::Causal.model_flops(100, 30, 16), 86);
    assert_eq!(AttentionFlops::None.model_flops(100, 30, 16), 70);
}
