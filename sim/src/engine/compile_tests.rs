//! Tests of compiling schedules into the engine's flat programs: stream order, dependency
//! checks and the errors a malformed program gives. Split from `engine::compile` so that the
//! compiler reads on its own.

use super::*;

use super::super::testkit::{FixedCost, ProgBuilder, SharedCores};
use crate::schedule::{CollectiveKind, MemCategory, Phase};

/// A cost model that prices allocs and frees, so that the engine runs them as ops.
fn priced() -> SharedCores {
    SharedCores {
        alloc_ns_per_byte: 1,
        free_ns: 1,
        ..SharedCores::default()
    }
}

/// Stream order: each stream's ops sit contiguously in `ops` in program order, each op
/// keeps its IR index, `dep_at` names each dep's stream and position, and the collective
/// lists hold positions in program order.
#[test]
fn ops_are_laid_out_in_stream_order() {
    let mut b = ProgBuilder::new(0);
    let a = b.alloc(MemCategory::Weights, 10, 0, &[]);
    let f = b.fwd(5, &[a]);
    let c = b.collective(
        Stream::Tp,
        CollectiveKind::AllReduce,
        GroupKind::Tp,
        8,
        &[f],
    );
    let g = b.compute(Stream::Compute, Phase::Backward, 7, &[c]);
    let d = b.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        4,
        &[g],
    );
    let c2 = b.collective(
        Stream::Tp,
        CollectiveKind::AllGather,
        GroupKind::Tp,
        2,
        &[g],
    );
    b.free(0, &[d, c2]);
    let prog = b.build();
    let cp = compile(0, &prog, &priced(), 0).unwrap();
    assert_eq!(cp.ops.len(), prog.ops.len());
    for (s, stream) in Stream::ALL.iter().enumerate() {
        let want: Vec<u32> = (0..prog.ops.len() as u32)
            .filter(|&i| prog.ops[i as usize].stream == *stream)
            .collect();
        let (lo, hi) = (cp.stream_start[s] as usize, cp.stream_start[s + 1] as usize);
        let got: Vec<u32> = cp.ops[lo..hi].iter().map(|o| o.index).collect();
        assert_eq!(got, want, "{stream:?}");
        assert!(cp.ops[lo..hi].iter().all(|o| usize::from(o.stream) == s));
    }
    let pos = |i: u32| cp.ops.iter().position(|o| o.index == i).unwrap() as u32;
    for o in &cp.ops {
        let deps: Vec<u32> = cp
            .dep_at_of(o)
            .iter()
            .map(|at| cp.index_of(at.slot))
            .collect();
        // The IR's deps less those on the op's own stream, which stream order implies.
        let want: Vec<u32> = prog.ops[o.index as usize]
            .deps
            .iter()
            .copied()
            .filter(|&d| prog.ops[d as usize].stream != prog.ops[o.index as usize].stream)
            .collect();
        assert_eq!(deps, want);
        for at in cp.dep_at_of(o) {
            assert_eq!(at.stream, u32::from(cp.ops[at.slot as usize].stream));
        }
    }
    assert_eq!(
        cp.coll_ops[group_kind_index(GroupKind::Tp)],
        vec![pos(c), pos(c2)]
    );
    assert_eq!(cp.coll_ops[group_kind_index(GroupKind::Dp)], vec![pos(d)]);
    // The priced alloc and free run as ops and take effect at their own ends.
    assert_eq!(cp.mem_ops.len(), 2);
    assert!(matches!(
        cp.ops[pos(a) as usize].kind,
        CKind::Alloc { bytes: 10 }
    ));
    let free = cp
        .ops
        .iter()
        .find(|o| matches!(o.kind, CKind::Free))
        .unwrap();
    for (m, op) in cp.mem_ops.iter().zip([&cp.ops[pos(a) as usize], free]) {
        assert_eq!(m.index, op.index);
        assert!(matches!(m.when, When::Ran(slot) if slot == op.record));
    }
    assert!(matches!(cp.mem_ops[1].effect, Effect::Free { alloc: 0 }));
    assert_eq!((cp.flops, cp.model_flops), (12, 12));
}

