//! Waiting between connection attempts while a peer is still starting (the store of rank 0,
//! a mesh listener): short waits first, so that a restart does not lose a whole fixed retry
//! interval to a peer that was ready a millisecond later, doubling up to a cap so that a peer
//! that is really absent is not hammered.

use std::time::Duration;

/// Doubling waits from `first` up to `cap`.
pub struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            next: first.min(cap),
            cap,
        }
    }

    /// The wait before the next attempt (and doubles the one after, up to the cap).
    pub fn step(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.cap);
        d
    }

    /// Sleeps for [`Backoff::step`].
    pub fn wait(&mut self) {
        std::thread::sleep(self.step());
    }
}

/// Connection retries: 1 ms, 2 ms, 4 ms, ... up to 50 ms.
pub fn connect() -> Backoff {
    Backoff::new(Duration::from_millis(1), Duration::from_millis(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(1), Duration::from_millis(10));
        let got: Vec<u64> = (0..6).map(|_| b.step().as_millis() as u64).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
        let mut c = connect();
        assert_eq!(c.step(), Duration::from_millis(1));
        for _ in 0..20 {
            assert!(c.step() <= Duration::from_millis(50));
        }
    }
}
