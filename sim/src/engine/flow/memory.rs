//! Memory-bound compute ops sharing their node's memory (a host profile's `[host]
//! memory_cores`), and what each such op's own time was. Such an op is a flow over its core
//! and its node's memory, a resource of `memory_cores` cores' worth of such work; the solver
//! shares both. Its span then holds two kinds of lost time: time the memory was shared, which
//! is work (its thread is on the core, stalled on loads), and time other work took its core,
//! which is waiting. The engine's accounts and the trace's `solo_ns` count only the second as
//! waiting (`host_model::share`), so each op keeps its own time: over every stretch of constant
//! rates, the progress it made divided by the rate it would have had with its core to itself,
//! `min(1, max(C / n, C - others))` for the memory's capacity `C`, the `n` memory-bound ops on
//! the node and the others' rates (the host model's rule, `host_model::memory`). Every stretch boundary of one node's ops is the same
//! instant for all of them (they are settled together), so the others' rates are those of
//! the stretch.

use super::Flows;
use crate::host_model::alone_rate;

pub(super) struct Memory {
    /// Resource id of node 0's memory (node `k`'s is `base + k`).
    pub base: u32,
    /// Cores' worth of memory-bound work each node's memory serves at once (>= 1).
    pub capacity: f64,
    /// The memory-bound flows running on each node.
    flows: Vec<Vec<u32>>,
    /// Per flow id: its own time so far (ns), and its node + 1 (0: not memory-bound).
    own_ns: Vec<f64>,
    node_of: Vec<u32>,
}

impl Memory {
    pub fn new(base: u32, capacity: f64, nodes: u32) -> Memory {
        Memory {
            base,
            capacity,
            flows: vec![Vec::new(); nodes as usize],
            own_ns: Vec::new(),
            node_of: Vec::new(),
        }
    }

    /// The node of memory-bound flow `id`, if it is one.
    fn node(&self, id: u32) -> Option<u32> {
        match self.node_of.get(id as usize) {
            Some(&n) if n > 0 => Some(n - 1),
            _ => None,
        }
    }
}

impl Flows {
    /// Brings every memory-bound flow of `node` up to `now` at the rates it had since its last
    /// settling: its work left, and its own time.
    fn settle_memory(&mut self, node: u32, now: u64) {
        let Some(m) = self.memory.as_mut() else {
            return;
        };
        let Some(ids) = m.flows.get(node as usize) else {
            return;
        };
        let n = ids.len() as f64;
        let sum: f64 = ids.iter().map(|&id| self.info[id as usize].rate).sum();
        for &id in ids {
            let i = &mut self.info[id as usize];
            let elapsed = now.saturating_sub(i.last_ns) as f64;
            if elapsed > 0.0 {
                let alone = alone_rate(m.capacity, n, sum - i.rate);
                if alone > 0.0 {
                    m.own_ns[id as usize] += i.rate * elapsed / alone;
                }
                i.left = (i.left - i.rate * elapsed).max(0.0);
                i.last_ns = now;
            }
        }
    }

    /// Memory-bound flow `id` starts now on `node`.
    pub(super) fn memory_started(&mut self, id: u32, node: u32, now: u64) {
        self.settle_memory(node, now);
        let Some(m) = self.memory.as_mut() else {
            return;
        };
        let i = id as usize;
        if m.own_ns.len() <= i {
            m.own_ns.resize(i + 1, 0.0);
            m.node_of.resize(i + 1, 0);
        }
        m.own_ns[i] = 0.0;
        m.node_of[i] = node + 1;
        if let Some(f) = m.flows.get_mut(node as usize) {
            f.push(id);
        }
    }

    /// Flow `id` finished now: its own time when it was memory-bound.
    pub(super) fn memory_finished(&mut self, id: u32, now: u64) -> Option<u64> {
        let node = self.memory.as_ref()?.node(id)?;
        self.settle_memory(node, now);
        let m = self.memory.as_mut()?;
        m.node_of[id as usize] = 0;
        if let Some(f) = m.flows.get_mut(node as usize) {
            f.retain(|&x| x != id);
        }
        Some(m.own_ns[id as usize].round() as u64)
    }

    /// Before rates or work change at `now`: settles the nodes of the memory-bound flows among
    /// `ids` (with the rates of the stretch that ends).
    pub(super) fn settle_memory_of(&mut self, ids: &[u32], now: u64) {
        let Some(m) = self.memory.as_ref() else {
            return;
        };
        let mut nodes: Vec<u32> = ids.iter().filter_map(|&id| m.node(id)).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            self.settle_memory(n, now);
        }
    }
}
