//! Named GPUs, nodes and models, so a scenario can say `gpu = "h100-sxm-80gb"` instead of
//! copying a datasheet. Figures are public specs; docs/reference/scenarios.md cites the source of each.
//! A preset only fills fields the user did not write: explicit keys always win.

use super::types::{Gpu, Link, PeakFlops};

/// Shape fields a model preset (or a Hugging Face config) supplies.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ModelShape {
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub ffn_hidden: u64,
    pub seq_len: u64,
    pub vocab: u64,
    pub gated_mlp: bool,
    pub tied_embeddings: bool,
    /// (experts, top_k, moe_every)
    pub moe: Option<(u64, u64, u64)>,
}

/// A node preset: GPUs per node and the two link tiers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NodeSpec {
    pub gpus_per_node: u32,
    pub intra_node: Link,
    pub inter_node: Link,
}

pub(crate) const GPU_NAMES: [&str; 7] = [
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h100-sxm-96gb-500w",
    "h200-141gb",
    "h800-sxm-80gb",
    "b200-sxm-180gb",
    "gb200",
];

/// Accepted alternative spellings of GPU presets.
const GPU_ALIASES: [(&str, &str); 2] =
    [("h200-sxm-141gb", "h200-141gb"), ("b200", "b200-sxm-180gb")];

/// MiB as nvidia-smi counts them.
const MIB_BYTES: u64 = 1 << 20;

