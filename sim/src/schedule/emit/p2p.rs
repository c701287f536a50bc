//! The pipeline's point-to-point traffic of one stage: the receive of each pass's input
//! (activation from the previous virtual stage, gradient from the next), the send of its
//! output, their tags, and the Buffers allocations that hold a transfer's bytes. Receives are
//! posted in consumption order on the pp-recv stream with no other dependency; sends go in
//! production order on the pp-send stream after the compute (and its collectives) that
//! produce them.
//!
//! Without `overlap_p2p_comm` the transfers block, as Megatron-Core's 1F1B and
//! torch.distributed.pipelining do: a pass waits for the send of the pass before it, and a
//! receive is posted only once the pass before it has finished (with that send), so the pass
//! that consumes it waits for the whole transfer (NVIDIA/Megatron-LM@d98e8a64dd
//! megatron/core/pipeline_parallel/p2p_communication.py `_communicate`: `req.wait()` on every
//! request when `wait_on_reqs`). That is the 1F1B and GPipe of one chunk per stage. With
//! several chunks per stage both frameworks post a stage's receives in the same batched call
//! as the peer's matching send (Megatron-Core's `send_forward_backward_recv_forward_backward`,
//! torch's `PipelineScheduleMulti` pairing the receives of a time step with the neighbours'
//! sends), and zero-bubble implementations post them ahead of the weight-gradient passes that
//! fill the wait; there the receives stay posted early and only the sends block.
//!
//! Under DualPipe chunk 1 of a stage carries the micro batches fed in at the last stage: its
//! activations flow from the next stage to the previous one and its gradients back, so its
//! peers are swapped, and the model has `pp` virtual stages, not `2 pp`.

use crate::scenario::PipelineSchedule;
use crate::schedule::builder::{AllocTag, Builder};
use crate::schedule::chunks::ChunkPlan;
use crate::schedule::emit::StageCtx;
use crate::schedule::pipeline::{Pass, Slot};
use crate::schedule::{Deps, Device, Label, MemCategory, OpKind, Peer, ScheduleError, Stream};

/// Direction bit of a pipeline tag.
const FWD: u64 = 0;
const BWD: u64 = 1;

/// Tag of the transfer over boundary `b` (between virtual stages b and b+1) of micro batch
/// `mb` in direction `dir`; unique per (sender, receiver) pair within a step.
fn p2p_tag(mb: u32, boundary: u32, boundaries: u32, dir: u64) -> u32 {
    let t = (u64::from(mb) * u64::from(boundaries) + u64::from(boundary)) * 2 + dir;
    // generate() checks the largest tag fits before emitting anything.
    t.min(u64::from(u32::MAX)) as u32
}

/// Check that every pipeline tag of the step fits in a u32.
pub fn check_tags(m: u32, pp: u32, vpp: u32) -> Result<(), ScheduleError> {
    let boundaries = u64::from(pp) * u64::from(vpp);
    let max = u64::from(m).saturating_mul(boundaries).saturating_mul(2);
    if max > u64::from(u32::MAX) {
        return Err(ScheduleError::TooLarge(format!(
            "{m} micro batches x {boundaries} pipeline boundaries do not fit in 32-bit tags"
        )));
    }
    Ok(())
}

/// Boundary bytes of the output of virtual stage `v`.
fn boundary_bytes(ctx: &StageCtx, v: u32) -> u64 {
    let pp = ctx.plan.pp().max(1);
    ctx.chunks
        .get((v % pp) as usize)
        .and_then(|row| row.get((v / pp) as usize))
        .map(|c| c.boundary_bytes)
        .unwrap_or(0)
}

/// The stage's pipeline transfers in flight: the posted receive not yet consumed and the
/// buffer of the send being produced.
pub struct Pipe {
    pp: u32,
    /// DualPipe: chunk 1 runs in the other direction.
    dualpipe: bool,
    last_vs: u32,
    boundaries: u32,
    recv: Option<(u32, Option<AllocTag>)>,
    /// Receives posted ahead of the pass that consumes them ([`Pipe::receive_ahead`]), by the
    /// consuming pass's index in the order.
    ahead: std::collections::BTreeMap<usize, (u32, Option<AllocTag>)>,
    send_buf: Option<AllocTag>,
    /// Transfers block compute (`overlap_p2p_comm = false`).
    blocking: bool,
    /// Blocking under 1F1B or GPipe with one chunk per stage: receives are posted after the
    /// pass before them.
    late_receives: bool,
    /// Blocking: the ops of the last pass emitted (its compute and its collectives' tail),
    /// which the next receive is posted after.
    last_pass: Deps,
    /// Blocking: the sends not yet waited for, which the next pass waits for (two after a
    /// DualPipe pair, whose backward does not wait for its forward's send).
    unwaited_sends: Vec<u32>,
}

impl Pipe {
    pub fn new(ctx: &StageCtx) -> Pipe {
        let pp = ctx.plan.pp();
        let dualpipe = ctx.s.parallel.schedule == PipelineSchedule::DualPipe;
        let last_vs = if dualpipe {
            pp - 1
        } else {
            pp * ctx.plan.vpp() - 1
        };
        Pipe {
            pp,
            dualpipe,
            last_vs,
            boundaries: last_vs.max(1),
            recv: None,
            ahead: std::collections::BTreeMap::new(),
            send_buf: None,
            blocking: !ctx.s.training.overlap_p2p_comm,
            late_receives: !ctx.s.training.overlap_p2p_comm
                && ctx.plan.vpp() == 1
                && matches!(
                    ctx.s.parallel.schedule,
                    PipelineSchedule::OneFOneB | PipelineSchedule::Gpipe
                ),
            last_pass: Deps::new(),
            unwaited_sends: Vec::new(),
        }
    }

