//! Collectives over the TCP mesh with real data and the algorithms the simulator's cost model
//! assumes: ring reduce-scatter and all-gather (n-1 steps each), ring all-reduce (the two in
//! sequence), pairwise all-to-all (n-1 exchanges), and a chunked ring broadcast from the first
//! member. Data is f32 (the host backend's compute type). Inputs follow a known pattern so
//! every result can be checked exactly: small integers, whose sums are exact in f32.

use super::mesh::Mesh;
use crate::error::RuntimeError;
use std::cell::Cell;
use std::ops::Range;
use std::time::Instant;
use twin_sim::plan::RankId;
use twin_sim::schedule::CollectiveKind;

/// Pieces of a broadcast pipeline (elements).
const BROADCAST_PIECE_ELEMS: usize = 1 << 18;

/// One member's view of a collective call.
#[derive(Clone, Copy)]
pub struct Ring<'a> {
    pub mesh: &'a Mesh,
    /// Group members in ring order.
    pub members: &'a [RankId],
    /// This rank's position in `members`.
    pub me: usize,
    pub lane: u8,
    /// Identifies the call on the wire (both sides must agree).
    pub tag: u64,
    /// Fault injection: damage every message this member sends.
    pub corrupt: bool,
    /// When the first message of the call arrived (a neighbour had joined), if recorded.
    pub arrived: Option<&'a Cell<Option<Instant>>>,
}

impl<'a> Ring<'a> {
    pub fn new(
        mesh: &'a Mesh,
        members: &'a [RankId],
        lane: u8,
        tag: u64,
    ) -> Result<Ring<'a>, RuntimeError> {
        let me = members
            .iter()
            .position(|&m| m == mesh.rank)
            .ok_or_else(|| {
                RuntimeError::Unsupported(format!(
                    "rank {} is not a member of group {members:?}",
                    mesh.rank
                ))
            })?;
        Ok(Ring {
            mesh,
            members,
            me,
            lane,
            tag,
            corrupt: false,
            arrived: None,
        })
    }
    fn n(&self) -> usize {
        self.members.len()
    }
    fn member(&self, pos: usize) -> RankId {
        self.members
            .get(pos % self.n().max(1))
            .copied()
            .unwrap_or(self.mesh.rank)
    }
    fn next(&self) -> RankId {
        self.member(self.me + 1)
    }
    fn prev(&self) -> RankId {
        self.member(self.me + self.n() - 1)
    }
    fn note_arrival(&self, at: Instant) {
        if let Some(c) = self.arrived {
            if c.get().is_none() {
                c.set(Some(at));
            }
        }
    }
    fn step_tag(&self, phase: u64, step: usize) -> u64 {
        self.tag ^ (phase << 60) ^ ((step as u64) << 48)
    }
    /// Ring step: send `out` to the next member, receive `len` elements from the previous.
    fn ring_step(
        &self,
        phase: u64,
        step: usize,
        out: &[f32],
        len: usize,
    ) -> Result<Vec<f32>, RuntimeError> {
        let (got, at) = self.mesh.exchange(
            self.next(),
            self.prev(),
            self.lane,
            self.step_tag(phase, step),
            &to_bytes(out),
            (len * 4) as u64,
            self.corrupt,
        )?;
        self.note_arrival(at);
        Ok(from_bytes(&got))
    }
}

