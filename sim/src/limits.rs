//! Bounds on the work of simulating one scenario: far beyond any real training job, tight
//! enough that every accepted step is generated, simulated and traced in seconds and within
//! about a gigabyte. Work beyond them is refused with a message naming what makes it large,
//! rather than left to exhaust memory or run for minutes. The bounds of the schema itself
//! (single keys, whole-model sizes) are twin-ir's.

/// Ops a scenario's schedule may hold, all pipeline stages together (estimated from the
/// plan by `schedule::estimate` before anything is built). Generating, validating and
/// simulating a schedule costs about 200 bytes and 3 µs per op, so this keeps any accepted
/// scenario under about 1 GiB and 15 s, with the largest bundled scenario, published-table
/// row and sweep layout far below it (they hold at most tens of thousands of ops). Beyond
/// it a step is refused with the keys that make it large, rather than left to exhaust memory.
pub(crate) const SCHEDULE_OPS: u64 = 4_000_000;

/// Op events one simulated step may process: the ops the engine runs for every simulated
/// rank (representatives only when the ranks collapse; the allocs and frees it replays
/// instead of running are not counted), and every op of every rank for the schedule check,
/// which runs them all untimed. Both cost about 0.1 µs per event on a 2026 server core (a
/// 262,144-GPU layout: 37.7 million events checked in 3 s), so this keeps either under about
/// 10 s. Published layouts come near it: Megatron-LM's SC'21 529.6B run on 2,520 GPUs
/// (sim/tests/data/megatron-sc21-launch.toml) holds 48.5 million ops.
pub(crate) const SIMULATED_EVENTS: u64 = 64_000_000;

/// Bytes of Chrome-trace JSON a `--trace` may write. Each simulated op event takes about
/// [`TRACE_BYTES_PER_EVENT`] bytes, so this admits traces of about 2.5 million events:
/// every rank of a few hundred GPUs, or the representative ranks of any accepted scenario.
pub(crate) const TRACE_BYTES: u64 = 512 << 20;

/// Bytes of trace JSON per simulated op event, at most (its complete event with name,
/// category, rank, stream, times and arguments, and its share of the memory counter
/// samples).
pub const TRACE_BYTES_PER_EVENT: u64 = 256;
