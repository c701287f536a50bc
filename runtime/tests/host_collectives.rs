//! Correctness of the host transport on 2-8 ranks, each rank a thread with its own mesh (Unix
//! sockets between ranks on one host, TCP where asked): every collective kind on whole and partial groups (in ring orders that differ
//! from rank order), p2p rings, and whole generated schedules (tp, pp, dp, ZeRO, cp, ep)
//! whose every transfer and collective is checked against known data by the backend.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use std::sync::Arc;
use std::time::Duration;
use twin_runtime::launch::{launcher::free_port, run_worker, RankEnv, WorkerOptions};
use twin_runtime::transport::collective::{self, Ring};
use twin_runtime::transport::mesh::Mesh;
use twin_runtime::transport::store::{Clock, StoreClient, StoreServer};
use twin_sim::schedule::CollectiveKind;

const T: Duration = Duration::from_secs(30);
const KINDS: [CollectiveKind; 5] = [
    CollectiveKind::AllReduce,
    CollectiveKind::ReduceScatter,
    CollectiveKind::AllGather,
    CollectiveKind::AllToAll,
    CollectiveKind::Broadcast,
];

/// Run `f(rank, mesh)` on `world` threads connected by a mesh.
fn on_mesh<R: Send + 'static>(
    world: u32,
    f: impl Fn(u32, &Mesh) -> R + Send + Sync + 'static,
) -> Vec<R> {
    on_mesh_with(world, true, f)
}

/// [`on_mesh`] with Unix sockets between the ranks allowed (`local`) or TCP only.
fn on_mesh_with<R: Send + 'static>(
    world: u32,
    local: bool,
    f: impl Fn(u32, &Mesh) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let server = StoreServer::start("127.0.0.1", 0, Clock::new()).unwrap();
    let port = server.addr.port();
    let f = Arc::new(f);
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                let mut store = StoreClient::connect("127.0.0.1", port, T).unwrap();
                let mesh = Mesh::connect_with(&mut store, rank, world, T, local).unwrap();
                f(rank, &mesh)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn every_collective_is_correct_on_2_to_8_ranks() {
    for world in [2u32, 3, 5, 8] {
        // Whole world in rank order, and a partial group in a scrambled ring order.
        let groups: Vec<Vec<u32>> =
            vec![(0..world).collect(), (0..world).rev().step_by(2).collect()];
        let results = on_mesh(world, move |rank, mesh| {
            let mut checked = 0;
            for (g, members) in groups.iter().enumerate() {
                if !members.contains(&rank) {
                    continue;
                }
                for (k, kind) in KINDS.iter().enumerate() {
                    // Odd element counts exercise uneven chunks.
                    for elems in [1usize, 37, 4099] {
                        let tag = (g * 100 + k * 10) as u64 + elems as u64;
                        let ring = Ring::new(mesh, members, 1, tag).unwrap();
                        let input = collective::input(*kind, &ring, elems, 1);
                        let out = collective::execute(*kind, &ring, &input).unwrap();
                        collective::verify(*kind, &ring, &out, 1)
                            .unwrap_or_else(|e| panic!("world {world} rank {rank}: {e}"));
                        checked += 1;
                    }
                }
            }
            checked
        });
        assert!(results.iter().all(|&c| c >= 15), "{results:?}");
    }
}

#[test]
fn ranks_on_one_host_use_unix_sockets_and_tcp_when_asked_and_both_carry_collectives() {
    for local in [true, false] {
        let kinds = on_mesh_with(3, local, move |rank, mesh| {
            let members = [0, 1, 2];
            let ring = Ring::new(mesh, &members, 2, 7).unwrap();
            for kind in KINDS {
                let input = collective::input(kind, &ring, 4099, 3);
                let out = collective::execute(kind, &ring, &input).unwrap();
                collective::verify(kind, &ring, &out, 3)
                    .unwrap_or_else(|e| panic!("local {local} rank {rank}: {e}"));
            }
            (0..3)
                .filter(|&p| p != rank)
                .map(|p| mesh.kind(p))
                .collect::<Vec<_>>()
        });
        // Linux kernels name their boot; elsewhere every connection stays TCP.
        let want = if local && std::path::Path::new("/proc/sys/kernel/random/boot_id").exists() {
            "unix"
        } else {
            "tcp"
        };
        for k in kinds.iter().flatten() {
            assert_eq!(*k, Some(want), "local {local}: {kinds:?}");
        }
    }
}

#[test]
fn a_member_with_different_data_fails_the_check() {
    // Rank 1 contributes the wrong input: every member's all-reduce result is then wrong.
    let results = on_mesh(3, |rank, mesh| {
        let members = [0, 1, 2];
        let ring = Ring::new(mesh, &members, 4, 1).unwrap();
        let mut input = collective::input(CollectiveKind::AllReduce, &ring, 64, 0);
        if rank == 1 {
            input[10] += 1.0;
        }
        let out = collective::execute(CollectiveKind::AllReduce, &ring, &input).unwrap();
        collective::verify(CollectiveKind::AllReduce, &ring, &out, 0)
            .unwrap_err()
            .to_string()
    });
    for e in results {
        assert!(e.contains("element 10"), "{e}");
    }
}

