//! Max-min fair sharing of resources (network links, a node's CPU cores) among flows, kept up
//! to date incrementally. The engine adds and removes flows as transfers and compute ops start
//! and end; after a batch of changes [`MaxMin::resolve`] recomputes rates by progressive
//! filling (water-filling) over the connected components that the changes touched only, and
//! reports which flows got a new rate. Max-min fair allocation decomposes over connected
//! components of the flow–resource graph, so recomputing just the touched components gives
//! the same rates as recomputing everything (property-tested below).
//!
//! A flow crosses a short list of resources (a path) and may carry its own rate limit (`cap`),
//! e.g. a compute op that can use at most one core, and a weight (1 unless given): flows that
//! share a saturated resource get rates in proportion to their weights (weighted max-min), as a
//! CPU scheduler shares a core by thread priority. Units are the caller's: capacities and caps
//! in work per nanosecond.

/// Resources one flow crosses: at most [`MAX_PATH`].
pub const MAX_PATH: usize = 4;

/// A flow's path: up to [`MAX_PATH`] resource ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Path {
    ids: [u32; MAX_PATH],
    len: u8,
}

impl Path {
    /// A path over `ids`; resources beyond [`MAX_PATH`] are dropped (callers build at most
    /// four: NVLink or NIC up, leaf up, leaf down, NVLink or NIC down).
    pub fn new(ids: &[u32]) -> Path {
        let mut p = Path::default();
        for &id in ids.iter().take(MAX_PATH) {
            p.ids[p.len as usize] = id;
            p.len += 1;
        }
        p
    }

    pub fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len as usize]
    }
}

#[derive(Clone, Debug)]
struct Slot {
    path: Path,
    cap: f64,
    /// Share of a contended resource relative to the other flows on it (1 for most).
    weight: f64,
    rate: f64,
    active: bool,
}

/// Flows kept in place per resource before a resource's list moves to the heap.
const INLINE: usize = 3;

/// The active flows on one resource, in insertion order: in place while there are at most
/// [`INLINE`], else all of them in the resource's spill list. Most resources carry one or two
/// flows at a time (a ring edge's NVLink ports, a send's NICs), so the lists of every resource
/// sit in one flat array and a flow's add and removal touch no heap block.
#[derive(Clone, Copy, Debug, Default)]
struct OnList {
    len: u32,
    ids: [u32; INLINE],
}

/// The flows on resource `r`, in insertion order.
#[inline]
fn flows_on<'a>(on: &'a [OnList], spill: &'a [Vec<u32>], r: usize) -> &'a [u32] {
    match on.get(r) {
        Some(l) if l.len as usize <= INLINE => &l.ids[..l.len as usize],
        Some(_) => spill.get(r).map_or(&[], Vec::as_slice),
        None => &[],
    }
}

/// The sharing state: resources with capacities, and the active flows over them.
#[derive(Clone, Debug, Default)]
pub struct MaxMin {
    capacity: Vec<f64>,
    /// Active flows per resource, in insertion order (see [`OnList`]).
    on: Vec<OnList>,
    /// Per resource: all its flows while it has more than [`INLINE`] (else unused).
    spill: Vec<Vec<u32>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    dirty_res: Vec<u32>,
    dirty_flows: Vec<u32>,
    // Scratch, reused between calls.
    seen_res: Vec<u32>,
    seen_flow: Vec<u32>,
    epoch: u32,
    comp_res: Vec<u32>,
    comp_flows: Vec<u32>,
    left: Vec<f64>,
    unfixed: Vec<u32>,
    /// Per resource: the weights of its unfixed flows, summed.
    wsum: Vec<f64>,
    todo: Vec<u32>,
    keep: Vec<u32>,
    fixed: Vec<(u32, f64)>,
}

