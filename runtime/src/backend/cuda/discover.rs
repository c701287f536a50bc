//! Finds the CUDA shared libraries before anything tries to load them. cudarc opens libraries
//! by bare name and panics when none is found, and it never looks for `libnccl.so.2` or in
//! pip's `nvidia-*` wheels; so twin searches the usual places itself, and a missing library
//! becomes an error that lists where it looked and how to point twin at it.
//!
//! Pure file-system logic, no CUDA: tested against fake directory trees.

use crate::error::RuntimeError;
use std::path::{Path, PathBuf};

/// The libraries the CUDA backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CudaLib {
    Driver,
    Cublas,
    CublasLt,
    Nccl,
    Nvrtc,
}

impl CudaLib {
    pub const ALL: [CudaLib; 5] = [
        CudaLib::Driver,
        CudaLib::CublasLt,
        CudaLib::Cublas,
        CudaLib::Nccl,
        CudaLib::Nvrtc,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CudaLib::Driver => "CUDA driver",
            CudaLib::Cublas => "cuBLAS",
            CudaLib::CublasLt => "cuBLASLt",
            CudaLib::Nccl => "NCCL",
            CudaLib::Nvrtc => "NVRTC",
        }
    }

    /// File names in order of preference. The bindings are built for CUDA 13, so the
    /// toolkit libraries of major 13 come first; 12 is ABI-compatible for what twin calls.
    pub fn file_names(self) -> &'static [&'static str] {
        match self {
            CudaLib::Driver => &["libcuda.so.1", "libcuda.so"],
            CudaLib::Cublas => &["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
            CudaLib::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
            CudaLib::Nccl => &["libnccl.so.2", "libnccl.so"],
            CudaLib::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        }
    }

    pub fn hint(self) -> &'static str {
        match self {
            CudaLib::Driver => "install the NVIDIA driver or set TWIN_CUDA_LIB_DIR",
            CudaLib::Cublas | CudaLib::CublasLt => {
                "install the CUDA toolkit (or `pip install nvidia-cublas`) or set TWIN_CUDA_LIB_DIR"
            }
            CudaLib::Nccl => "install NCCL (libnccl2, or `pip install nvidia-nccl-cu13`) or set TWIN_CUDA_LIB_DIR",
            CudaLib::Nvrtc => {
                "install the CUDA toolkit (or `pip install nvidia-cuda-nvrtc`) or set TWIN_CUDA_LIB_DIR"
            }
        }
    }
}

/// The inputs of the search: environment variables and the file-system root (a temporary
/// directory in tests, `/` for real).
#[derive(Clone, Debug, Default)]
pub struct SearchEnv {
    /// `TWIN_CUDA_LIB_DIR`: colon-separated directories searched first.
    pub twin_cuda_lib_dir: Option<String>,
    pub ld_library_path: Option<String>,
    /// `CUDA_HOME`, else `CUDA_PATH`.
    pub cuda_home: Option<String>,
    pub virtual_env: Option<String>,
    pub conda_prefix: Option<String>,
    pub home: Option<String>,
    pub root: PathBuf,
}

impl SearchEnv {
    pub fn from_process() -> SearchEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        SearchEnv {
            twin_cuda_lib_dir: var("TWIN_CUDA_LIB_DIR"),
            ld_library_path: var("LD_LIBRARY_PATH"),
            cuda_home: var("CUDA_HOME").or_else(|| var("CUDA_PATH")),
            virtual_env: var("VIRTUAL_ENV"),
            conda_prefix: var("CONDA_PREFIX"),
            home: var("HOME"),
            root: PathBuf::from("/"),
        }
    }

    /// A built-in absolute path, under `root`.
    fn sys(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

/// Subdirectories of `dir` whose names start with `prefix`, newest version first
/// ("cuda-13.0" before "cuda-12.8", "python3.12" before "python3.9").
fn children_with_prefix(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(Vec<u64>, String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let rest = name.strip_prefix(prefix)?.to_string();
            let path = e.path();
            path.is_dir().then(|| {
                let version = rest
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|p| p.parse::<u64>().ok())
                    .collect();
                (version, name, path)
            })
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, _, p)| p).collect()
}

