//! One Monte Carlo trial: the run's wall clock from 0 to the horizon, jumping from event to
//! event (failure, checkpoint commit, recovery, slowdown edge) rather than step by step. Work
//! is counted in nanoseconds of full-speed compute; a checkpoint cycle is `interval_ns` of
//! work followed by `blocking_ns` of checkpoint stall, and a cycle's work is safe once its
//! checkpoint commits (at the end of the stall when synchronous, `write_ns` after the
//! snapshot when asynchronous).

use super::{Cause, Model};
use crate::rng::Rng;

/// Where the wall time of one trial went, in nanoseconds, plus failure counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Full-speed work that was kept (committed, or in progress at the horizon).
    pub work_ns: u64,
    /// Wall time spent computing work that was kept (includes slowdowns).
    pub useful_wall_ns: u64,
    pub checkpoint_ns: u64,
    /// Wall time of computation lost to failures (redone later).
    pub rework_ns: u64,
    pub detection_ns: u64,
    pub restart_ns: u64,
    pub reload_ns: u64,
    /// Failures by cause, in [`Cause::ALL`] order.
    pub failures: [u64; 4],
    /// Wall time until the first failure (the horizon when none).
    pub first_failure_ns: u64,
}

/// A bound on slowdown windows per trial, so absurd rates cannot exhaust memory (callers
/// reject such rates first; see `FaultsError::TooManyEvents`).
const MAX_WINDOWS: usize = 1 << 22;

/// Slowdown windows of one trial: non-overlapping, sorted, each with a step-time factor.
struct Slowdowns {
    windows: Vec<(u64, u64, f64)>,
    cursor: usize,
    /// Elastic window (start, end, factor) after a shrink.
    elastic: Option<(u64, u64, f64)>,
}

impl Slowdowns {
    fn draw(model: &Model, rng: &mut Rng) -> Slowdowns {
        let mut raw: Vec<(u64, u64, f64)> = Vec::new();
        for src in &model.slowdowns {
            if src.rate_per_ns <= 0.0 || src.factor <= 1.0 {
                continue;
            }
            let mut t = 0.0f64;
            loop {
                t += rng.exponential(1.0 / src.rate_per_ns);
                if t.is_nan() || t >= model.horizon_ns as f64 || raw.len() >= MAX_WINDOWS {
                    break;
                }
                let start = t as u64;
                raw.push((start, start.saturating_add(src.duration_ns), src.factor));
            }
        }
        raw.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut windows: Vec<(u64, u64, f64)> = Vec::with_capacity(raw.len());
        for w in raw {
            match windows.last_mut() {
                Some(last) if w.0 <= last.1 => {
                    last.1 = last.1.max(w.1);
                    last.2 = last.2.max(w.2);
                }
                _ => windows.push(w),
            }
        }
        Slowdowns {
            windows,
            cursor: 0,
            elastic: None,
        }
    }

    /// The factor at `t` and the time it next changes.
    fn at(&mut self, t: u64) -> (f64, u64) {
        while self.windows.get(self.cursor).is_some_and(|w| w.1 <= t) {
            self.cursor += 1;
        }
        let (mut f, mut next) = match self.windows.get(self.cursor) {
            Some(&(s, e, f)) if s <= t => (f, e),
            Some(&(s, _, _)) => (1.0, s),
            None => (1.0, u64::MAX),
        };
        if let Some((s, e, ef)) = self.elastic {
            if t < s {
                next = next.min(s);
            } else if t < e {
                f *= ef;
                next = next.min(e);
            }
        }
        (f, next)
    }

    /// Wall time at which `work_ns` of full-speed work started at `t` finishes.
    fn advance(&mut self, mut t: u64, work_ns: u64) -> u64 {
        let mut left = work_ns as f64;
        loop {
            let (f, next) = self.at(t);
            if f == 1.0 && next == u64::MAX {
                return t.saturating_add(left.round() as u64);
            }
            let room = next.saturating_sub(t) as f64;
            if left * f <= room {
                return t.saturating_add((left * f).round() as u64);
            }
            left -= room / f;
            t = next;
        }
    }

    /// No slowdown from `t` up to `until`.
    fn clear(&mut self, t: u64, until: u64) -> bool {
        let (f, next) = self.at(t);
        f == 1.0 && next >= until
    }
}

/// A cycle whose checkpoint is written but not yet committed.
#[derive(Clone, Copy)]
struct Pending {
    commit_ns: u64,
    work_ns: u64,
    wall_ns: u64,
    blocking_ns: u64,
}

