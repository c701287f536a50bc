//! What a rank's stream threads share during one step of the host backend: which ops are
//! done, and where each stream thread sleeps until the op it needs next is done.

use crate::error::RuntimeError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use twin_sim::schedule::Stream;

/// What the stream threads share during a step.
pub(super) struct StepState {
    done: Vec<AtomicBool>,
    /// One waiter slot per stream: a stream thread sleeps on its own condvar and is woken only
    /// by the completion of the op it waits for (`notify_all` on one shared condvar woke every
    /// stream thread of the rank at every op end: on an oversubscribed machine those futile
    /// wake-ups took the cores the ranks' compute needed).
    pub(super) waiters: Vec<Waiter>,
    pub(super) failed: AtomicBool,
    pub(super) error: Mutex<Option<RuntimeError>>,
}

/// A stream thread's sleeping place: `lock` holds the op the thread needs next (`NONE` when
/// it is not waiting); the thread writes it, and `StepState::complete` reads it, under the lock.
pub(super) struct Waiter {
    pub(super) lock: Mutex<u32>,
    pub(super) cv: Condvar,
}

pub(super) const NONE: u32 = u32::MAX;

impl StepState {
    pub(super) fn new(ops: usize) -> StepState {
        StepState {
            done: (0..ops).map(|_| AtomicBool::new(false)).collect(),
            waiters: (0..Stream::COUNT)
                .map(|_| Waiter {
                    lock: Mutex::new(NONE),
                    cv: Condvar::new(),
                })
                .collect(),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    pub(super) fn is_done(&self, op: u32) -> bool {
        self.done
            .get(op as usize)
            .is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// Mark `op` done and wake the stream waiting for it. The flag is set before any waiter
    /// lock is taken, and a waiter names what it waits for under its lock, so no wake-up is
    /// lost.
    pub(super) fn complete(&self, op: u32) {
        if let Some(f) = self.done.get(op as usize) {
            f.store(true, Ordering::SeqCst);
        }
        for w in &self.waiters {
            // Notify after the guard is dropped: a waiter woken while the lock is still held
            // would wake only to block on it (two context switches instead of one).
            let waits_for_op = w.lock.lock().is_ok_and(|g| *g == op);
            if waits_for_op {
                w.cv.notify_one();
            }
        }
    }

    /// Wake every waiting stream (a failure: they must look at the flag and stop).
    pub(super) fn wake_all(&self) {
        for w in &self.waiters {
            if let Ok(_g) = w.lock.lock() {
                w.cv.notify_one();
            }
        }
    }
}
