//! The engine's side of the flow model: transfers and (optionally) compute ops as flows over
//! shared resources, with their completion events kept right as rates change.
//!
//! A transfer (collective or send) is a [`FlowPlan`]: phases of flows over network links, then
//! a latency. When a flow's rate changes (another flow joined or left one of its links), the
//! bytes it moved at the old rate are settled and a new completion event is pushed; the old
//! event stays in the heap and is skipped when it pops, because each flow carries a version
//! that the event must match (lazy invalidation). Compute ops become flows when the cost
//! model asks for it: over their node's shared CPU cores (processor sharing, each op at most
//! one core) and/or capped at `1 / (1 + slowdown)` while their rank communicates.

use super::queue::EventQueue;
use crate::topology::{FlowPlan, MaxMin, Network, Path};

/// Event payload tag of "flow `a & !FLOW_TAG` with version `b` finished".
pub(crate) const FLOW_TAG: u32 = (1 << 31) | (1 << 30);
pub(crate) const NO_FLOW: u32 = u32::MAX;

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

#[derive(Clone, Debug)]
struct Transfer {
    done: (u32, u32),
    phases: Vec<Vec<(Path, f64)>>,
    next: usize,
    flows_left: u32,
    latency_ns: u64,
    /// Rate cap of each flow: unbounded for network flows (the links bound them), one core
    /// for CPU work.
    cap: f64,
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
    changed: Vec<u32>,
    /// Resource id of node 0's shared cores, when compute shares cores.
    core_base: Option<u32>,
    /// Compute runs as flows (shared cores or an overlap slowdown).
    pub compute: bool,
    slowdown: f64,
    /// Running compute flow per (rank, stream), or [`NO_FLOW`].
    pub compute_flow: Vec<u32>,
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
            changed: Vec::new(),
            core_base,
            compute: cores.is_some() || slowdown > 0.0,
            slowdown,
            compute_flow: vec![NO_FLOW; slots],
        }
    }

    fn add(&mut self, now: u64, path: Path, cap: f64, left: f64, owner: Owner) -> u32 {
        let id = self.solver.add(path, cap) as usize;
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

    /// Starts a transfer; returns its completion payload and delay when it has no flows.
    pub fn start_transfer(
        &mut self,
        now: u64,
        done: (u32, u32),
        plan: FlowPlan,
    ) -> Option<((u32, u32), u64)> {
        if plan.phases.is_empty() {
            return Some((done, plan.latency_ns));
        }
        let t = Transfer {
            done,
            phases: plan.phases,
            next: 0,
            flows_left: 0,
            latency_ns: plan.latency_ns,
            cap: f64::INFINITY,
        };
        self.begin(now, t);
        None
    }

    /// Starts work that occupies the CPU cores of each node in `nodes` (one flow per entry,
    /// at most one core each) for `work_ns` of solo time; it completes as a transfer does,
    /// when every flow has finished. On the host backend communication and allocation are
    /// CPU work (loopback copies, checksums, page writes), so they share the cores with
    /// compute. Returns the completion at once when no cores are shared or there is no work.
    pub fn start_cpu_work(
        &mut self,
        now: u64,
        done: (u32, u32),
        nodes: &[u32],
        work_ns: u64,
    ) -> Option<((u32, u32), u64)> {
        let Some(base) = self.core_base else {
            return Some((done, work_ns));
        };
        if work_ns == 0 || nodes.is_empty() {
            return Some((done, work_ns));
        }
        let phase = nodes
            .iter()
            .map(|&n| (Path::new(&[base + n]), work_ns as f64))
            .collect();
        let t = Transfer {
            done,
            phases: vec![phase],
            next: 0,
            flows_left: 0,
            latency_ns: 0,
            cap: 1.0,
        };
        self.begin(now, t);
        None
    }

    /// Whether compute shares CPU cores (the host backend's model).
    pub fn cores_shared(&self) -> bool {
        self.core_base.is_some()
    }

    fn begin(&mut self, now: u64, t: Transfer) {
        let tid = match self.free_transfers.pop() {
            Some(i) => {
                self.transfers[i as usize] = t;
                i
            }
            None => {
                self.transfers.push(t);
                (self.transfers.len() - 1) as u32
            }
        };
        self.start_phase(now, tid);
    }

    fn start_phase(&mut self, now: u64, tid: u32) {
        let t = &mut self.transfers[tid as usize];
        let phase = std::mem::take(&mut t.phases[t.next]);
        t.next += 1;
        t.flows_left = phase.len() as u32;
        let cap = t.cap;
        for (path, bytes) in phase {
            self.add(now, path, cap, bytes, Owner::Transfer(tid));
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

    /// Recomputes the rates the last changes touched and pushes a new completion event for
    /// every flow whose rate changed.
    pub fn resolve(&mut self, now: u64, queue: &mut EventQueue) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.clear();
        self.solver.resolve(&mut changed);
        for &id in &changed {
            let rate = self.solver.rate(id);
            let i = &mut self.info[id as usize];
            let elapsed = now.saturating_sub(i.last_ns) as f64;
            i.left = (i.left - i.rate * elapsed).max(0.0);
            i.rate = rate;
            i.last_ns = now;
            i.version = i.version.wrapping_add(1);
            let dt = if rate > 0.0 {
                (i.left / rate).round()
            } else {
                f64::MAX
            };
            let finish = if dt >= (u64::MAX - now) as f64 {
                u64::MAX
            } else {
                now + dt as u64
            };
            queue.push(finish, FLOW_TAG | id, i.version);
        }
        self.changed = changed;
    }

    /// A flow's completion event popped at `now`.
    pub fn finish(&mut self, now: u64, id: u32, version: u32) -> Finished {
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
                if t.next < t.phases.len() {
                    self.start_phase(now, tid);
                    return Finished::Nothing;
                }
                let (done, latency_ns) = (t.done, t.latency_ns);
                t.phases = Vec::new();
                self.free_transfers.push(tid);
                Finished::Transfer { done, latency_ns }
            }
        }
    }
}
