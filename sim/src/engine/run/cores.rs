//! Where the engine calls the CPU host model (`host_model`, held as [`State`]'s `host`): which
//! core a rank runs on, CPU work of transfers and allocations shared with compute by weight, the
//! compute turns, the cores' idle time for wake-ups, what their caches hold and what a compute op
//! pays for it. The event loop in `run` reads on its own; without a host model (every GPU
//! profile) these reduce to a plain schedule or nothing.

use super::{Slots, State};
use crate::engine::context::Ctx;
use crate::host_model::CoreShare;

impl<S: Slots> State<S> {
    /// The core `rank` runs on when ranks share cores, else a core of its own (its rank).
    pub(super) fn core_of(&self, ctx: &Ctx, rank: u32) -> usize {
        match &self.flows {
            Some(f) if f.cores_shared() => f.cpu_of(ctx.plan, rank) as usize,
            _ => rank as usize,
        }
    }

    /// The waiting within stretched spans on shared cores (`host_model::share`), when kept.
    #[inline]
    pub(super) fn share_mut(&mut self) -> Option<&mut CoreShare> {
        self.host.as_mut().and_then(|h| h.share.as_mut())
    }

    /// The host model's hand-off (`host_model::HostRun::handoff_ns`); zero without one.
    #[inline]
    pub(super) fn handoff_ns(&self) -> u64 {
        self.host.as_ref().map_or(0, |h| h.handoff_ns)
    }

    /// A compute op of `rank` started (`started`) or finished: its core's idle time restarts
    /// (only tracked when the profile prices wake-ups, `host_model::wake`).
    pub(super) fn core_activity(&mut self, ctx: &Ctx, rank: u32, started: bool) {
        if self.host.as_ref().is_none_or(|h| h.waking.is_none()) {
            return;
        }
        let core = self.core_of(ctx, rank);
        if let Some((_, idle)) = self.host.as_mut().and_then(|h| h.waking.as_mut()) {
            if started {
                idle.started(core, self.now);
            } else {
                idle.finished(core, self.now);
            }
        }
    }

    /// How long compute op `op` (IR index) of `rank`, priced `price_ns` and starting now, takes
    /// on its core ([`crate::host_model::HostRun::compute_ns`]). Out of line: only host
    /// profiles have a host model.
    #[cold]
    #[inline(never)]
    pub(super) fn host_compute_ns(&mut self, ctx: &Ctx, rank: u32, op: u32, price_ns: u64) -> u64 {
        let core = self.core_of(ctx, rank);
        let program = ctx.prog_of.get(rank as usize).map_or(0, |&p| p as usize);
        let now = self.now;
        self.host.as_mut().map_or(price_ns, |h| {
            h.compute_ns((core, rank), (program, op), now, price_ns)
        })
    }

    /// What a transfer into `ranks` adds for their cores' wake-up (`host_model::wake`): the most
    /// any of them needs, as the transfer waits for every member.
    pub(super) fn wake_ns(&self, ctx: &Ctx, ranks: &[u32]) -> u64 {
        let Some((w, idle)) = self.host.as_ref().and_then(|h| h.waking.as_ref()) else {
            return 0;
        };
        ranks
            .iter()
            .map(|&r| w.extra_ns(idle.idle_ns(self.core_of(ctx, r), self.now)))
            .max()
            .unwrap_or(0)
    }

    /// Work of `dur_ns` on the CPU of each rank in `ranks`, then `latency_ns` off it: the work
    /// shared with compute when the ranks share cores (with `weight`, see
    /// [`Flows::start_cpu_work`]), else simply `dur_ns + latency_ns` long.
    #[inline]
    pub(super) fn run_cpu_work(
        &mut self,
        ctx: &Ctx,
        done: (u32, u32),
        ranks: &[u32],
        (dur_ns, latency_ns): (u64, u64),
        weight: f64,
    ) {
        match &self.flows {
            Some(f) if f.cores_shared() => {
                self.run_shared_cpu_work(ctx, done, ranks, (dur_ns, latency_ns), weight)
            }
            _ => self.schedule(dur_ns.saturating_add(latency_ns), done.0, done.1),
        }
    }

