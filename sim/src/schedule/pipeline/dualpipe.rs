//! DualPipe (DeepSeek-V3, arXiv 2412.19437 section 3.2.1): a bidirectional pipeline. The
//! model is cut into `pp` stages and rank `r` holds two of them: stage `r` (chunk 0) for the
//! micro batches fed in at rank 0, and stage `pp - 1 - r` (chunk 1) for those fed in at rank
//! `pp - 1`. Each direction carries half of the micro batches. In the steady phase a forward
//! of one direction runs beside a backward of the other (DualPipe's overlapped F&B pairs),
//! and some backwards are split into input and weight gradients (zero bubble) to fill the
//! start and the end.
//!
//! The order is deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3
//! dualpipe/dualpipe.py `DualPipe.step`, step by step: its "phase 0" on a rank of the first
//! half is the direction fed in at rank 0 (chunk 0), on a rank of the second half the other
//! one (`phase ^= is_in_second_half`); a backward with `enable_zb` leaves its weight
//! gradient in a first-in first-out queue that `_weight_chunk` empties one at a time. Micro
//! batches `0 .. m/2` go in at rank 0, `m/2 .. m` at rank `pp - 1`. `step` asserts that
//! `pp` is even and that the micro batches are even and at least `2 pp`. The gradients of
//! the two copies of each model stage are summed after the passes (`crate::schedule::dp`).
//! Ranks `r` and `pp - 1 - r` run the same order of directions with their chunks swapped,
//! so both copies of a stage reach their last pass at the same place in the order.

use super::{Link, Slot};
use crate::schedule::ScheduleError;
use std::collections::VecDeque;

/// The passes of one rank, built in `DualPipe.step`'s order.
struct Order {
    second_half: bool,
    half_m: u32,
    forwards: [u32; 2],
    backwards: [u32; 2],
    weights: VecDeque<(u32, u32)>,
    out: Vec<Slot>,
    /// The pass that receives the next forward of each phase ahead of it.
    receives_next_forward: [Option<usize>; 2],
}

impl Order {
    /// The chunk a phase names on this rank.
    fn chunk(&self, phase: u32) -> u32 {
        phase ^ u32::from(self.second_half)
    }

    fn forward(&mut self, phase: u32) {
        if let Some(at) = self.receives_next_forward[phase as usize].take() {
            let ahead = (self.out.len() - at) as u32;
            self.out[at].link.receive_ahead = Some(ahead);
        }
        let c = self.chunk(phase);
        let mb = c * self.half_m + self.forwards[c as usize];
        self.forwards[c as usize] += 1;
        self.out.push(Slot::f(mb, c));
    }

    /// A backward; with `zero_bubble` only its input gradient, its weight gradient queued.
    fn backward(&mut self, phase: u32, zero_bubble: bool) {
        let c = self.chunk(phase);
        let mb = c * self.half_m + self.backwards[c as usize];
        self.backwards[c as usize] += 1;
        self.out.push(Slot::b(mb, c));
        if zero_bubble {
            self.weights.push_back((mb, c));
        }
    }

    fn weight(&mut self) {
        if let Some((mb, c)) = self.weights.pop_front() {
            self.out.push(Slot::w(mb, c));
        }
    }

    /// The last pass's send goes after the next pass.
    fn send_after_next(&mut self) {
        if let Some(last) = self.out.last_mut() {
            last.link.send_after_next = true;
        }
    }

    /// The next forward of `phase` is received before the pass pushed next
    /// (`_recv_forward(phase)` ahead of that pass's `_commit_and_wait_comm`).
    fn receive_forward_ahead(&mut self, phase: u32) {
        self.receives_next_forward[phase as usize] = Some(self.out.len());
    }

    /// DualPipe's overlapped pair (`_forward_backward_chunk`): the forward of `phase0` beside
    /// the backward of `phase1`, both inputs received first, both outputs sent after.
    fn forward_backward(&mut self, phase0: u32, phase1: u32) {
        self.forward(phase0);
        if let Some(last) = self.out.last_mut() {
            last.link = Link {
                send_after_next: true,
                receive_ahead: Some(1),
            };
        }
        self.backward(phase1, false);
    }
}

/// Checks DualPipe's requirements: `pp` even, micro batches even and at least `2 pp`.
pub(super) fn check(pp: u32, m: u32) -> Result<(), ScheduleError> {
    if !pp.is_multiple_of(2) || !m.is_multiple_of(2) || m < pp.saturating_mul(2) {
        return Err(ScheduleError::Unsupported(format!(
            "dualpipe needs pp even and the micro batches even and at least 2*pp \
             (pp {pp}, micro batches {m}; deepseek-ai/DualPipe dualpipe.py asserts both)"
        )));
    }
    Ok(())
}

/// The order of passes of rank `rank` of `pp` for `m` micro batches (`m/2` per direction).
pub(super) fn dualpipe(rank: u32, pp: u32, m: u32) -> Result<Vec<Slot>, ScheduleError> {
    check(pp, m)?;
    let half_ranks = pp / 2;
    let half_rank = rank.min(pp - 1 - rank);
    let mut o = Order {
        second_half: rank >= half_ranks,
        half_m: m / 2,
        forwards: [0; 2],
        backwards: [0; 2],
        weights: VecDeque::new(),
        out: Vec::with_capacity(3 * m as usize),
        receives_next_forward: [None; 2],
    };
    let outer = half_ranks - half_rank - 1;
    // Step 1: nF0.
    for _ in 0..outer * 2 {
        o.forward(0);
    }
    // Step 2: nF0F1. Each F1 also receives the next F0's input. Off the two middle ranks
    // the F0's output is sent after the F1; on them, the last F1's after the next F0.
    let middle = rank + 1 == half_ranks || rank == half_ranks;
    for i in 0..=half_rank {
        o.forward(0);
        if !middle {
            o.send_after_next();
        }
        o.receive_forward_ahead(0);
        o.forward(1);
        if middle && i == half_rank {
            o.send_after_next();
        }
    }
    // Step 3: nB1W1F1, zero bubble; each W also receives the next F1's input.
    for _ in 0..outer {
        o.backward(1, true);
        o.receive_forward_ahead(1);
        o.weight();
        o.forward(1);
    }
    // Step 4, the main step: nF0B1F1B0.
    for i in 0..(m / 2 + half_rank + 1 - pp) {
        if i == 0 && middle {
            // Not overlapped: the backward's input is received after the forward, the
            // forward's output sent after the backward.
            o.forward(0);
            o.send_after_next();
            o.backward(1, false);
        } else {
            o.forward_backward(0, 1);
        }
        o.forward_backward(1, 0);
    }
    // Step 5: nB1F1B0.
    for _ in 0..outer {
        o.backward(1, false);
        o.forward_backward(1, 0);
    }
    // Step 6: nB1B0, the second half of them zero bubble.
    let step_6 = half_rank + 1;
    let mut zero_bubble = false;
    for i in 0..step_6 {
        if i == step_6 / 2 && !half_rank.is_multiple_of(2) {
            zero_bubble = true;
        }
        o.backward(1, zero_bubble);
        if i == step_6 / 2 && half_rank.is_multiple_of(2) {
            zero_bubble = true;
        }
        o.backward(0, zero_bubble);
    }
    // Step 7: nWB0, zero bubble.
    for _ in 0..outer {
        o.weight();
        o.backward(0, true);
    }
    // Step 8: nW, the `half_rank + 1` weight gradients step 6 queued.
    while !o.weights.is_empty() {
        o.weight();
    }
    Ok(o.out)
}
