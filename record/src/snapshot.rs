//! A region's bytes around one step: before it (copied to device scratch, to the host, or
//! straight into the capture file where neither holds them) and after it (what the footprint
//! says the step wrote, from a comparison made where the bytes are).

use std::sync::Arc;

use kreplay_cuda::texture::ForeignArray;
use kreplay_cuda::{copy_dtod_async, copy_dtoh, DeviceBuffer, Stream};
use kreplay_engine::write_set::{ByteRange, Evidence};
use kreplay_format::{
    ArrayImage, MemoryKind, ModuleGlobal, Region, RegionRole, DEFAULT_CHUNK_SIZE,
};

use crate::device_resources::{scratch_allowed, with_chunk_kernels};
use crate::error::RecordError;
use crate::footprint::{Footprint, RegionSpan};
use crate::readback::{self, PackedRun};
use crate::spill::{OpenFile, Spill, Spilled};
use crate::walk::Walk;

/// Where a snapshot's bytes are: copied to the host during the callback, or copied to a
/// device scratch buffer (2 TB/s, so the application barely waits) and brought to the host
/// later by the writer thread.
pub enum Bytes {
    Host(Vec<u8>),
    Device(DeviceBuffer),
}

/// A region and its bytes before (and after) the launch.
pub struct Snapshot {
    pub region: Region,
    /// Where to read it in this process (globals: their address here; others: same).
    pub device_addr: u64,
    pub pre: Bytes,
    /// Set after the launch for regions whose `pre` is on the device.
    pub post: Option<PostScratch>,
    /// Which chunks of `pre` hold a nonzero byte, when the GPU said (the others are written
    /// as zero chunks without being copied home).
    pub pre_nonzero: Option<Vec<bool>>,
    /// Written to the capture file during the stall (it did not fit in device scratch); `pre`
    /// is then empty.
    pub spilled: Option<Spilled>,
    /// The CUDA array whose texels the region holds (read through the array, not an address).
    pub array: Option<(ForeignArray, ArrayImage)>,
}

/// The post-dispatch bytes of a region snapshotted in device scratch.
pub struct PostScratch {
    /// The scratch (none when nothing changed).
    pub buf: Option<DeviceBuffer>,
    /// The ranges written, found on the GPU, and where each run is in `buf`; `None` when the
    /// GPU could not compare (`buf` then holds the whole region, compared on the host).
    pub runs: Option<Vec<PackedRun>>,
    /// Decides the write set when the host compares (`runs` is `None`).
    pub footprint: Arc<dyn Footprint>,
}

/// Copies a region to a device scratch buffer on `stream` (the caller synchronises).
pub(crate) fn device_copy(addr: u64, size: u64, stream: &Stream) -> Option<DeviceBuffer> {
    if !scratch_allowed(size) {
        return None;
    }
    let buf = DeviceBuffer::new(size as usize).ok()?;
    copy_dtod_async(buf.ptr(), addr, size as usize, stream).ok()?;
    Some(buf)
}

/// Post-dispatch chunks of region `region_id` from its bytes after the step: the `written`
/// ranges, cut into chunks of `chunk` bytes.
pub(crate) fn post_chunks(
    region_id: u32,
    written: &[ByteRange],
    chunk: u64,
    after: &[u8],
) -> Vec<PostChunk> {
    written
        .iter()
        .flat_map(|w| w.pieces(chunk))
        // Never past the bytes there are (a range past them has nothing to store).
        .filter_map(|c| {
            let bytes = after.get(c.offset as usize..c.end() as usize)?;
            Some((region_id, c.offset, bytes.to_vec()))
        })
        .collect()
}

/// The post-dispatch state of a region whose pre bytes are in device scratch: the GPU compares
/// the scratch with the memory as the kernel left it, and only the chunks that changed are
/// copied to (packed) post scratch, so the application waits for a read of both and a copy of
/// the write set. Where the memory is not 16-byte aligned, the region is copied whole and the
/// two scratch buffers are compared; where the kernels cannot run, the whole copy is compared
/// on the host later. Also says which pre chunks are nonzero.
fn post_on_device(
    footprint: &Arc<dyn Footprint>,
    pre: &DeviceBuffer,
    addr: u64,
    region: &Region,
    stream: &Stream,
) -> Result<(PostScratch, Option<Vec<bool>>), RecordError> {
    let (size, cs) = (region.size, region.chunk_size);
    let span = RegionSpan::of(region, addr);
    let no_scratch = |n: u64| RecordError::NoPostScratch(n);
    let scratch = |buf, runs| PostScratch {
        buf,
        runs,
        footprint: footprint.clone(),
    };
    if let Ok(flags) = with_chunk_kernels(|k| k.scan(pre.ptr(), Some(addr), size, cs, stream)) {
        let written = footprint.written(span, Evidence::Changed(&flags.changed));
        let (runs, total) = readback::pack(&written);
        let buf = if total > 0 {
            if !scratch_allowed(total) {
                return Err(no_scratch(total));
            }
            let buf = DeviceBuffer::new(total as usize).map_err(|_| no_scratch(total))?;
            for r in &runs {
                copy_dtod_async(buf.ptr() + r.at, addr + r.offset, r.len as usize, stream)
                    .map_err(RecordError::cuda("copying the changed chunks"))?;
            }
            Some(buf)
        } else {
            None
        };
        return Ok((scratch(buf, Some(runs)), Some(flags.nonzero)));
    }
    let whole = device_copy(addr, size, stream).ok_or(no_scratch(size))?;
    stream
        .synchronize()
        .map_err(RecordError::cuda("waiting for the post-dispatch copy"))?;
    match with_chunk_kernels(|k| k.scan(pre.ptr(), Some(whole.ptr()), size, cs, stream)) {
        Ok(flags) => {
            // The runs stay where they are in the whole copy.
            let written = footprint.written(span, Evidence::Changed(&flags.changed));
            let runs = readback::in_place(&written);
            Ok((scratch(Some(whole), Some(runs)), Some(flags.nonzero)))
        }
        Err(_) => Ok((scratch(Some(whole), None), None)),
    }
}

