//! The order in which one pipeline stage runs its passes: which forward (F), backward (B) and
//! weight-gradient (W) pass of which micro batch and chunk comes next. This is the whole
//! difference between GPipe, 1F1B, interleaved 1F1B and zero-bubble; everything else (p2p,
//! collectives, memory) is derived from this order by the emitter.

use crate::scenario::PipelineSchedule;
use crate::schedule::ScheduleError;

/// Kind of pass in a stage's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Forward,
    /// The backward: the full backward, or only the input gradient under zero-bubble.
    Backward,
    /// Zero-bubble weight gradient of an earlier `Backward`.
    Weight,
}

/// One entry of a stage's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub pass: Pass,
    pub microbatch: u32,
    pub chunk: u32,
}

impl Slot {
    fn f(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Forward,
            microbatch,
            chunk,
        }
    }
    fn b(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Backward,
            microbatch,
            chunk,
        }
    }
    fn w(microbatch: u32, chunk: u32) -> Slot {
        Slot {
            pass: Pass::Weight,
            microbatch,
            chunk,
        }
    }
}

/// The order of passes of `stage` for `m` micro batches over `pp` stages with `vpp` chunks
/// per stage.
pub fn stage_order(
    schedule: PipelineSchedule,
    stage: u32,
    pp: u32,
    vpp: u32,
    m: u32,
) -> Result<Vec<Slot>, ScheduleError> {
    if pp == 0 || vpp == 0 || m == 0 || stage >= pp {
        return Err(ScheduleError::Unsupported(format!(
            "pipeline needs pp, vpp and micro batches >= 1 and stage < pp (pp {pp}, vpp {vpp}, m {m}, stage {stage})"
        )));
    }
    match schedule {
        PipelineSchedule::Gpipe => Ok(gpipe(vpp, m)),
        PipelineSchedule::OneFOneB | PipelineSchedule::ZeroBubble if vpp > 1 => {
            Err(ScheduleError::Unsupported(format!(
                "schedule {} runs one chunk per stage but vpp = {vpp}; use interleaved-1f1b",
                schedule.as_str()
            )))
        }
        PipelineSchedule::OneFOneB => Ok(one_f_one_b(stage, pp, m)),
        PipelineSchedule::ZeroBubble => Ok(zb_h1(stage, pp, m)),
        PipelineSchedule::Interleaved1F1B => interleaved(stage, pp, vpp, m),
    }
}

/// All forwards (chunk by chunk along the model), then all backwards in reverse.
fn gpipe(vpp: u32, m: u32) -> Vec<Slot> {
    let mut out = Vec::with_capacity(2 * (vpp * m) as usize);
    for chunk in 0..vpp {
        out.extend((0..m).map(|mb| Slot::f(mb, chunk)));
    }
    for chunk in (0..vpp).rev() {
        out.extend((0..m).map(|mb| Slot::b(mb, chunk)));
    }
    out
}

/// PipeDream-flush / Megatron non-interleaved: `pp - stage - 1` warm-up forwards, then one
/// forward and one backward alternately, then the remaining backwards.
fn one_f_one_b(stage: u32, pp: u32, m: u32) -> Vec<Slot> {
    let warmup = (pp - stage - 1).min(m);
    let mut out = Vec::with_capacity(2 * m as usize);
    out.extend((0..warmup).map(|mb| Slot::f(mb, 0)));
    for k in 0..m - warmup {
        out.push(Slot::f(warmup + k, 0));
        out.push(Slot::b(k, 0));
    }
    out.extend((m - warmup..m).map(|mb| Slot::b(mb, 0)));
    out
}