pub(crate) fn gpu(name: &str) -> Option<Gpu> {
    let name = GPU_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, n)| *n)
        .unwrap_or(name);
    // Capacity: nvidia-smi's "FB Memory Usage: Total" (MiB) and what the driver keeps of it
    // (nvidia-smi's "Reserved"; the total less cuMemGetInfo's total where that was measured).
    let (peak, hbm_bytes, driver_reserved_bytes, hbm_bandwidth_bytes_per_s) = match name {
        // A100 has no FP8 tensor cores; FP8 runs at the BF16 rate. 81,920 MiB (nvidia-smi, as
        // Modal lists it: modal-labs/modal-client#2797). The driver's share is an estimate:
        // the H100's 480 of 81,559 MiB scaled to 81,920 MiB (482 MiB); no measured
        // cuMemGetInfo total of this part was found.
        "a100-sxm-80gb" => (
            PeakFlops {
                fp32_flops_per_s: 19.5e12,
                tf32_flops_per_s: 156e12,
                fp16_flops_per_s: 312e12,
                bf16_flops_per_s: 312e12,
                fp8_flops_per_s: 312e12,
            },
            81_920 * MIB_BYTES,
            482 * MIB_BYTES,
            2.039e12,
        ),
        // 81,559 MiB (nvidia-smi); cuMemGetInfo's total 85,017,493,504 B on an H100 SXM 80GB
        // (docs/measurements/2026-11-22-h100-cuda-backend.md), so the driver keeps 480 MiB.
        "h100-sxm-80gb" => (hopper_peak(), 81_559 * MIB_BYTES, 480 * MIB_BYTES, 3.35e12),
        // Meta's Grand Teton H100 (pytorch/torchtitan@d4c86e3758a84cf23e2e879ab3c995cba9d5e410:
        // docs/performance.md): the H100 SXM die with 96 GB of HBM2e at 2.4 TB/s and a 500 W
        // power limit instead of 700 W. Its tensor-core peak is unpublished; that file's
        // footnote 2 puts it "between SXM and NVL", 989 and 835 TFLOP/s dense bf16
        // (torchtitan/utils.py get_peak_flops, NVIDIA's datasheets); the midpoint, 912, is
        // used, +-77 (8.4%), and every other peak scales with it. Capacity: the H100 80GB's
        // nvidia-smi total per nominal GB (81,559 MiB / 80) times 96, and its driver share;
        // an estimate, no nvidia-smi total of this part was found.
        "h100-sxm-96gb-500w" => (
            scaled_peak(hopper_peak(), 912.0 / 989.0),
            97_871 * MIB_BYTES,
            480 * MIB_BYTES,
            2.4e12,
        ),
        // 143,771 MiB, "Reserved" 616 MiB (nvidia-smi, driver 580.159.04); cuMemGetInfo's
        // total 150,109,880,320 B (docs/measurements/2026-11-28-h200-memory-edge.md), which
        // puts the driver's share at 644,939,776 B (615.2 MiB; nvidia-smi rounds it up).
        "h200-141gb" => (hopper_peak(), 143_771 * MIB_BYTES, 644_939_776, 4.8e12),
        // NVIDIA H800 Tensor Core GPU datasheet (SXM): the H100 SXM's tensor-core, FP32 and
        // memory figures (80 GB HBM3 at 3.35 TB/s); only FP64 and NVLink (400 GB/s, the node)
        // are cut. Capacity: no nvidia-smi total of an H800 was found; the H100 SXM's (the same
        // 80 GB HBM3 part) is used, with its driver share.
        "h800-sxm-80gb" => (hopper_peak(), 81_559 * MIB_BYTES, 480 * MIB_BYTES, 3.35e12),
        // NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), per GPU: FP16/BF16
        // 36 PFLOPS, FP8 72 PFLOPS, TF32 18 PFLOPS with sparsity per 8 GPUs, halved to dense;
        // FP32 600 TFLOPS per 8 GPUs; HBM3e 64 TB/s per 8 GPUs (pytorch/ao#4002 computes
        // 7.67 TB/s from the bus width the driver reports; the datasheet's figure is kept
        // here, a calibration measures it). Capacity: nvidia-smi's total
        // 183,359 MiB (NVIDIA/TensorRT-LLM#10278, driver 580.95.05); the CUDA total
        // 178.35 GiB (pytorch/ao#4002) puts the driver's share at 728 MiB.
        "b200-sxm-180gb" => (
            PeakFlops {
                fp32_flops_per_s: 75e12,
                tf32_flops_per_s: 1.125e15,
                fp16_flops_per_s: 2.25e15,
                bf16_flops_per_s: 2.25e15,
                fp8_flops_per_s: 4.5e15,
            },
            183_359 * MIB_BYTES,
            728 * MIB_BYTES,
            8e12,
        ),
        // One Blackwell GPU of a GB200 superchip: NVIDIA GB200 NVL72 specifications
        // (nvidia.com/en-us/data-center/gb200-nvl72), per GPU of the 72: FP16/BF16 360 PFLOPS,
        // FP8 720 PFLOPS, TF32 180 PFLOPS with sparsity, halved to dense; FP32 5,760 TFLOPS;
        // HBM3e 576 TB/s. Capacity: nvidia-smi's total on GB200 trays, 189,471 MiB (public
        // nvidia-smi printouts, driver 580.95.05); the driver's share is an estimate, the B200's
        // 728 of 183,359 MiB scaled to this total (752 MiB).
        "gb200" => (
            PeakFlops {
                fp32_flops_per_s: 80e12,
                tf32_flops_per_s: 1.25e15,
                fp16_flops_per_s: 2.5e15,
                bf16_flops_per_s: 2.5e15,
                fp8_flops_per_s: 5e15,
            },
            189_471 * MIB_BYTES,
            752 * MIB_BYTES,
            8e12,
        ),
        _ => return None,
    };
    Some(Gpu {
        name: name.to_string(),
        peak,
        hbm_bytes,
        driver_reserved_bytes,
        hbm_bandwidth_bytes_per_s,
    })
}

/// The NVLink node a GPU preset usually comes in: what `cluster.node` defaults to. An H200
/// HGX board has the DGX H100's NVLink4 switches and NDR NICs (`dgx-h200` has the same
/// figures); the 500 W 96 GB H100 in Meta's Grand Teton servers; a GB200 GPU comes in a GB200
/// NVL72 rack.
pub(crate) fn default_node(gpu_name: &str) -> Option<&'static str> {
    match gpu(gpu_name)?.name.as_str() {
        "a100-sxm-80gb" => Some("dgx-a100"),
        "h100-sxm-80gb" | "h200-141gb" => Some("dgx-h100"),
        "h100-sxm-96gb-500w" => Some("grand-teton"),
        "h800-sxm-80gb" => Some("hgx-h800"),
        "b200-sxm-180gb" => Some("dgx-b200"),
        "gb200" => Some("gb200-nvl72"),
        _ => None,
    }
}

