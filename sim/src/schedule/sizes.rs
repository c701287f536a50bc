//! Where the generators get the size of the work they place. The real provider asks
//! [`crate::workload`]; a synthetic provider with simple, uniform numbers lets the generators
//! and the validator be tested (and the engine be checked against closed forms) without
//! depending on the workload formulas.

use crate::plan::{ChunkLayout, GroupKind, Plan};
use crate::scenario::{Recompute, Scenario};
use crate::schedule::{CollectiveKind, ComputeOp, Gemm, Phase};
use crate::workload::routing::ExpertLoad;
use crate::workload::{self, ChunkWork, CommCall, ParamCount, PassWork, StateBytes};
use std::rc::Rc;

/// Sizes of the work of one stage, as the generators need them.
pub trait Sizes {
    /// Work for layers `first_layer .. first_layer + num_layers` of `layout`, with the
    /// embedding and/or head when asked, on a rank whose routed experts carry `load`
    /// ([`crate::workload::routing`]). Shared: a caching provider hands out one answer to
    /// many schedules without copying it.
    fn layers_work(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
        load: ExpertLoad,
    ) -> Rc<ChunkWork>;
    /// Parameters one rank holds for those layers (before ZeRO sharding).
    fn layers_params(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ParamCount;
    /// Model state of one rank of `stage`, after sharding and offload.
    fn state_bytes(&self, stage: u32) -> StateBytes;
    /// The optimizer step of one rank of `stage`.
    fn optimizer_step(&self, stage: u32) -> ComputeOp;
    /// The host's part of it when the optimizer is offloaded; `None` when it is not.
    fn offloaded_step(&self, stage: u32) -> Option<crate::workload::OffloadedStep>;
}

/// The real provider: every number comes from [`crate::workload`].
pub struct WorkloadSizes<'a> {
    pub scenario: &'a Scenario,
    pub plan: &'a Plan,
}

impl Sizes for WorkloadSizes<'_> {
    fn layers_work(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
        load: ExpertLoad,
    ) -> Rc<ChunkWork> {
        Rc::new(workload::layers_work_at(
            self.scenario,
            self.plan,
            layout,
            (first_layer, num_layers),
            (embedding, head),
            load,
        ))
    }

    /// `workload::chunk_params` sizes a chunk from its layout's layer range and its
    /// embedding/head flags, so a sub-range is sized by a layout narrowed to it.
    fn layers_params(
        &self,
        layout: &ChunkLayout,
        first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ParamCount {
        let narrowed = ChunkLayout {
            first_layer,
            num_layers,
            has_embedding: embedding,
            has_head: head,
            ..layout.clone()
        };
        workload::chunk_params(self.scenario, self.plan, &narrowed)
    }

    fn state_bytes(&self, stage: u32) -> StateBytes {
        workload::state_bytes(self.scenario, self.plan, stage)
    }

    fn optimizer_step(&self, stage: u32) -> ComputeOp {
        workload::optimizer_step(self.scenario, self.plan, stage)
    }

    fn offloaded_step(&self, stage: u32) -> Option<workload::OffloadedStep> {
        workload::offloaded_step(self.scenario, self.plan, stage)
    }
}

/// Synthetic, uniform work: every layer costs the same, collectives appear where the mesh
/// needs them (tp: all-gather + reduce-scatter per layer, cp: all-gather, ep: all-to-all on
/// MoE models). For tests and for closed-form checks of executors; not a cost model.
#[derive(Clone, Debug)]
pub struct UniformSizes {
    pub flops_per_layer: u64,
    pub activation_bytes_per_layer: u64,
    pub boundary_bytes: u64,
    pub dense_params_per_layer: u64,
    /// Expert parameters per layer (only when the scenario has MoE).
    pub expert_params_per_layer: u64,
    pub tp: u32,
    pub cp: u32,
    pub ep: u32,
    pub moe: bool,
    pub recompute: Recompute,
    pub param_bytes: u64,
    pub offload: crate::scenario::Offload,
}

impl UniformSizes {
    /// Uniform sizes for `scenario` with small, distinct numbers.
    pub fn new(s: &Scenario) -> UniformSizes {
        UniformSizes {
            flops_per_layer: 1_000_000,
            activation_bytes_per_layer: 1 << 20,
            boundary_bytes: 1 << 16,
            dense_params_per_layer: 1 << 18,
            expert_params_per_layer: if s.model.moe.is_some() { 1 << 19 } else { 0 },
            tp: s.parallel.tp,
            cp: s.parallel.cp,
            ep: s.parallel.ep,
            moe: s.model.moe.is_some(),
            recompute: s.training.recompute,
            param_bytes: s.training.param_gather_elem_bytes(),
            offload: s.training.offload,
        }
    }

