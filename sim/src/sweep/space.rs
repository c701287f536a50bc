//! The layouts a sweep visits, as lists of `--set` overrides: the cartesian product of
//! `--vary KEY=VALUES` axes, or (`--search`) every way to lay the scenario's GPUs out as
//! tp x pp x dp with a virtual-pipeline depth, micro batch, recompute mode and ZeRO stage.
//! Enumeration is cheap and deterministic; whether a layout is valid is left to scenario
//! validation, which explains nothing here but counts what it rejects.

use crate::scenario::{
    moe_a2a_overlap_blocker, Fp8Recipe, Offload, PipelineSchedule, Precision, Recompute, Scenario,
};

fn u32_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// One `--vary` axis: a scenario key and the values it takes (TOML value syntax).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--vary {text}: {message}; allowed: KEY=V1,V2,... or KEY=A..B (integers A to B inclusive), e.g. parallel.tp=1,2,4,8 or parallel.pp=1..16")]
pub struct AxisError {
    pub text: String,
    pub message: String,
}

/// Most values one `A..B` range may expand to.
pub const MAX_RANGE: u64 = 4096;

/// Parses `KEY=V1,V2,...` or `KEY=A..B`.
pub fn parse_axis(text: &str) -> Result<Axis, AxisError> {
    let fail = |message: &str| AxisError {
        text: text.to_string(),
        message: message.to_string(),
    };
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| fail("expected KEY=VALUES"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(fail("empty key"));
    }
    let values = values.trim();
    let list: Vec<String> = match values.split_once("..") {
        Some((a, b)) if !values.contains(',') => {
            let (a, b) = match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
                (Ok(a), Ok(b)) => (a, b),
                _ => return Err(fail("a range needs two non-negative integers")),
            };
            if a > b || b - a >= MAX_RANGE {
                return Err(fail(
                    "a range goes from a smaller to a larger integer, at most 4096 values",
                ));
            }
            (a..=b).map(|v| v.to_string()).collect()
        }
        _ => values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    };
    if list.is_empty() {
        return Err(fail("no values"));
    }
    Ok(Axis {
        key: key.to_string(),
        values: list,
    })
}

/// Every combination of the axes' values (the first axis varies slowest), as overrides.
pub fn product(axes: &[Axis]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for axis in axes {
        let mut next = Vec::with_capacity(out.len() * axis.values.len());
        for prefix in &out {
            for v in &axis.values {
                let mut o = prefix.clone();
                o.push(format!("{}={}", axis.key, v));
                next.push(o);
            }
        }
        out = next;
    }
    out
}

/// When a layout sets tp, pp or cp but not dp, appends `parallel.dp=` the GPU count over
/// tp*pp*cp (values the layout does not set come from `base`), so that `--vary
/// parallel.pp=1..16` alone moves GPUs between pipeline and data parallelism. A layout whose
/// product does not divide the GPU count is left alone (validation then rejects it).
pub fn derive_dp(base: &Scenario, layouts: &mut [Vec<String>]) {
    let p = &base.parallel;
    for l in layouts.iter_mut() {
        let get = |key: &str| -> Option<Option<u64>> {
            l.iter()
                .rev()
                .find_map(|o| o.strip_prefix(&format!("parallel.{key}=")))
                .map(|v| v.trim().parse::<u64>().ok())
        };
        if get("dp").is_some() {
            continue;
        }
        let axes = [("tp", p.tp), ("pp", p.pp), ("cp", p.cp)];
        if axes.iter().all(|(k, _)| get(k).is_none()) {
            continue;
        }
        let mut product = 1u64;
        for (key, default) in axes {
            match get(key) {
                Some(Some(v)) => product = product.saturating_mul(v),
                Some(None) => product = 0,
                None => product = product.saturating_mul(u64::from(default)),
            }
        }
        let gpus = u64::from(base.cluster.gpus);
        if product > 0 && gpus % product == 0 {
            l.push(format!("parallel.dp={}", gpus / product));
        }
    }
}

