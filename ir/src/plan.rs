//! The plan resolves a scenario into the facts every executor shares: the device mesh and each
//! rank's coordinates on it, the communication groups, which layers sit on which pipeline
//! stage and chunk, and the node each rank lives on. It is a pure function of the scenario.
//!
//! Placement: consecutive ranks vary the innermost axis first. The default order is
//! tp, cp, ep, dp, pp (Megatron's), so a TP group sits inside one node whenever
//! `tp <= gpus_per_node`. A scenario may override the order (`parallel.order`).
//!
//! The mesh's ep and dp axes split the scenario's data parallelism: the scenario's `dp` counts
//! every data-parallel rank of the dense layers, and the expert layers group `ep` consecutive
//! ones of them, so the mesh's dp axis is `dp / ep`, the expert layers' data parallelism
//! (Megatron-Core's expert mesh with the expert tensor parallelism equal to tp,
//! NVIDIA/Megatron-LM@d98e8a64dd megatron/core/parallel_state.py `RankGenerator`). Dense
//! data-parallel groups vary cp, ep and dp; expert ones cp and dp.
//!
//! HSDP (`parallel.fsdp_degree` below dp under ZeRO-3/FSDP) splits the dp axis in two: the
//! inner `fsdp_degree` coordinates (consecutive, so the faster links) form the shard group
//! that ZeRO-3 gathers parameters and reduce-scatters gradients over, and the outer
//! `dp / fsdp_degree` coordinates the replica group that all-reduces the sharded gradients.
//! This is torchtitan's mesh, `["pp", "dp_replicate", "dp_shard", "cp", "tp"]` outermost
//! first (pytorch/torchtitan@0119de156de558030726b8539ef0078d8aaaec99:
//! torchtitan/distributed/parallel_dims.py), with FSDP sharding over `dp_shard` and `cp`.

use crate::scenario::{Axis, Scenario};
use serde::Serialize;
use std::sync::OnceLock;

pub mod partition;
mod spare;
pub use partition::{PartitionError, PartitionRule};
#[doc(hidden)]
pub use spare::GroupsKey;

pub type RankId = u32;

/// A rank's position on each mesh axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Coords {
    pub tp: u32,
    pub cp: u32,
    pub ep: u32,
    pub dp: u32,
    pub pp: u32,
}

impl Coords {
    fn get(&self, axis: Axis) -> u32 {
        match axis {
            Axis::Tp => self.tp,
            Axis::Cp => self.cp,
            Axis::Ep => self.ep,
            Axis::Dp => self.dp,
            Axis::Pp => self.pp,
        }
    }
    fn set(&mut self, axis: Axis, v: u32) {
        match axis {
            Axis::Tp => self.tp = v,
            Axis::Cp => self.cp = v,
            Axis::Ep => self.ep = v,
            Axis::Dp => self.dp = v,
            Axis::Pp => self.pp = v,
        }
    }
}

/// The kinds of communication group a program can name. A program says "my TP group"; the
/// plan resolves that to concrete members for each rank, so one program serves every rank of
/// a stage.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum GroupKind {
    /// Tensor parallel: ranks that differ only in tp.
    Tp,
    /// Context parallel: ranks that differ only in cp.
    Cp,
    /// Expert parallel: ranks that differ only in ep.
    Ep,
    /// Pure data parallel: ranks that differ only in dp.
    Dp,
    /// Replicas of dense (non-expert) parameters: ranks that differ in dp, ep or cp. Dense
    /// gradients are reduced and ZeRO-sharded over this group. Under HSDP only the inner
    /// `fsdp_degree` dp coordinates vary: the group shards, [`GroupKind::DpReplica`] joins the
    /// shards' copies.
    DenseDp,
    /// Replicas of expert parameters: ranks that differ in dp or cp (under HSDP, in cp or the
    /// inner `fsdp_degree` dp coordinates).
    ExpertDp,
    /// The pipeline: ranks that differ only in pp.
    Pp,
    /// Every rank.
    World,
    /// HSDP replicas: ranks that differ only in the outer `dp / fsdp_degree` dp coordinates,
    /// i.e. hold the same shard of the model state in different shard groups. One rank each
    /// without HSDP.
    DpReplica,
    /// DualPipe's two copies of a stage: ranks that differ only in pp, at stages `s` and
    /// `pp - 1 - s` (rank `s` holds model stages `s` and `pp - 1 - s`, rank `pp - 1 - s` the
    /// same two), which sum the gradients of the copies. One rank each when pp is odd.
    PpMirror,
    /// Expert tensor parallelism: the ranks that split each routed expert. Under the expert
    /// layers' refold ([`ExpertFold`]) `etp` consecutive ranks; otherwise the tensor-parallel
    /// group.
    Etp,
}

