//! 1F1B (PipeDream-flush, Megatron's non-interleaved schedule): warm-up forwards, then one
//! forward and one backward alternately.

use super::Slot;

/// PipeDream-flush / Megatron non-interleaved: `pp - stage - 1` warm-up forwards (`extra`
/// more), then one forward and one backward alternately, then the remaining backwards.
pub(super) fn one_f_one_b(stage: u32, pp: u32, m: u32, extra: u32) -> Vec<Slot> {
    let warmup = (pp - stage - 1).saturating_add(extra).min(m);
    let mut out = Vec::with_capacity(2 * m as usize);
    out.extend((0..warmup).map(|mb| Slot::f(mb, 0)));
    for k in 0..m - warmup {
        out.push(Slot::f(warmup + k, 0));
        out.push(Slot::b(k, 0));
    }
    out.extend((m - warmup..m).map(|mb| Slot::b(mb, 0)));
    out
}
