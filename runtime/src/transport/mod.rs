//! The host runtime's networking: framed messages, the bootstrap store (addresses, barriers,
//! clock offsets, results), the mesh between ranks (TCP; Unix sockets within a host on request),
//! and collectives over it.

pub mod backoff;
pub mod collective;
pub mod exchange;
pub mod frame;
pub mod mesh;
pub mod sock;
pub mod store;
