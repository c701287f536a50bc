//! A ring step's send-and-receive on one thread: the outgoing frame is written and the incoming
//! frame read in whatever order the sockets allow, driven by poll(2) with non-blocking
//! send/recv calls. Two ranks sending to each other cannot block each other, and no helper
//! thread is started per step: a spawned sender cost a thread start and a scheduler wake-up
//! per ring step (about 0.2 ms on a loaded 2-core machine), which made every collective's
//! latency the operating system's rather than the transport's.

use super::frame::{check_payload, describe_io, encode, header, parse_header, HEADER_BYTES};
use super::sock::Sock;
use crate::error::RuntimeError;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use twin_sim::plan::RankId;

/// How long an exchange polls its sockets without blocking before it sleeps in poll(2). A
/// thread asleep in poll leaves its core idle, and on a VM an idle vCPU halts: the peer's send
/// then pays for waking it (an inter-processor interrupt through the hypervisor) and the
/// receiver for being woken, about 20 µs each on the development VM. The members of a
/// collective's calls leave each call up to that far apart, so every call after the first
/// paid it again (a `tp-pp.toml` step's 16 KiB tensor-parallel calls took 40-60 µs each where a
/// back-to-back pair takes 30). Polling for a while first keeps the core awake for a reply
/// that is that close, as NCCL's proxy threads busy-poll; a longer wait still sleeps.
/// `tp-pp.toml`'s step went from 12.36-12.64 ms to 10.44-10.76 ms with it (three interleaved
/// rounds; docs/journal/2026-11-validation-history.md, 2026-11-24).
const SPIN_BEFORE_BLOCK: Duration = Duration::from_micros(30);

/// What one side of an exchange expects to receive (its length is the receiving buffer's).
pub struct Expect {
    pub peer: RankId,
    pub tag: u64,
}