#[test]
fn p2p_rings_in_both_directions_carry_the_exact_bytes() {
    let world = 4;
    let results = on_mesh(world, move |rank, mesh| {
        let next = (rank + 1) % world;
        let prev = (rank + world - 1) % world;
        let bytes = 100_003u64;
        let payload = twin_runtime::backend::host::p2p_payload(rank, 7, bytes);
        // Forward ring on the pipeline lane, and backward at the same time on the cp lane.
        let mut fwd = vec![0u8; bytes as usize];
        mesh.exchange(next, prev, 5, 7, &payload, &mut fwd, false)
            .unwrap();
        let mut bwd = vec![0u8; bytes as usize];
        mesh.exchange(prev, next, 2, 7, &payload, &mut bwd, false)
            .unwrap();
        (
            fwd == twin_runtime::backend::host::p2p_payload(prev, 7, bytes),
            bwd == twin_runtime::backend::host::p2p_payload(next, 7, bytes),
        )
    });
    assert!(results.iter().all(|&(a, b)| a && b), "{results:?}");
}

/// A generated schedule executed by `world` worker threads; the backend checks every
/// transfer and collective, so success means all data was right.
fn run_schedule(s: &twin_sim::scenario::Scenario) -> Vec<twin_runtime::launch::RankMeasure> {
    let staged = Arc::new(twin_sim::Staged::new(s).unwrap());
    staged.validate().unwrap();
    let world = staged.plan.world;
    let port = free_port("127.0.0.1").unwrap();
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let staged = Arc::clone(&staged);
            std::thread::spawn(move || {
                let env = RankEnv {
                    rank,
                    world,
                    local_rank: rank,
                    master_addr: "127.0.0.1".into(),
                    master_port: port,
                };
                let opts = WorkerOptions {
                    steps: 1,
                    timeout: T,
                    fault: None,
                    durable: Default::default(),
                };
                run_worker(&env, &staged.plan, &staged.schedule, &opts)
                    .unwrap_or_else(|e| panic!("{}: {e}", staged.scenario.name))
            })
        })
        .collect();
    let mut out = None;
    for h in handles {
        if let Some(all) = h.join().unwrap() {
            out = Some(all);
        }
    }
    out.unwrap()
}

fn tiny(tp: u32, pp: u32, dp: u32) -> twin_sim::scenario::Scenario {
    let mut s = twin_sim::testing::small_scenario(tp, pp, dp, 4);
    s.model.hidden = 64;
    s.model.heads = 4;
    s.model.kv_heads = 4;
    s.model.ffn_hidden = 128;
    s.model.seq_len = 32;
    s.model.vocab = 256;
    s.model.layers = 2 * pp;
    s.training.grad_bucket_bytes = 16 * 1024;
    s
}

#[test]
fn generated_schedules_run_with_checked_data() {
    let mut cases = vec![tiny(2, 2, 1), tiny(1, 2, 2), tiny(2, 1, 4)];
    let mut zero1 = tiny(1, 2, 2);
    zero1.parallel.zero = 1;
    let mut zero3 = tiny(1, 1, 4);
    zero3.parallel.zero = 3;
    let mut cp = tiny(1, 1, 1);
    cp.parallel.cp = 2;
    cp.cluster.gpus = 2;
    // Expert parallel (MoE all-to-all): ep 2.
    let mut ep = tiny(1, 1, 1);
    ep.cluster.gpus = 2;
    let ffn_hidden = ep.model.ffn_hidden;
    ep.model.moe = Some(twin_sim::scenario::Moe::uniform(4, 2, 1, ffn_hidden));
    ep.parallel.ep = 2;
    ep.parallel.dp = 2;
    // Offload: the optimizer on the host (ZeRO 1), the parameters too (ZeRO 3).
    let mut offload = zero1.clone();
    offload.training.offload = twin_sim::scenario::Offload::Optimizer;
    let mut offload_params = zero3.clone();
    offload_params.training.offload = twin_sim::scenario::Offload::Params;
    cases.extend([zero1, zero3, cp, ep, offload, offload_params]);
    let mut seen = std::collections::BTreeSet::new();
    for s in &cases {
        let all = run_schedule(s);
        let staged = twin_sim::Staged::new(s).unwrap();
        for p in &staged.schedule.programs {
            for op in &p.ops {
                match &op.kind {
                    twin_sim::schedule::OpKind::Collective { kind, group, .. } => {
                        seen.insert(format!("{} {group:?}", kind.name()));
                    }
                    twin_sim::schedule::OpKind::Send { peer, .. } => {
                        seen.insert(format!("send {peer:?}"));
                    }
                    twin_sim::schedule::OpKind::HostCopy { to_host, .. } => {
                        seen.insert(format!("host-copy to_host={to_host}"));
                    }
                    twin_sim::schedule::OpKind::HostUpdate { .. } => {
                        seen.insert("host-update".into());
                    }
                    _ => {}
                }
            }
        }
        for m in &all {
            // Every op of every rank ran once, after its deps.
            let ops = &staged.schedule.program(m.rank).ops;
            assert_eq!(m.op_times_ns.len(), ops.len(), "{}", s.name);
            for (i, op) in ops.iter().enumerate() {
                for &d in &op.deps {
                    assert!(m.op_times_ns[d as usize][1] <= m.op_times_ns[i][0]);
                }
            }
            assert!(m.peak.peak_bytes > 0);
        }
    }
    // The cases cover the patterns the generators emit.
    let seen: Vec<&str> = seen.iter().map(|s| s.as_str()).collect();
    for want in [
        "all-reduce Tp",
        "all-gather Tp",
        "reduce-scatter Tp",
        "all-reduce DenseDp",
        "reduce-scatter DenseDp",
        "all-gather DenseDp",
        "all-gather Cp",
        "reduce-scatter Cp",
        "all-to-all Ep",
        "send PpNext",
        "send PpPrev",
        "host-copy to_host=true",
        "host-copy to_host=false",
        "host-update",
    ] {
        assert!(seen.contains(&want), "{want} not exercised; seen {seen:?}");
    }
}
