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
//! model asks for it: on their rank's CPU core, shared with the other work bound to it (ranks
//! are bound to their node's cores round-robin; host transfers and allocations are CPU work
//! there too) and/or capped at `1 / (1 + slowdown)` while their rank communicates. A
//! memory-bound compute op (no GEMMs: the optimizer) also crosses its node's memory, a
//! resource of `memory_cores` cores' worth of such work (a host profile's `[host]
//! memory_cores`), which the memory-bound ops running on its cores at once share: two
//! optimizers on two cores of a machine whose caches and memory serve 1.6 cores' worth run
//! at 0.8 of their solo speed each.

mod events;
mod memory;
mod plans;
mod round;
mod solo;
mod symmetry;

use crate::plan::Plan;
use crate::schedule::CollectiveKind;
use crate::topology::{MaxMin, Network, Path};
use plans::Plans;
pub(crate) use symmetry::collapse_for_flows;

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

#[cfg(test)]
thread_local! {
    /// Tests set this to run compute flows on no resource through the solver, as with a flow
    /// network or shared cores, to compare that general path with [`solo`].
    pub(crate) static GENERAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether compute flows on no resource take the [`solo`] path (always, except in the tests
/// that compare it with the general one).
#[inline]
fn solo_allowed() -> bool {
    #[cfg(test)]
    {
        !GENERAL.with(|g| g.get())
    }
    #[cfg(not(test))]
    {
        true
    }
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
    version: u32,
    owner: Owner,
}

/// A running transfer: its plan (an index into the run's [`Plans`], or [`P2P`] for a send, whose
/// one flow is started directly), the next phase to start, and the flows of the current phase
/// still running.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    done: (u32, u32),
    plan: u32,
    next: u32,
    flows_left: u32,
    latency_ns: u64,
}

/// [`Transfer::plan`] of a point-to-point send (one phase of one flow).
const P2P: u32 = u32::MAX;

/// [`Transfer::plan`] of CPU work on shared cores (one phase, one flow per rank involved).
const CPU: u32 = u32::MAX - 1;

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
    Transfer { done: (u32, u32), latency_ns: u64 },
    Compute {
        rank: u32,
        op: u32,
        /// A memory-bound op's own time: its span less its waiting for its core (see
        /// `flow::memory`); `None` for other ops.
        own_ns: Option<u64>,
    },
}

pub(crate) struct Flows {
    solver: MaxMin,
    info: Vec<FlowInfo>,
    transfers: Vec<Transfer>,
    free_transfers: Vec<u32>,
    /// Collective plans and send routes, made once per run.
    plans: Plans,
    changed: Vec<u32>,
    /// Resource id of node 0's shared cores, when compute shares cores.
    core_base: Option<u32>,
    /// Cores of each node, when compute shares cores.
    cores_per_node: u32,
    /// Each node's memory, when memory-bound compute shares it.
    memory: Option<memory::Memory>,
    /// Compute runs as flows (shared cores or an overlap slowdown).
    pub compute: bool,
    slowdown: f64,
    /// Running compute flow per (rank, stream), or [`NO_FLOW`].
    pub compute_flow: Vec<u32>,
    /// Nodes of the flow lists that completion events carry, and the free ones.
    batches: Vec<Batch>,
    free_batches: Vec<u32>,
    /// Compute flows given more work since the last re-solve ([`Flows::add_compute_work`]):
    /// their completion is rescheduled with the rates that changed.
    grown: Vec<u32>,
    /// Without a flow network or shared cores every flow is a compute op on no resource: its
    /// state lives here instead of in the solver, `info` and the batches ([`solo`]).
    solo: Option<solo::Solo>,
}

/// One flow of a completion event's list: the flow, the version the event was scheduled
/// for (a newer version makes it stale), and the next node or [`NO_FLOW`].
#[derive(Clone, Copy, Debug)]
struct Batch {
    id: u32,
    version: u32,
    next: u32,
}

