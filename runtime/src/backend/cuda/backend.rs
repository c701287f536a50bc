//! [`CudaBackend`]: enqueues each op on the CUDA stream of its schedule stream, after
//! stream-waits on its dependencies' end events, between two timing events. Nothing
//! synchronises the host until [`Backend::finish_step`], so overlap between streams is real.

use super::comm::{comm_specs, used_group_kinds, CommSpec, LocalRendezvous, Rendezvous};
use super::device::{
    run_gemm, run_memory_bound, BlasHandle, DeviceBuffer, GemmOperands, HostBuffer,
};
use super::dtype::nccl_elements;
use super::fp8::{lt_workspace_bytes, plan_op, Exec, Fp8Device};
use super::libs::{self, cu, guard, Libraries};
use super::lt::{Fp8Operands, Fp8Outcome, LtHandle};
use super::nccl::{self, Buffers, Comm, UniqueId};
use super::pool::Pool;

mod state;
mod workspace;
use crate::backend::{Backend, MemoryReport, OpContext, OpTiming};
use crate::error::RuntimeError;
use cudarc::driver::{result as drv, sys as drv_sys, CudaContext, CudaEvent, CudaStream};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use twin_sim::plan::{GroupKind, Plan, RankId};
use twin_sim::scenario::Fp8Recipe;
use twin_sim::schedule::{CollectiveKind, Device, MemCategory, Op, OpKind, Program, Stream};

#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Run fp32 GEMMs on TF32 tensor cores.
    pub allow_tf32: bool,
    /// Seed of the operand fill pattern.
    pub seed: u64,
    /// Keep the allocator pool's memory from one step to the next, as a caching allocator
    /// does (the default). When false the pool is trimmed after every step, so every step's
    /// Alloc ops pay for mapping memory again: what an allocator without a cache costs.
    pub keep_pool_between_steps: bool,
    /// Keep the schedule's state allocations (weights, optimizer state) as real buffers across
    /// steps, filled from the seed, for checkpoints to copy (see `state`). When false they are
    /// step allocations like any other.
    pub keep_state: bool,
    /// How FP8 GEMMs are scaled (the scenario's `training.fp8_recipe`): their cuBLASLt scale
    /// modes and how their operands are cast (`fp8`).
    pub fp8_recipe: Fp8Recipe,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            device: 0,
            allow_tf32: false,
            seed: 1,
            keep_pool_between_steps: true,
            keep_state: false,
            fp8_recipe: Fp8Recipe::Delayed,
        }
    }
}

/// Buffers one stream works in; grown in `prepare`, never during a step.
#[derive(Default)]
struct StreamWork {
    blas: Option<BlasHandle>,
    gemm: Option<GemmOperands>,
    /// cuBLASLt and the FP8 operands, for streams with FP8 GEMMs on an FP8 GPU.
    lt: Option<LtHandle>,
    fp8: Option<Fp8Operands>,
    scratch: Option<DeviceBuffer>,
    comm_send: Option<DeviceBuffer>,
    comm_recv: Option<DeviceBuffer>,
}

