//! The default cost model: rooflines for compute, the two-tier alpha-beta model for
//! communication, a flat bandwidth for checkpoint writes. Every assumption is a public field
//! with a documented default, so calibration can replace any of them with fitted values.
//!
//! Compute of one op = GEMM kernels + memory-bound kernels + launch gaps. Kernels of one op
//! run one after another on the stream, so their times add up; each kernel class is its own
//! roofline:
//! - one GEMM call: the shape-dependent curve of [`super::gemm`] (tile padding, short-k
//!   penalty, roofline on bytes, fixed ramp per call).
//! - memory-bound kernels: `max(other_flops / peak(fp32), memory_bytes / (hbm *
//!   memory_efficiency))`, where `other_flops` is the op's FLOPs outside its GEMMs. With a
//!   [`MemorySpill`] (host profiles: the host backend runs an op's memory-bound bytes as one
//!   pass), the bytes of a pass beyond `spill.bytes` run at `spill.efficiency` instead: a pass
//!   larger than the caches streams from DRAM. With `memory_cold_efficiency` (host profiles),
//!   the optimizer's pass moves at that efficiency whatever its size: it updates state last
//!   touched a step earlier, which the step's traffic has evicted. With a [`StateCache`] and
//!   the node's distinct bytes per step (`node_step_bytes`), it moves at a rate between the
//!   last-level cache's and DRAM's instead, by how much of the state that cache still holds.
//! - with [`super::OperandLoad`] (host profiles): every product packs its operands; an op whose
//!   working set does not fit in the private cache also loads, once, the union of what its
//!   GEMMs read ([`Analytic::working_set_bytes`], [`Analytic::cold_ns`]). The host backend
//!   runs every op on one reused workspace, every GEMM from the start of the same A and B
//!   buffers: an op that fits finds its operands where the last op left them, one that does
//!   not has evicted them itself, and within an op a GEMM finds what the GEMMs before it
//!   loaded.
//! - a fused attention kernel ([`crate::schedule::Attention`]): its causal work on the
//!   attention curve of [`super::attention`]; without an [`AttentionModel`] (host profiles) its
//!   equivalent GEMMs on the GEMM curve, as the host backend runs them. An op with one prices
//!   no FLOPs beyond its GEMMs and kernel: its `flops` carry Megatron's attention count.
//! - `kernels * launch_ns`: the gap the GPU idles between dependent kernels (once per op where
//!   the backend runs an op as one call, `launch_per_op`: the host backend).

use super::attention::{attention_dtype, scenario_backend, AttentionModel, DEFAULT_ATTENTION};
use super::gemm::{GemmCurve, DEFAULT_GEMM_CURVE};
use super::positive_rate;
use super::{secs_to_ns, CostModel, HostWork};
use crate::host_backend::PASS_BYTES_PER_ELEM;
use crate::host_model::{StateAging, StateCache};
use crate::plan::{Group, GroupKind, Plan};
use crate::scenario::{PeakFlops, Precision, Scenario};
use crate::schedule::{CollectiveKind, ComputeOp, Phase};
use crate::topology::{
    GroupShape, TierModel, DEFAULT_NETWORK_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY,
};
use serde::Serialize;

/// Streaming kernels reach about 90% of HBM peak bandwidth (fitted with the GEMM curve, see
/// [`crate::cost::DEFAULT_GEMM_CURVE`]).
pub const DEFAULT_MEMORY_EFFICIENCY: f64 = 0.90;
/// Where a memory-bound pass outgrows the caches: its bytes beyond `bytes` move at
/// `efficiency` of the memory bandwidth instead of `memory_efficiency`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MemorySpill {
    pub bytes: u64,
    pub efficiency: f64,
}

/// GPU-side gap between dependent kernels (launch latency mostly hidden by async launch).
pub const DEFAULT_LAUNCH_NS: u64 = 1_000;
/// The gap between dependent kernels: `hardware_ns` (the profile's `kernel.launch_ns`), or,
/// with `[training] cuda_graphs`, the framework file's `launch.cuda_graphs_kernel_gap_ns`
/// when that is smaller (a graph replays its kernels without a launch each).
pub fn kernel_gap_ns(s: &Scenario, hardware_ns: u64) -> u64 {
    if s.training.cuda_graphs {
        let graphed = s.training.framework.launch.cuda_graphs_kernel_gap_ns;
        hardware_ns.min(graphed)
    } else {
        hardware_ns
    }
}