/// `<prefix>/lib*/python3*/{site,dist}-packages/nvidia/*/lib`: pip's CUDA wheels.
fn pip_wheel_dirs(prefix: &Path, out: &mut Vec<PathBuf>) {
    for lib in ["lib", "lib64"] {
        for py in children_with_prefix(&prefix.join(lib), "python3") {
            for packages in ["site-packages", "dist-packages"] {
                let nvidia = py.join(packages).join("nvidia");
                for pkg in children_with_prefix(&nvidia, "") {
                    out.push(pkg.join("lib"));
                }
            }
        }
    }
}

/// Every directory searched, in order, deduplicated. Directories that do not exist are
/// kept, so the error message shows the whole search.
pub fn search_dirs(env: &SearchEnv) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let split = |v: &Option<String>| -> Vec<PathBuf> {
        v.as_deref()
            .unwrap_or("")
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect()
    };
    dirs.extend(split(&env.twin_cuda_lib_dir));
    dirs.extend(split(&env.ld_library_path));
    // System library directories: the driver lives here.
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
        "/usr/local/lib",
    ] {
        dirs.push(env.sys(d));
    }
    // CUDA toolkits.
    let mut toolkits: Vec<PathBuf> = Vec::new();
    if let Some(h) = &env.cuda_home {
        toolkits.push(PathBuf::from(h));
    }
    toolkits.push(env.sys("/usr/local/cuda"));
    toolkits.extend(children_with_prefix(&env.sys("/usr/local"), "cuda-"));
    for tk in toolkits {
        dirs.push(tk.join("lib64"));
        dirs.push(tk.join("lib"));
        for target in children_with_prefix(&tk.join("targets"), "") {
            dirs.push(target.join("lib"));
        }
    }
    // pip's nvidia-* wheels in virtual environments and Python installs.
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for p in [&env.virtual_env, &env.conda_prefix].into_iter().flatten() {
        prefixes.push(PathBuf::from(p));
    }
    for opt in children_with_prefix(&env.sys("/opt"), "") {
        for venv in [".venv", "venv", "env"] {
            prefixes.push(opt.join(venv));
        }
        prefixes.push(opt.clone());
    }
    if let Some(h) = &env.home {
        prefixes.push(Path::new(h).join(".local"));
    }
    prefixes.push(env.sys("/usr/local"));
    prefixes.push(env.sys("/usr"));
    for p in prefixes {
        pip_wheel_dirs(&p, &mut dirs);
    }
    let mut seen = std::collections::BTreeSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// The first file of `lib` in `dirs`: every directory is tried for the most preferred name