impl Flows {
    /// `cores`: the cores of each node when compute shares them, and the cores' worth of
    /// memory-bound work each node's memory serves at once (`None`: each core its own).
    pub fn new(
        net: Option<&Network>,
        (cores, memory_cores): (Option<u32>, Option<f64>),
        nodes: u32,
        slowdown: f64,
        slots: usize,
    ) -> Flows {
        let mut capacity = net.map_or_else(Vec::new, |n| n.capacities().to_vec());
        // One resource per core, each of capacity one: ranks are bound to cores (`cpu_of`).
        let core_base = cores.map(|c| {
            let base = capacity.len() as u32;
            capacity.resize(base as usize + (nodes * c.max(1)) as usize, 1.0);
            base
        });
        // One resource per node for memory-bound compute, with shared cores only.
        let memory = match (core_base, memory_cores) {
            (Some(_), Some(m)) if m.is_finite() && m >= 1.0 => {
                let base = capacity.len() as u32;
                capacity.resize(base as usize + nodes as usize, m);
                Some(memory::Memory::new(base, m, nodes))
            }
            _ => None,
        };
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
            plans: Plans::default(),
            changed: Vec::new(),
            core_base,
            cores_per_node: cores.unwrap_or(0).max(1),
            memory,
            compute: cores.is_some() || slowdown > 0.0,
            slowdown,
            compute_flow: vec![NO_FLOW; slots],
            batches: Vec::new(),
            free_batches: Vec::new(),
            grown: Vec::new(),
            solo: (net.is_none() && cores.is_none() && slowdown > 0.0 && solo_allowed())
                .then(solo::Solo::default),
        }
    }

    /// Adds `extra_ns` of solo work to the compute op running on stream slot `slot` (its
    /// thread lost the core to another and must get it back: `State::switch_cost`); false
    /// when no compute op runs there. Its progress so far is settled at `now`, and its
    /// completion is scheduled anew at the next [`Flows::resolve`].
    pub fn add_compute_work(&mut self, now: u64, slot: usize, extra_ns: f64) -> bool {
        let Some(&id) = self.compute_flow.get(slot) else {
            return false;
        };
        if id == NO_FLOW || extra_ns.is_nan() || extra_ns <= 0.0 {
            return false;
        }
        // A memory-bound op's stretch ends here too.
        self.settle_memory_of(&[id], now);
        let i = &mut self.info[id as usize];
        let elapsed = now.saturating_sub(i.last_ns) as f64;
        i.left = (i.left - i.rate * elapsed).max(0.0) + extra_ns;
        i.last_ns = now;
        self.grown.push(id);
        true
    }

    /// Adds a flow of `left` work over `path`; `weight` is its share of a contended resource
    /// against weight-1 flows (see [`Flows::start_cpu_work`]).
    fn add(
        &mut self,
        now: u64,
        (path, cap, weight): (Path, f64, f64),
        left: f64,
        owner: Owner,
    ) -> u32 {
        let id = self.solver.add_weighted(path, cap, weight) as usize;
        if id >= self.info.len() {
            self.info.resize(
                id + 1,
                FlowInfo {
                    left: 0.0,
                    rate: 0.0,
                    last_ns: 0,
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
            version: i.version.wrapping_add(1),
            owner,
        };
        id as u32
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
                match Network::p2p_send(self.plans.route(net, src, dst), bytes) {
                    (latency_ns, None) => return Some((done, latency_ns)),
                    (latency_ns, Some((path, bytes))) => {
                        let tid = self.new_transfer(Transfer {
                            done,
                            plan: P2P,
                            next: 1,
                            flows_left: 1,
                            latency_ns,
                        });
                        self.add(now, (path, f64::INFINITY, 1.0), bytes, Owner::Transfer(tid));
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
                let p = self.plans.collective(net, plan, group, kind, bytes, calls);
                match self.plans.get(p) {
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
        });
        self.start_phase(now, tid);
        None
    }

    /// Starts work that occupies each core in `cpus` (see [`Flows::cpu_of`]; one flow per
    /// entry) for `work_ns` of solo time; it completes as a transfer does, `latency_ns` after
    /// every flow has finished. On the host backend communication and allocation are
    /// CPU work (loopback copies, checksums, page writes), so they share the cores with
    /// compute. `weight` is the work's share of a core against weight-1 work, as the
    /// scheduler weighs the thread that runs it (`cost::host_compute_weight` for work on a
    /// compute stream, 1 for the rest). Returns the completion at once when no cores are
    /// shared or there is no work.
    pub fn start_cpu_work(
        &mut self,
        now: u64,
        done: (u32, u32),
        cpus: &[u32],
        (work_ns, latency_ns): (u64, u64),
        weight: f64,
    ) -> Option<((u32, u32), u64)> {
        let Some(base) = self.core_base else {
            return Some((done, work_ns.saturating_add(latency_ns)));
        };
        if work_ns == 0 || cpus.is_empty() {
            return Some((done, work_ns.saturating_add(latency_ns)));
        }
        let tid = self.new_transfer(Transfer {
            done,
            plan: CPU,
            next: 1,
            flows_left: cpus.len() as u32,
            latency_ns,
        });
        for &c in cpus {
            self.add(
                now,
                (Path::new(&[base + c]), 1.0, weight),
                work_ns as f64,
                Owner::Transfer(tid),
            );
        }
        None
    }

    /// Whether compute shares CPU cores (the host backend's model).
    pub fn cores_shared(&self) -> bool {
        self.core_base.is_some()
    }

    /// Whether memory-bound compute shares its node's memory (`[host] memory_cores`).
    pub fn shares_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// The core `rank` runs on (an index among the cores of every node): ranks are bound to
    /// their node's cores round-robin by local rank, as the host runtime binds them
    /// (`twin_runtime::launch::affinity`), and the work of the ranks bound to one core shares
    /// it (processor sharing).
    pub fn cpu_of(&self, plan: &Plan, rank: u32) -> u32 {
        plan.core_of(self.cores_per_node, rank)
    }

    fn new_transfer(&mut self, t: Transfer) -> u32 {
        match self.free_transfers.pop() {
            Some(i) => {
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
        let (p, ph) = (t.plan, t.next as usize);
        t.next += 1;
        let n = self
            .plans
            .get(p)
            .and_then(|f| f.phases.get(ph))
            .map_or(0, Vec::len);
        t.flows_left = n as u32;
        for k in 0..n {
            let flow = self
                .plans
                .get(p)
                .and_then(|f| f.phases.get(ph)?.get(k).copied());
            if let Some((path, bytes)) = flow {
                self.add(now, (path, f64::INFINITY, 1.0), bytes, Owner::Transfer(tid));
            }
        }
    }

    /// Phases of transfer `t`'s plan.
    fn phases(&self, t: &Transfer) -> usize {
        if t.plan == P2P || t.plan == CPU {
            1
        } else {
            self.plans.get(t.plan).map_or(0, |p| p.phases.len())
        }
    }

    /// Starts compute op `op` of `rank` on stream slot `slot` (`rank * STREAMS + stream`) for
    /// `work_ns` of solo time on core `cpu` (see [`Flows::cpu_of`]), where it weighs `weight`
    /// against the transfers beside it (the weight of the thread that runs it; it matters only
    /// when cores are shared); `communicating` picks the cap. A `memory_bound` op also crosses
    /// its node's memory when the model has one ([`Flows::shares_memory`]).
    pub fn start_compute(
        &mut self,
        now: u64,
        (rank, op, slot): (u32, u32, u32),
        (cpu, weight): (u32, f64),
        (work_ns, memory_bound): (u64, bool),
        communicating: bool,
    ) {
        let cap = self.cap(communicating);
        if let Some(solo) = &mut self.solo {
            let id = solo.add(now, (rank, op, slot), work_ns as f64, cap);
            if let Some(s) = self.compute_flow.get_mut(slot as usize) {
                *s = id;
            }
            return;
        }
        let node = cpu / self.cores_per_node;
        let memory_base = self.memory.as_ref().map(|m| m.base);
        let path = match (self.core_base, memory_base) {
            (Some(b), Some(m)) if memory_bound => Path::new(&[b + cpu, m + node]),
            (Some(b), _) => Path::new(&[b + cpu]),
            (None, _) => Path::default(),
        };
        let id = self.add(
            now,
            (path, cap, weight),
            work_ns as f64,
            Owner::Compute { rank, op, slot },
        );
        if memory_bound && memory_base.is_some() {
            self.memory_started(id, node, now);
        }
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
                if id == NO_FLOW {
                    continue;
                }
                match &mut self.solo {
                    Some(solo) => solo.set_cap(id, cap),
                    None => self.solver.set_cap(id, cap),
                }
            }
        }
    }

    pub fn is_dirty(&self) -> bool {
        if let Some(solo) = &self.solo {
            return solo.is_dirty();
        }
        self.solver.is_dirty() || !self.grown.is_empty()
    }
}