/// CPU time an eager framework's host spends issuing one kernel (the framework file's
/// `launch.host_per_kernel_ns`, or its `compiled_` or `cuda_graphs_` variant under
/// `[training] compile` or `cuda_graphs`); 0: the host is never the floor. The engine keeps
/// the GPU from starting a kernel before the host issued it
/// ([`crate::cost::CostModel::host_issue_ns`]).
pub fn host_issue_ns(s: &Scenario) -> u64 {
    let l = &s.training.framework.launch;
    if s.training.cuda_graphs {
        l.cuda_graphs_host_per_kernel_ns
    } else if s.training.compile {
        l.compiled_host_per_kernel_ns
    } else {
        l.host_per_kernel_ns
    }
}

/// Per-rank share of checkpoint storage bandwidth (a parallel file system shared by all
/// ranks of a node); 2 GB/s.
pub const DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S: f64 = 2e9;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analytic {
    pub peak: PeakFlops,
    pub hbm_bandwidth_bytes_per_s: f64,
    pub gemm: GemmCurve,
    /// FP8 GEMMs' own curve (a profile's `[gemm.fp8]`, or `[gemm.fp8_rowwise]` and
    /// `[gemm.fp8_blockwise]` under those recipes); `None`: FP8 GEMMs follow `gemm` at the FP8
    /// peak.
    pub gemm_fp8: Option<GemmCurve>,
    /// The curve of FP8 GEMMs in forward and recompute ops where it differs from
    /// `gemm_fp8` (fast accumulation, a profile's `[gemm.fp8_fast_accum]`); `None`: they take
    /// `gemm_fp8`.
    pub gemm_fp8_forward: Option<GemmCurve>,
    /// Fused attention kernels' curves and backend; `None`: attention runs as its equivalent
    /// GEMMs on the GEMM curve (a host profile: the host backend's sgemm).
    pub attention: Option<AttentionModel>,
    pub memory_efficiency: f64,
    /// The achieved bandwidth of memory-bound kernels as an absolute number (a calibrated
    /// profile's `memory.bandwidth_bytes_per_s`); when set it replaces
    /// `hbm_bandwidth_bytes_per_s * memory_efficiency`. `None`: the datasheet times the
    /// efficiency.
    pub memory_bandwidth_bytes_per_s: Option<f64>,
    /// Slower bandwidth for the part of a memory-bound pass beyond a size; `None`: one
    /// bandwidth for every size (GPUs, where an op's bytes are many kernels').
    pub memory_spill: Option<MemorySpill>,
    /// Efficiency of the optimizer's memory-bound pass (cold state); `None`: as any pass.
    /// Superseded by `state_cache` once `node_step_bytes` is known.
    pub memory_cold_efficiency: Option<f64>,
    /// The optimizer's update by what the last-level cache holds of its state (host profiles).
    pub state_cache: Option<StateCache>,
    /// Distinct bytes the busiest node's ranks touch in one step (`cost::footprint`), set by
    /// the prediction pipeline when `state_cache` is known; `None`: not known.
    pub node_step_bytes: Option<u64>,
    pub launch_ns: u64,
    /// Pay `launch_ns` once per compute op instead of once per kernel (profile key
    /// `kernel.launch_per_op`: the host backend runs an op as one call).
    pub launch_per_op: bool,
    /// The host's CPU time per kernel issued (see [`host_issue_ns`]); 0 where the host never
    /// bounds the GPU (host profiles, whose backend runs an op as one call).
    pub host_issue_ns: u64,
    pub links: TierModel,
    pub checkpoint_bandwidth_bytes_per_s: f64,
    /// One GPU's link to host memory, per direction ([`crate::scenario::HostSide`]): what a
    /// [`HostWork::Copy`] of offloaded state moves at.
    pub host_link_bandwidth_bytes_per_s: f64,
    /// One GPU's share of its node's host memory bandwidth: what the host's optimizer update
    /// ([`HostWork::Update`], memory-bound) streams at while every GPU of the node offloads.
    pub host_memory_bandwidth_bytes_per_s: f64,
    /// Rate at which an `Alloc` allocates and touches its bytes; `None`: an allocation's time
    /// does not grow with its bytes (a caching allocator hands out memory it holds: a GPU
    /// framework's, and the host backend's).
    pub alloc_bytes_per_s: Option<f64>,
    /// Fixed time of each `Alloc` beyond the op overhead (profile key
    /// `memory.alloc_fixed_ns`; 0 without it).
    pub alloc_fixed_ns: u64,
    /// The runtime's own time per op that is not a compute op (profile key
    /// `kernel.op_overhead_ns`): added to allocations, frees, transfers and checkpoints.
    pub op_overhead_ns: u64,
    /// How long after a release by another of the rank's threads an op is issued (profile key
    /// `[host] handoff_ns`; 0 without it).
    pub handoff_ns: u64,
    /// The share of a core a compute op takes against a transfer beside it (profile key
    /// `[host] compute_weight`); `None`: the kernel's weight for the compute thread's nice.
    pub compute_weight: Option<f64>,
    /// The share of a p2p's time each end's thread is on its CPU (a host profile's
    /// `[host] p2p_cpu_share`); `None`: all of it.
    pub p2p_cpu_share: Option<f64>,
    /// Cores' worth of memory-bound work the machine serves at once (a host profile's
    /// `[host] memory_cores`); `None`: each core its own.
    pub memory_cores: Option<f64>,
    /// Interruptions of compute by the machine (profile keys `[host] interruptions_per_s`
    /// and `interruption_mean_ns`).
    pub interruptions: Option<crate::host_model::Interruptions>,
    /// A transfer's extra time once its receiving core idled (profile keys `[host] wake_ns`
    /// and `wake_per_idle`).
    pub wake: Option<crate::host_model::Wake>,
    /// CPU cores the ranks of one node share for compute (host backend); `None`: every
    /// rank has a device of its own. Carried for the engine's core sharing (see
    /// [`Analytic::host_cores`]).
    pub host_cores: Option<u32>,
    /// Point-to-point latency per tier [intra, inter] when it differs from the collective
    /// step latency of `links` (profile key `network.{intra,inter}.p2p_latency_ns`).
    pub p2p_latency_ns: [Option<u64>; 2],
    /// Point-to-point achieved rate per tier when it differs from the collectives' (profile
    /// key `network.{intra,inter}.p2p_bandwidth_bytes_per_s`).
    pub p2p_bandwidth_bytes_per_s: [Option<f64>; 2],
    /// Fractional slowdown of compute that overlaps its rank's communication (profile key
    /// `overlap.compute_slowdown`; 0: none, the documented default). A field rather than a
    /// wrapper model: a wrapper would have to forward every other question by hand, and one it
    /// did not forward would silently take the trait's default.
    pub overlap_compute_slowdown: f64,
    /// The GPU's SMs (a profile's `gpu.sm_count`): a compute op's GEMMs with
    /// `sms_reserved` SMs given to communication take `sm_count / (sm_count - sms_reserved)`
    /// times as long. `None` (no profile): the reservation is not priced.
    pub sm_count: Option<u64>,
    /// Expert all-to-alls sent hierarchically (`moe_dispatcher`); `None`: NCCL's.
    pub expert_dispatch: Option<crate::topology::dispatch::NodeDedup>,
}

