//! Where a GPU calibration starts. It measures the GEMM curve, memory-bound bandwidth and
//! launch cost; every other number of the profile (peaks, network tiers) comes from here, so
//! any GPU can be calibrated, bundled profile or not:
//! - the base profile is `--base-profile`, else the bundled profile of the GPU asked for, else
//!   one built from the scenario's node links;
//! - the GPU section is the GPU asked for (`--gpu-name`, else the scenario's, else the
//!   device's name): the base's own when it describes that GPU, else the GPU's preset (peaks,
//!   HBM bandwidth), else the scenario's `cluster.gpu` of that name, else nothing but what the
//!   device reports (the written profile then takes its bf16 peak and HBM bandwidth from the
//!   fits). The SM count is the device's.
//!
//! The GPU is named under its preset's own name (an alias resolves to it), as a scenario's
//! `cluster.gpu` is, so `twin verify` and `--profile` match the written profile to scenarios
//! on that GPU (`twin_sim::profile::check_matches`).

use crate::CalibError;
use twin_sim::cost::TierModel;
use twin_sim::profile::{LinkParams, Param, Profile, Source};
use twin_sim::scenario::{Gpu, PeakFlops};

/// What the CUDA driver reports of the GPU measured (`twin doctor`); a GPU calibration's
/// samples file keeps it, so `--refit` starts from the same GPU.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Device {
    pub name: String,
    pub sm_count: u32,
    pub memory_bytes: u64,
}

/// A scenario's part in the start: its GPU (preset-resolved) and its node's link tiers.
#[derive(Clone, Debug)]
pub struct ScenarioGpu {
    /// The scenario file, for citations.
    pub origin: String,
    pub gpu: Gpu,
    pub links: TierModel,
}

/// What a GPU calibration is asked to start from.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// `--gpu-name`.
    pub gpu_name: Option<String>,
    /// `--scenario`.
    pub scenario: Option<ScenarioGpu>,
    /// `--base-profile`: the profile and its path.
    pub base: Option<(Profile, String)>,
    pub device: Option<Device>,
}

/// The GPU figures the calibration does not measure, and their citation.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    pub peak: PeakFlops,
    pub hbm_bandwidth_bytes_per_s: f64,
    pub source: Source,
    pub reference: String,
}

/// What a GPU calibration starts from (see the module doc).
#[derive(Clone, Debug)]
pub struct Start {
    /// The profile whose unmeasured sections the result keeps.
    pub base: Profile,
    /// Where `base` came from, for the report.
    pub origin: String,
    /// The GPU the written profile describes (a preset's own name where there is one).
    pub gpu: String,
    /// The GPU section to write when `base` describes another GPU; `None` there means no
    /// figures are known and the fits stand in for the bf16 peak and HBM bandwidth.
    pub figures: Option<Figures>,
    /// Whether `base`'s GPU section is replaced (it describes another GPU).
    pub replace_gpu: bool,
    pub device: Option<Device>,
}

