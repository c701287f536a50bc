//! `twin doctor`: can this machine run the CUDA backend? It prints what twin found (GPUs,
//! driver, CUDA, cuBLAS and NCCL versions, memory, peer access) and, for anything missing,
//! every place it searched and how to point twin at it. Scripts read the exit code.

use super::Format;
use std::process::ExitCode;

/// Exit code when something the CUDA backend needs is missing (the report says what).
pub const NOT_READY_EXIT_CODE: u8 = 3;

/// Check the GPU setup: GPUs, driver, CUDA, cuBLAS, NCCL, memory, peer access.
#[derive(clap::Args)]
#[command(
    help_template = super::HELP,
    before_help = "Examples:
  twin doctor
  TWIN_CUDA_LIB_DIR=/opt/cuda/lib64 twin doctor

Exit codes: 0 the CUDA backend can run here; 3 something it needs is missing; 2 bad arguments.

Details: docs/reference/cli.md#twin-doctor"
)]
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
            println!("{}", twin_sim::json::document("doctor", &out)?);
        }
        Format::Text => print!("{report}"),
    }
    Ok(if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(NOT_READY_EXIT_CODE)
    })
}