/// Element range of chunk `i` when `elems` are split into `parts` near-equal chunks.
pub fn chunk(elems: usize, parts: usize, i: usize) -> Range<usize> {
    let parts = parts.max(1);
    let i = i % parts;
    (i * elems / parts)..((i + 1) * elems / parts)
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Ring reduce-scatter in place: afterwards chunk `me` holds the sum over members.
pub fn reduce_scatter(ring: &Ring, data: &mut [f32]) -> Result<(), RuntimeError> {
    let n = ring.n();
    let len = data.len();
    for s in 0..n.saturating_sub(1) {
        let send = chunk(len, n, ring.me + 2 * n - s - 1);
        let recv = chunk(len, n, ring.me + 2 * n - s - 2);
        let out = data.get(send).unwrap_or_default().to_vec();
        let got = ring.ring_step(1, s, &out, recv.len())?;
        for (d, g) in data.get_mut(recv).unwrap_or_default().iter_mut().zip(got) {
            *d += g;
        }
    }
    Ok(())
}

/// Ring all-gather in place: chunk `me` is this member's; afterwards every chunk is filled.
pub fn all_gather(ring: &Ring, data: &mut [f32]) -> Result<(), RuntimeError> {
    let n = ring.n();
    let len = data.len();
    for s in 0..n.saturating_sub(1) {
        let send = chunk(len, n, ring.me + n - s);
        let recv = chunk(len, n, ring.me + n - s - 1);
        let out = data.get(send).unwrap_or_default().to_vec();
        let got = ring.ring_step(2, s, &out, recv.len())?;
        if let Some(dst) = data.get_mut(recv) {
            dst.copy_from_slice(got.get(..dst.len()).unwrap_or_default());
        }
    }
    Ok(())
}

/// Ring all-reduce: reduce-scatter then all-gather.
pub fn all_reduce(ring: &Ring, data: &mut [f32]) -> Result<(), RuntimeError> {
    reduce_scatter(ring, data)?;
    all_gather(ring, data)
}

/// Pairwise all-to-all: chunk j of the input goes to member j; chunk j of the output came
/// from member j. Chunks are `len / n` elements; a remainder stays in place.
pub fn all_to_all(ring: &Ring, data: &[f32]) -> Result<Vec<f32>, RuntimeError> {
    let n = ring.n();
    let c = data.len() / n.max(1);
    let mut out = data.to_vec();
    for s in 1..n {
        let to = (ring.me + s) % n;
        let from = (ring.me + n - s) % n;
        let payload = to_bytes(data.get(to * c..(to + 1) * c).unwrap_or_default());
        let (got, at) = ring.mesh.exchange(
            ring.member(to),
            ring.member(from),
            ring.lane,
            ring.step_tag(3, s),
            &payload,
            (c * 4) as u64,
            ring.corrupt,
        )?;
        ring.note_arrival(at);
        if let Some(dst) = out.get_mut(from * c..(from + 1) * c) {
            dst.copy_from_slice(&from_bytes(&got));
        }
    }
    Ok(out)
}

/// Chunked ring broadcast from member 0: pieces flow down the ring, each member forwarding
/// a piece as soon as it has it.
pub fn broadcast(ring: &Ring, data: &mut [f32]) -> Result<(), RuntimeError> {
    let n = ring.n();
    if n < 2 {
        return Ok(());
    }
    let pieces = data.len().div_ceil(BROADCAST_PIECE_ELEMS).max(1);
    for p in 0..pieces {
        let r = (p * BROADCAST_PIECE_ELEMS).min(data.len())
            ..((p + 1) * BROADCAST_PIECE_ELEMS).min(data.len());
        let tag = ring.step_tag(4, p);
        if ring.me != 0 {
            let (got, at) = ring
                .mesh
                .recv(ring.prev(), ring.lane, tag, (r.len() * 4) as u64)?;
            ring.note_arrival(at);
            if let Some(dst) = data.get_mut(r.clone()) {
                dst.copy_from_slice(&from_bytes(&got));
            }
        }
        if ring.me + 1 < n {
            let out = to_bytes(data.get(r).unwrap_or_default());
            ring.mesh
                .send(ring.next(), ring.lane, tag, &out, ring.corrupt)?;
        }
    }
    Ok(())
}

/// Input value of element `e` on `rank` for a call salted with `salt`.
pub fn value(rank: RankId, e: usize, salt: u64) -> f32 {
    ((u64::from(rank) + 1) * ((e as u64 % 5) + 1) + salt % 3) as f32
}

/// The input buffer of `elems` elements this member contributes.
pub fn input(kind: CollectiveKind, ring: &Ring, elems: usize, salt: u64) -> Vec<f32> {
    let rank = ring.mesh.rank;
    match kind {
        CollectiveKind::AllGather => {
            let mine = chunk(elems, ring.n(), ring.me);
            (0..elems)
                .map(|e| {
                    if mine.contains(&e) {
                        value(rank, e, salt)
                    } else {
                        0.0
                    }
                })
                .collect()
        }
        CollectiveKind::Broadcast if ring.me != 0 => vec![0.0; elems],
        _ => (0..elems).map(|e| value(rank, e, salt)).collect(),
    }
}

/// Run one call of `kind` on `data` (this member's input); returns this member's output.
pub fn execute(
    kind: CollectiveKind,
    ring: &Ring,
    mut data: Vec<f32>,
) -> Result<Vec<f32>, RuntimeError> {
    match kind {
        CollectiveKind::AllReduce => all_reduce(ring, &mut data)?,
        CollectiveKind::ReduceScatter => reduce_scatter(ring, &mut data)?,
        CollectiveKind::AllGather => all_gather(ring, &mut data)?,
        CollectiveKind::Broadcast => broadcast(ring, &mut data)?,
        CollectiveKind::AllToAll => return all_to_all(ring, &data),
    }
    Ok(data)
}

/// What one member's output must hold after a call: the elements in `range` (the member's
/// own chunk for a reduce-scatter, else all) must equal `values` there.
pub struct Expected {
    pub range: Range<usize>,
    pub values: Vec<f32>,
}

/// The output this member must see after a call of `kind` over inputs from [`input`].
pub fn expected(kind: CollectiveKind, ring: &Ring, elems: usize, salt: u64) -> Expected {
    let n = ring.n();
    let sum_ranks: u64 = ring.members.iter().map(|&m| u64::from(m) + 1).sum();
    let reduced = |e: usize| (sum_ranks * ((e as u64 % 5) + 1) + (n as u64) * (salt % 3)) as f32;
    let c = elems / n.max(1);
    let range = match kind {
        CollectiveKind::ReduceScatter => chunk(elems, n, ring.me),
        _ => 0..elems,
    };
    let mut owner = 0usize;
    let values = (0..elems)
        .map(|e| match kind {
            CollectiveKind::AllReduce | CollectiveKind::ReduceScatter => reduced(e),
            CollectiveKind::AllGather => {
                while owner + 1 < n && !chunk(elems, n, owner).contains(&e) {
                    owner += 1;
                }
                value(ring.member(owner), e, salt)
            }
            CollectiveKind::Broadcast => value(ring.member(0), e, salt),
            CollectiveKind::AllToAll => {
                if c == 0 || e >= n * c {
                    value(ring.mesh.rank, e, salt)
                } else {
                    value(ring.member(e / c), ring.me * c + e % c, salt)
                }
            }
        })
        .collect();
    Expected { range, values }
}

/// Check this member's output against `want`; the first wrong element is reported.
pub fn check(
    kind: CollectiveKind,
    ring: &Ring,
    out: &[f32],
    want: &Expected,
) -> Result<(), RuntimeError> {
    let wrong = |e: usize, got: Option<f32>, want: Option<f32>| {
        RuntimeError::WrongResult(format!(
            "{} over ranks {:?}: element {e} is {}, expected {}",
            kind.name(),
            ring.members,
            got.map_or("missing".into(), |g| g.to_string()),
            want.map_or("nothing".into(), |w| w.to_string()),
        ))
    };
    if out.len() != want.values.len() {
        return Err(wrong(out.len().min(want.values.len()), None, None));
    }
    let (Some(got), Some(exp)) = (
        out.get(want.range.clone()),
        want.values.get(want.range.clone()),
    ) else {
        return Err(wrong(want.range.start, None, None));
    };
    if got != exp {
        let i = got.iter().zip(exp).position(|(g, w)| g != w).unwrap_or(0);
        let e = want.range.start + i;
        return Err(wrong(e, got.get(i).copied(), exp.get(i).copied()));
    }
    Ok(())
}

/// Check this member's output against what the collective must produce from the inputs of
/// [`input`]; the first wrong element is reported.
pub fn verify(
    kind: CollectiveKind,
    ring: &Ring,
    out: &[f32],
    salt: u64,
) -> Result<(), RuntimeError> {
    check(kind, ring, out, &expected(kind, ring, out.len(), salt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_partition_the_buffer() {
        for (elems, parts) in [(10, 3), (7, 8), (0, 4), (64, 8)] {
            let mut next = 0;
            for i in 0..parts {
                let r = chunk(elems, parts, i);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, elems);
        }
    }

    #[test]
    fn one_member_collectives_are_identities_and_check() {
        let mesh = Mesh::single();
        let members = [0];
        let ring = Ring::new(&mesh, &members, 1, 9).unwrap();
        for kind in [
            CollectiveKind::AllReduce,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllGather,
            CollectiveKind::AllToAll,
            CollectiveKind::Broadcast,
        ] {
            let data = input(kind, &ring, 33, 4);
            let out = execute(kind, &ring, data).unwrap();
            verify(kind, &ring, &out, 4).unwrap();
            // A wrong element is caught.
            let mut bad = out.clone();
            bad[5] += 1.0;
            let e = verify(kind, &ring, &bad, 4).unwrap_err().to_string();
            assert!(e.contains("element 5"), "{e}");
        }
    }
}