/// Runs one trial.
pub fn run(model: &Model, rng: &mut Rng) -> Outcome {
    let mut slow = Slowdowns::draw(model, rng);
    let h = model.horizon_ns;
    let mut out = Outcome {
        first_failure_ns: h,
        ..Outcome::default()
    };
    let mut scheduled = model.scheduled_ns.iter().copied().peekable();
    let mut next_random = model.draw_failure(rng, 0);
    let mut pending: Vec<Pending> = Vec::new();
    let mut t = 0u64;
    let tau = model.interval_ns.max(1);
    let period = tau.saturating_add(model.blocking_ns);
    while t < h {
        let next_sched = scheduled.peek().copied().unwrap_or(u64::MAX);
        let fail_at = next_random.min(next_sched);
        let limit = fail_at.min(h);
        // Bulk jump over whole cycles when nothing slows them down.
        if slow.clear(t, limit) && period > 0 {
            let k = (limit - t) / period;
            if k >= 3 {
                let j = k - 2;
                for p in pending.drain(..) {
                    commit(&mut out, p);
                }
                out.work_ns += (j - 1) * tau;
                out.useful_wall_ns += (j - 1) * tau;
                out.checkpoint_ns += (j - 1) * model.blocking_ns;
                t += (j - 1) * period;
                let w_end = t + tau;
                pending.push(Pending {
                    commit_ns: w_end + model.commit_delay_ns,
                    work_ns: tau,
                    wall_ns: tau,
                    blocking_ns: model.blocking_ns,
                });
                t += period;
                continue;
            }
        }
        // One cycle.
        let w_end = slow.advance(t, tau);
        let c_end = w_end.saturating_add(model.blocking_ns);
        let settle = |pending: &mut Vec<Pending>, out: &mut Outcome, now: u64| {
            pending.retain(|p| {
                if p.commit_ns <= now {
                    commit(out, *p);
                    false
                } else {
                    true
                }
            });
        };
        if c_end <= limit {
            settle(&mut pending, &mut out, c_end);
            pending.push(Pending {
                commit_ns: w_end.saturating_add(model.commit_delay_ns),
                work_ns: tau,
                wall_ns: w_end - t,
                blocking_ns: model.blocking_ns,
            });
            settle(&mut pending, &mut out, c_end);
            t = c_end;
            continue;
        }
        if limit == h {
            // Horizon: what is in flight counts as kept (a final checkpoint saves it).
            for p in pending.drain(..) {
                commit(&mut out, p);
            }
            let done_wall = h - t;
            let done_work = if h <= w_end {
                let frac = done_wall as f64 / (w_end - t).max(1) as f64;
                (tau as f64 * frac) as u64
            } else {
                tau
            };
            out.work_ns += done_work;
            out.useful_wall_ns += done_wall.min(w_end - t);
            out.checkpoint_ns += h.saturating_sub(w_end);
            break;
        }
        // A failure at `fail_at` inside this cycle.
        settle(&mut pending, &mut out, fail_at);
        for p in pending.drain(..) {
            out.rework_ns += p.wall_ns;
            out.checkpoint_ns += p.blocking_ns;
        }
        let into = fail_at - t;
        out.rework_ns += into.min(w_end - t);
        out.checkpoint_ns += fail_at.saturating_sub(w_end);
        let mut cause = if next_sched <= next_random {
            scheduled.next();
            Cause::Scheduled
        } else {
            let c = model.draw_cause(rng);
            next_random = model.draw_failure(rng, fail_at);
            c
        };
        let mut at = fail_at;
        // Recovery, restarted by any failure that lands inside it.
        loop {
            out.failures[cause as usize] += 1;
            if out.first_failure_ns == h {
                out.first_failure_ns = at;
            }
            let parts = model.recovery(cause);
            let end = at.saturating_add(parts.iter().sum::<u64>());
            let next_sched = scheduled.peek().copied().unwrap_or(u64::MAX);
            let next = next_random.min(next_sched);
            let stop = next.min(end).min(h);
            charge_recovery(&mut out, parts, stop - at);
            if stop == h || stop == end {
                at = stop;
                break;
            }
            at = next;
            cause = if next_sched <= next_random {
                scheduled.next();
                Cause::Scheduled
            } else {
                let c = model.draw_cause(rng);
                next_random = model.draw_failure(rng, at);
                c
            };
        }
        if let Some((factor, window)) = model.elastic {
            slow.elastic = Some((at, at.saturating_add(window), factor));
        }
        t = at;
    }
    out
}

fn commit(out: &mut Outcome, p: Pending) {
    out.work_ns += p.work_ns;
    out.useful_wall_ns += p.wall_ns;
    out.checkpoint_ns += p.blocking_ns;
}

/// Charges `elapsed` of a recovery to detection, then restart, then reload.
fn charge_recovery(out: &mut Outcome, parts: [u64; 3], elapsed: u64) {
    let mut left = elapsed;
    for (i, part) in parts.iter().enumerate() {
        let take = left.min(*part);
        left -= take;
        match i {
            0 => out.detection_ns += take,
            1 => out.restart_ns += take,
            _ => out.reload_ns += take,
        }
    }
}
