//! A measured transfer starts where all its parties had issued it, as the simulator starts
//! one (the IR's rendezvous: a collective when its last member arrives, a transfer when both
//! its send and its receive have). The host runtime records a collective or a receive from its
//! first data, which comes at least one message's latency after the last party issued the
//! call, so the time in between counted as idle in the measurement and as communication in
//! the prediction: on `tp-pp.toml`'s 16-64 KiB tensor-parallel calls that is most of each
//! call (docs/journal/2026-11-validation-history.md, 2026-11-24). With every rank's issue times
//! (the trace's `issued_ns`), the merge moves such an op's start back to the rendezvous. For a
//! receive the send's side is the send's start (when the sender began writing, after building its
//! payload). A send keeps its own start: it begins when its rank issues it, whether or not the
//! receive was posted (the socket buffers the data).

use super::measure::RankMeasure;
use twin_sim::plan::Plan;
use twin_sim::schedule::partners::Partners;
use twin_sim::schedule::{OpKind, Schedule};

/// Per rank (indexed as `ranks`), per op: the start the merged trace gives it. A collective
/// whose members' issue times are all known starts at the last of them, a receive at the later
/// of its issue and its send's start (never after its recorded start); every other op keeps
/// its recorded start.
pub fn starts(plan: &Plan, schedule: &Schedule, ranks: &[RankMeasure]) -> Vec<Vec<u64>> {
    let partners = Partners::new(plan, schedule);
    let of = |rank: u32| ranks.get(rank as usize).filter(|m| m.rank == rank);
    let issued = |rank: u32, op: u32| -> Option<u64> {
        of(rank).and_then(|m| m.op_issued_ns.get(op as usize).copied().flatten())
    };
    let started = |rank: u32, op: u32| -> Option<u64> {
        of(rank)?.op_times_ns.get(op as usize).map(|t| t[0])
    };
    ranks
        .iter()
        .map(|m| {
            let ops = schedule.get_program(m.rank).map_or(&[][..], |p| &p.ops[..]);
            m.op_times_ns
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let id = (m.rank, i as u32);
                    let Some(own) = issued(id.0, id.1) else {
                        return t[0];
                    };
                    let last = match ops.get(i).map(|o| &o.kind) {
                        Some(OpKind::Recv { .. }) => partners
                            .send_of(schedule, id)
                            .and_then(|(q, j)| started(q, j))
                            .map(|x| own.max(x)),
                        Some(OpKind::Collective { .. }) => partners
                            .members_of(schedule, id)
                            .iter()
                            .try_fold(own, |acc, &(q, j)| issued(q, j).map(|x| acc.max(x))),
                        _ => None,
                    };
                    last.map_or(t[0], |at| at.min(t[0]))
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_starts_at_its_sends_start_and_a_collective_at_its_last_members_issue() {
        let s = twin_sim::testing::cpu_sized_scenario(2, 2, 1, 2);
        let staged = crate::testkit::planned(&s);
        let (plan, schedule) = (&staged.plan, &staged.schedule);
        let partners = Partners::new(plan, schedule);
        // Every op of rank r: issued at 100 r + 1000 i, recorded start 500 later; but a
        // receive is posted at 0 and its data recorded only at 10^9 (so its send decides).
        let is_recv = |r: u32, i: u64| {
            matches!(
                schedule.program(r).ops[i as usize].kind,
                OpKind::Recv { .. }
            )
        };
        let issue = |r: u32, i: u64| 100 * u64::from(r) + 1000 * i;
        let ranks: Vec<RankMeasure> = (0..plan.world)
            .map(|r| {
                let n = schedule.program(r).ops.len() as u64;
                RankMeasure {
                    rank: r,
                    op_times_ns: (0..n)
                        .map(|i| {
                            let s = if is_recv(r, i) {
                                1_000_000_000
                            } else {
                                issue(r, i) + 500
                            };
                            [s, s + 100]
                        })
                        .collect(),
                    op_issued_ns: (0..n)
                        .map(|i| Some(if is_recv(r, i) { 0 } else { issue(r, i) }))
                        .collect(),
                    ..RankMeasure::default()
                }
            })
            .collect();
        let got = starts(plan, schedule, &ranks);
        let (mut recvs, mut colls) = (0, 0);
        for r in 0..plan.world {
            for (i, op) in schedule.program(r).ops.iter().enumerate() {
                let id = (r, i as u32);
                let recorded = ranks[r as usize].op_times_ns[i][0];
                let want = match &op.kind {
                    OpKind::Recv { .. } => {
                        recvs += 1;
                        // The send's recorded start (500 after its issue), not its issue.
                        let (q, j) = partners.send_of(schedule, id).unwrap();
                        issue(q, u64::from(j)) + 500
                    }
                    OpKind::Collective { .. } => {
                        colls += 1;
                        let last = partners
                            .members_of(schedule, id)
                            .iter()
                            .map(|&(q, j)| issue(q, u64::from(j)))
                            .fold(issue(r, i as u64), u64::max);
                        last.min(recorded)
                    }
                    _ => recorded,
                };
                assert_eq!(got[r as usize][i], want, "rank {r} op {i}: {op:?}");
                assert!(got[r as usize][i] <= recorded);
            }
        }
        assert!(recvs > 0 && colls > 0);
        // Without issue times (a backend that does not record them): the recorded starts.
        let bare: Vec<RankMeasure> = ranks
            .iter()
            .map(|m| RankMeasure {
                op_issued_ns: Vec::new(),
                ..m.clone()
            })
            .collect();
        let got = starts(plan, schedule, &bare);
        for (m, g) in bare.iter().zip(&got) {
            assert!(m.op_times_ns.iter().zip(g).all(|(t, s)| t[0] == *s));
        }
    }
}
