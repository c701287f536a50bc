//! CUDA caching-allocator memory snapshots.