    /// [`State::run_cpu_work`] on cores shared with compute (kept out of line: the common
    /// path above is a plain schedule).
    #[inline(never)]
    pub(super) fn run_shared_cpu_work(
        &mut self,
        ctx: &Ctx,
        done: (u32, u32),
        ranks: &[u32],
        (dur_ns, latency_ns): (u64, u64),
        weight: f64,
    ) {
        let Some(f) = self.flows.as_ref() else {
            return;
        };
        let cpus: Vec<u32> = ranks.iter().map(|&r| f.cpu_of(ctx.plan, r)).collect();
        // Work of a thread other than the compute thread (weight 1) takes the core from a
        // compute op that holds it.
        if weight >= 1.0 && dur_ns > 0 {
            self.switch_cost(&cpus);
        }
        if let Some(f) = self.flows.as_mut() {
            if let Some((d, delay_ns)) =
                f.start_cpu_work(self.now, done, &cpus, (dur_ns, latency_ns), weight)
            {
                self.schedule(delay_ns, d.0, d.1);
            }
        }
    }

    /// Work of another thread starts on `cpus`: a compute op holding one of those cores loses
    /// it and, when that work is done, its thread must wake and get the core back, as a thread
    /// handed an op by another does (`handoff_ns`). The runtime's traces of `tp-pp.toml` show
    /// a core idle 5-9 µs between another thread's op and a compute op, 20-30 times a step
    /// (docs/journal/2026-11-validation-history.md, 2026-11-24). The op's remaining work grows by
    /// the hand-off, once per core.
    fn switch_cost(&mut self, cpus: &[u32]) {
        let Some(host) = self.host.as_ref() else {
            return;
        };
        let (Some(turns), Some(f)) = (host.turns.as_ref(), self.flows.as_mut()) else {
            return;
        };
        if host.handoff_ns == 0 {
            return;
        }
        for (i, &c) in cpus.iter().enumerate() {
            if cpus[..i].contains(&c) {
                continue;
            }
            if let Some((_, slot, s)) = turns.holder(c as usize) {
                let flow_slot = slot as usize * super::STREAMS + usize::from(s);
                f.add_compute_work(self.now, flow_slot, host.handoff_ns as f64);
            }
        }
    }

    /// The compute op of `rank` holding its core finished: the next waiting one takes the core
    /// (before the finished op's successors ask for it, as a yielding thread goes behind the
    /// threads already waiting). It begins a hand-off later: the thread that runs it was
    /// asleep on its turn and must wake and get the core, as a thread released by another of
    /// its rank's threads does (`handoff_ns`; the runtime's traces show 5-6 µs between one
    /// rank's op and the next rank's on a core, docs/journal/2026-11-validation-history.md,
    /// 2026-11-24).
    pub(super) fn pass_turn(&mut self, ctx: &Ctx, rank: u32) {
        let core = self.core_of(ctx, rank);
        let next = self
            .host
            .as_mut()
            .and_then(|h| h.turns.as_mut())
            .and_then(|t| t.release(core));
        if let Some((next, slot, s)) = next {
            let handoff_ns = self.handoff_ns();
            if handoff_ns == 0 {
                self.begin_compute(ctx, next, slot as usize, s as usize);
            } else {
                debug_assert_eq!(S::slot(ctx, next), slot as usize);
                self.queue.push(
                    self.now.saturating_add(handoff_ns),
                    super::HANDOFF_BIT | next,
                    super::TURN_PASSED | u32::from(s),
                );
            }
        }
    }
}

/// The share of a shared core that work on stream `s` (a compute op, an allocation, a free)
/// gets against a transfer's: the host backend runs the compute stream's ops on its
/// lower-priority compute thread (`compute_weight`, the cost model's), and every other
/// stream's at the process's priority. The one place the engine decides it.
pub(super) fn thread_weight(s: usize, compute_weight: f64) -> f64 {
    if s == crate::schedule::Stream::Compute.index() {
        compute_weight
    } else {
        1.0
    }
}
