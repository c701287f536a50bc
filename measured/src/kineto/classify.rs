//! Which class a GPU activity belongs to, and what a NCCL kernel moved.
//!
//! The rules, in the order they apply (the first that matches wins):
//!
//! 1. The event's category: `gpu_memcpy` is [`KernelClass::Memcpy`], `gpu_memset` is
//!    [`KernelClass::Memset`].
//! 2. Communication. A kernel whose args (or whose launching CPU op's args) carry Kineto's
//!    "Collective name" is a collective of that kind; `send`/`recv` are [`KernelClass::P2p`],
//!    the rest [`KernelClass::Collective`]. Else a kernel whose name contains `nccl`
//!    (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_AllGather_RING_LL_Sum_int8_t`,
//!    `ncclDevKernel_SendRecv`) takes its kind from the name. An all-to-all runs as NCCL
//!    `SendRecv` kernels: only the args tell it from point-to-point.
//! 3. The optimizer step. A kernel launched by a CPU op inside a `Optimizer.step#...` annotation
//!    (PyTorch's optimizer wraps `step` in `record_function("Optimizer.step#AdamW.step")`,
//!    torch/optim/optimizer.py `profile_hook_step`) is [`KernelClass::Optimizer`]: the fused
//!    AdamW kernel and every other pass the step makes.
//! 4. The launching CPU op (the kernel's "External id"): `aten::mm`, `addmm`, `bmm`, `baddbmm`,
//!    `addbmm`, `matmul`, `linear`, `_scaled_mm`, `_int_mm`, `addmv`, `mv`, `_grouped_mm` and
//!    `_scaled_grouped_mm` are [`KernelClass::Gemm`] (whatever kernels they launch: a split-K
//!    reduction belongs to its GEMM); an op whose name holds `attention`, `scaled_dot_product`
//!    or `flash_attn` (`aten::_scaled_dot_product_efficient_attention`,
//!    `aten::_cudnn_attention_backward`, `flash_attn::_flash_attn_forward`) is
//!    [`KernelClass::Attention`]; `_fused_adam`, `_fused_adamw`, `_fused_sgd` and
//!    `_fused_adagrad` ops are [`KernelClass::Optimizer`]; `layer_norm`, `rms_norm`,
//!    `group_norm` and `batch_norm` ops are [`KernelClass::Norm`]. Other ops (`aten::copy_`,
//!    `aten::add_`, ...) say nothing more than the kernel name does.
//! 5. The kernel name, case-insensitively: `flash`, `fmha`, `sdpa`, `attention`, `attn` are
//!    attention; `gemm`, `cublas`, `cutlass`, `xmma` (`sm90_xmma_gemm_...`), `nvjet` (cuBLAS's
//!    Hopper GEMMs), `matmul`, `triton_tem_` (Inductor's GEMM templates) are GEMM; `adam`,
//!    `multi_tensor_apply`, `fusedoptimizer` are the optimizer; `layer_norm`, `layernorm`,
//!    `rms_norm`, `rmsnorm`, `group_norm`, `batch_norm` are norms; `elementwise`, `vectorized`,
//!    `reduce`, `softmax`, `catarray`, `copy`, `fill`, `gather`, `scatter`, `index`, `embedding`,
//!    Inductor's `triton_poi_`/`triton_red_`/`triton_per_`, and any other ATen native kernel
//!    (`at::native::`) are [`KernelClass::Elementwise`] (memory-bound kernels: casts, copies,
//!    adds, reductions, softmax). Anything else is [`KernelClass::Other`].
//!
//! Attention goes before GEMM in rule 5 because cuDNN's attention kernels hold `wgmma` and
//! `gemm`-like tokens (`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_...`).

use super::{CollectiveInfo, CollectiveKind, KernelClass};

/// Whatever one activity offers to the rules above.
pub(crate) struct Evidence<'s> {
    pub cat: &'s str,
    pub name: &'s str,
    pub op: Option<&'s str>,
    pub in_optimizer_step: bool,
    pub comm: CommArgs<'s>,
}

/// Kineto's collective metadata, from the kernel's args or else its op's.
#[derive(Default, Clone, Copy)]
pub(crate) struct CommArgs<'s> {
    pub collective_name: Option<&'s str>,
    pub in_msg_nelems: Option<u64>,
    pub out_msg_nelems: Option<u64>,
    pub group_size: Option<u32>,
    pub dtype: Option<&'s str>,
}