/// The parts of one compute op's time ([`Analytic::compute_parts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ComputeParts {
    pub gemm_s: f64,
    pub attention_s: f64,
    pub memory_s: f64,
    pub launch_s: f64,
    pub cold_ns: u64,
}

impl Analytic {
    /// The default model for a scenario's GPU and links.
    pub fn new(s: &Scenario) -> Analytic {
        let c = &s.cluster;
        let (host, _) = crate::scenario::host_side(c);
        Analytic {
            peak: c.gpu.peak.clone(),
            hbm_bandwidth_bytes_per_s: c.gpu.hbm_bandwidth_bytes_per_s,
            gemm: DEFAULT_GEMM_CURVE,
            gemm_fp8: None,
            gemm_fp8_forward: None,
            attention: Some(AttentionModel {
                backend: scenario_backend(s),
                ..DEFAULT_ATTENTION
            }),
            memory_efficiency: DEFAULT_MEMORY_EFFICIENCY,
            memory_bandwidth_bytes_per_s: None,
            memory_spill: None,
            memory_cold_efficiency: None,
            state_cache: None,
            node_step_bytes: None,
            launch_ns: kernel_gap_ns(s, DEFAULT_LAUNCH_NS),
            launch_per_op: false,
            host_issue_ns: host_issue_ns(s),
            links: TierModel {
                intra_bandwidth_bytes_per_s: c.intra_node.bandwidth_bytes_per_s,
                intra_latency_ns: c.intra_node.latency_ns,
                inter_bandwidth_bytes_per_s: c.inter_node.bandwidth_bytes_per_s,
                inter_latency_ns: c.inter_node.latency_ns,
                nvlink_efficiency: DEFAULT_NVLINK_EFFICIENCY,
                network_efficiency: DEFAULT_NETWORK_EFFICIENCY,
                nvls: None,
                algorithm: None,
            },
            checkpoint_bandwidth_bytes_per_s: DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S,
            host_link_bandwidth_bytes_per_s: host.link_bandwidth_bytes_per_s,
            host_memory_bandwidth_bytes_per_s: host.memory_bandwidth_bytes_per_s,
            alloc_bytes_per_s: None,
            alloc_fixed_ns: 0,
            op_overhead_ns: 0,
            handoff_ns: 0,
            compute_weight: None,
            p2p_cpu_share: None,
            memory_cores: None,
            interruptions: None,
            wake: None,
            host_cores: None,
            p2p_latency_ns: [None, None],
            p2p_bandwidth_bytes_per_s: [None, None],
            overlap_compute_slowdown: 0.0,
            sm_count: None,
            expert_dispatch: crate::topology::dispatch::NodeDedup::of(s),
        }
    }

