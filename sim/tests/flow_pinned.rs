//! Pins the flow model's results on the two 512-GPU topology scenarios, so that work on the
//! flow model's speed (docs/performance.md) cannot move its predictions unnoticed. The pinned
//! values were first computed with the flow model before its speed work (commit 029c6d2);
//! after the cost model changed (Megatron's backward overlap and the refitted GEMM curve) they
//! were recomputed, and the speed-work code's full `--format json` reports on both scenarios
//! were checked byte-identical (apart from wall time) to those of the code before it with the
//! same cost model. They are recomputed whenever the cost model changes on purpose (as when
//! batched GEMM calls came to pay the ramp once per call, with the A100 curve refitted, and
//! when flash attention came to be priced by its causal work on its own curve, and when
//! 1F1B's pipeline transfers came to block compute).
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::path::Path;
use twin_sim::setup::load;
use twin_sim::{predict, PredictOptions};

/// (step time, a digest of every rank's finish, busy, exposed-communication and idle times).
fn run(rel: &str) -> (u64, u64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    let s = load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    let opts = PredictOptions {
        skip_validation: true,
        ..PredictOptions::default()
    };
    let r = predict(&s, &opts).unwrap().result;
    assert!(!r.collapsed);
    assert_eq!(r.ranks.len(), 512);
    // FNV-1a over the per-rank times: any change to any rank's timeline changes it.
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for k in &r.ranks {
        for v in [
            u64::from(k.rank),
            k.finish_ns,
            k.compute_busy_ns,
            k.comm_exposed_ns,
            k.idle_ns,
        ] {
            for b in v.to_le_bytes() {
                digest = (digest ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    (r.step_time_ns, digest)
}

#[test]
fn rail_optimized_512_gpus_is_pinned() {
    let (step, digest) = run("scenarios/topology/512xA100-rail-optimized.toml");
    assert_eq!(step, 8_516_073_891);
    assert_eq!(digest, 0x69a8_779b_c6a2_1925);
}

#[test]
fn fat_tree_512_gpus_is_pinned() {
    let (step, digest) = run("scenarios/topology/512xA100-fat-tree-4to1.toml");
    assert_eq!(step, 8_567_610_292);
    assert_eq!(digest, 0x8113_70a1_810d_6ee5);
}
