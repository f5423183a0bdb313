//! NVIDIA fatbinary containers, read just far enough to find the PTX an application shipped
//! next to its cubins, so a capture can be replayed through the JIT on another architecture.
//! No I/O: the recorder hands in the bytes the driver was given.
//!
//! Layout (little-endian, as nvcc 12/13 writes it): a 16-byte container header (magic
//! `0xBA55ED50`, u16 version, u16 header size, u64 size of the entries that follow), then
//! entries: u16 kind (1 = PTX, 2 = ELF), u16, u32 entry header size, u64 payload size,
//! u32 compressed size, u32, u16 minor, u16 major, u32 SM architecture, u32 name offset,
//! u32 name size, u64 flags (0x8000 = zstd payload), u64, u64 uncompressed size. Several
//! containers may follow each other (one per translation unit in a `.nv_fatbin` section).
//! cudart registers a 24-byte wrapper (magic `0x466243B1`, u32 version, u64 pointer to the
//! container, u64 file name) instead of the container itself.

pub const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
const CONTAINER_HEADER: usize = 16;
const ENTRY_HEADER_MIN: usize = 64;
const KIND_PTX: u16 = 1;
const FLAG_ZSTD: u64 = 0x8000;
/// PTX larger than this is not kept (a guard against a corrupt size field).
const MAX_PTX: u64 = 512 << 20;

/// What a code image handed to the driver is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// cudart's fatbin wrapper: the container is behind a pointer.
    Wrapper,
    Container,
    Elf,
    /// PTX source text (NUL-terminated).
    Ptx,
    Unknown,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Classifies an image by its first bytes (at least 8 for a reliable answer).
pub fn classify(head: &[u8]) -> ImageKind {
    match u32_at(head, 0) {
        Some(WRAPPER_MAGIC) => ImageKind::Wrapper,
        Some(CONTAINER_MAGIC) => ImageKind::Container,
        _ if head.starts_with(b"\x7fELF") => ImageKind::Elf,
        _ => {
            let t = head
                .iter()
                .position(|c| !c.is_ascii_whitespace())
                .map(|i| &head[i..]);
            match t {
                Some(t) if t.starts_with(b"//") || t.starts_with(b".") => ImageKind::Ptx,
                _ => ImageKind::Unknown,
            }
        }
    }
}

/// Total length of the container whose 16-byte header is `head`, when it is one.
pub fn container_len(head: &[u8]) -> Option<u64> {
    if u32_at(head, 0)? != CONTAINER_MAGIC {
        return None;
    }
    let header = u16_at(head, 6)? as u64;
    let size = u64_at(head, 8)?;
    header.checked_add(size)
}

/// The container pointer inside cudart's wrapper.
pub fn wrapper_target(wrapper: &[u8]) -> Option<u64> {
    if u32_at(wrapper, 0)? != WRAPPER_MAGIC {
        return None;
    }
    u64_at(wrapper, 8).filter(|&p| p != 0)
}

/// One PTX entry of a container.
#[derive(Debug, Clone)]
pub struct PtxEntry<'a> {
    /// The SM architecture the PTX targets (90 for compute_90).
    pub arch: u32,
    payload: &'a [u8],
    zstd: bool,
    uncompressed: u64,
}

impl PtxEntry<'_> {
    /// The PTX text, decompressed, without trailing NUL padding.
    pub fn text(&self) -> Result<Vec<u8>, String> {
        let mut t = if self.zstd {
            if self.uncompressed > MAX_PTX {
                return Err(format!("PTX entry claims {} bytes", self.uncompressed));
            }
            zstd::bulk::decompress(self.payload, self.uncompressed.max(1) as usize)
                .map_err(|e| format!("zstd PTX entry: {e}"))?
        } else {
            self.payload.to_vec()
        };
        if let Some(end) = t.iter().position(|&c| c == 0) {
            t.truncate(end);
        }
        Ok(t)
    }
}

