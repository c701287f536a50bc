//! Transfers at their rendezvous: a p2p's send meets its receive in the receiver's mailbox,
//! a collective's members meet by (group, sequence number), and the transfer then runs through
//! the flow network, on shared cores as CPU work, or for the cost model's time. Split from
//! `run`, whose event loop calls these when a transfer op becomes ready and when it is done.

use super::{Inst, Pending, Slots, State, Step, COLL_BIT, P2P_BIT, STREAMS};
use crate::engine::compile::group_kind_index;
use crate::engine::context::Ctx;
use crate::engine::flow::Spec;
use crate::engine::SimError;

impl<S: Slots> State<S> {
    /// Mark `op` of `rank` as transferring from now on (both sides of a p2p, every member of
    /// a collective).
    #[inline]
    pub(super) fn begin_transfer(&mut self, ctx: &Ctx, rank: u32, op: u32, solo_ns: Option<u64>) {
        let r = S::slot(ctx, rank);
        let s = ctx.prog(rank as usize).ops[op as usize].stream as usize;
        if let Some(sh) = self.share_mut() {
            sh.started(r, s, solo_ns);
        }
        let rs = &mut self.ranks[r];
        rs.streams[s].start_ns = self.now;
        let a = &mut rs.acct;
        a.flush(self.now);
        a.running_comm += 1;
        if a.running_comm == 1 {
            if let Some(f) = &mut self.flows {
                f.set_communicating(r * STREAMS..(r + 1) * STREAMS, true);
            }
        }
    }