pub(crate) fn classify(ev: &Evidence) -> (KernelClass, Option<CollectiveInfo>) {
    match ev.cat {
        "gpu_memcpy" => return (KernelClass::Memcpy, None),
        "gpu_memset" => return (KernelClass::Memset, None),
        _ => {}
    }
    let lname = ev.name.to_ascii_lowercase();
    if let Some(info) = collective(ev, &lname) {
        let class = if info.kind.is_p2p() {
            KernelClass::P2p
        } else {
            KernelClass::Collective
        };
        return (class, Some(info));
    }
    if ev.in_optimizer_step {
        return (KernelClass::Optimizer, None);
    }
    if let Some(class) = ev.op.and_then(by_op) {
        return (class, None);
    }
    (by_name(&lname), None)
}

fn collective(ev: &Evidence, lname: &str) -> Option<CollectiveInfo> {
    let a = &ev.comm;
    let from_args = a.collective_name.map(kind_from_collective_name);
    let from_name = if lname.contains("nccl") {
        Some(kind_from_kernel_name(lname))
    } else {
        None
    };
    let kind = from_args.or(from_name)?;
    let dtype = a
        .dtype
        .map(str::to_owned)
        .or_else(|| dtype_from_kernel_name(lname).map(str::to_owned));
    let elem = a.dtype.and_then(dtype_bytes);
    let bytes = a
        .in_msg_nelems
        .zip(elem)
        .and_then(|(n, b)| n.checked_mul(b));
    let out_bytes = a
        .out_msg_nelems
        .zip(elem)
        .and_then(|(n, b)| n.checked_mul(b));
    Some(CollectiveInfo {
        kind,
        bytes,
        out_bytes,
        group_size: a.group_size,
        dtype,
    })
}

/// c10d's collective names as `record_param_comms` records them: "allreduce", "allgather",
/// "_allgather_base", "all_gather_into_tensor_coalesced", "reduce_scatter",
/// "_reduce_scatter_base", "all_to_all", "all_to_allv", "broadcast", "reduce", "gather",
/// "scatter", "send", "recv", "barrier" (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
pub fn kind_from_collective_name(name: &str) -> CollectiveKind {
    let n: String = name
        .chars()
        .filter(|c| *c != '_' && *c != ' ' && *c != '"')
        .flat_map(char::to_lowercase)
        .collect();
    kind_from_token(&n)
}

/// NCCL kernel names: `ncclDevKernel_<Func>_...` (NCCL 2.19 and later), `ncclKernel_<Func>_...`
/// (earlier), where Func is one of NCCL's `ncclFuncStr`: Broadcast, Reduce, AllGather,
/// ReduceScatter, AllReduce, SendRecv (nccl src/init.cc, src/collectives.cc).
fn kind_from_kernel_name(lname: &str) -> CollectiveKind {
    kind_from_token(lname)
}

fn kind_from_token(n: &str) -> CollectiveKind {
    // Longer names first: "allreduce" holds "reduce", "sendrecv" holds "send".
    if n.contains("allreduce") {
        CollectiveKind::AllReduce
    } else if n.contains("allgather") {
        CollectiveKind::AllGather
    } else if n.contains("reducescatter") {
        CollectiveKind::ReduceScatter
    } else if n.contains("alltoall") {
        CollectiveKind::AllToAll
    } else if n.contains("broadcast") {
        CollectiveKind::Broadcast
    } else if n.contains("barrier") {
        CollectiveKind::Barrier
    } else if n.contains("sendrecv") || (n.contains("send") && n.contains("recv")) {
        CollectiveKind::SendRecv
    } else if n.contains("send") {
        CollectiveKind::Send
    } else if n.contains("recv") {
        CollectiveKind::Recv
    } else if n.contains("reduce") {
        CollectiveKind::Reduce
    } else if n.contains("gather") {
        CollectiveKind::Gather
    } else if n.contains("scatter") {
        CollectiveKind::Scatter
    } else {
        CollectiveKind::Other
    }
}