/// Whether `layers` split over `pp * vpp` virtual stages by the rule validation applies to a
/// search's layouts (the automatic split: a search drops a base's own, see
/// [`super::SweepPlan::new`]), so that no layout is generated only to be refused for it.
fn layers_split(layers: u32, pp: u32, vpp: u32) -> bool {
    crate::plan::partition::automatic(layers, pp, vpp).is_ok()
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// What `--search` varies, with its defaults. Each axis lists the values tried; an axis
/// that cannot apply to a layout (tensor-parallel overlap without tp, the data-parallel
/// overlaps without dp, FP8 on a GPU without an FP8 rate) is not varied there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchSpace {
    pub micro_batches: Vec<u64>,
    pub recompute: Vec<&'static str>,
    pub zero: Vec<u8>,
    /// Virtual pipeline depths tried (> 1 uses the interleaved-1f1b schedule).
    pub vpp: Vec<u32>,
    /// Context-parallel degrees tried (each needs `seq_len` divisible by `2 * cp`).
    pub cp: Vec<u32>,
    /// Largest tensor-parallel degree; `None`: the GPUs of one node.
    pub max_tp: Option<u32>,
    /// Schedules of layouts with one chunk per stage and pp > 1 (DualPipe only on an even pp,
    /// with an even count of at least `2 * pp` micro batches).
    pub schedules: Vec<PipelineSchedule>,
    /// FP8 recipes tried beside the base precision, on GPUs with an FP8 rate above bf16.
    pub fp8_recipes: Vec<Fp8Recipe>,
    /// `tp_comm_overlap` values, where tp > 1 and the framework can overlap.
    pub tp_comm_overlap: Vec<bool>,
    /// `overlap_grad_reduce` and `overlap_param_gather` (set together), where dp > 1.
    pub dp_overlap: Vec<bool>,
    /// `offload` values (`params` only with ZeRO 3).
    pub offload: Vec<&'static str>,
    /// HSDP: shard groups spanning this many nodes are tried beside plain FSDP under ZeRO 3.
    pub hsdp_nodes: Vec<u32>,
}

impl Default for SearchSpace {
    fn default() -> Self {
        SearchSpace {
            micro_batches: vec![1, 2, 4, 8],
            recompute: vec!["none", "selective", "full"],
            zero: vec![0, 1, 2, 3],
            vpp: vec![1, 2, 4, 8],
            cp: vec![1, 2, 4, 8, 16],
            max_tp: None,
            schedules: vec![
                PipelineSchedule::OneFOneB,
                PipelineSchedule::ZeroBubble,
                PipelineSchedule::DualPipe,
            ],
            fp8_recipes: vec![
                Fp8Recipe::Delayed,
                Fp8Recipe::Tensorwise,
                Fp8Recipe::Rowwise,
                Fp8Recipe::Mxfp8,
            ],
            tp_comm_overlap: vec![false, true],
            dp_overlap: vec![true, false],
            offload: vec!["none", "optimizer"],
            hsdp_nodes: vec![1, 4],
        }
    }
}

impl SearchSpace {
    /// The space of the earlier search: tp x pp x dp with vpp, micro batch, recompute and
    /// ZeRO stage, everything else as the base scenario has it.
    pub fn layouts_only() -> SearchSpace {
        SearchSpace {
            cp: Vec::new(),
            schedules: Vec::new(),
            fp8_recipes: Vec::new(),
            tp_comm_overlap: Vec::new(),
            dp_overlap: Vec::new(),
            offload: Vec::new(),
            hsdp_nodes: Vec::new(),
            ..SearchSpace::default()
        }
    }
}

/// One layout of a search, compact (a search holds hundreds of thousands); its `--set`
/// overrides come from [`Candidate::overrides`]. `None` keeps the base scenario's setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    pub cp: u32,
    /// (ep, etp) for a mixture of experts.
    pub experts: Option<(u32, u32)>,
    pub vpp: u32,
    pub schedule: PipelineSchedule,
    pub micro_batch: u64,
    pub recompute: &'static str,
    pub zero: u8,
    /// HSDP shard-group size (written when the base or the layout uses HSDP).
    pub fsdp_degree: Option<u32>,
    /// `Some(recipe)`: FP8 with that recipe; `None`: the base precision.
    pub fp8: Option<Fp8Recipe>,
    pub tp_comm_overlap: Option<bool>,
    pub dp_overlap: Option<bool>,
    pub offload: Option<&'static str>,
    pub moe_a2a_overlap: Option<bool>,
    /// `Some(false)` where the base overlaps pipeline transfers (`overlap_p2p_comm`) and this
    /// layout's schedule is not interleaved, which Megatron-Core refuses it for.
    pub overlap_p2p_comm: Option<bool>,
}