/// The CUDA compute capability of a GPU preset (NVIDIA's CUDA GPU compute capability table,
/// developer.nvidia.com/cuda-gpus: A100 8.0; H100, H200 and H800 9.0; B200 and GB200 10.0).
/// A framework whose kernel choice depends on the architecture reads it
/// (`Framework::attention_backend_on`).
pub(crate) fn compute_capability(gpu_name: &str) -> Option<(u32, u32)> {
    match gpu(gpu_name)?.name.as_str() {
        "a100-sxm-80gb" => Some((8, 0)),
        "h100-sxm-80gb" | "h100-sxm-96gb-500w" | "h200-141gb" | "h800-sxm-80gb" => Some((9, 0)),
        "b200-sxm-180gb" | "gb200" => Some((10, 0)),
        _ => None,
    }
}

/// Every peak of `p` times `factor` (a part of the same die at a lower sustained clock).
fn scaled_peak(p: PeakFlops, factor: f64) -> PeakFlops {
    PeakFlops {
        fp32_flops_per_s: p.fp32_flops_per_s * factor,
        tf32_flops_per_s: p.tf32_flops_per_s * factor,
        fp16_flops_per_s: p.fp16_flops_per_s * factor,
        bf16_flops_per_s: p.bf16_flops_per_s * factor,
        fp8_flops_per_s: p.fp8_flops_per_s * factor,
    }
}

/// H100 / H200 SXM dense tensor-core peaks (the datasheet's figures halved where they are
/// quoted with 2:4 sparsity).
fn hopper_peak() -> PeakFlops {
    PeakFlops {
        fp32_flops_per_s: 67e12,
        tf32_flops_per_s: 494.5e12,
        fp16_flops_per_s: 989e12,
        bf16_flops_per_s: 989e12,
        fp8_flops_per_s: 1979e12,
    }
}

pub(crate) const NODE_NAMES: [&str; 8] = [
    "dgx-a100",
    "dgx-h100",
    "grand-teton",
    "hgx-h800",
    "dgx-h200",
    "hgx-h200",
    "dgx-b200",
    "gb200-nvl72",
];

/// Effective per-message latency of one NCCL step on each tier (not wire latency); the
/// calibration replaces these with fitted values.
const NVLINK_LATENCY_NS: u64 = 3_000;
const IB_LATENCY_NS: u64 = 10_000;

pub(crate) fn node(name: &str) -> Option<NodeSpec> {
    let (gpus_per_node, nvlink_bytes_per_s, nic_bytes_per_s) = match name {
        // NVLink3: 12 links x 25 GB/s per direction; 8 x 200 Gb/s HDR, one NIC per GPU.
        "dgx-a100" => (8, 300e9, 25e9),
        // NVLink4: 18 links x 25 GB/s per direction; 8 x 400 Gb/s NDR, one NIC per GPU.
        "dgx-h100" => (8, 450e9, 50e9),
        // Meta's Grand Teton H100 server: 8 GPUs on NVLink (NVSwitch, the DGX H100's NVLink4)
        // and 400 Gb/s per GPU to the RoCE or InfiniBand fabric (Llama 3 paper, arXiv
        // 2407.21783, section 3.3.1; pytorch/torchtitan@d4c86e3758a84cf23e2e879ab3c995cba9d5e410:
        // docs/performance.md: 400 Gb/s RDMA per GPU).
        "grand-teton" => (8, 450e9, 50e9),
        // H800 datasheet: NVLink 400 GB/s bidirectional, 200 GB/s per direction; eight
        // 400 Gb/s InfiniBand NICs per node, one per GPU, as in DeepSeek's H800 cluster
        // (Zhao et al. 2025, "Insights into DeepSeek-V3", arXiv 2505.09343, section 4).
        "hgx-h800" => (8, 200e9, 50e9),
        // DGX H200 datasheet: 18 NVLink4 links per GPU, 900 GB/s bidirectional (450 GB/s per
        // direction); 8 x single-port ConnectX-7, 400 Gb/s. An HGX H200 board has the same.
        "dgx-h200" | "hgx-h200" => (8, 450e9, 50e9),
        // DGX B200 datasheet: NVLink5, 1.8 TB/s bidirectional per GPU (900 GB/s per direction);
        // 8 x single-port ConnectX-7, 400 Gb/s.
        "dgx-b200" => (8, 900e9, 50e9),
        // GB200 NVL72 specifications: 72 GPUs in one NVLink5 domain (NVLink switch trays),
        // 1.8 TB/s bidirectional per GPU; DGX GB200 datasheet: one 400 Gb/s ConnectX-7 per GPU
        // to the scale-out network.
        "gb200-nvl72" => (72, 900e9, 50e9),
        _ => return None,
    };
    Some(NodeSpec {
        gpus_per_node,
        intra_node: Link {
            bandwidth_bytes_per_s: nvlink_bytes_per_s,
            latency_ns: NVLINK_LATENCY_NS,
        },
        inter_node: Link {
            bandwidth_bytes_per_s: nic_bytes_per_s,
            latency_ns: IB_LATENCY_NS,
        },
    })
}

