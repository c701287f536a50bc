//! Message framing for every TCP byte the host runtime sends: a fixed header (magic, tag,
//! length, checksum) before the payload, so a receiver detects a damaged, truncated or
//! mismatched message instead of computing on garbage.

use crate::error::RuntimeError;
use std::io::{IoSlice, Read, Write};
use std::time::Instant;
use twin_sim::plan::RankId;

const MAGIC: u32 = 0x5457_4e31; // "TWN1"
pub const HEADER_BYTES: usize = 32;

/// A word-wise FNV-style hash of the payload; cheap enough for tens of MB per op and strong
/// enough to catch flipped bits and truncation (the length is mixed in).
pub fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ (data.len() as u64);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Independent running sums [`wire_sum`] keeps (one per 8-byte word of a 64-byte block).
const WIRE_LANES: usize = 8;

/// The checksum of a frame's payload: a Fletcher-style pair of running sums per lane of 8-byte
/// words (`a += word; b += a`), mixed with the length at the end. It sees any flipped bit, a
/// truncation, and words that changed places, and it runs at memory speed: the lanes are
/// independent adds, where [`checksum`]'s multiply chain moved about 5 GB/s. A collective's
/// 0.9 MiB ring step spent about 170 us in each of the two checksums, more than the transfer
/// (docs/journal/2026-11-validation-history.md, 2026-11-24). Frames live only on the wire, so this
/// can change between versions; files keep [`checksum`].
pub fn wire_sum(data: &[u8]) -> u64 {
    let mut a = [0u64; WIRE_LANES];
    let mut b = [0u64; WIRE_LANES];
    let mut blocks = data.chunks_exact(8 * WIRE_LANES);
    for block in &mut blocks {
        for (i, w) in block.chunks_exact(8).enumerate() {
            let mut x = [0u8; 8];
            x.copy_from_slice(w);
            if let (Some(a), Some(b)) = (a.get_mut(i), b.get_mut(i)) {
                *a = a.wrapping_add(u64::from_le_bytes(x));
                *b = b.wrapping_add(*a);
            }
        }
    }
    let mix = |h: u64, v: u64| {
        let h = (h ^ v).wrapping_mul(0x0000_0100_0000_01b3);
        h ^ (h >> 29)
    };
    let mut h = 0xcbf2_9ce4_8422_2325 ^ (data.len() as u64);
    for (&x, &y) in a.iter().zip(&b) {
        h = mix(mix(h, x), y);
    }
    for &byte in blocks.remainder() {
        h = mix(h, u64::from(byte));
    }
    h
}

/// The header of a frame carrying `payload`.
pub fn header(tag: u64, payload: &[u8]) -> [u8; HEADER_BYTES] {
    header_summed(tag, payload.len(), wire_sum(payload))
}