impl Candidate {
    /// The `--set` overrides that make this layout from the base scenario.
    pub fn overrides(&self) -> Vec<String> {
        let mut o = vec![
            format!("parallel.tp={}", self.tp),
            format!("parallel.pp={}", self.pp),
            format!("parallel.dp={}", self.dp),
            format!("parallel.vpp={}", self.vpp),
            format!("parallel.schedule=\"{}\"", self.schedule.as_str()),
            format!("parallel.zero={}", self.zero),
            "parallel.fsdp=false".to_string(),
            format!("parallel.sequence_parallel={}", self.tp > 1),
            format!("training.micro_batch={}", self.micro_batch),
            format!("training.recompute=\"{}\"", self.recompute),
        ];
        if self.cp != 1 || self.experts.is_none() {
            o.push(format!("parallel.cp={}", self.cp));
        }
        if let Some((ep, etp)) = self.experts {
            o.push(format!("parallel.ep={ep}"));
            o.push(format!("parallel.etp={etp}"));
        }
        if let Some(d) = self.fsdp_degree {
            o.push(format!("parallel.fsdp_degree={d}"));
        }
        if let Some(r) = self.fp8 {
            o.push("training.precision=\"fp8\"".to_string());
            o.push(format!("training.fp8_recipe=\"{}\"", r.as_str()));
        }
        if let Some(on) = self.tp_comm_overlap {
            o.push(format!("training.tp_comm_overlap={on}"));
        }
        if let Some(on) = self.dp_overlap {
            o.push(format!("training.overlap_grad_reduce={on}"));
            o.push(format!("training.overlap_param_gather={on}"));
        }
        if let Some(mode) = self.offload {
            o.push(format!("training.offload=\"{mode}\""));
        }
        if let Some(on) = self.overlap_p2p_comm {
            o.push(format!("training.overlap_p2p_comm={on}"));
        }
        if let Some(on) = self.moe_a2a_overlap {
            o.push(format!("training.moe_a2a_overlap={on}"));
        }
        o
    }

    /// `base` with this layout applied, for the checks made while enumerating (the
    /// framework's limits, the all-to-all overlap's conditions); validation proper happens
    /// when the overrides are resolved.
    fn apply(&self, candidate: &mut Scenario) {
        let c = &mut candidate.parallel;
        (c.tp, c.pp, c.dp, c.cp, c.vpp) = (self.tp, self.pp, self.dp, self.cp, self.vpp);
        if let Some((ep, etp)) = self.experts {
            (c.ep, c.etp) = (ep, Some(etp));
        }
        (c.schedule, c.zero, c.fsdp) = (self.schedule, self.zero, false);
        c.sequence_parallel = self.tp > 1;
        if self.fsdp_degree.is_some() {
            c.fsdp_degree = self.fsdp_degree;
        }
        let t = &mut candidate.training;
        t.micro_batch = self.micro_batch;
        t.recompute = recompute_of(self.recompute);
        if let Some(r) = self.fp8 {
            t.precision = Precision::Fp8;
            t.fp8_recipe = r;
        }
        if let Some(on) = self.tp_comm_overlap {
            t.tp_comm_overlap = on;
        }
        if let Some(on) = self.dp_overlap {
            (t.overlap_grad_reduce, t.overlap_param_gather) = (on, on);
        }
        if let Some(mode) = self.offload {
            t.offload = match mode {
                "optimizer" => Offload::Optimizer,
                "params" => Offload::Params,
                _ => Offload::None,
            };
        }
        if let Some(on) = self.moe_a2a_overlap {
            t.moe_a2a_overlap = on;
        }
        if let Some(on) = self.overlap_p2p_comm {
            t.overlap_p2p_comm = on;
        }
    }
}

/// Every layout of `base`'s GPU count in `space`, as `--set` overrides ([`candidates`]).
pub fn search(base: &Scenario, space: &SearchSpace) -> Vec<Vec<String>> {
    candidates(base, space)
        .iter()
        .map(Candidate::overrides)
        .collect()
}

