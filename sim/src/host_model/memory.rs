//! Memory-bound compute ops sharing their node's memory (a host profile's `[host] memory_cores`):
//! the memory serves `C` cores' worth of such work at once, and the engine's flow solver shares
//! it among the ops running (`engine::flow`, which keeps the bookkeeping). What the host model
//! says is how much of an op's span was its own work: over a stretch of constant rates, the
//! progress it made divided by the rate it would have had with its core to itself,
//! [`alone_rate`]. Time the memory was shared is work (the thread is on its core, stalled on
//! loads); only the rest is waiting for the core (`host_model::share`).

/// The rate a memory-bound op would have with its core to itself while `n` such ops run on its
/// node, the others at `others_rate` together, on a memory of `capacity` cores' worth:
/// `min(1, max(C / n, C - others))`.
pub(crate) fn alone_rate(capacity: f64, n: f64, others_rate: f64) -> f64 {
    (capacity / n).max(capacity - others_rate).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_alone_on_enough_memory_runs_at_full_speed_and_shares_a_crowded_one() {
        // Two cores' worth of memory, one op: full speed.
        assert_eq!(alone_rate(2.0, 1.0, 0.0), 1.0);
        // Four ops at 0.5 each on two cores' worth: an even share.
        assert_eq!(alone_rate(2.0, 4.0, 1.5), 0.5);
        // Others slowed by their cores leave this op more than an even share.
        assert_eq!(alone_rate(2.0, 4.0, 1.2), 0.8);
    }
}
