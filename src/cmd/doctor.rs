//! `twin doctor`: can this machine run the CUDA backend? It prints what twin found (GPUs,
//! driver, CUDA, cuBLAS and NCCL versions, memory, peer access) and, for anything missing,
//! every place it searched and how to point twin at it. Scripts read the exit code.

use super::Format;
use std::process::ExitCode;

/// Exit code when something the CUDA backend needs is missing (the report says what).
pub const NOT_READY_EXIT_CODE: u8 = 3;

/// Check the GPU setup: GPUs, driver, CUDA, cuBLAS, NCCL, memory, peer access.
///
/// Libraries are searched in TWIN_CUDA_LIB_DIR (colon-separated) first, then
/// LD_LIBRARY_PATH, CUDA_HOME / CUDA_PATH, the usual driver and toolkit folders, and pip's
/// nvidia-* wheels in VIRTUAL_ENV, CONDA_PREFIX and ~/.local.
///
/// Exit codes: 0 the CUDA backend can run here; 3 something it needs is missing (listed
/// under "missing", with every place searched); 2 bad arguments.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(serde::Serialize)]
struct JsonOut<'a> {
    ready: bool,
    missing: &'a [String],
    #[serde(flatten)]
    report: &'a twin_runtime::backend::cuda::DoctorReport,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = twin_runtime::backend::cuda::doctor();
    let missing = report.missing();
    match args.format {
        Format::Json => {
            let out = JsonOut {
                ready: missing.is_empty(),
                missing: &missing,
                report: &report,
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        Format::Text => print!("{report}"),
    }
    Ok(if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_READY_EXIT_CODE)
    })
}
