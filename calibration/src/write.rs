//! The profile TOML emitter, in the format of docs/reference/profiles.md: every number an inline table
//! `{ value, source, ref, ci95 }`, sections in the documented order, then the host backend's
//! keys (`[host] cores`) and the `[provenance]` table of a
//! calibration run. Output depends only on its inputs (no clock, no map iteration order).

use serde::{Deserialize, Serialize};
use twin_sim::cost::Algorithm;
use twin_sim::profile::{LinkParams, Param, Profile, Source};

/// Keys of the host backend that the base profile format does not have yet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostKeys {
    /// CPU cores the ranks of one node share (nproc).
    pub cores: Param,
}

/// Where and how a profile was measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub hostname: String,
    pub cpu_model: String,
    pub cores: u32,
    pub date_utc: String,
    pub backend: String,
    pub twin_version: String,
    pub mode: String,
    pub command: String,
    pub cuda_version: Option<String>,
    pub nccl_version: Option<String>,
    /// The raw samples file beside the profile.
    pub samples_file: String,
}

/// A TOML basic string (JSON string escaping is valid TOML).
fn string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// A finite number in TOML: integers as integers, others with up to 6 significant digits.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "0".to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let mag = v.abs();
    if (1e-3..1e6).contains(&mag) {
        let decimals = (5 - mag.log10().floor() as i32).clamp(0, 9) as usize;
        let s = format!("{v:.decimals$}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{v:.5e}")
    }
}

fn source(s: Source) -> &'static str {
    match s {
        Source::Datasheet => "datasheet",
        Source::Published => "published",
        Source::Fitted => "fitted",
    }
}

/// `key = { value = .., source = .., ref = .., ci95 = [..] }`. The interval is rounded
/// outwards so it still contains the rounded value.
fn param(key: &str, p: &Param) -> String {
    let value = number(p.value);
    let mut s = format!(
        "{key} = {{ value = {value}, source = \"{}\", ref = {}",
        source(p.source),
        string(&p.reference)
    );
    if let Some([lo, hi]) = p.ci95 {
        if lo.is_finite() && hi.is_finite() {
            let v: f64 = value.parse().unwrap_or(p.value);
            let (lo_s, hi_s) = (number(lo.min(v)), number(hi.max(v)));
            let lo_s = if lo_s.parse::<f64>().map_or(true, |x| x > v) {
                value.clone()
            } else {
                lo_s
            };
            let hi_s = if hi_s.parse::<f64>().map_or(true, |x| x < v) {
                value.clone()
            } else {
                hi_s
            };
            s.push_str(&format!(", ci95 = [{lo_s}, {hi_s}]"));
        }
    }
    s.push_str(" }\n");
    s
}

fn link(out: &mut String, name: &str, l: &LinkParams) {
    out.push_str(&format!("\n[network.{name}]\n"));
    out.push_str(&param("bandwidth_bytes_per_s", &l.bandwidth_bytes_per_s));
    out.push_str(&param("latency_ns", &l.latency_ns));
    out.push_str(&param("efficiency", &l.efficiency));
    if let Some(p) = &l.p2p_latency_ns {
        out.push_str(&param("p2p_latency_ns", p));
    }
    if let Some(p) = &l.p2p_bandwidth_bytes_per_s {
        out.push_str(&param("p2p_bandwidth_bytes_per_s", p));
    }
}

/// `[attention]`: each curve the profile states.
fn attention(out: &mut String, a: &twin_sim::profile::AttentionParams) {
    out.push_str("\n[attention]\n");
    for (name, curve) in [
        ("flash.forward", &a.flash_forward),
        ("flash.backward", &a.flash_backward),
        ("cudnn.forward", &a.cudnn_forward),
        ("cudnn.backward", &a.cudnn_backward),
        ("triton.forward", &a.triton_forward),
        ("triton.backward", &a.triton_backward),
    ] {
        if let Some(c) = curve {
            out.push_str(&format!("\n[attention.{name}]\n"));
            out.push_str(&param("max_efficiency", &c.max_efficiency));
            out.push_str(&param("keys_half", &c.keys_half));
            out.push_str(&param("head_dim_half", &c.head_dim_half));
        }
    }
}

