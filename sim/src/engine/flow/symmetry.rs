//! When the flow model may run in collapsed mode (see `engine::collapse`), and over which axes.
//!
//! Collapsing simulates only representative ranks; the engine then starts only the transfers
//! of the representatives (the collectives of the groups that hold one, the sends from one).
//! With the flow model that is exact when no left-out transfer could change a simulated
//! flow's rate, and when each left-out transfer runs exactly as its simulated counterpart, so
//! that its ranks really do what their representative does. The check below proves both on
//! the static structure of every transfer the programs can issue:
//!
//! 1. no link carries flows of both a simulated and a left-out transfer (so every
//!    connected component of simulated flows is the same in the full and collapsed runs);
//! 2. each left-out transfer mirrors its counterpart (the same collective of its
//!    representative's group, or its representative's send to the same peer) flow by flow
//!    and link by link: the same phases, flow sizes and latency, and one map from left-out
//!    links to simulated links, of equal capacity, that is one-to-one on each connected
//!    component of left-out flows and takes it onto a whole component of simulated flows.
//!
//! Then the left-out flows form copies of simulated components (same links, capacities and
//! flows), so they get the same max-min rates at the same times. A rail-optimized fabric
//! passes with the ranks of one tensor-parallel index simulated (each rail carries its own
//! data-parallel rings and pipeline sends); a fat-tree whose leaf uplinks carry every rail
//! fails rule 1, and every rank is simulated. [`collapse_for_flows`] tries the collapse of
//! every axis but pp first, then of fewer (innermost) axes.

use super::super::collapse::{axis_size, representatives_over, Collapse};
use super::super::compile::{CKind, CProgram, GROUP_KINDS};
use crate::cost::CostModel;
use crate::plan::Plan;
use crate::scenario::Axis;
use crate::schedule::{CollectiveKind, Schedule};
use crate::topology::{FlowPlan, Network};
use std::collections::BTreeMap;

/// Why the left-out transfers could change the simulated ones, or would not mirror them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Coupled {
    /// `link` carries flows of a simulated transfer and of a left-out one.
    SharedLink { link: u32 },
    /// A left-out transfer's flows differ from its counterpart's in shape, size, latency or
    /// link capacity, or map onto its links inconsistently (around `link`, when known).
    NotMirrored { link: Option<u32> },
}

/// Collective specs (kind, bytes, calls) per group kind, and the send peers, of a program.
#[derive(Default)]
struct Used {
    collectives: [Vec<(CollectiveKind, u64, u32)>; GROUP_KINDS],
    /// Bit i: the program sends to peer i (`collapse::PEERS` order).
    sends: u8,
}

impl Used {
    fn of(p: &CProgram) -> Used {
        let mut u = Used::default();
        // Each kind's collectives in program order (the compiled ops are in stream order).
        for (list, ops) in u.collectives.iter_mut().zip(&p.coll_ops) {
            for op in ops.iter().filter_map(|&o| p.ops.get(o as usize)) {
                if let CKind::Collective {
                    kind, bytes, calls, ..
                } = op.kind
                {
                    if !list.contains(&(kind, bytes, calls)) {
                        list.push((kind, bytes, calls));
                    }
                }
            }
        }
        for op in &p.ops {
            if let CKind::P2p {
                send: true, peer, ..
            } = op.kind
            {
                if peer < 8 {
                    u.sends |= 1 << peer;
                }
            }
        }
        u
    }
}

