//! The on-disk format of one rank's checkpoint file, so that a torn, truncated, corrupted or
//! foreign file is recognised before a single byte of it reaches the model state.
//!
//! Layout (little endian):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `TWINCKPT` |
//! | 8 | 4 | format version (2) |
//! | 12 | 4 | rank |
//! | 16 | 4 | world size |
//! | 20 | 4 | reserved (0) |
//! | 24 | 8 | scenario fingerprint |
//! | 32 | 8 | step (steps completed when it was taken) |
//! | 40 | 8 | payload length in bytes |
//! | 48 | 8 | checksum of bytes 0..48 |
//! | 56 | 8 | reserved (0) |
//! | 64 | n | payload |
//! | 64+n | 8 | checksum of the payload |
//!
//! The checksum is the runtime's documented 64-bit word-wise FNV-style hash
//! ([`crate::transport::frame::checksum`]), which mixes in the length.

use crate::transport::frame::checksum;

pub const MAGIC: [u8; 8] = *b"TWINCKPT";
/// 2: the payload gives each state buffer's length in bytes ([`super::state`]).
pub const FORMAT_VERSION: u32 = 2;
pub const HEADER_BYTES: usize = 64;
pub const TRAILER_BYTES: usize = 8;

/// What a checkpoint file says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub rank: u32,
    pub world: u32,
    pub fingerprint: u64,
    pub step: u64,
    pub payload_bytes: u64,
}

/// Why a checkpoint file was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("file is {found} bytes, shorter than a checkpoint header ({HEADER_BYTES} bytes)")]
    ShortHeader { found: u64 },
    #[error("not a twin checkpoint (bad magic)")]
    Magic,
    #[error("format version {found}, this twin reads version {FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("header checksum mismatch (damaged header)")]
    HeaderChecksum,
    #[error("file is {found} bytes but its header announces {expected} (truncated or extended)")]
    Length { expected: u64, found: u64 },
    #[error("payload checksum mismatch (damaged payload)")]
    PayloadChecksum,
    #[error("{field} is {found} but {expected} was expected")]
    Mismatch {
        field: &'static str,
        expected: u64,
        found: u64,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        w.copy_from_slice(s);
    }
    u64::from_le_bytes(w)
}

/// The whole file for `payload`: header, payload, trailer.
pub fn encode(h: &Header, payload: &[u8]) -> Vec<u8> {
    let (head, trailer) = frame(h, payload);
    [&head[..], payload, &trailer[..]].concat()
}

/// The header and the trailer that go around `payload` in its file (written on either side
/// of it, so a large payload is never copied into a whole-file buffer).
pub fn frame(h: &Header, payload: &[u8]) -> ([u8; HEADER_BYTES], [u8; TRAILER_BYTES]) {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&h.rank.to_le_bytes());
    out.extend_from_slice(&h.world.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&h.fingerprint.to_le_bytes());
    out.extend_from_slice(&h.step.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let head_sum = checksum(&out);
    out.extend_from_slice(&head_sum.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    let mut head = [0u8; HEADER_BYTES];
    head.copy_from_slice(&out);
    (head, checksum(payload).to_le_bytes())
}

/// Check everything a file can say about itself (magic, version, header checksum, length,
/// payload checksum) and return its header and payload.
pub fn decode(file: &[u8]) -> Result<(Header, &[u8]), FormatError> {
    let len = file.len() as u64;
    let head = file
        .get(..HEADER_BYTES)
        .ok_or(FormatError::ShortHeader { found: len })?;
    if head.get(..8) != Some(&MAGIC[..]) {
        return Err(FormatError::Magic);
    }
    let version = u32_at(head, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::Version { found: version });
    }
    if head.get(..48).map(checksum) != Some(u64_at(head, 48)) {
        return Err(FormatError::HeaderChecksum);
    }
    let h = Header {
        rank: u32_at(head, 12),
        world: u32_at(head, 16),
        fingerprint: u64_at(head, 24),
        step: u64_at(head, 32),
        payload_bytes: u64_at(head, 40),
    };
    let expected = h
        .payload_bytes
        .saturating_add((HEADER_BYTES + TRAILER_BYTES) as u64);
    if expected != len {
        return Err(FormatError::Length {
            expected,
            found: len,
        });
    }
    let end = HEADER_BYTES + h.payload_bytes as usize;
    let payload = file.get(HEADER_BYTES..end).ok_or(FormatError::Length {
        expected,
        found: len,
    })?;
    if checksum(payload) != u64_at(file, end) {
        return Err(FormatError::PayloadChecksum);
    }
    Ok((h, payload))
}

/// Check that a decoded header belongs where it was found.
pub fn expect(h: &Header, want: &Header) -> Result<(), FormatError> {
    let checks: [(&'static str, u64, u64); 4] = [
        ("rank", u64::from(want.rank), u64::from(h.rank)),
        ("world size", u64::from(want.world), u64::from(h.world)),
        ("scenario fingerprint", want.fingerprint, h.fingerprint),
        ("step", want.step, h.step),
    ];
    for (field, expected, found) in checks {
        if expected != found {
            return Err(FormatError::Mismatch {
                field,
                expected,
                found,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            rank: 3,
            world: 4,
            fingerprint: 0xfeed,
            step: 12,
            payload_bytes: 5,
        }
    }

    #[test]
    fn round_trips_and_rejects_every_kind_of_damage() {
        let h = header();
        let file = encode(&h, b"hello");
        assert_eq!(file.len(), HEADER_BYTES + 5 + TRAILER_BYTES);
        let (got, payload) = decode(&file).unwrap();
        assert_eq!(got, h);
        assert_eq!(payload, b"hello");
        assert!(expect(&got, &h).is_ok());

        // Truncated anywhere: in the header, in the payload, the trailer cut off.
        assert_eq!(
            decode(&file[..10]).unwrap_err(),
            FormatError::ShortHeader { found: 10 }
        );
        for cut in [HEADER_BYTES + 2, file.len() - 1] {
            assert!(matches!(
                decode(&file[..cut]).unwrap_err(),
                FormatError::Length { .. }
            ));
        }
        // One flipped bit in the payload, in the header, in the magic.
        let mut bad = file.clone();
        bad[HEADER_BYTES + 1] ^= 1;
        assert_eq!(decode(&bad).unwrap_err(), FormatError::PayloadChecksum);
        let mut bad = file.clone();
        bad[33] ^= 1; // step
        assert_eq!(decode(&bad).unwrap_err(), FormatError::HeaderChecksum);
        let mut bad = file.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad).unwrap_err(), FormatError::Magic);
        let mut bad = file.clone();
        bad[8] = 9;
        assert_eq!(decode(&bad).unwrap_err(), FormatError::Version { found: 9 });
        // Extra bytes appended.
        let mut long = file.clone();
        long.push(0);
        assert!(matches!(
            decode(&long).unwrap_err(),
            FormatError::Length { .. }
        ));
    }

    #[test]
    fn a_file_from_elsewhere_is_a_mismatch() {
        let h = header();
        let other = Header { rank: 2, ..h };
        let e = expect(&other, &h).unwrap_err();
        assert_eq!(
            e,
            FormatError::Mismatch {
                field: "rank",
                expected: 3,
                found: 2
            }
        );
        let e = expect(
            &Header {
                fingerprint: 1,
                ..h
            },
            &h,
        )
        .unwrap_err();
        assert!(e.to_string().contains("scenario fingerprint"), "{e}");
    }
}
