//! An untimed execution of every rank: ops run when their deps are done and they head their
//! stream; sends and receives complete together; a collective completes when every member of
//! the resolved group has reached it. If some rank cannot finish, the schedule deadlocks and
//! the error names each blocked rank and the op each of its streams is stuck at. Each op
//! completes once, so the run is O(total ops) plus the re-checks of blocked stream heads.

use super::ValidationError;
use crate::ir::{OpKind, Program, Schedule, Stream};
use crate::plan::{GroupKind, Plan, RankId};
use std::collections::{HashMap, VecDeque};

/// Per program: the ops of each stream, each op's position on its stream, and each
/// collective's ordinal among the program's collectives on the same group kind.
struct Index {
    on_stream: [Vec<u32>; Stream::COUNT],
    pos: Vec<u32>,
    coll_seq: Vec<u32>,
}

fn index(prog: &Program) -> Index {
    let mut on_stream: [Vec<u32>; Stream::COUNT] = Default::default();
    let mut pos = Vec::with_capacity(prog.ops.len());
    let mut coll_seq = Vec::with_capacity(prog.ops.len());
    let mut per_kind: HashMap<GroupKind, u32> = HashMap::new();
    for (i, op) in prog.ops.iter().enumerate() {
        let s = &mut on_stream[op.stream.index()];
        pos.push(s.len() as u32);
        s.push(i as u32);
        let seq = match op.kind {
            OpKind::Collective { group, .. } => {
                let c = per_kind.entry(group).or_insert(0);
                *c += 1;
                *c - 1
            }
            _ => 0,
        };
        coll_seq.push(seq);
    }
    Index {
        on_stream,
        pos,
        coll_seq,
    }
}

struct Run<'a> {
    s: &'a Schedule,
    plan: &'a Plan,
    idx: Vec<Index>,
    /// `ptr[rank][stream]`: ops of that stream already done.
    ptr: Vec<[u32; Stream::COUNT]>,
    /// The head of `[rank][stream]` has reached its rendezvous and waits for partners.
    arrived: Vec<[bool; Stream::COUNT]>,
    /// Leading deps of the head of `[rank][stream]` already found done (done-ness only
    /// grows), so an op waiting on thousands of deps is not rescanned from its first one
    /// each time its rank is woken.
    deps_done: Vec<[u32; Stream::COUNT]>,
    /// Posted p2p halves: (sender, receiver, tag) -> the stream of the waiting side.
    sends: HashMap<(RankId, RankId, u32), Stream>,
    recvs: HashMap<(RankId, RankId, u32), Stream>,
    /// Members that reached (group id, ordinal), with their stream.
    colls: HashMap<(u32, u32), Vec<(RankId, Stream)>>,
    queue: VecDeque<RankId>,
    queued: Vec<bool>,
}

