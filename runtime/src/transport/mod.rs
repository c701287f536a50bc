//! The host runtime's networking: framed messages, the bootstrap store (addresses, barriers,
//! clock offsets, results), the mesh between ranks (Unix sockets within a host, TCP between
//! hosts), and collectives over it.

pub mod backoff;
pub mod collective;
pub mod exchange;
pub mod frame;
pub mod mesh;
pub mod sock;
pub mod store;