/// The collapse the flow model may run with: every axis but pp collapsed if that is exact,
/// else the innermost axes in placement order, fewer and fewer; `None` when no collapse that
/// leaves out a rank is exact (the engine then simulates every rank).
pub(crate) fn collapse_for_flows(
    net: &Network,
    plan: &Plan,
    schedule: &Schedule,
    cost: &dyn CostModel,
    progs: &[CProgram],
    peers: &[[u32; 4]],
) -> Option<Collapse> {
    if !cost.compute_is_rank_invariant() {
        return None;
    }
    let used: Vec<Used> = progs.iter().map(Used::of).collect();
    let inner: Vec<Axis> = plan.order.into_iter().filter(|&a| a != Axis::Pp).collect();
    let mut tried = 1u32;
    for k in (1..=inner.len()).rev() {
        let axes = inner.get(..k)?;
        let ranks_per_rep = axes
            .iter()
            .fold(1u32, |n, &a| n.saturating_mul(axis_size(plan, a).max(1)));
        if ranks_per_rep <= 1 || ranks_per_rep == tried {
            continue;
        }
        tried = ranks_per_rep;
        let rep_of = representatives_over(plan, axes);
        let ctx = Check {
            net,
            plan,
            program_of: &schedule.program_of,
            used: &used,
            peers,
            rep_of: &rep_of,
        };
        if ctx.mirrored().is_err() {
            continue;
        }
        if let Ok(c) = Collapse::with_reps(plan, schedule, cost, peers, rep_of) {
            return Some(c);
        }
    }
    None
}

/// A transfer the programs can issue: `calls` collectives of `kind` and `bytes` on a group,
/// or a send to peer `peer` (index in `collapse::PEERS`).
#[derive(Clone, Copy, PartialEq)]
enum Transfer {
    Collective {
        group: u32,
        kind: CollectiveKind,
        bytes: u64,
        calls: u32,
    },
    Send {
        src: u32,
        peer: u8,
    },
}

const NONE: u8 = 0;
const SIMULATED: u8 = 1;
const LEFT_OUT: u8 = 2;

/// The inputs of one check, for one choice of representatives.
struct Check<'a> {
    net: &'a Network,
    plan: &'a Plan,
    program_of: &'a [u32],
    used: &'a [Used],
    peers: &'a [[u32; 4]],
    rep_of: &'a [u32],
}

/// Per-link state of the check.
struct Links {
    owner: Vec<u8>,
    /// The simulated link a left-out link mirrors, or `u32::MAX`.
    image: Vec<u32>,
    /// Union-find parents: links joined by a flow are in one component.
    parent: Vec<u32>,
}

impl Links {
    fn find(&mut self, mut x: u32) -> u32 {
        while let Some(&p) = self.parent.get(x as usize) {
            if p == x {
                break;
            }
            let gp = self.parent.get(p as usize).copied().unwrap_or(p);
            if let Some(slot) = self.parent.get_mut(x as usize) {
                *slot = gp;
            }
            x = gp;
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            if let Some(slot) = self.parent.get_mut(ra.max(rb) as usize) {
                *slot = ra.min(rb);
            }
        }
    }
}