    /// The peers holding the virtual stages before and after `cp`'s.
    fn neighbours(&self, cp: &ChunkPlan) -> (Peer, Peer) {
        if self.dualpipe && cp.layout.chunk == 1 {
            (Peer::PpNext, Peer::PpPrev)
        } else {
            (Peer::PpPrev, Peer::PpNext)
        }
    }

    /// Posts the receive of the input `slot` needs, if it comes from another stage.
    pub fn receive(
        &mut self,
        ctx: &StageCtx,
        b: &mut Builder,
        (index, slot): (usize, Slot),
        cp: &ChunkPlan,
        label: Label,
    ) -> Result<(), ScheduleError> {
        if let Some(ahead) = self.ahead.remove(&index) {
            self.recv = Some(ahead);
            return Ok(());
        }
        if self.pp <= 1 {
            return Ok(());
        }
        let vs = cp.layout.virtual_stage;
        let mb = slot.microbatch;
        let (before, after) = self.neighbours(cp);
        let incoming = match slot.pass {
            Pass::Forward if vs > 0 => Some((
                before,
                p2p_tag(mb, vs - 1, self.boundaries, FWD),
                boundary_bytes(ctx, vs - 1),
            )),
            Pass::Backward if vs < self.last_vs => Some((
                after,
                p2p_tag(mb, vs, self.boundaries, BWD),
                cp.boundary_bytes,
            )),
            _ => None,
        };
        if let Some((peer, tag, bytes)) = incoming {
            let buf = b.alloc(
                Stream::PpRecv,
                MemCategory::Buffers,
                Device::Gpu,
                bytes,
                Deps::new(),
                label,
            )?;
            let deps = if self.late_receives {
                self.last_pass.clone()
            } else {
                Deps::new()
            };
            let op = b.push(
                Stream::PpRecv,
                OpKind::Recv { peer, bytes, tag },
                deps,
                label,
            )?;
            self.recv = Some((op, buf));
        }
        Ok(())
    }

    /// Posts now the receive of `later` (pass `index` of the order) for the current pass to
    /// wait for: DualPipe receives a later pass's input in the batch of transfers before the
    /// current compute and waits for the whole batch (deepseek-ai/DualPipe@3da1bbea53
    /// dualpipe/dualpipe.py: `_recv_forward`, `_recv_backward`, then
    /// `_commit_and_wait_comm`). [`Pipe::receive`] of that pass then takes it.
    pub fn receive_ahead(
        &mut self,
        ctx: &StageCtx,
        b: &mut Builder,
        (index, later): (usize, Slot),
        cp: &ChunkPlan,
        label: Label,
    ) -> Result<Option<u32>, ScheduleError> {
        let current = self.recv.take();
        self.receive(ctx, b, (usize::MAX, later), cp, label)?;
        let posted = self.recv.take();
        self.recv = current;
        Ok(posted.map(|(op, buf)| {
            self.ahead.insert(index, (op, buf));
            op
        }))
    }

    /// The posted receive, for the compute that consumes it: its op and its buffer.
    pub fn take_received(&mut self) -> Option<(u32, Option<AllocTag>)> {
        self.recv.take()
    }

    /// Blocking transfers: the send the first compute of a pass waits for.
    pub fn take_unwaited_sends(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.unwaited_sends)
    }

    /// Records the ops of the pass just emitted (`compute` and its collectives' `tail`): under
    /// blocking transfers the next receive is posted after them.
    pub fn passed(&mut self, compute: u32, tail: u32) {
        if self.late_receives {
            self.last_pass = [compute, tail].into_iter().collect();
        }
    }

    /// Whether `slot`'s output goes to another stage.
    pub fn sends(&self, slot: Slot, cp: &ChunkPlan) -> bool {
        let vs = cp.layout.virtual_stage;
        self.pp > 1
            && match slot.pass {
                Pass::Forward => vs < self.last_vs,
                Pass::Backward => vs > 0,
                Pass::Weight => false,
            }
    }

    /// Allocates the buffer of `slot`'s outgoing transfer, before the compute that fills it.
    pub fn reserve_send(
        &mut self,
        ctx: &StageCtx,
        b: &mut Builder,
        slot: Slot,
        cp: &ChunkPlan,
        label: Label,
    ) -> Result<(), ScheduleError> {
        let bytes = match slot.pass {
            Pass::Forward => cp.boundary_bytes,
            _ => boundary_bytes(ctx, cp.layout.virtual_stage.saturating_sub(1)),
        };
        self.send_buf = b.alloc(
            Stream::Compute,
            MemCategory::Buffers,
            Device::Gpu,
            bytes,
            Deps::new(),
            label,
        )?;
        Ok(())
    }

    /// Sends `slot`'s output after `deps` and frees its buffer once sent.
    pub fn send(
        &mut self,
        ctx: &StageCtx,
        b: &mut Builder,
        slot: Slot,
        cp: &ChunkPlan,
        deps: impl Into<Deps>,
        label: Label,
    ) -> Result<(), ScheduleError> {
        let vs = cp.layout.virtual_stage;
        let mb = slot.microbatch;
        let (before, after) = self.neighbours(cp);
        let (peer, tag, bytes) = match slot.pass {
            Pass::Forward => (
                after,
                p2p_tag(mb, vs, self.boundaries, FWD),
                cp.boundary_bytes,
            ),
            _ => (
                before,
                p2p_tag(mb, vs - 1, self.boundaries, BWD),
                boundary_bytes(ctx, vs - 1),
            ),
        };
        let send = b.push(
            Stream::PpSend,
            OpKind::Send { peer, bytes, tag },
            deps,
            label,
        )?;
        if self.blocking {
            self.unwaited_sends.push(send);
        }
        b.free(Stream::PpSend, self.send_buf.take(), [send], label)
    }
}
