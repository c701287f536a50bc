//! After the step: each simulated rank's memory timeline, replayed from the ends of the ops
//! its allocs and frees waited on ([`crate::engine::memory::replay`]), and what the trace
//! shows of it: an event for each alloc and free the engine did not run, the memory samples,
//! and the device bytes live when each traced op ended.

use super::Ctx;
use super::{Slots, State};
use crate::engine::compile::When;
use crate::engine::memory::{replay, Applied};
use crate::engine::SimError;
use crate::schedule::Stream;
use crate::trace::{MemorySample, TraceEvent};

impl<S: Slots> State<S> {
    pub(super) fn replay_memory(&mut self, ctx: &Ctx) -> Result<(), Box<SimError>> {
        if !ctx.opts.memory {
            return Ok(());
        }
        let mut scratch = (Vec::new(), Vec::new());
        // Per program, the last untraced slot replayed: ranks of one program whose ops ended
        // at the same times (the peers of a deterministic step) have the same timeline.
        let mut last_of: Vec<Option<usize>> = vec![None; ctx.progs.len()];
        let tracing = self.trace.is_some();
        // Per traced slot, the effects in the order applied.
        let mut effects: Vec<Vec<Applied>> = Vec::new();
        if tracing {
            effects.resize_with(ctx.active.len(), Vec::new);
        }
        let capacity = ctx.opts.memory_capacity_bytes;
        for (slot, &rank) in ctx.active.iter().enumerate() {
            let prog = ctx.prog(rank as usize);
            let base = self.ranks.get(slot).map_or(0, |r| r.record_base as usize);
            let ends = self
                .ends
                .get(base..base + prog.recorded as usize)
                .unwrap_or(&[]);
            let traced = tracing && Self::traces(&self.traced, slot);
            let program = ctx.prog_of.get(rank as usize).copied().unwrap_or(0) as usize;
            if !traced {
                let same = last_of.get(program).copied().flatten().filter(|&other| {
                    let b = self.ranks.get(other).map_or(0, |r| r.record_base as usize);
                    self.ends.get(b..b + prog.recorded as usize) == Some(ends)
                });
                if let Some(other) = same {
                    if let Some(m) = self.mem.get(other).copied() {
                        if let Some(mine) = self.mem.get_mut(slot) {
                            *mine = m;
                        }
                        continue;
                    }
                }
                if let Some(l) = last_of.get_mut(program) {
                    *l = Some(slot);
                }
            }
            let applied = match traced {
                true => effects.get_mut(slot),
                false => None,
            };
            let mem = replay(prog, ends, capacity, &mut scratch, applied).map_err(|e| {
                Box::new(SimError::FreeBeforeAlloc {
                    rank,
                    op: e.free,
                    alloc: e.alloc,
                    name: ctx.ir_op_name(rank, e.free),
                })
            })?;
            if let Some(m) = self.mem.get_mut(slot) {
                *m = mem;
            }
            let Some(trace) = self.trace.as_mut().filter(|_| traced) else {
                continue;
            };
            if let Some(applied) = effects.get(slot) {
                for a in applied.iter().filter(|a| a.changed) {
                    trace.memory.push(MemorySample {
                        rank,
                        time_ns: a.time_ns,
                        bytes: a.live,
                    });
                }
            }
            // The allocs and frees the engine did not run, as instant events at their times
            // (which the replay left in `scratch.0`, by position in `mem_ops`).
            for (m, &t) in prog.mem_ops.iter().zip(&scratch.0) {
                if matches!(m.when, When::After { .. }) {
                    trace.events.push(TraceEvent {
                        rank,
                        stream: Stream::ALL[m.stream as usize % Stream::COUNT],
                        op: m.index,
                        start_ns: t,
                        end_ns: t,
                        bytes: m.effect.trace_bytes(),
                        flops: 0,
                        mem_bytes: 0,
                        issued_ns: Some(t),
                        solo_ns: None,
                    });
                }
            }
        }
        if let Some(trace) = self.trace.as_mut() {
            // Device bytes live when each op ended: after every effect up to its time and,
            // at its time, up to it in program order.
            for e in &mut trace.events {
                let slot = S::slot(ctx, e.rank);
                let Some(applied) = effects.get(slot) else {
                    continue;
                };
                let n = applied.partition_point(|a| (a.time_ns, a.op) <= (e.end_ns, e.op));
                e.mem_bytes = n
                    .checked_sub(1)
                    .and_then(|i| applied.get(i))
                    .map_or(0, |a| a.total);
            }
            trace.events.sort_by_key(|e| e.end_ns);
            trace.memory.sort_by_key(|m| m.time_ns);
        }
        Ok(())
    }
}
