//! Interleaved 1F1B (Megatron's virtual pipeline): several chunks per stage, taken in turn.

use super::one_f_one_b::one_f_one_b;
use super::Slot;
use crate::schedule::ScheduleError;

/// Megatron's interleaved schedule (virtual pipeline): the k-th forward of a stage runs
/// chunk `(k / pp) % vpp` of micro batch `(k / (pp*vpp)) * pp + k % pp`; the k-th backward
/// runs the chunks in reverse. Warm-up is `(pp - stage - 1) * 2 + (vpp - 1) * pp` forwards
/// (`extra` more; all of them when m == pp), then 1F1B, then the remaining backwards.
pub(super) fn interleaved(
    stage: u32,
    pp: u32,
    vpp: u32,
    m: u32,
    extra: u32,
) -> Result<Vec<Slot>, ScheduleError> {
    if vpp == 1 {
        return Ok(one_f_one_b(stage, pp, m, extra));
    }
    if !m.is_multiple_of(pp) {
        return Err(ScheduleError::Unsupported(format!(
            "interleaved-1f1b needs the micro batch count ({m}) to be a multiple of pp ({pp})"
        )));
    }
    let total = u64::from(m) * u64::from(vpp);
    if total > u64::from(u32::MAX) / 2 {
        return Err(ScheduleError::Unsupported(format!(
            "{m} micro batches x {vpp} chunks is too many passes"
        )));
    }
    let total = total as u32;
    let warmup = if m == pp {
        total
    } else {
        ((pp - stage - 1) * 2 + (vpp - 1) * pp)
            .saturating_add(extra)
            .min(total)
    };
    let group = pp * vpp;
    let mb_of = |k: u32| (k / group) * pp + k % pp;
    let fwd_chunk = |k: u32| (k / pp) % vpp;
    let bwd_chunk = |k: u32| vpp - 1 - (k / pp) % vpp;
    let mut out = Vec::with_capacity(2 * total as usize);
    out.extend((0..warmup).map(|k| Slot::f(mb_of(k), fwd_chunk(k))));
    for k in 0..total - warmup {
        let f = warmup + k;
        out.push(Slot::f(mb_of(f), fwd_chunk(f)));
        out.push(Slot::b(mb_of(k), bwd_chunk(k)));
    }
    out.extend((total - warmup..total).map(|k| Slot::b(mb_of(k), bwd_chunk(k))));
    Ok(out)
}
