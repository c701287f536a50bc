//! The host model's state during one engine run, held by the engine as one `Option`: `None` for
//! every GPU profile, so a GPU scenario never calls into the host model. Each part is switched
//! on by its own profile parameter; the engine says which core an op runs on and when, and this
//! says what the machine does to it.

use super::{Agings, CoreIdle, CoreShare, Jitter, Residencies, Turns, Wake};

/// The parts of the host model one run uses (each `None` when the profile leaves it out).
pub(crate) struct HostRun {
    /// Waiting within stretched spans on shared cores (`host_model::share`).
    pub share: Option<CoreShare>,
    /// Compute ops taking turns on shared cores (`host_model::turns`).
    pub turns: Option<Turns>,
    /// The profile's wake-up cost and each core's idle time (`host_model::wake`).
    pub waking: Option<(Wake, CoreIdle)>,
    /// GEMM operands evicted from cores' private caches (`host_model::residency`).
    pub residency: Option<Residencies>,
    /// Optimizer state aging in a shared last-level cache (`host_model::aging`).
    pub aging: Option<Agings>,
    /// Interruptions drawn for compute ops (`host_model::jitter`), when a seed asks for them.
    pub jitter: Option<Jitter>,
    /// How long after an op of one of a rank's streams releases the head of another stream the
    /// head starts (the thread that runs it waking); zero: at once.
    pub handoff_ns: u64,
}

impl HostRun {
    /// The run's host model, or `None` when no part is on (every GPU profile).
    pub fn new(parts: HostRun) -> Option<HostRun> {
        let on = parts.share.is_some()
            || parts.turns.is_some()
            || parts.waking.is_some()
            || parts.residency.is_some()
            || parts.aging.is_some()
            || parts.jitter.is_some()
            || parts.handoff_ns != 0;
        on.then_some(parts)
    }

    /// How long compute op `op` (IR index) of `program`, run by `rank` on `core` and priced
    /// `price_ns`, takes when it starts at `now`: its price, the operands other work evicted
    /// from the core's cache, the optimizer state lost since the last update, then the
    /// interruptions drawn over all of that. The op becomes the core's last.
    pub fn compute_ns(
        &mut self,
        (core, rank): (usize, u32),
        (program, op): (usize, u32),
        now: u64,
        price_ns: u64,
    ) -> u64 {
        let reload_ns = self
            .residency
            .as_mut()
            .map_or(0, |r| r.start(core, rank, program, op));
        let aged_ns = self
            .aging
            .as_ref()
            .map_or(0, |a| a.extra_ns(program, op, now));
        let dur = price_ns.saturating_add(reload_ns.saturating_add(aged_ns));
        match &mut self.jitter {
            Some(j) => dur.saturating_add(j.delay_ns(dur)),
            None => dur,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_model::Interruptions;

    fn off() -> HostRun {
        HostRun {
            share: None,
            turns: None,
            waking: None,
            residency: None,
            aging: None,
            jitter: None,
            handoff_ns: 0,
        }
    }

    #[test]
    fn a_run_without_any_part_has_no_host_model() {
        assert!(HostRun::new(off()).is_none());
        assert!(HostRun::new(HostRun {
            handoff_ns: 5_000,
            ..off()
        })
        .is_some());
        assert!(HostRun::new(HostRun {
            turns: Some(Turns::default()),
            ..off()
        })
        .is_some());
    }

    #[test]
    fn compute_time_is_the_price_plus_what_the_parts_add() {
        let mut plain = off();
        assert_eq!(plain.compute_ns((0, 0), (0, 0), 1_000, 40_000), 40_000);
        let model = Interruptions {
            rate_per_ns: 1e-4,
            mean_ns: 5_000.0,
        };
        let mut jittery = HostRun {
            jitter: Some(Jitter::new(9, model)),
            ..off()
        };
        let mut draws = Jitter::new(9, model);
        for _ in 0..20 {
            let expected = 40_000 + draws.delay_ns(40_000);
            assert_eq!(jittery.compute_ns((0, 0), (0, 0), 0, 40_000), expected);
        }
    }
}