fn algorithm(a: Option<Algorithm>) -> &'static str {
    match a {
        Some(Algorithm::Ring) => "ring",
        Some(Algorithm::Tree) => "tree",
        Some(Algorithm::Hierarchical) => "hierarchical",
        Some(Algorithm::Nvls) => "nvls",
        Some(Algorithm::Local | Algorithm::Direct | Algorithm::NodeDedup) | None => "auto",
    }
}

/// The profile as TOML; `host` and `provenance` add their sections when given. `header` is
/// written as leading `#` comment lines.
pub fn profile_toml(
    p: &Profile,
    host: Option<&HostKeys>,
    provenance: Option<&Provenance>,
    header: &[String],
) -> String {
    let mut o = String::new();
    for h in header {
        o.push_str(&format!("# {h}\n"));
    }
    if !header.is_empty() {
        o.push('\n');
    }
    o.push_str(&format!("name = {}\n", string(&p.name)));
    o.push_str(&format!("description = {}\n", string(&p.description)));
    o.push_str(&format!("\n[gpu]\nname = {}\n", string(&p.gpu)));
    o.push_str(&param("sm_count", &p.sm_count));
    o.push_str(&param(
        "hbm_bandwidth_bytes_per_s",
        &p.hbm_bandwidth_bytes_per_s,
    ));
    o.push_str("\n[gpu.peak_flops_per_s]\n");
    o.push_str(&param("fp32", &p.peak_fp32_flops_per_s));
    o.push_str(&param("tf32", &p.peak_tf32_flops_per_s));
    o.push_str(&param("fp16", &p.peak_fp16_flops_per_s));
    o.push_str(&param("bf16", &p.peak_bf16_flops_per_s));
    o.push_str(&param("fp8", &p.peak_fp8_flops_per_s));
    o.push_str("\n[gemm]\n");
    match &p.gemm_bf16_flops_per_s {
        Some(r) => o.push_str(&param("bf16_flops_per_s", r)),
        None => o.push_str(&param("max_efficiency", &p.gemm_max_efficiency)),
    }
    o.push_str(&param("k_half", &p.gemm_k_half));
    o.push_str(&param("tile_m", &p.gemm_tile_m));
    o.push_str(&param("tile_n", &p.gemm_tile_n));
    o.push_str(&param("ramp_ns", &p.gemm_ramp_ns));
    if p.gemm_ramp_per_product {
        o.push_str("ramp_per_product = true\n");
    }
    if let (Some(b), Some(c)) = (&p.gemm_operand_bytes_per_s, &p.gemm_operand_cache_bytes) {
        o.push_str(&param("operand_bytes_per_s", b));
        o.push_str(&param("operand_cache_bytes", c));
        if let (Some(pk), Some(cr)) = (&p.gemm_pack_bytes_per_s, &p.gemm_cold_ramp_ns) {
            o.push_str(&param("pack_bytes_per_s", pk));
            o.push_str(&param("cold_ramp_ns", cr));
        }
    }
    if !p.gemm_shape_factors.is_empty() {
        o.push_str(
            "# Per timed shape, the median back-to-back call over the curve's price for it: \
             [m, n, k, factor]; a shape between them is priced by the curve times the factor \
             interpolated from its nearest (docs/reference/profiles.md).\nshape_factors = [\n",
        );
        for f in &p.gemm_shape_factors {
            o.push_str(&format!(
                "  [{}, {}, {}, {}],\n",
                f.m,
                f.n,
                f.k,
                number(f.factor)
            ));
        }
        o.push_str("]\n");
    }
    for (table, curve) in [
        ("gemm.fp8", &p.gemm_fp8),
        ("gemm.fp8_rowwise", &p.gemm_fp8_rowwise),
        ("gemm.fp8_blockwise", &p.gemm_fp8_blockwise),
        ("gemm.fp8_fast_accum", &p.gemm_fp8_fast_accum),
    ] {
        if let Some(c) = curve {
            o.push_str(&format!("\n[{table}]\n"));
            o.push_str(&param("max_efficiency", &c.max_efficiency));
            o.push_str(&param("k_half", &c.k_half));
            o.push_str(&param("tile_m", &c.tile_m));
            o.push_str(&param("tile_n", &c.tile_n));
            o.push_str(&param("ramp_ns", &c.ramp_ns));
        }
    }
    o.push_str("\n[memory]\n");
    match &p.memory_bandwidth_bytes_per_s {
        Some(b) => o.push_str(&param("bandwidth_bytes_per_s", b)),
        None => o.push_str(&param("efficiency", &p.memory_efficiency)),
    }
    if let (Some(b), Some(e)) = (&p.memory_spill_bytes, &p.memory_spill_efficiency) {
        o.push_str(&param("spill_bytes", b));
        o.push_str(&param("spill_efficiency", e));
    }
    if let Some(c) = &p.memory_cold_efficiency {
        o.push_str(&param("cold_efficiency", c));
    }
    if let Some(s) = &p.memory_state {
        if let Some(w) = &s.weight {
            o.push_str(&param("state_weight", w));
        }
        o.push_str(&param("state_resident_bytes", &s.resident_bytes));
        o.push_str(&param("state_evicted_bytes", &s.evicted_bytes));
        o.push_str(&param("state_resident_efficiency", &s.resident_efficiency));
        o.push_str(&param("state_evicted_efficiency", &s.evicted_efficiency));
        if let Some(a) = &s.decay_after_ns {
            o.push_str(&param("state_decay_after_ns", a));
        }
        if let Some(l) = &s.lifetime_ns {
            o.push_str(&param("state_lifetime_ns", l));
        }
    }
    if let Some(a) = &p.memory_alloc_bytes_per_s {
        o.push_str(&param("alloc_bytes_per_s", a));
    }
    if let Some(a) = &p.memory_alloc_fixed_ns {
        o.push_str(&param("alloc_fixed_ns", a));
    }
    o.push_str("\n[kernel]\n");
    o.push_str(&param("launch_ns", &p.launch_ns));
    if p.launch_per_op {
        o.push_str("launch_per_op = true\n");
    }
    if let Some(a) = &p.op_overhead_ns {
        o.push_str(&param("op_overhead_ns", a));
    }
    o.push_str(&format!(
        "\n[network]\nalgorithm = \"{}\"\n",
        algorithm(p.algorithm)
    ));
    link(&mut o, "intra", &p.intra);
    link(&mut o, "inter", &p.inter);
    if let (Some(e), Some(m)) = (&p.nvls_efficiency, &p.nvls_min_bytes) {
        o.push_str("\n[network.nvls]\n");
        o.push_str(&param("efficiency", e));
        o.push_str(&param("min_bytes", m));
    }
    if let Some(a) = &p.attention {
        attention(&mut o, a);
    }
    if let Some(s) = &p.overlap_compute_slowdown {
        o.push_str("\n[overlap]\n");
        o.push_str(&param("compute_slowdown", s));
    }
    if let Some(c) = &p.checkpoint_bandwidth_bytes_per_s {
        o.push_str("\n[checkpoint]\n");
        o.push_str(&param("bandwidth_bytes_per_s", c));
    }
    if let Some(c) = p.host_cores.as_ref().or(host.map(|h| &h.cores)) {
        o.push_str("\n[host]\n");
        o.push_str(&param("cores", c));
        if let (Some(r), Some(m)) = (&p.host_interruptions_per_s, &p.host_interruption_mean_ns) {
            o.push_str(&param("interruptions_per_s", r));
            o.push_str(&param("interruption_mean_ns", m));
        }
        if let (Some(w), Some(p)) = (&p.host_wake_ns, &p.host_wake_per_idle) {
            o.push_str(&param("wake_ns", w));
            o.push_str(&param("wake_per_idle", p));
        }
        if let Some(h) = &p.host_handoff_ns {
            o.push_str(&param("handoff_ns", h));
        }
        if let Some(w) = &p.host_compute_weight {
            o.push_str(&param("compute_weight", w));
        }
        if let Some(s) = &p.host_p2p_cpu_share {
            o.push_str(&param("p2p_cpu_share", s));
        }
        if let Some(m) = &p.host_memory_cores {
            o.push_str(&param("memory_cores", m));
        }
    }
    if let Some(f) = &p.fit {
        o.push_str("\n[fit]\n");
        o.push_str(&format!("method = {}\n", string(&f.method)));
        o.push_str(&format!("data = {}\n", string(&f.data)));
        o.push_str(&format!("samples = {}\n", f.samples));
        o.push_str(&format!(
            "rms_relative_error = {}\n",
            number(f.rms_relative_error)
        ));
        o.push_str(&format!(
            "max_relative_error = {}\n",
            number(f.max_relative_error)
        ));
        o.push_str(&format!("holdout_samples = {}\n", f.holdout_samples));
        o.push_str(&format!(
            "holdout_max_relative_error = {}\n",
            number(f.holdout_max_relative_error)
        ));
    }
    if let Some(v) = provenance {
        o.push_str("\n[provenance]\n");
        let mut kv = |k: &str, s: &str| o.push_str(&format!("{k} = {}\n", string(s)));
        kv("hostname", &v.hostname);
        kv("cpu_model", &v.cpu_model);
        kv("date_utc", &v.date_utc);
        kv("backend", &v.backend);
        kv("twin_version", &v.twin_version);
        kv("mode", &v.mode);
        kv("command", &v.command);
        kv("samples_file", &v.samples_file);
        if let Some(c) = &v.cuda_version {
            kv("cuda_version", c);
        }
        if let Some(n) = &v.nccl_version {
            kv("nccl_version", n);
        }
        o.push_str(&format!("cores = {}\n", v.cores));
    }
    o
}

