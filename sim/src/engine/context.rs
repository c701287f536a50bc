//! What a run reads but never changes: the compiled programs, resolved peers and concrete
//! groups per rank, and the inputs. Built (and the schedule checked against the plan) once
//! before the event loop starts.

use super::collapse::{Collapse, PEERS};
use super::compile::{compile, CProgram, GROUP_KINDS};
use super::{SimError, SimOptions};
use crate::cost::CostModel;
use crate::plan::{GroupKind, GroupsKey, Plan};
use crate::schedule::Schedule;
use crate::topology::Network;
use std::cell::RefCell;

/// Everything that does not change during a run.
pub(crate) struct Ctx<'a> {
    pub plan: &'a Plan,
    pub schedule: &'a Schedule,
    pub cost: &'a dyn CostModel,
    pub opts: &'a SimOptions,
    /// The flow-level network, when transfers are flows (`None`: alpha-beta per call).
    pub net: Option<&'a Network>,
    pub progs: Vec<CProgram>,
    pub prog_of: &'a [u32],
    /// Resolved peers per rank, indexed by `compile::peer_index`: the rank a p2p op is
    /// matched with (in collapsed mode, the real peer's representative).
    pub peers: Vec<[u32; 4]>,
    /// Collapsed mode: the representatives and their tables (see [`super::collapse`]).
    pub collapse: Option<Collapse>,
    /// `group_of[kind * world + rank]`: the concrete group of each kind.
    pub group_of: Vec<u32>,
    pub world: usize,
    /// The ranks the engine runs, ascending: every rank, or the representatives. The run's
    /// per-rank state is indexed by position in this list (the rank's *slot*), so a collapsed
    /// run holds state for its few representatives only, not for the whole world.
    pub active: Vec<u32>,
    /// What `group_of`, `peers`, `collapse` and `active` were computed from, when they may
    /// be kept for the next run of the same mesh (see [`MeshTables`]).
    mesh_key: Option<MeshKey>,
}

impl Drop for Ctx<'_> {
    /// The compiled programs' buffers go back to this thread's spares for the next run, and
    /// the mesh tables to this thread's slot for the next run of the same mesh.
    fn drop(&mut self) {
        super::compile::recycle(std::mem::take(&mut self.progs));
        if let Some(key) = self.mesh_key.take() {
            let tables = MeshTables {
                key,
                group_of: std::mem::take(&mut self.group_of),
                peers: std::mem::take(&mut self.peers),
                collapse: self.collapse.take(),
                active: std::mem::take(&mut self.active),
            };
            let _ = SPARE_MESH.try_with(|m| {
                if let Ok(mut m) = m.try_borrow_mut() {
                    *m = Some(tables);
                }
            });
        }
    }
}

/// Everything the tables of [`MeshTables`] are computed from, for a run without a flow
/// network: the plan's mesh (groups, nodes, stages and peers follow from it), the
/// rank-to-program map, and what of the options and cost model decides the collapse.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MeshKey {
    mesh: GroupsKey,
    program_of: Vec<u32>,
    collapse: bool,
    shared_cores: bool,
    rank_invariant: bool,
}

/// A run's per-rank tables that depend only on its [`MeshKey`]. A sweep runs dozens of
/// layouts of one mesh in a row (micro batch, recompute and ZeRO stage vary innermost), so
/// the last run's tables are kept per thread and taken by the next run with an equal key
/// instead of being computed again (the collapse check alone visits every rank and group).
struct MeshTables {
    key: MeshKey,
    group_of: Vec<u32>,
    peers: Vec<[u32; 4]>,
    collapse: Option<Collapse>,
    active: Vec<u32>,
}

thread_local! {
    static SPARE_MESH: RefCell<Option<MeshTables>> = const { RefCell::new(None) };
}

/// This thread's kept tables if they were computed for `key`.
fn spare_tables(key: &MeshKey) -> Option<MeshTables> {
    SPARE_MESH
        .try_with(|m| {
            let mut m = m.try_borrow_mut().ok()?;
            if m.as_ref().is_some_and(|t| t.key == *key) {
                m.take()
            } else {
                None
            }
        })
        .ok()
        .flatten()
}

