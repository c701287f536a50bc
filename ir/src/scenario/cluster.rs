//! The `[cluster]` section: the GPU (preset name or table), node preset, GPU count and the
//! two link tiers, with explicit keys layered over the GPU and node presets.

use super::error::ErrorKind;
use super::keys::{cluster as k, gpu as gk, link as lk, Key};
use super::presets;
use super::read::{opt, Result, Section};
use super::source::Node;
use super::types::*;

pub(crate) fn cluster(c: Section<'_>) -> Result<Cluster> {
    c.check_unknown()?;
    let gpu = gpu(c)?;
    let gpus = c
        .uint32(&k::GPUS)?
        .ok_or_else(|| c.missing(k::GPUS.name, ""))?
        .value;
    // No `node`: the GPU preset's usual node (the report notes it), else none.
    let (node_name, node_from_gpu) = match c.string(&k::NODE)? {
        Some(f) => (Some(f.value), false),
        None => match presets::default_node(&gpu.name) {
            Some(n) => (Some(n.to_string()), true),
            None => (None, false),
        },
    };
    let node = match &node_name {
        None => None,
        Some(n) if n == "custom" => None,
        Some(n) => match presets::node(n) {
            Some(spec) => Some(spec),
            None => {
                return Err(c.unknown_name(
                    "node",
                    "node preset",
                    n,
                    presets::NODE_NAMES.iter().copied().chain(["custom"]),
                ))
            }
        },
    };
    let gpus_per_node = match c.uint32(&k::GPUS_PER_NODE)? {
        Some(f) => f.value,
        None => match &node {
            Some(n) => n.gpus_per_node,
            None => {
                return Err(c.missing(
                    "gpus_per_node",
                    "or set cluster.node to a preset; a GPU without a preset has no usual node",
                ))
            }
        },
    };
    let intra_node = link(
        c.section("intra_node", "cluster.intra_node")?,
        c,
        node.as_ref().map(|n| &n.intra_node),
    )?;
    let inter_node = link(
        c.section("inter_node", "cluster.inter_node")?,
        c,
        node.as_ref().map(|n| &n.inter_node),
    )?;
    let topology = super::topology::topology(c.section("topology", "cluster.topology")?)?;
    Ok(Cluster {
        topology,
        gpu,
        gpus,
        gpus_per_node,
        node: node_name.unwrap_or_else(|| "custom".to_string()),
        node_from_gpu,
        intra_node,
        inter_node,
    })
}

