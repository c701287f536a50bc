//! A step's GPU time, attributed once: the step breakdown, and per-class totals.

use super::{KernelClass, RankTrace, TraceError};
use serde::Serialize;

/// Where one step's GPU time went. Every instant of the step is attributed to exactly one
/// thing, so `by_class_ns` and `idle_ns` sum to `step_ns` exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepBreakdown {
    pub step_ns: u64,
    /// Every class in [`KernelClass::ALL`] order (zeros included): the time the class held the
    /// GPU. An instant where any compute kernel runs on any stream is compute, given to the
    /// first compute class in priority order that runs then; an instant with communication but
    /// no compute is the communication's (exposed); one with only memcpy/memset is theirs.
    pub by_class_ns: Vec<(KernelClass, u64)>,
    /// No GPU activity on any stream.
    pub idle_ns: u64,
    /// Communication with no compute beside it: the collective and p2p entries of
    /// `by_class_ns` together.
    pub exposed_comm_ns: u64,
    /// The time any collective or p2p kernel ran, overlapped or not (a union over streams: two
    /// concurrent NCCL kernels count once).
    pub comm_ns: u64,
    /// GPU activities that overlap the step (or, lasting 0 ns, start in it).
    pub kernels: u32,
}

impl StepBreakdown {
    /// The time of one class.
    pub fn class_ns(&self, class: KernelClass) -> u64 {
        self.by_class_ns
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(0, |(_, ns)| *ns)
    }
}

/// Sweeps step `step` of `t` once (see [`StepBreakdown`]). Activity outside the step is clipped.
pub fn breakdown(t: &RankTrace, step: usize) -> Result<StepBreakdown, TraceError> {
    let span = t
        .steps
        .get(step)
        .ok_or_else(|| TraceError::StepOutOfRange {
            path: t.path.clone(),
            step,
            steps: t.steps.len(),
        })?;
    let (s, e) = (span.start_ns, span.end_ns());
    // (time, +1 start / -1 end, class index)
    let mut edges: Vec<(u64, i32, usize)> = Vec::new();
    let mut kernels = 0u32;
    for k in &t.kernels {
        let (ks, ke) = (k.start_ns.max(s), k.end_ns().min(e));
        if ks < ke {
            edges.push((ks, 1, k.class as usize));
            edges.push((ke, -1, k.class as usize));
            kernels = kernels.saturating_add(1);
        } else if k.dur_ns == 0 && s <= k.start_ns && k.start_ns < e {
            kernels = kernels.saturating_add(1);
        }
    }
    edges.sort_unstable();

    let mut by_class = [0u64; KernelClass::ALL.len()];
    let mut running = [0i64; KernelClass::ALL.len()];
    let (mut idle_ns, mut comm_ns) = (0u64, 0u64);
    let mut cursor = s;
    let mut attribute = |until: u64, running: &[i64; KernelClass::ALL.len()]| {
        let dt = until.saturating_sub(cursor);
        cursor = cursor.max(until);
        if dt == 0 {
            return;
        }
        // The first running class in priority order (the declaration order of KernelClass).
        match running.iter().position(|n| *n > 0) {
            Some(i) => {
                if let Some(slot) = by_class.get_mut(i) {
                    *slot += dt;
                }
            }
            None => idle_ns += dt,
        }
        let comm = [KernelClass::Collective, KernelClass::P2p]
            .iter()
            .any(|c| running.get(*c as usize).is_some_and(|n| *n > 0));
        if comm {
            comm_ns += dt;
        }
    };
    for (time, delta, class) in edges {
        attribute(time, &running);
        if let Some(n) = running.get_mut(class) {
            *n += i64::from(delta);
        }
    }
    attribute(e, &running);

    let by_class_ns: Vec<(KernelClass, u64)> = KernelClass::ALL
        .iter()
        .zip(by_class)
        .map(|(c, ns)| (*c, ns))
        .collect();
    let exposed_comm_ns = by_class_ns
        .iter()
        .filter(|(c, _)| c.is_comm())
        .map(|(_, ns)| ns)
        .sum();
    Ok(StepBreakdown {
        step_ns: span.dur_ns,
        by_class_ns,
        idle_ns,
        exposed_comm_ns,
        comm_ns,
        kernels,
    })
}

/// How many activities of one class, and their summed durations (not exclusive: overlapping
/// kernels each count in full).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassTotal {
    pub class: KernelClass,
    pub kernels: u32,
    pub busy_ns: u64,
}

/// Per-class kernel counts and summed durations, for reports: of the whole trace (`step`
/// `None`), or of the activities that start within step `step`. Every class, in
/// [`KernelClass::ALL`] order.
pub fn class_totals(t: &RankTrace, step: Option<usize>) -> Result<Vec<ClassTotal>, TraceError> {
    let range = match step {
        None => None,
        Some(i) => {
            let span = t.steps.get(i).ok_or_else(|| TraceError::StepOutOfRange {
                path: t.path.clone(),
                step: i,
                steps: t.steps.len(),
            })?;
            Some((span.start_ns, span.end_ns()))
        }
    };
    let mut totals: Vec<ClassTotal> = KernelClass::ALL
        .iter()
        .map(|c| ClassTotal {
            class: *c,
            kernels: 0,
            busy_ns: 0,
        })
        .collect();
    for k in &t.kernels {
        if let Some((s, e)) = range {
            if k.start_ns < s || k.start_ns >= e.max(s.saturating_add(1)) {
                continue;
            }
        }
        if let Some(total) = totals.get_mut(k.class as usize) {
            total.kernels = total.kernels.saturating_add(1);
            total.busy_ns = total.busy_ns.saturating_add(k.dur_ns);
        }
    }
    Ok(totals)
}