impl MaxMin {
    /// Resources with these capacities (work per ns; non-positive or NaN is treated as a
    /// tiny capacity, so a broken link gives long times rather than a division by zero).
    pub fn new(capacity: Vec<f64>) -> MaxMin {
        let n = capacity.len();
        MaxMin {
            capacity: capacity.into_iter().map(sane).collect(),
            on: vec![OnList::default(); n],
            spill: vec![Vec::new(); n],
            seen_res: vec![0; n],
            left: vec![0.0; n],
            unfixed: vec![0; n],
            wsum: vec![0.0; n],
            ..MaxMin::default()
        }
    }

    pub fn resources(&self) -> usize {
        self.capacity.len()
    }

    /// Adds a flow over `path` limited to `cap` (use `f64::INFINITY` for none) and returns its
    /// id. Resource ids outside the solver are ignored. The rate is set by the next
    /// [`MaxMin::resolve`].
    pub fn add(&mut self, path: Path, cap: f64) -> u32 {
        self.add_weighted(path, cap, 1.0)
    }

    /// [`MaxMin::add`] for a flow that gets `weight` times the share of a weight-1 flow on a
    /// contended resource (weighted max-min fairness; a non-positive or NaN weight counts as
    /// 1).
    pub fn add_weighted(&mut self, path: Path, cap: f64, weight: f64) -> u32 {
        let weight = if weight > 0.0 && weight.is_finite() {
            weight
        } else {
            1.0
        };
        let mut kept = Path::default();
        for &r in path.as_slice() {
            if (r as usize) < self.capacity.len() {
                kept.ids[kept.len as usize] = r;
                kept.len += 1;
            }
        }
        let slot = Slot {
            path: kept,
            cap: sane(cap),
            weight,
            rate: 0.0,
            active: true,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                self.seen_flow.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        for &r in kept.as_slice() {
            self.push_on(r as usize, id);
        }
        // One seed finds the flow's whole component: its first resource (searched before any
        // later seed, exactly where seeding every resource would have started), or the flow
        // itself when it crosses no resource.
        match kept.as_slice().first() {
            Some(&r) => self.dirty_res.push(r),
            None => self.dirty_flows.push(id),
        }
        id
    }

    /// Removes a flow; its id may be reused by a later [`MaxMin::add`].
    pub fn remove(&mut self, id: u32) {
        let Some(s) = self.slots.get_mut(id as usize).filter(|s| s.active) else {
            return;
        };
        s.active = false;
        s.rate = 0.0;
        let path = s.path;
        for &r in path.as_slice() {
            self.remove_on(r as usize, id);
            self.dirty_res.push(r);
        }
        self.free.push(id);
    }

    /// Appends flow `id` to resource `r`'s list.
    fn push_on(&mut self, r: usize, id: u32) {
        let (Some(l), Some(spill)) = (self.on.get_mut(r), self.spill.get_mut(r)) else {
            return;
        };
        let n = l.len as usize;
        if n < INLINE {
            l.ids[n] = id;
        } else {
            if n == INLINE {
                spill.clear();
                spill.extend_from_slice(&l.ids);
            }
            spill.push(id);
        }
        l.len += 1;
    }

    /// Takes flow `id` off resource `r`'s list, keeping the others' order.
    fn remove_on(&mut self, r: usize, id: u32) {
        let (Some(l), Some(spill)) = (self.on.get_mut(r), self.spill.get_mut(r)) else {
            return;
        };
        let n = l.len as usize;
        if n <= INLINE {
            if let Some(i) = l.ids[..n].iter().position(|&f| f == id) {
                l.ids.copy_within(i + 1..n, i);
                l.len -= 1;
            }
        } else if let Some(i) = spill.iter().position(|&f| f == id) {
            spill.remove(i);
            l.len -= 1;
            if l.len as usize == INLINE {
                l.ids.copy_from_slice(&spill[..INLINE]);
            }
        }
    }

    /// Changes a flow's own rate limit.
    pub fn set_cap(&mut self, id: u32, cap: f64) {
        if let Some(s) = self.slots.get_mut(id as usize).filter(|s| s.active) {
            s.cap = sane(cap);
            self.dirty_flows.push(id);
        }
    }

    /// Whether flow `id` is present (added and not removed).
    pub fn is_active(&self, id: u32) -> bool {
        self.slots.get(id as usize).is_some_and(|s| s.active)
    }

    /// The flow's current rate (0 for an unknown or removed flow).
    pub fn rate(&self, id: u32) -> f64 {
        self.slots
            .get(id as usize)
            .filter(|s| s.active)
            .map_or(0.0, |s| s.rate)
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty_res.is_empty() || !self.dirty_flows.is_empty()
    }

    /// Recomputes the rates of every flow connected to a change since the last call, and
    /// appends to `changed` each active flow whose rate differs from before (new flows
    /// included), in a deterministic order.
    pub fn resolve(&mut self, changed: &mut Vec<u32>) {
        if !self.is_dirty() {
            return;
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.seen_res.iter_mut().for_each(|x| *x = 0);
            self.seen_flow.iter_mut().for_each(|x| *x = 0);
            self.epoch = 1;
        }
        let seeds_res = std::mem::take(&mut self.dirty_res);
        let seeds_flow = std::mem::take(&mut self.dirty_flows);
        for &r in &seeds_res {
            self.component_from_res(r, changed);
        }
        for &f in &seeds_flow {
            self.component_from_flow(f, changed);
        }
        self.dirty_res = seeds_res;
        self.dirty_res.clear();
        self.dirty_flows = seeds_flow;
        self.dirty_flows.clear();
    }

    fn component_from_res(&mut self, r: u32, changed: &mut Vec<u32>) {
        if self.seen_res[r as usize] == self.epoch {
            return;
        }
        // Fast paths for the two common components, with the same outcome as the search
        // and fill below: a resource no flow crosses (nothing to do), and one flow that has
        // its resources to itself.
        match *flows_on(&self.on, &self.spill, r as usize) {
            [] => {
                self.seen_res[r as usize] = self.epoch;
                return;
            }
            [f] if self.alone(f) => {
                self.fill_alone(f, changed);
                return;
            }
            _ => {}
        }
        self.collect(Some(r), None);
        self.fill(changed);
    }

    fn component_from_flow(&mut self, f: u32, changed: &mut Vec<u32>) {
        let ok = self.slots.get(f as usize).is_some_and(|s| s.active);
        if !ok || self.seen_flow[f as usize] == self.epoch {
            return;
        }
        if self.alone(f) {
            self.fill_alone(f, changed);
            return;
        }
        self.collect(None, Some(f));
        self.fill(changed);
    }

    /// Whether active flow `f` is the only flow on each of its resources (its component is
    /// itself and its path).
    fn alone(&self, f: u32) -> bool {
        self.slots[f as usize]
            .path
            .as_slice()
            .iter()
            .all(|&r| self.on.get(r as usize).is_some_and(|l| l.len == 1))
    }

    /// Marks the component of a flow that is [`MaxMin::alone`] as seen and sets its rate: the
    /// smallest capacity on its path, or its cap.
    fn fill_alone(&mut self, f: u32, changed: &mut Vec<u32>) {
        self.seen_flow[f as usize] = self.epoch;
        let s = &self.slots[f as usize];
        let mut rate = s.cap;
        for &r in s.path.as_slice() {
            self.seen_res[r as usize] = self.epoch;
            rate = rate.min(self.capacity[r as usize]);
        }
        let rate = if rate.is_finite() { rate } else { f64::MAX };
        let s = &mut self.slots[f as usize];
        if s.rate != rate || rate == 0.0 {
            s.rate = rate;
            changed.push(f);
        }
    }

    /// Breadth-first search of the component holding `r` or `f` into `comp_res` and
    /// `comp_flows`.
    fn collect(&mut self, r: Option<u32>, f: Option<u32>) {
        self.comp_res.clear();
        self.comp_flows.clear();
        if let Some(r) = r {
            self.seen_res[r as usize] = self.epoch;
            self.comp_res.push(r);
        }
        if let Some(f) = f {
            self.seen_flow[f as usize] = self.epoch;
            self.comp_flows.push(f);
        }
        let (mut ri, mut fi) = (0, 0);
        while ri < self.comp_res.len() || fi < self.comp_flows.len() {
            while ri < self.comp_res.len() {
                let r = self.comp_res[ri] as usize;
                ri += 1;
                for &g in flows_on(&self.on, &self.spill, r) {
                    if self.seen_flow[g as usize] != self.epoch {
                        self.seen_flow[g as usize] = self.epoch;
                        self.comp_flows.push(g);
                    }
                }
            }
            while fi < self.comp_flows.len() {
                let g = self.comp_flows[fi] as usize;
                fi += 1;
                for &r in self.slots[g].path.as_slice() {
                    if self.seen_res[r as usize] != self.epoch {
                        self.seen_res[r as usize] = self.epoch;
                        self.comp_res.push(r);
                    }
                }
            }
        }
    }

    /// Progressive filling over the collected component: raise every unfixed flow's rate
    /// together until a resource saturates or a flow reaches its cap; fix those flows; repeat.
    fn fill(&mut self, changed: &mut Vec<u32>) {
        // A flow alone on its links runs at the smallest capacity (or its cap).
        if let [f] = self.comp_flows[..] {
            self.fill_alone(f, changed);
            return;
        }
        for &r in &self.comp_res {
            let r = r as usize;
            self.left[r] = self.capacity[r];
            self.unfixed[r] = self.on.get(r).map_or(0, |l| l.len);
            self.wsum[r] = flows_on(&self.on, &self.spill, r)
                .iter()
                .map(|&f| self.slots[f as usize].weight)
                .sum();
        }
        let mut todo = std::mem::take(&mut self.todo);
        let mut keep = std::mem::take(&mut self.keep);
        let mut new_rate = std::mem::take(&mut self.fixed);
        todo.clear();
        todo.extend_from_slice(&self.comp_flows);
        new_rate.clear();
        while !todo.is_empty() {
            let mut level = f64::INFINITY;
            for &r in &self.comp_res {
                let r = r as usize;
                if self.unfixed[r] > 0 {
                    level = level.min(self.left[r] / self.wsum[r]);
                }
            }
            // `level` is the rate per unit of weight.
            for &f in &todo {
                let s = &self.slots[f as usize];
                level = level.min(s.cap / s.weight);
            }
            if !level.is_finite() {
                // Flows with no resource and no cap: unbounded; give them the largest rate.
                for &f in &todo {
                    new_rate.push((f, f64::MAX));
                }
                break;
            }
            let level = level.max(0.0);
            let tol = level * 1e-12;
            keep.clear();
            for &f in &todo {
                let s = &self.slots[f as usize];
                let at_cap = s.cap / s.weight <= level + tol;
                let bottlenecked = s.path.as_slice().iter().any(|&r| {
                    let r = r as usize;
                    self.unfixed[r] > 0 && self.left[r] / self.wsum[r] <= level + tol
                });
                if at_cap || bottlenecked {
                    new_rate.push((f, level * s.weight));
                } else {
                    keep.push(f);
                }
            }
            for &(f, rate) in &new_rate[new_rate.len() - (todo.len() - keep.len())..] {
                let s = &self.slots[f as usize];
                for &r in s.path.as_slice() {
                    let r = r as usize;
                    self.left[r] = (self.left[r] - rate).max(0.0);
                    self.unfixed[r] -= 1;
                    self.wsum[r] -= s.weight;
                }
            }
            std::mem::swap(&mut todo, &mut keep);
        }
        for &(f, rate) in &new_rate {
            let s = &mut self.slots[f as usize];
            if s.rate != rate || rate == 0.0 {
                s.rate = rate;
                changed.push(f);
            }
        }
        self.todo = todo;
        self.keep = keep;
        self.fixed = new_rate;
    }
}

/// A flow's cap as the solver keeps it: NaN or not positive becomes 1e-12 (a flow that
/// barely moves), anything else stays.
pub(crate) fn sane(c: f64) -> f64 {
    if c.is_nan() || c <= 0.0 {
        1e-12
    } else {
        c
    }
}

#[cfg(test)]
#[path = "maxmin_tests.rs"]
mod tests;