fn gpu(c: Section<'_>) -> Result<Gpu> {
    let Some(entry) = c.entry("gpu") else {
        return Err(c.missing("gpu", "a preset name or an inline table"));
    };
    let names = || presets::GPU_NAMES.iter().copied();
    match &entry.node {
        Node::Str(name) => {
            presets::gpu(name).ok_or_else(|| c.unknown_name("gpu", "GPU preset", name, names()))
        }
        Node::Table(_) => {
            let g = c.section("gpu", "cluster.gpu")?;
            g.check_unknown()?;
            let preset = match g.string(&gk::PRESET)? {
                None => None,
                Some(p) => Some(
                    presets::gpu(&p.value)
                        .ok_or_else(|| g.unknown_name("preset", "GPU preset", &p.value, names()))?,
                ),
            };
            let flops = |key: &Key| -> Result<Option<f64>> { Ok(opt(g.number(key)?)) };
            let bf16 = match (flops(&gk::PEAK_BF16_FLOPS_PER_S)?, &preset) {
                (Some(v), _) => v,
                (None, Some(p)) => p.peak.bf16_flops_per_s,
                (None, None) => {
                    return Err(
                        g.missing(gk::PEAK_BF16_FLOPS_PER_S.name, "or give cluster.gpu.preset")
                    )
                }
            };
            // Without a preset, other dtypes default from bf16: fp16 and fp8 at the bf16 rate,
            // tf32 at half, fp32 (no tensor cores) at 1/16 (A100's ratio).
            let pick = |key: &Key, from_preset: fn(&PeakFlops) -> f64, ratio: f64| {
                Ok::<f64, super::ScenarioError>(match (flops(key)?, &preset) {
                    (Some(v), _) => v,
                    (None, Some(p)) => from_preset(&p.peak),
                    (None, None) => bf16 * ratio,
                })
            };
            let peak = PeakFlops {
                fp32_flops_per_s: pick(
                    &gk::PEAK_FP32_FLOPS_PER_S,
                    |p| p.fp32_flops_per_s,
                    1.0 / 16.0,
                )?,
                tf32_flops_per_s: pick(&gk::PEAK_TF32_FLOPS_PER_S, |p| p.tf32_flops_per_s, 0.5)?,
                fp16_flops_per_s: pick(&gk::PEAK_FP16_FLOPS_PER_S, |p| p.fp16_flops_per_s, 1.0)?,
                bf16_flops_per_s: bf16,
                fp8_flops_per_s: pick(&gk::PEAK_FP8_FLOPS_PER_S, |p| p.fp8_flops_per_s, 1.0)?,
            };
            let hbm_given = opt(g.uint(&gk::HBM_BYTES)?);
            let hbm_bytes = match (hbm_given, &preset) {
                (Some(v), _) => v,
                (None, Some(p)) => p.hbm_bytes,
                (None, None) => {
                    return Err(g.missing(gk::HBM_BYTES.name, "or give cluster.gpu.preset"))
                }
            };
            // The driver's share comes with the preset's capacity: an `hbm_bytes` written by
            // hand is taken as usable unless `driver_reserved_bytes` is written too.
            let driver_reserved_bytes =
                match (opt(g.uint(&gk::DRIVER_RESERVED_BYTES)?), hbm_given, &preset) {
                    (Some(v), _, _) => v,
                    (None, None, Some(p)) => p.driver_reserved_bytes,
                    _ => 0,
                };
            if driver_reserved_bytes >= hbm_bytes {
                return Err(g.err(
                    ErrorKind::CrossField,
                    "driver_reserved_bytes",
                    format!(
                        "{driver_reserved_bytes} bytes kept by the driver leave nothing of \
                         hbm_bytes = {hbm_bytes}"
                    ),
                    "less than hbm_bytes",
                ));
            }
            let hbm_bandwidth_bytes_per_s =
                match (opt(g.number(&gk::HBM_BANDWIDTH_BYTES_PER_S)?), &preset) {
                    (Some(v), _) => v,
                    (None, Some(p)) => p.hbm_bandwidth_bytes_per_s,
                    (None, None) => {
                        return Err(g.missing(
                            gk::HBM_BANDWIDTH_BYTES_PER_S.name,
                            "or give cluster.gpu.preset",
                        ))
                    }
                };
            let name = match (g.string(&gk::NAME)?, &preset) {
                (Some(n), _) => n.value,
                (None, Some(p)) => p.name.clone(),
                (None, None) => "custom".to_string(),
            };
            Ok(Gpu {
                name,
                peak,
                hbm_bytes,
                driver_reserved_bytes,
                hbm_bandwidth_bytes_per_s,
            })
        }
        other => Err(c.err(
            ErrorKind::Type,
            "gpu",
            format!(
                "expected a preset name or a table, found {}",
                other.type_name()
            ),
            format!(
                "{}, or {{ preset = .., hbm_bytes = .., ... }}",
                names().collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// One link tier: explicit keys over the node preset.
fn link(l: Section<'_>, cluster: Section<'_>, preset: Option<&Link>) -> Result<Link> {
    l.check_unknown()?;
    let exclusive = |a: &str, b: &str| -> Result<()> {
        if l.has(a) && l.has(b) {
            return Err(l.err(
                ErrorKind::CrossField,
                b,
                format!("{} is also given; give one of the two", l.key_path(a)),
                format!("either {a} or {b}"),
            ));
        }
        Ok(())
    };
    exclusive(lk::BANDWIDTH_BYTES_PER_S.name, lk::BANDWIDTH_GB_PER_S.name)?;
    exclusive(lk::LATENCY_US.name, lk::LATENCY_NS.name)?;
    let hint = "or set cluster.node to a preset";
    let missing_here = |key: &str| {
        if l.table.is_some() {
            l.missing(key, hint)
        } else {
            cluster.missing(
                &format!("{}.{key}", l.path.trim_start_matches("cluster.")),
                hint,
            )
        }
    };
    let bandwidth_bytes_per_s = if let Some(f) = l.number(&lk::BANDWIDTH_BYTES_PER_S)? {
        f.value
    } else if let Some(f) = l.number(&lk::BANDWIDTH_GB_PER_S)? {
        f.value * 1e9
    } else if let Some(p) = preset {
        p.bandwidth_bytes_per_s
    } else {
        return Err(missing_here(lk::BANDWIDTH_BYTES_PER_S.name));
    };
    let latency_ns = if let Some(f) = l.uint(&lk::LATENCY_NS)? {
        f.value
    } else if let Some(f) = l.number(&lk::LATENCY_US)? {
        (f.value * 1e3).round() as u64
    } else if let Some(p) = preset {
        p.latency_ns
    } else {
        return Err(missing_here(lk::LATENCY_US.name));
    };
    Ok(Link {
        bandwidth_bytes_per_s,
        latency_ns,
    })
}