impl GroupKind {
    pub const ALL: [GroupKind; 11] = [
        GroupKind::Tp,
        GroupKind::Cp,
        GroupKind::Ep,
        GroupKind::Dp,
        GroupKind::DenseDp,
        GroupKind::ExpertDp,
        GroupKind::Pp,
        GroupKind::World,
        GroupKind::DpReplica,
        GroupKind::PpMirror,
        GroupKind::Etp,
    ];

    fn varied_axes(self) -> &'static [Axis] {
        match self {
            GroupKind::Tp => &[Axis::Tp],
            GroupKind::Cp => &[Axis::Cp],
            GroupKind::Ep => &[Axis::Ep],
            GroupKind::Dp => &[Axis::Dp],
            GroupKind::DenseDp => &[Axis::Cp, Axis::Ep, Axis::Dp],
            GroupKind::ExpertDp => &[Axis::Cp, Axis::Dp],
            GroupKind::Pp => &[Axis::Pp],
            GroupKind::World => &[Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp],
            GroupKind::DpReplica => &[Axis::Dp],
            GroupKind::PpMirror => &[Axis::Pp],
            GroupKind::Etp => &[Axis::Tp],
        }
    }

    /// Position in [`GroupKind::ALL`] (a test checks the two agree).
    #[doc(hidden)]
    pub fn index(self) -> usize {
        match self {
            GroupKind::Tp => 0,
            GroupKind::Cp => 1,
            GroupKind::Ep => 2,
            GroupKind::Dp => 3,
            GroupKind::DenseDp => 4,
            GroupKind::ExpertDp => 5,
            GroupKind::Pp => 6,
            GroupKind::World => 7,
            GroupKind::DpReplica => 8,
            GroupKind::PpMirror => 9,
            GroupKind::Etp => 10,
        }
    }
}

/// A concrete communication group. Globally unique id: index into [`Plan::groups`].
pub type GroupId = u32;

#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub kind: GroupKind,
    /// Members in ring order (ascending coordinate on the varied axes).
    pub members: Vec<RankId>,
    /// Distinct nodes spanned.
    pub nodes: u32,
    /// Most members on any one node.
    pub max_per_node: u32,
}

/// Layers held by one (stage, chunk). Virtual stage `v = chunk * pp + stage` is the position
/// along the model, as in Megatron's interleaved schedule; under DualPipe chunk 1 of stage
/// `s` is model stage `v = pp - 1 - s`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkLayout {
    pub stage: u32,
    pub chunk: u32,
    pub virtual_stage: u32,
    pub first_layer: u32,
    pub num_layers: u32,
    /// Holds the input embedding (the first virtual stage).
    pub has_embedding: bool,
    /// Holds the output layer and loss (the last virtual stage).
    pub has_head: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub world: u32,
    /// Axis sizes indexed like `Coords`; `sizes.dp` is the expert layers' data parallelism,
    /// the scenario's `dp / ep`.
    pub sizes: Coords,
    pub order: [Axis; 5],
    /// Inner dp coordinates that share one copy of the model state (`dp` but under HSDP):
    /// how far `DenseDp` and `ExpertDp` reach along dp.
    pub fsdp_degree: u32,
    pub gpus_per_node: u32,
    pub microbatches: u32,
    /// `chunks[stage][chunk]`.
    pub chunks: Vec<Vec<ChunkLayout>>,
    /// The rule that chose the layers per chunk ([`partition`]).
    pub partition: PartitionRule,
    /// Every group, built on first use ([`Plan::groups`]; not serialized): a layout search
    /// bounds most layouts without them ([`Plan::group_containing`] builds one group).
    #[serde(skip)]
    table: OnceLock<GroupTable>,
    /// Rank distance between neighbouring pipeline stages (the product of the axis sizes
    /// placed inside pp), so stage and pipeline neighbours need no coordinate decomposition.
    pp_stride: u32,
    /// The expert layers' own mesh, when they refold the tensor-parallel ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_fold: Option<ExpertFold>,
}

