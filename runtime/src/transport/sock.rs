//! One connection of the mesh: TCP between hosts, a Unix-domain stream between two ranks on one
//! host. Over loopback every message pays for the TCP/IP stack on the sending core (segments,
//! acknowledgements, congestion control): on the development VM a 32 KiB send(2) took 15 µs
//! over TCP and 1.8 µs over a Unix socket, and a 32 KiB round trip 70-77 µs against 31-43 µs
//! (docs/journal/2026-11-validation-history.md, 2026-11-24). NCCL likewise moves data within a node
//! through shared memory, not the network. Both kinds are byte streams with the same framing, so
//! the rest of the transport does not tell them apart.
//!
//! With `TWIN_TRANSPORT=unix`, ranks on one host find each other through the store: each
//! advertises its host (the kernel's boot id) and an abstract Unix socket name; a rank that sees
//! its own host id connects there, and falls back to TCP when that fails (another network
//! namespace on the same kernel). TCP stays the default: on the development VM Unix sockets
//! made `tp-pp.toml`'s step 8-9% shorter and left `dp-pp-zero.toml`'s where it was, but
//! profiles calibrated over them predicted `dp-pp-zero` 7-10% under its run (against 2-4% over
//! TCP): its collectives share cores with compute, and the faster transport the calibration
//! measured does not make them cheaper there (docs/journal/2026-11-validation-history.md,
//! 2026-11-24). Calibrate and verify with the same setting.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The send and receive buffer a Unix connection asks for (TCP's autotuning limit on Linux).
const UNIX_BUFFER_BYTES: libc::c_int = 4 << 20;

/// setsockopt of one integer option; a refusal leaves the socket as it was.
fn set_buffer(fd: RawFd, option: libc::c_int, bytes: libc::c_int) {
    // SAFETY: `bytes` lives across the call and its size is passed; fd is an open socket.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// The environment variable that chooses the transport between ranks on one host.
pub const TRANSPORT_ENV: &str = "TWIN_TRANSPORT";

/// A mesh connection.
#[derive(Debug)]
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    /// Bound every blocking read and write by `timeout`, and send small frames at once (TCP).
    pub fn setup(&self, timeout: Duration) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
            Sock::Unix(s) => {
                // A Unix socket starts with the system's default buffers (208 KiB here), where
                // TCP grows its own to 4 MiB: with them a ring step of a few MiB took a wake-up
                // per 208 KiB, and `dp-pp-zero.toml` ran 3-5% slower than over TCP. Best effort:
                // the kernel caps the request at net.core.wmem_max.
                set_buffer(s.as_raw_fd(), libc::SO_SNDBUF, UNIX_BUFFER_BYTES);
                set_buffer(s.as_raw_fd(), libc::SO_RCVBUF, UNIX_BUFFER_BYTES);
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))
            }
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.set_nonblocking(on),
            Sock::Unix(s) => s.set_nonblocking(on),
        }
    }

    pub fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }

    /// `tcp` or `unix`, for messages and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Sock::Tcp(_) => "tcp",
            Sock::Unix(_) => "unix",
        }
    }
}

impl AsRawFd for Sock {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Sock {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read(buf),
            Sock::Unix(s) => (&*s).read(buf),
        }
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).read_vectored(bufs),
            Sock::Unix(s) => (&*s).read_vectored(bufs),
        }
    }
}

impl Write for &Sock {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write(buf),
            Sock::Unix(s) => (&*s).write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => (&*s).write_vectored(bufs),
            Sock::Unix(s) => (&*s).write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether ranks on one host use Unix sockets: when `TWIN_TRANSPORT` says `unix`. Any other
/// value than `tcp` or `unix` is an error naming the allowed ones.
pub fn local_allowed() -> Result<bool, String> {
    parse_transport(std::env::var(TRANSPORT_ENV).ok().as_deref())
}

fn parse_transport(v: Option<&str>) -> Result<bool, String> {
    match v {
        None | Some("" | "tcp") => Ok(false),
        Some("unix") => Ok(true),
        Some(other) => Err(format!(
            "{TRANSPORT_ENV}={other:?}: allowed values are tcp (TCP between every pair of ranks; the default) and unix (Unix sockets between ranks on one host, TCP between hosts)"
        )),
    }
}

/// This host's identity for the mesh: the running kernel's boot id (ranks that share it share a
/// kernel, and so can reach each other's abstract Unix sockets unless they sit in different
/// network namespaces). `None` where the kernel does not say.
pub fn host_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// A listener on an abstract Unix socket (Linux): no file to create or remove, gone with the
/// process.
#[cfg(target_os = "linux")]
pub fn listen_local(name: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    std::os::unix::net::UnixListener::bind_addr(&addr)
}

#[cfg(not(target_os = "linux"))]
pub fn listen_local(_name: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract Unix sockets are Linux-only",
    ))
}

/// Connect to the abstract Unix socket `name` of [`listen_local`].
#[cfg(target_os = "linux")]
pub fn connect_local(name: &str) -> std::io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixStream::connect_addr(&addr)
}

#[cfg(not(target_os = "linux"))]
pub fn connect_local(_name: &str) -> std::io::Result<UnixStream> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract Unix sockets are Linux-only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_carry_vectored_writes_and_reads() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let (c, d) = UnixStream::pair().unwrap();
        for (x, y) in [(Sock::Tcp(a), Sock::Tcp(b)), (Sock::Unix(c), Sock::Unix(d))] {
            x.setup(Duration::from_secs(5)).unwrap();
            y.setup(Duration::from_secs(5)).unwrap();
            let mut w = &x;
            let n = w
                .write_vectored(&[IoSlice::new(b"head"), IoSlice::new(b"er")])
                .unwrap();
            assert_eq!(n, 6, "{}", x.kind());
            let mut got = [0u8; 6];
            let mut r = &y;
            r.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"header");
            assert!(x.as_raw_fd() >= 0);
            x.shutdown(Shutdown::Both).unwrap();
            let mut rest = Vec::new();
            assert_eq!(
                r.read_to_end(&mut rest).unwrap(),
                0,
                "closed: end of stream"
            );
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_listener_is_reached_by_its_name_and_a_wrong_name_fails() {
        let name = format!(
            "twin-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let l = listen_local(&name).unwrap();
        let c = connect_local(&name).unwrap();
        let (s, _) = l.accept().unwrap();
        (&c).write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        (&s).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
        assert!(connect_local(&format!("{name}-nobody")).is_err());
    }

    #[test]
    fn the_transport_variable_takes_two_values_and_names_them_otherwise() {
        for v in [None, Some(""), Some("tcp")] {
            assert_eq!(parse_transport(v), Ok(false), "{v:?}");
        }
        assert_eq!(parse_transport(Some("unix")), Ok(true));
        let e = parse_transport(Some("shm")).unwrap_err();
        assert!(
            e.contains(TRANSPORT_ENV) && e.contains("\"shm\"") && e.contains("tcp"),
            "{e}"
        );
    }
}
