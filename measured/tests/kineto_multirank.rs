#![cfg(test)]
//! A hand-written two-rank trace with NCCL kernels on their own streams, overlapping compute,
//! and both kinds of step marker. Every expected figure below is worked out by hand from the
//! events as written (times in µs, as Kineto writes them).

use std::path::{Path, PathBuf};
use twin_measured::kineto::{
    breakdown, read_traces, CollectiveKind, KernelClass, StepSource, TraceError,
};

/// A fresh directory under the system temp dir, unique to this test process and `name`.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-kineto-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn kernel(name: &str, stream: u32, ts: f64, dur: f64, args: &str) -> String {
    let sep = if args.is_empty() { "" } else { ", " };
    format!(
        r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream}, "ts": {ts}, "dur": {dur},
            "args": {{"device": 0, "stream": {stream}{sep}{args}}}}}"#
    )
}

fn launch(correlation: u32, ts: f64) -> String {
    format!(
        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": {ts}, "dur": 1, "args": {{"correlation": {correlation}}}}}"#
    )
}

fn trace(rank: u32, events: &[String]) -> String {
    format!(
        r#"{{"schemaVersion": 1, "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 2}},
            "traceEvents": [{}]}}"#,
        events.join(",\n")
    )
}

/// Rank 0: a CPU `ProfilerStep#5` over [50, 150] launches six activities; a seventh is
/// launched after it. On the GPU (µs):
///   stream 7:  GEMM [100, 130], elementwise [140, 150], memcpy [170, 175], flash [180, 200]
///   stream 20: all-reduce [120, 160] (4 MiB of f32 over 2 ranks, from the kernel's args)
///   stream 21: send [155, 170] (2048 bf16 elements)
///   stream 7:  elementwise [300, 310], launched at 250, outside the step
fn rank0() -> String {
    let ar = r#""Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 2, "dtype": "Float""#;
    let send = r#""Collective name": "send", "In msg nelems": 2048, "Out msg nelems": 2048, "Group size": 2, "dtype": "BFloat16""#;
    let memcpy = r#"{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, "ts": 170, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 5, "bytes": 1000}}"#;
    let mut events = vec![
        r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 10, "tid": 10, "ts": 50, "dur": 100}"#.to_owned(),
        r#"{"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 10, "tid": 10, "ts": 40, "dur": 300}"#.to_owned(),
        r#"{"ph": "s", "cat": "ac2g", "id": 1, "pid": 10, "tid": 10, "ts": 60, "name": "ac2g"}"#.to_owned(),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 7, 100.0, 30.0, r#""correlation": 1"#),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 20, 120.0, 40.0, &format!(r#""correlation": 2, {ar}"#)),
        kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()", 7, 140.0, 10.0, r#""correlation": 3"#),
        kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 21, 155.0, 15.0, &format!(r#""correlation": 4, {send}"#)),
        memcpy.to_owned(),
        kernel("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)", 7, 180.0, 20.0, r#""correlation": 6"#),
        kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()", 7, 300.0, 10.0, r#""correlation": 7"#),
    ];
    for (c, ts) in [
        (1, 60.0),
        (2, 70.0),
        (3, 80.0),
        (4, 90.0),
        (5, 100.0),
        (6, 110.0),
        (7, 250.0),
    ] {
        events.push(launch(c, ts));
    }
    trace(0, &events)
}

/// Rank 1: `ProfilerStep#5` on the GPU timeline, once per stream ([1000, 1050] on stream 7,
/// [1005, 1065] on stream 20): the step is [1000, 1065]. On the GPU (µs):
///   stream 7:  GEMM [1000, 1040]
///   stream 20: all-reduce [1010, 1050] (args on the kernel), reduce-scatter [1050, 1060]
///              (args only on its `record_param_comms` CPU op, "External id" 77),
///              all-gather [1060, 1062] (no args: known by its name only)
fn rank1() -> String {
    let ar = r#""Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 2, "dtype": "Float""#;
    let events = vec![
        r#"{"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "pid": 0, "tid": 7, "ts": 1000, "dur": 50}"#.to_owned(),
        r#"{"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "pid": 0, "tid": 20, "ts": 1005, "dur": 60}"#.to_owned(),
        r#"{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 10, "tid": 10, "ts": 990, "dur": 3,
            "args": {"External id": 77, "Collective name": "_reduce_scatter_base", "In msg nelems": 4096, "Out msg nelems": 2048, "Group size": 2, "dtype": "BFloat16"}}"#.to_owned(),
        kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 7, 1000.0, 40.0, ""),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 20, 1010.0, 40.0, ar),
        kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 20, 1050.0, 10.0, r#""External id": 77"#),
        kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", 20, 1060.0, 2.0, ""),
    ];
    trace(1, &events)
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

const US: u64 = 1000;

