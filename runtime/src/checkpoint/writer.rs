//! Runs checkpoint writes synchronously (the step loop waits) or asynchronously (one
//! background thread at a time: the state was already snapshotted to host memory, and the
//! next checkpoint first waits for the previous write to finish).

use crate::error::RuntimeError;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() -> Result<(), RuntimeError> + Send + 'static>;

pub struct Writer {
    asynchronous: bool,
    pending: Option<JoinHandle<Result<(), RuntimeError>>>,
}

impl Writer {
    pub fn new(asynchronous: bool) -> Writer {
        Writer {
            asynchronous,
            pending: None,
        }
    }

    /// Wait for the write in flight, if any, and return its error.
    pub fn wait(&mut self) -> Result<(), RuntimeError> {
        match self.pending.take() {
            Some(h) => h.join().unwrap_or_else(|_| {
                Err(RuntimeError::Panic {
                    context: "checkpoint writer",
                    message: "the writer thread panicked".into(),
                })
            }),
            None => Ok(()),
        }
    }

    /// Write a checkpoint: now, or on a background thread after the previous one finished.
    pub fn submit(&mut self, job: Job) -> Result<(), RuntimeError> {
        self.wait()?;
        if !self.asynchronous {
            return job();
        }
        let h = std::thread::Builder::new()
            .name("twin-ckpt-write".into())
            .spawn(job)
            .map_err(|e| RuntimeError::Unsupported(format!("checkpoint writer thread: {e}")))?;
        self.pending = Some(h);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn async_writes_run_one_at_a_time_in_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut w = Writer::new(true);
        for i in 0..4 {
            let l = Arc::clone(&log);
            w.submit(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                l.lock().unwrap().push(i);
                Ok(())
            }))
            .unwrap();
        }
        w.wait().unwrap();
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3]);
        // A failed write surfaces at the next wait.
        w.submit(Box::new(|| {
            Err(RuntimeError::Unsupported("disk full".into()))
        }))
        .unwrap();
        assert!(w.wait().unwrap_err().to_string().contains("disk full"));
    }
}
