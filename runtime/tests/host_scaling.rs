//! Honesty checks of the host backend: the work it does follows the planned sizes. Doubling
//! the hidden size makes the measured GEMM time grow about 4x (the FLOPs of the layers'
//! GEMMs grow 4x; the vocabulary and attention-score GEMMs 2x), and quadrupling a collective's
//! bytes makes its measured time grow. Each size is measured over repeated runs and the
//! fastest kept, to damp noise from other processes; the band is wide on purpose (2.5-6x),
//! since a shared CI machine can stall any single measurement.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use twin_runtime::backend::host::{HostBackend, Workspace};
use twin_runtime::exec::run_step;
use twin_runtime::transport::collective::{self, Ring};
use twin_runtime::transport::mesh::Mesh;
use twin_runtime::transport::store::{Clock, StoreClient, StoreServer};
use twin_sim::schedule::{CollectiveKind, OpKind};

/// The two tests of this file measure time: never run them at the same time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A one-rank scenario with hidden size `hidden`, and the planned FLOPs of its step.
fn staged(hidden: u64) -> (twin_sim::Staged, u64) {
    let mut s = twin_sim::testing::small_scenario(1, 1, 1, 1);
    s.model.hidden = hidden;
    s.model.heads = 4;
    s.model.kv_heads = 4;
    s.model.ffn_hidden = 4 * hidden;
    s.model.seq_len = 128;
    s.model.vocab = 256;
    s.model.layers = 2;
    let staged = twin_sim::Staged::new(&s).unwrap();
    let flops = staged
        .schedule
        .program(0)
        .ops
        .iter()
        .map(|o| match &o.kind {
            OpKind::Compute(c) => c.flops,
            _ => 0,
        })
        .sum();
    (staged, flops)
}

/// Time of the GEMMs of every compute op of the step, at their planned shapes.
fn gemm_pass_ns(staged: &twin_sim::Staged, ws: &mut Workspace) -> u64 {
    let start = Instant::now();
    for op in &staged.schedule.program(0).ops {
        if let OpKind::Compute(c) = &op.kind {
            ws.run_gemms(c);
        }
    }
    start.elapsed().as_nanos() as u64
}

#[test]
fn doubling_hidden_makes_gemm_time_grow_about_4x() {
    let _serial = SERIAL.lock();
    let (small, f1) = staged(256);
    let (large, f2) = staged(512);
    // Whole steps run for real first (GEMMs, memory pass, buffers) ...
    for s in [&small, &large] {
        run_step(&s.plan, &s.schedule, 0, &mut HostBackend::single()).unwrap();
    }
    // ... then the GEMMs are timed on their own (the memory-bound pass does not grow 4x with
    // hidden), alternating sizes so both see the same background load; fastest of each kept.
    let mut ws_small = Workspace::for_program(small.schedule.program(0));
    let mut ws_large = Workspace::for_program(large.schedule.program(0));
    let (mut t1, mut t2) = (u64::MAX, u64::MAX);
    for _ in 0..5 {
        t1 = t1.min(gemm_pass_ns(&small, &mut ws_small));
        t2 = t2.min(gemm_pass_ns(&large, &mut ws_large));
    }
    let flop_ratio = f2 as f64 / f1 as f64;
    let time_ratio = t2 as f64 / t1 as f64;
    eprintln!("GEMM time {t1} ns -> {t2} ns: {time_ratio:.2}x for {flop_ratio:.2}x the FLOPs");
    assert!(
        (3.5..=4.0).contains(&flop_ratio),
        "planned FLOPs grew {flop_ratio}x"
    );
    assert!(
        (2.5..=6.0).contains(&time_ratio),
        "GEMM time grew {time_ratio:.2}x ({t1} ns -> {t2} ns) for {flop_ratio:.2}x the FLOPs"
    );
}

/// f32 elements of the two all-reduces compared (4 MiB and 16 MiB).
const ELEMS: [usize; 2] = [1 << 20, 4 << 20];

#[test]
fn more_collective_bytes_make_it_slower() {
    let _serial = SERIAL.lock();
    let server = StoreServer::start("127.0.0.1", 0, Clock::new()).unwrap();
    let port = server.addr.port();
    let t = Duration::from_secs(30);
    let handles: Vec<_> = (0..2u32)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut store = StoreClient::connect("127.0.0.1", port, t).unwrap();
                let mesh = Arc::new(Mesh::connect(&mut store, rank, 2, t).unwrap());
                let members = [0, 1];
                // Sizes alternate, so both see the same background load; fastest kept. The
                // sizes are 4x apart, so a stall of one run on a loaded machine does not
                // cover the difference.
                let mut best = [u128::MAX; 2];
                for rep in 0..7u64 {
                    for (i, elems) in ELEMS.into_iter().enumerate() {
                        store.barrier(&format!("b{i}-{rep}"), rank, 2).unwrap();
                        let ring = Ring::new(&mesh, &members, 4, rep + 10 * i as u64).unwrap();
                        let input = collective::input(CollectiveKind::AllReduce, &ring, elems, 0);
                        let start = Instant::now();
                        let out =
                            collective::execute(CollectiveKind::AllReduce, &ring, &input).unwrap();
                        best[i] = best[i].min(start.elapsed().as_nanos());
                        collective::verify(CollectiveKind::AllReduce, &ring, &out, 0).unwrap();
                    }
                }
                best
            })
        })
        .collect();
    for h in handles {
        let best = h.join().unwrap();
        assert!(
            best[1] > best[0],
            "an all-reduce of {} MiB took {} ns, of {} MiB {} ns",
            (ELEMS[1] * 4) >> 20,
            best[1],
            (ELEMS[0] * 4) >> 20,
            best[0]
        );
    }
}