/// The element type in a NCCL kernel name: NCCL 2.19 and later write `ncclTypeStr` suffixes
/// (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL`), earlier ones C type names
/// (`ncclKernel_AllReduce_RING_LL_Sum_float`).
fn dtype_from_kernel_name(lname: &str) -> Option<&'static str> {
    const TYPES: [(&str, &str); 22] = [
        ("_bfloat16", "bf16"),
        ("_half", "f16"),
        ("_float", "f32"),
        ("_double", "f64"),
        ("_int8_t", "i8"),
        ("_uint8_t", "u8"),
        ("_int32_t", "i32"),
        ("_uint32_t", "u32"),
        ("_int64_t", "i64"),
        ("_uint64_t", "u64"),
        ("_bf16", "bf16"),
        ("_f16", "f16"),
        ("_f32", "f32"),
        ("_f64", "f64"),
        ("_i8", "i8"),
        ("_u8", "u8"),
        ("_i32", "i32"),
        ("_u32", "u32"),
        ("_i64", "i64"),
        ("_u64", "u64"),
        ("_f8e4m3", "f8e4m3"),
        ("_f8e5m2", "f8e5m2"),
    ];
    lname
        .split('(')
        .next()
        .and_then(|head| {
            TYPES.iter().find(|(suffix, _)| {
                head.match_indices(suffix).any(|(i, _)| {
                    let rest = head.get(i + suffix.len()..).unwrap_or("");
                    rest.is_empty() || rest.starts_with('_')
                })
            })
        })
        .map(|(_, t)| *t)
}

/// Bytes per element of a c10 ScalarType name as PyTorch writes it into "dtype" ("Float",
/// "BFloat16", ...: c10/core/ScalarType.h), also with a `c10::` or `torch.` prefix or in
/// lower case.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    let d = dtype
        .trim_matches('"')
        .trim_start_matches("c10::")
        .trim_start_matches("torch.")
        .to_ascii_lowercase();
    let bytes = match d.as_str() {
        "byte" | "char" | "bool" | "uint8" | "int8" | "qint8" | "quint8" | "quint4x2"
        | "quint2x4" | "bits1x8" | "bits2x4" | "bits4x2" | "bits8" => 1,
        "float8_e5m2" | "float8_e4m3fn" | "float8_e5m2fnuz" | "float8_e4m3fnuz"
        | "float8_e8m0fnu" => 1,
        "short" | "int16" | "half" | "float16" | "bfloat16" | "uint16" | "bits16" => 2,
        "int" | "int32" | "float" | "float32" | "qint32" | "uint32" | "complexhalf" => 4,
        "long" | "int64" | "double" | "float64" | "uint64" | "complexfloat" => 8,
        "complexdouble" => 16,
        _ => return None,
    };
    Some(bytes)
}

fn by_op(op: &str) -> Option<KernelClass> {
    const GEMM_OPS: [&str; 13] = [
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
        "aten::_int_mm",
        "aten::addmv",
        "aten::mv",
        "aten::_grouped_mm",
        "aten::_scaled_grouped_mm",
    ];
    let l = op.to_ascii_lowercase();
    if GEMM_OPS.contains(&op) {
        Some(KernelClass::Gemm)
    } else if l.contains("attention")
        || l.contains("scaled_dot_product")
        || l.contains("flash_attn")
    {
        Some(KernelClass::Attention)
    } else if l.starts_with("optimizer.step#")
        || ["_fused_adam", "_fused_sgd", "_fused_adagrad"]
            .iter()
            .any(|t| l.contains(t))
    {
        Some(KernelClass::Optimizer)
    } else if ["layer_norm", "rms_norm", "group_norm", "batch_norm"]
        .iter()
        .any(|t| l.contains(t))
    {
        Some(KernelClass::Norm)
    } else {
        None
    }
}