impl Check<'_> {
    fn is_rep(&self, r: u32) -> bool {
        self.rep_of.get(r as usize) == Some(&r)
    }

    /// Every transfer the programs can issue, with whether it is simulated.
    fn transfers(&self) -> Vec<(Transfer, bool)> {
        let mut out = Vec::new();
        for (g, group) in self.plan.groups().iter().enumerate() {
            let gk = group.kind.index();
            let simulated = group.members.iter().any(|&m| self.is_rep(m));
            let mut programs: Vec<u32> = group
                .members
                .iter()
                .filter_map(|&m| self.program_of.get(m as usize).copied())
                .collect();
            programs.sort_unstable();
            programs.dedup();
            let mut specs: Vec<(CollectiveKind, u64, u32)> = Vec::new();
            for p in programs {
                let list = self
                    .used
                    .get(p as usize)
                    .and_then(|u| u.collectives.get(gk));
                for &s in list.into_iter().flatten() {
                    if !specs.contains(&s) {
                        specs.push(s);
                    }
                }
            }
            for (kind, bytes, calls) in specs {
                let t = Transfer::Collective {
                    group: g as u32,
                    kind,
                    bytes,
                    calls,
                };
                out.push((t, simulated));
            }
        }
        for r in 0..self.plan.world {
            let sends = self
                .program_of
                .get(r as usize)
                .and_then(|&p| self.used.get(p as usize))
                .map_or(0, |u| u.sends);
            for peer in 0..4u8 {
                if sends & (1 << peer) != 0 {
                    out.push((Transfer::Send { src: r, peer }, self.is_rep(r)));
                }
            }
        }
        out
    }

    /// The flows of transfer `t` (a send as one flow of one byte: only its route matters,
    /// and a send and its counterpart carry the same bytes, since their programs agree).
    fn flows(&self, t: Transfer) -> FlowPlan {
        match t {
            Transfer::Collective {
                group,
                kind,
                bytes,
                calls,
            } => match self.plan.groups().get(group as usize) {
                Some(g) => self.net.collective(kind, g, bytes, calls),
                None => FlowPlan::default(),
            },
            Transfer::Send { src, peer } => {
                let dst = self
                    .peers
                    .get(src as usize)
                    .and_then(|p| p.get(peer as usize))
                    .copied()
                    .unwrap_or(src);
                self.net.p2p(src, dst, 1)
            }
        }
    }

    /// The simulated transfer that left-out transfer `t` mirrors.
    fn counterpart(&self, t: Transfer) -> Option<Transfer> {
        match t {
            Transfer::Collective {
                group,
                kind,
                bytes,
                calls,
            } => {
                let g = self.plan.groups().get(group as usize)?;
                let rep = *self.rep_of.get(*g.members.first()? as usize)?;
                Some(Transfer::Collective {
                    group: self.plan.group_of(rep, g.kind),
                    kind,
                    bytes,
                    calls,
                })
            }
            Transfer::Send { src, peer } => Some(Transfer::Send {
                src: *self.rep_of.get(src as usize)?,
                peer,
            }),
        }
    }

    /// Rules 1 and 2 of the module doc.
    fn mirrored(&self) -> Result<(), Coupled> {
        let capacity = self.net.capacities();
        let n = capacity.len();
        let mut links = Links {
            owner: vec![NONE; n],
            image: vec![u32::MAX; n],
            parent: (0..n as u32).collect(),
        };
        let transfers = self.transfers();
        // Simulated transfers: their links, and the first link of each of their flows.
        let mut simulated: Vec<(Transfer, u32, FlowPlan)> = Vec::new();
        let mut first_of_flow: Vec<u32> = Vec::new();
        for &(t, _) in transfers.iter().filter(|(_, s)| *s) {
            let plan = self.flows(t);
            simulated.push((t, first_of_flow.len() as u32, plan.clone()));
            for (path, _) in plan.phases.iter().flatten() {
                let p = path.as_slice();
                let Some(&first) = p.first() else { continue };
                first_of_flow.push(first);
                for &l in p {
                    if let Some(o) = links.owner.get_mut(l as usize) {
                        *o = SIMULATED;
                    }
                    links.union(first, l);
                }
            }
        }
        let find_simulated = |t: Transfer| {
            simulated
                .iter()
                .find(|(s, _, _)| *s == t)
                .map(|(_, base, plan)| (*base, plan))
        };
        // Left-out transfers: mirrored link by link onto their counterparts.
        let mut left_flows: Vec<(u32, u32)> = Vec::new(); // (first link, counterpart flow)
        for &(t, _) in transfers.iter().filter(|(_, s)| !*s) {
            let mirror = self.counterpart(t).and_then(find_simulated);
            let Some((base, other)) = mirror else {
                return Err(Coupled::NotMirrored { link: None });
            };
            let plan = self.flows(t);
            let same_shape = plan.latency_ns == other.latency_ns
                && plan.phases.len() == other.phases.len()
                && plan
                    .phases
                    .iter()
                    .zip(&other.phases)
                    .all(|(a, b)| a.len() == b.len());
            if !same_shape {
                return Err(Coupled::NotMirrored { link: None });
            }
            let pairs = plan
                .phases
                .iter()
                .flatten()
                .zip(other.phases.iter().flatten());
            // The counterpart's flows are numbered from `base` (those with a link).
            let mut j = base;
            for ((path, bytes), (opath, obytes)) in pairs {
                let (p, q) = (path.as_slice(), opath.as_slice());
                if p.len() != q.len() || bytes.to_bits() != obytes.to_bits() {
                    return Err(Coupled::NotMirrored {
                        link: p.first().copied(),
                    });
                }
                let Some(&first) = p.first() else { continue };
                left_flows.push((first, j));
                j += 1;
                for (&l, &m) in p.iter().zip(q) {
                    let (li, mi) = (l as usize, m as usize);
                    match links.owner.get(li) {
                        Some(&SIMULATED) => return Err(Coupled::SharedLink { link: l }),
                        Some(_) => links.owner[li] = LEFT_OUT,
                        None => return Err(Coupled::NotMirrored { link: Some(l) }),
                    }
                    let same_capacity = matches!(
                        (capacity.get(li), capacity.get(mi)),
                        (Some(a), Some(b)) if a.to_bits() == b.to_bits()
                    );
                    let image = links.image[li];
                    if !same_capacity || (image != u32::MAX && image != m) {
                        return Err(Coupled::NotMirrored { link: Some(l) });
                    }
                    links.image[li] = m;
                    links.union(first, l);
                }
            }
        }
        components_match(&mut links, &first_of_flow, &mut left_flows)
    }
}

