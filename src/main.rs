//! The `twin` binary: a thin command line over the library crates. Arguments are parsed and
//! checked here, before any work starts; the work itself lives in the libraries.

mod cmd;

/// mimalloc instead of the system allocator: schedule generation and simulation allocate and
/// free many short-lived vectors, and sweeps do so on every core at once. A host rank's GEMMs
/// take their packing buffer from a per-thread arena instead (`backend::host::pack`), so
/// where mimalloc would put it stops moving the op's time.
#[global_allocator]
static GLOBAL: TwinAlloc = TwinAlloc;

struct TwinAlloc;

// SAFETY: every block comes from mimalloc or from the calling thread's packing arena, and goes
// back to where it came from: `pack::give_back` recognises the arena's one block by address
// (an arena is never freed, so mimalloc can never hand out an address inside one).
unsafe impl std::alloc::GlobalAlloc for TwinAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if let Some(p) = twin_runtime::backend::host::pack::take(layout) {
            return p;
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as above; the arena is not zeroed, so zeroed blocks always come from mimalloc.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if twin_runtime::backend::host::pack::give_back(ptr) {
            return;
        }
        // SAFETY: not the arena's block, so mimalloc's, with the layout it was allocated with.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if twin_runtime::backend::host::pack::give_back(ptr) {
            // Move the arena's block to mimalloc (the sgemm never grows its buffer; this only
            // keeps the allocator correct for any caller). The block stays intact until the
            // copy: nothing else runs on this thread in between.
            // SAFETY: `layout` with the new size is valid (the caller's contract).
            let new_layout =
                unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as `alloc`.
            let q = unsafe { mimalloc::MiMalloc.alloc(new_layout) };
            if !q.is_null() {
                // SAFETY: both blocks hold at least min(old, new) bytes and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size)) };
            }
            return q;
        }
        // SAFETY: mimalloc's block, passed on with its layout.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// mimalloc's `mi_option_purge_delay` (position in `mi_option_t` of the bundled mimalloc v3,
/// `libmimalloc-sys` 0.1.49: `include/mimalloc.h`; a test checks it).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    /// From the mimalloc library the global allocator above links in.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    #[cfg(test)]
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// Keeps freed memory mapped instead of handing it back to the OS, for sweeps: a sweep frees
/// and reallocates similar schedules thousands of times per thread, and every purged page
/// came back as a page fault plus kernel zeroing (about a tenth of a layout search's CPU
/// time). Only for sweeps: single large simulations (`twin bench` at 16,384 GPUs) measured
/// no gain and possibly a small loss. A user's own `MIMALLOC_PURGE_DELAY` still wins;
/// nothing in the environment is changed.
///
/// Also turns transparent huge pages off for the sweep's process (Linux; a user's
/// `MIMALLOC_ALLOW_THP` wins): with THP on, every first touch of a 2 MiB region zeroes all of
/// it, and a search's scattered per-thread heaps touched 150 MB where 110 MB were used; the
/// kernel's page zeroing was 14% of a search's profile. Off, a search took 5-7% less CPU
/// (2.54-2.65 s against 2.76-2.78 s, four interleaved pairs;
/// docs/journal/2026-11-performance-history.md).
fn tune_memory_for_sweeps() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set only stores the value in mimalloc's option table (it checks
        // the index range itself); the purge code reads it on its next purge.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's address space; later
        // page faults in it get base pages. Failure (an old kernel) leaves THP as it was.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

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

/// twin: a digital twin for parallel deep-learning training.
///
/// Describe a training job once (a scenario TOML: model, cluster, parallel layout, training
/// recipe). twin turns it into one schedule of per-rank ops and predicts the step time, tokens/s,
/// MFU, memory per GPU and pipeline bubbles with a discrete-event simulation.
///
/// Start with:   twin simulate scenarios/512xA100.toml
#[derive(Parser)]
#[command(name = "twin", version, about, long_about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    if matches!(cli.command, Command::Sweep(_)) {
        tune_memory_for_sweeps();
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
        Command::Validate(args) => cmd::validate::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Worker(args) => cmd::run::worker(args),
    }
}

#[cfg(test)]
mod tests {
    /// `MI_OPTION_PURGE_DELAY` is a bare index into mimalloc's option enum; a mimalloc update
    /// that moves it would make `tune_memory_for_sweeps` set some other option. The option at that
    /// index must hold purge_delay's documented default (1000 ms in the bundled mimalloc v3),
    /// which no neighbouring option has (14 is deprecated and 0, 16 is use_numa_nodes, 0).
    #[test]
    fn the_purge_delay_index_names_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the user's value, not the default
        }
        // SAFETY: mi_option_get only reads mimalloc's option table (it checks the index).
        let v = unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            v,
            1000,
            "option {} is not purge_delay",
            super::MI_OPTION_PURGE_DELAY
        );
    }
}