impl<'a> Ctx<'a> {
    pub fn new(
        plan: &'a Plan,
        schedule: &'a Schedule,
        cost: &'a dyn CostModel,
        net: Option<&'a Network>,
        opts: &'a SimOptions,
    ) -> Result<Ctx<'a>, SimError> {
        let probe = probe_ranks(plan, &schedule.program_of, schedule.programs.len())?;
        let progs = schedule
            .programs
            .iter()
            .zip(&probe)
            .enumerate()
            .map(|(i, (p, &rank))| compile(i as u32, p, cost, rank))
            .collect::<Result<Vec<_>, _>>()?;
        Ctx::with_programs(plan, schedule, progs, cost, net, opts)
    }

    /// A run of programs compiled already (see [`super::Compiled`]): `schedule` supplies the
    /// rank-to-program map, and its IR programs, if it has them, name ops in errors.
    pub fn with_programs(
        plan: &'a Plan,
        schedule: &'a Schedule,
        progs: Vec<CProgram>,
        cost: &'a dyn CostModel,
        net: Option<&'a Network>,
        opts: &'a SimOptions,
    ) -> Result<Ctx<'a>, SimError> {
        if let Err(e) = probe_ranks(plan, &schedule.program_of, progs.len()) {
            super::compile::recycle(progs);
            return Err(e);
        }
        let world = plan.world as usize;
        let mesh_key = net.is_none().then(|| MeshKey {
            mesh: plan.groups_key(),
            program_of: schedule.program_of.clone(),
            collapse: opts.collapse,
            shared_cores: cost.shared_cores().is_some(),
            rank_invariant: cost.compute_is_rank_invariant(),
        });
        let (group_of, peers, collapse, active) = match mesh_key.as_ref().and_then(spare_tables) {
            Some(t) => (t.group_of, t.peers, t.collapse, t.active),
            None => fresh_tables(plan, schedule, cost, net, opts, &progs),
        };
        if let Err(e) = check_work(&progs, &schedule.program_of, &active, opts) {
            super::compile::recycle(progs);
            return Err(e);
        }
        Ok(Ctx {
            plan,
            schedule,
            cost,
            opts,
            net,
            progs,
            prog_of: &schedule.program_of,
            peers,
            collapse,
            group_of,
            world,
            active,
            mesh_key,
        })
    }

    /// The slot of a rank the engine runs (its position in [`Ctx::active`]): the rank itself,
    /// or in collapsed mode the representative's index. Only called for simulated ranks
    /// (peers and group members are resolved to representatives).
    #[inline]
    pub fn slot(&self, rank: u32) -> usize {
        match &self.collapse {
            None => rank as usize,
            Some(c) => c
                .slot_of
                .get(rank as usize)
                .map_or(usize::MAX, |&s| s as usize),
        }
    }

    /// The members of group `g` that the engine runs.
    #[inline]
    pub fn members(&self, g: u32) -> &[u32] {
        match &self.collapse {
            Some(c) => c.members.get(g as usize).map_or(&[], |m| m.as_slice()),
            None => &self.plan.group(g).members,
        }
    }

    /// The real receiver of send op `send_op` of `src`, matched with `dst` (in collapsed
    /// mode a representative; the real receiver is the send's resolved peer).
    pub fn real_dst(&self, src: u32, send_op: u32, dst: u32) -> u32 {
        match (
            &self.collapse,
            self.prog(src as usize).ops.get(send_op as usize),
        ) {
            (Some(_), Some(op)) => match op.kind {
                super::compile::CKind::P2p { peer, .. } => PEERS
                    .get(peer as usize)
                    .map_or(dst, |&p| p.rank_for(self.plan, src)),
                _ => dst,
            },
            _ => dst,
        }
    }

    #[inline]
    pub fn prog(&self, rank: usize) -> &CProgram {
        &self.progs[self.prog_of[rank] as usize]
    }

    /// The human name of the op at position `op` of `rank`'s compiled program, or "op N"
    /// (its IR index) if it does not exist.
    pub fn op_name(&self, rank: usize, op: u32) -> String {
        let op = self
            .prog_of
            .get(rank)
            .and_then(|&p| self.progs.get(p as usize))
            .map_or(op, |p| p.index_of(op));
        self.ir_op_name(rank as u32, op)
    }

    /// The name of op `index` of the IR program of `rank`.
    pub fn ir_op_name(&self, rank: u32, index: u32) -> String {
        self.schedule
            .get_op(rank, index)
            .map_or_else(|| format!("op {index}"), |o| o.name())
    }
}

