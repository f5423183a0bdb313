//! Fixed-width, little-endian on-disk structures: the file header, the event frame, the
//! memory-chunk prefix and the trailer. Byte layouts are specified in `docs/FORMAT.md`.

use crate::error::{FormatError, Result};

/// PNG-style magic: a high byte catches 7-bit transports, CR LF / LF catch text-mode mangling,
/// and ^Z stops `type` on Windows.
pub const MAGIC: [u8; 8] = *b"\x89KRR\r\n\x1a\n";
/// Magic that opens the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"KRRTRAIL";

/// Major version: a reader refuses files of a newer major.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version this reader knows: it accepts files of a newer minor (unknown non-critical
/// events skipped, unknown critical ones refused).
pub const VERSION_MINOR: u16 = 4;
/// The minor a writer states for a file that uses nothing added after 1.0 (such files stay
/// byte for byte what a 1.0 writer made); a file that holds a SALVAGE event states 1, one
/// that holds STEP events 2, one that holds STEP_OP or RANGE events 3, one that holds
/// REGION_EXTENTS events 4.
pub const BASE_MINOR: u16 = 0;
/// The minor that added the SALVAGE event.
pub const SALVAGE_MINOR: u16 = 1;
/// The minor that added the STEP event (range captures).
pub const STEP_MINOR: u16 = 2;
/// The minor that added the STEP_OP and RANGE events (ranges of copies, fills, events and
/// several streams).
pub const RANGE_MINOR: u16 = 3;
/// The minor that added the REGION_EXTENTS event (captures of the touched pages only).
pub const EXTENTS_MINOR: u16 = 4;

pub const HEADER_LEN: usize = 64;
pub const FRAME_LEN: usize = 24;
pub const TRAILER_LEN: usize = 32;
pub const CHUNK_PREFIX_LEN: usize = 32;

/// The header's state word while the writer has not finished.
pub const STATE_RECORDING: u32 = 0x5245_4344; // "DCER" little-endian: 'RECD'
/// The header's state word once the index, END and trailer are written.
pub const STATE_COMPLETE: u32 = 0x454e_4f44; // 'DONE'

/// Frame flag: a reader that does not know this event kind must refuse the file.
pub const FLAG_CRITICAL: u16 = 1 << 0;
/// Frame flag: the payload is one zstd frame (metadata events only; chunks say so themselves).
pub const FLAG_ZSTD: u16 = 1 << 1;
/// Flags this version understands.
pub const KNOWN_FLAGS: u16 = FLAG_CRITICAL | FLAG_ZSTD;

pub(crate) fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Returns `len` bytes at `offset`, or a `Truncated` error naming `what`.
pub(crate) fn slice_at<'a>(
    data: &'a [u8],
    offset: u64,
    len: u64,
    what: &'static str,
) -> Result<&'a [u8]> {
    let available = (data.len() as u64).saturating_sub(offset);
    if len > available {
        return Err(FormatError::Truncated {
            offset,
            what,
            needed: len,
            available,
        });
    }
    // Both fit in usize: offset + len <= data.len().
    Ok(&data[offset as usize..(offset + len) as usize])
}

/// The 64-byte file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub major: u16,
    pub minor: u16,
    pub features: u64,
    pub uuid: [u8; 16],
    pub state: u32,
    pub index_offset: u64,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&self.major.to_le_bytes());
        b[10..12].copy_from_slice(&self.minor.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.features.to_le_bytes());
        b[24..40].copy_from_slice(&self.uuid);
        b[40..44].copy_from_slice(&self.state.to_le_bytes());
        // 44..48 reserved, zero
        b[48..56].copy_from_slice(&self.index_offset.to_le_bytes());
        // 56..60 reserved, zero
        let c = crc(&b[0..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses and checks the header: magic, CRC, version.
    pub fn decode(data: &[u8]) -> Result<FileHeader> {
        let probe = &data[..data.len().min(8)];
        if probe != &MAGIC[..probe.len()] || data.len() < 8 {
            let hint = if probe.starts_with(b"\x89KRR\n") || probe.starts_with(b"\x89KRR\r\r\n") {
                " - the line endings were rewritten: the file went through a text-mode transfer; copy it in binary mode"
            } else if probe.len() < 8 && probe == &MAGIC[..probe.len()] {
                " - the file is shorter than the magic"
            } else {
                ""
            };
            return Err(FormatError::NotKrr {
                found: probe.to_vec(),
                hint,
            });
        }
        let b = slice_at(data, 0, HEADER_LEN as u64, "file header")?;
        let major = le_u16(b, 8);
        let minor = le_u16(b, 10);
        // Version before CRC: a newer major may have changed the header itself.
        if major > VERSION_MAJOR {
            return Err(FormatError::NewerMajor {
                found_major: major,
                found_minor: minor,
                supported_major: VERSION_MAJOR,
                supported_minor: VERSION_MINOR,
            });
        }
        let stored = le_u32(b, 60);
        let computed = crc(&b[0..60]);
        if stored != computed {
            return Err(FormatError::Checksum {
                offset: 0,
                what: "file header".into(),
                stored,
                computed,
            });
        }
        if major < VERSION_MAJOR {
            return Err(FormatError::Inconsistent {
                offset: 8,
                what: format!("format major version {major} does not exist"),
            });
        }
        let header_len = le_u32(b, 12);
        if header_len as usize != HEADER_LEN {
            return Err(FormatError::Inconsistent {
                offset: 12,
                what: format!("header length {header_len}, expected {HEADER_LEN}"),
            });
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[24..40]);
        let state = le_u32(b, 40);
        if state != STATE_RECORDING && state != STATE_COMPLETE {
            return Err(FormatError::Inconsistent {
                offset: 40,
                what: format!("unknown state word {state:#010x}"),
            });
        }
        Ok(FileHeader {
            major,
            minor,
            features: le_u64(b, 16),
            uuid,
            state,
            index_offset: le_u64(b, 48),
        })
    }
}

/// The 24-byte frame in front of every event payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub kind: u16,
    pub flags: u16,
    pub payload_crc: u32,
    pub payload_len: u64,
}