/// The host side of one GPU of a node preset: its link to host memory and its share of the
/// host's memory bandwidth, which optimizer offload prices (datasheet figures: the PCIe
/// generation's x16 rate per direction after 128b/130b encoding; the CPUs' DRAM channels at
/// their rated speed). Both are peaks, so an offloaded step priced with them is a lower bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostSide {
    /// Per direction, GPU to host memory.
    pub link_bandwidth_bytes_per_s: f64,
    /// The node's DRAM bandwidth divided among its GPUs.
    pub memory_bandwidth_bytes_per_s: f64,
}

/// PCIe 4.0 x16, per direction: 16 GT/s x 16 lanes x 128/130.
const PCIE4_X16_BYTES_PER_S: f64 = 31.5e9;
/// PCIe 5.0 x16, per direction: 32 GT/s x 16 lanes x 128/130.
const PCIE5_X16_BYTES_PER_S: f64 = 63.0e9;

/// The host side of node preset `name` ([`HostSide`]) and the preset it is of: a name that
/// is no preset takes a DGX A100's, the slowest preset host.
pub(crate) fn host_side(name: &str) -> (HostSide, &'static str) {
    let preset = NODE_NAMES
        .iter()
        .copied()
        .find(|n| *n == name)
        .unwrap_or("dgx-a100");
    let (link, node_dram_bytes_per_s) = match preset {
        // DGX H100 and DGX H200 datasheets: 2 x Intel Xeon Platinum 8480C, each 8 channels of
        // DDR5-4800 (307.2 GB/s); the GPUs on PCIe 5.0 x16. Grand Teton and HGX boards take
        // the same 4th-generation Xeon host (their OEM hosts vary; not published per run).
        "dgx-h100" | "grand-teton" | "hgx-h800" | "dgx-h200" | "hgx-h200" => {
            (PCIE5_X16_BYTES_PER_S, 614.4e9)
        }
        // DGX B200 datasheet: 2 x Intel Xeon Platinum 8570, each 8 channels of DDR5-5600
        // (358.4 GB/s); PCIe 5.0 to the GPUs.
        "dgx-b200" => (PCIE5_X16_BYTES_PER_S, 716.8e9),
        // GB200 NVL72 specifications: each Grace CPU reaches its two GPUs over NVLink-C2C,
        // 900 GB/s bidirectional (225 GB/s per direction per GPU), and its LPDDR5X at up to
        // 512 GB/s; 36 Grace CPUs in the 72-GPU domain.
        "gb200-nvl72" => (225e9, 36.0 * 512e9),
        // DGX A100 datasheet: 2 x AMD EPYC 7742, each 8 channels of DDR4-3200 (204.8 GB/s);
        // the GPUs on PCIe 4.0 x16.
        _ => (PCIE4_X16_BYTES_PER_S, 409.6e9),
    };
    let gpus = node(preset).map_or(8, |n| n.gpus_per_node);
    (
        HostSide {
            link_bandwidth_bytes_per_s: link,
            memory_bandwidth_bytes_per_s: node_dram_bytes_per_s / f64::from(gpus),
        },
        preset,
    )
}

pub(crate) const MODEL_NAMES: [&str; 8] = [
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
];

/// Llama-style shape: gated (SwiGLU) MLP, untied embeddings, dense.
fn llama(
    layers: u64,
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    ffn_hidden: u64,
    seq_len: u64,
    vocab: u64,
) -> ModelShape {
    ModelShape {
        layers,
        hidden,
        heads,
        kv_heads,
        ffn_hidden,
        seq_len,
        vocab,
        gated_mlp: true,
        tied_embeddings: false,
        moe: None,
    }
}