enum LiveAlloc {
    Gpu(drv_sys::CUdeviceptr),
    Host(#[allow(dead_code)] HostBuffer),
    /// The schedule's framework reserve (category `Reserved`): it stands for the CUDA context
    /// and allocator slack, which exist for real already, so it is accounted, not allocated
    /// (allocating it would count the context twice).
    Reserve,
    /// Model state kept across steps (`CudaOptions::keep_state`): its buffer lives in
    /// `CudaBackend::state`, so the step's Alloc and Free only account it.
    State,
}

/// Executes one rank's program on one GPU.
pub struct CudaBackend {
    options: CudaOptions,
    /// The GPU's FP8 GEMMs, or why they run in bf16 (no FP8 tensor cores, no cuBLASLt).
    fp8_device: Result<Fp8Device, String>,
    // Field order is drop order: everything that needs the context goes before it.
    comms: BTreeMap<GroupKind, (CommSpec, Comm)>,
    /// Staging and host memory of offload ops, from the first one.
    host_side: Option<super::host_side::HostSide>,
    work: Vec<StreamWork>,
    allocs: BTreeMap<u32, LiveAlloc>,
    /// The model state by tag, when kept across steps.
    state: BTreeMap<u32, (crate::checkpoint::StateInfo, state::StateMem)>,
    /// (start, end) timing events, reused across steps; slot i serves the i-th issued op.
    events: Vec<(CudaEvent, CudaEvent)>,
    /// Op index of each issued slot, and the slot of each op index.
    issued: Vec<u32>,
    slot_of: BTreeMap<u32, usize>,
    step_start: CudaEvent,
    /// Host time at which the device passed `step_start` (to within a synchronise): the
    /// origin that puts this rank's event times on the launcher's aligned clock.
    step_origin: Option<std::time::Instant>,
    streams: Vec<Arc<CudaStream>>,
    rendezvous: Box<dyn Rendezvous>,
    pool: Pool,
    memory: MemoryReport,
    libs: &'static Libraries,
    ctx: Arc<CudaContext>,
}

fn stream_of(streams: &[Arc<CudaStream>], s: Stream) -> Result<&Arc<CudaStream>, RuntimeError> {
    streams
        .get(s.index())
        .ok_or_else(|| RuntimeError::Unsupported(format!("stream {}", s.name())))
}

impl CudaBackend {
    /// Load the libraries, open the device and its streams. On a machine without a driver
    /// this is the "no CUDA driver found (searched: ...)" error.
    pub fn new(options: CudaOptions) -> Result<CudaBackend, RuntimeError> {
        Self::with_rendezvous(options, Box::new(LocalRendezvous::default()))
    }

    /// As [`CudaBackend::new`], with the launcher's rendezvous for NCCL unique ids.
    pub fn with_rendezvous(
        options: CudaOptions,
        rendezvous: Box<dyn Rendezvous>,
    ) -> Result<CudaBackend, RuntimeError> {
        let libs = libs::load()?;
        guard("CudaBackend::new", move || {
            Self::open(options, rendezvous, libs)
        })
    }

