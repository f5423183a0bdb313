//! Putting the input back between passes: only the bytes the kernel writes (the write set),
//! from a pristine copy made once, in device memory when it fits (host pinned memory
//! otherwise). The write set of a capture is computed purely from its post-state chunks (the
//! ranges `write_set::written` decided at record time) and where each region lives; the
//! in-process replay service builds one from live ranges.

use kreplay_cuda::{copy_dtod_async, copy_dtoh, copy_htod, DeviceBuffer, PinnedBuffer, Stream};
use kreplay_format::{Capture, MemoryState};

use crate::options::PristineStore;
use crate::write_set::ByteRange;

/// Bytes of the write set read back at once for a pass's digest.
const DIGEST_WINDOW: u64 = 64 << 20;

/// One range the kernel writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRange {
    pub device_addr: u64,
    /// Where its bytes sit in the pristine copy.
    pub pristine_offset: u64,
    pub len: u64,
}

/// Where a region lives in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionPlacement {
    pub region_id: u32,
    pub base: u64,
    /// Bytes usable there: the region's size, except module globals, which hold only what
    /// the loaded module's global holds.
    pub usable: u64,
}

/// The part of a chunk at `offset` (`len` bytes) that lies inside `usable` bytes.
pub fn clipped(offset: u64, len: u64, usable: u64) -> Option<u64> {
    ByteRange { offset, len }.clipped(usable).map(|r| r.len)
}

/// Every range restored before a pass, adjacent ranges joined (fewer, larger copies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSet {
    ranges: Vec<WriteRange>,
}

impl WriteSet {
    /// From (device address, length) ranges, in order.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u64, u64)>) -> WriteSet {
        let mut set = WriteSet::default();
        for (addr, len) in ranges {
            set.push(addr, len);
        }
        set
    }

    /// Adds a region's written ranges where the region is placed, never past `usable` bytes.
    pub fn place(
        &mut self,
        placement: &RegionPlacement,
        written: impl IntoIterator<Item = ByteRange>,
    ) {
        for r in written {
            if let Some(r) = r.clipped(placement.usable) {
                self.push(placement.base + r.offset, r.len);
            }
        }
    }

    fn push(&mut self, addr: u64, len: u64) {
        if len == 0 {
            return;
        }
        let total = self.bytes();
        match self.ranges.last_mut() {
            Some(w) if w.device_addr + w.len == addr && w.pristine_offset + w.len == total => {
                w.len += len
            }
            _ => self.ranges.push(WriteRange {
                device_addr: addr,
                pristine_offset: total,
                len,
            }),
        }
    }

    /// A capture's write set: every chunk with a post-dispatch state, where its region is
    /// placed, never past what the replay holds there (a global larger in the file than in
    /// the module).
    pub fn of_capture(cap: &Capture<'_>, placements: &[RegionPlacement]) -> WriteSet {
        let mut set = WriteSet::default();
        for r in &cap.regions {
            let Some(p) = placements.iter().find(|p| p.region_id == r.region_id) else {
                continue;
            };
            let written = cap
                .chunks(r.region_id, MemoryState::Post)
                .map(|c| ByteRange {
                    offset: c.offset,
                    len: c.raw_len,
                });
            set.place(p, written);
        }
        set
    }

    pub fn ranges(&self) -> &[WriteRange] {
        &self.ranges
    }

    /// Bytes in all.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|w| w.len).sum()
    }
}

enum Pristine {
    Device(DeviceBuffer),
    Host(PinnedBuffer),
    None,
}

/// A write set and its pristine copy.
pub struct Restorer {
    write_set: WriteSet,
    pristine: Pristine,
}

impl Restorer {
    /// Copies the write set's current bytes aside (the device must hold the input now).
    pub fn snapshot(write_set: WriteSet, stream: &Stream) -> kreplay_cuda::CuResult<Restorer> {
        let total = write_set.bytes();
        let pristine = if total == 0 {
            Pristine::None
        } else {
            match DeviceBuffer::new(total as usize) {
                Ok(buf) => {
                    for w in write_set.ranges() {
                        copy_dtod_async(
                            buf.ptr() + w.pristine_offset,
                            w.device_addr,
                            w.len as usize,
                            stream,
                        )?;
                    }
                    stream.synchronize()?;
                    Pristine::Device(buf)
                }
                Err(_) => {
                    let mut host = PinnedBuffer::new(total as usize)?;
                    for w in write_set.ranges() {
                        let s = w.pristine_offset as usize;
                        copy_dtoh(
                            &mut host.as_mut_slice()[s..s + w.len as usize],
                            w.device_addr,
                        )?;
                    }
                    Pristine::Host(host)
                }
            }
        };
        Ok(Restorer {
            write_set,
            pristine,
        })
    }

