//! Deadlock diagnosis: when the event queue runs dry with ops left, say which ranks are stuck,
//! on which op at the head of each stream, and what each op is waiting for, so that a broken
//! generator can be fixed from the message alone.

use super::compile::CKind;
use super::run::{Ctx, Slots, State, STARTED};
use crate::schedule::Stream;
use serde::Serialize;
use std::fmt;

/// At most this many ranks are described; the rest are counted.
pub const MAX_DESCRIBED_RANKS: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockedHead {
    pub stream: Stream,
    pub op: u32,
    pub name: String,
    pub waiting_for: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockedRank {
    pub rank: u32,
    /// One entry per non-empty stream.
    pub heads: Vec<BlockedHead>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Deadlock {
    /// Simulated time when nothing could move any more.
    pub time_ns: u64,
    /// How many ranks still had ops.
    pub blocked_ranks: u32,
    /// The first few of them, by rank.
    pub ranks: Vec<BlockedRank>,
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deadlock at t = {} ns: {} rank(s) cannot finish",
            self.time_ns, self.blocked_ranks
        )?;
        for r in &self.ranks {
            write!(f, "\n  rank {}:", r.rank)?;
            for h in &r.heads {
                write!(
                    f,
                    "\n    [{}] op {} \"{}\" waits for {}",
                    h.stream.name(),
                    h.op,
                    h.name,
                    h.waiting_for
                )?;
            }
        }
        let hidden =
            self.blocked_ranks as usize - self.ranks.len().min(self.blocked_ranks as usize);
        if hidden > 0 {
            write!(f, "\n  ... and {hidden} more rank(s)")?;
        }
        Ok(())
    }
}

pub(crate) fn diagnose<S: Slots>(ctx: &Ctx, st: &State<S>) -> Deadlock {
    let blocked: Vec<usize> = ctx
        .active
        .iter()
        .zip(&st.ranks)
        .filter(|(_, x)| x.remaining > 0)
        .map(|(&r, _)| r as usize)
        .collect();
    let ranks = blocked
        .iter()
        .take(MAX_DESCRIBED_RANKS)
        .map(|&r| BlockedRank {
            rank: r as u32,
            heads: (0..Stream::COUNT)
                .filter_map(|s| describe_head(ctx, st, r, s))
                .collect(),
        })
        .collect();
    Deadlock {
        time_ns: st.now,
        blocked_ranks: blocked.len() as u32,
        ranks,
    }
}

/// The head op of stream `s` of rank `r`, if the stream still has ops.
fn head<S: Slots>(ctx: &Ctx, st: &State<S>, r: usize, s: usize) -> Option<u32> {
    let ss = st.ranks.get(ctx.slot(r as u32))?.streams.get(s)?;
    let prog = ctx.prog(r);
    if ss.cursor >= *prog.stream_start.get(s + 1)? {
        return None;
    }
    Some(ss.cursor)
}

fn describe_head<S: Slots>(ctx: &Ctx, st: &State<S>, r: usize, s: usize) -> Option<BlockedHead> {
    let op_idx = head(ctx, st, r, s)?;
    let prog = ctx.prog(r);
    let op = prog.ops.get(op_idx as usize)?;
    let started = started(ctx, st, r, s);
    let waiting_for = if !started {
        let slot = ctx.slot(r as u32);
        match prog
            .dep_at_of(op)
            .iter()
            .map(|at| at.slot)
            .find(|&d| !st.is_done(prog, slot, d))
        {
            Some(d) => {
                let ds = prog.ops.get(d as usize).map_or(0, |o| o.stream as usize);
                format!(
                    "op {} \"{}\" on stream {}",
                    prog.index_of(d),
                    ctx.op_name(r, d),
                    Stream::ALL[ds].name()
                )
            }
            None => "nothing (ready but not started: engine bug)".to_string(),
        }
    } else {
        match op.kind {
            CKind::P2p {
                send, peer, tag, ..
            } => {
                let other = ctx.peers[r][peer as usize];
                if send {
                    format!("rank {other} to post a receive with tag {tag}")
                } else {
                    format!("rank {other} to post a send with tag {tag}")
                }
            }
            CKind::Collective {
                group_kind, seq, ..
            } => {
                let gk = group_kind as usize;
                let g = ctx.group_of[gk * ctx.world + r];
                let group = ctx.plan.group(g);
                let missing: Vec<u32> = group
                    .members
                    .iter()
                    .copied()
                    .filter(|&m| !arrived(ctx, st, m as usize, gk, seq))
                    .collect();
                format!(
                    "collective #{seq} on {:?} group {g}: {} of {} members missing: {}",
                    group.kind,
                    missing.len(),
                    group.members.len(),
                    list_ranks(&missing)
                )
            }
            _ => "its own completion (engine bug)".to_string(),
        }
    };
    Some(BlockedHead {
        stream: Stream::ALL[s],
        op: prog.index_of(op_idx),
        name: ctx.op_name(r, op_idx),
        waiting_for,
    })
}

/// Member `m` has reached its `seq`-th collective on group kind `gk`.
fn arrived<S: Slots>(ctx: &Ctx, st: &State<S>, m: usize, gk: usize, seq: u32) -> bool {
    let prog = ctx.prog(m);
    let Some(&op) = prog.coll_ops[gk].get(seq as usize) else {
        return false;
    };
    let Some(s) = prog.ops.get(op as usize).map(|o| o.stream as usize) else {
        return false;
    };
    head(ctx, st, m, s) == Some(op) && started(ctx, st, m, s)
}

fn started<S: Slots>(ctx: &Ctx, st: &State<S>, r: usize, s: usize) -> bool {
    st.ranks
        .get(ctx.slot(r as u32))
        .and_then(|x| x.streams.get(s))
        .is_some_and(|x| x.blocked_on == STARTED)
}

fn list_ranks(ranks: &[u32]) -> String {
    const SHOW: usize = 8;
    let mut s = ranks
        .iter()
        .take(SHOW)
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if ranks.len() > SHOW {
        s.push_str(&format!(", ... ({} more)", ranks.len() - SHOW));
    }
    format!("[{s}]")
}