    /// CPU cores shared by the ranks of one node for compute, when the profile describes a
    /// host (`[host] cores`). The engine binds each rank to one of these cores and shares
    /// each core among the work bound to it (see `engine::flow`); `None` means every rank
    /// has its own device.
    pub fn host_cores(&self) -> Option<u32> {
        self.host_cores
    }

    /// The GEMM curve of a dtype in an op of `phase`: FP8's own where the profile has one
    /// (its forward curve in forward and recompute ops where it has that), else the one curve.
    pub fn gemm_curve(&self, dtype: Precision, phase: Phase) -> &GemmCurve {
        let forward = matches!(phase, Phase::Forward | Phase::Recompute);
        match (dtype, &self.gemm_fp8_forward, &self.gemm_fp8) {
            (Precision::Fp8, Some(c), _) if forward => c,
            (Precision::Fp8, _, Some(c)) => c,
            _ => &self.gemm,
        }
    }

    /// Dense peak FLOP/s for a dtype (fp32 is plain FP32, PyTorch's default for matmul).
    pub fn peak_flops_per_s(&self, dtype: Precision) -> f64 {
        self.peak.for_precision(dtype)
    }

    fn hbm_rate(&self) -> f64 {
        positive_rate(
            self.memory_bandwidth_bytes_per_s
                .unwrap_or(self.hbm_bandwidth_bytes_per_s * self.memory_efficiency),
        )
    }

    /// Seconds of the memory-bound pass of an op of `phase` over `bytes` (see [`MemorySpill`],
    /// [`StateCache`] and `memory_cold_efficiency`). The optimizer's update is priced with no
    /// time since the last one: the engine adds what time takes ([`Analytic::state_aging`]).
    pub fn memory_pass_s(&self, phase: Phase, bytes: u64) -> f64 {
        self.memory_pass_at_s(phase, bytes, 0)
    }

    /// [`Analytic::memory_pass_s`], an optimizer's update `elapsed_ns` after the last.
    fn memory_pass_at_s(&self, phase: Phase, bytes: u64, elapsed_ns: u64) -> f64 {
        if phase == Phase::Optimizer {
            if let Some(s) = self.state_update_s(bytes, elapsed_ns) {
                return s;
            }
        }
        if let (Phase::Optimizer, Some(e)) = (phase, self.memory_cold_efficiency) {
            return bytes as f64 / positive_rate(self.hbm_bandwidth_bytes_per_s * e);
        }
        match self.memory_spill {
            Some(s) if bytes > s.bytes => {
                let spilled = positive_rate(self.hbm_bandwidth_bytes_per_s * s.efficiency);
                s.bytes as f64 / self.hbm_rate() + (bytes - s.bytes) as f64 / spilled
            }
            _ => bytes as f64 / self.hbm_rate(),
        }
    }
}

