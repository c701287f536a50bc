//! What a run reads but never changes: the compiled programs, resolved peers and concrete
//! groups per rank, and the inputs. Built (and the schedule checked against the plan) once
//! before the event loop starts.

use super::compile::{compile, CProgram, GROUP_KINDS};
use super::{SimError, SimOptions};
use crate::cost::CostModel;
use crate::plan::{GroupKind, Plan};
use crate::schedule::Schedule;

/// Everything that does not change during a run.
pub(crate) struct Ctx<'a> {
    pub plan: &'a Plan,
    pub schedule: &'a Schedule,
    pub cost: &'a dyn CostModel,
    pub opts: &'a SimOptions,
    pub progs: Vec<CProgram>,
    pub prog_of: &'a [u32],
    /// Resolved peers per rank, indexed by `compile::peer_index`.
    pub peers: Vec<[u32; 4]>,
    /// `group_of[kind * world + rank]`: the concrete group of each kind.
    pub group_of: Vec<u32>,
    pub world: usize,
}

impl<'a> Ctx<'a> {
    pub fn new(
        plan: &'a Plan,
        schedule: &'a Schedule,
        cost: &'a dyn CostModel,
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
            .collect();
        Ok(Ctx {
            plan,
            schedule,
            cost,
            opts,
            progs,
            prog_of: &schedule.program_of,
            peers,
            group_of,
            world,
        })
    }

    #[inline]
    pub fn prog(&self, rank: usize) -> &CProgram {
        &self.progs[self.prog_of[rank] as usize]
    }

    /// The op's human name, or "op N" if it does not exist.
    pub fn op_name(&self, rank: usize, op: u32) -> String {
        self.schedule
            .program_of
            .get(rank)
            .and_then(|&p| self.schedule.programs.get(p as usize))
            .and_then(|p| p.ops.get(op as usize))
            .map_or_else(|| format!("op {op}"), |o| o.name())
    }
}
