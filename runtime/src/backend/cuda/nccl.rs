//! Minimal NCCL bindings loaded from an explicit path. cudarc looks NCCL up by bare name and
//! never tries `libnccl.so.2` (the name every NCCL package installs), so twin opens the file
//! that discovery found and resolves the dozen symbols it calls. A missing symbol is an
//! error, never a panic.

use super::dtype::NcclDtype;
use crate::error::RuntimeError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;
use std::sync::OnceLock;

pub type NcclResult = c_int;
pub type NcclComm = *mut c_void;
pub type CudaStream = *mut c_void;

const NCCL_SUCCESS: NcclResult = 0;
const NCCL_SUM: c_int = 0;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

impl UniqueId {
    pub fn to_bytes(self) -> Vec<u8> {
        self.internal.iter().map(|&c| c as u8).collect()
    }
    pub fn from_bytes(b: &[u8]) -> Option<UniqueId> {
        if b.len() != 128 {
            return None;
        }
        let mut internal = [0 as c_char; 128];
        for (d, s) in internal.iter_mut().zip(b) {
            *d = *s as c_char;
        }
        Some(UniqueId { internal })
    }
}

type FnVersion = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type FnUniqueId = unsafe extern "C" fn(*mut UniqueId) -> NcclResult;
type FnInitRank = unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult;
type FnComm = unsafe extern "C" fn(NcclComm) -> NcclResult;
type FnErrorString = unsafe extern "C" fn(NcclResult) -> *const c_char;
type FnAsyncError = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;
type FnAllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type FnBroadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type FnAllGather = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    NcclComm,
    CudaStream,
) -> NcclResult;
type FnSend =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;
type FnRecv =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;
type FnGroup = unsafe extern "C" fn() -> NcclResult;

/// The loaded library and the entry points twin uses.
pub struct Nccl {
    _lib: Library,
    get_version: FnVersion,
    get_unique_id: FnUniqueId,
    comm_init_rank: FnInitRank,
    comm_destroy: FnComm,
    comm_abort: FnComm,
    get_error_string: FnErrorString,
    comm_get_async_error: FnAsyncError,
    all_reduce: FnAllReduce,
    reduce_scatter: FnAllReduce,
    broadcast: FnBroadcast,
    all_gather: FnAllGather,
    send: FnSend,
    recv: FnRecv,
    group_start: FnGroup,
    group_end: FnGroup,
}

static NCCL: OnceLock<Nccl> = OnceLock::new();

/// Load NCCL from `path` once per process.
pub fn load(path: &Path) -> Result<&'static Nccl, RuntimeError> {
    if let Some(n) = NCCL.get() {
        return Ok(n);
    }
    let n = open(path)?;
    Ok(NCCL.get_or_init(|| n))
}

fn open(path: &Path) -> Result<Nccl, RuntimeError> {
    let load_err = |reason: String| RuntimeError::LibraryLoad {
        library: "NCCL",
        path: path.display().to_string(),
        reason,
    };
    // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
    let lib = unsafe { Library::new(path) }.map_err(|e| load_err(e.to_string()))?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the type written at the use site is NCCL's documented signature.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| load_err(format!("missing symbol {}: {e}", $name)))?
        };
    }
    Ok(Nccl {
        get_version: sym!("ncclGetVersion"),
        get_unique_id: sym!("ncclGetUniqueId"),
        comm_init_rank: sym!("ncclCommInitRank"),
        comm_destroy: sym!("ncclCommDestroy"),
        comm_abort: sym!("ncclCommAbort"),
        get_error_string: sym!("ncclGetErrorString"),
        comm_get_async_error: sym!("ncclCommGetAsyncError"),
        all_reduce: sym!("ncclAllReduce"),
        reduce_scatter: sym!("ncclReduceScatter"),
        broadcast: sym!("ncclBroadcast"),
        all_gather: sym!("ncclAllGather"),
        send: sym!("ncclSend"),
        recv: sym!("ncclRecv"),
        group_start: sym!("ncclGroupStart"),
        group_end: sym!("ncclGroupEnd"),
        _lib: lib,
    })
}

impl Nccl {
    fn check(&self, call: &'static str, r: NcclResult) -> Result<(), RuntimeError> {
        if r == NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static C string for any code.
        let text = unsafe {
            let p = (self.get_error_string)(r);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(RuntimeError::Nccl {
            call,
            message: format!("error {r}: {text}"),
        })
    }

    /// "2.28.3" from NCCL's integer version.
    pub fn version(&self) -> Result<String, RuntimeError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100))
    }

    pub fn unique_id(&self) -> Result<UniqueId, RuntimeError> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes the 128-byte id.
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// Join a communicator; blocks until every member has joined. The CUDA context must be
    /// current on this thread.
    pub fn init_rank(
        &'static self,
        nranks: u32,
        id: UniqueId,
        rank: u32,
    ) -> Result<Comm, RuntimeError> {
        let mut comm: NcclComm = std::ptr::null_mut();
        let n = c_int::try_from(nranks)
            .map_err(|_| RuntimeError::Unsupported(format!("{nranks} ranks")))?;
        let r =
            c_int::try_from(rank).map_err(|_| RuntimeError::Unsupported(format!("rank {rank}")))?;
        // SAFETY: comm is written on success; id is passed by value as NCCL expects.
        self.check("ncclCommInitRank", unsafe {
            (self.comm_init_rank)(&mut comm, n, id, r)
        })?;
        Ok(Comm {
            nccl: self,
            raw: comm,
            nranks,
        })
    }
}

