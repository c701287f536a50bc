//! Cost models: how long an op of the schedule takes on modelled hardware. The engine asks a
//! [`CostModel`] for every duration and knows nothing of GPUs or links itself, so a fitted
//! hardware profile (calibration) can replace the default [`Analytic`] model without touching
//! the engine.

mod analytic;
mod attention;
pub mod attention_fit;
mod from_profile;
mod gemm;

pub use analytic::{
    host_issue_ns, kernel_gap_ns, Analytic, MemorySpill, DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S,
    DEFAULT_LAUNCH_NS, DEFAULT_MEMORY_EFFICIENCY,
};
pub use attention::{
    attention_dtype, scenario_backend, AttentionBackend, AttentionCurve, AttentionModel,
    BackendCurves, ATTENTION_BACKENDS, DEFAULT_ATTENTION, DEFAULT_CUDNN, DEFAULT_FLASH,
    DEFAULT_TRITON,
};
pub use gemm::{GemmCurve, OperandLoad, DEFAULT_GEMM_CURVE};
// The link tiers' alpha-beta model (`topology::tiers`) prices collectives for this cost model;
// the host model's parameters are the ones a host profile gives it.
pub use crate::host_model::{
    cfs_relative_weight, footprint, host_compute_weight, ramp, shape_factors, survival, StateAging,
    StateCache, StateDecay,
};
use crate::host_model::{Interruptions, Residency, Wake};
pub use crate::topology::{
    Algorithm, CollectiveEstimate, Decomposition, GroupShape, NvlsModel, Pattern, Phase, TierModel,
    DEFAULT_NETWORK_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY,
};
pub(crate) use crate::units::{positive_rate, secs_to_ns};

use crate::plan::{Group, Plan};
use crate::schedule::{CollectiveKind, ComputeOp};

pub use crate::schedule::HostWork;

/// Durations of ops, in nanoseconds. Implementations must be pure functions of their
/// arguments (the engine may cache results) and must not panic on any input.
pub trait CostModel: Send + Sync {
    /// One compute op run by `rank` (passed so stragglers can be modelled).
    fn compute_ns(&self, rank: u32, op: &ComputeOp) -> u64;
    /// `calls` collectives of `bytes` each (nccl-tests buffer size, see
    /// [`crate::schedule::OpKind::Collective`]) over one concrete group.
    fn collective_ns(&self, kind: CollectiveKind, group: &Group, bytes: u64, calls: u32) -> u64;
    /// One point-to-point transfer from `src` to `dst`.
    fn p2p_ns(&self, plan: &Plan, src: u32, dst: u32, bytes: u64) -> u64;
    /// Writing `bytes` of one rank's state to checkpoint storage.
    fn checkpoint_ns(&self, bytes: u64) -> u64;
    /// One piece of offloaded work on the host side of a rank: a copy over its GPU's host link
    /// or the host's optimizer update ([`crate::schedule::OpKind::HostCopy`],
    /// [`crate::schedule::OpKind::HostUpdate`]).
    fn host_ns(&self, work: HostWork) -> u64;
    /// One `Alloc` of `bytes` in `category`. Defaults to zero: a caching GPU allocator hands
    /// out memory it already holds. The host backend allocates and touches every byte of a
    /// step's buffers, which a profile's `memory.alloc_bytes_per_s` prices; model state
    /// (weights, optimizer state) lives for the whole run there as in any framework, so a
    /// pricing model leaves it free (see [`is_model_state`]).
    fn alloc_ns(&self, _category: crate::schedule::MemCategory, _bytes: u64) -> u64 {
        0
    }
    /// The CPU time the host of an eager framework spends issuing one kernel; 0 (the
    /// default): the host is never the floor. The host issues a rank's compute ops one after
    /// another in program order, `kernels x host_issue_ns` each, from the step's start, without
    /// waiting for the GPU (the launch queue holds what it issued ahead); the engine starts no
    /// compute op before its first kernel is issued and ends none before its last kernel is
    /// issued and has run (`crate::engine`, "host issue").
    fn host_issue_ns(&self) -> u64 {
        0
    }
    /// One `Free`. Defaults to zero (bookkeeping); a host profile's `kernel.op_overhead_ns`
    /// prices the host backend's stream loop running it as an op.
    fn free_ns(&self) -> u64 {
        0
    }
    /// How often and how long the machine interrupts compute (a host profile's
    /// `[host] interruptions_per_s` and `interruption_mean_ns`); `None`: never. The engine
    /// draws them only when asked to ([`crate::engine::SimOptions::jitter_seed`]).
    fn interruptions(&self) -> Option<Interruptions> {
        None
    }
    /// How much longer a transfer takes when its receiving core idled before it (a host
    /// profile's `[host] wake_ns` and `wake_per_idle`); `None`: no difference.
    fn wake(&self) -> Option<Wake> {
        None
    }
    /// How long after an op on one of a rank's streams releases the head of another stream
    /// that head is issued (a host profile's `[host] handoff_ns`: the thread that runs it
    /// waking and getting the core); 0: at once, as a GPU's streams see an event.
    fn handoff_ns(&self) -> u64 {
        0
    }
    /// On shared cores, the share of a core that work on a rank's compute thread (a compute
    /// op, an allocation on the compute stream) takes against a transfer's work beside it,
    /// which weighs 1 (a host profile's `[host] compute_weight`; without it the kernel's
    /// weight for the compute thread's nice level, [`host_compute_weight`]).
    fn compute_weight(&self) -> f64 {
        host_compute_weight()
    }
    /// On shared cores, the share of a p2p's time that each end's thread works on its core (a
    /// host profile's `[host] p2p_cpu_share`); the rest of the message the threads sleep in
    /// their blocking reads, and the engine runs it as latency. 1: all of it.
    fn p2p_cpu_share(&self) -> f64 {
        1.0
    }
    /// On shared cores, how many cores' worth of memory-bound work (compute ops without GEMMs,
    /// such as the optimizer) the machine's caches and memory serve at once (a host profile's
    /// `[host] memory_cores`, >= 1): such ops running on more cores than that share it. `None`:
    /// every core has its own.
    fn memory_cores(&self) -> Option<f64> {
        None
    }
    /// What an optimizer op loses as its state leaves a shared last-level cache with time (a
    /// host profile's `memory.state_decay_after_ns` and `state_lifetime_ns`); `None`: its
    /// price does not depend on when it runs. The engine adds [`StateAging::extra_ns`] of the
    /// time since the step began: in the steady state the rank's last update ended then.
    fn state_aging(&self, _op: &ComputeOp) -> Option<StateAging> {
        None
    }
    /// Whether [`CostModel::state_aging`] can return anything; false spares the engine its
    /// table (every GPU profile).
    fn models_state_aging(&self) -> bool {
        false
    }
    /// Whether [`CostModel::operand_residency`] can return anything (host profiles with a GEMM
    /// operand term); false spares the engine its bookkeeping.
    fn models_operand_residency(&self) -> bool {
        false
    }
    /// A compute op's working set, the private cache it competes for, and what reloading its
    /// operands adds when other work evicted them (`host_model::residency`); `None`: caches are
    /// not modelled (GPUs).
    fn operand_residency(&self, _op: &ComputeOp) -> Option<Residency> {
        None
    }
    /// True when `compute_ns` does not depend on `rank`: the engine then computes each
    /// program's compute durations once instead of once per rank. Defaults to false, so a
    /// model that adds stragglers is never cached by accident.
    fn compute_is_rank_invariant(&self) -> bool {
        false
    }
    /// When the ranks of one node share this many CPU cores (host backend): the engine then
    /// binds each rank to one core (round-robin by local rank) and shares each core among the
    /// compute, transfers and priced allocations bound to it.
    /// `None` (the default): every rank has its own device.
    fn shared_cores(&self) -> Option<u32> {
        None
    }
    /// Fractional slowdown of compute while its rank also communicates (SM and memory
    /// contention): a compute op that overlaps a transfer runs `1 + s` times slower for the
    /// overlapping part. Default 0 (none), as documented in docs/reference/profiles.md.
    fn overlap_compute_slowdown(&self) -> f64 {
        0.0
    }
}