/// The last part of rule 2: the link map is one-to-one on each left-out component and takes
/// its flows one-to-one onto all the flows of one simulated component, and its links onto
/// all of that component's links.
fn components_match(
    links: &mut Links,
    first_of_flow: &[u32],
    left_flows: &mut [(u32, u32)],
) -> Result<(), Coupled> {
    let n = links.owner.len();
    let mut flows_in = vec![0u32; n];
    let mut links_in = vec![0u32; n];
    for &first in first_of_flow {
        let r = links.find(first) as usize;
        if let Some(c) = flows_in.get_mut(r) {
            *c += 1;
        }
    }
    let mut images: Vec<(u32, u32, u32)> = Vec::new(); // (left-out root, image, link)
    for l in 0..n as u32 {
        let r = links.find(l);
        match links.owner[l as usize] {
            NONE => {}
            LEFT_OUT => images.push((r, links.image[l as usize], l)),
            _ => links_in[r as usize] += 1,
        }
    }
    images.sort_unstable();
    for w in images.windows(2) {
        if let [a, b] = w {
            if (a.0, a.1) == (b.0, b.1) {
                return Err(Coupled::NotMirrored { link: Some(b.2) });
            }
        }
    }
    for f in left_flows.iter_mut() {
        f.0 = links.find(f.0);
    }
    left_flows.sort_unstable();
    // Per left-out component: its image component, and its flow and link counts.
    let mut of_root: BTreeMap<u32, (u32, u32, u32)> = BTreeMap::new();
    for (i, &(root, flow)) in left_flows.iter().enumerate() {
        if i > 0 && left_flows.get(i - 1) == Some(&(root, flow)) {
            return Err(Coupled::NotMirrored { link: Some(root) });
        }
        let Some(&first) = first_of_flow.get(flow as usize) else {
            return Err(Coupled::NotMirrored { link: Some(root) });
        };
        let target = links.find(first);
        let e = of_root.entry(root).or_insert((target, 0, 0));
        if e.0 != target {
            return Err(Coupled::NotMirrored { link: Some(root) });
        }
        e.1 += 1;
    }
    for &(root, _, _) in &images {
        if let Some(e) = of_root.get_mut(&root) {
            e.2 += 1;
        }
    }
    for (&root, &(target, flows, nlinks)) in &of_root {
        let t = target as usize;
        if flows_in.get(t) != Some(&flows) || links_in.get(t) != Some(&nlinks) {
            return Err(Coupled::NotMirrored { link: Some(root) });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "symmetry_tests.rs"]
mod tests;
