//! Building the run's state from the compiled programs, and reading the step's result out
//! of it once the event loop is done: the two ends of a run, split from `run`, whose event
//! loop and per-op handlers read on their own.

use super::*;
use crate::host_model::{Agings, CoreIdle, CoreShare, Jitter, Residencies, Turns};
use std::cell::RefCell;

/// The per-rank vectors and the queue of a finished run, which the next run on this thread
/// refills instead of allocating: `twin simulate --samples` and `twin bench` run the same
/// 16,384-rank step again and again, and fresh vectors each time cost the kernel zeroing
/// megabytes of new pages. Every vector is refilled before use, so a run does not depend on
/// what ran before (`sample_steps` draws the same samples on any thread, tested in
/// `variability`).
#[derive(Default)]
struct Spare {
    ranks: Vec<RankState>,
    partner: Vec<(u32, u32)>,
    ends: Vec<u64>,
    mem: Vec<RankMem>,
    pending: Vec<Mailbox>,
    rendezvous: Vec<Arrivals>,
    dep_scan: Vec<(u32, u32)>,
    queue: Option<EventQueue>,
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare::default());
}

/// This thread's spare buffers (empty ones where there are none, or on thread teardown).
fn take_spare() -> Spare {
    SPARE
        .try_with(|s| s.try_borrow_mut().map(|mut s| std::mem::take(&mut *s)).ok())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// `v` holding `n` copies of `x`, in its own allocation when that is large enough.
fn refilled<T: Clone>(mut v: Vec<T>, n: usize, x: T) -> Vec<T> {
    v.clear();
    v.resize(n, x);
    v
}

/// `v` holding `n` empty small vectors, the ones it had keeping their room.
fn emptied<A: smallvec::Array>(
    mut v: Vec<smallvec::SmallVec<A>>,
    n: usize,
) -> Vec<smallvec::SmallVec<A>> {
    v.truncate(n);
    for x in v.iter_mut() {
        x.clear();
    }
    v.resize_with(n, smallvec::SmallVec::new);
    v
}

impl<S: Slots> State<S> {
    pub(super) fn new(ctx: &Ctx) -> State<S> {
        let world = ctx.world;
        let slots = ctx.active.len();
        let spare = take_spare();
        let mut ranks = spare.ranks;
        ranks.clear();
        ranks.reserve(slots);
        let mut total_ops = 0usize;
        let traced: Option<Vec<bool>> = ctx.opts.trace_ranks.as_ref().map(|list| {
            ctx.active
                .iter()
                .map(|r| list.binary_search(r).is_ok())
                .collect()
        });
        let mut recorded = 0u32;
        for (slot, &r) in ctx.active.iter().enumerate() {
            let p = ctx.prog(r as usize);
            let mut rs = RankState {
                remaining: p.ops.len() as u32,
                record_base: recorded,
                ..RankState::default()
            };
            recorded = recorded.saturating_add(p.recorded);
            if State::<S>::traces(&traced, slot) {
                total_ops += p.ir_ops as usize;
            }
            for s in 0..STREAMS {
                let (start, end) = (p.stream_start[s], p.stream_start[s + 1]);
                if start < end {
                    rs.waiting |= 1 << s;
                }
                rs.streams[s] = StreamState {
                    start_ns: 0,
                    cursor: start,
                    blocked_on: UNCHECKED,
                };
            }
            ranks.push(rs);
        }
        State {
            now: 0,
            events: 0,
            ranks,
            partner: refilled(spare.partner, slots * STREAMS, (0, 0)),
            // Without a memory replay nothing reads the ends (and `complete` writes none).
            ends: refilled(
                spare.ends,
                if ctx.opts.memory {
                    recorded as usize
                } else {
                    0
                },
                0,
            ),
            mem: refilled(spare.mem, slots, RankMem::default()),
            pending: emptied(spare.pending, slots),
            rendezvous: emptied(spare.rendezvous, slots * GROUP_KINDS),
            queue: match spare.queue {
                Some(mut q) => {
                    q.reset();
                    q
                }
                None => EventQueue::with_capacity(slots * 4),
            },
            instant: VecDeque::with_capacity(64),
            flows: {
                let cores = ctx.cost.shared_cores();
                let slowdown = ctx.cost.overlap_compute_slowdown();
                let f = Flows::new(
                    ctx.net,
                    (cores, ctx.cost.memory_cores()),
                    ctx.plan.node_of(ctx.plan.world.saturating_sub(1)) + 1,
                    slowdown,
                    world * STREAMS,
                );
                (ctx.net.is_some() || f.compute).then_some(f)
            },
            coll_memo: CollectiveMemo::default(),
            p2p_memo: P2pMemo::default(),
            free_ns: ctx.cost.free_ns(),
            // The solver counts a weight of 0 as 1; a measured 0 means "paused while a transfer
            // runs beside it", which a thousandth of the core gives to within a rounding.
            compute_weight: ctx.cost.compute_weight().max(MIN_COMPUTE_WEIGHT),
            p2p_cpu_share: ctx.cost.p2p_cpu_share().clamp(0.0, 1.0),
            op_noise: ctx.opts.op_jitter.and_then(OpNoise::new),
            prefetch: ctx.opts.op_jitter.is_some() || ctx.opts.compute_factors.is_some(),
            host: HostRun::new(HostRun {
                share: ctx.cost.shared_cores().map(|_| CoreShare::new(slots)),
                turns: ctx.cost.shared_cores().map(|_| Turns::default()),
                waking: ctx.cost.wake().map(|w| (w, CoreIdle::default())),
                residency: if ctx.cost.models_operand_residency() {
                    Residencies::new(ctx.schedule.programs.iter(), |c| {
                        ctx.cost.operand_residency(c)
                    })
                } else {
                    None
                },
                aging: if ctx.cost.models_state_aging() {
                    Agings::new(ctx.schedule.programs.iter(), |c| ctx.cost.state_aging(c))
                } else {
                    None
                },
                jitter: ctx
                    .opts
                    .jitter_seed
                    .zip(ctx.cost.interruptions())
                    .map(|(seed, model)| Jitter::new(seed, model)),
                handoff_ns: ctx.cost.handoff_ns(),
            }),
            slots: std::marker::PhantomData,
            trace: ctx.opts.trace.then(|| Trace {
                events: Vec::with_capacity(total_ops),
                memory: Vec::new(),
            }),
            traced,
            issued_ns: ctx.opts.trace.then(|| vec![0; slots * STREAMS]),
            dep_scan: refilled(spare.dep_scan, slots * STREAMS, (u32::MAX, 0)),
        }
    }

    /// Hands the per-rank vectors and the queue to this thread's next run.
    fn recycle(&mut self) {
        let spare = Spare {
            ranks: std::mem::take(&mut self.ranks),
            partner: std::mem::take(&mut self.partner),
            ends: std::mem::take(&mut self.ends),
            mem: std::mem::take(&mut self.mem),
            pending: std::mem::take(&mut self.pending),
            rendezvous: std::mem::take(&mut self.rendezvous),
            dep_scan: std::mem::take(&mut self.dep_scan),
            queue: Some(std::mem::take(&mut self.queue)),
        };
        let _ = SPARE.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                *s = spare;
            }
        });
    }

    /// The step's result: every rank's accounts closed at the step's end (waiting on shared
    /// cores moved to idle time, `host_model::share`), expanded to every rank when collapsed.
    pub(super) fn finish(mut self, ctx: &Ctx) -> SimResult {
        let step_time_ns = self
            .ranks
            .iter()
            .map(|r| r.acct.finish_ns)
            .max()
            .unwrap_or(0);
        let share = self.host.as_mut().and_then(|h| h.share.take());
        let simulated: Vec<RankStats> = self
            .ranks
            .iter_mut()
            .zip(&self.mem)
            .zip(&ctx.active)
            .enumerate()
            .map(|(slot, ((rs, m), &rank))| {
                let r = rank as usize;
                let a = &mut rs.acct;
                a.flush(step_time_ns);
                debug_assert_eq!(a.compute_ns + a.comm_ns + a.idle_ns, step_time_ns);
                let [compute_ns, comm_ns, idle_ns] = match &share {
                    Some(sh) => sh.apply(slot, a.compute_ns, a.comm_ns, a.idle_ns),
                    None => [a.compute_ns, a.comm_ns, a.idle_ns],
                };
                RankStats {
                    rank,
                    finish_ns: a.finish_ns,
                    compute_busy_ns: compute_ns,
                    comm_exposed_ns: comm_ns,
                    idle_ns,
                    flops: ctx.prog(r).flops,
                    model_flops: ctx.prog(r).model_flops,
                    model_attention_flops: ctx.prog(r).model_attention_flops,
                    peak_memory_bytes: m.peak,
                    peak_time_ns: m.peak_ns,
                    peak_op: m.peak_op,
                    memory_at_peak: m.at_peak,
                    host_memory_peak_bytes: m.host_peak,
                    over_capacity_op: m.over_op,
                    over_capacity_time_ns: m.over_ns,
                    end_memory_bytes: m.end_bytes(),
                }
            })
            .collect();
        let ranks = match &ctx.collapse {
            Some(c) => c.expand(&simulated),
            None => simulated,
        };
        self.recycle();
        SimResult {
            step_time_ns,
            events: self.events,
            collapsed: ctx.collapse.is_some(),
            ranks,
            trace: self.trace,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{OpJitter, SimOptions, SimResult};
    use crate::testing::small_scenario;
    use crate::Staged;

    fn run(s: &crate::scenario::Scenario, opts: &SimOptions) -> SimResult {
        let staged = Staged::new(s).unwrap();
        staged.simulate(opts).unwrap()
    }

    /// Runs of every rank on one thread refill the vectors and queue the run before left
    /// (larger and smaller worlds, with and without per-op noise, collapsed between), and
    /// each gives what it gives on a fresh thread.
    #[test]
    fn a_run_after_others_on_its_thread_equals_a_fresh_one() {
        let full = SimOptions::default();
        let noisy = SimOptions {
            op_jitter: Some(OpJitter { seed: 3, cv: 0.2 }),
            ..SimOptions::default()
        };
        let collapsed = SimOptions {
            collapse: true,
            ..SimOptions::default()
        };
        let runs = [
            (small_scenario(2, 2, 4, 8), &full),
            (small_scenario(2, 2, 2, 4), &noisy),
            (small_scenario(1, 4, 2, 8), &full),
            (small_scenario(2, 2, 4, 8), &collapsed),
            (small_scenario(2, 4, 4, 8), &noisy),
            (small_scenario(2, 2, 2, 4), &full),
        ];
        std::thread::scope(|sc| {
            sc.spawn(|| {
                for (i, (s, opts)) in runs.iter().enumerate() {
                    let got = run(s, opts);
                    let fresh = std::thread::scope(|f| f.spawn(|| run(s, opts)).join()).unwrap();
                    assert_eq!(got, fresh, "run {i}");
                    assert!(got.events > 0, "run {i}");
                }
            })
            .join()
            .unwrap();
        });
    }
}