impl Analytic {
    /// Seconds of the host backend's optimizer update moving `bytes` (each state byte read and
    /// written), `elapsed_ns` after the last update, by what the node's last-level cache
    /// still holds of the state ([`StateCache`]); `None` without a state cache or the node's
    /// step footprint.
    pub fn state_update_s(&self, bytes: u64, elapsed_ns: u64) -> Option<f64> {
        let (c, d) = (self.state_cache?, self.node_step_bytes?);
        let h = self.state_resident(bytes, d, c)
            * c.decay.map_or(1.0, |decay| decay.survival(elapsed_ns));
        Some(c.update_s(bytes, h, self.hbm_bandwidth_bytes_per_s))
    }

    /// The fraction of the state of an update moving `bytes` that the node's own step traffic
    /// (`node_bytes`, the state included) leaves in the cache.
    fn state_resident(&self, bytes: u64, node_bytes: u64, c: StateCache) -> f64 {
        let state = bytes / 2;
        c.resident_fraction(node_bytes.saturating_sub(state), state)
    }
}

impl Analytic {
    /// Bytes an op touches in the host backend's workspace: the largest A, B and C of its
    /// GEMMs (every GEMM uses the start of the same three buffers) and the two vectors of its
    /// memory-bound pass (8 of its 12 bytes per element are x and y).
    pub fn working_set_bytes(op: &ComputeOp, elem_bytes: u64) -> u64 {
        let (a, b, c) = Self::workspace_elems(op);
        a.saturating_add(b)
            .saturating_add(c)
            .saturating_mul(elem_bytes)
            // x and y: 8 bytes per element of the pass.
            .saturating_add(op.memory_bytes / PASS_BYTES_PER_ELEM * 8)
    }

    /// Elements of the workspace's A, B and C buffers that `op`'s GEMMs use.
    fn workspace_elems(op: &ComputeOp) -> (u64, u64, u64) {
        op.executed_gemms().fold((0, 0, 0), |(a, b, c), g| {
            (
                a.max(g.m.saturating_mul(g.k)),
                b.max(g.k.saturating_mul(g.n)),
                c.max(g.m.saturating_mul(g.n)),
            )
        })
    }

    /// What `op` pays beyond its cached price once its operands are out of the private cache:
    /// the cold fixed cost, and the union of what its GEMMs read (the largest A and the
    /// largest B) loaded once. Timed after 4 and 64 MiB of other traffic, a forward op of
    /// single.toml took 17 and 29 us longer than warm, a backward op 22-24 and 48-60 us,
    /// where the union is 27 us for both and the sum over their GEMMs 72 and 114 us
    /// (docs/journal/2026-11-validation-history.md, 2026-11-23). 0 without an operand term or a
    /// GEMM.
    pub fn cold_ns(&self, op: &ComputeOp) -> u64 {
        if op.executed_gemms().next().is_none() || self.gemm.operands.is_none() {
            return 0;
        }
        let (a, b, _) = Self::workspace_elems(op);
        let bytes = a.saturating_add(b).saturating_mul(op.dtype.bytes());
        secs_to_ns(self.gemm.cold_s(bytes))
    }

    /// [`CostModel::compute_ns`] with every GEMM loading its operands, whatever the op's
    /// working set: what a benchmark that evicts the cache before each call measures (the
    /// calibration's GEMM sweep, `twin verify`'s machine check).
    pub fn compute_evicted_ns(&self, op: &ComputeOp) -> u64 {
        self.compute_with(op, true)
    }

    fn compute_with(&self, op: &ComputeOp, evicted: bool) -> u64 {
        let p = self.compute_parts(op, evicted);
        secs_to_ns(p.gemm_s + p.attention_s + p.memory_s + p.launch_s).saturating_add(p.cold_ns)
    }

