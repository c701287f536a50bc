//! GPipe: every forward of the step before any backward.

use super::Slot;

/// All forwards (chunk by chunk along the model), then all backwards in reverse.
pub(super) fn gpipe(vpp: u32, m: u32) -> Vec<Slot> {
    let mut out = Vec::with_capacity(2 * (vpp * m) as usize);
    for chunk in 0..vpp {
        out.extend((0..m).map(|mb| Slot::f(mb, chunk)));
    }
    for chunk in (0..vpp).rev() {
        out.extend((0..m).map(|mb| Slot::b(mb, chunk)));
    }
    out
}