/// One communicator; destroyed on drop (aborted if it reported an error).
pub struct Comm {
    nccl: &'static Nccl,
    raw: NcclComm,
    pub nranks: u32,
}

/// Device buffers of a collective call.
pub struct Buffers {
    pub send: *const c_void,
    pub recv: *mut c_void,
}

impl Comm {
    fn count(bytes_per_rank: u64) -> Result<usize, RuntimeError> {
        usize::try_from(bytes_per_rank)
            .map_err(|_| RuntimeError::Unsupported(format!("{bytes_per_rank} bytes")))
    }

    /// # Safety
    /// `b.send` / `b.recv` must be device buffers of at least `count` elements of `dtype`
    /// (times `nranks` for the gathered / scattered side) that outlive the stream's work.
    pub unsafe fn all_reduce(
        &self,
        b: &Buffers,
        dtype: NcclDtype,
        count: u64,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.all_reduce)(
            b.send,
            b.recv,
            Self::count(count)?,
            dtype as c_int,
            NCCL_SUM,
            self.raw,
            stream,
        );
        self.nccl.check("ncclAllReduce", r)
    }

    /// # Safety
    /// As [`Comm::all_reduce`]; `b.send` holds `recv_count * nranks` elements.
    pub unsafe fn reduce_scatter(
        &self,
        b: &Buffers,
        dtype: NcclDtype,
        recv_count: u64,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.reduce_scatter)(
            b.send,
            b.recv,
            Self::count(recv_count)?,
            dtype as c_int,
            NCCL_SUM,
            self.raw,
            stream,
        );
        self.nccl.check("ncclReduceScatter", r)
    }

    /// # Safety
    /// As [`Comm::all_reduce`]; `b.recv` holds `send_count * nranks` elements.
    pub unsafe fn all_gather(
        &self,
        b: &Buffers,
        dtype: NcclDtype,
        send_count: u64,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.all_gather)(
            b.send,
            b.recv,
            Self::count(send_count)?,
            dtype as c_int,
            self.raw,
            stream,
        );
        self.nccl.check("ncclAllGather", r)
    }

    /// # Safety
    /// As [`Comm::all_reduce`].
    pub unsafe fn broadcast(
        &self,
        b: &Buffers,
        dtype: NcclDtype,
        count: u64,
        root: u32,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.broadcast)(
            b.send,
            b.recv,
            Self::count(count)?,
            dtype as c_int,
            root as c_int,
            self.raw,
            stream,
        );
        self.nccl.check("ncclBroadcast", r)
    }

    /// All-to-all as grouped sends and receives of `per_peer` bytes to and from every member.
    ///
    /// # Safety
    /// `b.send` and `b.recv` hold `per_peer * nranks` bytes.
    pub unsafe fn all_to_all(
        &self,
        b: &Buffers,
        per_peer: u64,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let count = Self::count(per_peer)?;
        self.nccl
            .check("ncclGroupStart", (self.nccl.group_start)())?;
        let mut first_err = Ok(());
        for peer in 0..self.nranks {
            let off = count * peer as usize;
            let s = (self.nccl.send)(
                b.send.cast::<u8>().add(off).cast(),
                count,
                NcclDtype::Uint8 as c_int,
                peer as c_int,
                self.raw,
                stream,
            );
            let r = (self.nccl.recv)(
                b.recv.cast::<u8>().add(off).cast(),
                count,
                NcclDtype::Uint8 as c_int,
                peer as c_int,
                self.raw,
                stream,
            );
            if first_err.is_ok() {
                first_err = self
                    .nccl
                    .check("ncclSend", s)
                    .and(self.nccl.check("ncclRecv", r));
            }
        }
        let end = self.nccl.check("ncclGroupEnd", (self.nccl.group_end)());
        first_err.and(end)
    }

    /// # Safety
    /// `buf` holds `bytes` bytes.
    pub unsafe fn send(
        &self,
        buf: *const c_void,
        bytes: u64,
        peer: u32,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.send)(
            buf,
            Self::count(bytes)?,
            NcclDtype::Uint8 as c_int,
            peer as c_int,
            self.raw,
            stream,
        );
        self.nccl.check("ncclSend", r)
    }

    /// # Safety
    /// `buf` holds `bytes` bytes.
    pub unsafe fn recv(
        &self,
        buf: *mut c_void,
        bytes: u64,
        peer: u32,
        stream: CudaStream,
    ) -> Result<(), RuntimeError> {
        let r = (self.nccl.recv)(
            buf,
            Self::count(bytes)?,
            NcclDtype::Uint8 as c_int,
            peer as c_int,
            self.raw,
            stream,
        );
        self.nccl.check("ncclRecv", r)
    }

    /// An error NCCL raised asynchronously (a dead peer, a network failure), if any.
    pub fn async_error(&self) -> Result<(), RuntimeError> {
        let mut e: NcclResult = 0;
        // SAFETY: raw is a live communicator.
        self.nccl.check("ncclCommGetAsyncError", unsafe {
            (self.nccl.comm_get_async_error)(self.raw, &mut e)
        })?;
        self.nccl.check("asynchronous NCCL operation", e)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // Abort rather than destroy when the communicator failed: destroy would wait for
        // peers that may be dead.
        // SAFETY: raw is a live communicator, dropped once.
        unsafe {
            if self.async_error().is_err() {
                (self.nccl.comm_abort)(self.raw);
            } else {
                (self.nccl.comm_destroy)(self.raw);
            }
        }
    }
}
