//! Proof that a schedule can run before anyone runs it: every op is well formed, every send
//! has its receive (same tag and bytes on the resolved peer), every member of every group
//! issues the same collectives in the same order, every backward runs after its forward,
//! every allocation is freed after it is made, and an untimed dry run of all ranks (stream
//! FIFO, dependencies, rendezvous) finishes. Errors name the rank and the op.

mod dryrun;
mod order;

use crate::ir::{OpKind, Peer, Program, Schedule, Stream};
use crate::plan::{GroupKind, Plan, RankId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What a successful validation counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ValidationReport {
    pub ranks: u32,
    pub programs: u32,
    /// Ops summed over every rank.
    pub ops: u64,
    /// Matched send/receive pairs over every rank.
    pub p2p_pairs: u64,
    /// Collective calls over every concrete group (one per group, not per member).
    pub collectives: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidationError {
    #[error("the schedule has {got} ranks but the plan has {want}")]
    World { got: u32, want: u32 },
    #[error("rank {rank} runs program {program}, but there are only {programs}")]
    ProgramIndex {
        rank: u32,
        program: u32,
        programs: u32,
    },
    #[error("rank {rank} is on stage {plan_stage} but runs the program of stage {program_stage}")]
    StageMismatch {
        rank: u32,
        plan_stage: u32,
        program_stage: u32,
    },
    #[error("rank {rank}, op {index} `{op}`: {what}")]
    Structure {
        rank: u32,
        index: u32,
        op: String,
        what: String,
    },
    #[error("rank {rank}, op {index} `{op}`: {what}")]
    Unmatched {
        rank: u32,
        index: u32,
        op: String,
        what: String,
    },
    #[error("{kind:?} group of rank {rank}: rank {other} differs at collective #{position}: rank {rank} has {ours}, rank {other} has {theirs}")]
    CollectiveOrder {
        kind: GroupKind,
        rank: u32,
        other: u32,
        position: usize,
        ours: String,
        theirs: String,
    },
    #[error("rank {rank}, op {index} `{op}`: no forward of micro batch {microbatch}, chunk {chunk} runs before it")]
    BackwardBeforeForward {
        rank: u32,
        index: u32,
        op: String,
        microbatch: u32,
        chunk: u32,
    },
    #[error("deadlock: {} rank(s) cannot finish: {detail}", blocked.len())]
    Deadlock { blocked: Vec<u32>, detail: String },
}

impl Schedule {
    /// Check that this schedule is well formed and executable on `plan`'s ranks: every
    /// program's structure, then across ranks (every send matched, every group's collectives
    /// in one order), every program's order, and an untimed dry run of every rank. Errors
    /// across ranks come before a program's order error, as they say more.
    pub fn validate(&self, plan: &Plan) -> Result<ValidationReport, ValidationError> {
        let first_rank = self.check_programs(plan)?;
        let p2p_pairs = check_p2p(self, plan)?;
        let collectives = check_collectives(self, plan)?;
        self.check_orders(&first_rank)?;
        dryrun::dry_run(self, plan)?;
        Ok(ValidationReport {
            p2p_pairs,
            collectives,
            ..self.counted()
        })
    }

    /// The checks of [`Schedule::validate`] but its dry run: every program's structure and
    /// order, every send matched, every group's collectives in one order. For a caller that
    /// then runs every rank itself on an engine that stops where the dry run would (a
    /// deadlock, a transfer without its counterpart) and calls [`Schedule::validate`] when
    /// it does, for this error.
    pub fn validate_but_dry_run(&self, plan: &Plan) -> Result<ValidationReport, ValidationError> {
        let first_rank = self.check_programs(plan)?;
        let p2p_pairs = check_p2p(self, plan)?;
        let collectives = check_collectives(self, plan)?;
        self.check_orders(&first_rank)?;
        Ok(ValidationReport {
            p2p_pairs,
            collectives,
            ..self.counted()
        })
    }

    /// The checks of [`Schedule::validate`] that need only each program once: the world and
    /// every rank's program index and stage (one pass over the ranks), then each program's
    /// structure (deps, streams, allocations) and order (backwards after their forwards),
    /// named by the first rank that runs it. What is left, matching across ranks, is proved
    /// for a run on representative ranks by the engine's collapse (each representative's
    /// peers are representatives, the rest mirror them) and checked by the engine as it runs
    /// them; [`ValidationReport::p2p_pairs`] and `collectives` stay 0 here.
    pub fn validate_programs(&self, plan: &Plan) -> Result<ValidationReport, ValidationError> {
        let first_rank = self.check_programs(plan)?;
        self.check_orders(&first_rank)?;
        Ok(self.counted())
    }

    fn counted(&self) -> ValidationReport {
        ValidationReport {
            ranks: self.world(),
            programs: self.programs.len() as u32,
            ops: self.total_ops(),
            p2p_pairs: 0,
            collectives: 0,
        }
    }

    /// The world, every rank's program index and stage, and each program's structure; the
    /// first rank of each program in use (errors about a program name it).
    fn check_programs(&self, plan: &Plan) -> Result<BTreeMap<u32, u32>, ValidationError> {
        if self.world() != plan.world {
            return Err(ValidationError::World {
                got: self.world(),
                want: plan.world,
            });
        }
        let programs = self.programs.len() as u32;
        let mut first_rank: BTreeMap<u32, u32> = BTreeMap::new();
        for (rank, &p) in self.program_of.iter().enumerate() {
            let rank = rank as u32;
            let Some(prog) = self.programs.get(p as usize) else {
                return Err(ValidationError::ProgramIndex {
                    rank,
                    program: p,
                    programs,
                });
            };
            let plan_stage = plan.stage_of(rank);
            if prog.stage != plan_stage {
                return Err(ValidationError::StageMismatch {
                    rank,
                    plan_stage,
                    program_stage: prog.stage,
                });
            }
            first_rank.entry(p).or_insert(rank);
        }
        for (&p, &rank) in &first_rank {
            check_structure(&self.programs[p as usize], rank)?;
        }
        Ok(first_rank)
    }

    fn check_orders(&self, first_rank: &BTreeMap<u32, u32>) -> Result<(), ValidationError> {
        for (&p, &rank) in first_rank {
            order::check_order(&self.programs[p as usize], rank)?;
        }
        Ok(())
    }
}

fn structure_err(prog: &Program, rank: u32, index: usize, what: String) -> ValidationError {
    ValidationError::Structure {
        rank,
        index: index as u32,
        op: prog.ops.get(index).map(|o| o.name()).unwrap_or_default(),
        what,
    }
}

/// Deps point backwards, ops sit on streams that can run them, allocation tags pair up.
fn check_structure(prog: &Program, rank: u32) -> Result<(), ValidationError> {
    if prog.ops.len() >= u32::MAX as usize {
        return Err(structure_err(prog, rank, 0, "too many ops".into()));
    }
    let mut live: BTreeSet<u32> = BTreeSet::new();
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    for (i, op) in prog.ops.iter().enumerate() {
        if let Some(&d) = op.deps.iter().find(|&&d| d as usize >= i) {
            return Err(structure_err(
                prog,
                rank,
                i,
                format!("depends on op {d}, which is not earlier (a cycle)"),
            ));
        }
        let ok = match &op.kind {
            OpKind::Compute(_) => op.stream == Stream::Compute,
            OpKind::Send { .. } => matches!(op.stream, Stream::PpSend | Stream::Cp),
            OpKind::Recv { .. } => {
                matches!(op.stream, Stream::PpRecv | Stream::Cp | Stream::CpRecv)
            }
            OpKind::Collective { .. } => {
                matches!(op.stream, Stream::Tp | Stream::Cp | Stream::Ep | Stream::Dp)
            }
            OpKind::Checkpoint { .. } | OpKind::HostCopy { .. } | OpKind::HostUpdate { .. } => {
                op.stream == Stream::Io
            }
            OpKind::Alloc { .. } | OpKind::Free { .. } => true,
        };
        if !ok {
            return Err(structure_err(
                prog,
                rank,
                i,
                format!("cannot run on the {} stream", op.stream.name()),
            ));
        }
        match &op.kind {
            OpKind::Alloc { tag, .. } => {
                if !seen.insert(*tag) {
                    return Err(structure_err(
                        prog,
                        rank,
                        i,
                        format!("allocation tag #{tag} is used twice"),
                    ));
                }
                live.insert(*tag);
            }
            OpKind::Free { tag } if !live.remove(tag) => {
                return Err(structure_err(
                    prog,
                    rank,
                    i,
                    format!(
                        "frees tag #{tag}, which no earlier op allocated or which is already freed"
                    ),
                ));
            }
            _ => {}
        }
    }
    if let Some(&tag) = live.iter().next() {
        let idx = prog
            .ops
            .iter()
            .position(|o| matches!(o.kind, OpKind::Alloc { tag: t, .. } if t == tag))
            .unwrap_or(0);
        return Err(structure_err(
            prog,
            rank,
            idx,
            format!("allocation #{tag} is never freed"),
        ));
    }
    Ok(())
}

/// Ranks that may send to `q`: those whose some peer name resolves to it.
fn possible_senders(plan: &Plan, q: RankId) -> Vec<RankId> {
    let mut v: Vec<RankId> = [Peer::PpPrev, Peer::PpNext, Peer::CpPrev, Peer::CpNext]
        .iter()
        .map(|&p| p.rank_for(plan, q))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Every receive of every rank has exactly one send (same tag, same bytes) from its resolved
/// peer, and every send one receive. Ranks whose neighbourhood looks alike (same programs,
/// same coincidences among neighbours) are checked once. Returns the matched pairs.
fn check_p2p(s: &Schedule, plan: &Plan) -> Result<u64, ValidationError> {
    let mut done: BTreeMap<Vec<u32>, u64> = BTreeMap::new();
    let mut pairs = 0u64;
    for q in 0..plan.world {
        let senders = possible_senders(plan, q);
        let neighbours: Vec<RankId> = [Peer::PpPrev, Peer::PpNext, Peer::CpPrev, Peer::CpNext]
            .iter()
            .map(|&p| p.rank_for(plan, q))
            .collect();
        // Key: programs of q and its neighbours, and which neighbours coincide.
        let mut key = vec![s.program_of[q as usize]];
        for &n in &neighbours {
            key.push(s.program_of[n as usize]);
            key.push(neighbours.iter().position(|&x| x == n).unwrap_or(0) as u32);
            key.push(u32::from(n == q));
        }
        for &p in &senders {
            key.push(s.program_of[p as usize]);
            for peer in [Peer::PpPrev, Peer::PpNext, Peer::CpPrev, Peer::CpNext] {
                key.push(u32::from(peer.rank_for(plan, p) == q));
            }
        }
        if let Some(&c) = done.get(&key) {
            pairs += c;
            continue;
        }
        let mut recvs: HashMap<(RankId, u32), (u64, u32)> = HashMap::new();
        let prog_q = s.program(q);
        for (i, op) in prog_q.ops.iter().enumerate() {
            if let OpKind::Recv { peer, bytes, tag } = op.kind {
                let from = peer.rank_for(plan, q);
                if recvs.insert((from, tag), (bytes, i as u32)).is_some() {
                    return Err(ValidationError::Unmatched {
                        rank: q,
                        index: i as u32,
                        op: op.name(),
                        what: format!("a second receive from rank {from} with tag {tag}"),
                    });
                }
            }
        }
        let mut matched = 0u64;
        for &p in &senders {
            for (i, op) in s.program(p).ops.iter().enumerate() {
                let OpKind::Send { peer, bytes, tag } = op.kind else {
                    continue;
                };
                if peer.rank_for(plan, p) != q {
                    continue;
                }
                match recvs.remove(&(p, tag)) {
                    None => {
                        return Err(ValidationError::Unmatched {
                            rank: p,
                            index: i as u32,
                            op: op.name(),
                            what: format!(
                                "rank {q} posts no (unmatched) receive from rank {p} with tag {tag}"
                            ),
                        })
                    }
                    Some((rb, ri)) if rb != bytes => {
                        return Err(ValidationError::Unmatched {
                            rank: p,
                            index: i as u32,
                            op: op.name(),
                            what: format!(
                                "sends {bytes} bytes with tag {tag}, but rank {q} receives {rb} bytes (op {ri})"
                            ),
                        })
                    }
                    Some(_) => matched += 1,
                }
            }
        }
        if let Some((&(from, tag), &(_, i))) = recvs.iter().min_by_key(|(_, &(_, i))| i) {
            return Err(ValidationError::Unmatched {
                rank: q,
                index: i,
                op: prog_q
                    .ops
                    .get(i as usize)
                    .map(|o| o.name())
                    .unwrap_or_default(),
                what: format!("rank {from} sends nothing with tag {tag} to rank {q}"),
            });
        }
        done.insert(key, matched);
        pairs += matched;
    }
    Ok(pairs)
}

/// The collectives a program issues on groups of `kind`, in program order.
fn collective_seq(prog: &Program, kind: GroupKind) -> Vec<(usize, &OpKind)> {
    prog.ops
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o.kind, OpKind::Collective { group, .. } if group == kind))
        .map(|(i, o)| (i, &o.kind))
        .collect()
}

fn describe(k: Option<&(usize, &OpKind)>, prog: &Program) -> String {
    match k {
        Some((i, _)) => format!(
            "op {i} `{}`",
            prog.ops.get(*i).map(|o| o.name()).unwrap_or_default()
        ),
        None => "nothing more".into(),
    }
}

/// Every member of every group issues the same (kind, bytes, calls) sequence on it.
fn check_collectives(s: &Schedule, plan: &Plan) -> Result<u64, ValidationError> {
    let mut compared: BTreeSet<(u32, u32, GroupKind)> = BTreeSet::new();
    let mut count_of: BTreeMap<(u32, GroupKind), u64> = BTreeMap::new();
    let mut total = 0u64;
    for g in plan.groups() {
        let Some(&first) = g.members.first() else {
            continue;
        };
        let pa = s.program_of[first as usize];
        let count = *count_of
            .entry((pa, g.kind))
            .or_insert_with(|| collective_seq(&s.programs[pa as usize], g.kind).len() as u64);
        total += count;
        for &m in &g.members[1..] {
            let pb = s.program_of[m as usize];
            if pa == pb || !compared.insert((pa, pb, g.kind)) {
                continue;
            }
            let (a, b) = (&s.programs[pa as usize], &s.programs[pb as usize]);
            let (sa, sb) = (collective_seq(a, g.kind), collective_seq(b, g.kind));
            for pos in 0..sa.len().max(sb.len()) {
                let same = match (sa.get(pos), sb.get(pos)) {
                    (Some((_, x)), Some((_, y))) => x == y,
                    _ => false,
                };
                if !same {
                    return Err(ValidationError::CollectiveOrder {
                        kind: g.kind,
                        rank: first,
                        other: m,
                        position: pos,
                        ours: describe(sa.get(pos), a),
                        theirs: describe(sb.get(pos), b),
                    });
                }
            }
        }
    }
    Ok(total)
}
