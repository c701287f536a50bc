//! The data plane: a full mesh between ranks, one connection per (peer, lane). A lane is a
//! schedule stream (the pipeline's send and receive streams share one), so ops on different
//! streams never share a socket and overlap for real, while ops on one stream use their
//! sockets in program order, as the IR's FIFO rule says. Addresses are exchanged through the
//! store; each rank advertises the interface that reaches rank 0, and (with
//! `TWIN_TRANSPORT=unix`) its host and Unix socket name, so two ranks on one host connect over
//! a Unix socket (`transport::sock`).

use super::frame::{describe_io, read_frame, read_frame_into, write_frame, write_frame_summed};
use super::sock::Sock;
use super::store::StoreClient;
use crate::error::RuntimeError;
use std::collections::BTreeMap;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use twin_sim::plan::RankId;
use twin_sim::schedule::Stream;

/// Lanes per peer: compute, tp, cp, ep, dp, pp (send and receive), io.
pub const LANES: u8 = 7;
const HANDSHAKE_TAG: u64 = 0x6861_6e64; // "hand"

/// The lane that carries an op issued on `stream`.
pub fn lane_of(stream: Stream) -> u8 {
    match stream {
        Stream::Compute => 0,
        Stream::Tp => 1,
        Stream::Cp | Stream::CpRecv => 2,
        Stream::Ep => 3,
        Stream::Dp => 4,
        Stream::PpSend | Stream::PpRecv => 5,
        Stream::Io => 6,
    }
}

/// One socket; reads and writes are serialised separately (`&Sock` is both `Read` and
/// `Write`), so a sender and a receiver thread can use it at once with one descriptor.
struct Conn {
    read_lock: Mutex<()>,
    write_lock: Mutex<()>,
    stream: Sock,
}

/// This rank's connections to every other rank.
pub struct Mesh {
    pub rank: RankId,
    pub world: u32,
    conns: BTreeMap<(RankId, u8), Conn>,
    /// How long a peer may stay silent in a transfer before it is reported as hung.
    timeout: Duration,
}

impl Mesh {
    /// A mesh with no peers, for a one-rank world.
    pub fn single() -> Mesh {
        Mesh {
            rank: 0,
            world: 1,
            conns: BTreeMap::new(),
            timeout: Duration::from_secs(60),
        }
    }

    /// Connect to every other rank through the store. `timeout` bounds setup and, later,
    /// every blocking read or write (a peer silent for longer is reported as hung).
    /// Ranks on one host connect over Unix sockets with `TWIN_TRANSPORT=unix`, over TCP by
    /// default.
    pub fn connect(
        store: &mut StoreClient,
        rank: RankId,
        world: u32,
        timeout: Duration,
    ) -> Result<Mesh, RuntimeError> {
        let local = super::sock::local_allowed()
            .map_err(|m| RuntimeError::Rendezvous(format!("rank {rank}: {m}")))?;
        Mesh::connect_with(store, rank, world, timeout, local)
    }

