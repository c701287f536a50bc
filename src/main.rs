//! The `twin` binary: a thin command line over the library crates. Arguments are parsed and
//! checked here, before any work starts; the work itself lives in the libraries.

mod cmd;

/// mimalloc, with a host rank's GEMM packing buffer from a per-thread arena
/// (`twin_runtime::backend::host::alloc`).
#[global_allocator]
static GLOBAL: twin_runtime::backend::host::alloc::TwinAlloc =
    twin_runtime::backend::host::alloc::TwinAlloc;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set when a print failed because stdout's reader had gone.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Whether stdout is a pipe or socket whose reader has gone (`twin simulate F | head -1` once
/// head has exited): poll reports an error condition on it.
fn stdout_reader_gone() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 1 && fd.revents & libc::POLLERR != 0
}

/// A closed stdout ends the command quietly, as ripgrep does: `print!` panics when its write
/// fails, and that panic is neither reported nor a failure when stdout's reader has gone.
/// SIGPIPE stays ignored (Rust's default), so a rank writing to a closed socket still gets an
/// error it can report, not a silent death. Any other panic is reported as before.
fn quiet_when_stdout_closes() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && stdout_reader_gone() {
            STDOUT_GONE.store(true, Ordering::SeqCst);
            return;
        }
        report(info);
    }));
}

/// Whether `err` is a write to a stdout whose reader has gone.
fn is_closed_stdout(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    }) && stdout_reader_gone()
}

/// twin: a digital twin for parallel deep-learning training. Describe a training job once (a
/// scenario TOML); twin predicts its step, runs it for real, calibrates and compares.
#[derive(Parser)]
#[command(
    name = "twin",
    version,
    propagate_version = true,
    help_template = cmd::HELP,
    before_help = "Examples:
  twin simulate scenarios/512xA100.toml
  twin sweep scenarios/512xA100.toml --search --top 10
  twin run scenarios/host/pp.toml --backend host
  twin verify step scenarios/host/pp.toml --profile scenarios/profiles/host-example.toml

Every command takes --format text|json (some also csv, markdown or junit) and --quiet.
Details: docs/reference/cli.md"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Draw no progress bar (one is drawn only when stderr is a terminal).
    #[arg(long, global = true, hide_short_help = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    Simulate(cmd::simulate::Args),
    Run(cmd::run::Args),
    Validate(cmd::validate::Args),
    Check(cmd::check::Args),
    Diff(cmd::diff::Args),
    Sweep(cmd::sweep::Args),
    Bench(cmd::bench::Args),
    Doctor(cmd::doctor::Args),
    Verify(cmd::verify::Args),
    Tui(cmd::tui::Args),
    Calibrate(cmd::calibrate::Args),
    Report(cmd::report::Args),
    /// One rank of a host run (started by `twin run`, by hand, or by srun).
    #[command(hide = true)]
    Worker(cmd::run::WorkerArgs),
}

/// Exit codes: 0 success (also when stdout's reader went away early), 1 failure of the work,
/// 2 bad input (scenario or arguments), 3 `twin doctor` found something the CUDA backend
/// needs missing, 128 + N a launch stopped by signal N (SIGINT, SIGTERM, SIGHUP).
fn main() -> ExitCode {
    if let Some(message) = cmd::renamed::renamed(&std::env::args().collect::<Vec<_>>()) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    cmd::progress::set_quiet(cli.quiet);
    if matches!(cli.command, Command::Sweep(_)) {
        twin_runtime::backend::host::alloc::tune_memory_for_sweeps();
    }
    // The ranks read TWIN_TRANSPORT when they connect; a bad value is refused before any work.
    if matches!(
        cli.command,
        Command::Run(_) | Command::Verify(_) | Command::Calibrate(_)
    ) {
        if let Err(e) = twin_runtime::transport::sock::local_allowed() {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    quiet_when_stdout_closes();
    let command = cli.command;
    // Unwinding drops every guard on the way (a launch's temp folder, its workers).
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(command)));
    let result = match outcome {
        Ok(r) => r,
        Err(_) if STDOUT_GONE.load(Ordering::SeqCst) => return ExitCode::SUCCESS,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    match result {
        Ok(code) => code,
        Err(err) if is_closed_stdout(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            cmd::exit_code_for(&err)
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Tui(args) => cmd::tui::run(args),
        Command::Calibrate(args) => cmd::calibrate::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Worker(args) => cmd::run::worker(args),
    }
}