/// The rank each of `programs` programs is compiled for (the lowest rank that runs it: see
/// [`compile`]), after checking that `program_of` maps every rank of `plan` to one of them.
pub(crate) fn probe_ranks(
    plan: &Plan,
    program_of: &[u32],
    programs: usize,
) -> Result<Vec<u32>, SimError> {
    if program_of.len() as u64 != u64::from(plan.world) {
        return Err(SimError::WorldMismatch {
            schedule: program_of.len() as u32,
            plan: plan.world,
        });
    }
    let mut probe = vec![u32::MAX; programs];
    for (rank, &p) in program_of.iter().enumerate() {
        match probe.get_mut(p as usize) {
            Some(slot) => *slot = (*slot).min(rank as u32),
            None => {
                return Err(SimError::NoSuchProgram {
                    rank: rank as u32,
                    program: p,
                    programs: programs as u32,
                })
            }
        }
    }
    Ok(probe.into_iter().map(|r| r.min(plan.world)).collect())
}

/// The per-rank tables of a run computed from scratch: each rank's group per kind, its
/// resolved peers, the collapse (when allowed and exact) and the simulated ranks.
fn fresh_tables(
    plan: &Plan,
    schedule: &Schedule,
    cost: &dyn CostModel,
    net: Option<&Network>,
    opts: &SimOptions,
    progs: &[CProgram],
) -> (Vec<u32>, Vec<[u32; 4]>, Option<Collapse>, Vec<u32>) {
    let mut group_of = Vec::with_capacity(plan.world as usize * GROUP_KINDS);
    for kind in GroupKind::ALL {
        group_of.extend((0..plan.world).map(|r| plan.group_of(r, kind)));
    }
    let peers = (0..plan.world)
        .map(|r| {
            let g = plan.group(plan.group_of(r, GroupKind::Cp));
            let n = g.members.len();
            let i = g.members.iter().position(|&m| m == r).unwrap_or(0);
            let cp_next = g.members.get((i + 1) % n.max(1)).copied().unwrap_or(r);
            let cp_prev = g.members.get((i + n - 1) % n.max(1)).copied().unwrap_or(r);
            [plan.pp_next(r), plan.pp_prev(r), cp_next, cp_prev]
        })
        .collect::<Vec<_>>();
    // Contention couples ranks that collapsing would leave out (a non-simulated rank's
    // traffic on a shared link, its compute on shared cores): with shared cores every
    // rank is simulated, and with the flow network only the replicas whose flows provably
    // run apart, on mirrored links, are left out (see `engine::flow::symmetry`).
    let collapse = match net {
        _ if !opts.collapse
            || cost.shared_cores().is_some()
            || opts.op_jitter.is_some()
            || opts.compute_factors.is_some() =>
        {
            None
        }
        None => Collapse::with_peers(plan, schedule, cost, &peers)
            .ok()
            .or_else(|| Collapse::partial(plan, schedule, cost, &peers)),
        Some(net) => super::flow::collapse_for_flows(net, plan, schedule, cost, progs, &peers),
    };
    let mut peers = peers;
    if let Some(c) = &collapse {
        for &rep in &c.reps {
            if let Some(slot) = peers.get_mut(rep as usize) {
                *slot = PEERS.map(|p| c.match_peer(plan, rep, p));
            }
        }
    }
    let active = match &collapse {
        Some(c) => c.reps.clone(),
        None => (0..plan.world).collect(),
    };
    (group_of, peers, collapse, active)
}

