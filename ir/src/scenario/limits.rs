//! Bounds on what a scenario implies as a whole: far beyond any real training job, tight
//! enough that every size derived from a valid scenario fits in u64 without overflow. Values
//! outside are rejected with a message rather than allowed to wrap downstream. The bounds of
//! single keys are in the schema table (`keys.rs`); the bounds on the work of simulating a
//! scenario are twin-sim's (its `limits` module).

/// Whole-model bounds (checked after resolution).
pub(crate) const PARAMS: f64 = (1u64 << 48) as f64;
/// Forward FLOPs of one micro batch through the whole model; keeps every per-op FLOP count
/// (backward is at most 2x forward, and recompute adds one forward) far inside u64.
pub(crate) const MICROBATCH_FORWARD_FLOPS: f64 = (1u64 << 60) as f64;