    /// [`Mesh::connect`], with Unix sockets between ranks on one host allowed or not (`local`;
    /// every rank of a world must pass the same).
    pub fn connect_with(
        store: &mut StoreClient,
        rank: RankId,
        world: u32,
        timeout: Duration,
        local: bool,
    ) -> Result<Mesh, RuntimeError> {
        let boot = |m: String| RuntimeError::Rendezvous(format!("rank {rank}: {m}"));
        let ip = store.local_ip()?;
        let listener =
            TcpListener::bind((ip, 0)).map_err(|e| boot(format!("cannot listen on {ip}: {e}")))?;
        let me = listener
            .local_addr()
            .map_err(|e| boot(format!("listener address: {e}")))?;
        store.set(&format!("mesh/addr/{rank}"), me.to_string().as_bytes())?;
        // Within a host: a Unix socket, advertised as "HOST_ID NAME" (empty: TCP only).
        let host = super::sock::host_id().filter(|_| local);
        let local = host.as_ref().and_then(|h| {
            let name = format!("twin-mesh-{}-{rank}-{}", std::process::id(), me.port());
            super::sock::listen_local(&name)
                .ok()
                .map(|l| (format!("{h} {name}"), l))
        });
        let advert = local.as_ref().map_or(String::new(), |(a, _)| a.clone());
        store.set(&format!("mesh/local/{rank}"), advert.as_bytes())?;
        let mut addrs = Vec::with_capacity(world as usize);
        let mut locals = Vec::with_capacity(world as usize);
        for r in 0..world {
            let a = store.get(&format!("mesh/addr/{r}"))?;
            addrs.push(String::from_utf8_lossy(&a).into_owned());
            let l = store.get(&format!("mesh/local/{r}"))?;
            locals.push(String::from_utf8_lossy(&l).into_owned());
        }
        // A peer's Unix socket name when it is on this host.
        let same_host = |peer: usize| -> Option<&str> {
            let (their_host, name) = locals.get(peer)?.split_once(' ')?;
            (Some(their_host) == host.as_deref()).then_some(name)
        };
        let expected = (world.saturating_sub(rank + 1) as usize) * usize::from(LANES);
        let deadline = Instant::now() + timeout;
        let unix_listener = local.as_ref().map(|(_, l)| l);
        let accepted = std::thread::scope(|s| {
            let acceptor =
                s.spawn(|| accept_all(&listener, unix_listener, rank, expected, deadline, timeout));
            let mut out = BTreeMap::new();
            for (peer, addr) in addrs.iter().enumerate().take(rank as usize) {
                let local_name = same_host(peer);
                let peer = peer as RankId;
                for lane in 0..LANES {
                    let conn = match local_name.and_then(|n| super::sock::connect_local(n).ok()) {
                        Some(u) => Sock::Unix(u),
                        None => Sock::Tcp(connect_retry(addr, deadline).map_err(|e| {
                            RuntimeError::Transport {
                                peer,
                                message: format!("cannot connect to {addr}: {e}"),
                            }
                        })?),
                    };
                    conn.setup(timeout).map_err(|e| boot(e.to_string()))?;
                    let mut hello = [0u8; 5];
                    hello[..4].copy_from_slice(&rank.to_le_bytes());
                    hello[4] = lane;
                    let mut w = &conn;
                    write_frame(&mut w, peer, HANDSHAKE_TAG, &hello, false)?;
                    out.insert((peer, lane), conn);
                }
            }
            let mut theirs = acceptor
                .join()
                .map_err(|_| boot("acceptor thread panicked".into()))??;
            out.append(&mut theirs);
            Ok::<_, RuntimeError>(out)
        })?;
        let conns = accepted
            .into_iter()
            .map(|(key, stream)| {
                let conn = Conn {
                    read_lock: Mutex::new(()),
                    write_lock: Mutex::new(()),
                    stream,
                };
                (key, conn)
            })
            .collect();
        Ok(Mesh {
            rank,
            world,
            conns,
            timeout,
        })
    }

    /// The kind of connection to `peer` (`tcp` or `unix`; `None` without one).
    pub fn kind(&self, peer: RankId) -> Option<&'static str> {
        self.conns.get(&(peer, 0)).map(|c| c.stream.kind())
    }

    fn conn(&self, peer: RankId, lane: u8) -> Result<&Conn, RuntimeError> {
        self.conns.get(&(peer, lane)).ok_or_else(|| {
            RuntimeError::Unsupported(format!(
                "rank {} has no connection to rank {peer} (world {}); a transfer to itself is not supported",
                self.rank, self.world
            ))
        })
    }

    /// Send one framed message to `peer` on `lane`.
    pub fn send(
        &self,
        peer: RankId,
        lane: u8,
        tag: u64,
        payload: &[u8],
        corrupt: bool,
    ) -> Result<(), RuntimeError> {
        self.send_summed(peer, lane, tag, payload, None, corrupt)
    }

    /// [`Mesh::send`], given the payload's `frame::wire_sum` when the caller keeps it.
    pub fn send_summed(
        &self,
        peer: RankId,
        lane: u8,
        tag: u64,
        payload: &[u8],
        sum: Option<u64>,
        corrupt: bool,
    ) -> Result<(), RuntimeError> {
        let c = self.conn(peer, lane)?;
        let _w = c
            .write_lock
            .lock()
            .map_err(|_| RuntimeError::Aborted("a sender thread panicked".into()))?;
        write_frame_summed(&mut &c.stream, peer, tag, payload, sum, corrupt)
    }

    /// Receive one framed message of `len` bytes with `tag` from `peer` on `lane`; also
    /// returns when its header arrived.
    pub fn recv(
        &self,
        peer: RankId,
        lane: u8,
        tag: u64,
        len: u64,
    ) -> Result<(Vec<u8>, Instant), RuntimeError> {
        let len = usize::try_from(len).map_err(|_| RuntimeError::Transport {
            peer,
            message: format!("a {len}-byte message does not fit in memory"),
        })?;
        let mut got = vec![0u8; len];
        let at = self.recv_into(peer, lane, tag, &mut got)?;
        Ok((got, at))
    }

    /// Receive one framed message with `tag` from `peer` on `lane` straight into `into`, whose
    /// length is the message's; returns when its header arrived.
    pub fn recv_into(
        &self,
        peer: RankId,
        lane: u8,
        tag: u64,
        into: &mut [u8],
    ) -> Result<Instant, RuntimeError> {
        let c = self.conn(peer, lane)?;
        let _r = c
            .read_lock
            .lock()
            .map_err(|_| RuntimeError::Aborted("a receiver thread panicked".into()))?;
        read_frame_into(&mut &c.stream, peer, tag, into)
    }

    /// Send to one peer and receive from another at the same time (a ring step), on this
    /// thread: `transport::exchange` drives both sockets with poll(2), so two ranks sending to
    /// each other cannot block each other, at any size. The calling thread alone is as fast as a
    /// helper thread started per step for the send, at every size measured (an
    /// all-reduce of 16 / 32 MiB over four ranks on two cores: 40.7 / 85.3-85.5 ms against
    /// 42.2-44.5 / 89.3-91.0 ms threaded; docs/journal/2026-11-validation-history.md, 2026-11-24).
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &self,
        to: RankId,
        from: RankId,
        lane: u8,
        tag: u64,
        payload: &[u8],
        into: &mut [u8],
        corrupt: bool,
    ) -> Result<Instant, RuntimeError> {
        let got = (|| {
            let (tc, fc) = (self.conn(to, lane)?, self.conn(from, lane)?);
            let poisoned = || RuntimeError::Aborted("a transport thread panicked".into());
            let _w = tc.write_lock.lock().map_err(|_| poisoned())?;
            let _r = fc.read_lock.lock().map_err(|_| poisoned())?;
            let expect = super::exchange::Expect { peer: from, tag };
            super::exchange::exchange(
                &tc.stream,
                to,
                &fc.stream,
                &expect,
                tag,
                payload,
                into,
                corrupt,
                self.timeout,
            )
        })();
        if got.is_err() {
            // Wake every other thread of this rank blocked on a socket: the step has failed.
            self.shutdown_all();
        }
        got
    }

    /// Close every connection: wakes every thread blocked on a socket (used on abort).
    pub fn shutdown_all(&self) {
        for c in self.conns.values() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }
}

