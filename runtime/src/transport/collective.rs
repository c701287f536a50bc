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
    /// Ring step: send `out` to the next member while receiving `into` (its length) from the
    /// previous one.
    fn ring_step(
        &self,
        phase: u64,
        step: usize,
        out: &[f32],
        into: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let at = self.mesh.exchange(
            self.next(),
            self.prev(),
            self.lane,
            self.step_tag(phase, step),
            as_bytes(out),
            as_bytes_mut(into),
            self.corrupt,
        )?;
        self.note_arrival(at);
        Ok(())
    }
}

/// Element range of chunk `i` when `elems` are split into `parts` near-equal chunks.
pub fn chunk(elems: usize, parts: usize, i: usize) -> Range<usize> {
    let parts = parts.max(1);
    let i = i % parts;
    (i * elems / parts)..((i + 1) * elems / parts)
}

/// The bytes of `v` as they go on the wire (native order: both ends are this machine's).
fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and u8 no alignment, so the `4 * len` bytes behind `v` are
    // initialised and readable for the borrow's lifetime.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// `v`'s bytes, to receive into.
fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`, and every bit pattern written through the bytes is a valid f32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// `send` to read and `recv` to write in one buffer; empty when the two ranges overlap.
fn split_pair(buf: &mut [f32], send: Range<usize>, recv: Range<usize>) -> (&[f32], &mut [f32]) {
    if send.end <= recv.start {
        let (lo, hi) = buf.split_at_mut(recv.start.min(buf.len()));
        (
            lo.get(send).unwrap_or_default(),
            hi.get_mut(..recv.len()).unwrap_or_default(),
        )
    } else if recv.end <= send.start {
        let (lo, hi) = buf.split_at_mut(send.start.min(buf.len()));
        (
            hi.get(..send.len()).unwrap_or_default(),
            lo.get_mut(recv).unwrap_or_default(),
        )
    } else {
        (&[], &mut [])
    }
}

/// `dst = a + b`, element by element.
fn add_into(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
}

/// A member's buffers for calls of one shape, kept from call to call as a framework keeps its
/// tensors (and NCCL its buffers): `out` holds the result, `acc` and `recv` a chunk each for
/// the reduce-scatter. A kept buffer is never page-faulted again, and no input is copied to be
/// worked on in place: the algorithms read the input and write `out`.
#[derive(Default)]
pub struct Work {
    out: Vec<f32>,
    acc: Vec<f32>,
    recv: Vec<f32>,
}

impl Work {
    /// The output of the last call.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// Size the buffers for a call of `kind` over `elems` elements and mark the start of every
    /// chunk the call must write with a NaN, so a kept buffer cannot pass the check with the
    /// last call's result where this call wrote nothing.
    fn prepare(&mut self, kind: CollectiveKind, ring: &Ring, elems: usize) {
        let n = ring.n();
        let most = elems.div_ceil(n.max(1));
        self.out.resize(elems, 0.0);
        self.acc.resize(most, 0.0);
        self.recv.resize(most, 0.0);
        // Every chunk of the output is received or copied in, except that a reduce-scatter's
        // output is this member's chunk alone.
        for c in 0..n {
            let written = kind != CollectiveKind::ReduceScatter || c == ring.me;
            if let Some(first) = self.out.get_mut(chunk(elems, n, c).start) {
                if written {
                    *first = f32::NAN;
                }
            }
        }
    }
}

/// Ring reduce-scatter of `input` (left as it is): afterwards chunk `me` of `work.out` holds
/// the sum over members. Each step adds the received partial sum to this member's input
/// chunk in `work.acc`, which the next step sends on.
fn reduce_scatter(ring: &Ring, input: &[f32], work: &mut Work) -> Result<(), RuntimeError> {
    let n = ring.n();
    let len = input.len();
    let mine = chunk(len, n, ring.me);
    if n < 2 {
        if let (Some(dst), Some(src)) = (work.out.get_mut(mine.clone()), input.get(mine)) {
            dst.copy_from_slice(src);
        }
        return Ok(());
    }
    let mut sent_len = 0;
    for s in 0..n - 1 {
        let send = chunk(len, n, ring.me + 2 * n - s - 1);
        let recv = chunk(len, n, ring.me + 2 * n - s - 2);
        let out = if s == 0 {
            input.get(send).unwrap_or_default()
        } else {
            work.acc.get(..sent_len).unwrap_or_default()
        };
        let into = work.recv.get_mut(..recv.len()).unwrap_or_default();
        ring.ring_step(1, s, out, into)?;
        let dst = if s + 2 == n {
            work.out.get_mut(recv.clone()).unwrap_or_default()
        } else {
            work.acc.get_mut(..recv.len()).unwrap_or_default()
        };
        sent_len = recv.len();
        add_into(dst, input.get(recv).unwrap_or_default(), &work.recv);
    }
    Ok(())
}

/// Ring all-gather in `out`, whose chunk `me` is this member's: afterwards every chunk is
/// filled, each received straight into place.
fn all_gather_in_place(ring: &Ring, out: &mut [f32]) -> Result<(), RuntimeError> {
    let n = ring.n();
    let len = out.len();
    for s in 0..n.saturating_sub(1) {
        let send = chunk(len, n, ring.me + n - s);
        let recv = chunk(len, n, ring.me + n - s - 1);
        let (from, into) = split_pair(out, send, recv);
        ring.ring_step(2, s, from, into)?;
    }
    Ok(())
}

/// Ring all-gather: this member's chunk of `input` is copied to `work.out` (as NCCL's
/// out-of-place all-gather does), then the others arrive.
fn all_gather(ring: &Ring, input: &[f32], work: &mut Work) -> Result<(), RuntimeError> {
    let mine = chunk(input.len(), ring.n(), ring.me);
    if let (Some(dst), Some(src)) = (work.out.get_mut(mine.clone()), input.get(mine)) {
        dst.copy_from_slice(src);
    }
    all_gather_in_place(ring, &mut work.out)
}

/// Ring all-reduce: reduce-scatter into `work.out`, then all-gather there.
fn all_reduce(ring: &Ring, input: &[f32], work: &mut Work) -> Result<(), RuntimeError> {
    reduce_scatter(ring, input, work)?;
    all_gather_in_place(ring, &mut work.out)
}

/// Pairwise all-to-all: chunk j of the input goes to member j; chunk j of the output came
/// from member j. Chunks are `len / n` elements; this member's own chunk and a remainder are
/// copied over.
fn all_to_all(ring: &Ring, input: &[f32], work: &mut Work) -> Result<(), RuntimeError> {
    let n = ring.n();
    let c = input.len() / n.max(1);
    for keep in [ring.me * c..(ring.me + 1) * c, n * c..input.len()] {
        if let (Some(dst), Some(src)) = (work.out.get_mut(keep.clone()), input.get(keep)) {
            dst.copy_from_slice(src);
        }
    }
    for s in 1..n {
        let to = (ring.me + s) % n;
        let from = (ring.me + n - s) % n;
        let at = ring.mesh.exchange(
            ring.member(to),
            ring.member(from),
            ring.lane,
            ring.step_tag(3, s),
            as_bytes(input.get(to * c..(to + 1) * c).unwrap_or_default()),
            as_bytes_mut(
                work.out
                    .get_mut(from * c..(from + 1) * c)
                    .unwrap_or_default(),
            ),
            ring.corrupt,
        )?;
        ring.note_arrival(at);
    }
    Ok(())
}

/// Chunked ring broadcast from member 0 into `work.out`: pieces flow down the ring, each
/// member forwarding a piece as soon as it has it.
fn broadcast(ring: &Ring, input: &[f32], work: &mut Work) -> Result<(), RuntimeError> {
    let n = ring.n();
    if ring.me == 0 {
        let len = work.out.len();
        if let Some(src) = input.get(..len) {
            work.out.copy_from_slice(src);
        }
    }
    if n < 2 {
        return Ok(());
    }
    let data = &mut work.out;
    let pieces = data.len().div_ceil(BROADCAST_PIECE_ELEMS).max(1);
    for p in 0..pieces {
        let r = (p * BROADCAST_PIECE_ELEMS).min(data.len())
            ..((p + 1) * BROADCAST_PIECE_ELEMS).min(data.len());
        let tag = ring.step_tag(4, p);
        if ring.me != 0 {
            let into = data.get_mut(r.clone()).unwrap_or_default();
            let at = ring
                .mesh
                .recv_into(ring.prev(), ring.lane, tag, as_bytes_mut(into))?;
            ring.note_arrival(at);
        }
        if ring.me + 1 < n {
            let out = as_bytes(data.get(r).unwrap_or_default());
            ring.mesh
                .send(ring.next(), ring.lane, tag, out, ring.corrupt)?;
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

/// Run one call of `kind` on `input` (this member's) into `work`, whose buffers are kept
/// from call to call; the output is `work.output()`.
pub fn execute_into(
    kind: CollectiveKind,
    ring: &Ring,
    input: &[f32],
    work: &mut Work,
) -> Result<(), RuntimeError> {
    work.prepare(kind, ring, input.len());
    match kind {
        CollectiveKind::AllReduce => all_reduce(ring, input, work),
        CollectiveKind::ReduceScatter => reduce_scatter(ring, input, work),
        CollectiveKind::AllGather => all_gather(ring, input, work),
        CollectiveKind::Broadcast => broadcast(ring, input, work),
        CollectiveKind::AllToAll => all_to_all(ring, input, work),
    }
}

/// Run one call of `kind` on `input` (this member's); returns this member's output.
pub fn execute(kind: CollectiveKind, ring: &Ring, input: &[f32]) -> Result<Vec<f32>, RuntimeError> {
    let mut work = Work::default();
    execute_into(kind, ring, input, &mut work)?;
    Ok(work.out)
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
    // Compared as bytes (a memcmp): results are exact, and an element-wise f32 comparison
    // of a 1.8 MiB all-gather took about 230 us of the op.
    if as_bytes(got) != as_bytes(exp) {
        let i = got
            .iter()
            .zip(exp)
            .position(|(g, w)| g.to_bits() != w.to_bits())
            .unwrap_or(0);
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

    /// Kept buffers: a second call with other data checks, and a buffer whose call wrote
    /// nothing (only prepared) fails the check at a chunk it should have written, though it
    /// still holds the last call's right answer elsewhere.
    #[test]
    fn kept_work_buffers_give_each_call_its_own_checked_result() {
        let meshes =
            crate::microbench::local_meshes(3, std::time::Duration::from_secs(10)).unwrap();
        let members = [0u32, 1, 2];
        let kinds = [
            CollectiveKind::AllReduce,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllGather,
            CollectiveKind::AllToAll,
            CollectiveKind::Broadcast,
        ];
        std::thread::scope(|s| {
            for mesh in &meshes {
                s.spawn(move || {
                    for (k, kind) in kinds.into_iter().enumerate() {
                        let mut work = Work::default();
                        for salt in [1u64, 2] {
                            let ring = Ring::new(mesh, &members, 1, 100 * k as u64 + salt).unwrap();
                            let data = input(kind, &ring, 1001, salt);
                            execute_into(kind, &ring, &data, &mut work).unwrap();
                            verify(kind, &ring, work.output(), salt).unwrap();
                            assert_eq!(
                                data,
                                input(kind, &ring, 1001, salt),
                                "input left as it was"
                            );
                        }
                        // The second call worked in the first call's buffers.
                        let at = (work.out.as_ptr(), work.acc.as_ptr(), work.recv.as_ptr());
                        let ring = Ring::new(mesh, &members, 1, 300 + k as u64).unwrap();
                        let data = input(kind, &ring, 1001, 3);
                        execute_into(kind, &ring, &data, &mut work).unwrap();
                        assert_eq!(
                            at,
                            (work.out.as_ptr(), work.acc.as_ptr(), work.recv.as_ptr()),
                            "{}: a call of the same shape reallocated",
                            kind.name()
                        );
                        let ring = Ring::new(mesh, &members, 1, 0).unwrap();
                        work.prepare(kind, &ring, 1001);
                        let e = verify(kind, &ring, work.output(), 2)
                            .unwrap_err()
                            .to_string();
                        assert!(e.contains("is NaN"), "{}: {e}", kind.name());
                    }
                });
            }
        });
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
            let out = execute(kind, &ring, &data).unwrap();
            verify(kind, &ring, &out, 4).unwrap();
            // A wrong element is caught.
            let mut bad = out.clone();
            bad[5] += 1.0;
            let e = verify(kind, &ring, &bad, 4).unwrap_err().to_string();
            assert!(e.contains("element 5"), "{e}");
        }
    }
}