/// Unpriced allocs and frees are not compiled into ops: an op after one on its stream, or
/// depending on one, waits on what it waited on instead (one position per stream, the
/// latest), and the memory op keeps what the replay needs: the op before it on its stream and
/// its deps, as record slots or other memory ops.
#[test]
fn unpriced_memory_ops_hand_their_waits_on() {
    let mut b = ProgBuilder::new(0);
    let t1 = b.collective(Stream::Tp, CollectiveKind::AllGather, GroupKind::Tp, 8, &[]);
    let t2 = b.collective(
        Stream::Tp,
        CollectiveKind::AllGather,
        GroupKind::Tp,
        8,
        &[t1],
    );
    let f = b.fwd(5, &[]);
    // On the compute stream after `f`, waiting on both gathers.
    let a = b.alloc(MemCategory::Activations, 10, 0, &[t1, t2]);
    // Waits on `a`'s waits (`f`, the gathers) through the stream.
    let g = b.fwd(3, &[]);
    // Depends on `a` from another stream.
    let d = b.collective(
        Stream::Dp,
        CollectiveKind::AllReduce,
        GroupKind::Dp,
        4,
        &[a],
    );
    let fr = b.free(0, &[g]);
    let prog = b.build();
    let cp = compile(0, &prog, &FixedCost::default(), 0).unwrap();
    assert_eq!(cp.ops.len(), prog.ops.len() - 2);
    let pos = |i: u32| cp.ops.iter().position(|o| o.index == i).unwrap() as u32;
    let waits = |i: u32| -> Vec<(u32, u32)> {
        let o = &cp.ops[pos(i) as usize];
        cp.dep_at_of(o).iter().map(|d| (d.stream, d.slot)).collect()
    };
    let tp = Stream::Tp.index() as u32;
    let compute = Stream::Compute.index() as u32;
    // `g` heads the compute stream after `f`, so it needs only the latest gather.
    assert_eq!(waits(g), vec![(tp, pos(t2))]);
    let mut want = vec![(tp, pos(t2)), (compute, pos(f))];
    want.sort();
    assert_eq!(waits(d), want);
    assert!(cp
        .ops
        .iter()
        .all(|o| !matches!(o.kind, CKind::Alloc { .. } | CKind::Free)));
    // The replay's view: the alloc waits on `f` (before it on its stream) and both gathers;
    // the free on `g` twice (its stream and its dep) and nothing else.
    let rec = |i: u32| cp.ops[pos(i) as usize].record;
    let when = |k: usize| match cp.mem_ops[k].when {
        When::After { start, end } => cp.mem_waits[start as usize..end as usize].to_vec(),
        When::Ran(_) => panic!("unpriced ops do not run"),
    };
    assert_eq!((cp.mem_ops[0].index, cp.mem_ops[1].index), (a, fr));
    assert_eq!(when(0), vec![rec(f), rec(t1), rec(t2)]);
    assert_eq!(when(1), vec![rec(g), rec(g)]);
    assert!(matches!(cp.mem_ops[1].effect, Effect::Free { alloc: 0 }));
    assert_eq!(cp.recorded, 4);
    assert_eq!(rec(d), NOT_RECORDED);
}

/// With several tags open, some stacked, the error names the earliest open alloc.
#[test]
fn the_earliest_unfreed_alloc_is_reported() {
    let mut b = ProgBuilder::new(0);
    b.alloc(MemCategory::Weights, 10, 3, &[]); // op 0, tag 3: freed below
    b.alloc(MemCategory::Activations, 10, 5, &[]); // op 1, tag 5: under op 2, never freed
    b.alloc(MemCategory::Activations, 10, 5, &[]); // op 2, tag 5: freed below
    b.alloc(MemCategory::Buffers, 10, 1_000_000, &[]); // op 3, a sparse tag, never freed
    b.free(5, &[]);
    b.free(3, &[]);
    let err = compile(7, &b.build(), &FixedCost::default(), 0).err();
    assert!(
        matches!(
            err,
            Some(SimError::UnfreedAlloc {
                program: 7,
                op: 1,
                tag: 5
            })
        ),
        "{err:?}"
    );
    let mut b = ProgBuilder::new(0);
    b.alloc(MemCategory::Buffers, 10, 1_000_000, &[]); // op 0, sparse tag, never freed
    b.alloc(MemCategory::Weights, 10, 2, &[]);
    b.free(2, &[]);
    let err = compile(0, &b.build(), &FixedCost::default(), 0).err();
    assert!(
        matches!(
            err,
            Some(SimError::UnfreedAlloc {
                op: 0,
                tag: 1_000_000,
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn index_tables_match_declaration_order() {
    for (i, k) in GroupKind::ALL.iter().enumerate() {
        assert_eq!(group_kind_index(*k), i);
    }
}