/// The header of a frame of `len` payload bytes whose [`wire_sum`] is `sum`.
fn header_summed(tag: u64, len: usize, sum: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[8..16].copy_from_slice(&tag.to_le_bytes());
    h[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    h[24..32].copy_from_slice(&sum.to_le_bytes());
    h
}

/// Write one frame. `corrupt` flips one payload bit after the checksum was taken (fault
/// injection for tests: the receiver must notice).
pub fn write_frame(
    w: &mut impl Write,
    peer: RankId,
    tag: u64,
    payload: &[u8],
    corrupt: bool,
) -> Result<(), RuntimeError> {
    write_frame_summed(w, peer, tag, payload, None, corrupt)
}

/// [`write_frame`], given the payload's [`wire_sum`] when the caller keeps it (a payload sent
/// again and again): checksumming a 32 KiB message took about 9 µs of a send's 50 on the
/// development VM. Header and payload go out in one vectored write: one system call and one
/// segment on the wire instead of two.
pub fn write_frame_summed(
    w: &mut impl Write,
    peer: RankId,
    tag: u64,
    payload: &[u8],
    sum: Option<u64>,
    corrupt: bool,
) -> Result<(), RuntimeError> {
    let io = |e: std::io::Error| RuntimeError::Transport {
        peer,
        message: format!("send failed: {}", describe_io(&e)),
    };
    if corrupt {
        w.write_all(&encode(tag, payload, true)).map_err(io)?;
        return w.flush().map_err(io);
    }
    let sum = match sum {
        Some(s) => {
            debug_assert_eq!(s, wire_sum(payload), "a stale checksum for a payload");
            s
        }
        None => wire_sum(payload),
    };
    let head = header_summed(tag, payload.len(), sum);
    let mut bufs = [IoSlice::new(&head), IoSlice::new(payload)];
    let mut left = &mut bufs[..];
    // Bounded: every pass writes at least one byte or fails.
    while !left.is_empty() {
        match w.write_vectored(left) {
            Ok(0) => return Err(io(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    w.flush().map_err(io)
}

/// Read one frame and check it: magic, the expected tag (when given), the expected length
/// (when given) and the checksum.
pub fn read_frame(
    r: &mut impl Read,
    peer: RankId,
    expect_tag: Option<u64>,
    expect_len: Option<u64>,
) -> Result<(u64, Vec<u8>), RuntimeError> {
    let (tag, len, sum, _) = read_header(r, peer, expect_tag, expect_len)?;
    let mut payload = vec![0u8; len];
    read_payload(r, peer, &mut payload, sum)?;
    Ok((tag, payload))
}

/// Read one frame of `tag` whose payload fills `into` exactly, straight into it (no buffer
/// of its own); returns when the header arrived.
pub fn read_frame_into(
    r: &mut impl Read,
    peer: RankId,
    tag: u64,
    into: &mut [u8],
) -> Result<Instant, RuntimeError> {
    let (_, _, sum, arrived) = read_header(r, peer, Some(tag), Some(into.len() as u64))?;
    read_payload(r, peer, into, sum)?;
    Ok(arrived)
}

fn read_header(
    r: &mut impl Read,
    peer: RankId,
    expect_tag: Option<u64>,
    expect_len: Option<u64>,
) -> Result<(u64, usize, u64, Instant), RuntimeError> {
    let mut h = [0u8; HEADER_BYTES];
    r.read_exact(&mut h).map_err(|e| RuntimeError::Transport {
        peer,
        message: format!("receive failed: {}", describe_io(&e)),
    })?;
    let arrived = Instant::now();
    let (tag, len, sum) = parse_header(&h, peer, expect_tag, expect_len)?;
    Ok((tag, len, sum, arrived))
}

fn read_payload(
    r: &mut impl Read,
    peer: RankId,
    payload: &mut [u8],
    sum: u64,
) -> Result<(), RuntimeError> {
    r.read_exact(payload).map_err(|e| RuntimeError::Transport {
        peer,
        message: format!(
            "receive of {} bytes failed: {}",
            payload.len(),
            describe_io(&e)
        ),
    })?;
    check_payload(payload, sum, peer)
}

/// The whole frame (header + payload) as bytes, for a writer that sends it in pieces.
/// `corrupt` as in [`write_frame`].
pub fn encode(tag: u64, payload: &[u8], corrupt: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&header(tag, payload));
    out.extend_from_slice(payload);
    if corrupt && !payload.is_empty() {
        let mid = HEADER_BYTES + payload.len() / 2;
        if let Some(b) = out.get_mut(mid) {
            *b ^= 0x10;
        }
    }
    out
}

/// Check a received header: magic, the expected tag and length (when given), and that the
/// length fits in memory. Returns (tag, payload length, payload checksum).
pub fn parse_header(
    h: &[u8; HEADER_BYTES],
    peer: RankId,
    expect_tag: Option<u64>,
    expect_len: Option<u64>,
) -> Result<(u64, usize, u64), RuntimeError> {
    let word = |a: usize, b: usize| {
        let mut x = [0u8; 8];
        if let (Some(dst), Some(src)) = (x.get_mut(..b - a), h.get(a..b)) {
            dst.copy_from_slice(src);
        }
        u64::from_le_bytes(x)
    };
    let corrupt = |message: String| RuntimeError::Corrupt { peer, message };
    if word(0, 4) as u32 != MAGIC {
        return Err(corrupt(format!("bad magic {:#010x}", word(0, 4))));
    }
    let tag = word(8, 16);
    let len = word(16, 24);
    let sum = word(24, 32);
    if let Some(t) = expect_tag {
        if t != tag {
            return Err(corrupt(format!(
                "expected message tag {t:#x}, got {tag:#x} (ranks disagree on the op order)"
            )));
        }
    }
    if let Some(l) = expect_len {
        if l != len {
            return Err(corrupt(format!("expected {l} bytes, header says {len}")));
        }
    }
    let len = usize::try_from(len).map_err(|_| corrupt(format!("length {len}")))?;
    Ok((tag, len, sum))
}

/// Check a received payload against its header's checksum.
pub fn check_payload(payload: &[u8], sum: u64, peer: RankId) -> Result<(), RuntimeError> {
    let got = wire_sum(payload);
    if got != sum {
        return Err(RuntimeError::Corrupt {
            peer,
            message: format!(
                "checksum mismatch on a {}-byte message (header {sum:#018x}, payload {got:#018x})",
                payload.len()
            ),
        });
    }
    Ok(())
}

/// An I/O error in words a user understands (EOF means the other side went away).
pub fn describe_io(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::UnexpectedEof | K::ConnectionReset | K::BrokenPipe | K::ConnectionAborted => {
            format!("the peer closed the connection ({e}); it exited or was killed")
        }
        K::WouldBlock | K::TimedOut => {
            "timed out waiting for the peer (it hangs or is blocked)".to_string()
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, 42, b"hello world, 17 b", false).unwrap();
        assert_eq!(buf.len(), HEADER_BYTES + 17);
        let (tag, p) = read_frame(&mut buf.as_slice(), 1, Some(42), Some(17)).unwrap();
        assert_eq!((tag, p.as_slice()), (42, &b"hello world, 17 b"[..]));
    }

    #[test]
    fn corruption_tag_and_length_mismatches_are_detected() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 3, 7, &[5u8; 100], true).unwrap();
        let e = read_frame(&mut buf.as_slice(), 3, Some(7), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("corrupt message from rank 3: checksum"),
            "{e}"
        );
        let mut buf = Vec::new();
        write_frame(&mut buf, 3, 7, &[5u8; 100], false).unwrap();
        let e = read_frame(&mut buf.as_slice(), 3, Some(8), None).unwrap_err();
        assert!(e.to_string().contains("expected message tag 0x8"), "{e}");
        let e = read_frame(&mut buf.as_slice(), 3, None, Some(99)).unwrap_err();
        assert!(e.to_string().contains("expected 99 bytes"), "{e}");
        // Truncated stream: the peer went away.
        let e = read_frame(&mut &buf[..50], 3, None, None).unwrap_err();
        assert!(e.to_string().contains("closed the connection"), "{e}");
    }

    #[test]
    fn wire_sum_sees_every_single_bit_flip_moved_words_and_length() {
        // 200 bytes: three full 64-byte blocks and an 8-byte tail outside them.
        let a: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        let base = wire_sum(&a);
        for byte in 0..a.len() {
            for bit in 0..8 {
                let mut b = a.clone();
                b[byte] ^= 1 << bit;
                assert_ne!(wire_sum(&b), base, "flip of bit {bit} of byte {byte}");
            }
        }
        // Two words of one lane swapped: the same plain sum, a different running sum.
        let mut b = a.clone();
        b.copy_within(0..8, 128);
        b[0..8].copy_from_slice(&a[128..136]);
        assert_ne!(wire_sum(&b), base);
        // Equal flips in opposite directions in one lane cancel in `a` but not in `b`.
        let mut c = vec![0u8; 128];
        c[0] = 1;
        let mut d = vec![0u8; 128];
        d[64] = 1;
        assert_ne!(wire_sum(&c), wire_sum(&d));
        assert_ne!(wire_sum(&a), wire_sum(&a[..199]));
        assert_ne!(wire_sum(&[0u8; 64]), wire_sum(&[0u8; 72]));
    }

    #[test]
    fn a_frame_is_read_into_a_buffer_of_its_length_only() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, 42, b"hello world, 17 b", false).unwrap();
        let mut into = [0u8; 17];
        read_frame_into(&mut buf.as_slice(), 1, 42, &mut into).unwrap();
        assert_eq!(&into, b"hello world, 17 b");
        let mut short = [0u8; 16];
        let e = read_frame_into(&mut buf.as_slice(), 1, 42, &mut short).unwrap_err();
        assert!(e.to_string().contains("expected 16 bytes"), "{e}");
    }

    #[test]
    fn checksum_sees_single_bit_flips_and_length() {
        let a = vec![0u8; 64];
        let mut b = a.clone();
        b[63] ^= 1;
        assert_ne!(checksum(&a), checksum(&b));
        assert_ne!(checksum(&a), checksum(&a[..63]));
    }
}