    /// Runs a transfer that has begun on every side: through the flow network when there is
    /// one, else for the cost model's `dur_ns` (as CPU work of every rank in `ranks` when the
    /// ranks share CPU cores: see [`Flows::start_cpu_work`]; `cpu_share` of it, the rest as
    /// latency after). `done` is its completion payload.
    pub(super) fn run_transfer(
        &mut self,
        ctx: &Ctx,
        done: (u32, u32),
        ranks: &[u32],
        spec: Spec,
        (dur_ns, cpu_share): (impl FnOnce() -> u64, f64),
    ) {
        let flowing = match (&mut self.flows, ctx.net) {
            (Some(f), Some(net)) => Some(f.start_transfer(net, ctx.plan, self.now, done, spec)),
            _ => None,
        };
        match flowing {
            Some(None) => {}
            Some(Some((d, latency_ns))) => self.schedule(latency_ns, d.0, d.1),
            None => {
                let dur = dur_ns();
                let cpu = if cpu_share >= 1.0 {
                    dur
                } else {
                    (dur as f64 * cpu_share).round() as u64
                };
                self.run_cpu_work(ctx, done, ranks, (cpu, dur - cpu.min(dur)), 1.0);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn p2p_arrive(
        &mut self,
        ctx: &Ctx,
        rank: u32,
        op: u32,
        send: bool,
        peer: u8,
        tag: u32,
        bytes: u64,
    ) -> Step {
        let other_rank = ctx.peers[rank as usize][peer as usize];
        let (src, dst) = if send {
            (rank, other_rank)
        } else {
            (other_rank, rank)
        };
        let list = &mut self.pending[S::slot(ctx, dst)];
        let Some(i) = list
            .iter()
            .position(|p| p.src == src && p.tag == tag && p.send != send)
        else {
            list.push(Pending {
                src,
                tag,
                send,
                op,
                bytes,
            });
            return Ok(());
        };
        let other = list.remove(i);
        let (send_op, recv_op, send_bytes, recv_bytes) = if send {
            (op, other.op, bytes, other.bytes)
        } else {
            (other.op, op, other.bytes, bytes)
        };
        if send_bytes != recv_bytes {
            return Err(Box::new(SimError::P2pMismatch {
                src,
                dst,
                tag,
                send_bytes,
                recv_bytes,
            }));
        }
        let real_dst = ctx.real_dst(src, send_op, dst);
        let dur_ns = match ctx.net {
            Some(_) => 0, // the flow network times the transfer
            None => self.p2p_memo.get((src, real_dst, bytes), || {
                ctx.cost.p2p_ns(ctx.plan, src, real_dst, bytes)
            }),
        };
        // Into a core that slept, the transfer waits for it to wake (`host_model::wake`).
        let dur_ns = dur_ns + self.wake_ns(ctx, &[dst]);
        let solo_ns = ctx.net.is_none().then_some(dur_ns);
        self.begin_transfer(ctx, src, send_op, solo_ns);
        self.begin_transfer(ctx, dst, recv_op, solo_ns);
        let s = ctx.prog(src as usize).ops[send_op as usize].stream as usize;
        self.partner[S::slot(ctx, src) * STREAMS + s] = (dst, recv_op);
        self.run_transfer(
            ctx,
            (P2P_BIT | src, send_op),
            &[src, dst],
            Spec::P2p {
                src,
                dst: real_dst,
                bytes,
            },
            // Its threads sleep in blocking reads for part of the message (`[host]
            // p2p_cpu_share`, measured by the calibration).
            (|| dur_ns, self.p2p_cpu_share),
        );
        Ok(())
    }

    pub(super) fn collective_arrive(&mut self, ctx: &Ctx, gk: usize, arrival: Inst) -> Step {
        let rank = arrival.first_rank;
        let g = ctx.group_of[gk * ctx.world + rank as usize];
        let members = ctx.members(g);
        let n = members.len() as u32;
        let key = gk * ctx.active.len() + S::slot(ctx, members.first().copied().unwrap_or(rank));
        let insts = &mut self.rendezvous[key];
        let inst = match insts.iter().position(|x| x.seq == arrival.seq) {
            None if n > 1 => {
                insts.push(arrival);
                return Ok(());
            }
            None => arrival,
            Some(i) => {
                let first = &mut insts[i];
                if (first.kind, first.bytes, first.calls)
                    != (arrival.kind, arrival.bytes, arrival.calls)
                {
                    return Err(Box::new(SimError::CollectiveMismatch {
                        kind: ctx.plan.group(g).kind,
                        group: g,
                        seq: arrival.seq,
                        rank,
                        op: ctx.prog(rank as usize).index_of(arrival.first_op),
                        name: ctx.op_name(rank as usize, arrival.first_op),
                        first_rank: first.first_rank,
                        first_name: ctx.op_name(first.first_rank as usize, first.first_op),
                    }));
                }
                first.arrived += 1;
                if first.arrived < n {
                    return Ok(());
                }
                insts.swap_remove(i)
            }
        };
        let dur_ns = match ctx.net {
            Some(_) => 0, // the flow network times the transfer
            None => self
                .coll_memo
                .get((g, inst.kind, inst.bytes, inst.calls), || {
                    ctx.cost
                        .collective_ns(inst.kind, ctx.plan.group(g), inst.bytes, inst.calls)
                }),
        };
        let dur_ns = dur_ns + self.wake_ns(ctx, ctx.members(g));
        let solo_ns = ctx.net.is_none().then_some(dur_ns);
        for &m in ctx.members(g) {
            let op = ctx.prog(m as usize).coll_ops[gk][inst.seq as usize];
            self.begin_transfer(ctx, m, op, solo_ns);
        }
        self.run_transfer(
            ctx,
            (COLL_BIT | g, inst.seq),
            ctx.members(g),
            Spec::Collective {
                group: g,
                kind: inst.kind,
                bytes: inst.bytes,
                calls: inst.calls,
            },
            // Its threads poll for their peers: on the CPU for all of it.
            (|| dur_ns, 1.0),
        );
        Ok(())
    }

    pub(super) fn collective_done(&mut self, ctx: &Ctx, g: u32, seq: u32) -> Step {
        let group = ctx.plan.group(g);
        let gk = group_kind_index(group.kind);
        for &m in ctx.members(g) {
            let op = ctx.prog(m as usize).coll_ops[gk][seq as usize];
            self.complete(ctx, m, op)?;
        }
        Ok(())
    }
}
