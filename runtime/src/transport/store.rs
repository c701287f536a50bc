//! The bootstrap key-value store (as torch.distributed's TCPStore): rank 0 serves it on
//! MASTER_ADDR:MASTER_PORT; every rank publishes its data-plane address, waits on the others',
//! meets at barriers, measures its clock offset against the server's clock (ping-pong), and
//! hands its measurements to rank 0. Requests are frames (see `frame`); GET blocks until the
//! key exists.

use super::frame::{read_frame, write_frame};
use crate::error::RuntimeError;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const OP_SET: u64 = 1;
const OP_GET: u64 = 2;
const OP_TIME: u64 = 3;
/// The store is not a rank; errors about it name this pseudo rank.
const STORE: u32 = u32::MAX;

/// A monotonic clock; `offset_ns` maps it onto rank 0's clock (the store's).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
    pub offset_ns: i64,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            epoch: Instant::now(),
            offset_ns: 0,
        }
    }
    /// Nanoseconds since this process's epoch.
    pub fn local_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    /// Now on the aligned (rank 0) clock.
    pub fn now_ns(&self) -> u64 {
        self.at_ns(Instant::now())
    }
    /// `t` on the aligned (rank 0) clock.
    pub fn at_ns(&self, t: Instant) -> u64 {
        let local =
            i128::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(i128::MAX);
        let t = local + i128::from(self.offset_ns);
        u64::try_from(t.max(0)).unwrap_or(u64::MAX)
    }
}

/// A little-endian u64 from the first 8 bytes of a store value (zero-padded when shorter).
pub fn le_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

/// Wait until `clock` reads `t_ns`: sleep until shortly before, then yield until it.
pub fn wait_until(clock: &Clock, t_ns: u64) {
    const SPIN_NS: u64 = 200_000;
    loop {
        let now = clock.now_ns();
        if now >= t_ns {
            return;
        }
        let left = t_ns - now;
        if left > SPIN_NS {
            std::thread::sleep(Duration::from_nanos(left - SPIN_NS));
        } else {
            std::thread::yield_now();
        }
    }
}

/// Sleep until `clock` reads `t_ns`, without spinning: for threads that share a core with the
/// ones they start beside, where a spinning thread would take the core from them. Wakes within
/// the kernel's timer slack (set to 1 µs for the calling thread) plus the wake-up latency.
pub fn sleep_until(clock: &Clock, t_ns: u64) {
    set_timer_slack_ns(1_000);
    for _ in 0..1_000 {
        let now = clock.now_ns();
        if now >= t_ns {
            return;
        }
        std::thread::sleep(Duration::from_nanos(t_ns - now));
    }
}