fn connect_retry(addr: &str, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut backoff = super::backoff::connect();
    loop {
        match TcpStream::connect(addr) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => backoff.wait(),
        }
    }
}

fn accept_all(
    listener: &TcpListener,
    unix: Option<&UnixListener>,
    rank: RankId,
    expected: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<BTreeMap<(RankId, u8), Sock>, RuntimeError> {
    let boot = |m: String| RuntimeError::Rendezvous(format!("rank {rank}: {m}"));
    listener
        .set_nonblocking(true)
        .map_err(|e| boot(e.to_string()))?;
    if let Some(u) = unix {
        u.set_nonblocking(true).map_err(|e| boot(e.to_string()))?;
    }
    let mut out = BTreeMap::new();
    while out.len() < expected {
        // Either listener may have a connection waiting; try both before sleeping. A listener
        // with nothing waiting answers WouldBlock (both are non-blocking).
        let waiting = |r: std::io::Result<(Sock, String)>| match r {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(boot(format!("accept: {}", describe_io(&e)))),
        };
        let mut next = waiting(
            listener
                .accept()
                .map(|(conn, from)| (Sock::Tcp(conn), from.to_string())),
        )?;
        if let (None, Some(u)) = (&next, unix) {
            next = waiting(
                u.accept()
                    .map(|(conn, _)| (Sock::Unix(conn), "a local rank".to_owned())),
            )?;
        }
        match next {
            Some((conn, from)) => {
                conn.set_nonblocking(false)
                    .map_err(|e| boot(e.to_string()))?;
                conn.setup(timeout).map_err(|e| boot(e.to_string()))?;
                let mut r = &conn;
                let (_, hello) = read_frame(&mut r, u32::MAX, Some(HANDSHAKE_TAG), Some(5))
                    .map_err(|e| boot(format!("bad handshake from {from}: {e}")))?;
                let mut b = [0u8; 4];
                b.copy_from_slice(hello.get(..4).unwrap_or(&[0; 4]));
                let peer = u32::from_le_bytes(b);
                let lane = hello.get(4).copied().unwrap_or(0);
                out.insert((peer, lane), conn);
            }
            None => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (rank + 1..)
                        .take(expected / usize::from(LANES))
                        .filter(|p| !out.contains_key(&(*p, 0)))
                        .map(|p| p.to_string())
                        .collect();
                    return Err(boot(format!(
                        "timed out waiting for rank(s) {} to connect",
                        missing.join(", ")
                    )));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    Ok(out)
}