    fn op(&self, phase: Phase, layers: u64, scale: u64) -> ComputeOp {
        let flops = self
            .flops_per_layer
            .saturating_mul(layers)
            .saturating_mul(scale);
        ComputeOp {
            attention: None,
            phase,
            dtype: crate::scenario::Precision::Bf16,
            gemms: vec![Gemm {
                dtype: None,
                m: 64,
                n: 64,
                k: 64,
                count: layers.min(u64::from(u32::MAX)) as u32,
                batch: 1,
            }]
            .into(),
            flops,
            memory_bytes: self.activation_bytes_per_layer.saturating_mul(layers),
            kernels: (layers.min(1000) as u32).max(1),
            sms_reserved: 0,
            host_syncs: Default::default(),
        }
    }

    fn comms(&self, layers: u32) -> Vec<CommCall> {
        let mut out = Vec::new();
        if layers == 0 {
            return out;
        }
        let calls = layers.saturating_mul(2);
        if self.tp > 1 {
            out.push(CommCall {
                kind: CollectiveKind::AllGather,
                group: GroupKind::Tp,
                bytes: self.boundary_bytes,
                calls,
            });
            out.push(CommCall {
                kind: CollectiveKind::ReduceScatter,
                group: GroupKind::Tp,
                bytes: self.boundary_bytes,
                calls,
            });
        }
        if self.cp > 1 {
            out.push(CommCall {
                kind: CollectiveKind::AllGather,
                group: GroupKind::Cp,
                bytes: self.boundary_bytes,
                calls: layers,
            });
        }
        if self.ep > 1 && self.moe {
            out.push(CommCall {
                kind: CollectiveKind::AllToAll,
                group: GroupKind::Ep,
                bytes: self.boundary_bytes,
                calls,
            });
        }
        out
    }

    fn pass(&self, phase: Phase, layers: u32, scale: u64, with_comms: bool) -> PassWork {
        PassWork {
            compute: self.op(phase, u64::from(layers), scale),
            comms: if with_comms {
                self.comms(layers)
            } else {
                Vec::new()
            },
            ring: None,
        }
    }
}

impl Sizes for UniformSizes {
    fn layers_work(
        &self,
        _layout: &ChunkLayout,
        _first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
        _load: ExpertLoad,
    ) -> Rc<ChunkWork> {
        // Embedding and head count as one extra layer each, so they stay visible.
        let n = num_layers + u32::from(embedding) + u32::from(head);
        let recompute = match self.recompute {
            Recompute::None => None,
            Recompute::Selective | Recompute::Full => Some(self.pass(Phase::Recompute, n, 1, true)),
        };
        let saved = match self.recompute {
            Recompute::Full => 1,
            _ => self.activation_bytes_per_layer.saturating_mul(u64::from(n)),
        };
        Rc::new(ChunkWork {
            forward: self.pass(Phase::Forward, n, 1, true),
            backward: self.pass(Phase::Backward, n, 2, true),
            backward_input: self.pass(Phase::BackwardInput, n, 1, true),
            backward_weight: self.op(Phase::BackwardWeight, u64::from(n), 1),
            recompute,
            activation_bytes: saved,
            recompute_bytes: match self.recompute {
                Recompute::None => 0,
                _ => self.activation_bytes_per_layer,
            },
            boundary_bytes: self.boundary_bytes,
            largest_module_params: self.dense_params_per_layer,
            grad_accumulate: None,
            forward_transient_bytes: 0,
            backward_transient_bytes: 0,
        })
    }

    fn layers_params(
        &self,
        _layout: &ChunkLayout,
        _first_layer: u32,
        num_layers: u32,
        embedding: bool,
        head: bool,
    ) -> ParamCount {
        let n = u64::from(num_layers + u32::from(embedding) + u32::from(head));
        ParamCount {
            dense: self.dense_params_per_layer.saturating_mul(n),
            expert: self
                .expert_params_per_layer
                .saturating_mul(u64::from(num_layers)),
        }
    }

    fn state_bytes(&self, _stage: u32) -> StateBytes {
        StateBytes {
            weights_bytes: self.dense_params_per_layer * self.param_bytes * 4,
            grads_bytes: self.dense_params_per_layer * 4 * 4,
            optimizer_bytes: self.dense_params_per_layer * 12 * 4,
            host_bytes: 0,
            host_init_bytes: 0,
        }
    }

    fn optimizer_step(&self, _stage: u32) -> ComputeOp {
        self.op(Phase::Optimizer, 1, 1)
    }

    /// A fixed host update, and a fixed copy back unless the parameters stay on the host.
    fn offloaded_step(&self, _stage: u32) -> Option<crate::workload::OffloadedStep> {
        use crate::scenario::Offload;
        match self.offload {
            Offload::None => None,
            o => Some(crate::workload::OffloadedStep {
                update_bytes: 1 << 16,
                params_bytes: if o == Offload::Params { 0 } else { 1 << 12 },
            }),
        }
    }
}