/// Expert layers that refold a stage's tensor-, context- and data-parallel ranks (`etp` other
/// than `tp`, or `ep` under `cp > 1`; Megatron-Core's expert rank generator, expert tp
/// innermost, then ep, then the expert data parallelism): within each stage's block of
/// `tp * cp * dp` consecutive ranks, the expert-parallel group is `ep` ranks `etp` apart and
/// the expert data-parallel group the ranks `etp * ep` apart. The mesh's ep axis is then 1 and
/// its dp axis the dense layers' whole `dp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ExpertFold {
    pub etp: u32,
    pub ep: u32,
    /// Expert data-parallel ranks: `tp * cp * dp / (etp * ep)`.
    pub edp: u32,
}

/// Plans are only built from validated scenarios; these are the invariants that validation
/// guarantees, re-checked so a bug upstream cannot turn into a panic or a silent wrong plan.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("mesh tp*cp*dp*pp = {product} does not equal the GPU count {gpus}")]
    MeshMismatch { product: u64, gpus: u32 },
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("global batch {global_batch} is not a positive multiple of micro_batch*dp = {denom}")]
    Batch { global_batch: u64, denom: u64 },
    #[error("world of {0} ranks is too large (limit 1,048,576)")]
    TooLarge(u64),
    #[error("fsdp_degree = {fsdp_degree} does not divide the expert data-parallel size {dp}")]
    FsdpDegree { fsdp_degree: u32, dp: u32 },
    #[error("ep = {ep} does not divide dp = {dp}")]
    EpDp { ep: u32, dp: u32 },
}