/// Send `payload` as one frame of `tag` on `to` while receiving one frame of `expect.tag` from
/// `from` (they may be the same socket) straight into `into`, whose length is the frame's.
/// Returns when the incoming header arrived. Fails when either side is silent for `timeout`.
///
/// Neither side copies the payload: the header goes out first and then `payload` itself, and
/// the incoming payload lands in the caller's buffer (a copy in and out cost as much as the
/// transfer for a collective's 0.9 MiB ring step; docs/journal/2026-11-validation-history.md,
/// 2026-11-24).
#[allow(clippy::too_many_arguments)]
pub fn exchange(
    to: &Sock,
    to_peer: RankId,
    from: &Sock,
    expect: &Expect,
    tag: u64,
    payload: &[u8],
    into: &mut [u8],
    corrupt: bool,
    timeout: Duration,
) -> Result<Instant, RuntimeError> {
    // A corrupted frame (fault injection) is built whole, with the flipped bit in its copy.
    let whole;
    let head_out;
    let (first, second): (&[u8], &[u8]) = if corrupt {
        whole = encode(tag, payload, true);
        (&whole, &[])
    } else {
        head_out = header(tag, payload);
        (&head_out, payload)
    };
    let out_len = first.len() + second.len();
    let mut sent = 0usize;
    let mut head = [0u8; HEADER_BYTES];
    let mut head_got = 0usize;
    let mut body_got = 0usize;
    let mut sum = 0u64;
    let mut arrived: Option<Instant> = None;
    let send_err = |e: std::io::Error| RuntimeError::Transport {
        peer: to_peer,
        message: format!("send failed: {}", describe_io(&e)),
    };
    let recv_err = |e: std::io::Error| RuntimeError::Transport {
        peer: expect.peer,
        message: format!("receive failed: {}", describe_io(&e)),
    };
    // One pollfd when both directions use one socket (a ring of two), else [from, to].
    let same = to.as_raw_fd() == from.as_raw_fd();
    let (out_slot, nfds) = if same { (0, 1) } else { (1, 2) };
    let mut last_progress = Instant::now();
    loop {
        let sending = sent < out_len;
        let receiving = arrived.is_none() || body_got < into.len();
        if !sending && !receiving {
            break;
        }
        let mut fds = [
            libc::pollfd {
                fd: from.as_raw_fd(),
                events: 0,
                revents: 0,
            },
            libc::pollfd {
                fd: to.as_raw_fd(),
                events: 0,
                revents: 0,
            },
        ];
        if receiving {
            fds[0].events |= libc::POLLIN;
        }
        if sending {
            fds[out_slot].events |= libc::POLLOUT;
        }
        let waited = last_progress.elapsed();
        let left = timeout.saturating_sub(waited);
        if left.is_zero() {
            let e = std::io::Error::from(ErrorKind::TimedOut);
            return Err(if receiving { recv_err(e) } else { send_err(e) });
        }
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        let r = poll_spinning(&mut fds, nfds, ms);
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(recv_err(e));
        }
        let ready_in = fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
        let ready_out =
            fds[out_slot].revents & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) != 0;
        if sending && ready_out {
            // Write until the socket is full: one poll per buffer-full, not per chunk.
            while sent < out_len {
                let rest = match first.get(sent..) {
                    Some(r) if !r.is_empty() => r,
                    _ => second.get(sent - first.len()..).unwrap_or_default(),
                };
                match send_some(to, rest) {
                    Ok(n) => {
                        sent += n;
                        last_progress = Instant::now();
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(send_err(e)),
                }
            }
        }
        if receiving && ready_in {
            // Read until the socket is empty (or the frame is complete).
            loop {
                let buf = if arrived.is_none() {
                    head.get_mut(head_got..).unwrap_or_default()
                } else {
                    into.get_mut(body_got..).unwrap_or_default()
                };
                if buf.is_empty() {
                    break;
                }
                match recv_some(from, buf) {
                    Ok(0) => return Err(recv_err(std::io::Error::from(ErrorKind::UnexpectedEof))),
                    Ok(n) => {
                        last_progress = Instant::now();
                        if arrived.is_some() {
                            body_got += n;
                            continue;
                        }
                        head_got += n;
                        if head_got == HEADER_BYTES {
                            arrived = Some(Instant::now());
                            let (_, _, s) = parse_header(
                                &head,
                                expect.peer,
                                Some(expect.tag),
                                Some(into.len() as u64),
                            )?;
                            sum = s;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(recv_err(e)),
                }
            }
        }
    }
    check_payload(into, sum, expect.peer)?;
    Ok(arrived.unwrap_or_else(Instant::now))
}

/// poll(2) on the first `nfds` of `fds`: without blocking for up to [`SPIN_BEFORE_BLOCK`],
/// then blocking for up to `timeout_ms`.
fn poll_spinning(fds: &mut [libc::pollfd; 2], nfds: libc::nfds_t, timeout_ms: i32) -> i32 {
    let start = Instant::now();
    loop {
        // SAFETY: `fds` is a valid array of at least `nfds` (≤ 2) pollfd structs for the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), nfds, 0) };
        if r != 0 {
            return r;
        }
        if start.elapsed() >= SPIN_BEFORE_BLOCK {
            break;
        }
        std::hint::spin_loop();
    }
    // SAFETY: as above.
    unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) }
}

