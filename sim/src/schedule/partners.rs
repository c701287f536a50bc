//! Which ops of other ranks take part in an op's transfer: the members' calls of a collective
//! and the send that feeds a receive, resolved against a plan the way the engine and the
//! validator pair them (a collective by its place in its group's sequence on each member, a
//! transfer by (source, destination, tag)). Traces are compared and walked through these
//! pairs: `verify::critical` follows a receive back to its send, and the runtime starts a
//! measured transfer where all its parties had issued it (`twin_runtime::launch::rendezvous`).

use crate::plan::{GroupKind, Plan};
use crate::schedule::{OpKind, Schedule};
use std::collections::BTreeMap;

/// An op of a rank: (rank, index in its program).
pub type OpId = (u32, u32);

/// The transfer partners of every op of a schedule on a plan.
pub struct Partners<'a> {
    plan: &'a Plan,
    /// Per rank: each group kind's collectives, in program order.
    calls: Vec<BTreeMap<GroupKind, Vec<u32>>>,
    /// Each send by (from, to, tag).
    sends: BTreeMap<(u32, u32, u32), u32>,
}

impl<'a> Partners<'a> {
    pub fn new(plan: &'a Plan, schedule: &Schedule) -> Partners<'a> {
        let world = schedule.world();
        let mut calls = Vec::with_capacity(world as usize);
        let mut sends = BTreeMap::new();
        for rank in 0..world {
            let ops = schedule.get_program(rank).map_or(&[][..], |p| &p.ops[..]);
            let mut c: BTreeMap<GroupKind, Vec<u32>> = BTreeMap::new();
            for (i, op) in ops.iter().enumerate() {
                let i = i as u32;
                match op.kind {
                    OpKind::Collective { group, .. } => c.entry(group).or_default().push(i),
                    // Ranks outside the plan (a trace of another layout) have no peers.
                    OpKind::Send { peer, tag, .. } if rank < plan.world => {
                        sends
                            .entry((rank, peer.rank_for(plan, rank), tag))
                            .or_insert(i);
                    }
                    _ => {}
                }
            }
            calls.push(c);
        }
        Partners { plan, calls, sends }
    }

    /// The send that feeds receive `id`, if `id` is a receive and its send exists.
    pub fn send_of(&self, schedule: &Schedule, (rank, op): OpId) -> Option<OpId> {
        match schedule.get_op(rank, op).map(|o| &o.kind) {
            Some(OpKind::Recv { peer, tag, .. }) if rank < self.plan.world => {
                let src = peer.rank_for(self.plan, rank);
                self.sends.get(&(src, rank, *tag)).map(|&s| (src, s))
            }
            _ => None,
        }
    }

    /// The other members' calls of collective `id` (empty when `id` is not a collective, or
    /// for a member whose program lacks the call).
    pub fn members_of(&self, schedule: &Schedule, (rank, op): OpId) -> Vec<OpId> {
        let Some(OpKind::Collective { group, .. }) = schedule.get_op(rank, op).map(|o| &o.kind)
        else {
            return Vec::new();
        };
        if rank >= self.plan.world {
            return Vec::new();
        }
        // Where this call falls in its group's sequence (the lists are ascending).
        let n = self
            .calls
            .get(rank as usize)
            .and_then(|c| c.get(group))
            .and_then(|l| l.binary_search(&op).ok());
        let members = &self.plan.group(self.plan.group_of(rank, *group)).members;
        members
            .iter()
            .filter(|&&q| q != rank)
            .filter_map(|&q| {
                let j = n.and_then(|n| {
                    self.calls
                        .get(q as usize)
                        .and_then(|c| c.get(group))
                        .and_then(|l| l.get(n))
                })?;
                Some((q, *j))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::small_scenario;

    #[test]
    fn receives_find_their_sends_and_collectives_their_members() {
        let s = small_scenario(2, 2, 1, 2);
        let plan = Plan::new(&s).unwrap();
        let schedule = crate::schedule::generate(&s, &plan).unwrap();
        let p = Partners::new(&plan, &schedule);
        let mut recvs = 0;
        let mut colls = 0;
        for rank in 0..plan.world {
            for (i, op) in schedule.program(rank).ops.iter().enumerate() {
                let id = (rank, i as u32);
                match &op.kind {
                    OpKind::Recv { bytes, .. } => {
                        let (src, j) = p.send_of(&schedule, id).expect("a send");
                        assert_ne!(src, rank);
                        match &schedule.program(src).ops[j as usize].kind {
                            OpKind::Send { bytes: b, .. } => assert_eq!(b, bytes),
                            other => panic!("{other:?}"),
                        }
                        recvs += 1;
                    }
                    OpKind::Collective { kind, bytes, .. } => {
                        let m = p.members_of(&schedule, id);
                        // tp = 2: one other member, with the same call.
                        assert_eq!(m.len(), 1, "{op:?}");
                        let (q, j) = m[0];
                        match &schedule.program(q).ops[j as usize].kind {
                            OpKind::Collective {
                                kind: k, bytes: b, ..
                            } => assert_eq!((k, b), (kind, bytes)),
                            other => panic!("{other:?}"),
                        }
                        colls += 1;
                    }
                    _ => {
                        assert!(p.send_of(&schedule, id).is_none());
                        assert!(p.members_of(&schedule, id).is_empty());
                    }
                }
            }
        }
        assert!(recvs > 0 && colls > 0);
    }
}