impl Plan {
    pub fn new(s: &Scenario) -> Result<Plan, PlanError> {
        let p = &s.parallel;
        for (what, v) in [
            ("tp", p.tp),
            ("pp", p.pp),
            ("dp", p.dp),
            ("vpp", p.vpp),
            ("ep", p.ep),
            ("cp", p.cp),
        ] {
            if v == 0 {
                return Err(PlanError::Zero { what });
            }
        }
        if s.cluster.gpus_per_node == 0 {
            return Err(PlanError::Zero {
                what: "gpus_per_node",
            });
        }
        // The mesh's dp axis is the expert layers' data parallelism: ep groups ep of the dense
        // layers' dp ranks (Megatron-Core's mesh), so tp*cp*ep*edp*pp = tp*cp*dp*pp. When the
        // expert layers refold a stage's ranks, the fold holds their mesh instead.
        let expert_fold = if p.expert_refold() {
            let block = p.expert_block();
            let experts = u64::from(p.etp()) * u64::from(p.ep);
            if !block.is_multiple_of(experts) || p.order.last() != Some(&Axis::Pp) {
                return Err(PlanError::EpDp { ep: p.ep, dp: p.dp });
            }
            Some(ExpertFold {
                etp: p.etp(),
                ep: p.ep,
                edp: p.edp(),
            })
        } else {
            None
        };
        let (mesh_ep, edp) = match expert_fold {
            Some(_) => (1, p.dp),
            None if p.dp.is_multiple_of(p.ep) => (p.ep, p.dp / p.ep),
            None => return Err(PlanError::EpDp { ep: p.ep, dp: p.dp }),
        };
        let product = [p.tp, p.cp, mesh_ep, edp, p.pp]
            .iter()
            .map(|&v| u64::from(v))
            .product::<u64>();
        if product > 1 << 20 {
            return Err(PlanError::TooLarge(product));
        }
        if product != u64::from(s.cluster.gpus) {
            return Err(PlanError::MeshMismatch {
                product,
                gpus: s.cluster.gpus,
            });
        }
        let denom = s.training.micro_batch * u64::from(p.dp);
        let m = s.num_microbatches();
        if denom == 0
            || !s.training.global_batch.is_multiple_of(denom)
            || m == 0
            || m > u64::from(u32::MAX)
        {
            return Err(PlanError::Batch {
                global_batch: s.training.global_batch,
                denom,
            });
        }
        // The shard group's reach along the mesh's dp axis (the dense layers' `fsdp_degree` of
        // `dp`; HSDP comes only with ep = 1).
        let fsdp_degree = p.fsdp_degree() / mesh_ep;
        if fsdp_degree == 0 || !edp.is_multiple_of(fsdp_degree) {
            return Err(PlanError::FsdpDegree {
                fsdp_degree,
                dp: edp,
            });
        }
        let world = product as u32;
        let sizes = Coords {
            tp: p.tp,
            cp: p.cp,
            ep: mesh_ep,
            dp: edp,
            pp: p.pp,
        };
        let split = partition::split(partition::SplitInput {
            layers: s.model.layers,
            pp: p.pp,
            vpp: p.vpp,
            given: p.layer_partition.as_deref(),
            account_for_embedding: p.account_for_embedding_in_pipeline_split,
            account_for_loss: p.account_for_loss_in_pipeline_split,
        })?;
        let mut chunks = layout_chunks(p.pp, p.vpp, &split.layers_per_virtual_stage);
        if p.schedule == crate::scenario::PipelineSchedule::DualPipe {
            chunks = dualpipe_chunks(chunks);
        }
        let mut plan = Plan {
            world,
            sizes,
            order: p.order,
            fsdp_degree,
            gpus_per_node: s.cluster.gpus_per_node,
            microbatches: m as u32,
            chunks,
            partition: split.rule,
            table: OnceLock::new(),
            pp_stride: 1,
            expert_fold,
        };
        for axis in p.order {
            if axis == Axis::Pp {
                break;
            }
            plan.pp_stride = plan.pp_stride.saturating_mul(plan.sizes.get(axis));
        }
        if let Some((groups, group_of)) = spare::take(plan.groups_key()) {
            let _ = plan.table.set(GroupTable { groups, group_of });
        }
        Ok(plan)
    }

    /// Hands a finished plan's groups back, so that the next plan built on this thread for
    /// the same mesh (world, axis sizes, placement order, GPUs per node) takes them instead
    /// of building them again: a layout search plans dozens of layouts in a row that differ
    /// only in micro batch, recompute or ZeRO stage, and the groups (one vector per group,
    /// over a thousand at 512 GPUs) are a tenth of planning and generation's allocations.
    /// Optional: dropping the plan instead is equally correct.
    pub fn recycle(self) {
        let key = self.groups_key();
        if let Some(t) = self.table.into_inner() {
            spare::keep(key, t.groups, t.group_of);
        }
    }

    /// Everything [`Plan::build_groups`] reads: the mesh. Plans equal in it have equal
    /// groups, nodes, stages and peers.
    #[doc(hidden)]
    pub fn groups_key(&self) -> spare::GroupsKey {
        spare::GroupsKey {
            world: self.world,
            sizes: self.sizes,
            order: self.order,
            fsdp_degree: self.fsdp_degree,
            gpus_per_node: self.gpus_per_node,
            expert_fold: self.expert_fold,
        }
    }

    /// Members of every group of `kind` (all groups of a kind have the same size).
    pub fn group_size(&self, kind: GroupKind) -> u32 {
        if kind == GroupKind::PpMirror {
            return if self.pp_mirrored() { 2 } else { 1 };
        }
        self.group_dims(kind, &Coords::default())
            .iter()
            .fold(1u32, |acc, &(n, _)| acc.saturating_mul(n))
    }

