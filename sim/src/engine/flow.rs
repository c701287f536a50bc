//! The engine's side of the flow model: transfers and (optionally) compute ops as flows over
//! shared resources, with their completion events kept right as rates change.
//!
//! A transfer (collective or send) is a [`FlowPlan`]: phases of flows over network links, then
//! a latency. A group repeats the same few collectives many times, so each distinct one is
//! planned once and kept; a send is one flow and needs no plan. Rates are re-solved once per
//! instant of simulated time, and the flows of a transfer that finish together share one
//! completion event (see [`Flows::resolve`]); both are tested to give every op the same times
//! as re-solving after every event with one event per flow. When a flow's rate changes (another flow joined or left one of its links), the
//! bytes it moved at the old rate are settled and a new completion event is pushed; the old
//! event stays in the heap and is skipped when it pops, because each flow carries a version
//! that the event must match (lazy invalidation). Compute ops become flows when the cost
//! model asks for it: over their node's shared CPU cores (processor sharing, each op at most
//! one core) and/or capped at `1 / (1 + slowdown)` while their rank communicates.

use super::queue::EventQueue;
use crate::plan::Plan;
use crate::schedule::CollectiveKind;
use crate::topology::{FlowPlan, MaxMin, Network, Path};

/// Event payload tag of "the flows of batch node `a & !FLOW_TAG` finished".
pub(crate) const FLOW_TAG: u32 = (1 << 31) | (1 << 30);
pub(crate) const NO_FLOW: u32 = u32::MAX;