impl Run<'_> {
    fn prog(&self, r: RankId) -> (&Program, &Index) {
        let p = self.s.program_of[r as usize] as usize;
        (&self.s.programs[p], &self.idx[p])
    }

    fn done(&self, r: RankId, op: u32) -> bool {
        let (prog, ix) = self.prog(r);
        match (prog.ops.get(op as usize), ix.pos.get(op as usize)) {
            (Some(o), Some(&p)) => self.ptr[r as usize][o.stream.index()] > p,
            _ => false,
        }
    }

    fn advance(&mut self, r: RankId, s: Stream) {
        self.ptr[r as usize][s.index()] += 1;
        self.arrived[r as usize][s.index()] = false;
        self.deps_done[r as usize][s.index()] = 0;
        if !self.queued[r as usize] {
            self.queued[r as usize] = true;
            self.queue.push_back(r);
        }
    }

    /// Try to start or complete the head of stream `s` of rank `r`; true if it completed.
    fn step(&mut self, r: RankId, s: Stream) -> bool {
        let (prog, ix) = self.prog(r);
        let Some(&head) = ix.on_stream[s.index()].get(self.ptr[r as usize][s.index()] as usize)
        else {
            return false;
        };
        if self.arrived[r as usize][s.index()] {
            return false;
        }
        let Some(op) = prog.ops.get(head as usize) else {
            return false;
        };
        let checked = self.deps_done[r as usize][s.index()] as usize;
        if let Some(k) = op.deps.iter().skip(checked).position(|&d| !self.done(r, d)) {
            self.deps_done[r as usize][s.index()] = (checked + k) as u32;
            return false;
        }
        match op.kind {
            OpKind::Send { peer, tag, .. } => {
                let q = peer.rank_for(self.plan, r);
                if let Some(qs) = self.recvs.remove(&(r, q, tag)) {
                    self.advance(q, qs);
                    self.advance(r, s);
                    true
                } else {
                    self.sends.insert((r, q, tag), s);
                    self.arrived[r as usize][s.index()] = true;
                    false
                }
            }
            OpKind::Recv { peer, tag, .. } => {
                let p = peer.rank_for(self.plan, r);
                if let Some(ps) = self.sends.remove(&(p, r, tag)) {
                    self.advance(p, ps);
                    self.advance(r, s);
                    true
                } else {
                    self.recvs.insert((p, r, tag), s);
                    self.arrived[r as usize][s.index()] = true;
                    false
                }
            }
            OpKind::Collective { group, .. } => {
                let gid = self.plan.group_of(r, group);
                let seq = ix.coll_seq.get(head as usize).copied().unwrap_or(0);
                let size = self.plan.group(gid).members.len();
                let waiting = self.colls.entry((gid, seq)).or_default();
                waiting.push((r, s));
                self.arrived[r as usize][s.index()] = true;
                if waiting.len() < size {
                    return false;
                }
                let all = self.colls.remove(&(gid, seq)).unwrap_or_default();
                for (m, ms) in all {
                    self.advance(m, ms);
                }
                true
            }
            _ => {
                self.advance(r, s);
                true
            }
        }
    }

    fn run_rank(&mut self, r: RankId) {
        loop {
            let mut progressed = false;
            for s in Stream::ALL {
                while self.step(r, s) {
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
    }
}

pub fn dry_run(s: &Schedule, plan: &Plan) -> Result<(), ValidationError> {
    let world = s.world() as usize;
    let mut run = Run {
        s,
        plan,
        idx: s.programs.iter().map(index).collect(),
        ptr: vec![[0; Stream::COUNT]; world],
        arrived: vec![[false; Stream::COUNT]; world],
        deps_done: vec![[0; Stream::COUNT]; world],
        sends: HashMap::new(),
        recvs: HashMap::new(),
        colls: HashMap::new(),
        queue: (0..world as RankId).collect(),
        queued: vec![true; world],
    };
    while let Some(r) = run.queue.pop_front() {
        run.queued[r as usize] = false;
        run.run_rank(r);
    }
    let mut blocked = Vec::new();
    let mut detail = Vec::new();
    for r in 0..world as RankId {
        let (prog, ix) = run.prog(r);
        let stuck: Vec<String> = Stream::ALL
            .iter()
            .filter_map(|&st| {
                let head =
                    ix.on_stream[st.index()].get(run.ptr[r as usize][st.index()] as usize)?;
                let op = prog.ops.get(*head as usize)?;
                Some(format!("{} at op {head} `{}`", st.name(), op.name()))
            })
            .collect();
        if !stuck.is_empty() {
            if blocked.len() < 8 {
                detail.push(format!("rank {r}: {}", stuck.join(", ")));
            }
            blocked.push(r);
        }
    }
    if blocked.is_empty() {
        return Ok(());
    }
    if blocked.len() > 8 {
        detail.push(format!("and {} more rank(s)", blocked.len() - 8));
    }
    Err(ValidationError::Deadlock {
        blocked,
        detail: detail.join("; "),
    })
}