/// `text` without the host backend's keys the current profile loader does not know yet
/// (`[host]`, `memory.alloc_bytes_per_s`): what a twin without host-fidelity support reads.
pub fn without_host_keys(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            skipping = t == "[host]";
        }
        if skipping || t.starts_with("alloc_bytes_per_s") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `profile.toml` → `profile.samples.json`: where a calibration's raw samples go.
pub fn samples_path(profile: &std::path::Path) -> std::path::PathBuf {
    profile.with_extension("samples.json")
}

/// Writes the raw samples beside the profile: where they were taken, what was measured (the
/// keys of `what`: the host's `config`, the GPU's `plan` and `device`), the outlier rule and
/// every sample.
pub fn write_samples<S: Serialize>(
    path: &std::path::Path,
    provenance: &Provenance,
    what: &serde_json::Value,
    samples: &S,
) -> Result<(), twin_runtime::job::JobError> {
    #[derive(Serialize)]
    struct SamplesFile<'a, S> {
        provenance: &'a Provenance,
        #[serde(flatten)]
        what: &'a serde_json::Value,
        outlier_rule: &'static str,
        samples: &'a S,
    }
    let file = SamplesFile {
        provenance,
        what,
        outlier_rule: "drop samples above median + 3 * 1.4826 * MAD (docs/calibration.md)",
        samples,
    };
    let text = twin_sim::json::document("calibration-samples", &file).map_err(|source| {
        twin_runtime::job::JobError::Json {
            what: format!("cannot write {} as JSON", path.display()),
            source,
        }
    })?;
    twin_runtime::job::write_atomic(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_finite() {
        assert_eq!(number(128.0), "128");
        assert_eq!(number(0.8412345678), "0.841235");
        assert_eq!(number(2.5e10), "25000000000");
        assert_eq!(number(2.5e15 + 0.5), "2.50000e15");
        assert_eq!(number(f64::NAN), "0");
        assert_eq!(number(12345.678), "12345.7");
    }

    #[test]
    fn bundled_profile_round_trips_through_the_emitter() {
        let text = include_str!("../../scenarios/profiles/a100-dgx.toml");
        let p = twin_sim::profile::parse_str(text, "a100-dgx.toml").unwrap();
        let out = profile_toml(&p, None, None, &[]);
        let back = twin_sim::profile::parse_str(&out, "emitted").unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string("a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
    }
}