impl Frame {
    pub fn encode(&self) -> [u8; FRAME_LEN] {
        let mut b = [0u8; FRAME_LEN];
        b[0..2].copy_from_slice(&self.kind.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[8..16].copy_from_slice(&self.payload_len.to_le_bytes());
        // 16..20 reserved
        let c = crc(&b[0..20]);
        b[20..24].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes the frame at `offset`, checking its own CRC (not the payload's).
    pub fn decode(data: &[u8], offset: u64) -> Result<Frame> {
        let b = slice_at(data, offset, FRAME_LEN as u64, "event frame")?;
        let stored = le_u32(b, 20);
        let computed = crc(&b[0..20]);
        if stored != computed {
            return Err(FormatError::Checksum {
                offset,
                what: "event frame".into(),
                stored,
                computed,
            });
        }
        Ok(Frame {
            kind: le_u16(b, 0),
            flags: le_u16(b, 2),
            payload_crc: le_u32(b, 4),
            payload_len: le_u64(b, 8),
        })
    }
}

/// The 32-byte trailer at the very end of a finished file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub index_offset: u64,
    pub end_offset: u64,
    /// Number of events before the trailer, END included (u32: a capture has far fewer).
    pub event_count: u32,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut b = [0u8; TRAILER_LEN];
        b[0..8].copy_from_slice(&TRAILER_MAGIC);
        b[8..16].copy_from_slice(&self.index_offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.end_offset.to_le_bytes());
        b[24..28].copy_from_slice(&self.event_count.to_le_bytes());
        let c = crc(&b[0..28]);
        b[28..32].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(data: &[u8], offset: u64) -> Result<Trailer> {
        let b = slice_at(data, offset, TRAILER_LEN as u64, "trailer")?;
        if b[0..8] != TRAILER_MAGIC {
            return Err(FormatError::Inconsistent {
                offset,
                what: "trailer magic missing".into(),
            });
        }
        let stored = le_u32(b, 28);
        let computed = crc(&b[0..28]);
        if stored != computed {
            return Err(FormatError::Checksum {
                offset,
                what: "trailer".into(),
                stored,
                computed,
            });
        }
        Ok(Trailer {
            index_offset: le_u64(b, 8),
            end_offset: le_u64(b, 16),
            event_count: le_u32(b, 24),
        })
    }
}

/// How a chunk's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkEncoding {
    /// Stored as is: compression did not shrink it.
    Raw = 0,
    /// One zstd frame.
    Zstd = 1,
    /// All zero: no bytes stored.
    Zero = 2,
}

/// Which memory state a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MemoryState {
    /// Device memory as the kernel found it (the replay input).
    Pre = 0,
    /// Device memory after the kernel ran (reference output); only chunks that changed.
    Post = 1,
}

/// The 32-byte fixed prefix of a memory-chunk payload; the stored bytes follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPrefix {
    pub region_id: u32,
    pub state: MemoryState,
    pub encoding: ChunkEncoding,
    pub offset: u64,
    pub raw_len: u64,
    pub raw_crc: u32,
}

impl ChunkPrefix {
    pub fn encode(&self) -> [u8; CHUNK_PREFIX_LEN] {
        let mut b = [0u8; CHUNK_PREFIX_LEN];
        b[0..4].copy_from_slice(&self.region_id.to_le_bytes());
        b[4] = self.state as u8;
        b[5] = self.encoding as u8;
        // 6..8 reserved
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.raw_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.raw_crc.to_le_bytes());
        // 28..32 reserved
        b
    }

    pub fn decode(payload: &[u8], payload_offset: u64) -> Result<ChunkPrefix> {
        let b = slice_at(payload, 0, CHUNK_PREFIX_LEN as u64, "memory chunk prefix").map_err(
            |_| FormatError::Inconsistent {
                offset: payload_offset,
                what: format!(
                    "memory chunk payload of {} bytes is shorter than its {CHUNK_PREFIX_LEN}-byte prefix",
                    payload.len()
                ),
            },
        )?;
        let state = match b[4] {
            0 => MemoryState::Pre,
            1 => MemoryState::Post,
            s => {
                return Err(FormatError::Inconsistent {
                    offset: payload_offset + 4,
                    what: format!("unknown memory state {s}"),
                })
            }
        };
        let encoding = match b[5] {
            0 => ChunkEncoding::Raw,
            1 => ChunkEncoding::Zstd,
            2 => ChunkEncoding::Zero,
            e => {
                return Err(FormatError::Inconsistent {
                    offset: payload_offset + 5,
                    what: format!("unknown chunk encoding {e}"),
                })
            }
        };
        Ok(ChunkPrefix {
            region_id: le_u32(b, 0),
            state,
            encoding,
            offset: le_u64(b, 8),
            raw_len: le_u64(b, 16),
            raw_crc: le_u32(b, 24),
        })
    }
}
