//! Entry points for calibration microbenchmarks (twin-calibration): a world of ranks as
//! threads of this process, connected by the host runtime's own store and TCP mesh, so the
//! collectives and transfers a calibration times are exactly the ones a host run uses
//! (`transport::collective`, `Mesh::send`/`recv`), over loopback.

use crate::error::RuntimeError;
use crate::transport::mesh::Mesh;
use crate::transport::store::{Clock, StoreClient, StoreServer};
use std::time::Duration;

/// Address the local world listens on.
const LOOPBACK: &str = "127.0.0.1";

/// Connects `world` ranks inside this process (one mesh per rank, index = rank) through a
/// store served on loopback. `timeout` bounds setup and every later blocking transfer.
pub fn local_meshes(world: u32, timeout: Duration) -> Result<Vec<Mesh>, RuntimeError> {
    if world == 0 {
        return Err(RuntimeError::Unsupported(
            "a local world needs at least one rank".into(),
        ));
    }
    let server = StoreServer::start(LOOPBACK, 0, Clock::new())?;
    let port = server.addr.port();
    let results: Vec<Result<Mesh, RuntimeError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                s.spawn(move || {
                    let mut client = StoreClient::connect(LOOPBACK, port, timeout)?;
                    Mesh::connect(&mut client, rank, world, timeout)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(RuntimeError::Aborted("a mesh setup thread panicked".into()))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::collective::{execute, input, verify, Ring};
    use twin_sim::schedule::CollectiveKind;

    #[test]
    fn a_local_world_runs_a_checked_all_reduce() {
        let meshes = local_meshes(3, Duration::from_secs(10)).unwrap();
        let members = [0u32, 1, 2];
        std::thread::scope(|s| {
            for mesh in &meshes {
                s.spawn(move || {
                    let ring = Ring::new(mesh, &members, 1, 77).unwrap();
                    let data = input(CollectiveKind::AllReduce, &ring, 1000, 3);
                    let out = execute(CollectiveKind::AllReduce, &ring, &data).unwrap();
                    verify(CollectiveKind::AllReduce, &ring, &out, 3).unwrap();
                });
            }
        });
        assert!(local_meshes(0, Duration::from_secs(1)).is_err());
    }
}