/// ZB-H1 (Qi et al. 2023): the 1F1B order with each backward split into B (input gradient)
/// and W (weight gradient). Stage `s` defers up to `s` W passes, so later stages fill their
/// cool-down bubble with deferred W work, while no stage holds more than `pp` micro batches
/// of activations (what stage 0 holds under 1F1B): the peak is unchanged. Deferred W passes
/// run after the last B.
fn zb_h1(stage: u32, pp: u32, m: u32) -> Vec<Slot> {
    let mut out = Vec::with_capacity(3 * m as usize);
    let mut next_w = 0u32;
    let mut done_b = 0u32;
    for slot in one_f_one_b(stage, pp, m) {
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

/// Megatron's interleaved schedule (virtual pipeline): the k-th forward of a stage runs
/// chunk `(k / pp) % vpp` of micro batch `(k / (pp*vpp)) * pp + k % pp`; the k-th backward
/// runs the chunks in reverse. Warm-up is `(pp - stage - 1) * 2 + (vpp - 1) * pp` forwards
/// (all of them when m == pp), then 1F1B, then the remaining backwards.
fn interleaved(stage: u32, pp: u32, vpp: u32, m: u32) -> Result<Vec<Slot>, ScheduleError> {
    if vpp == 1 {
        return Ok(one_f_one_b(stage, pp, m));
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
        ((pp - stage - 1) * 2 + (vpp - 1) * pp).min(total)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn letters(order: &[Slot]) -> String {
        order
            .iter()
            .map(|s| {
                let p = match s.pass {
                    Pass::Forward => 'F',
                    Pass::Backward => 'B',
                    Pass::Weight => 'W',
                };
                format!("{p}{}", s.microbatch)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn one_f_one_b_warms_up_by_distance_to_the_end() {
        let s0 = stage_order(PipelineSchedule::OneFOneB, 0, 4, 1, 6).unwrap();
        assert_eq!(letters(&s0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
        let s3 = stage_order(PipelineSchedule::OneFOneB, 3, 4, 1, 6).unwrap();
        assert_eq!(letters(&s3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
        // fewer micro batches than stages: warm-up is capped
        let s0 = stage_order(PipelineSchedule::OneFOneB, 0, 4, 1, 2).unwrap();
        assert_eq!(letters(&s0), "F0 F1 B0 B1");
    }

    #[test]
    fn gpipe_runs_all_forwards_first() {
        let s = stage_order(PipelineSchedule::Gpipe, 1, 4, 1, 3).unwrap();
        assert_eq!(letters(&s), "F0 F1 F2 B0 B1 B2");
    }

    #[test]
    fn zero_bubble_defers_w_by_stage_index() {
        let s0 = stage_order(PipelineSchedule::ZeroBubble, 0, 3, 1, 4).unwrap();
        assert_eq!(letters(&s0), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
        let s2 = stage_order(PipelineSchedule::ZeroBubble, 2, 3, 1, 4).unwrap();
        assert_eq!(letters(&s2), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
    }

    #[test]
    fn interleaved_follows_megatron_chunk_order() {
        // pp 2, vpp 2, m 4: warm-up of stage 0 = 2 + 2 = 4 forwards.
        let s0 = stage_order(PipelineSchedule::Interleaved1F1B, 0, 2, 2, 4).unwrap();
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
        assert!(stage_order(PipelineSchedule::Interleaved1F1B, 0, 4, 2, 6).is_err());
    }

    #[test]
    fn every_order_runs_each_pass_once() {
        for sched in [
            PipelineSchedule::Gpipe,
            PipelineSchedule::OneFOneB,
            PipelineSchedule::Interleaved1F1B,
            PipelineSchedule::ZeroBubble,
        ] {
            for pp in 1..6 {
                let vpp = if sched == PipelineSchedule::Interleaved1F1B {
                    3
                } else {
                    1
                };
                for m in [pp, 2 * pp, 3 * pp] {
                    for stage in 0..pp {
                        let order = stage_order(sched, stage, pp, vpp, m).unwrap();
                        let mut seen = std::collections::BTreeMap::new();
                        for s in &order {
                            *seen
                                .entry((s.pass as u8, s.microbatch, s.chunk))
                                .or_insert(0) += 1;
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