/// A region that changed: (region id, chunk offset, post bytes).
pub type PostChunk = (u32, u64, Vec<u8>);

/// A snapshot's bytes as they are now, on the host.
fn read_now(s: &Snapshot) -> Result<Vec<u8>, RecordError> {
    match &s.array {
        Some((array, image)) => read_array(array, image, s.region.size),
        None => copy_region(s.device_addr, s.region.size),
    }
}

pub(crate) fn read_array(
    array: &ForeignArray,
    image: &ArrayImage,
    size: u64,
) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(size).map_err(|_| RecordError::RegionTooLarge(size))?;
    let mut v = vec![0u8; n];
    array
        .read(image, &mut v)
        .map_err(|source| RecordError::Read {
            addr: 0,
            size,
            source,
        })?;
    Ok(v)
}

pub(crate) fn copy_region(addr: u64, size: u64) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(size).map_err(|_| RecordError::RegionTooLarge(size))?;
    let mut v = vec![0u8; n];
    copy_dtoh(&mut v, addr).map_err(|source| RecordError::Read { addr, size, source })?;
    Ok(v)
}

/// Copies every region the walk found: to device scratch when memory allows (the application
/// waits for a 2 TB/s copy, not for PCIe), to the host otherwise. Returns the snapshots and the
/// module globals they hold.
pub(crate) fn take_snapshots(
    found: &Walk,
    module_id: u32,
    stream: &Stream,
    open_file: Option<OpenFile<'_>>,
    spill: &mut Option<Spill>,
) -> Result<(Vec<Snapshot>, Vec<ModuleGlobal>), RecordError> {
    let mut snapshots = Vec::with_capacity(found.regions.len());
    let mut module_globals = Vec::new();
    for (id, r) in found.regions.iter().enumerate() {
        let region = Region {
            region_id: id as u32,
            address: r.base,
            size: r.size,
            kind: r.kind,
            role: r.role,
            chunk_size: DEFAULT_CHUNK_SIZE,
        };
        // Host-mapped memory is read straight to the host (a scratch copy would cross the bus
        // just the same).
        let scratch = (r.kind != MemoryKind::HostMapped)
            .then(|| device_copy(r.base, r.size, stream))
            .flatten();
        let mut spilled = None;
        let pre = match scratch {
            Some(b) => Bytes::Device(b),
            None => {
                // Too large for scratch: straight into the file where the GPU can digest it.
                let digests = (r.kind != MemoryKind::HostMapped)
                    .then_some(open_file)
                    .flatten()
                    .and_then(|open| {
                        crate::spill::digest(&region, r.base, stream)
                            .ok()
                            .map(|d| (open, d))
                    });
                match digests {
                    Some((open, d)) => {
                        if spill.is_none() {
                            *spill = Some(Spill::open(open)?);
                        }
                        let Some(sp) = spill.as_mut() else {
                            return Err(RecordError::NoContext);
                        };
                        spilled = Some(sp.pre(&region, r.base, d)?);
                        Bytes::Host(Vec::new())
                    }
                    None => Bytes::Host(copy_region(r.base, r.size)?),
                }
            }
        };
        if let Some(name) = &r.global {
            module_globals.push(ModuleGlobal {
                module_id,
                name: name.clone(),
                region_id: id as u32,
            });
        }
        snapshots.push(Snapshot {
            region,
            device_addr: r.base,
            pre,
            post: None,
            pre_nonzero: None,
            spilled,
            array: None,
        });
    }
    Ok((snapshots, module_globals))
}

/// The CUDA arrays behind the texture objects, read to the host, as regions numbered from
/// `first_id`.
pub(crate) fn array_snapshots(
    textures: &crate::textures::Found,
    first_id: u32,
) -> Result<Vec<Snapshot>, RecordError> {
    let mut snapshots = Vec::with_capacity(textures.arrays.len());
    for (i, (array, image)) in textures.arrays.iter().enumerate() {
        let size = image.texel_bytes().unwrap_or(0);
        let pre = read_array(array, image, size)?;
        snapshots.push(Snapshot {
            region: Region {
                region_id: first_id + i as u32,
                address: 0,
                size,
                kind: MemoryKind::CudaArray,
                role: RegionRole::Argument,
                chunk_size: DEFAULT_CHUNK_SIZE,
            },
            device_addr: 0,
            pre: Bytes::Host(pre),
            post: None,
            pre_nonzero: None,
            spilled: None,
            array: Some((*array, image.clone())),
        });
    }
    Ok(snapshots)
}

