//! `[model] sliding_window`, `sliding_window_every` and `attention_sinks`, and `[training]
//! grad_reduce_dtype`, `optimizer_state_dtype`, `fp8_param_gather`, `optimizer_kernel` and
//! `grad_clip`: what they read to, that they survive the scenario writer, and each
//! refusal names the key and what to write.

use super::{Scenario, ScenarioError, SlidingWindow};

fn text(model_extra: &str, parallel: &str) -> String {
    format!(
        "[model]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n{model_extra}\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 2\n[parallel]\n{parallel}\
         [training]\nglobal_batch = 8\n"
    )
}

fn resolve(text: &str) -> Result<Scenario, ScenarioError> {
    super::resolve_text(text, "window.toml", &[])
}

#[test]
fn window_keys_read_and_round_trip() {
    let s = resolve(&text(
        "sliding_window = 32\nsliding_window_every = 2\nattention_sinks = true\n",
        "",
    ))
    .unwrap();
    assert_eq!(
        s.model.sliding_window,
        Some(SlidingWindow {
            tokens: 32,
            every: 2
        })
    );
    assert!(s.model.attention_sinks);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.model, s.model);
    // Every layer by default.
    let s = resolve(&text("sliding_window = 32\n", "")).unwrap();
    assert_eq!(s.model.sliding_window.map(|w| w.every), Some(1));
    let s = resolve(&text("", "")).unwrap();
    assert_eq!(
        (s.model.sliding_window, s.model.attention_sinks),
        (None, false)
    );
}

#[test]
fn every_without_a_window_is_refused() {
    let e = resolve(&text("sliding_window_every = 2\n", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sliding_window_every"), "{e}");
    assert!(e.contains("set model.sliding_window too"), "{e}");
}

#[test]
fn ring_context_parallelism_refuses_a_window() {
    let e = resolve(&text(
        "sliding_window = 32\n",
        "cp = 2\ncp_algorithm = \"ring\"\n",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("cp_algorithm"), "{e}");
    assert!(e.contains("all-gather"), "{e}");
    resolve(&text(
        "sliding_window = 32\n",
        "cp = 2\ncp_algorithm = \"all-gather\"\n",
    ))
    .unwrap();
}

/// `[training] grad_reduce_dtype`: the framework's `optimizer.grad_buffer` when absent, the
/// value when given, written back by the scenario writer; another name is refused with the
/// allowed ones.
#[test]
fn grad_reduce_dtype_reads_defaults_and_round_trips() {
    use super::framework::Dtype;
    let plain = resolve(&text("", "")).unwrap();
    assert_eq!(plain.training.grad_reduce_dtype, None);
    assert_eq!(plain.training.grad_reduce_dtype(), Dtype::Fp32);
    let half = text("", "").replace(
        "global_batch = 8\n",
        "global_batch = 8\ngrad_reduce_dtype = \"bf16\"\n",
    );
    let s = resolve(&half).unwrap();
    assert_eq!(s.training.grad_reduce_dtype, Some(Dtype::Bf16));
    assert_eq!(s.training.grad_elem_bytes(), 2);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.training, s.training);
    let e = resolve(&half.replace("\"bf16\"", "\"fp8\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("training.grad_reduce_dtype") && e.contains("bf16"),
        "{e}"
    );
    // The optimizer's moments: fp32 unless `optimizer_state_dtype` says bf16.
    assert_eq!(plain.training.moment_elem_bytes(), 4);
    let moments = half.replace(
        "global_batch = 8\n",
        "global_batch = 8\noptimizer_state_dtype = \"bf16\"\n",
    );
    let s = resolve(&moments).unwrap();
    assert_eq!(s.training.optimizer_state_dtype, Some(Dtype::Bf16));
    assert_eq!(s.training.moment_elem_bytes(), 2);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.training, s.training);
}

/// `[training] fp8_param_gather`: off unless written; under FP8 training a gathered parameter
/// is then 1 byte instead of the 16-bit weights' 2 (and under bf16 it changes nothing); the
/// scenario writer keeps it; torchtitan refuses it with the rowwise recipe and llm-foundry
/// always, each naming the key and its value.
#[test]
fn fp8_param_gather_reads_round_trips_and_is_refused_where_the_framework_cannot() {
    let fp8 = text("", "").replace(
        "global_batch = 8\n",
        "global_batch = 8\nprecision = \"fp8\"\nfp8_recipe = \"tensorwise\"\n",
    );
    let plain = resolve(&fp8).unwrap();
    assert!(!plain.training.fp8_param_gather);
    assert_eq!(plain.training.param_gather_elem_bytes(), 2);
    let gathered = fp8.replace(
        "global_batch = 8\n",
        "global_batch = 8\nfp8_param_gather = true\n",
    );
    let s = resolve(&gathered).unwrap();
    assert!(s.training.fp8_param_gather);
    assert_eq!(s.training.param_gather_elem_bytes(), 1);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.training, s.training);
    let bf16 = resolve(&gathered.replace("\"fp8\"", "\"bf16\"")).unwrap();
    assert_eq!(bf16.training.param_gather_elem_bytes(), 2);
    // torchtitan gathers FP8 only with tensorwise scales.
    let titan = gathered.replace(
        "global_batch = 8\n",
        "global_batch = 8\nframework = \"torchtitan\"\n",
    );
    resolve(&titan).unwrap();
    let e = resolve(&titan.replace("\"tensorwise\"", "\"rowwise\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("training.fp8_param_gather") && e.contains("rowwise"),
        "{e}"
    );
    resolve(
        &titan
            .replace("\"tensorwise\"", "\"rowwise\"")
            .replace("fp8_param_gather = true\n", ""),
    )
    .unwrap();
    let e = resolve(&gathered.replace(
        "global_batch = 8\n",
        "global_batch = 8\nframework = \"llm-foundry\"\n",
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("training.fp8_param_gather"), "{e}");
}

/// `[training] optimizer_kernel` and `grad_clip`: the framework's kernel and clipping when
/// absent, the values when given, both written back by the scenario writer; another kernel
/// name is refused with the allowed ones.
#[test]
fn optimizer_kernel_and_grad_clip_read_default_and_round_trip() {
    use super::framework::{OptimizerKernel, OPTIMIZER_KERNELS};
    // The writer's names are the reader's.
    for (name, kernel) in OPTIMIZER_KERNELS {
        assert_eq!(kernel.as_str(), name);
    }
    let plain = resolve(&text("", "")).unwrap();
    assert_eq!(plain.training.optimizer_kernel, None);
    assert_eq!(plain.training.optimizer_kernel(), OptimizerKernel::Fused);
    assert!(plain.training.grad_clip);
    let set = text("", "").replace(
        "global_batch = 8\n",
        "global_batch = 8\noptimizer_kernel = \"for-loop\"\ngrad_clip = false\n",
    );
    let s = resolve(&set).unwrap();
    assert_eq!(s.training.optimizer_kernel(), OptimizerKernel::ForLoop);
    assert!(!s.training.grad_clip);
    let again = resolve(&super::emit::to_toml(&s)).unwrap();
    assert_eq!(again.training, s.training);
    let e = resolve(&set.replace("\"for-loop\"", "\"loop\""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("training.optimizer_kernel") && e.contains("for-loop"),
        "{e}"
    );
}