    /// The (size, rank stride) of each mesh dimension a group of `kind` varies, given each
    /// axis's stride: the dp axis is cut at `fsdp_degree` for the shard groups (its inner
    /// part) and the replica group (its outer part).
    fn group_dims(&self, kind: GroupKind, stride: &Coords) -> Vec<(u32, u32)> {
        let (f, dp) = (self.fsdp_degree.max(1), self.sizes.dp);
        match (self.expert_fold, kind) {
            (Some(fold), GroupKind::Ep) => return vec![(fold.ep, fold.etp)],
            (Some(fold), GroupKind::Etp) => return vec![(fold.etp, 1)],
            (Some(fold), GroupKind::ExpertDp) => {
                return vec![(fold.edp, fold.etp.saturating_mul(fold.ep))]
            }
            _ => {}
        }
        kind.varied_axes()
            .iter()
            .map(|&axis| match (kind, axis) {
                (GroupKind::DenseDp | GroupKind::ExpertDp, Axis::Dp) => (f, stride.dp),
                (GroupKind::DpReplica, Axis::Dp) => (dp / f, stride.dp.saturating_mul(f)),
                _ => (self.sizes.get(axis), stride.get(axis)),
            })
            .collect()
    }

    pub fn pp(&self) -> u32 {
        self.sizes.pp
    }

    /// Whether stages `s` and `pp - 1 - s` pair up into [`GroupKind::PpMirror`] groups of two:
    /// pp even (an odd pp's middle stage would have no partner).
    fn pp_mirrored(&self) -> bool {
        self.sizes.pp >= 2 && self.sizes.pp.is_multiple_of(2)
    }

    /// The rank at stage `pp - 1 - s` with `rank`'s other coordinates (`rank` itself when pp
    /// is odd): its partner in [`GroupKind::PpMirror`].
    pub fn pp_mirror(&self, rank: RankId) -> RankId {
        if !self.pp_mirrored() {
            return rank;
        }
        let stage = self.stage_of(rank);
        let other = self.sizes.pp - 1 - stage;
        let base = rank - stage * self.pp_stride;
        base + other * self.pp_stride
    }
    pub fn vpp(&self) -> u32 {
        self.chunks.first().map(|c| c.len() as u32).unwrap_or(1)
    }

    /// Layers per virtual stage, in pipeline order (`chunk * pp + stage`): the split in use
    /// (under DualPipe the `pp` stages, each held twice).
    pub fn layers_per_virtual_stage(&self) -> Vec<u32> {
        let n = self
            .chunks
            .iter()
            .flatten()
            .map(|c| c.virtual_stage as usize + 1)
            .max()
            .unwrap_or(0);
        let mut out = vec![0u32; n];
        for c in self.chunks.iter().flatten() {
            if let Some(slot) = out.get_mut(c.virtual_stage as usize) {
                *slot = c.num_layers;
            }
        }
        out
    }

    pub fn coords(&self, rank: RankId) -> Coords {
        let mut c = Coords::default();
        let mut r = rank;
        for axis in self.order {
            let n = self.sizes.get(axis);
            c.set(axis, r % n);
            r /= n;
        }
        c
    }

    pub fn rank_of(&self, c: Coords) -> RankId {
        let mut r = 0u32;
        for axis in self.order.iter().rev() {
            r = r * self.sizes.get(*axis) + c.get(*axis);
        }
        r
    }

    pub fn node_of(&self, rank: RankId) -> u32 {
        rank / self.gpus_per_node
    }

    /// The CPU core `rank` runs on when each node's ranks share `cores_per_node` cores (the host
    /// backend): an index among the cores of every node, ranks bound round-robin by local rank,
    /// as the host runtime binds them (`twin_runtime::launch::affinity`).
    pub fn core_of(&self, cores_per_node: u32, rank: RankId) -> u32 {
        let c = cores_per_node.max(1);
        let local = rank % self.gpus_per_node.max(1);
        self.node_of(rank) * c + local % c
    }

    /// The rank's pipeline stage: its pp coordinate (`coords(rank).pp`, from the pp axis's
    /// stride).
    pub fn stage_of(&self, rank: RankId) -> u32 {
        (rank / self.pp_stride.max(1)) % self.sizes.pp.max(1)
    }

