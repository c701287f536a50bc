//! Loads the CUDA libraries that discovery found, by full path, before cudarc touches them.
//! cudarc then opens them by bare name: the dynamic loader answers such a request with an
//! already-loaded library whose soname matches (libcuda.so.1, libcublas.so.13), so cudarc
//! binds to exactly the files twin chose, wherever they live. Each step is checked
//! (`is_culib_present`) before any cudarc call that would panic on a missing library, and
//! [`guard`] turns any panic that still escapes into an error.

use super::discover::{CudaLib, Discovery, SearchEnv};
use crate::error::RuntimeError;
use libloading::Library;
use std::path::Path;
use std::sync::OnceLock;

/// The libraries the backend runs on, kept loaded for the life of the process.
pub struct Libraries {
    pub discovery: Discovery,
    /// cuBLASLt, which FP8 GEMMs need: `Err` says why it cannot be used (FP8 GEMMs then run
    /// in bf16 with that note).
    pub cublas_lt: Result<(), String>,
    _handles: Vec<Library>,
}

static LOADED: OnceLock<Libraries> = OnceLock::new();

fn open(lib: CudaLib, path: &Path) -> Result<Library, RuntimeError> {
    // SAFETY: loading runs the library's initialisers, which have no preconditions.
    unsafe { Library::new(path) }.map_err(|e| RuntimeError::LibraryLoad {
        library: lib.label(),
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Find and load the driver and cuBLAS (NCCL is loaded when a schedule communicates).
pub fn load() -> Result<&'static Libraries, RuntimeError> {
    if let Some(l) = LOADED.get() {
        return Ok(l);
    }
    let discovery = Discovery::run(&SearchEnv::from_process());
    let driver = discovery.require(CudaLib::Driver)?;
    let mut handles = vec![open(CudaLib::Driver, &driver)?];
    // SAFETY: only tries to open candidate names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(RuntimeError::LibraryLoad {
            library: "CUDA driver",
            path: driver.display().to_string(),
            reason: "loaded, but not under a name cudarc looks for (expected soname libcuda.so.1)"
                .into(),
        });
    }
    let cublas = discovery.require(CudaLib::Cublas)?;
    // cuBLAS needs cuBLASLt; load the one beside it (or the one found) first.
    let cublas_lt = discovery.path(CudaLib::CublasLt).map(Path::to_path_buf);
    if let Some(lt) = &cublas_lt {
        handles.push(open(CudaLib::CublasLt, lt)?);
    }
    handles.push(open(CudaLib::Cublas, &cublas)?);
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(RuntimeError::LibraryLoad {
            library: "cuBLAS",
            path: cublas.display().to_string(),
            reason: "loaded, but not under a name cudarc looks for (expected soname libcublas.so.13 or .12)".into(),
        });
    }
    // SAFETY: only tries to open candidate names.
    let cublas_lt = if unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(match &cublas_lt {
            Some(p) => format!(
                "cuBLASLt at {} is loaded but not under a name cudarc looks for (libcublasLt.so.13 or .12)",
                p.display()
            ),
            None => "no cuBLASLt library was found beside cuBLAS".to_string(),
        })
    };
    let libs = Libraries {
        discovery,
        cublas_lt,
        _handles: handles,
    };
    Ok(LOADED.get_or_init(|| libs))
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Run `f`, turning a panic inside it (cudarc panics on a missing symbol) into an error.
pub fn guard<T>(
    context: &'static str,
    f: impl FnOnce() -> Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(RuntimeError::Panic {
            context,
            message: panic_text(p),
        })
    })
}

pub fn cu(call: &'static str, e: cudarc::driver::DriverError) -> RuntimeError {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    RuntimeError::Cuda {
        call,
        message: format!("{name}: {text}"),
    }
}

pub fn blas(call: &'static str, e: cudarc::cublas::result::CublasError) -> RuntimeError {
    RuntimeError::Cublas {
        call,
        message: format!("{:?}", e.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_panics_into_errors() {
        let r: Result<(), _> = guard("test", || panic!("Missing symbol cuFoo"));
        match r {
            Err(RuntimeError::Panic { context, message }) => {
                assert_eq!(context, "test");
                assert_eq!(message, "Missing symbol cuFoo");
            }
            other => panic!("expected a caught panic, got {other:?}"),
        }
        assert_eq!(guard("test", || Ok(3)).unwrap(), 3);
    }
}