/// After the step, each snapshot's post-dispatch state: written to the capture file for
/// spilled regions, compared now on the host for host snapshots (their post chunks are
/// returned), compared on the GPU and kept in post scratch for the others. The caller
/// synchronises `stream`.
pub(crate) fn post_states(
    snapshots: &mut [Snapshot],
    footprint: &Arc<dyn Footprint>,
    mut spill: Option<&mut Spill>,
    stream: &Stream,
) -> Result<Vec<PostChunk>, RecordError> {
    let mut post = Vec::new();
    for s in snapshots {
        let span = RegionSpan::of(&s.region, s.device_addr);
        if let Some(before) = &mut s.spilled {
            let Some(spill) = spill.as_deref_mut() else {
                return Err(RecordError::NoContext);
            };
            let after = crate::spill::digest(&s.region, s.device_addr, stream)?;
            let evidence = Evidence::Digests {
                before: &before.digests,
                after: &after.digests,
            };
            let written = footprint.written(span, evidence);
            before.raw += spill.post(&s.region, s.device_addr, &written)?;
            continue;
        }
        match &s.pre {
            Bytes::Host(pre) => {
                let now = read_now(s)?;
                let evidence = Evidence::Bytes {
                    before: pre,
                    after: &now,
                };
                let written = footprint.written(span, evidence);
                let (id, chunk) = (s.region.region_id, s.region.chunk_size);
                post.extend(post_chunks(id, &written, chunk, &now));
            }
            Bytes::Device(pre) => {
                let (post, nonzero) =
                    post_on_device(footprint, pre, s.device_addr, &s.region, stream)?;
                s.post = Some(post);
                s.pre_nonzero = nonzero;
            }
        }
    }
    Ok(post)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::{in_place, pack};
    use kreplay_engine::write_set::written;
    use proptest::prelude::*;

    /// The host comparison as it was before the write-set function: every chunk whose bytes
    /// differ, as a post chunk.
    fn chunkwise(region_id: u32, cs: usize, pre: &[u8], post: &[u8]) -> Vec<PostChunk> {
        pre.chunks(cs)
            .zip(post.chunks(cs))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (_, b))| (region_id, (i * cs) as u64, b.to_vec()))
            .collect()
    }

    /// The GPU flags' packing as it was: runs of changed chunks end to end.
    fn packed(changed: &[bool], chunk: u64, size: u64) -> (Vec<PackedRun>, u64) {
        let mut runs = Vec::new();
        let mut at = 0;
        for (first, count) in kreplay_cuda::chunks::runs(changed, true, usize::MAX) {
            let offset = first as u64 * chunk;
            let len = (count as u64 * chunk).min(size.saturating_sub(offset));
            if len > 0 {
                runs.push(PackedRun { offset, len, at });
                at += len;
            }
        }
        (runs, at)
    }

    #[test]
    fn post_chunks_cut_ranges_at_chunk_size_and_stop_at_the_bytes_there_are() {
        let after: Vec<u8> = (0..10).collect();
        let r = |offset, len| ByteRange { offset, len };
        assert_eq!(
            post_chunks(7, &[r(0, 6), r(8, 2)], 4, &after),
            vec![
                (7, 0, vec![0, 1, 2, 3]),
                (7, 4, vec![4, 5]),
                (7, 8, vec![8, 9])
            ]
        );
        assert_eq!(post_chunks(7, &[r(8, 4)], 4, &after), vec![]);
    }

    proptest! {
        #[test]
        fn the_write_set_path_stores_what_the_chunkwise_compare_stored(
            pre in proptest::collection::vec(0u8..2, 0..300),
            flips in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
            chunk in 1u64..33,
        ) {
            let mut post = pre.clone();
            for f in &flips {
                if !post.is_empty() {
                    let i = f.index(post.len());
                    post[i] ^= 1;
                }
            }
            let size = pre.len() as u64;
            let evidence = Evidence::Bytes { before: &pre, after: &post };
            let ranges = written(evidence, chunk, size);
            prop_assert_eq!(
                post_chunks(3, &ranges, chunk, &post),
                chunkwise(3, chunk as usize, &pre, &post)
            );
            let n = chunk as usize;
            // A scan rounds the flags up to whole chunks, maybe past the region.
            let mut flags: Vec<bool> =
                pre.chunks(n).zip(post.chunks(n)).map(|(a, b)| a != b).collect();
            flags.push(true);
            let ranges = written(Evidence::Changed(&flags), chunk, size);
            let old = packed(&flags, chunk, size);
            prop_assert_eq!(pack(&ranges), old.clone());
            let home: Vec<PackedRun> =
                old.0.into_iter().map(|r| PackedRun { at: r.offset, ..r }).collect();
            prop_assert_eq!(in_place(&ranges), home);
        }
    }
}