/// One non-blocking send(2) of non-empty `data` (no SIGPIPE: a closed peer is an error, not a
/// signal).
fn send_some(s: &Sock, data: &[u8]) -> std::io::Result<usize> {
    // SAFETY: `data` is a valid readable buffer of `data.len()` bytes for the call.
    let n = unsafe {
        libc::send(
            s.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One non-blocking recv(2) into `buf` (non-empty); Ok(0) means the peer closed the
/// connection.
fn recv_some(s: &Sock, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes for the call.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// [`exchange`] into a new buffer of `len` bytes.
    #[allow(clippy::too_many_arguments)]
    fn xchg(
        to: &Sock,
        to_peer: RankId,
        from: &Sock,
        (expect, len): &(Expect, usize),
        tag: u64,
        payload: &[u8],
        corrupt: bool,
        timeout: Duration,
    ) -> Result<Vec<u8>, RuntimeError> {
        let mut into = vec![0u8; *len];
        exchange(
            to, to_peer, from, expect, tag, payload, &mut into, corrupt, timeout,
        )?;
        Ok(into)
    }

    fn pair() -> (Sock, Sock) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (Sock::Tcp(a), Sock::Tcp(b))
    }

    fn unix_pair() -> (Sock, Sock) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (Sock::Unix(a), Sock::Unix(b))
    }

    /// Two ends exchanging messages far larger than any socket buffer at the same time must
    /// not deadlock, and each gets the other's bytes intact, over TCP and Unix sockets alike.
    #[test]
    fn simultaneous_large_exchanges_complete_intact() {
        for (a, b) in [pair(), unix_pair()] {
            simultaneous_large_exchange(a, b);
        }
    }

    fn simultaneous_large_exchange(a: Sock, b: Sock) {
        let n = 8 << 20;
        let pa: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
        let pb: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
        let t = Duration::from_secs(20);
        let expect = |peer| (Expect { peer, tag: 5 }, n);
        let (ga, gb) = std::thread::scope(|s| {
            let h = s.spawn(|| xchg(&b, 0, &b, &expect(0), 5, &pb, false, t));
            let ga = xchg(&a, 1, &a, &expect(1), 5, &pa, false, t);
            (ga, h.join().unwrap())
        });
        assert!(ga.unwrap() == pb);
        assert!(gb.unwrap() == pa);
    }

    /// A ring of three over distinct sockets: each sends to the next, receives from the
    /// previous.
    #[test]
    fn a_three_member_ring_step_passes_each_payload_on() {
        let (a_to_b, b_from_a) = pair();
        let (b_to_c, c_from_b) = pair();
        let (c_to_a, a_from_c) = pair();
        let t = Duration::from_secs(10);
        let p = |r: u8| vec![r; 100_000];
        let e = |peer| (Expect { peer, tag: 9 }, 100_000);
        let got = std::thread::scope(|s| {
            let hb = s.spawn(|| xchg(&b_to_c, 2, &b_from_a, &e(0), 9, &p(1), false, t));
            let hc = s.spawn(|| xchg(&c_to_a, 0, &c_from_b, &e(1), 9, &p(2), false, t));
            let a = xchg(&a_to_b, 1, &a_from_c, &e(2), 9, &p(0), false, t);
            [a, hb.join().unwrap(), hc.join().unwrap()]
        });
        for (r, g) in got.into_iter().enumerate() {
            let prev = ((r + 2) % 3) as u8;
            assert_eq!(g.unwrap(), p(prev), "member {r}");
        }
    }

    #[test]
    fn corruption_a_wrong_tag_and_a_closed_peer_are_errors() {
        let t = Duration::from_secs(5);
        let e = |tag| (Expect { peer: 1, tag }, 64);
        let (a, b) = pair();
        let r = std::thread::scope(|s| {
            s.spawn(|| xchg(&b, 0, &b, &e(3), 3, &[1u8; 64], true, t));
            xchg(&a, 1, &a, &e(3), 3, &[2u8; 64], false, t)
        });
        assert!(r.unwrap_err().to_string().contains("checksum"));
        let (a, b) = pair();
        let r = std::thread::scope(|s| {
            s.spawn(|| xchg(&b, 0, &b, &e(4), 4, &[1u8; 64], false, t));
            xchg(&a, 1, &a, &e(3), 3, &[2u8; 64], false, t)
        });
        assert!(r.unwrap_err().to_string().contains("expected message tag"));
        for (a, b) in [pair(), unix_pair()] {
            drop(b);
            let r = xchg(&a, 1, &a, &e(3), 3, &[2u8; 64], false, t);
            assert!(
                r.unwrap_err().to_string().contains("closed the connection"),
                "{}",
                a.kind()
            );
        }
    }

    #[test]
    fn a_silent_peer_times_out() {
        let (a, _b) = pair();
        let e = (Expect { peer: 1, tag: 1 }, 8);
        let r = xchg(
            &a,
            1,
            &a,
            &e,
            1,
            &[0u8; 8],
            false,
            Duration::from_millis(200),
        );
        assert!(r.unwrap_err().to_string().contains("timed out"));
    }
}