/// Every layout of `base`'s GPU count in `space`: each cp, tp (dividing the heads, at most
/// `max_tp`), pp and dp = the rest; for a mixture of experts each expert layout
/// ([`expert_layouts`]); each vpp (> 1 interleaved) or, with one chunk per stage, each
/// schedule; each micro batch, recompute mode, ZeRO stage (with HSDP degrees under ZeRO 3),
/// precision (the base's, and FP8 with each recipe where the GPU has an FP8 rate),
/// tensor-parallel overlap, data-parallel overlap and offload; for a mixture of experts then
/// `moe_a2a_overlap` off, and on where validation accepts it ([`moe_a2a_overlap_blocker`]).
/// Combinations that cannot work for arithmetic reasons (a product not dividing the GPUs, more
/// pipeline chunks than layers or layers that do not split over them, a micro batch that does
/// not divide the per-replica batch) and
/// layouts `base`'s framework cannot launch (its file's `cannot_run` limits) are not
/// generated; the rest are left to scenario validation.
pub fn candidates(base: &Scenario, space: &SearchSpace) -> Vec<Candidate> {
    let p = &base.parallel;
    let m = &base.model;
    let t = &base.training;
    let gpus = u64::from(base.cluster.gpus);
    let fw = &t.framework;
    let limits = !fw.cannot_run.is_empty();
    let moe = base.model.moe.is_some();
    let node = u64::from(base.cluster.gpus_per_node.max(1));
    let max_tp = space.max_tp.map_or(node, u64::from);
    let cps: Vec<u64> = if space.cp.is_empty() {
        vec![u64::from(p.cp)]
    } else {
        space.cp.iter().map(|&c| u64::from(c)).collect()
    };
    let peak = &base.cluster.gpu.peak;
    let fp8_rate = peak.fp8_flops_per_s > peak.bf16_flops_per_s;
    let mut precisions: Vec<Option<Fp8Recipe>> = vec![None];
    // A recipe the framework refuses whatever the layout (a limit on the recipe alone:
    // Transformer Engine has no rowwise scaling, torchao no delayed), or the GPU cannot run
    // (MXFP8 before Blackwell), is not tried at all.
    let recipe_refused = |r: Fp8Recipe| {
        if r.too_old_on(&base.cluster.gpu.name).is_some() {
            return true;
        }
        let mut probe = base.clone();
        probe.training.precision = Precision::Fp8;
        probe.training.fp8_recipe = r;
        fw.cannot_run.iter().any(|l| {
            l.when
                .iter()
                .all(|c| matches!(c, crate::scenario::framework::Cond::Fp8Recipe(_)))
                && l.hits(&probe)
        })
    };
    if fp8_rate && t.precision != Precision::Fp32 {
        precisions.extend(
            space
                .fp8_recipes
                .iter()
                .filter(|r| t.precision != Precision::Fp8 || **r != t.fp8_recipe)
                .filter(|r| !recipe_refused(**r))
                .map(|&r| Some(r)),
        );
    }
    let or_base = |values: &[bool]| -> Vec<Option<bool>> {
        if values.is_empty() {
            vec![None]
        } else {
            values.iter().map(|&v| Some(v)).collect()
        }
    };
    let offloads: Vec<Option<&'static str>> = if space.offload.is_empty() {
        vec![None]
    } else {
        space.offload.iter().map(|&o| Some(o)).collect()
    };
    let mut candidate = base.clone();
    let mut out = Vec::new();
    for cp in cps {
        if cp == 0 || gpus % cp != 0 || (cp > 1 && !m.seq_len.is_multiple_of(2 * cp)) {
            continue;
        }
        let rest = gpus / cp;
        for tp in divisors(rest) {
            if tp > max_tp || u64::from(m.heads) % tp != 0 {
                continue;
            }
            // Written as `false` where it cannot apply, so a base's own does not carry over.
            let tp_overlaps = if tp > 1 && fw.overlaps.tp_comm_overlap {
                or_base(&space.tp_comm_overlap)
            } else {
                vec![(!space.tp_comm_overlap.is_empty()).then_some(false)]
            };
            for pp in divisors(rest / tp) {
                let dp = rest / tp / pp;
                let dp_overlaps = if dp > 1 {
                    or_base(&space.dp_overlap)
                } else {
                    vec![None]
                };
                for (ep, etp) in expert_layouts(base, tp, dp, cp) {
                    for &vpp in &space.vpp {
                        let chunks = pp * u64::from(vpp);
                        if chunks > u64::from(m.layers)
                            || (vpp > 1 && pp == 1)
                            || !layers_split(m.layers, u32_of(pp), vpp)
                        {
                            continue;
                        }
                        let schedules: Vec<PipelineSchedule> = if vpp > 1 {
                            vec![PipelineSchedule::Interleaved1F1B]
                        } else if pp == 1 || space.schedules.is_empty() {
                            vec![match p.schedule {
                                PipelineSchedule::Interleaved1F1B => PipelineSchedule::OneFOneB,
                                other => other,
                            }]
                        } else {
                            space.schedules.clone()
                        };
                        for &schedule in &schedules {
                            for &mb in &space.micro_batches {
                                if !t.global_batch.is_multiple_of(mb * dp)
                                    || !dualpipe_fits(schedule, t.global_batch / (mb * dp), pp)
                                {
                                    continue;
                                }
                                for &rc in &space.recompute {
                                    // Precision and tensor-parallel overlap change what a
                                    // layer range costs; the loops inside them (ZeRO, HSDP,
                                    // data-parallel overlap, offload) do not, so consecutive
                                    // layouts share their sized layers (`sizes`).
                                    for &fp8 in &precisions {
                                        for &tpo in &tp_overlaps {
                                            for &zero in &space.zero {
                                                let fsdp_degrees = hsdp_degrees(
                                                    base,
                                                    space,
                                                    zero,
                                                    (dp, tp * cp),
                                                    moe.then_some((ep, etp, tp)),
                                                );
                                                // Sharded parameters reduce per pass and
                                                // gather per layer whatever the two flags say
                                                // (`schedule::bound::overlap_buckets`, the ZeRO-1
                                                // gather of `emit::dp`): one layout, not two.
                                                let dp_overlaps_here: &[Option<bool>] =
                                                    if zero >= 3 { &[None] } else { &dp_overlaps };
                                                for &fsdp_degree in &fsdp_degrees {
                                                    for &dpo in dp_overlaps_here {
                                                        for &off in &offloads {
                                                            let mut c = Candidate {
                                                                tp: u32_of(tp),
                                                                pp: u32_of(pp),
                                                                dp: u32_of(dp),
                                                                cp: u32_of(cp),
                                                                experts: moe.then_some((ep, etp)),
                                                                vpp,
                                                                schedule,
                                                                micro_batch: mb,
                                                                recompute: rc,
                                                                zero,
                                                                fsdp_degree,
                                                                fp8,
                                                                tp_comm_overlap: tpo,
                                                                dp_overlap: dpo,
                                                                offload: off,
                                                                moe_a2a_overlap: None,
                                                                overlap_p2p_comm: (t
                                                                    .overlap_p2p_comm
                                                                    && schedule
                                                                        != PipelineSchedule::Interleaved1F1B)
                                                                    .then_some(false),
                                                            };
                                                            if limits || moe {
                                                                candidate.clone_from(base);
                                                                c.apply(&mut candidate);
                                                            }
                                                            if limits
                                                                && fw.refusal(&candidate).is_some()
                                                            {
                                                                continue;
                                                            }
                                                            if !moe {
                                                                out.push(c);
                                                                continue;
                                                            }
                                                            // Both settings, each written out so
                                                            // that a base's own does not carry over.
                                                            let overlap =
                                                                moe_a2a_overlap_blocker(&candidate)
                                                                    .is_none();
                                                            for on in [false, true] {
                                                                if on && !overlap {
                                                                    continue;
                                                                }
                                                                c.moe_a2a_overlap = Some(on);
                                                                out.push(c);
                                                            }
                                                        }
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether `m` micro batches per pipeline of `pp` stages suit `schedule`: DualPipe needs an
/// even pp and an even count of at least `2 pp` (deepseek-ai/DualPipe's asserts).
fn dualpipe_fits(schedule: PipelineSchedule, m: u64, pp: u64) -> bool {
    schedule != PipelineSchedule::DualPipe
        || (pp.is_multiple_of(2) && m.is_multiple_of(2) && m >= 2 * pp)
}

/// The HSDP shard-group sizes tried for one layout: `dp` (plain FSDP, written only when the
/// base uses HSDP) and, under ZeRO 3, groups spanning `space.hsdp_nodes` nodes where they
/// divide dp and are smaller than it; `None` (not written) for other ZeRO stages. `experts`:
/// a mixture of experts' (ep, etp, tp).
fn hsdp_degrees(
    base: &Scenario,
    space: &SearchSpace,
    zero: u8,
    (dp, tp_cp): (u64, u64),
    experts: Option<(u32, u32, u64)>,
) -> Vec<Option<u32>> {
    let plain = base.parallel.fsdp_degree.map(|_| u32_of(dp));
    // HSDP of a mixture of experts is modelled only without expert parallelism and with the
    // experts split like the MLP (validation refuses the rest).
    let experts_hsdp =
        experts.is_none_or(|(ep, etp, tp)| ep == 1 && (tp == 1 || u64::from(etp) == tp));
    if zero < 3 || !experts_hsdp {
        return vec![plain];
    }
    let node = u64::from(base.cluster.gpus_per_node.max(1));
    let mut out = vec![plain];
    for &nodes in &space.hsdp_nodes {
        let gpus = node * u64::from(nodes);
        if gpus % tp_cp != 0 {
            continue;
        }
        let d = gpus / tp_cp;
        if d > 1 && d < dp && dp.is_multiple_of(d) && !out.contains(&Some(u32_of(d))) {
            out.push(Some(u32_of(d)));
        }
    }
    out
}

/// A recompute name of the search space as the scenario's value (a name that is none of
/// these is left to validation, which refuses it; it counts as no recomputation here).
fn recompute_of(name: &str) -> Recompute {
    match name {
        "full" => Recompute::Full,
        "selective" => Recompute::Selective,
        _ => Recompute::None,
    }
}

/// The expert layouts `--search` tries for one tp, dp and cp, as (ep, etp): the base's ep for
/// a dense model (it stays 1); for a mixture of experts every ep dividing both the experts and
/// dp (`cp * dp` under context parallelism, where the expert layers refold the stage's ranks)
/// with the experts split like the MLP (etp = tp), and, under tensor parallelism, every ep
/// dividing both `tp * cp * dp` and the experts with whole experts (etp = 1, which refolds the
/// stage's ranks).
fn expert_layouts(base: &Scenario, tp: u64, dp: u64, cp: u64) -> Vec<(u32, u32)> {
    let Some(moe) = &base.model.moe else {
        return vec![(base.parallel.ep, u32_of(tp))];
    };
    let experts = u64::from(moe.experts);
    let mut out: Vec<(u32, u32)> = divisors(cp * dp)
        .into_iter()
        .filter(|ep| experts.is_multiple_of(*ep))
        .map(|ep| (u32_of(ep), u32_of(tp)))
        .collect();
    if tp > 1 {
        out.extend(
            divisors(tp * cp * dp)
                .into_iter()
                .filter(|ep| experts.is_multiple_of(*ep))
                .map(|ep| (u32_of(ep), 1)),
        );
    }
    out
}

/// A shard `i/n` (0-based): the layouts whose index is `i` modulo `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard {0}: expected I/N with 0 <= I < N, e.g. 0/4 .. 3/4")]
pub struct ShardError(pub String);

impl Shard {
    pub fn parse(text: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError(text.to_string());
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = match (i.trim().parse::<u32>(), n.trim().parse::<u32>()) {
            (Ok(i), Ok(n)) if n > 0 && i < n => (i, n),
            _ => return Err(bad()),
        };
        Ok(Shard { index, count })
    }

    /// Whether the layout at `position` belongs to this shard.
    pub fn holds(&self, position: usize) -> bool {
        position % self.count as usize == self.index as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::small_scenario;

    /// The search generates only pipelines its layers split over (validation's rule, the
    /// automatic split): DeepSeek-V3's 61 layers split over 8 stages but not over 8 stages
    /// of 4 virtual ones; Llama 3.1 405B's 126 over 16 stages, and over 8 of 8 virtual ones.
    #[test]
    fn only_pipelines_the_layers_split_over_are_generated() {
        assert!(layers_split(61, 8, 1));
        assert!(!layers_split(61, 8, 4));
        assert!(layers_split(126, 16, 1));
        assert!(layers_split(126, 8, 8));
        assert!(!layers_split(127, 8, 2));
        let mut base = small_scenario(2, 2, 4, 8);
        base.model.layers = 61;
        let vpps: Vec<u32> = candidates(&base, &SearchSpace::layouts_only())
            .iter()
            .filter(|c| c.pp > 1)
            .map(|c| c.vpp)
            .collect();
        assert!(!vpps.is_empty() && vpps.iter().all(|&v| v == 1), "{vpps:?}");
    }

    /// HSDP shard groups are tried for a mixture of experts only where validation models
    /// them: without expert parallelism, and with the experts split like the MLP (etp = tp)
    /// or no tensor parallelism. A dense model gets them whatever its tp.
    #[test]
    fn hsdp_is_tried_for_experts_only_where_it_is_modelled() {
        let text = "[model]\nlayers = 4\nhidden = 256\nheads = 8\nseq_len = 128\nvocab = 1024\n\
                    [cluster]\ngpu = \"h100-sxm-80gb\"\ngpus = 64\nnode = \"dgx-h100\"\n\
                    [training]\nglobal_batch = 64\n";
        let base = crate::setup::parse_str(text, "t.toml", &[]).unwrap();
        let space = SearchSpace::default();
        let tried = |experts| hsdp_degrees(&base, &space, 3, (32, 2), experts);
        let plain = vec![None];
        let hsdp = vec![None, Some(4), Some(16)];
        assert_eq!(tried(None), hsdp);
        assert_eq!(tried(Some((1, 2, 2))), hsdp);
        assert_eq!(tried(Some((1, 1, 1))), hsdp);
        assert_eq!(tried(Some((2, 2, 2))), plain);
        assert_eq!(tried(Some((1, 1, 2))), plain);
        assert_eq!(hsdp_degrees(&base, &space, 1, (32, 2), None), plain);
    }

    #[test]
    fn axes_parse_lists_and_ranges() {
        assert_eq!(
            parse_axis("parallel.tp=1,2,4").unwrap().values,
            vec!["1", "2", "4"]
        );
        assert_eq!(parse_axis("parallel.pp=1..4").unwrap().values.len(), 4);
        assert_eq!(
            parse_axis("training.recompute=none,\"full\"")
                .unwrap()
                .values,
            vec!["none", "\"full\""]
        );
        for bad in ["parallel.tp", "=1", "parallel.pp=4..1", "x=", "x=1..99999"] {
            assert!(parse_axis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn product_is_cartesian_first_axis_slowest() {
        let a = parse_axis("a=1,2").unwrap();
        let b = parse_axis("b=x,y,z").unwrap();
        let p = product(&[a, b]);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0], vec!["a=1", "b=x"]);
        assert_eq!(p[1], vec!["a=1", "b=y"]);
        assert_eq!(p[5], vec!["a=2", "b=z"]);
        assert_eq!(product(&[]), vec![Vec::<String>::new()]);
    }

    #[test]
    fn dp_follows_the_other_axes_unless_varied() {
        let s = small_scenario(2, 2, 4, 8); // 16 GPUs
        let mut l = product(&[
            parse_axis("parallel.pp=1,2,3").unwrap(),
            parse_axis("training.micro_batch=1").unwrap(),
        ]);
        derive_dp(&s, &mut l);
        assert_eq!(l[0].last().unwrap(), "parallel.dp=8"); // 16 / (tp 2 * pp 1)
        assert_eq!(l[1].last().unwrap(), "parallel.dp=4");
        assert_eq!(l[2].last().unwrap(), "training.micro_batch=1"); // 3 does not divide
        let mut given = product(&[
            parse_axis("parallel.dp=2").unwrap(),
            parse_axis("parallel.tp=1").unwrap(),
        ]);
        derive_dp(&s, &mut given);
        assert_eq!(given[0].len(), 2, "an explicit dp is kept");
        let mut other = product(&[parse_axis("training.micro_batch=1,2").unwrap()]);
        derive_dp(&s, &mut other);
        assert!(other.iter().all(|o| o.len() == 1), "no mesh axis varied");
    }

    #[test]
    fn search_layouts_cover_the_gpus_exactly() {
        let s = small_scenario(2, 2, 4, 8);
        let space = SearchSpace {
            hsdp_nodes: Vec::new(),
            ..SearchSpace::default()
        };
        let layouts = search(&s, &space);
        assert!(!layouts.is_empty());
        for l in &layouts {
            let get = |k: &str| -> u64 {
                l.iter()
                    .find_map(|o| o.strip_prefix(&format!("parallel.{k}=")))
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            assert_eq!(get("tp") * get("pp") * get("dp") * get("cp"), 16);
            assert!(get("pp") * get("vpp") <= u64::from(s.model.layers));
        }
        let mut sorted = layouts.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), layouts.len(), "no duplicates");
        assert!(layouts.iter().flatten().all(|o| !o.contains("fsdp_degree")));
    }

    /// From an HSDP base the search proposes plain FSDP: fsdp_degree = each layout's dp.
    #[test]
    fn search_from_hsdp_sets_fsdp_degree_to_dp() {
        let mut s = small_scenario(2, 2, 4, 8);
        s.parallel.fsdp = true;
        s.parallel.zero = 3;
        s.parallel.fsdp_degree = Some(2);
        let layouts = search(&s, &SearchSpace::layouts_only());
        assert!(!layouts.is_empty());
        for l in &layouts {
            let dp = l
                .iter()
                .find_map(|o| o.strip_prefix("parallel.dp="))
                .unwrap();
            assert_eq!(l.last().unwrap(), &format!("parallel.fsdp_degree={dp}"));
        }
    }

    /// A mixture of experts: the search varies ep (dividing dp and the experts) with the experts
    /// split like the MLP, and, under tensor parallelism, ep over tp*dp with whole experts.
    #[test]
    fn search_varies_expert_parallelism_for_a_mixture_of_experts() {
        let mut s = small_scenario(2, 1, 8, 8);
        let f = s.model.ffn_hidden;
        s.model.moe = Some(crate::scenario::Moe::uniform(8, 2, 1, f));
        let layouts = search(&s, &SearchSpace::default());
        let get = |l: &Vec<String>, k: &str| -> u64 {
            l.iter()
                .find_map(|o| o.strip_prefix(&format!("parallel.{k}=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        let mut seen = std::collections::BTreeSet::new();
        for l in &layouts {
            let (tp, dp, ep, etp) = (get(l, "tp"), get(l, "dp"), get(l, "ep"), get(l, "etp"));
            // A mixture-of-experts layout names cp only when it is not 1.
            let cp = l
                .iter()
                .find_map(|o| o.strip_prefix("parallel.cp="))
                .map_or(1, |v| v.parse().unwrap());
            assert_eq!(8 % ep, 0, "{l:?}");
            if etp == tp {
                // ep groups dp ranks, or, under cp, the stage's cp and dp ranks.
                assert_eq!((cp * dp) % ep, 0, "{l:?}");
            } else {
                assert_eq!((etp, (tp * cp * dp) % ep), (1, 0), "{l:?}");
            }
            seen.insert((tp, cp, ep, etp));
        }
        assert!(seen.contains(&(2, 1, 4, 2)));
        assert!(seen.contains(&(2, 1, 8, 1)));
        assert!(seen.contains(&(1, 1, 8, 1)));
        // Under context parallelism: ep over the cp and dp ranks (dp 4 alone would not hold
        // ep 8), and whole experts over tp, cp and dp.
        assert!(seen.contains(&(2, 2, 8, 2)));
        assert!(seen.contains(&(2, 2, 8, 1)));
        // A dense model's layouts do not name ep, etp or moe_a2a_overlap.
        let dense = search(&small_scenario(2, 1, 8, 8), &SearchSpace::default());
        assert!(dense.iter().flatten().all(|o| !o.starts_with("parallel.ep")
            && !o.starts_with("parallel.etp")
            && !o.starts_with("training.moe_a2a_overlap")));
    }

    /// DualPipe is proposed with vpp 1 on every even pipeline, never on an odd one or
    /// beside vpp > 1; for a mixture of experts with the all-to-all overlap too.
    #[test]
    fn search_proposes_dualpipe_on_even_pipelines() {
        let s = small_scenario(2, 2, 4, 8);
        let layouts = search(&s, &SearchSpace::default());
        let has = |l: &Vec<String>, o: &str| l.iter().any(|x| x == o);
        let dual: Vec<&Vec<String>> = layouts
            .iter()
            .filter(|l| has(l, "parallel.schedule=\"dualpipe\""))
            .collect();
        assert!(!dual.is_empty());
        for l in &dual {
            assert!(has(l, "parallel.vpp=1"), "{l:?}");
            let pp: u64 = l
                .iter()
                .find_map(|o| o.strip_prefix("parallel.pp="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(pp >= 2 && pp.is_multiple_of(2), "{l:?}");
        }
        let mut moe = small_scenario(1, 2, 4, 8);
        let f = moe.model.ffn_hidden;
        moe.model.moe = Some(crate::scenario::Moe::uniform(8, 2, 1, f));
        let layouts = search(&moe, &SearchSpace::default());
        assert!(layouts
            .iter()
            .any(|l| has(l, "parallel.schedule=\"dualpipe\"")
                && has(l, "parallel.ep=2")
                && has(l, "training.moe_a2a_overlap=true")));
    }

    #[test]
    fn shards_partition_the_layouts() {
        let shards: Vec<Shard> = (0..3)
            .map(|i| Shard::parse(&format!("{i}/3")).unwrap())
            .collect();
        for pos in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.holds(pos)).count(), 1);
        }
        for bad in ["3/3", "1", "a/b", "0/0"] {
            assert!(Shard::parse(bad).is_err());
        }
    }
}
