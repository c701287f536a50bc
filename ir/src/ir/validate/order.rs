//! Happens-before inside one program. With deps pointing backwards and each stream running
//! in order, the ops that must finish before op `i` are, on every stream, a prefix of that
//! stream; so one "latest ancestor per stream" vector per op (a vector clock) answers "must
//! `a` finish before `b`?" in O(1). Used to prove that every backward runs after its forward
//! and every free after its allocation. O(ops x streams).

use super::ValidationError;
use crate::ir::{OpKind, Phase, Program, Stream};
use std::collections::BTreeMap;

/// `clock[i][s]` = 1 + the largest op index on stream `s` that finishes before op `i` ends
/// (op `i` included), 0 if none.
fn clocks(prog: &Program) -> Vec<[u32; Stream::COUNT]> {
    let mut out: Vec<[u32; Stream::COUNT]> = Vec::with_capacity(prog.ops.len());
    let mut last_on: [Option<usize>; Stream::COUNT] = [None; Stream::COUNT];
    for (i, op) in prog.ops.iter().enumerate() {
        let mut c = [0u32; Stream::COUNT];
        let preds = op
            .deps
            .iter()
            .map(|&d| d as usize)
            .chain(last_on[op.stream.index()]);
        for p in preds {
            if let Some(pc) = out.get(p) {
                for s in 0..Stream::COUNT {
                    c[s] = c[s].max(pc[s]);
                }
            }
        }
        c[op.stream.index()] = i as u32 + 1;
        last_on[op.stream.index()] = Some(i);
        out.push(c);
    }
    out
}

fn before(clock: &[[u32; Stream::COUNT]], prog: &Program, a: usize, b: usize) -> bool {
    match (prog.ops.get(a), clock.get(b)) {
        (Some(op), Some(cb)) => cb[op.stream.index()] > a as u32,
        _ => false,
    }
}

/// Every backward of (micro batch, chunk) has a forward of the same (micro batch, chunk)
/// among what must finish before it; every free comes after its allocation.
pub fn check_order(prog: &Program, rank: u32) -> Result<(), ValidationError> {
    let clock = clocks(prog);
    // Earliest forward of each (mb, chunk) on each stream: if any forward on a stream is an
    // ancestor, the earliest one is.
    let mut forwards: BTreeMap<(u32, u32), [Option<usize>; Stream::COUNT]> = BTreeMap::new();
    let mut allocs: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, op) in prog.ops.iter().enumerate() {
        match &op.kind {
            OpKind::Compute(c) => {
                let l = op.label;
                match c.phase {
                    Phase::Forward => {
                        if let Some(mb) = l.microbatch {
                            let e = forwards.entry((mb, l.chunk)).or_default();
                            let slot = &mut e[op.stream.index()];
                            if slot.is_none() {
                                *slot = Some(i);
                            }
                        }
                    }
                    Phase::Backward | Phase::BackwardInput | Phase::BackwardWeight => {
                        let err = |mb: u32| ValidationError::BackwardBeforeForward {
                            rank,
                            index: i as u32,
                            op: op.name(),
                            microbatch: mb,
                            chunk: l.chunk,
                        };
                        let Some(mb) = l.microbatch else {
                            return Err(err(u32::MAX));
                        };
                        let ok = forwards
                            .get(&(mb, l.chunk))
                            .map(|per| per.iter().flatten().any(|&f| before(&clock, prog, f, i)))
                            .unwrap_or(false);
                        if !ok {
                            return Err(err(mb));
                        }
                    }
                    _ => {}
                }
            }
            OpKind::Alloc { tag, .. } => {
                allocs.insert(*tag, i);
            }
            OpKind::Free { tag } => {
                let ok = allocs
                    .get(tag)
                    .map(|&a| before(&clock, prog, a, i))
                    .unwrap_or(false);
                if !ok {
                    return Err(ValidationError::Structure {
                        rank,
                        index: i as u32,
                        op: op.name(),
                        what: format!("may run before allocation #{tag} is made"),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}