    fn open(
        options: CudaOptions,
        rendezvous: Box<dyn Rendezvous>,
        libs: &'static Libraries,
    ) -> Result<CudaBackend, RuntimeError> {
        drv::init().map_err(|e| cu("cuInit", e))?;
        let count = drv::device::get_count().map_err(|e| cu("cuDeviceGetCount", e))?;
        if options.device as i64 >= i64::from(count) {
            return Err(RuntimeError::TooManyRanks {
                ranks: options.device as u32 + 1,
                gpus: count.max(0) as u32,
            });
        }
        let ctx =
            CudaContext::new(options.device).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
        // Ordering between streams comes from the schedule's deps alone.
        // SAFETY: twin never hands a CudaSlice across streams.
        unsafe { ctx.disable_event_tracking() };
        let streams = Stream::ALL
            .iter()
            .map(|_| ctx.new_stream().map_err(|e| cu("cuStreamCreate", e)))
            .collect::<Result<Vec<_>, _>>()?;
        let timing = Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT);
        let step_start = ctx.new_event(timing).map_err(|e| cu("cuEventCreate", e))?;
        let mut work: Vec<StreamWork> = Stream::ALL.iter().map(|_| StreamWork::default()).collect();
        if let Some(w) = work.get_mut(Stream::Compute.index()) {
            w.blas = Some(BlasHandle::new(
                stream_of(&streams, Stream::Compute)?.cu_stream(),
            )?);
        }
        let fp8_device = match (&libs.cublas_lt, ctx.compute_capability()) {
            (Err(why), _) => Err(why.clone()),
            (Ok(()), Ok((major, minor))) => Fp8Device::check(
                (major.max(0) as u32, minor.max(0) as u32),
                options.fp8_recipe,
            ),
            (Ok(()), Err(e)) => Err(format!("the compute capability could not be read: {e}")),
        };
        let dev = drv::device::get(options.device as i32).map_err(|e| cu("cuDeviceGet", e))?;
        let pool = Pool::open(dev, options.keep_pool_between_steps)?;
        let (free, total) = ctx.mem_get_info().map_err(|e| cu("cuMemGetInfo", e))?;
        let memory = MemoryReport {
            baseline_used_bytes: Some((total - free) as u64),
            total_bytes: Some(total as u64),
            notes: vec![
                if options.keep_pool_between_steps {
                    "schedule allocations come from the device's stream-ordered pool (cuMemAllocFromPoolAsync, release threshold UINT64_MAX), which keeps its reservation across steps like a caching allocator: the first step pays for mapping memory, later steps reuse it (allocator_reserved_at_start_bytes); allocator peaks are the pool's USED/RESERVED_MEM_HIGH of the last step, and device memory before a step includes what the pool holds"
                } else {
                    "schedule allocations come from the device's stream-ordered pool (cuMemAllocFromPoolAsync), trimmed after every step on request: every step's Alloc ops pay for mapping memory; allocator peaks are the pool's USED/RESERVED_MEM_HIGH of the last step"
                }
                .into(),
                "memory-bound bytes run as device-to-device copies of half the bytes (each byte read once, written once)".into(),
            ],
            ..MemoryReport::default()
        };
        let mut memory = memory;
        if options.keep_state {
            memory.notes.push("model state (the schedule's weights and optimizer allocations) is kept across steps in buffers outside the step pool, for checkpoints: allocator peaks leave it out, device memory in use includes it".into());
        }
        Ok(CudaBackend {
            options,
            fp8_device,
            comms: BTreeMap::new(),
            host_side: None,
            work,
            allocs: BTreeMap::new(),
            state: BTreeMap::new(),
            events: Vec::new(),
            issued: Vec::new(),
            slot_of: BTreeMap::new(),
            step_start,
            step_origin: None,
            streams,
            rendezvous,
            pool,
            memory,
            libs,
            ctx,
        })
    }

    /// When the current (or last) step began, on the host's monotonic clock; `None` before
    /// the first step. Op times of [`Backend::finish_step`] count from here.
    pub fn step_origin(&self) -> Option<std::time::Instant> {
        self.step_origin
    }

    pub fn device_count() -> Result<u32, RuntimeError> {
        libs::load()?;
        guard("device_count", || {
            drv::init().map_err(|e| cu("cuInit", e))?;
            let n = drv::device::get_count().map_err(|e| cu("cuDeviceGetCount", e))?;
            Ok(n.max(0) as u32)
        })
    }

    fn note(&mut self, n: String) {
        if !self.memory.notes.contains(&n) {
            self.memory.notes.push(n);
        }
    }