/// Refuses a run whose simulated ranks hold more ops than the event bound, or whose trace
/// (the traced ones among them) would exceed its byte bound, before any event is processed.
fn check_work(
    progs: &[CProgram],
    program_of: &[u32],
    active: &[u32],
    opts: &SimOptions,
) -> Result<(), SimError> {
    let prog = |r: u32| {
        program_of
            .get(r as usize)
            .and_then(|&p| progs.get(p as usize))
    };
    // The engine's events are the ops it runs; a trace also shows the memory ops it replays.
    let ops_of = |r: u32| prog(r).map_or(0, |p| p.ops.len() as u64);
    let traced_of = |r: u32| prog(r).map_or(0, |p| u64::from(p.ir_ops));
    let events: u64 = active.iter().map(|&r| ops_of(r)).sum();
    let ranks = active.len() as u32;
    if events > opts.max_events {
        return Err(SimError::WorkTooLarge {
            events,
            ranks,
            limit: opts.max_events,
        });
    }
    if !opts.trace {
        return Ok(());
    }
    let (events, ranks) = active
        .iter()
        .filter(|r| {
            opts.trace_ranks
                .as_ref()
                .is_none_or(|l| l.binary_search(r).is_ok())
        })
        .fold((0, 0), |(e, n), &r| (e + traced_of(r), n + 1));
    let estimate_bytes = events.saturating_mul(super::TRACE_BYTES_PER_EVENT);
    if estimate_bytes > opts.max_trace_bytes {
        return Err(SimError::TraceTooLarge {
            events,
            ranks,
            estimate_bytes,
            limit_bytes: opts.max_trace_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Analytic;
    use crate::testing::small_scenario;

    /// Everything the mesh tables hold, comparable.
    type Tables = (
        Vec<u32>,
        Vec<[u32; 4]>,
        Vec<u32>,
        Option<(Vec<u32>, Vec<u32>, Vec<u32>, Vec<Vec<u32>>)>,
    );

    /// The tables of a run of `s` on this thread, and whether they were kept from the run
    /// before.
    fn tables(s: &crate::scenario::Scenario, opts: &SimOptions) -> (Tables, bool) {
        let plan = Plan::new(s).unwrap();
        let schedule = crate::schedule::generate(s, &plan).unwrap();
        let cost = Analytic::new(s);
        let spare = || SPARE_MESH.with(|m| m.borrow().is_some());
        let before = spare();
        let ctx = Ctx::new(&plan, &schedule, &cost, None, opts).unwrap();
        let kept = before && !spare() && ctx.mesh_key.is_some();
        let t = (
            ctx.group_of.clone(),
            ctx.peers.clone(),
            ctx.active.clone(),
            ctx.collapse.as_ref().map(|c| {
                (
                    c.rep_of.clone(),
                    c.reps.clone(),
                    c.slot_of.clone(),
                    c.members.clone(),
                )
            }),
        );
        (t, kept)
    }

    /// Runs of one mesh take the tables the run before left (other micro batches, stages,
    /// ZeRO), and what they take equals what a fresh thread computes; another mesh, another
    /// rank-to-program map or other collapse options compute their own.
    #[test]
    fn kept_mesh_tables_equal_fresh_ones() {
        let collapsed = SimOptions {
            collapse: true,
            ..SimOptions::default()
        };
        let full = SimOptions::default();
        let mut zero3 = small_scenario(2, 2, 2, 8);
        zero3.parallel.zero = 3;
        let runs = [
            (small_scenario(2, 2, 2, 8), &collapsed, false),
            (small_scenario(2, 2, 2, 4), &collapsed, true),
            (zero3, &collapsed, true),
            (small_scenario(2, 2, 2, 4), &full, false),
            (small_scenario(2, 2, 2, 8), &full, true),
            (small_scenario(1, 4, 2, 8), &full, false),
            (small_scenario(2, 2, 2, 8), &collapsed, false),
        ];
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for (i, (s, opts, want_kept)) in runs.iter().enumerate() {
                    let (t, kept) = tables(s, opts);
                    assert_eq!(kept, *want_kept, "run {i}");
                    let fresh =
                        std::thread::scope(|f| f.spawn(|| tables(s, opts).0).join()).unwrap();
                    assert_eq!(t, fresh, "run {i}");
                }
            })
            .join()
            .unwrap();
        });
    }
}