#[cfg(test)]
thread_local! {
    /// Tests set this to run the flow model as it ran before its speed work: every flow has
    /// its own completion event (no batches) and rates are re-solved after every event (not
    /// once per instant). The fast path must reproduce it exactly.
    pub(crate) static REFERENCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the fast paths are on (always, except in the tests that compare with the
/// reference).
#[inline]
fn fast() -> bool {
    #[cfg(test)]
    {
        !REFERENCE.with(|u| u.get())
    }
    #[cfg(not(test))]
    {
        true
    }
}

/// `x.round()` for `x >= 0` (half away from zero) without the libm call that `f64::round`
/// compiles to on baseline x86-64: the integer part by conversion, then the fraction, which
/// is exact to subtract below 2^53 (above it every f64 is an integer and the fraction is 0).
#[inline]
fn round_non_negative(x: f64) -> f64 {
    if x.is_nan() || x >= 9.0e15 {
        return x.round();
    }
    let t = x as u64 as f64;
    if x - t >= 0.5 {
        t + 1.0
    } else {
        t
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Owner {
    Transfer(u32),
    Compute { rank: u32, op: u32, slot: u32 },
}

#[derive(Clone, Copy, Debug)]
struct FlowInfo {
    /// Work left (bytes, or nanoseconds of solo compute) as of `last_ns`.
    left: f64,
    /// Rate since `last_ns`, in work per nanosecond.
    rate: f64,
    last_ns: u64,
    /// When the flow finishes at its current rate.
    finish_ns: u64,
    /// For the flow of a send completed by one direct event ([`Transfer::direct`]): when it
    /// finishes; the flow stays on its links until then or later (see
    /// [`Flows::purge_expired`]). `u64::MAX` otherwise.
    expires_ns: u64,
    version: u32,
    owner: Owner,
}

/// A running transfer: its plan (an index into [`Flows::plans`], or [`P2P`] for a send, whose
/// one flow is started directly), the next phase to start, and the flows of the current phase
/// still running.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    done: (u32, u32),
    plan: u32,
    next: u32,
    flows_left: u32,
    latency_ns: u64,
    /// A send whose flow has its links to itself: one event at the flow's end plus the
    /// latency completes it, instead of one at the flow's end and one after the latency.
    direct: bool,
    /// Bumped whenever a pending direct event becomes invalid (and on reuse of the slot).
    version: u32,
    /// The send's flow and its version when the direct event was scheduled.
    flow: u32,
    flow_version: u32,
}

/// [`Transfer::plan`] of a point-to-point send (one phase of one flow).
const P2P: u32 = u32::MAX;

/// What the engine asks the network to carry.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Spec {
    /// `calls` collectives of `kind` and `bytes` over group `group`.
    Collective {
        group: u32,
        kind: CollectiveKind,
        bytes: u64,
        calls: u32,
    },
    /// A send of `bytes` from `src` to `dst`.
    P2p { src: u32, dst: u32, bytes: u64 },
}

/// What finishing a flow means for the engine.
pub(crate) enum Finished {
    /// Nothing yet (a stale event, or other flows of the phase still run).
    Nothing,
    /// The transfer's last phase ended: its completion event fires after its latency.
    Transfer {
        done: (u32, u32),
        latency_ns: u64,
    },
    Compute {
        rank: u32,
        op: u32,
    },
}

pub(crate) struct Flows {
    solver: MaxMin,
    info: Vec<FlowInfo>,
    transfers: Vec<Transfer>,
    free_transfers: Vec<u32>,
    /// Flow plans of the collectives seen so far: a group repeats the same few collectives
    /// (per layer, per microbatch), so each is planned once.
    plans: Vec<FlowPlan>,
    /// Per group id: (kind, bytes, calls, index into `plans`) of its planned collectives.
    plan_of_group: Vec<Vec<(CollectiveKind, u64, u32, u32)>>,
    /// Per sending rank: (receiver, latency, path) of the sends seen so far.
    routes: Vec<Vec<(u32, u64, Path)>>,
    changed: Vec<u32>,
    joined: Vec<u32>,
    expired: Vec<u32>,
    /// Resource id of node 0's shared cores, when compute shares cores.
    core_base: Option<u32>,
    /// Compute runs as flows (shared cores or an overlap slowdown).
    pub compute: bool,
    slowdown: f64,
    /// Running compute flow per (rank, stream), or [`NO_FLOW`].
    pub compute_flow: Vec<u32>,
    /// Nodes of the flow lists that completion events carry, and the free ones.
    batches: Vec<Batch>,
    free_batches: Vec<u32>,
}

/// One flow of a completion event's list: the flow, the version the event was scheduled
/// for (a newer version makes it stale), and the next node or [`NO_FLOW`].
#[derive(Clone, Copy, Debug)]
struct Batch {
    id: u32,
    version: u32,
    next: u32,
    /// A direct completion: `id` is a transfer and `version` its version.
    direct: bool,
}

impl Flows {
    pub fn new(
        net: Option<&Network>,
        cores: Option<u32>,
        nodes: u32,
        slowdown: f64,
        slots: usize,
    ) -> Flows {
        let mut capacity = net.map_or_else(Vec::new, |n| n.capacities().to_vec());
        let core_base = cores.map(|c| {
            let base = capacity.len() as u32;
            capacity.resize(base as usize + nodes as usize, f64::from(c.max(1)));
            base
        });
        let slowdown = if slowdown.is_finite() && slowdown > 0.0 {
            slowdown
        } else {
            0.0
        };
        Flows {
            solver: MaxMin::new(capacity),
            info: Vec::new(),
            transfers: Vec::new(),
            free_transfers: Vec::new(),
            plans: Vec::new(),
            plan_of_group: Vec::new(),
            routes: Vec::new(),
            joined: Vec::new(),
            expired: Vec::new(),
            changed: Vec::new(),
            core_base,
            compute: cores.is_some() || slowdown > 0.0,
            slowdown,
            compute_flow: vec![NO_FLOW; slots],
            batches: Vec::new(),
            free_batches: Vec::new(),
        }
    }

    fn add(&mut self, now: u64, path: Path, cap: f64, left: f64, owner: Owner) -> u32 {
        self.purge_expired(now, path);
        let id = self.solver.add(path, cap) as usize;
        if id >= self.info.len() {
            self.info.resize(
                id + 1,
                FlowInfo {
                    left: 0.0,
                    rate: 0.0,
                    last_ns: 0,
                    finish_ns: 0,
                    expires_ns: u64::MAX,
                    version: 0,
                    owner,
                },
            );
        }
        let i = &mut self.info[id];
        *i = FlowInfo {
            left,
            rate: 0.0,
            last_ns: now,
            finish_ns: u64::MAX,
            expires_ns: u64::MAX,
            version: i.version.wrapping_add(1),
            owner,
        };
        id as u32
    }

    /// Takes off `path`'s links the flows of direct sends that have finished by `now`. Such
    /// a flow had its links to itself until its end (anything added to them earlier turned
    /// the send back into an ordinary one), so it is removed here, before anything shares
    /// its links, with the same effect as its removal when it ended: none.
    fn purge_expired(&mut self, now: u64, path: Path) {
        let mut expired = std::mem::take(&mut self.expired);
        expired.clear();
        for &r in path.as_slice() {
            for &g in self.solver.flows_on(r) {
                if self
                    .info
                    .get(g as usize)
                    .is_some_and(|i| i.expires_ns <= now)
                {
                    expired.push(g);
                }
            }
        }
        for &g in &expired {
            if let Some(i) = self.info.get_mut(g as usize) {
                if i.expires_ns <= now {
                    i.expires_ns = u64::MAX;
                    i.version = i.version.wrapping_add(1);
                    self.solver.remove(g);
                }
            }
        }
        self.expired = expired;
    }

    /// Starts a transfer over `net`; returns its completion payload and delay when it has no
    /// flows (it then takes just its latency).
    pub fn start_transfer(
        &mut self,
        net: &Network,
        plan: &Plan,
        now: u64,
        done: (u32, u32),
        spec: Spec,
    ) -> Option<((u32, u32), u64)> {
        let (plan_idx, latency_ns) = match spec {
            Spec::P2p { src, dst, bytes } => {
                match Network::p2p_send(self.p2p_route(net, src, dst), bytes) {
                    (latency_ns, None) => return Some((done, latency_ns)),
                    (latency_ns, Some((path, bytes))) => {
                        let tid = self.new_transfer(Transfer {
                            done,
                            plan: P2P,
                            next: 1,
                            flows_left: 1,
                            latency_ns,
                            direct: false,
                            version: 0,
                            flow: NO_FLOW,
                            flow_version: 0,
                        });
                        self.add(now, path, f64::INFINITY, bytes, Owner::Transfer(tid));
                        return None;
                    }
                }
            }
            Spec::Collective {
                group,
                kind,
                bytes,
                calls,
            } => {
                let p = self.collective_plan(net, plan, group, kind, bytes, calls);
                match self.plans.get(p as usize) {
                    Some(fp) if !fp.phases.is_empty() => (p, fp.latency_ns),
                    Some(fp) => return Some((done, fp.latency_ns)),
                    None => return Some((done, 0)),
                }
            }
        };
        let tid = self.new_transfer(Transfer {
            done,
            plan: plan_idx,
            next: 0,
            flows_left: 0,
            latency_ns,
            direct: false,
            version: 0,
            flow: NO_FLOW,
            flow_version: 0,
        });
        self.start_phase(now, tid);
        None
    }

    /// The index in `plans` of `calls` collectives of `kind` and `bytes` over group `group`,
    /// planned on first use.
    fn collective_plan(
        &mut self,
        net: &Network,
        plan: &Plan,
        group: u32,
        kind: CollectiveKind,
        bytes: u64,
        calls: u32,
    ) -> u32 {
        let g = group as usize;
        if g >= self.plan_of_group.len() {
            self.plan_of_group.resize(g + 1, Vec::new());
        }
        let known = self.plan_of_group[g]
            .iter()
            .find(|&&(k, b, c, _)| (k, b, c) == (kind, bytes, calls));
        if let Some(&(_, _, _, p)) = known {
            return p;
        }
        let p = self.plans.len() as u32;
        self.plans
            .push(net.collective(kind, plan.group(group), bytes, calls));
        self.plan_of_group[g].push((kind, bytes, calls, p));
        p
    }

    /// [`Network::p2p_route`] from `src` to `dst`, computed once per pair (ranks send to
    /// the same one or two pipeline neighbours all step long).
    fn p2p_route(&mut self, net: &Network, src: u32, dst: u32) -> (u64, Path) {
        let s = src as usize;
        if s >= self.routes.len() {
            self.routes.resize(s + 1, Vec::new());
        }
        if let Some(&(_, latency_ns, path)) = self.routes[s].iter().find(|r| r.0 == dst) {
            return (latency_ns, path);
        }
        let (latency_ns, path) = net.p2p_route(src, dst);
        self.routes[s].push((dst, latency_ns, path));
        (latency_ns, path)
    }

    fn new_transfer(&mut self, mut t: Transfer) -> u32 {
        match self.free_transfers.pop() {
            Some(i) => {
                t.version = self.transfers[i as usize].version.wrapping_add(1);
                self.transfers[i as usize] = t;
                i
            }
            None => {
                self.transfers.push(t);
                (self.transfers.len() - 1) as u32
            }
        }
    }

    /// Starts the next phase of collective transfer `tid`.
    fn start_phase(&mut self, now: u64, tid: u32) {
        let t = &mut self.transfers[tid as usize];
        let (p, ph) = (t.plan as usize, t.next as usize);
        t.next += 1;
        let n = self.plans[p].phases[ph].len();
        t.flows_left = n as u32;
        for k in 0..n {
            let (path, bytes) = self.plans[p].phases[ph][k];
            self.add(now, path, f64::INFINITY, bytes, Owner::Transfer(tid));
        }
    }

    /// Phases of transfer `t`'s plan.
    fn phases(&self, t: &Transfer) -> usize {
        if t.plan == P2P {
            1
        } else {
            self.plans
                .get(t.plan as usize)
                .map_or(0, |p| p.phases.len())
        }
    }

    /// Starts compute op `op` of `rank` on stream slot `slot` (`rank * STREAMS + stream`) for
    /// `work_ns` of solo time; `node` picks the shared cores, `communicating` the cap.
    pub fn start_compute(
        &mut self,
        now: u64,
        (rank, op, slot): (u32, u32, u32),
        node: u32,
        work_ns: u64,
        communicating: bool,
    ) {
        let path = match self.core_base {
            Some(b) => Path::new(&[b + node]),
            None => Path::default(),
        };
        let cap = self.cap(communicating);
        let id = self.add(
            now,
            path,
            cap,
            work_ns as f64,
            Owner::Compute { rank, op, slot },
        );
        if let Some(s) = self.compute_flow.get_mut(slot as usize) {
            *s = id;
        }
    }

    fn cap(&self, communicating: bool) -> f64 {
        if communicating {
            1.0 / (1.0 + self.slowdown)
        } else {
            1.0
        }
    }

    /// The rank on slots `slots` started or stopped communicating: re-cap its compute.
    pub fn set_communicating(&mut self, slots: std::ops::Range<usize>, communicating: bool) {
        if self.slowdown == 0.0 {
            return;
        }
        let cap = self.cap(communicating);
        for s in slots {
            if let Some(&id) = self.compute_flow.get(s) {
                if id != NO_FLOW {
                    self.solver.set_cap(id, cap);
                }
            }
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.solver.is_dirty()
    }

    /// Recomputes the rates the last changes touched and schedules a new completion for
    /// every flow whose rate changed — once per instant: while the next event is at `now`
    /// too, the changes wait for it. Re-solving after each of several events at one instant
    /// only settled zero elapsed time and pushed events that the next re-solve made stale;
    /// the rates that leave the instant are those of the flows present at its end either
    /// way (tested against re-solving after every event).
    ///
    /// Flows of one transfer that the solver reports one after another and that finish at the
    /// same time share one heap event (a [`Batch`] chain) instead of one event each: their
    /// events would have had consecutive sequence numbers, so they would have popped one right
    /// after the other, and [`Flows::finish`] handles them in that order. The heap carries a
    /// ring phase as one event instead of one per ring edge.
    pub fn resolve(&mut self, now: u64, queue: &mut EventQueue) {
        if fast() && queue.next_time_ns() == Some(now) {
            return;
        }
        self.resolve_now(now, queue);
    }

    fn resolve_now(&mut self, now: u64, queue: &mut EventQueue) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        self.solver.resolve(&mut changed);
        self.undirect(queue);
        // The open batch: (finish time, owning transfer, head node, tail node).
        let mut open: Option<(u64, u32, u32, u32)> = None;
        for &id in &changed {
            let rate = self.solver.rate(id);
            let i = &mut self.info[id as usize];
            let elapsed = now.saturating_sub(i.last_ns) as f64;
            i.left = (i.left - i.rate * elapsed).max(0.0);
            i.rate = rate;
            i.last_ns = now;
            i.version = i.version.wrapping_add(1);
            let dt = if rate > 0.0 {
                round_non_negative(i.left / rate)
            } else {
                f64::MAX
            };
            let finish = if dt >= (u64::MAX - now) as f64 {
                u64::MAX
            } else {
                now + dt as u64
            };
            i.finish_ns = finish;
            let (version, tid) = match i.owner {
                Owner::Transfer(t) => (i.version, t),
                Owner::Compute { .. } => (i.version, NO_FLOW),
            };
            if self.try_direct(id, tid, finish, queue, &mut open) {
                continue;
            }
            let node = self.node(id, version);
            match &mut open {
                Some((f, t, _, tail)) if *f == finish && *t == tid && tid != NO_FLOW && fast() => {
                    self.batches[*tail as usize].next = node;
                    *tail = node;
                }
                _ => {
                    if let Some((f, _, head, _)) = open {
                        queue.push(f, FLOW_TAG | head, 0);
                    }
                    open = Some((finish, tid, node, node));
                }
            }
        }
        if let Some((f, _, head, _)) = open {
            queue.push(f, FLOW_TAG | head, 0);
        }
        self.changed = changed;
    }

    /// Sends completed by a direct event whose flow now shares a link become ordinary: the
    /// direct event goes stale, and a flow whose rate did not change gets its completion
    /// event at the finish already computed (one whose rate changed gets it from the caller).
    fn undirect(&mut self, queue: &mut EventQueue) {
        let mut joined = std::mem::take(&mut self.joined);
        joined.clear();
        self.solver.take_joined(&mut joined);
        for &f in &joined {
            let Some(i) = self.info.get_mut(f as usize) else {
                continue;
            };
            if i.expires_ns == u64::MAX {
                continue;
            }
            i.expires_ns = u64::MAX;
            let (finish, version, unchanged) =
                (i.finish_ns, i.version, self.solver.rate(f) == i.rate);
            if let Owner::Transfer(tid) = i.owner {
                if let Some(t) = self.transfers.get_mut(tid as usize) {
                    t.direct = false;
                    t.version = t.version.wrapping_add(1);
                }
            }
            if unchanged {
                let node = self.node(f, version);
                queue.push(finish, FLOW_TAG | node, 0);
            }
        }
        self.joined = joined;
    }

    /// Schedules one direct completion (flow end plus latency) for the send that flow `id`
    /// (of transfer `tid`, finishing at `finish`) carries, when the flow has its links to
    /// itself; the open batch is pushed first so that events keep their order.
    fn try_direct(
        &mut self,
        id: u32,
        tid: u32,
        finish: u64,
        queue: &mut EventQueue,
        open: &mut Option<(u64, u32, u32, u32)>,
    ) -> bool {
        let Some(t) = self.transfers.get(tid as usize) else {
            return false;
        };
        if !fast() || t.plan != P2P || t.flows_left != 1 || !self.solver.alone(id) {
            return false;
        }
        if let Some((f, _, head, _)) = open.take() {
            queue.push(f, FLOW_TAG | head, 0);
        }
        let version = self.info[id as usize].version;
        self.info[id as usize].expires_ns = finish;
        self.solver.watch(id);
        let t = &mut self.transfers[tid as usize];
        t.direct = true;
        t.version = t.version.wrapping_add(1);
        t.flow = id;
        t.flow_version = version;
        let (tv, at) = (t.version, finish.saturating_add(t.latency_ns));
        let node = self.node(tid, tv);
        self.batches[node as usize].direct = true;
        queue.push(at, FLOW_TAG | node, 0);
        true
    }

    /// A new batch node for flow `id` at `version`.
    fn node(&mut self, id: u32, version: u32) -> u32 {
        let b = Batch {
            id,
            version,
            next: NO_FLOW,
            direct: false,
        };
        match self.free_batches.pop() {
            Some(n) => {
                self.batches[n as usize] = b;
                n
            }
            None => {
                self.batches.push(b);
                (self.batches.len() - 1) as u32
            }
        }
    }

    /// The completion event of batch `head` popped at `now`: finishes its flows in order.
    /// (Between separate events at one instant the engine would not re-solve either, see
    /// [`Flows::resolve`].)
    pub fn finish(&mut self, now: u64, head: u32, queue: &mut EventQueue) -> Finished {
        let mut node = head;
        let mut out = Finished::Nothing;
        while let Some(&Batch {
            id,
            version,
            next,
            direct,
        }) = self.batches.get(node as usize)
        {
            self.free_batches.push(node);
            node = next;
            if direct {
                return self.finish_direct(id, version);
            }
            if !matches!(out, Finished::Nothing) {
                // Cannot happen (a batch is one phase of one transfer, which ends with its
                // last flow); kept correct anyway: the rest becomes its own event.
                let rest = self.node(id, version);
                self.batches[rest as usize].next = next;
                queue.push(now, FLOW_TAG | rest, 0);
                break;
            }
            if !fast() && self.is_dirty() {
                self.resolve_now(now, queue);
            }
            out = self.finish_flow(now, id, version);
        }
        out
    }

    /// The direct completion of send transfer `tid` (as of `version`): its flow leaves its
    /// links if still on them, and the send completes now (its latency is already counted).
    fn finish_direct(&mut self, tid: u32, version: u32) -> Finished {
        let Some(&t) = self.transfers.get(tid as usize) else {
            return Finished::Nothing;
        };
        if !t.direct || t.version != version {
            return Finished::Nothing;
        }
        if let Some(i) = self.info.get_mut(t.flow as usize) {
            if i.version == t.flow_version {
                i.version = i.version.wrapping_add(1);
                i.expires_ns = u64::MAX;
                self.solver.remove(t.flow);
            }
        }
        self.transfers[tid as usize].direct = false;
        self.free_transfers.push(tid);
        Finished::Transfer {
            done: t.done,
            latency_ns: 0,
        }
    }

    /// Flow `id`'s completion (as of `version`) at `now`.
    fn finish_flow(&mut self, now: u64, id: u32, version: u32) -> Finished {
        let Some(i) = self.info.get(id as usize).copied() else {
            return Finished::Nothing;
        };
        if i.version != version {
            return Finished::Nothing;
        }
        // Invalidate any other pending event of this id.
        self.info[id as usize].version = i.version.wrapping_add(1);
        self.solver.remove(id);
        match i.owner {
            Owner::Compute { rank, op, slot } => {
                if let Some(s) = self.compute_flow.get_mut(slot as usize) {
                    *s = NO_FLOW;
                }
                Finished::Compute { rank, op }
            }
            Owner::Transfer(tid) => {
                let t = &mut self.transfers[tid as usize];
                t.flows_left = t.flows_left.saturating_sub(1);
                if t.flows_left > 0 {
                    return Finished::Nothing;
                }
                let t = *t;
                if (t.next as usize) < self.phases(&t) {
                    self.start_phase(now, tid);
                    return Finished::Nothing;
                }
                let (done, latency_ns) = (t.done, t.latency_ns);
                self.free_transfers.push(tid);
                Finished::Transfer { done, latency_ns }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round_non_negative;
    use proptest::prelude::*;

    #[test]
    fn rounding_matches_f64_round_at_the_edges() {
        let halves = (0..64u32).map(|k| f64::from(k) + 0.5);
        let near = [
            0.0,
            0.49999999999999994,
            0.5,
            1.0 - f64::EPSILON,
            2.5,
            1e15 + 0.5,
        ];
        let big = [4503599627370495.5, 9.0e15, 1.0e300, f64::INFINITY];
        for x in halves.chain(near).chain(big) {
            assert_eq!(round_non_negative(x).to_bits(), x.round().to_bits(), "{x}");
        }
    }

    proptest! {
        #[test]
        fn rounding_matches_f64_round(x in 0.0f64..1e17) {
            prop_assert_eq!(round_non_negative(x).to_bits(), x.round().to_bits());
        }
    }
}
