//! SIGINT, SIGTERM and SIGHUP in a launcher: the handler only records the signal; the
//! launcher's watch loop sees it, kills every rank's process group, waits for them and returns
//! [`super::LaunchError::Interrupted`], so the run's temp folder is removed on the way out (see
//! [`super::rundir`]) and the process exits 128 + the signal, as an uncaught one would. A
//! second signal of the same kind while the first is handled takes its default action.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

struct Flags {
    seen: Arc<AtomicBool>,
    which: Arc<AtomicUsize>,
}

static FLAGS: OnceLock<Result<Flags, String>> = OnceLock::new();

/// Install the handlers (once per process; later calls return the first call's result).
pub fn install() -> Result<(), String> {
    let flags = FLAGS.get_or_init(|| {
        let f = Flags {
            seen: Arc::new(AtomicBool::new(false)),
            which: Arc::new(AtomicUsize::new(0)),
        };
        for sig in SIGNALS {
            // Registered first, so it acts only on a signal that follows an earlier one.
            signal_hook::flag::register_conditional_default(sig, Arc::clone(&f.seen))
                .and_then(|_| {
                    signal_hook::flag::register_usize(sig, Arc::clone(&f.which), sig as usize)
                })
                .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&f.seen)))
                .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
        }
        Ok(f)
    });
    flags.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The signal received since [`install`], if any.
pub fn received() -> Option<i32> {
    let f = FLAGS.get()?.as_ref().ok()?;
    match f.which.load(Ordering::SeqCst) {
        0 => None,
        s => i32::try_from(s).ok(),
    }
}

/// The usual name of a signal the launcher handles or reports.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGBUS => "SIGBUS",
        _ => "a signal",
    }
}
