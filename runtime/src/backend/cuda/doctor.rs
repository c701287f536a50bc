//! `twin doctor` for GPUs: what twin found (libraries, driver, devices, versions, memory, peer
//! access), where each item that is missing was looked for. It never fails: a missing piece
//! is an item that says so.

use super::device::BlasHandle;
use super::discover::{CudaLib, Discovery, SearchEnv};
use super::libs::{self, cu, guard};
use super::nccl;
use crate::error::RuntimeError;
use cudarc::driver::{result as drv, sys as drv_sys, CudaContext};
use serde::Serialize;
use std::fmt;

/// A fact, or why it could not be had.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Item<T> {
    Found(T),
    NotFound(String),
}

impl<T> Item<T> {
    fn from(r: Result<T, RuntimeError>) -> Item<T> {
        match r {
            Ok(v) => Item::Found(v),
            Err(e) => Item::NotFound(e.to_string()),
        }
    }
}

impl<T: fmt::Display> fmt::Display for Item<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Found(v) => write!(f, "{v}"),
            Item::NotFound(why) => write!(f, "not found ({why})"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub compute_capability: String,
    pub multiprocessors: u32,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeerAccess {
    pub from: u32,
    pub to: u32,
    pub can_access: bool,
}

/// One shared library: where it was found, or every place it was looked for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LibraryItem {
    pub name: String,
    pub path: Item<String>,
    /// The CUDA backend cannot run without it (NVRTC is optional: no kernel is compiled).
    pub required: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DoctorReport {
    pub libraries: Vec<LibraryItem>,
    pub driver_version: Item<String>,
    /// The newest CUDA version the driver supports.
    pub driver_cuda_version: Item<String>,
    /// CUDA version of the API bindings twin was built with.
    pub bindings_cuda_version: String,
    pub cublas_version: Item<String>,
    pub nccl_version: Item<String>,
    pub gpus: Item<Vec<GpuInfo>>,
    pub peer_access: Vec<PeerAccess>,
    pub notes: Vec<String>,
}

fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn driver_version() -> Result<String, RuntimeError> {
    // The kernel module's version (e.g. 580.159.04), when readable.
    std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|t| driver_version_in(&t))
        .ok_or_else(|| RuntimeError::Unsupported("/proc/driver/nvidia/version unreadable".into()))
}

/// The first dotted number in the kernel module's banner.
fn driver_version_in(banner: &str) -> Option<String> {
    banner
        .split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

fn gpus() -> Result<Vec<GpuInfo>, RuntimeError> {
    let n = drv::device::get_count().map_err(|e| cu("cuDeviceGetCount", e))?;
    (0..n.max(0) as usize)
        .map(|i| {
            let ctx = CudaContext::new(i).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
            let (major, minor) = ctx
                .compute_capability()
                .map_err(|e| cu("cuDeviceGetAttribute", e))?;
            let sms = ctx
                .attribute(drv_sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(|e| cu("cuDeviceGetAttribute", e))?;
            let (free, total) = ctx.mem_get_info().map_err(|e| cu("cuMemGetInfo", e))?;
            Ok(GpuInfo {
                index: i as u32,
                name: ctx.name().map_err(|e| cu("cuDeviceGetName", e))?,
                compute_capability: format!("{major}.{minor}"),
                multiprocessors: sms.max(0) as u32,
                total_bytes: total as u64,
                free_bytes: free as u64,
            })
        })
        .collect()
}

fn peers(n: u32) -> Vec<PeerAccess> {
    let mut out = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let mut can: std::ffi::c_int = 0;
            let (Ok(da), Ok(db)) = (drv::device::get(a as i32), drv::device::get(b as i32)) else {
                continue;
            };
            // SAFETY: writes one int for two valid devices.
            let ok = unsafe { drv_sys::cuDeviceCanAccessPeer(&mut can, da, db) }
                .result()
                .is_ok();
            out.push(PeerAccess {
                from: a,
                to: b,
                can_access: ok && can != 0,
            });
        }
    }
    out
}

/// Inspect the machine. Never fails; never panics.
pub fn doctor() -> DoctorReport {
    let discovery = Discovery::run(&SearchEnv::from_process());
    let libraries = CudaLib::ALL
        .iter()
        .map(|&lib| LibraryItem {
            name: lib.label().to_string(),
            path: Item::from(discovery.require(lib).map(|p| p.display().to_string())),
            required: lib != CudaLib::Nvrtc,
        })
        .collect();
    let mut report = DoctorReport {
        libraries,
        driver_version: Item::from(driver_version()),
        driver_cuda_version: Item::NotFound("driver not loaded".into()),
        bindings_cuda_version: "13.0".into(),
        cublas_version: Item::NotFound("driver not loaded".into()),
        nccl_version: Item::from(
            discovery
                .require(CudaLib::Nccl)
                .and_then(|p| guard("NCCL", || nccl::load(&p)?.version())),
        ),
        gpus: Item::NotFound("driver not loaded".into()),
        peer_access: Vec::new(),
        notes: vec![
            "NVLink topology needs NVML, which twin does not query; peer access is from cuDeviceCanAccessPeer".into(),
        ],
    };
    let loaded =
        libs::load().and_then(|_| guard("cuInit", || drv::init().map_err(|e| cu("cuInit", e))));
    if let Err(e) = loaded {
        let why = e.to_string();
        report.driver_cuda_version = Item::NotFound(why.clone());
        report.cublas_version = Item::NotFound(why.clone());
        report.gpus = Item::NotFound(why);
        return report;
    }
    report.driver_cuda_version = Item::from(guard("cuDriverGetVersion", || {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: writes one int.
        unsafe { drv_sys::cuDriverGetVersion(&mut v) }
            .result()
            .map_err(|e| cu("cuDriverGetVersion", e))?;
        Ok(cuda_version_text(v))
    }));
    report.gpus = Item::from(guard("devices", gpus));
    if let Item::Found(g) = &report.gpus {
        report.peer_access = peers(g.len() as u32);
        if !g.is_empty() {
            report.cublas_version = Item::from(guard("cuBLAS", || {
                let ctx = CudaContext::new(0).map_err(|e| cu("cuDevicePrimaryCtxRetain", e))?;
                let stream = ctx.default_stream();
                BlasHandle::new(stream.cu_stream())?.version()
            }));
        }
    }
    report
}