    /// The parts of an op's time: its GEMMs (with an attention priced as GEMMs where no
    /// attention curve exists), its fused attention kernel, its memory-bound passes, its
    /// kernel launches and the reload of evicted operands (host profiles). Their sum is
    /// `compute_ns`; `twin verify` splits a predicted step by them.
    pub fn compute_parts(&self, op: &ComputeOp, evicted: bool) -> ComputeParts {
        let hbm = self.hbm_rate();
        let elem = op.dtype.bytes();
        let mut gemm_s = 0.0;
        let mut gemm_flops = 0u64;
        for g in &op.gemms {
            // A GEMM of its own precision (FP8 training's bf16 attention core and output
            // layer) follows that precision's peak, curve and element size.
            let dtype = g.dtype.unwrap_or(op.dtype);
            gemm_s += self.gemm_curve(dtype, op.phase).gemm_s(
                g,
                dtype.bytes(),
                self.peak_flops_per_s(dtype),
                hbm,
            );
            gemm_flops = gemm_flops.saturating_add(g.flops());
        }
        gemm_s *= self.reserved_sms_factor(op.sms_reserved);
        let mut attention_s = 0.0;
        if let Some(a) = &op.attention {
            match &self.attention {
                Some(m) => {
                    attention_s = m.attention_s(a, self.peak_flops_per_s(attention_dtype(op.dtype)))
                }
                None => {
                    let dtype = attention_dtype(op.dtype);
                    for part in a.parts() {
                        gemm_s += self.gemm.gemm_s(
                            &part.equivalent_gemm(),
                            dtype.bytes(),
                            self.peak_flops_per_s(dtype),
                            hbm,
                        )
                    }
                }
            }
            // The rest of the op's FLOPs are the attention's Megatron count, priced above.
            gemm_flops = gemm_flops.max(op.flops);
        }
        let cold = self
            .gemm
            .operands
            .is_some_and(|o| evicted || Self::working_set_bytes(op, elem) > o.cache_bytes);
        let cold_ns = if cold { self.cold_ns(op) } else { 0 };
        let memory_s = self.memory_bound_s(op, gemm_flops, 0);
        let kernels = if self.launch_per_op {
            op.kernels.min(1)
        } else {
            op.kernels
        };
        let launch_s = f64::from(kernels) * self.launch_ns as f64 * 1e-9;
        ComputeParts {
            gemm_s,
            attention_s,
            memory_s,
            launch_s,
            cold_ns,
        }
    }

    /// How much longer GEMMs take on the SMs `reserved` leaves them: `sm / (sm - reserved)`,
    /// 1 without a reservation or an SM count (and at most the whole GPU's time per SM left).
    pub fn reserved_sms_factor(&self, reserved: u32) -> f64 {
        match self.sm_count {
            Some(sm) if reserved > 0 => {
                let left = sm.saturating_sub(u64::from(reserved)).max(1);
                sm as f64 / left as f64
            }
            _ => 1.0,
        }
    }

    /// Seconds of `op`'s memory-bound kernels (its FLOPs outside its `gemm_flops` at the
    /// vector rate, or its memory pass, whichever is longer), an optimizer's update
    /// `elapsed_ns` after the last.
    fn memory_bound_s(&self, op: &ComputeOp, gemm_flops: u64, elapsed_ns: u64) -> f64 {
        let other_flops = op.flops.saturating_sub(gemm_flops) as f64;
        let vector_rate = positive_rate(self.peak.fp32_flops_per_s);
        let pass_s = self.memory_pass_at_s(op.phase, op.memory_bytes, elapsed_ns);
        (other_flops / vector_rate).max(pass_s)
    }
}

impl CostModel for Analytic {
    fn compute_ns(&self, _rank: u32, op: &ComputeOp) -> u64 {
        self.compute_with(op, false)
    }

    fn host_issue_ns(&self) -> u64 {
        self.host_issue_ns
    }

    fn overlap_compute_slowdown(&self) -> f64 {
        // max also maps NaN to 0.
        self.overlap_compute_slowdown.max(0.0)
    }

    fn models_operand_residency(&self) -> bool {
        self.gemm.operands.is_some()
    }

    fn operand_residency(&self, op: &ComputeOp) -> Option<crate::host_model::Residency> {
        let load = self.gemm.operands?;
        let elem = op.dtype.bytes();
        let working_set_bytes = Self::working_set_bytes(op, elem);
        // An op that outgrows the cache is priced loading its operands already; one that fits
        // reloads them once other work evicted them.
        let reload_ns = if working_set_bytes > load.cache_bytes {
            0
        } else {
            self.cold_ns(op)
        };
        Some(crate::host_model::Residency {
            working_set_bytes,
            cache_bytes: load.cache_bytes,
            reload_ns,
        })
    }