/// `NVIDIA H200` → `nvidia-h200`: a device name as a profile's GPU name.
pub fn device_gpu_name(device: &str) -> String {
    let mut out = String::new();
    for c in device.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// The bundled profiles, by path and text.
pub(crate) const BUNDLED: [(&str, &str); 3] = [
    (
        "scenarios/profiles/a100-dgx.toml",
        include_str!("../../scenarios/profiles/a100-dgx.toml"),
    ),
    (
        "scenarios/profiles/h100-dgx.toml",
        include_str!("../../scenarios/profiles/h100-dgx.toml"),
    ),
    (
        "scenarios/profiles/h200-dgx.toml",
        include_str!("../../scenarios/profiles/h200-dgx.toml"),
    ),
];

/// The bundled profiles that load, with their GPU names.
fn bundled() -> impl Iterator<Item = (&'static str, &'static str, String)> {
    BUNDLED.iter().filter_map(|&(path, text)| {
        let p = twin_sim::profile::parse_str(text, path).ok()?;
        Some((path, text, p.gpu))
    })
}

/// The bundled profile of a GPU preset, as `(path, text)`: the one whose `[gpu] name` is the
/// preset of `gpu` (aliases resolve).
pub fn bundled_profile(gpu: &str) -> Option<(&'static str, &'static str)> {
    let canonical = twin_sim::scenario::gpu_preset(gpu).map_or_else(|| gpu.to_string(), |g| g.name);
    bundled()
        .find(|(_, _, g)| *g == canonical)
        .map(|(path, text, _)| (path, text))
}

/// The bundled profile for a GPU as a log names it: [`bundled_profile`], else, for a name as
/// nccl-tests logs print it (`NVIDIA H100 80GB HBM3`), the one whose GPU family (the preset
/// name up to its first `-`) the name contains.
pub fn bundled_base(gpu: &str) -> Option<(&'static str, &'static str)> {
    bundled_profile(gpu).or_else(|| {
        let lower = gpu.to_ascii_lowercase();
        bundled()
            .find(|(_, _, g)| {
                let family = g.split('-').next().unwrap_or(g);
                !family.is_empty() && lower.contains(family)
            })
            .map(|(path, text, _)| (path, text))
    })
}

/// Resolves what a GPU calibration starts from (see the module doc).
pub fn start(req: Request) -> Result<Start, CalibError> {
    let asked = req
        .gpu_name
        .clone()
        .or_else(|| req.scenario.as_ref().map(|s| s.gpu.name.clone()))
        .or_else(|| req.device.as_ref().map(|d| device_gpu_name(&d.name)))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            CalibError::Setup(
                "no GPU name: give --gpu-name NAME or --scenario FILE (its cluster.gpu)".into(),
            )
        })?;
    let preset = twin_sim::scenario::gpu_preset(&asked);
    let gpu = preset
        .as_ref()
        .map_or_else(|| asked.clone(), |g| g.name.clone());
    let figures = match (&preset, &req.scenario) {
        (Some(p), _) => Some(Figures {
            peak: p.peak.clone(),
            hbm_bandwidth_bytes_per_s: p.hbm_bandwidth_bytes_per_s,
            source: Source::Datasheet,
            reference: format!(
                "twin's GPU preset '{gpu}' (docs/reference/scenarios.md cites its datasheet)"
            ),
        }),
        (None, Some(s)) if s.gpu.name == gpu => Some(Figures {
            peak: s.gpu.peak.clone(),
            hbm_bandwidth_bytes_per_s: s.gpu.hbm_bandwidth_bytes_per_s,
            source: Source::Published,
            reference: format!("cluster.gpu of the scenario {}", s.origin),
        }),
        (None, _) => None,
    };
    let (base, origin) = match req.base {
        Some(b) => b,
        None => match bundled_profile(&gpu) {
            Some((path, text)) => (
                twin_sim::profile::parse_str(text, path)
                    .map_err(|e| CalibError::Profile(e.to_string()))?,
                path.to_string(),
            ),
            None => {
                let s = req.scenario.as_ref().ok_or_else(|| {
                    CalibError::Setup(format!(
                        "GPU '{gpu}' has no bundled profile: give --scenario FILE (its node's \
                         links become the profile's network tiers) or --base-profile FILE (a \
                         profile whose network sections the result keeps)"
                    ))
                })?;
                (
                    skeleton(&gpu, &s.links, &s.origin),
                    format!("the links of {}", s.origin),
                )
            }
        },
    };
    let replace_gpu = base.gpu != gpu;
    if replace_gpu && req.device.is_none() {
        return Err(CalibError::Setup(format!(
            "the SM count of GPU '{gpu}' is unknown: the base ({origin}) does not describe \
             that GPU and no device reports it"
        )));
    }
    Ok(Start {
        base,
        origin,
        gpu,
        figures,
        replace_gpu,
        device: req.device,
    })
}

/// A profile with the network tiers of a scenario's node and nothing measured yet: its GPU
/// section and curves are placeholders that the calibration replaces.
fn skeleton(gpu: &str, links: &TierModel, scenario: &str) -> Profile {
    let placeholder = |v: f64| Param {
        value: v,
        source: Source::Published,
        reference: "replaced by the calibration".into(),
        ci95: None,
    };
    let link = |bw: f64, lat: u64, eff: f64, tier: &str| {
        let r = |what: &str| {
            format!("{what} of the scenario {scenario}'s {tier} tier (its node preset or cluster keys); not measured by twin calibrate cuda")
        };
        LinkParams {
            bandwidth_bytes_per_s: Param {
                value: bw,
                source: Source::Datasheet,
                reference: r("line rate"),
                ci95: None,
            },
            latency_ns: Param {
                value: lat as f64,
                source: Source::Published,
                reference: r("per-step latency"),
                ci95: None,
            },
            efficiency: Param {
                value: eff,
                source: Source::Published,
                reference: r("twin's default collective efficiency (docs/reference/profiles.md)"),
                ci95: None,
            },
            p2p_latency_ns: None,
            p2p_bandwidth_bytes_per_s: None,
        }
    };
    let p = placeholder(1.0);
    Profile {
        name: gpu.to_string(),
        bundled: None,
        description: format!("GPU '{gpu}' on the node of {scenario}"),
        gpu: String::new(),
        sm_count: p.clone(),
        peak_fp32_flops_per_s: p.clone(),
        peak_tf32_flops_per_s: p.clone(),
        peak_fp16_flops_per_s: p.clone(),
        peak_bf16_flops_per_s: p.clone(),
        peak_fp8_flops_per_s: p.clone(),
        hbm_bandwidth_bytes_per_s: p.clone(),
        gemm_max_efficiency: p.clone(),
        gemm_bf16_flops_per_s: None,
        gemm_k_half: p.clone(),
        gemm_tile_m: p.clone(),
        gemm_tile_n: p.clone(),
        gemm_ramp_ns: p.clone(),
        gemm_ramp_per_product: false,
        gemm_operand_bytes_per_s: None,
        gemm_operand_cache_bytes: None,
        gemm_pack_bytes_per_s: None,
        gemm_cold_ramp_ns: None,
        gemm_shape_factors: Vec::new(),
        gemm_fp8: None,
        gemm_fp8_rowwise: None,
        gemm_fp8_blockwise: None,
        gemm_fp8_fast_accum: None,
        memory_efficiency: p.clone(),
        memory_bandwidth_bytes_per_s: None,
        memory_spill_bytes: None,
        memory_spill_efficiency: None,
        memory_cold_efficiency: None,
        memory_state: None,
        launch_ns: p,
        intra: link(
            links.intra_bandwidth_bytes_per_s,
            links.intra_latency_ns,
            links.nvlink_efficiency,
            "intra-node",
        ),
        inter: link(
            links.inter_bandwidth_bytes_per_s,
            links.inter_latency_ns,
            links.network_efficiency,
            "inter-node",
        ),
        nvls_efficiency: None,
        nvls_min_bytes: None,
        algorithm: links.algorithm,
        overlap_compute_slowdown: None,
        checkpoint_bandwidth_bytes_per_s: None,
        memory_alloc_bytes_per_s: None,
        memory_alloc_fixed_ns: None,
        op_overhead_ns: None,
        launch_per_op: false,
        host_cores: None,
        host_interruptions_per_s: None,
        host_interruption_mean_ns: None,
        host_wake_ns: None,
        host_wake_per_idle: None,
        host_handoff_ns: None,
        host_compute_weight: None,
        host_p2p_cpu_share: None,
        attention: None,
        host_memory_cores: None,
        provenance: Default::default(),
        fit: None,
    }
}

