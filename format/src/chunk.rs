//! Encoding and decoding of memory chunks: zero detection, zstd, raw fallback, CRCs.

use std::borrow::Cow;

use crate::layout::{crc, ChunkEncoding, MemoryState};

/// Default bytes per chunk: large enough that zstd and the CRC run at full speed, small enough
/// that a region spreads over all cores and one bad chunk loses little.
pub const DEFAULT_CHUNK_SIZE: u64 = 4 << 20;
/// Largest chunk size a writer accepts and a reader trusts.
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// zstd level used for memory: snapshots are written while the application waits at exit,
/// so speed beats ratio.
pub const DEFAULT_LEVEL: i32 = 1;

/// One chunk ready to be written.
pub struct EncodedChunk<'a> {
    pub encoding: ChunkEncoding,
    pub stored: Cow<'a, [u8]>,
    pub raw_crc: u32,
}

/// True when every byte is zero; word-wise so it runs at memory speed.
pub fn is_all_zero(data: &[u8]) -> bool {
    let mut words = data.chunks_exact(64);
    for w in &mut words {
        let mut acc = 0u64;
        for q in w.chunks_exact(8) {
            acc |= u64::from_ne_bytes([q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]]);
        }
        if acc != 0 {
            return false;
        }
    }
    words.remainder().iter().all(|&b| b == 0)
}

/// Picks the cheapest encoding for one chunk.
pub fn encode_chunk(data: &[u8], level: i32) -> EncodedChunk<'_> {
    if is_all_zero(data) {
        return EncodedChunk {
            encoding: ChunkEncoding::Zero,
            stored: Cow::Borrowed(&[]),
            raw_crc: crc(data),
        };
    }
    let raw_crc = crc(data);
    match zstd::bulk::compress(data, level) {
        Ok(c) if c.len() < data.len() => EncodedChunk {
            encoding: ChunkEncoding::Zstd,
            stored: Cow::Owned(c),
            raw_crc,
        },
        // Compression failing or not helping: store raw, never lose the data.
        _ => EncodedChunk {
            encoding: ChunkEncoding::Raw,
            stored: Cow::Borrowed(data),
            raw_crc,
        },
    }
}

/// Where one memory chunk lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef {
    pub region_id: u32,
    pub state: MemoryState,
    pub encoding: ChunkEncoding,
    /// Offset inside the region.
    pub offset: u64,
    pub raw_len: u64,
    pub raw_crc: u32,
    /// File offset of the event frame.
    pub event_offset: u64,
    /// File offset and length of the whole payload (prefix + stored bytes).
    pub payload_offset: u64,
    pub payload_len: u64,
    pub payload_crc: u32,
}
