//! The host runtime's networking: framed messages, the bootstrap store (addresses, barriers,
//! clock offsets, results), the TCP mesh between ranks, and collectives over it.

pub mod backoff;
pub mod collective;
pub mod exchange;
pub mod frame;
pub mod mesh;
pub mod store;