    /// Queues the restore on `stream` (device store) or restores now (host store).
    pub fn restore(&self, stream: &Stream) -> kreplay_cuda::CuResult<()> {
        match &self.pristine {
            Pristine::Device(buf) => {
                for w in self.write_set.ranges() {
                    copy_dtod_async(
                        w.device_addr,
                        buf.ptr() + w.pristine_offset,
                        w.len as usize,
                        stream,
                    )?;
                }
            }
            Pristine::Host(host) => {
                for w in self.write_set.ranges() {
                    let s = w.pristine_offset as usize;
                    copy_htod(w.device_addr, &host.as_slice()[s..s + w.len as usize])?;
                }
            }
            Pristine::None => {}
        }
        Ok(())
    }

    pub fn write_set(&self) -> &WriteSet {
        &self.write_set
    }

    pub fn store(&self) -> PristineStore {
        match self.pristine {
            Pristine::Device(_) => PristineStore::Device,
            Pristine::Host(_) => PristineStore::Host,
            Pristine::None => PristineStore::None,
        }
    }

    /// CRC of each write range as it is on the device now (for determinism checks).
    pub fn digest(&self) -> kreplay_cuda::CuResult<Vec<u32>> {
        let mut out = Vec::with_capacity(self.write_set.ranges.len());
        // Read back in windows: host memory stays at one window whatever the write set's size.
        let mut buf = Vec::new();
        for w in self.write_set.ranges() {
            let mut h = crc32fast::Hasher::new();
            let mut at = 0u64;
            while at < w.len {
                let n = (w.len - at).min(DIGEST_WINDOW);
                buf.resize(n as usize, 0);
                copy_dtoh(&mut buf, w.device_addr + at)?;
                h.update(&buf);
                at += n;
            }
            out.push(h.finalize());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::capture;

    #[test]
    fn adjacent_ranges_join_and_empty_ones_vanish() {
        let s = WriteSet::from_ranges([(0x1000, 0x100), (0x1100, 0x100), (0x0, 0), (0x3000, 8)]);
        assert_eq!(
            s.ranges(),
            &[
                WriteRange {
                    device_addr: 0x1000,
                    pristine_offset: 0,
                    len: 0x200
                },
                WriteRange {
                    device_addr: 0x3000,
                    pristine_offset: 0x200,
                    len: 8
                }
            ]
        );
        assert_eq!(s.bytes(), 0x208);
    }

    #[test]
    fn a_capture_write_set_follows_placement_and_stops_at_usable_bytes() {
        capture("cuda-saxpy", |cap| {
            let written: Vec<_> = cap
                .regions
                .iter()
                .filter(|r| cap.chunks(r.region_id, MemoryState::Post).next().is_some())
                .collect();
            assert!(!written.is_empty());
            let full: Vec<RegionPlacement> = cap
                .regions
                .iter()
                .map(|r| RegionPlacement {
                    region_id: r.region_id,
                    base: r.address,
                    usable: r.size,
                })
                .collect();
            let s = WriteSet::of_capture(cap, &full);
            let post: u64 = written
                .iter()
                .flat_map(|r| cap.chunks(r.region_id, MemoryState::Post))
                .map(|c| c.raw_len)
                .sum();
            assert_eq!(s.bytes(), post);
            assert!(s.ranges()[0].device_addr >= written[0].address);
            // Moved by 0x1000_0000 and clipped to 100 bytes per region.
            let moved: Vec<RegionPlacement> = full
                .iter()
                .map(|p| RegionPlacement {
                    base: p.base + 0x1000_0000,
                    usable: 100,
                    ..*p
                })
                .collect();
            let m = WriteSet::of_capture(cap, &moved);
            assert!(m.bytes() <= 100 * written.len() as u64 && m.bytes() > 0);
            assert_eq!(
                m.ranges()[0].device_addr,
                s.ranges()[0].device_addr + 0x1000_0000
            );
            // A region placed nowhere is not restored.
            assert_eq!(WriteSet::of_capture(cap, &[]).bytes(), 0);
        });
    }

    #[test]
    fn written_ranges_are_placed_at_the_region_and_clipped_to_its_usable_bytes() {
        let mut s = WriteSet::default();
        let p = RegionPlacement {
            region_id: 0,
            base: 0x1000,
            usable: 0x30,
        };
        let r = |offset, len| ByteRange { offset, len };
        s.place(&p, [r(0, 0x10), r(0x10, 0x10), r(0x28, 0x10), r(0x40, 8)]);
        assert_eq!(
            s.ranges(),
            &[
                WriteRange {
                    device_addr: 0x1000,
                    pristine_offset: 0,
                    len: 0x20
                },
                WriteRange {
                    device_addr: 0x1028,
                    pristine_offset: 0x20,
                    len: 8
                }
            ]
        );
    }

    #[test]
    fn clipping_keeps_chunks_inside_the_usable_bytes() {
        assert_eq!(clipped(0, 100, 50), Some(50));
        assert_eq!(clipped(40, 100, 50), Some(10));
        assert_eq!(clipped(50, 100, 50), None);
        assert_eq!(clipped(0, 10, 50), Some(10));
    }
}
