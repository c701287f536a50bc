//! Readers of what real training jobs measured, for `twin verify` and `twin calibrate` to
//! compare with and fit to: PyTorch profiler (Kineto) Chrome traces ([`kineto`]) and CUDA
//! caching-allocator memory snapshots ([`snapshot`]). The crate knows nothing of twin's
//! simulator: it turns files into plain figures (kernel time by class, memory over the step),
//! and refuses anything that is not such a file with an error that says why, never a panic.

pub mod kineto;
pub mod snapshot;

/// `bytes` as they are, or gunzipped when they start with gzip's magic (whatever the file is
/// called), reading at most `limit` decompressed bytes (a gzip bomb would otherwise take all
/// memory); the error is the decoder's.
pub fn gunzip_if_gzip(bytes: &[u8], limit: u64) -> std::io::Result<std::borrow::Cow<'_, [u8]>> {
    use std::io::Read as _;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(limit)
        .read_to_end(&mut out)?;
    Ok(std::borrow::Cow::Owned(out))
}
