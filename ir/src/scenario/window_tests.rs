//! `[model] sliding_window`, `sliding_window_every` and `attention_sinks`, and `[training]
//! grad_reduce_dtype` and `optimizer_state_dtype`: what they read to, that they survive the scenario writer, and each
//! refusal names the key and what to write.

use super::{Document, Scenario, ScenarioError, SlidingWindow};

fn text(model_extra: &str, parallel: &str) -> String {
    format!(
        "[model]\nlayers = 4\nhidden = 64\nheads = 4\nseq_len = 128\nvocab = 1000\n{model_extra}\
         [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 2\n[parallel]\n{parallel}\
         [training]\nglobal_batch = 8\n"
    )
}

fn resolve(text: &str) -> Result<Scenario, ScenarioError> {
    let doc = Document::parse(text, "window.toml")?;
    doc.validate(&[]).map(|v| v.scenario)
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