#[test]
fn two_ranks_read_from_a_directory_in_rank_order() {
    let dir = temp_dir("two-ranks");
    // File names in the opposite order to the ranks, and a non-trace beside them.
    write(&dir, "a.json", &rank1());
    write(&dir, "b.json", &rank0());
    write(&dir, "notes.txt", "not a trace");
    let traces = read_traces(&dir).unwrap();
    assert_eq!(traces.len(), 2);
    assert_eq!(traces[0].rank, Some(0));
    assert_eq!(traces[1].rank, Some(1));
    assert!(traces.iter().all(|t| t.world_size == Some(2)));
    assert!(traces[0].path.ends_with("b.json"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rank0_step_from_the_cpu_marker_and_its_breakdown() {
    let dir = temp_dir("rank0");
    write(&dir, "r0.json", &rank0());
    let t = read_traces(&dir).unwrap().remove(0);
    assert_eq!(t.step_source, StepSource::CpuAnnotation);
    // The activities launched in [50, 150] run over [100, 200]; the trace starts at 100.
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].name, "ProfilerStep#5");
    assert_eq!((t.steps[0].start_ns, t.steps[0].dur_ns), (0, 100 * US));
    assert_eq!(t.kernels.len(), 7);
    assert_eq!(t.kernels.last().unwrap().start_ns, 200 * US);

    let classes: Vec<_> = t.kernels.iter().map(|k| k.class).collect();
    use KernelClass::*;
    assert_eq!(
        classes,
        [
            Gemm,
            Collective,
            Elementwise,
            P2p,
            Memcpy,
            Attention,
            Elementwise
        ]
    );
    let ar = t.kernels[1].collective.as_ref().unwrap();
    assert_eq!(ar.kind, CollectiveKind::AllReduce);
    assert_eq!(ar.bytes, Some(1_048_576 * 4));
    assert_eq!(ar.group_size, Some(2));
    let send = t.kernels[3].collective.as_ref().unwrap();
    assert_eq!(send.kind, CollectiveKind::Send);
    assert_eq!(send.bytes, Some(2048 * 2));
    assert_eq!(t.kernels[4].bytes, Some(1000));
    assert_eq!(t.kernels[1].stream, 20);

    // By hand, relative to 100 µs:
    //   [0, 30] GEMM (the all-reduce from 20 is hidden)   GEMM 30
    //   [30, 40] all-reduce alone                          collective 10
    //   [40, 50] elementwise over the all-reduce           elementwise 10
    //   [50, 55] all-reduce alone                          collective 5
    //   [55, 60] all-reduce and send: collective first     collective 5
    //   [60, 70] send alone                                p2p 10
    //   [70, 75] memcpy                                    memcpy 5
    //   [75, 80] nothing                                   idle 5
    //   [80, 100] flash attention                          attention 20
    // Communication ran over [20, 70] (all-reduce [20, 60] ∪ send [55, 70]): 50.
    let b = breakdown(&t, 0).unwrap();
    assert_eq!(b.step_ns, 100 * US);
    assert_eq!(b.class_ns(Gemm), 30 * US);
    assert_eq!(b.class_ns(Collective), 20 * US);
    assert_eq!(b.class_ns(Elementwise), 10 * US);
    assert_eq!(b.class_ns(P2p), 10 * US);
    assert_eq!(b.class_ns(Memcpy), 5 * US);
    assert_eq!(b.class_ns(Attention), 20 * US);
    assert_eq!(b.idle_ns, 5 * US);
    assert_eq!(b.exposed_comm_ns, 30 * US);
    assert_eq!(b.comm_ns, 50 * US);
    assert_eq!(b.kernels, 6);
    let sum: u64 = b.by_class_ns.iter().map(|(_, ns)| ns).sum();
    assert_eq!(sum + b.idle_ns, b.step_ns);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rank1_step_from_gpu_markers_and_collectives_from_op_args_and_names() {
    let dir = temp_dir("rank1");
    write(&dir, "r1.json", &rank1());
    let t = read_traces(&dir).unwrap().remove(0);
    assert_eq!(t.step_source, StepSource::GpuAnnotation);
    assert_eq!((t.steps[0].start_ns, t.steps[0].dur_ns), (0, 65 * US));

    let rs = t.kernels[2].collective.as_ref().unwrap();
    assert_eq!(rs.kind, CollectiveKind::ReduceScatter);
    assert_eq!(rs.bytes, Some(4096 * 2));
    assert_eq!(rs.out_bytes, Some(2048 * 2));
    assert_eq!(rs.group_size, Some(2));
    assert_eq!(t.kernels[2].op.as_deref(), Some("record_param_comms"));
    let ag = t.kernels[3].collective.as_ref().unwrap();
    assert_eq!(ag.kind, CollectiveKind::AllGather);
    assert_eq!((ag.bytes, ag.group_size), (None, None));

    // By hand, relative to 1000 µs: GEMM [0, 40] hides the all-reduce's [10, 40]; the
    // all-reduce is exposed over [40, 50], the reduce-scatter [50, 60], the all-gather
    // [60, 62]; [62, 65] is idle. Communication ran over [10, 62]: 52.
    let b = breakdown(&t, 0).unwrap();
    assert_eq!(b.class_ns(KernelClass::Gemm), 40 * US);
    assert_eq!(b.class_ns(KernelClass::Collective), 22 * US);
    assert_eq!(b.idle_ns, 3 * US);
    assert_eq!(b.exposed_comm_ns, 22 * US);
    assert_eq!(b.comm_ns, 52 * US);
    assert_eq!(b.kernels, 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_files_stating_the_same_rank_are_refused() {
    let dir = temp_dir("dup-rank");
    write(&dir, "a.json", &rank0());
    write(&dir, "b.json", &rank0());
    let err = read_traces(&dir).unwrap_err();
    assert!(
        matches!(err, TraceError::DuplicateRank { rank: 0, .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("a.json") && msg.contains("b.json"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_stated_ranks_files_come_in_name_order() {
    let dir = temp_dir("no-rank");
    let strip = |s: String| {
        s.replace(r#""rank": 0, "#, "")
            .replace(r#""rank": 1, "#, "")
    };
    write(&dir, "a.json", &strip(rank1()));
    write(&dir, "b.json", &strip(rank0()));
    let traces = read_traces(&dir).unwrap();
    assert_eq!(traces[0].rank, None);
    assert!(traces[0].path.ends_with("a.json"));
    assert_eq!(traces[0].step_source, StepSource::GpuAnnotation);
    std::fs::remove_dir_all(&dir).unwrap();
}