impl DoctorReport {
    /// What the CUDA backend needs and this machine lacks, one line each, saying why (for a
    /// library: every place searched). Empty when a single-GPU run can start.
    pub fn missing(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .libraries
            .iter()
            .filter(|l| l.required)
            .filter_map(|l| match &l.path {
                Item::NotFound(why) => Some(format!("{}: {why}", l.name)),
                Item::Found(_) => None,
            })
            .collect();
        match &self.gpus {
            Item::Found(g) if g.is_empty() => out.push("GPUs: the driver sees no GPU".into()),
            Item::Found(_) => {
                if let Item::NotFound(why) = &self.cublas_version {
                    out.push(format!("cuBLAS: {why}"));
                }
            }
            Item::NotFound(why) => out.push(format!("GPUs: {why}")),
        }
        out
    }
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "libraries:")?;
        for l in &self.libraries {
            let optional = if l.required { "" } else { " (optional)" };
            writeln!(f, "  {:<12} {}{optional}", l.name, l.path)?;
        }
        writeln!(f, "driver:        {}", self.driver_version)?;
        writeln!(f, "driver CUDA:   {}", self.driver_cuda_version)?;
        writeln!(f, "bindings CUDA: {}", self.bindings_cuda_version)?;
        writeln!(f, "cuBLAS:        {}", self.cublas_version)?;
        writeln!(f, "NCCL:          {}", self.nccl_version)?;
        match &self.gpus {
            Item::Found(gpus) => {
                writeln!(f, "GPUs: {}", gpus.len())?;
                for g in gpus {
                    writeln!(
                        f,
                        "  [{}] {} (sm {}, {} SMs) memory {} free of {}",
                        g.index,
                        g.name,
                        g.compute_capability,
                        g.multiprocessors,
                        gib(g.free_bytes),
                        gib(g.total_bytes)
                    )?;
                }
            }
            Item::NotFound(why) => writeln!(f, "GPUs: not found ({why})")?,
        }
        for p in &self.peer_access {
            writeln!(
                f,
                "  peer {} -> {}: {}",
                p.from,
                p.to,
                if p.can_access { "yes" } else { "no" }
            )?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        let missing = self.missing();
        if missing.is_empty() {
            writeln!(f, "ready: the CUDA backend can run on this machine")?;
        } else {
            writeln!(f, "not ready: the CUDA backend cannot run here; missing:")?;
            for m in &missing {
                writeln!(f, "  - {m}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_comes_from_the_banner() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Oct  2 2025";
        assert_eq!(driver_version_in(open).as_deref(), Some("580.159.04"));
        let closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023";
        assert_eq!(driver_version_in(closed).as_deref(), Some("535.104.05"));
        assert_eq!(driver_version_in("no version here"), None);
        assert_eq!(cuda_version_text(13000), "13.0");
        assert_eq!(cuda_version_text(12080), "12.8");
    }

    fn report(gpus: Item<Vec<GpuInfo>>, nvrtc: Item<String>) -> DoctorReport {
        let lib = |name: &str, path: Item<String>, required| LibraryItem {
            name: name.into(),
            path,
            required,
        };
        DoctorReport {
            libraries: vec![
                lib("CUDA driver", Item::Found("/x/libcuda.so.1".into()), true),
                lib("NCCL", Item::Found("/x/libnccl.so.2".into()), true),
                lib("NVRTC", nvrtc, false),
            ],
            driver_version: Item::Found("580.1".into()),
            driver_cuda_version: Item::Found("13.0".into()),
            bindings_cuda_version: "13.0".into(),
            cublas_version: Item::Found("13.1.0".into()),
            nccl_version: Item::Found("2.28.3".into()),
            gpus,
            peer_access: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn missing_lists_required_pieces_only() {
        let gpu = GpuInfo {
            index: 0,
            name: "H100".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            total_bytes: 80 << 30,
            free_bytes: 79 << 30,
        };
        let ok = report(Item::Found(vec![gpu]), Item::NotFound("searched /a".into()));
        assert_eq!(ok.missing(), Vec::<String>::new());
        assert!(ok.to_string().contains("ready: the CUDA backend can run"));
        assert!(ok
            .to_string()
            .contains("not found (searched /a) (optional)"));
        let none = report(Item::Found(vec![]), Item::Found("/x".into()));
        assert_eq!(
            none.missing(),
            vec!["GPUs: the driver sees no GPU".to_string()]
        );
        let mut no_nccl = report(Item::NotFound("no driver".into()), Item::Found("/x".into()));
        no_nccl.libraries[1].path = Item::NotFound("searched /b, /c".into());
        assert_eq!(
            no_nccl.missing(),
            vec![
                "NCCL: searched /b, /c".to_string(),
                "GPUs: no driver".to_string()
            ]
        );
        assert!(no_nccl.to_string().contains("not ready"));
    }
}
