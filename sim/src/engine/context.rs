//! What a run reads but never changes: the compiled programs, resolved peers and concrete
//! groups per rank, and the inputs. Built (and the schedule checked against the plan) once
//! before the event loop starts.

use super::collapse::{Collapse, PEERS};
use super::compile::{compile, CProgram, GROUP_KINDS};
use super::{SimError, SimOptions};
use crate::cost::CostModel;
use crate::plan::{GroupKind, Plan};
use crate::schedule::Schedule;
use crate::topology::Network;

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
}

impl Drop for Ctx<'_> {
    /// The compiled programs' buffers go back to this thread's spares for the next run.
    fn drop(&mut self) {
        super::compile::recycle(std::mem::take(&mut self.progs));
    }
}

impl<'a> Ctx<'a> {
    pub fn new(
        plan: &'a Plan,
        schedule: &'a Schedule,
        cost: &'a dyn CostModel,
        net: Option<&'a Network>,
        opts: &'a SimOptions,
    ) -> Result<Ctx<'a>, SimError> {
        if schedule.world() != plan.world {
            return Err(SimError::WorldMismatch {
                schedule: schedule.world(),
                plan: plan.world,
            });
        }
        let programs = schedule.programs.len() as u32;
        let mut probe = vec![u32::MAX; schedule.programs.len()];
        for (rank, &p) in schedule.program_of.iter().enumerate() {
            match probe.get_mut(p as usize) {
                Some(slot) => *slot = (*slot).min(rank as u32),
                None => {
                    return Err(SimError::NoSuchProgram {
                        rank: rank as u32,
                        program: p,
                        programs,
                    })
                }
            }
        }
        let progs = schedule
            .programs
            .iter()
            .zip(&probe)
            .enumerate()
            .map(|(i, (p, &rank))| compile(i as u32, p, cost, rank.min(plan.world)))
            .collect::<Result<Vec<_>, _>>()?;
        let world = plan.world as usize;
        let mut group_of = Vec::with_capacity(world * GROUP_KINDS);
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
            _ if !opts.collapse || cost.shared_cores().is_some() => None,
            None => Collapse::with_peers(plan, schedule, cost, &peers).ok(),
            Some(net) => super::flow::collapse_for_flows(net, plan, schedule, cost, &progs, &peers),
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

    /// Duration of the transfer of send op `send_op` of `src` to `dst`, priced between the
    /// real ranks (in collapsed mode `dst` is a representative; the real receiver is the
    /// send's resolved peer).
    pub fn p2p_ns(&self, src: u32, send_op: u32, dst: u32, bytes: u64) -> u64 {
        self.cost
            .p2p_ns(self.plan, src, self.real_dst(src, send_op, dst), bytes)
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

    /// The op's human name, or "op N" if it does not exist.
    pub fn op_name(&self, rank: usize, op: u32) -> String {
        self.schedule
            .get_op(rank as u32, op)
            .map_or_else(|| format!("op {op}"), |o| o.name())
    }
}