/// Every PTX entry in `bytes`, which holds one or more containers back to back. Stops at the
/// first thing that is not a well-formed container; entries compressed with a scheme other
/// than zstd (older toolkits) are skipped.
pub fn ptx_entries(bytes: &[u8]) -> Vec<PtxEntry<'_>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(len) = bytes.get(at..).and_then(container_len) {
        let header = u16_at(bytes, at + 6).unwrap_or(0) as usize;
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(l))
            .filter(|&e| e <= bytes.len() && header >= CONTAINER_HEADER)
        else {
            break;
        };
        let mut e = at + header;
        while e + ENTRY_HEADER_MIN <= end {
            let (Some(kind), Some(eh), Some(payload)) =
                (u16_at(bytes, e), u32_at(bytes, e + 4), u64_at(bytes, e + 8))
            else {
                break;
            };
            let eh = eh as usize;
            let Some(data_end) = usize::try_from(payload)
                .ok()
                .and_then(|p| (e + eh).checked_add(p))
                .filter(|&d| eh >= ENTRY_HEADER_MIN && d <= end)
            else {
                break;
            };
            if kind == KIND_PTX {
                let flags = u64_at(bytes, e + 40).unwrap_or(0);
                let compressed = u32_at(bytes, e + 16).unwrap_or(0) as usize;
                let uncompressed = u64_at(bytes, e + 56).unwrap_or(0);
                let zstd = flags & FLAG_ZSTD != 0;
                let body = &bytes[e + eh..data_end];
                let payload = if zstd && compressed > 0 && compressed <= body.len() {
                    &body[..compressed]
                } else {
                    body
                };
                let plain = compressed == 0 || zstd;
                if plain {
                    out.push(PtxEntry {
                        arch: u32_at(bytes, e + 28).unwrap_or(0),
                        payload,
                        zstd,
                        uncompressed,
                    });
                }
            }
            e = data_end;
        }
        at = end;
    }
    out
}

/// A real fatbin from `testdata/fatbin` (tests of this module and of `ptx`).
/// A fatbin from `testdata/fatbin` (for tests, here and in the recorder).
#[doc(hidden)]
pub fn golden(name: &str) -> Vec<u8> {
    let p = format!("{}/../testdata/fatbin/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ptx::{defines_entry, entry_names};

    #[test]
    fn compressed_and_plain_ptx_agree() {
        let z = golden("driver_kernel.fatbin");
        let n = golden("driver_kernel_nc.fatbin");
        assert_eq!(classify(&z), ImageKind::Container);
        let ze = ptx_entries(&z);
        let ne = ptx_entries(&n);
        assert_eq!((ze.len(), ne.len()), (1, 1));
        assert_eq!(ze[0].arch, 90);
        let zt = ze[0].text().expect("zstd PTX");
        let nt = ne[0].text().expect("plain PTX");
        assert_eq!(zt, nt);
        assert!(
            zt.windows(8).any(|w| w == b".version"),
            "PTX text has a .version"
        );
        assert!(defines_entry(&zt, "axpb"));
        assert!(!defines_entry(&zt, "axp"));
    }

    #[test]
    fn section_with_two_containers() {
        let b = golden("kapps.fatbin");
        let first = container_len(&b).expect("first container") as usize;
        assert!(first < b.len(), "a second container follows");
        let e = ptx_entries(&b);
        assert_eq!(e.len(), 1, "only the second container carries PTX");
        let names = entry_names(&e[0].text().expect("PTX"));
        assert!(names.iter().any(|n| n == "_Z5saxpyifPKfPf"), "{names:?}");
        assert!(
            names.iter().any(|n| n.contains("stencil_iter")),
            "{names:?}"
        );
    }

    #[test]
    fn damaged_containers_yield_nothing_and_never_panic() {
        let b = golden("driver_kernel.fatbin");
        for cut in 0..b.len() {
            let entries = ptx_entries(&b[..cut]);
            for e in entries {
                let _ = e.text();
            }
        }
        let mut bad = b.clone();
        bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(ptx_entries(&bad).is_empty());
        let mut huge = b.clone();
        // An entry payload size past the container end.
        huge[16 + 8..16 + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(ptx_entries(&huge).is_empty());
    }

    #[test]
    fn classifies_images() {
        assert_eq!(classify(b"\x7fELF\x02\x01\x01\x00"), ImageKind::Elf);
        assert_eq!(classify(b"//\n// Generated"), ImageKind::Ptx);
        assert_eq!(classify(b"\n.version 8.0"), ImageKind::Ptx);
        assert_eq!(classify(&0x4662_43B1u32.to_le_bytes()), ImageKind::Wrapper);
        assert_eq!(classify(b"\x00\x01"), ImageKind::Unknown);
        let mut w = vec![0u8; 24];
        w[..4].copy_from_slice(&WRAPPER_MAGIC.to_le_bytes());
        w[8..16].copy_from_slice(&0x1234u64.to_le_bytes());
        assert_eq!(wrapper_target(&w), Some(0x1234));
    }
}