pub(crate) fn model(name: &str) -> Option<ModelShape> {
    Some(match name {
        // GPT-3 paper, Table 2.1; vocabulary padded to 51,200 as Megatron-LM does.
        "gpt3-175b" => ModelShape {
            layers: 96,
            hidden: 12288,
            heads: 96,
            kv_heads: 96,
            ffn_hidden: 4 * 12288,
            seq_len: 2048,
            vocab: 51200,
            gated_mlp: false,
            tied_embeddings: true,
            moe: None,
        },
        "llama2-7b" => llama(32, 4096, 32, 32, 11008, 4096, 32000),
        "llama2-13b" => llama(40, 5120, 40, 40, 13824, 4096, 32000),
        "llama2-70b" => llama(80, 8192, 64, 8, 28672, 4096, 32000),
        "llama3-8b" => llama(32, 4096, 32, 8, 14336, 8192, 128256),
        "llama3-70b" => llama(80, 8192, 64, 8, 28672, 8192, 128256),
        "llama3-405b" => llama(126, 16384, 128, 8, 53248, 8192, 128256),
        "mixtral-8x7b" => ModelShape {
            moe: Some((8, 2, 1)),
            ..llama(32, 4096, 32, 8, 14336, 32768, 32000)
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_resolves() {
        for n in GPU_NAMES {
            assert_eq!(gpu(n).map(|g| g.name), Some(n.to_string()));
        }
        for n in NODE_NAMES {
            assert!(node(n).is_some(), "{n}");
        }
        for n in MODEL_NAMES {
            assert!(model(n).is_some(), "{n}");
        }
        assert!(gpu("h200-sxm-141gb").is_some());
        assert!(gpu("v100").is_none());
        assert!(model("gpt4").is_none());
    }

    /// Every node preset has its own host side; a name that is no preset takes a DGX A100's.
    /// A GB200 NVL72's per-GPU DRAM share is one Grace's 512 GB/s over its two GPUs.
    #[test]
    fn host_sides_are_the_presets_and_fall_back_to_a_dgx_a100() {
        for n in NODE_NAMES {
            assert_eq!(host_side(n).1, n);
        }
        assert_eq!(host_side("custom"), host_side("dgx-a100"));
        assert_eq!(host_side("dgx-a100").0.link_bandwidth_bytes_per_s, 31.5e9);
        assert_eq!(
            host_side("gb200-nvl72").0.memory_bandwidth_bytes_per_s,
            256e9
        );
        assert_eq!(host_side("dgx-h100").0.memory_bandwidth_bytes_per_s, 76.8e9);
    }

    #[test]
    fn presets_match_the_published_figures() {
        // data/validation/network.toml: bf16 dense 312 / 989 / 989 TFLOP/s at 2.039 / 3.35 /
        // 4.8 TB/s.
        let want = [
            ("a100-sxm-80gb", 312e12, 2.039e12),
            ("h100-sxm-80gb", 989e12, 3.35e12),
            ("h100-sxm-96gb-500w", 912e12, 2.4e12),
            ("h200-141gb", 989e12, 4.8e12),
            ("h800-sxm-80gb", 989e12, 3.35e12),
            ("b200-sxm-180gb", 2.25e15, 8e12),
            ("gb200", 2.5e15, 8e12),
        ];
        for (name, bf16, bw) in want {
            let g = gpu(name).unwrap();
            assert_eq!(g.peak.bf16_flops_per_s, bf16, "{name}");
            assert_eq!(g.hbm_bandwidth_bytes_per_s, bw, "{name}");
        }
        // Blackwell dense peaks (HGX B200 and GB200 NVL72 specifications, sparse figures
        // halved): FP8 twice BF16, TF32 half of it.
        for (name, fp32, tf32, fp8) in [
            ("b200-sxm-180gb", 75e12, 1.125e15, 4.5e15),
            ("gb200", 80e12, 1.25e15, 5e15),
        ] {
            let p = gpu(name).unwrap().peak;
            assert_eq!(
                (p.fp32_flops_per_s, p.tf32_flops_per_s, p.fp8_flops_per_s),
                (fp32, tf32, fp8),
                "{name}"
            );
            assert_eq!(p.fp16_flops_per_s, p.bf16_flops_per_s, "{name}");
        }
        assert_eq!(gpu("h800-sxm-80gb").unwrap().peak, hopper_peak());
    }

    /// Per GPU and per direction: NVLink from the datasheets' bidirectional figures halved,
    /// one 400 Gb/s NIC per GPU.
    #[test]
    fn node_presets_match_the_published_figures() {
        let want = [
            ("dgx-a100", 8, 300e9, 25e9),
            ("dgx-h100", 8, 450e9, 50e9),
            ("grand-teton", 8, 450e9, 50e9),
            ("hgx-h800", 8, 200e9, 50e9),
            ("dgx-h200", 8, 450e9, 50e9),
            ("hgx-h200", 8, 450e9, 50e9),
            ("dgx-b200", 8, 900e9, 50e9),
            ("gb200-nvl72", 72, 900e9, 50e9),
        ];
        assert_eq!(want.len(), NODE_NAMES.len());
        for (name, gpus, nvlink, nic) in want {
            let n = node(name).unwrap();
            assert_eq!(n.gpus_per_node, gpus, "{name}");
            assert_eq!(n.intra_node.bandwidth_bytes_per_s, nvlink, "{name}");
            assert_eq!(n.inter_node.bandwidth_bytes_per_s, nic, "{name}");
        }
    }

    #[test]
    fn capacities_are_what_the_driver_reports() {
        // nvidia-smi totals in MiB; usable = cuMemGetInfo's total where it was measured (H100:
        // docs/measurements/2026-11-22-h100-cuda-backend.md, H200: 2026-11-28-h200-memory-edge).
        let want = [
            ("a100-sxm-80gb", 81_920, None),
            ("h100-sxm-80gb", 81_559, Some(85_017_493_504)),
            ("h100-sxm-96gb-500w", 97_871, None),
            ("h200-141gb", 143_771, Some(150_109_880_320)),
            ("h800-sxm-80gb", 81_559, Some(85_017_493_504)),
            ("b200-sxm-180gb", 183_359, None),
            ("gb200", 189_471, None),
        ];
        for (name, mib, usable) in want {
            let g = gpu(name).unwrap();
            assert_eq!(g.hbm_bytes, mib << 20, "{name}");
            assert!(g.driver_reserved_bytes > 0, "{name}");
            if let Some(u) = usable {
                assert_eq!(g.usable_bytes(), u, "{name}");
            }
        }
        // nvidia-smi's "Reserved" on the H200 reads 616 MiB, within a MiB of the figure above.
        let h200 = gpu("h200-141gb").unwrap();
        assert!((616 << 20) - h200.driver_reserved_bytes < 1 << 20);
        // B200: the CUDA total, 178.35 GiB (pytorch/ao#4002, two decimals), is what is left.
        let b200 = gpu("b200-sxm-180gb").unwrap().usable_bytes() as f64;
        assert!(
            (b200 / (1u64 << 30) as f64 - 178.35).abs() < 0.005,
            "{b200}"
        );
    }

    #[test]
    fn every_gpu_preset_has_a_node_preset() {
        for n in GPU_NAMES {
            let node_name = default_node(n).unwrap();
            assert!(node(node_name).is_some(), "{n}: {node_name}");
        }
        assert_eq!(default_node("h200-sxm-141gb"), Some("dgx-h100"));
        assert_eq!(default_node("a100-sxm-80gb"), Some("dgx-a100"));
        assert_eq!(default_node("h100-sxm-96gb-500w"), Some("grand-teton"));
        assert_eq!(default_node("h800-sxm-80gb"), Some("hgx-h800"));
        assert_eq!(default_node("b200"), Some("dgx-b200"));
        assert_eq!(default_node("gb200"), Some("gb200-nvl72"));
        assert_eq!(default_node("v100"), None);
    }

    #[test]
    fn published_model_shapes() {
        let m = model("llama3-405b").unwrap();
        assert_eq!(
            (m.layers, m.hidden, m.heads, m.kv_heads),
            (126, 16384, 128, 8)
        );
        assert_eq!((m.ffn_hidden, m.vocab), (53248, 128256));
        let m = model("mixtral-8x7b").unwrap();
        assert_eq!(m.moe, Some((8, 2, 1)));
        assert!(m.gated_mlp && !m.tied_embeddings);
        let m = model("gpt3-175b").unwrap();
        assert_eq!(
            (m.layers, m.hidden, m.heads, m.seq_len),
            (96, 12288, 96, 2048)
        );
    }
}