/// Lower the calling thread's timer slack (how late the kernel may fire its sleeps; 50 µs by
/// default). Best effort: a failure leaves the default.
fn set_timer_slack_ns(ns: u64) {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ns;
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// The store's keys, and a condition variable per key that some GET waits for. A SET wakes
/// only the GETs of its own key: with one condition variable for the store, every SET woke
/// every waiting connection thread (each rank's step barrier and its failure watcher), and at
/// a step's end those wake-ups took the cores of the ranks still finishing their last ops
/// (`perf sched` of `dp-pp-zero.toml`, docs/journal/2026-11-validation-history.md, 2026-11-24).
#[derive(Default)]
struct Shared {
    map: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    values: BTreeMap<String, Vec<u8>>,
    waiting: BTreeMap<String, Arc<Condvar>>,
}

/// A running store server; it serves until the process exits.
pub struct StoreServer {
    pub addr: SocketAddr,
    /// Client connections currently open.
    open: Arc<AtomicUsize>,
}

impl StoreServer {
    /// Bind `addr` and serve in background threads. A port in use is a clear error.
    pub fn start(addr: &str, port: u16, clock: Clock) -> Result<StoreServer, RuntimeError> {
        let listener = TcpListener::bind((addr, port)).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AddrInUse {
                "the port is in use (another run, or a stale process); pick another MASTER_PORT"
                    .to_string()
            } else {
                e.to_string()
            };
            RuntimeError::Rendezvous(format!(
                "rank 0 cannot serve the store on {addr}:{port}: {why}"
            ))
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| RuntimeError::Rendezvous(format!("store address: {e}")))?;
        let shared = Arc::new(Shared::default());
        let open = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&open);
        std::thread::Builder::new()
            .name("twin-store".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let shared = Arc::clone(&shared);
                    let counter = Arc::clone(&counter);
                    counter.fetch_add(1, Ordering::SeqCst);
                    let spawned = std::thread::Builder::new()
                        .name("twin-store-conn".into())
                        .spawn(move || {
                            serve(conn, &shared, clock);
                            counter.fetch_sub(1, Ordering::SeqCst);
                        });
                    if spawned.is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| RuntimeError::Rendezvous(format!("store thread: {e}")))?;
        Ok(StoreServer { addr: local, open })
    }

    /// Wait (at most `timeout`) until no more than `own` client connections are open: the
    /// server's process must outlive the replies to the other ranks' last requests.
    pub fn wait_for_clients(&self, own: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.open.load(Ordering::SeqCst) > own && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn serve(mut conn: TcpStream, shared: &Shared, clock: Clock) {
    let _ = conn.set_nodelay(true);
    while let Ok((op, payload)) = read_frame(&mut conn, STORE, None, None) {
        let reply = match op {
            OP_SET => {
                let (key, value) = split_key(&payload);
                if let Ok(mut keys) = shared.map.lock() {
                    let woken = keys.waiting.remove(&key);
                    keys.values.insert(key, value.to_vec());
                    if let Some(cv) = woken {
                        cv.notify_all();
                    }
                }
                Vec::new()
            }
            OP_GET => {
                let key = String::from_utf8_lossy(&payload).into_owned();
                let Ok(mut keys) = shared.map.lock() else {
                    return;
                };
                loop {
                    if let Some(v) = keys.values.get(&key) {
                        break v.clone();
                    }
                    let cv = Arc::clone(keys.waiting.entry(key.clone()).or_default());
                    match cv.wait(keys) {
                        Ok(k) => keys = k,
                        Err(_) => return,
                    }
                }
            }
            OP_TIME => clock.now_ns().to_le_bytes().to_vec(),
            _ => return,
        };
        if write_frame(&mut conn, STORE, op, &reply, false).is_err() {
            return;
        }
    }
}

fn split_key(payload: &[u8]) -> (String, &[u8]) {
    let mut n = [0u8; 4];
    if let Some(src) = payload.get(..4) {
        n.copy_from_slice(src);
    }
    let klen = u32::from_le_bytes(n) as usize;
    let key = payload.get(4..4 + klen).unwrap_or_default();
    let value = payload.get(4 + klen..).unwrap_or_default();
    (String::from_utf8_lossy(key).into_owned(), value)
}

/// One connection to the store.
pub struct StoreClient {
    conn: TcpStream,
    pub server: String,
}

impl StoreClient {
    /// Connect, retrying until `timeout` (rank 0 may start later than this rank).
    pub fn connect(addr: &str, port: u16, timeout: Duration) -> Result<StoreClient, RuntimeError> {
        let server = format!("{addr}:{port}");
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no attempt");
        let mut backoff = super::backoff::connect();
        loop {
            let targets: Vec<SocketAddr> = match (addr, port).to_socket_addrs() {
                Ok(a) => a.collect(),
                Err(e) => {
                    return Err(RuntimeError::Rendezvous(format!(
                        "cannot resolve MASTER_ADDR {addr}: {e}"
                    )))
                }
            };
            for t in &targets {
                match TcpStream::connect_timeout(t, Duration::from_millis(500)) {
                    Ok(conn) => {
                        let _ = conn.set_nodelay(true);
                        return Ok(StoreClient { conn, server });
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Rendezvous(format!(
                    "cannot reach the store at {server} within {:.1} s ({last}); is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?",
                    timeout.as_secs_f64()
                )));
            }
            backoff.wait();
        }
    }

    /// The local address this connection leaves from: the interface that reaches rank 0, so
    /// the right one to advertise to the other ranks.
    pub fn local_ip(&self) -> Result<std::net::IpAddr, RuntimeError> {
        self.conn
            .local_addr()
            .map(|a| a.ip())
            .map_err(|e| RuntimeError::Rendezvous(format!("local address: {e}")))
    }

    /// Bound every blocking request (a GET of a key nobody sets must not hang forever).
    pub fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.conn.set_read_timeout(t);
    }

    fn request(&mut self, op: u64, payload: &[u8]) -> Result<Vec<u8>, RuntimeError> {
        let lost = |e: RuntimeError| {
            RuntimeError::Rendezvous(format!(
                "store at {} failed ({e}); rank 0 exited or hangs",
                self.server
            ))
        };
        write_frame(&mut self.conn, STORE, op, payload, false).map_err(lost)?;
        let (_, reply) = read_frame(&mut self.conn, STORE, Some(op), None).map_err(lost)?;
        Ok(reply)
    }

    pub fn set(&mut self, key: &str, value: &[u8]) -> Result<(), RuntimeError> {
        let mut p = Vec::with_capacity(4 + key.len() + value.len());
        p.extend_from_slice(&(key.len() as u32).to_le_bytes());
        p.extend_from_slice(key.as_bytes());
        p.extend_from_slice(value);
        self.request(OP_SET, &p).map(|_| ())
    }

    /// The value of `key`, waiting until some rank sets it.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, RuntimeError> {
        self.request(OP_GET, key.as_bytes())
    }

    /// Every rank calls this with the same `name`; returns when all `world` ranks have.
    pub fn barrier(&mut self, name: &str, rank: u32, world: u32) -> Result<(), RuntimeError> {
        self.set(&format!("barrier/{name}/{rank}"), &[])?;
        for r in 0..world {
            self.get(&format!("barrier/{name}/{r}"))?;
        }
        Ok(())
    }

    /// A barrier that also starts every rank at one instant: once every rank has arrived,
    /// rank 0 names a start `margin` ahead on the aligned clock, and every rank waits for it.
    /// The ranks then leave within their clock residuals of each other, not as the store's
    /// replies happen to reach them (hundreds of microseconds to milliseconds apart on an
    /// oversubscribed machine, a skew that tensor-parallel lockstep then carries through the
    /// whole step). A rank that learns the start late starts at once.
    pub fn start_together(
        &mut self,
        name: &str,
        rank: u32,
        world: u32,
        clock: &Clock,
        margin: Duration,
    ) -> Result<(), RuntimeError> {
        let start_ns = self.agree_start(name, rank, world, clock, margin)?;
        wait_until(clock, start_ns);
        Ok(())
    }

    /// The barrier of [`StoreClient::start_together`] without the wait: returns the agreed
    /// start on the aligned clock, for a caller that waits for it some other way (the host
    /// backend's stream threads each sleep until it, so that no rank's setup runs first).
    pub fn agree_start(
        &mut self,
        name: &str,
        rank: u32,
        world: u32,
        clock: &Clock,
        margin: Duration,
    ) -> Result<u64, RuntimeError> {
        let key = format!("start/{name}");
        let start_ns = if rank == 0 {
            for r in 1..world {
                self.get(&format!("barrier/{name}/{r}"))?;
            }
            let margin_ns = u64::try_from(margin.as_nanos()).unwrap_or(u64::MAX);
            let t = clock.now_ns().saturating_add(margin_ns);
            self.set(&key, &t.to_le_bytes())?;
            t
        } else {
            self.set(&format!("barrier/{name}/{rank}"), &[])?;
            le_u64(&self.get(&key)?)
        };
        Ok(start_ns)
    }

    /// Estimate the offset of the server's clock from `clock` by ping-pong: keep the round
    /// trip with the smallest latency; offset = server time - midpoint. Returns (offset,
    /// residual), the residual being half that round trip: the most the estimate can be off.
    pub fn clock_offset(&mut self, clock: &Clock, rounds: u32) -> Result<(i64, u64), RuntimeError> {
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..rounds.max(1) {
            let t0 = clock.local_ns();
            let reply = self.request(OP_TIME, &[])?;
            let t1 = clock.local_ns();
            let server = i128::from(le_u64(&reply));
            let rtt = t1.saturating_sub(t0);
            let mid = (i128::from(t0) + i128::from(t1)) / 2;
            let offset = i64::try_from(server - mid).unwrap_or(0);
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        let (rtt, offset) = best.unwrap_or((0, 0));
        Ok((offset, rtt / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_started_together_leave_no_earlier_than_the_named_start() {
        let clock = Clock::new();
        let server = StoreServer::start("127.0.0.1", 0, clock).unwrap();
        let port = server.addr.port();
        let t = Duration::from_secs(5);
        let margin = Duration::from_millis(20);
        let others: Vec<_> = (1..3u32)
            .map(|r| {
                std::thread::spawn(move || {
                    let mut c = StoreClient::connect("127.0.0.1", port, t).unwrap();
                    c.start_together("s", r, 3, &clock, margin).unwrap();
                    clock.now_ns()
                })
            })
            .collect();
        let mut a = StoreClient::connect("127.0.0.1", port, t).unwrap();
        let before = clock.now_ns();
        a.start_together("s", 0, 3, &clock, margin).unwrap();
        let left = clock.now_ns();
        let start = le_u64(&a.get("start/s").unwrap());
        // Rank 0 named a start at least the margin after it had arrived, and nobody left
        // before it.
        assert!(start >= before + margin.as_nanos() as u64);
        assert!(left >= start);
        for h in others {
            assert!(h.join().unwrap() >= start);
        }
    }

    #[test]
    fn each_get_waits_for_its_own_key_and_several_may_wait_for_one() {
        let server = StoreServer::start("127.0.0.1", 0, Clock::new()).unwrap();
        let port = server.addr.port();
        let t = Duration::from_secs(5);
        let waiter = |key: &'static str| {
            std::thread::spawn(move || {
                let mut c = StoreClient::connect("127.0.0.1", port, t).unwrap();
                c.get(key).unwrap()
            })
        };
        let (a1, a2, b) = (waiter("a"), waiter("a"), waiter("b"));
        // Let the three GETs reach the server and wait there.
        std::thread::sleep(Duration::from_millis(50));
        let mut c = StoreClient::connect("127.0.0.1", port, t).unwrap();
        c.set("a", b"one").unwrap();
        assert_eq!(a1.join().unwrap(), b"one");
        assert_eq!(a2.join().unwrap(), b"one");
        // Setting "a" did not answer the GET of "b": it still waits, and gets its own value.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!b.is_finished());
        c.set("b", b"two").unwrap();
        assert_eq!(b.join().unwrap(), b"two");
        // A key set before its GET is answered at once, and a set replaces the value.
        c.set("a", b"three").unwrap();
        assert_eq!(c.get("a").unwrap(), b"three");
    }

    #[test]
    fn set_get_barrier_and_clock() {
        let clock = Clock::new();
        let server = StoreServer::start("127.0.0.1", 0, clock).unwrap();
        let port = server.addr.port();
        let t = Duration::from_secs(5);
        let mut a = StoreClient::connect("127.0.0.1", port, t).unwrap();
        let waiter = std::thread::spawn(move || {
            let mut b = StoreClient::connect("127.0.0.1", port, t).unwrap();
            let v = b.get("k").unwrap();
            b.barrier("x", 1, 2).unwrap();
            v
        });
        a.set("k", b"value").unwrap();
        a.barrier("x", 0, 2).unwrap();
        assert_eq!(waiter.join().unwrap(), b"value");
        // Same process, same epoch: the offset is within the residual (plus scheduling slack).
        let (offset, residual) = a.clock_offset(&clock, 10).unwrap();
        assert!(
            offset.unsigned_abs() <= residual + 1_000_000,
            "{offset} {residual}"
        );
    }

    #[test]
    fn a_port_in_use_is_a_clear_error() {
        let s = StoreServer::start("127.0.0.1", 0, Clock::new()).unwrap();
        let e = StoreServer::start("127.0.0.1", s.addr.port(), Clock::new())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("port is in use"), "{e}");
    }
}