/// Without a preset or a scenario's figures, the other dtypes' peaks from the bf16 one, as a
/// scenario's inline `cluster.gpu` without a preset defaults them: fp16 and fp8 at the bf16
/// rate, tf32 at half, fp32 at 1/16.
pub(crate) fn peaks_from_bf16(bf16: f64) -> PeakFlops {
    PeakFlops {
        fp32_flops_per_s: bf16 / 16.0,
        tf32_flops_per_s: bf16 / 2.0,
        fp16_flops_per_s: bf16,
        bf16_flops_per_s: bf16,
        fp8_flops_per_s: bf16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_profiles_are_found_by_preset_alias_and_log_name() {
        let path = |g: &str| bundled_base(g).map(|(p, _)| p);
        assert_eq!(path("h200-141gb"), Some("scenarios/profiles/h200-dgx.toml"));
        assert_eq!(
            path("h200-sxm-141gb"),
            Some("scenarios/profiles/h200-dgx.toml")
        );
        assert_eq!(
            path("h100-sxm-80gb"),
            Some("scenarios/profiles/h100-dgx.toml")
        );
        assert_eq!(
            path("NVIDIA H100 80GB HBM3"),
            Some("scenarios/profiles/h100-dgx.toml")
        );
        assert_eq!(
            path("NVIDIA A100-SXM4-80GB"),
            Some("scenarios/profiles/a100-dgx.toml")
        );
        assert_eq!(
            path("NVIDIA H200"),
            Some("scenarios/profiles/h200-dgx.toml")
        );
        assert_eq!(path("v100"), None);
        // A GPU being calibrated takes only its own preset's profile.
        assert_eq!(bundled_profile("nvidia-h200"), None);
        assert!(bundled_profile("h200-sxm-141gb").is_some());
        // Every bundled profile loads and describes a GPU preset.
        for (p, text) in BUNDLED {
            let profile = twin_sim::profile::parse_str(text, p).unwrap();
            assert!(
                twin_sim::scenario::gpu_preset(&profile.gpu).is_some(),
                "{p}"
            );
        }
    }

    #[test]
    fn device_names_become_profile_gpu_names() {
        assert_eq!(device_gpu_name("NVIDIA H200"), "nvidia-h200");
        assert_eq!(
            device_gpu_name(" NVIDIA A100-SXM4-80GB "),
            "nvidia-a100-sxm4-80gb"
        );
        assert_eq!(device_gpu_name("--"), "");
    }

    #[test]
    fn what_cannot_start_says_what_to_give() {
        let e = start(Request::default()).unwrap_err().to_string();
        assert!(e.contains("--gpu-name") && e.contains("--scenario"), "{e}");
        let e = start(Request {
            gpu_name: Some("lab-gpu".into()),
            ..Request::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("'lab-gpu' has no bundled profile")
                && e.contains("--scenario")
                && e.contains("--base-profile"),
            "{e}"
        );
        // A base for another GPU needs the device's SM count.
        let (path, text) = bundled_base("h100-sxm-80gb").unwrap();
        let base = twin_sim::profile::parse_str(text, path).unwrap();
        let e = start(Request {
            gpu_name: Some("h200-141gb".into()),
            base: Some((base, path.into())),
            ..Request::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("SM count of GPU 'h200-141gb' is unknown")
                && e.contains("scenarios/profiles/h100-dgx.toml"),
            "{e}"
        );
    }
}