    /// Create the NCCL communicators the program uses, once.
    fn ensure_comms(&mut self, plan_specs: Vec<CommSpec>) -> Result<(), RuntimeError> {
        let missing: Vec<CommSpec> = plan_specs
            .into_iter()
            .filter(|s| !self.comms.contains_key(&s.kind))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let path = self.libs_nccl_path()?;
        let nccl = nccl::load(&path)?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| cu("cuCtxSetCurrent", e))?;
        for spec in missing {
            let id = if spec.is_root() {
                let id = nccl.unique_id()?;
                self.rendezvous.publish(&spec.key, &id.to_bytes())?;
                id
            } else {
                let bytes = self.rendezvous.fetch(&spec.key)?;
                UniqueId::from_bytes(&bytes).ok_or_else(|| {
                    RuntimeError::Rendezvous(format!(
                        "{}: {} bytes, want 128",
                        spec.key,
                        bytes.len()
                    ))
                })?
            };
            let comm = nccl.init_rank(spec.members.len() as u32, id, spec.my_index)?;
            self.comms.insert(spec.kind, (spec, comm));
        }
        Ok(())
    }

    fn libs_nccl_path(&self) -> Result<std::path::PathBuf, RuntimeError> {
        self.libs.discovery.require(super::discover::CudaLib::Nccl)
    }

    /// Free every allocation still live (the device must be idle).
    fn release_live_allocs(&mut self) {
        for (_, a) in std::mem::take(&mut self.allocs) {
            if let LiveAlloc::Gpu(p) = a {
                // SAFETY: allocated from the pool, not freed by the schedule, device idle.
                let _ = unsafe { drv::free_sync(p) };
            }
        }
    }

    fn begin_step(&mut self) -> Result<(), RuntimeError> {
        self.ctx
            .synchronize()
            .map_err(|e| cu("cuCtxSynchronize", e))?;
        // A schedule that never frees an allocation (or a step that failed half way) must not
        // leak it into the next step, whose Alloc reuses the tag.
        self.release_live_allocs();
        // What the pool still holds from the previous step is reported, so a reader sees
        // whether Alloc ops paid for mapping memory.
        self.memory.allocator_reserved_at_start_bytes = Some(self.pool.begin_step()?);
        let (free, total) = self.ctx.mem_get_info().map_err(|e| cu("cuMemGetInfo", e))?;
        self.memory.used_before_step_bytes = Some((total - free) as u64);
        self.issued.clear();
        self.slot_of.clear();
        let first = stream_of(&self.streams, Stream::Compute)?;
        self.step_start
            .record(first)
            .map_err(|e| cu("cuEventRecord", e))?;
        // Every stream is idle (synchronised above), so the event completes at once: waiting
        // for it pins the step's device origin to a host instant.
        self.step_start
            .synchronize()
            .map_err(|e| cu("cuEventSynchronize", e))?;
        self.step_origin = Some(std::time::Instant::now());
        for s in &self.streams {
            s.wait(&self.step_start)
                .map_err(|e| cu("cuStreamWaitEvent", e))?;
        }
        Ok(())
    }

    fn issue(&mut self, op: &Op, ctx: &OpContext) -> Result<(), RuntimeError> {
        let stream = stream_of(&self.streams, op.stream)?.clone();
        let cu_stream = stream.cu_stream();
        let w = self
            .work
            .get(op.stream.index())
            .ok_or_else(|| RuntimeError::Unsupported(format!("stream {}", op.stream.name())))?;
        match &op.kind {
            OpKind::Compute(c) => {
                let plan = plan_op(
                    c,
                    self.fp8_device.as_ref().map_err(String::as_str),
                    self.options.allow_tf32,
                );
                let mut notes = plan.notes;
                let w = self.work.get_mut(op.stream.index()).ok_or_else(|| {
                    RuntimeError::Unsupported(format!("stream {}", op.stream.name()))
                })?;
                if !plan.gemms.is_empty() {
                    let (Some(h), Some(ops)) = (&w.blas, &w.gemm) else {
                        return Err(RuntimeError::Unsupported(
                            "GEMM without a prepared workspace".into(),
                        ));
                    };
                    for p in &plan.gemms {
                        match p.exec {
                            Exec::Blas(dtype) => run_gemm(h, ops, &p.gemm, dtype)?,
                            Exec::Fp8(f) => {
                                let (Some(lt), Some(f8)) = (w.lt.as_mut(), w.fp8.as_ref()) else {
                                    return Err(RuntimeError::Unsupported(
                                        "FP8 GEMM without a prepared cuBLASLt workspace".into(),
                                    ));
                                };
                                match lt.run(f8, &ops.c, &f, cu_stream)? {
                                    Fp8Outcome::Ran(note) => notes.extend(note),
                                    Fp8Outcome::Unsupported(note) => {
                                        notes.push(note);
                                        run_gemm(h, ops, &p.gemm, super::dtype::GemmDtype::Bf16)?;
                                    }
                                }
                            }
                        }
                    }
                }
                if c.memory_bytes > 0 {
                    let s = w
                        .scratch
                        .as_ref()
                        .ok_or_else(|| RuntimeError::Unsupported("no scratch".into()))?;
                    // The op's kernels that are not GEMM calls are its elementwise launches
                    // (under FP8, its casts and amax reductions, whose bytes the op carries).
                    let gemm_calls = c
                        .executed_gemms()
                        .fold(0u32, |a, g| a.saturating_add(g.calls()));
                    run_memory_bound(
                        s,
                        c.memory_bytes,
                        c.kernels.saturating_sub(gemm_calls),
                        cu_stream,
                    )?;
                }
                for n in notes {
                    self.note(n);
                }
            }
            OpKind::Collective {
                kind,
                group,
                bytes,
                calls,
            } => {
                let (spec, comm) = self.comms.get(group).ok_or_else(|| {
                    RuntimeError::Unsupported(format!("no communicator for {group:?}"))
                })?;
                let send = w
                    .comm_send
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Unsupported("no comm buffer".into()))?;
                let n = u64::from(comm.nranks.max(1));
                let single = comm.nranks == 1;
                let stream_ptr = cu_stream as *mut std::ffi::c_void;
                for _ in 0..(*calls).max(1) {
                    // In place, as frameworks run them; all-to-all needs a second buffer.
                    let b = Buffers {
                        send: send.as_ptr(),
                        recv: send.as_ptr(),
                    };
                    // SAFETY: buffers hold `bytes` (sized in prepare); counts below keep every
                    // side within it.
                    unsafe {
                        match kind {
                            CollectiveKind::AllReduce => {
                                let (t, count) = nccl_elements(*bytes, true);
                                comm.all_reduce(&b, t, count, stream_ptr)?
                            }
                            CollectiveKind::Broadcast => {
                                let (t, count) = nccl_elements(*bytes, false);
                                comm.broadcast(&b, t, count, 0, stream_ptr)?
                            }
                            CollectiveKind::AllGather => {
                                let per = *bytes / n;
                                let own = Buffers {
                                    send: send
                                        .as_ptr()
                                        .cast::<u8>()
                                        .add((per * u64::from(spec.my_index)) as usize)
                                        .cast(),
                                    recv: b.recv,
                                };
                                comm.all_gather(&own, nccl_elements(per, false).0, per, stream_ptr)?
                            }
                            CollectiveKind::ReduceScatter => {
                                let per = *bytes / n;
                                let (t, count) = nccl_elements(per, true);
                                let own = Buffers {
                                    send: b.send,
                                    recv: send
                                        .as_ptr()
                                        .cast::<u8>()
                                        .add((per * u64::from(spec.my_index)) as usize)
                                        .cast(),
                                };
                                comm.reduce_scatter(&own, t, count, stream_ptr)?
                            }
                            CollectiveKind::AllToAll => {
                                let recv = w.comm_recv.as_ref().ok_or_else(|| {
                                    RuntimeError::Unsupported("no all-to-all buffer".into())
                                })?;
                                let b = Buffers {
                                    send: b.send,
                                    recv: recv.as_ptr(),
                                };
                                comm.all_to_all(&b, *bytes / n, stream_ptr)?
                            }
                        }
                    }
                }
                if single {
                    self.note("collectives over one-member groups are real NCCL calls that move no data (NCCL returns at once for one rank); their times are call overheads only".into());
                }
            }
            OpKind::Send { bytes, .. } | OpKind::Recv { bytes, .. } => {
                let route = ctx
                    .peer
                    .ok_or_else(|| RuntimeError::Unsupported("unresolved peer".into()))?;
                if route.rank == ctx.rank {
                    return Err(RuntimeError::Unsupported(format!(
                        "rank {} sends to itself (a one-stage pipeline should have no pipeline transfers)",
                        ctx.rank
                    )));
                }
                let (spec, comm) = self.comms.get(&route.group).ok_or_else(|| {
                    RuntimeError::Unsupported(format!("no communicator for {:?}", route.group))
                })?;
                let peer = spec.index_of(route.rank).ok_or_else(|| {
                    RuntimeError::Unsupported(format!(
                        "rank {} is not in this {:?} group",
                        route.rank, route.group
                    ))
                })?;
                let buf = w
                    .comm_send
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Unsupported("no p2p buffer".into()))?;
                let sp = cu_stream as *mut std::ffi::c_void;
                // SAFETY: the buffer holds the stream's largest transfer.
                unsafe {
                    if matches!(op.kind, OpKind::Send { .. }) {
                        comm.send(buf.as_ptr(), *bytes, peer, sp)?
                    } else {
                        comm.recv(buf.as_ptr(), *bytes, peer, sp)?
                    }
                }
            }
            OpKind::Alloc {
                device,
                bytes,
                tag,
                category,
            } => {
                let live = match device {
                    _ if self.options.keep_state
                        && crate::checkpoint::state::is_state(*category, *device) =>
                    {
                        LiveAlloc::State
                    }
                    Device::Gpu if *category == MemCategory::Reserved => LiveAlloc::Reserve,
                    Device::Gpu => LiveAlloc::Gpu(self.pool.alloc(*bytes, cu_stream)?),
                    Device::Host => LiveAlloc::Host(HostBuffer::new(*bytes)?),
                };
                self.allocs.insert(*tag, live);
            }
            OpKind::Free { tag } => match self.allocs.remove(tag) {
                // SAFETY: allocated from the pool, freed once, after its deps.
                Some(LiveAlloc::Gpu(p)) => {
                    unsafe { drv::free_async(p, cu_stream) }.map_err(|e| cu("cuMemFreeAsync", e))?
                }
                Some(LiveAlloc::Host(h)) => drop(h),
                Some(LiveAlloc::Reserve | LiveAlloc::State) => {}
                None => {
                    return Err(RuntimeError::Unsupported(format!(
                        "free of unknown tag {tag}"
                    )))
                }
            },
            OpKind::Checkpoint { bytes } => {
                // Checkpoint storage is the host runtime's business; here the device side of
                // it: reading the state out, as device copies of the bytes.
                let s = w
                    .scratch
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Unsupported("no scratch".into()))?;
                run_memory_bound(s, bytes.saturating_mul(2), 1, cu_stream)?;
                self.note("the schedule's checkpoint ops are timed as device reads of their bytes; the files of --checkpoint-dir are written by the worker between steps".into());
            }
            OpKind::HostCopy { bytes, to_host } => {
                let s = w
                    .scratch
                    .as_ref()
                    .ok_or_else(|| RuntimeError::Unsupported("no scratch".into()))?;
                if self.host_side.is_none() {
                    self.host_side = Some(super::host_side::HostSide::new(s.bytes)?);
                }
                if let Some(h) = &self.host_side {
                    h.copy(s, *bytes, *to_host, cu_stream)?;
                }
            }
            OpKind::HostUpdate { bytes } => {
                if self.host_side.is_none() {
                    let chunk = w.scratch.as_ref().map_or(1 << 20, |s| s.bytes);
                    self.host_side = Some(super::host_side::HostSide::new(chunk)?);
                }
                if let Some(h) = &self.host_side {
                    h.update(*bytes, cu_stream)?;
                }
            }
        }
        Ok(())
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn prepare(
        &mut self,
        plan: &Plan,
        rank: RankId,
        program: &Program,
    ) -> Result<(), RuntimeError> {
        guard("CudaBackend::prepare", || {
            self.ctx
                .bind_to_thread()
                .map_err(|e| cu("cuCtxSetCurrent", e))?;
            self.size_workspaces(program)?;
            if self.options.keep_state {
                self.ensure_state(rank, program)?;
            }
            let kinds: BTreeSet<GroupKind> = used_group_kinds(program);
            if !kinds.is_empty() {
                let specs = comm_specs(plan, rank, &kinds);
                self.ensure_comms(specs)?;
            }
            self.begin_step()
        })
    }

    fn enqueue(&mut self, index: u32, op: &Op, ctx: &OpContext) -> Result<(), RuntimeError> {
        guard("CudaBackend::enqueue", || {
            let stream = stream_of(&self.streams, op.stream)?.clone();
            for d in ctx.deps {
                let slot = self.slot_of.get(d).copied().ok_or_else(|| {
                    RuntimeError::Unsupported(format!("dependency on op {d}, which was not issued"))
                })?;
                let (_, end) = self
                    .events
                    .get(slot)
                    .ok_or_else(|| RuntimeError::Unsupported("event slot".into()))?;
                stream.wait(end).map_err(|e| cu("cuStreamWaitEvent", e))?;
            }
            let slot = self.issued.len();
            if slot == self.events.len() {
                let timing = Some(drv_sys::CUevent_flags::CU_EVENT_DEFAULT);
                let start = self
                    .ctx
                    .new_event(timing)
                    .map_err(|e| cu("cuEventCreate", e))?;
                let end = self
                    .ctx
                    .new_event(timing)
                    .map_err(|e| cu("cuEventCreate", e))?;
                self.events.push((start, end));
            }
            if let Some((start, _)) = self.events.get(slot) {
                start.record(&stream).map_err(|e| cu("cuEventRecord", e))?;
            }
            self.issue(op, ctx)?;
            if let Some((_, end)) = self.events.get(slot) {
                end.record(&stream).map_err(|e| cu("cuEventRecord", e))?;
            }
            self.issued.push(index);
            self.slot_of.insert(index, slot);
            Ok(())
        })
    }

    fn finish_step(&mut self) -> Result<Vec<OpTiming>, RuntimeError> {
        guard("CudaBackend::finish_step", || {
            self.ctx
                .synchronize()
                .map_err(|e| cu("cuCtxSynchronize", e))?;
            for (_, comm) in self.comms.values() {
                comm.async_error()?;
            }
            let to_ns = |ms: f32| (f64::from(ms) * 1e6).max(0.0).round() as u64;
            let mut out = Vec::with_capacity(self.issued.len());
            for (slot, &index) in self.issued.iter().enumerate() {
                let (start, end) = self
                    .events
                    .get(slot)
                    .ok_or_else(|| RuntimeError::Unsupported("event slot".into()))?;
                let s = self
                    .step_start
                    .elapsed_ms(start)
                    .map_err(|e| cu("cuEventElapsedTime", e))?;
                let e = self
                    .step_start
                    .elapsed_ms(end)
                    .map_err(|e| cu("cuEventElapsedTime", e))?;
                out.push(OpTiming {
                    index,
                    start_ns: to_ns(s),
                    end_ns: to_ns(e),
                    // A stream starts the kernel on the device, unseen by the host.
                    issued_ns: None,
                    wait_ns: None,
                });
            }
            // Device memory before the pool may be trimmed (only on request).
            let (free, total) = self.ctx.mem_get_info().map_err(|e| cu("cuMemGetInfo", e))?;
            self.memory.used_after_step_bytes = Some((total - free) as u64);
            let peaks = self.pool.end_step()?;
            self.memory.allocator_peak_bytes = Some(peaks.used_high_bytes);
            self.memory.allocator_reserved_peak_bytes = Some(peaks.reserved_high_bytes);
            Ok(out)
        })
    }

    fn memory(&self) -> MemoryReport {
        self.memory.clone()
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.ctx.synchronize();
        self.release_live_allocs();
        self.pool.release();
    }
}