fn by_name(l: &str) -> KernelClass {
    let has = |tokens: &[&str]| tokens.iter().any(|t| l.contains(t));
    if has(&["flash", "fmha", "sdpa", "attention", "attn"]) {
        KernelClass::Attention
    } else if has(&[
        "gemm",
        "cublas",
        "cutlass",
        "xmma",
        "nvjet",
        "matmul",
        "triton_tem_",
    ]) {
        KernelClass::Gemm
    } else if has(&["adam", "multi_tensor_apply", "fusedoptimizer"]) {
        KernelClass::Optimizer
    } else if has(&[
        "layer_norm",
        "layernorm",
        "rms_norm",
        "rmsnorm",
        "group_norm",
        "groupnorm",
        "batch_norm",
        "batchnorm",
    ]) {
        KernelClass::Norm
    } else if has(&[
        "elementwise",
        "vectorized",
        "reduce",
        "softmax",
        "catarray",
        "copy",
        "fill",
        "gather",
        "scatter",
        "index",
        "embedding",
        "triton_poi_",
        "triton_red_",
        "triton_per_",
        "at::native::",
    ]) {
        KernelClass::Elementwise
    } else {
        KernelClass::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(name: &str, op: Option<&str>) -> KernelClass {
        classify(&Evidence {
            cat: "kernel",
            name,
            op,
            in_optimizer_step: false,
            comm: CommArgs::default(),
        })
        .0
    }

    #[test]
    fn names_seen_in_the_h200_fixture() {
        // Kernel names copied from the fixture trace, without their launching op.
        assert_eq!(
            kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", None),
            KernelClass::Gemm
        );
        assert_eq!(
            kernel(
                "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
                None
            ),
            KernelClass::Gemm
        );
        assert_eq!(
            kernel(
                "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
                None
            ),
            KernelClass::Attention
        );
        assert_eq!(
            kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>>()", None),
            KernelClass::Optimizer
        );
        assert_eq!(
            kernel("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}>()", None),
            KernelClass::Elementwise
        );
        assert_eq!(
            kernel(
                "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>()",
                None
            ),
            KernelClass::Elementwise
        );
        assert_eq!(kernel("some_custom_kernel", None), KernelClass::Other);
    }

    #[test]
    fn the_launching_op_outranks_the_name() {
        // cuDNN's attention helpers have no attention token in their names.
        let helper = "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>()";
        assert_eq!(kernel(helper, None), KernelClass::Other);
        assert_eq!(
            kernel(helper, Some("aten::_cudnn_attention_backward")),
            KernelClass::Attention
        );
        // A fill launched by a norm op is the norm's.
        assert_eq!(
            kernel(
                "vectorized_elementwise_kernel<FillFunctor>",
                Some("aten::native_layer_norm")
            ),
            KernelClass::Norm
        );
        assert_eq!(
            kernel("vectorized_elementwise_kernel<add>", Some("aten::add_")),
            KernelClass::Elementwise
        );
    }

    #[test]
    fn nccl_kinds_from_names_and_args() {
        let c = |name: &str, coll: Option<&str>| {
            classify(&Evidence {
                cat: "kernel",
                name,
                op: None,
                in_optimizer_step: true,
                comm: CommArgs {
                    collective_name: coll,
                    ..CommArgs::default()
                },
            })
        };
        let (class, info) = c(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            None,
        );
        assert_eq!(class, KernelClass::Collective);
        let info = info.unwrap();
        assert_eq!(info.kind, CollectiveKind::AllReduce);
        assert_eq!(info.dtype.as_deref(), Some("f32"));
        assert_eq!(info.bytes, None);
        // Names before NCCL 2.19 carry C type names.
        let rs = c(
            "ncclKernel_ReduceScatter_RING_LL_Sum_bfloat16(ncclWorkElem)",
            None,
        )
        .1
        .unwrap();
        assert_eq!(rs.kind, CollectiveKind::ReduceScatter);
        assert_eq!(rs.dtype.as_deref(), Some("bf16"));
        let ar = c("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", None)
            .1
            .unwrap();
        assert_eq!(ar.dtype.as_deref(), Some("f32"));
        assert_eq!(
            c(
                "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                None
            )
            .0,
            KernelClass::P2p
        );
        // An all-to-all runs as SendRecv kernels; its args say what it is.
        let (class, info) = c(
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            Some("all_to_allv"),
        );
        assert_eq!(class, KernelClass::Collective);
        assert_eq!(info.unwrap().kind, CollectiveKind::AllToAll);
        assert_eq!(
            kind_from_collective_name("_allgather_base"),
            CollectiveKind::AllGather
        );
        assert_eq!(
            kind_from_collective_name("allreduce_coalesced"),
            CollectiveKind::AllReduce
        );
        assert_eq!(kind_from_collective_name("recv"), CollectiveKind::Recv);
        assert_eq!(kind_from_collective_name("reduce"), CollectiveKind::Reduce);
    }

    #[test]
    fn dtype_sizes() {
        assert_eq!(dtype_bytes("Float"), Some(4));
        assert_eq!(dtype_bytes("BFloat16"), Some(2));
        assert_eq!(dtype_bytes("c10::Half"), Some(2));
        assert_eq!(dtype_bytes("Long"), Some(8));
        assert_eq!(dtype_bytes("Float8_e4m3fn"), Some(1));
        assert_eq!(dtype_bytes("Quaternion"), None);
    }
}