/// before any directory is tried for the next.
pub fn find_in(lib: CudaLib, dirs: &[PathBuf]) -> Result<PathBuf, RuntimeError> {
    for name in lib.file_names() {
        for dir in dirs {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(RuntimeError::LibraryNotFound {
        library: lib.label(),
        searched: dirs.iter().map(|d| d.display().to_string()).collect(),
        hint: lib.hint(),
    })
}

/// Where each library was found, or the error saying where it was not.
#[derive(Debug)]
pub struct Discovery {
    pub found: Vec<(CudaLib, Result<PathBuf, RuntimeError>)>,
}

impl Discovery {
    pub fn run(env: &SearchEnv) -> Discovery {
        let dirs = search_dirs(env);
        Discovery {
            found: CudaLib::ALL
                .iter()
                .map(|&lib| (lib, find_in(lib, &dirs)))
                .collect(),
        }
    }

    pub fn path(&self, lib: CudaLib) -> Option<&Path> {
        self.found
            .iter()
            .find(|(l, _)| *l == lib)
            .and_then(|(_, r)| r.as_ref().ok())
            .map(|p| p.as_path())
    }

    /// The path, or the not-found error (recomputed, since errors are not `Clone`).
    pub fn require(&self, lib: CudaLib) -> Result<PathBuf, RuntimeError> {
        match self.found.iter().find(|(l, _)| *l == lib) {
            Some((_, Ok(p))) => Ok(p.clone()),
            Some((_, Err(RuntimeError::LibraryNotFound { searched, .. }))) => {
                Err(RuntimeError::LibraryNotFound {
                    library: lib.label(),
                    searched: searched.clone(),
                    hint: lib.hint(),
                })
            }
            _ => Err(RuntimeError::LibraryNotFound {
                library: lib.label(),
                searched: Vec::new(),
                hint: lib.hint(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) -> PathBuf {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"").unwrap();
        p
    }

    fn env_at(root: &Path) -> SearchEnv {
        SearchEnv {
            root: root.to_path_buf(),
            ..SearchEnv::default()
        }
    }

    #[test]
    fn finds_driver_toolkit_and_pip_wheels() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let cuda = touch(r, "usr/lib/x86_64-linux-gnu/libcuda.so.1");
        // A toolkit stub must never be taken for the driver.
        touch(r, "usr/local/cuda-13.0/lib64/stubs/libcuda.so");
        let cublas = touch(r, "usr/local/cuda-13.0/lib64/libcublas.so.13");
        touch(r, "usr/local/cuda-12.8/lib64/libcublas.so.12");
        let nccl = touch(
            r,
            "opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
        );
        let nvrtc = touch(
            r,
            "opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
        );
        let d = Discovery::run(&env_at(r));
        assert_eq!(d.path(CudaLib::Driver), Some(cuda.as_path()));
        assert_eq!(d.path(CudaLib::Cublas), Some(cublas.as_path()));
        assert_eq!(d.path(CudaLib::Nccl), Some(nccl.as_path()));
        assert_eq!(d.path(CudaLib::Nvrtc), Some(nvrtc.as_path()));
        assert_eq!(d.path(CudaLib::CublasLt), None);
    }

    #[test]
    fn explicit_dir_wins_and_newest_toolkit_first() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        touch(r, "usr/lib/x86_64-linux-gnu/libcuda.so.1");
        let mine = touch(r, "mine/libcuda.so.1");
        touch(
            r,
            "usr/local/cuda-12.9/targets/x86_64-linux/lib/libcublasLt.so.13",
        );
        let newest = touch(
            r,
            "usr/local/cuda-13.1/targets/x86_64-linux/lib/libcublasLt.so.13",
        );
        let mut env = env_at(r);
        env.twin_cuda_lib_dir = Some(format!("{}:/nonexistent", r.join("mine").display()));
        let d = Discovery::run(&env);
        assert_eq!(d.path(CudaLib::Driver), Some(mine.as_path()));
        assert_eq!(d.path(CudaLib::CublasLt), Some(newest.as_path()));
    }

    #[test]
    fn preferred_major_beats_earlier_directory() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        touch(r, "ld/libcublas.so.12");
        let thirteen = touch(r, "usr/local/cuda/lib64/libcublas.so.13");
        let mut env = env_at(r);
        env.ld_library_path = Some(r.join("ld").display().to_string());
        let d = Discovery::run(&env);
        assert_eq!(d.path(CudaLib::Cublas), Some(thirteen.as_path()));
    }

    #[test]
    fn virtual_env_and_conda_wheels_are_searched() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let venv = r.join("somewhere/venv");
        let nccl = touch(
            &venv,
            "lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
        );
        let conda = r.join("conda");
        let cublas = touch(
            &conda,
            "lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.12",
        );
        let mut env = env_at(r);
        env.virtual_env = Some(venv.display().to_string());
        env.conda_prefix = Some(conda.display().to_string());
        let d = Discovery::run(&env);
        assert_eq!(d.path(CudaLib::Nccl), Some(nccl.as_path()));
        assert_eq!(d.path(CudaLib::Cublas), Some(cublas.as_path()));
    }

    #[test]
    fn missing_driver_error_lists_search_and_hint() {
        let t = tempfile::tempdir().unwrap();
        let mut env = env_at(t.path());
        env.twin_cuda_lib_dir = Some("/custom/dir".into());
        let d = Discovery::run(&env);
        let msg = d.require(CudaLib::Driver).unwrap_err().to_string();
        assert!(
            msg.starts_with("no CUDA driver found (searched: /custom/dir, "),
            "{msg}"
        );
        assert!(msg.contains("usr/local/cuda/lib64"), "{msg}");
        assert!(
            msg.ends_with("install the NVIDIA driver or set TWIN_CUDA_LIB_DIR"),
            "{msg}"
        );
    }

    #[test]
    fn directories_are_searched_once() {
        let t = tempfile::tempdir().unwrap();
        let mut env = env_at(t.path());
        let d = t.path().join("usr/local/cuda/lib64").display().to_string();
        env.twin_cuda_lib_dir = Some(d.clone());
        env.ld_library_path = Some(format!("{d}:{d}"));
        let dirs = search_dirs(&env);
        assert_eq!(
            dirs.iter().filter(|p| p.display().to_string() == d).count(),
            1
        );
    }
}