/// Whether an allocation of `category` is model state, allocated once per run rather than
/// per step: weights and optimizer state.
pub fn is_model_state(category: crate::schedule::MemCategory) -> bool {
    matches!(
        category,
        crate::schedule::MemCategory::Weights | crate::schedule::MemCategory::Optimizer
    )
}

/// Bus bandwidth in bytes/s as nccl-tests reports it: algorithm bandwidth (`bytes / time`)
/// times the collective's traffic factor: `2(n-1)/n` for all-reduce, `(n-1)/n` for
/// all-gather, reduce-scatter and all-to-all, 1 for broadcast. Zero when `time_ns` is zero.
pub fn bus_bandwidth(kind: CollectiveKind, n: u32, bytes: u64, time_ns: u64) -> f64 {
    if time_ns == 0 || n == 0 {
        return 0.0;
    }
    let algbw = bytes as f64 / (time_ns as f64 * 1e-9);
    algbw * bus_factor(kind, n)
}

/// The nccl-tests factor between algorithm and bus bandwidth.
pub fn bus_factor(kind: CollectiveKind, n: u32) -> f64 {
    let n = f64::from(n.max(1));
    match kind {
        CollectiveKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveKind::AllGather | CollectiveKind::ReduceScatter | CollectiveKind::AllToAll => {
            (n - 1.0) / n
        }
        CollectiveKind::Broadcast => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_bandwidth_follows_nccl_tests_definitions() {
        // 1 GB in 1 ms = 1 TB/s algbw.
        let t = 1_000_000;
        let b = 1_000_000_000;
        let ar = bus_bandwidth(CollectiveKind::AllReduce, 8, b, t);
        assert!((ar - 1.75e12).abs() < 1e3, "{ar}");
        let ag = bus_bandwidth(CollectiveKind::AllGather, 8, b, t);
        assert!((ag - 0.875e12).abs() < 1e3, "{ag}");
        let bc = bus_bandwidth(CollectiveKind::Broadcast, 8, b, t);
        assert!((bc - 1e12).abs() < 1e3, "{bc}");
        assert_eq!(bus_bandwidth(CollectiveKind::AllReduce, 8, b, 0), 0.0);
        assert_eq!(bus_bandwidth(CollectiveKind::AllReduce, 1, b, t), 0.0);
    }
}