    /// The rank one pipeline stage later (wrapping from the last stage to the first, which is
    /// where interleaved schedules send the next chunk's input): the same coordinates with
    /// pp one higher.
    pub fn pp_next(&self, rank: RankId) -> RankId {
        let stage = self.stage_of(rank);
        if stage + 1 < self.sizes.pp {
            rank + self.pp_stride
        } else {
            rank - stage * self.pp_stride
        }
    }

    pub fn pp_prev(&self, rank: RankId) -> RankId {
        let stage = self.stage_of(rank);
        if stage > 0 {
            rank - self.pp_stride
        } else {
            rank + (self.sizes.pp.max(1) - 1) * self.pp_stride
        }
    }

    pub fn group_of(&self, rank: RankId, kind: GroupKind) -> GroupId {
        self.table().group_of[kind.index()][rank as usize]
    }

    pub fn group(&self, id: GroupId) -> &Group {
        &self.table().groups[id as usize]
    }

    /// Every group of every kind, ids in order (built on the first call).
    pub fn groups(&self) -> &[Group] {
        &self.table().groups
    }

    fn table(&self) -> &GroupTable {
        self.table.get_or_init(|| self.build_groups())
    }

    /// `rank`'s group of `kind`, equal to `group(group_of(rank, kind))`, built alone: without
    /// the table of every group when that has not been built.
    pub fn group_containing(&self, rank: RankId, kind: GroupKind) -> Group {
        if let Some(t) = self.table.get() {
            return t.groups[t.group_of[kind.index()][rank as usize] as usize].clone();
        }
        if kind == GroupKind::PpMirror {
            return self.mirror_group(rank);
        }
        let stride = self.strides();
        let dims = self.group_dims(kind, &stride);
        // The group's smallest member: `rank` less its coordinate along each varied dimension.
        let base = dims
            .iter()
            .fold(rank, |b, &(n, st)| b - (rank / st.max(1)) % n.max(1) * st);
        self.make_group(kind, base, &group_offsets(&dims))
    }

    /// [`GroupKind::PpMirror`]'s group of `rank`: it and its [`Plan::pp_mirror`] (itself
    /// alone when pp is odd).
    fn mirror_group(&self, rank: RankId) -> Group {
        let other = self.pp_mirror(rank);
        let (low, high) = (rank.min(other), rank.max(other));
        let offsets: &[RankId] = if low == high { &[0] } else { &[0, high - low] };
        self.make_group(GroupKind::PpMirror, low, offsets)
    }

    /// Each axis's rank stride in the mesh's placement order.
    fn strides(&self) -> Coords {
        let mut stride = Coords::default();
        let mut step = 1u32;
        for axis in self.order {
            stride.set(axis, step);
            step = step.saturating_mul(self.sizes.get(axis));
        }
        stride
    }

    /// The group of `kind` whose smallest member is `base`: members `base + offsets`.
    fn make_group(&self, kind: GroupKind, base: RankId, offsets: &[RankId]) -> Group {
        let members: Vec<RankId> = offsets.iter().map(|&o| base + o).collect();
        let (mut nodes, mut max_per_node, mut run) = (0u32, 0u32, 0u32);
        let mut last_node = None;
        // members ascend, so their nodes do too: runs of one node are contiguous
        for &m in &members {
            let node = self.node_of(m);
            if last_node != Some(node) {
                nodes += 1;
                run = 0;
                last_node = Some(node);
            }
            run += 1;
            max_per_node = max_per_node.max(run);
        }
        Group {
            kind,
            members,
            nodes,
            max_per_node,
        }
    }

    /// Ranks of one stage (pp coordinate), ascending.
    pub fn ranks_of_stage(&self, stage: u32) -> Vec<RankId> {
        (0..self.world)
            .filter(|&r| self.stage_of(r) == stage)
            .collect()
    }

