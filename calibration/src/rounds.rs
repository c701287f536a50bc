//! The transfer benchmarks in rounds spread over a host calibration, and the fastest round
//! kept. The development VM moves between a fast and a slow state for its transfers (a ring
//! step of 9.4-10.6 µs, or 12.1-15.0 µs, with the same bandwidth) for spells of seconds: one
//! calibration in six or seven timed every transfer in the slow state, priced every collective
//! from it, and `tp-pp.toml`'s step then came out 11-23% slow, while the verify's transfer
//! check, seconds later, read the fast state again (docs/journal/2026-11-25-host-verify.md,
//! 2026-11-25). So the transfer benchmarks run [`rounds`] times, at the calibration's start, middle
//! and end, each round is fitted, and the round with the lowest ring latency is kept whole (its
//! samples belong to one state; mixing rounds would fit a line through two). The slow state is
//! other work on the machine, as a benchmark's slow repeats are, and it held 11 rounds in 60: the
//! median of three kept it in three calibrations of twenty (`tp-pp` −13.5% in one), the fastest in
//! none (the same twenty sets re-fitted: `tp-pp` within 5% in 16 of 20 against 13, its range −7.3
//! .. +7.0% against −13.5 .. +5.9, the other scenarios' medians within 0.3 points). The rounds set
//! aside stay in the samples file.

use crate::bench::{CommSamples, Mode, OverlapSamples, Samples};
use crate::host::{self, HostFits};
use crate::CalibError;

/// Rounds of the transfer benchmarks per calibration (one in the tests' tiny mode).
pub fn rounds(mode: Mode) -> usize {
    match mode {
        Mode::Full | Mode::Quick => 3,
        Mode::Tiny => 1,
    }
}

/// One round: the transfers and the overlap measurement `bench::comm::comm` returns.
pub type Round = (Vec<CommSamples>, OverlapSamples);

/// The index of the round to keep given each round's ring latency: the fastest (the earliest
/// of equals). `None` for no rounds.
pub fn fastest_index(latencies_ns: &[f64]) -> Option<usize> {
    (0..latencies_ns.len())
        .min_by(|&a, &b| latencies_ns[a].total_cmp(&latencies_ns[b]).then(a.cmp(&b)))
}

/// `samples` with the fastest round's transfers, its fits, and a note when there was a choice.
/// Only each round's ring fit is made to choose; the whole fit once, of the round kept. A
/// round whose ring cannot be fitted is never kept over one that can.
pub fn keep_fastest(
    mut samples: Samples,
    mut rounds: Vec<Round>,
    cores: u32,
) -> Result<(Samples, HostFits, Option<String>), CalibError> {
    let latencies: Vec<f64> = rounds
        .iter()
        .map(|(comm, _)| host::ring_latency_ns(&samples, comm, cores).unwrap_or(f64::INFINITY))
        .collect();
    let keep = fastest_index(&latencies)
        .ok_or_else(|| CalibError::Bench("no round of transfer benchmarks ran".into()))?;
    let note = (rounds.len() > 1).then(|| {
        let each: Vec<String> = latencies.iter().map(|l| format!("{:.1}", l / 1e3)).collect();
        format!(
            "the transfer benchmarks ran in {} rounds spread over the calibration, with ring latencies of {} us per step; the profile keeps the fastest round ({:.1} us)",
            rounds.len(),
            each.join(", "),
            latencies[keep] / 1e3
        )
    });
    let (comm, overlap) = rounds.remove(keep);
    samples.comm = comm;
    samples.overlap = Some(overlap);
    // The others, in the order they ran.
    samples.comm_rounds_set_aside = rounds.into_iter().map(|(c, _)| c).collect();
    let fits = host::fit_all(&samples, cores)?;
    Ok((samples, fits, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_round_is_kept_and_slow_ones_set_aside() {
        assert_eq!(fastest_index(&[10.1e3, 15.0e3, 10.3e3]), Some(0));
        assert_eq!(fastest_index(&[15.0e3, 10.3e3, 10.1e3]), Some(2));
        // Two slow rounds of three: the fast one is still kept.
        assert_eq!(fastest_index(&[15.0e3, 10.1e3, 14.0e3]), Some(1));
        // One round is kept; none is none; ties keep the earlier round; a NaN is never kept
        // over a number.
        assert_eq!(fastest_index(&[12.0]), Some(0));
        assert_eq!(fastest_index(&[]), None);
        assert_eq!(fastest_index(&[10.0, 10.0, 10.0]), Some(0));
        assert_eq!(fastest_index(&[f64::NAN, 11.0]), Some(1));
    }
}
