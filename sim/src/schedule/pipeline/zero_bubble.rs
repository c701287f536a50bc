//! Zero-bubble (ZB-H1): 1F1B with each backward split into its input- and weight-gradient
//! passes, the latter deferred into the cool-down bubble.

use super::one_f_one_b::one_f_one_b;
use super::{Pass, Slot};

/// ZB-H1 (Qi et al. 2023): the 1F1B order with each backward split into B (input gradient)
/// and W (weight gradient). Stage `s` defers up to `s` W passes, so later stages fill their
/// cool-down bubble with deferred W work, while no stage holds more than `pp` micro batches
/// of activations (what stage 0 holds under 1F1B): the peak is unchanged. Deferred W passes
/// run after the last B.
pub(super) fn zb_h1(stage: u32, pp: u32, m: u32) -> Vec<Slot> {
    let mut out = Vec::with_capacity(3 * m as usize);
    let mut next_w = 0u32;
    let mut done_b = 0u32;
    for slot in one_f_one_b(stage, pp, m, 0) {
        out.push(slot);
        if slot.pass == Pass::Backward {
            done_b += 1;
            if done_b - next_w > stage {
                out.push(Slot::w(next_w, 0));
                next_w += 1;
            }
        }
    }
    out.extend((next_w..m).map(|mb| Slot::w(mb, 0)));
    out
}