    /// Builds every group of every kind arithmetically. A rank's group of a kind is fixed by
    /// its coordinates on the axes the kind does not vary; its smallest member (the "base")
    /// has zero on the varied axes, and every member is the base plus one of the same offsets
    /// (the varied axes' coordinates times their strides), so the offsets are sorted once per
    /// kind and every group is a shifted copy. Group ids follow the ascending base within each
    /// kind, kinds in [`GroupKind::ALL`] order (the order a rank-by-rank scan discovers them).
    fn build_groups(&self) -> GroupTable {
        let world = self.world as usize;
        let stride = self.strides();
        // Each kind's groups partition the world into groups of the varied axes' product;
        // room for all of them at once (growing would copy the groups built so far).
        let count: usize = GroupKind::ALL
            .iter()
            .map(|&k| world / (self.group_size(k) as usize).max(1))
            .sum();
        let mut groups = Vec::with_capacity(count);
        let mut group_of = Vec::with_capacity(GroupKind::ALL.len());
        for kind in GroupKind::ALL {
            let offsets = if kind == GroupKind::PpMirror {
                Vec::new()
            } else {
                group_offsets(&self.group_dims(kind, &stride))
            };
            let mut of = vec![u32::MAX; world];
            for base in 0..self.world {
                if of[base as usize] != u32::MAX {
                    continue;
                }
                let id = groups.len() as GroupId;
                let group = if kind == GroupKind::PpMirror {
                    self.mirror_group(base)
                } else {
                    self.make_group(kind, base, &offsets)
                };
                for &m in &group.members {
                    if let Some(slot) = of.get_mut(m as usize) {
                        *slot = id;
                    }
                }
                groups.push(group);
            }
            group_of.push(of);
        }
        GroupTable { groups, group_of }
    }
}

/// Every group of a plan, and each rank's group of each kind.
#[derive(Clone, Debug)]
struct GroupTable {
    groups: Vec<Group>,
    /// `group_of[kind.index()][rank]` = the rank's group of that kind.
    group_of: Vec<Vec<GroupId>>,
}

/// The rank offsets of a group's members from its smallest, ascending, for the (size, stride)
/// of each dimension it varies.
fn group_offsets(dims: &[(u32, u32)]) -> Vec<RankId> {
    let mut offsets: Vec<RankId> = vec![0];
    for &(n, st) in dims {
        let len = offsets.len();
        for v in 1..n {
            for i in 0..len {
                offsets.push(offsets[i] + v * st);
            }
        }
    }
    offsets.sort_unstable();
    offsets
}

/// The (stage, chunk) layouts of a split given per virtual stage (`chunk * pp + stage`).
fn layout_chunks(pp: u32, vpp: u32, per_virtual: &[u32]) -> Vec<Vec<ChunkLayout>> {
    let n = pp * vpp;
    let mut first = vec![0u32; n as usize];
    for v in 1..n as usize {
        first[v] = first[v - 1] + per_virtual[v - 1];
    }
    let mut out = Vec::with_capacity(pp as usize);
    for stage in 0..pp {
        let mut row = Vec::with_capacity(vpp as usize);
        for chunk in 0..vpp {
            let v = chunk * pp + stage;
            row.push(ChunkLayout {
                stage,
                chunk,
                virtual_stage: v,
                first_layer: first[v as usize],
                num_layers: per_virtual[v as usize],
                has_embedding: v == 0,
                has_head: v == n - 1,
            });
        }
        out.push(row);
    }
    out
}

/// DualPipe's layouts: stage `s` holds model stage `s` (chunk 0, the direction fed in at
/// stage 0) and model stage `pp - 1 - s` (chunk 1, the direction fed in at stage `pp - 1`),
/// each with the virtual stage of its place along the model (deepseek-ai/DualPipe
/// examples/example_dualpipe.py: `local_modules = (full_modules[rank],
/// full_modules[pp_size - 1 - rank])`).
fn dualpipe_chunks(one_per_stage: Vec<Vec<ChunkLayout>>) -> Vec<Vec<ChunkLayout>> {
    let pp = one_per_stage.len();
    (0..pp)
        .map(|stage| {
            let mut row: Vec<ChunkLayout> = one_per_stage[stage].iter().take(1).cloned().collect();
            row.extend(
                one_per_stage[pp - 1 - stage]
                    .iter()
                    .take(1)
                    .map(|mirror| ChunkLayout {
                        stage: stage as u32,
                        chunk: 1,
                        ..mirror.clone()
                    }),
            );
            row
        })
        .collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
