//! The order in which one pipeline stage runs its passes: which forward (F), backward (B) and
//! weight-gradient (W) pass of which micro batch and chunk comes next. This is the whole
//! difference between GPipe, 1F1B, interleaved 1F1B, zero-bubble and DualPipe; everything
//! else (p2p,
//! collectives, memory) is derived from this order by the emitter. Each family's order is a
//! pure function in its own file; [`stage_order`] picks one.

mod dualpipe;
mod gpipe;
mod interleaved;
mod one_f_one_b;
mod zero_bubble;

use crate::scenario::PipelineSchedule;
use crate::schedule::ScheduleError;

/// Kind of pass in a stage's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Forward,
    /// The backward: the full backward, or only the input gradient when the order has a
    /// `Weight` pass of the same micro batch and chunk (zero-bubble, some of DualPipe's).
    Backward,
    /// Zero-bubble weight gradient of an earlier `Backward`.
    Weight,
}

/// The (micro batch, chunk) pairs of `order` whose backward is split into B and a later W:
/// those the order has a weight-gradient pass for (every one under zero-bubble, some under
/// DualPipe). The emitter splits them, and the step bound prices them so.
pub fn split_backwards(order: &[Slot]) -> std::collections::BTreeSet<(u32, u32)> {
    order
        .iter()
        .filter(|s| s.pass == Pass::Weight)
        .map(|s| (s.microbatch, s.chunk))
        .collect()
}

/// One entry of a stage's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub pass: Pass,
    pub microbatch: u32,
    pub chunk: u32,
    /// How this pass's transfers interleave with its neighbours' (DualPipe's; the others run
    /// each pass's receive right before it and its send right after).
    pub link: Link,
}

/// When a pass's transfers happen relative to other passes (see [`Slot::link`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// The send of this pass goes after the next pass, which does not wait for it.
    pub send_after_next: bool,
    /// The input of the pass this many slots later is received before this pass, which waits
    /// for it (one batch of transfers before a compute).
    pub receive_ahead: Option<u32>,
}

impl Slot {
    fn f(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Forward,
            microbatch,
            chunk,
            link: Link {
                send_after_next: false,
                receive_ahead: None,
            },
        }
    }
    fn b(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Backward,
            microbatch,
            chunk,
            link: Link {
                send_after_next: false,
                receive_ahead: None,
            },
        }
    }
    fn w(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Weight,
            microbatch,
            chunk,
            link: Link {
                send_after_next: false,
                receive_ahead: None,
            },
        }
    }
}