    fn models_state_aging(&self) -> bool {
        self.node_step_bytes.is_some() && self.state_cache.is_some_and(|c| c.decay.is_some())
    }

    fn state_aging(&self, op: &ComputeOp) -> Option<StateAging> {
        let decay = self.state_cache?.decay?;
        if op.phase != Phase::Optimizer || self.node_step_bytes.is_none() {
            return None;
        }
        let gemm_flops = op.gemm_flops();
        let fresh_s = self.memory_bound_s(op, gemm_flops, 0);
        let gone_s = self.memory_bound_s(op, gemm_flops, u64::MAX);
        Some(StateAging {
            max_extra_ns: secs_to_ns((gone_s - fresh_s).max(0.0)),
            decay,
        })
    }

    fn collective_ns(&self, kind: CollectiveKind, group: &Group, bytes: u64, calls: u32) -> u64 {
        let shape = GroupShape {
            ranks: group.members.len() as u32,
            nodes: group.nodes,
            max_per_node: group.max_per_node,
        };
        let estimate = match self.expert_dispatch {
            Some(dedup) if kind == CollectiveKind::AllToAll && group.kind == GroupKind::Ep => {
                dedup.estimate(&self.links, shape, bytes)
            }
            _ => self.links.estimate(kind, shape, bytes),
        };
        estimate
            .time_ns
            .saturating_mul(u64::from(calls))
            .saturating_add(self.op_overhead_ns)
    }

    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64 {
        let same_node = plan.node_of(src) == plan.node_of(dst);
        let tier = usize::from(!same_node);
        self.links
            .p2p_ns_with(
                same_node,
                bytes,
                self.p2p_latency_ns[tier],
                self.p2p_bandwidth_bytes_per_s[tier],
            )
            .saturating_add(self.op_overhead_ns)
    }

    fn checkpoint_ns(&self, bytes: u64) -> u64 {
        secs_to_ns(bytes as f64 / positive_rate(self.checkpoint_bandwidth_bytes_per_s))
            .saturating_add(self.op_overhead_ns)
    }

    fn host_ns(&self, work: HostWork) -> u64 {
        if self.launch_per_op {
            // The host backend is its own host: a copy reads and writes each byte through a
            // buffer of a MiB (below any spill), the update is the optimizer's memory pass.
            let s = match work {
                HostWork::Copy { bytes } => 2.0 * bytes as f64 / self.hbm_rate(),
                HostWork::Update { bytes } => self.memory_pass_s(Phase::Optimizer, bytes),
            };
            return secs_to_ns(s).saturating_add(self.op_overhead_ns);
        }
        let rate = match work {
            HostWork::Copy { .. } => self.host_link_bandwidth_bytes_per_s,
            HostWork::Update { .. } => self.host_memory_bandwidth_bytes_per_s,
        };
        secs_to_ns(work.bytes() as f64 / positive_rate(rate)).saturating_add(self.op_overhead_ns)
    }

    fn alloc_ns(&self, category: crate::schedule::MemCategory, bytes: u64) -> u64 {
        if super::is_model_state(category) {
            return self.op_overhead_ns;
        }
        self.alloc_bytes_per_s
            .map_or(0, |r| secs_to_ns(bytes as f64 / positive_rate(r)))
            .saturating_add(self.alloc_fixed_ns)
            .saturating_add(self.op_overhead_ns)
    }

    fn free_ns(&self) -> u64 {
        self.op_overhead_ns
    }

    fn interruptions(&self) -> Option<crate::host_model::Interruptions> {
        self.interruptions
    }

    fn wake(&self) -> Option<crate::host_model::Wake> {
        self.wake
    }

    fn handoff_ns(&self) -> u64 {
        self.handoff_ns
    }

    fn compute_weight(&self) -> f64 {
        self.compute_weight
            .unwrap_or_else(super::host_compute_weight)
    }

    fn p2p_cpu_share(&self) -> f64 {
        self.p2p_cpu_share.unwrap_or(1.0)
    }

    fn memory_cores(&self) -> Option<f64> {
        self.memory_cores
    }

    fn compute_is_rank_invariant(&self) -> bool {
        true
    }

    fn shared_cores(&self) -> Option<u32> {
        self.host_cores
    }
}

#[cfg(test)]
#[path = "analytic_tests.rs"]
mod tests;