/// The order of passes of `stage` for `m` micro batches over `pp` stages with `vpp` chunks
/// per stage (DualPipe: the plan's two, stage `stage` and stage `pp - 1 - stage`).
/// `extra_warmup` more forwards run before the 1F1B phase of the 1F1B and
/// interleaved schedules (Megatron-Core adds one under `overlap_moe_expert_parallel_comm`, so
/// that each forward and the backward beside it belong to different micro batches:
/// NVIDIA/Megatron-LM@d98e8a64dd megatron/core/pipeline_parallel/schedules.py); the other
/// schedules ignore it.
pub fn stage_order(
    schedule: PipelineSchedule,
    stage: u32,
    (pp, vpp, m): (u32, u32, u32),
    extra_warmup: u32,
) -> Result<Vec<Slot>, ScheduleError> {
    if pp == 0 || vpp == 0 || m == 0 || stage >= pp {
        return Err(ScheduleError::Unsupported(format!(
            "pipeline needs pp, vpp and micro batches >= 1 and stage < pp (pp {pp}, vpp {vpp}, m {m}, stage {stage})"
        )));
    }
    match schedule {
        PipelineSchedule::Gpipe => Ok(gpipe::gpipe(vpp, m)),
        PipelineSchedule::OneFOneB | PipelineSchedule::ZeroBubble if vpp > 1 => {
            Err(ScheduleError::Unsupported(format!(
                "schedule {} runs one chunk per stage but vpp = {vpp}; use interleaved-1f1b",
                schedule.as_str()
            )))
        }
        PipelineSchedule::OneFOneB => Ok(one_f_one_b::one_f_one_b(stage, pp, m, extra_warmup)),
        PipelineSchedule::ZeroBubble => Ok(zero_bubble::zb_h1(stage, pp, m)),
        PipelineSchedule::Interleaved1F1B => {
            interleaved::interleaved(stage, pp, vpp, m, extra_warmup)
        }
        // The plan gives each stage its two chunks (vpp = 2).
        PipelineSchedule::DualPipe => dualpipe::dualpipe(stage, pp, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An order as `F0 B0 W0 ...`; with `mark_chunk_1`, chunk 1's passes carry a `'`.
    fn text(order: &[Slot], mark_chunk_1: bool) -> String {
        order
            .iter()
            .map(|s| {
                let p = match s.pass {
                    Pass::Forward => 'F',
                    Pass::Backward => 'B',
                    Pass::Weight => 'W',
                };
                let mark = if mark_chunk_1 && s.chunk == 1 {
                    "'"
                } else {
                    ""
                };
                format!("{p}{}{mark}", s.microbatch)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn letters(order: &[Slot]) -> String {
        text(order, false)
    }

    #[test]
    fn one_f_one_b_warms_up_by_distance_to_the_end() {
        let s0 = stage_order(PipelineSchedule::OneFOneB, 0, (4, 1, 6), 0).unwrap();
        assert_eq!(letters(&s0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
        let s3 = stage_order(PipelineSchedule::OneFOneB, 3, (4, 1, 6), 0).unwrap();
        assert_eq!(letters(&s3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
        // fewer micro batches than stages: warm-up is capped
        let s0 = stage_order(PipelineSchedule::OneFOneB, 0, (4, 1, 2), 0).unwrap();
        assert_eq!(letters(&s0), "F0 F1 B0 B1");
    }

    /// Megatron-Core's combined 1F1B (`moe_a2a_overlap`): one more warm-up forward, so every
    /// forward of the steady phase sits beside the backward of an earlier micro batch.
    #[test]
    fn one_extra_warmup_forward_pairs_each_forward_with_an_earlier_backward() {
        let s = stage_order(PipelineSchedule::OneFOneB, 0, (1, 1, 4), 1).unwrap();
        assert_eq!(letters(&s), "F0 F1 B0 F2 B1 F3 B2 B3");
        let s3 = stage_order(PipelineSchedule::OneFOneB, 3, (4, 1, 6), 1).unwrap();
        assert_eq!(letters(&s3), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
        let plain = stage_order(PipelineSchedule::Interleaved1F1B, 1, (2, 2, 4), 0).unwrap();
        let extra = stage_order(PipelineSchedule::Interleaved1F1B, 1, (2, 2, 4), 1).unwrap();
        let warm = |o: &[Slot]| o.iter().take_while(|s| s.pass == Pass::Forward).count();
        assert_eq!(warm(&extra), warm(&plain) + 1);
        for w in extra.windows(2) {
            if w[0].pass != w[1].pass {
                assert_ne!((w[0].microbatch, w[0].chunk), (w[1].microbatch, w[1].chunk));
            }
        }
    }

    #[test]
    fn gpipe_runs_all_forwards_first() {
        let s = stage_order(PipelineSchedule::Gpipe, 1, (4, 1, 3), 0).unwrap();
        assert_eq!(letters(&s), "F0 F1 F2 B0 B1 B2");
    }

    #[test]
    fn zero_bubble_defers_w_by_stage_index() {
        let s0 = stage_order(PipelineSchedule::ZeroBubble, 0, (3, 1, 4), 0).unwrap();
        assert_eq!(letters(&s0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
        let s2 = stage_order(PipelineSchedule::ZeroBubble, 2, (3, 1, 4), 0).unwrap();
        assert_eq!(letters(&s2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
    }

    #[test]
    fn interleaved_follows_megatron_chunk_order() {
        // pp 2, vpp 2, m 4: warm-up of stage 0 = 2 + 2 = 4 forwards.
        let s0 = stage_order(PipelineSchedule::Interleaved1F1B, 0, (2, 2, 4), 0).unwrap();
        let got: Vec<(Pass, u32, u32)> =
            s0.iter().map(|s| (s.pass, s.microbatch, s.chunk)).collect();
        use Pass::*;
        assert_eq!(
            got,
            vec![
                (Forward, 0, 0),
                (Forward, 1, 0),
                (Forward, 0, 1),
                (Forward, 1, 1),
                (Forward, 2, 0),
                (Backward, 0, 1),
                (Forward, 3, 0),
                (Backward, 1, 1),
                (Forward, 2, 1),
                (Backward, 0, 0),
                (Forward, 3, 1),
                (Backward, 1, 0),
                (Backward, 2, 1),
                (Backward, 3, 1),
                (Backward, 2, 0),
                (Backward, 3, 0),
            ]
        );
        assert!(stage_order(PipelineSchedule::Interleaved1F1B, 0, (4, 2, 6), 0).is_err());
    }

    fn chunked(order: &[Slot]) -> String {
        text(order, true)
    }

    /// DualPipe's `step` for pp 4 and 8 micro batches, traced by hand: rank 0 (chunk 0 is
    /// stage 0, chunk 1 (') stage 3, micro batches 4-7 fed in at rank 3) and its mirror rank 3.
    #[test]
    fn dualpipe_follows_deepseeks_steps() {
        let r0 = stage_order(PipelineSchedule::DualPipe, 0, (4, 2, 8), 0).unwrap();
        assert_eq!(
            chunked(&r0),
            "F0 F1 F2 F4' B4' W4' F5' F3 B5' F6' B0 B6' F7' B1 B7' B2 W2 B3 W3"
        );
        let r3 = stage_order(PipelineSchedule::DualPipe, 3, (4, 2, 8), 0).unwrap();
        assert_eq!(
            chunked(&r3),
            "F4' F5' F6' F0 B0 W0 F1 F7' B1 F2 B4' B2 F3 B5' B3 B6' W6' B7' W7'"
        );
        // The overlapped pairs: each receives its backward's input first, sends after both.
        let pair = Link {
            send_after_next: true,
            receive_ahead: Some(1),
        };
        assert_eq!(r0[7].link, pair, "F3 with B5'");
        assert_eq!(r0[12].link, pair, "F7' with B1");
        // Rank 0's step 2: F2's output goes after F4', which receives F3's input (step 4).
        assert!(r0[2].link.send_after_next);
        assert_eq!(r0[3].link.receive_ahead, Some(4));
        assert!(stage_order(PipelineSchedule::DualPipe, 0, (4, 2, 6), 0).is_err());
        assert!(stage_order(PipelineSchedule::DualPipe, 0, (3, 2, 6), 0).is_err());
    }

    #[test]
    fn every_order_runs_each_pass_once() {
        for sched in [
            PipelineSchedule::Gpipe,
            PipelineSchedule::OneFOneB,
            PipelineSchedule::Interleaved1F1B,
            PipelineSchedule::ZeroBubble,
            PipelineSchedule::DualPipe,
        ] {
            for pp in 1..6 {
                let vpp = if sched == PipelineSchedule::Interleaved1F1B {
                    3
                } else {
                    1
                };
                if sched == PipelineSchedule::DualPipe && pp % 2 == 1 {
                    continue;
                }
                for (m, extra) in [pp, 2 * pp, 3 * pp]
                    .into_iter()
                    .flat_map(|m| [(m, 0), (m, 1)])
                {
                    if sched == PipelineSchedule::DualPipe && m < 2 * pp {
                        continue;
                    }
                    for stage in 0..pp {
                        let order = stage_order(sched, stage, (pp, vpp, m), extra).unwrap();
                        let mut seen = std::collections::BTreeMap::new();
                        for s in &order {
                            *seen
                                .entry((s.pass as u8, s.microbatch, s.chunk))
                                .or_insert(0) += 1;
                        }
                        if sched == PipelineSchedule::DualPipe {
                            // Each micro batch through one of the two chunks, a W only after
                            // its B.
                            let fb = seen.keys().filter(|k| k.0 != Pass::Weight as u8).count();
                            assert_eq!(fb as u32, 2 * m, "dualpipe pp{pp} m{m}");
                            for (i, s) in order.iter().enumerate() {
                                let key = (s.microbatch, s.chunk);
                                assert!(
                                    s.pass != Pass::Weight
                                        || order[..i].iter().any(|b| b.pass == Pass::Backward
                                            && (b.microbatch, b.chunk) == key)
                                );
                            }
                            assert!(seen.values().all(|&c| c == 1));
                            continue;
                        }
                        let passes = if sched == PipelineSchedule::ZeroBubble {
                            3
                        } else {
                            2
                        };
                        assert_eq!(seen.len() as u32, passes * m * vpp, "{sched:?} pp{pp} m{m}");
                        assert!(seen.values().all(|&c| c == 1));
                    }
                }
            }
        }
    }
}
