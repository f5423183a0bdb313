//! Snapshots still in device scratch while a writer thread writes their capture. The
//! application may destroy the context first (`cuCtxDestroy`, `cudaDeviceReset` or
//! `cuDevicePrimaryCtxReset` right after its work): CUPTI announces the destruction before it
//! happens, and that callback brings every snapshot of the context to the host before it
//! returns. Otherwise the writer streams them to the file one region at a time, through a ring
//! of page-locked buffers (`readback`): host memory stays at the ring and the writer's batch,
//! whatever the regions' sizes.

use std::io::{Seek, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use kreplay_cuda::copy_dtoh;
use kreplay_engine::write_set::Evidence;
use kreplay_format::{CaptureWriter, MemoryState, RegionExtents, MIN_EXTENT_PAGE};

use crate::compare_later::CompareLater;
use crate::error::RecordError;
use crate::footprint::RegionSpan;
use crate::quiet::Pacing;
use crate::readback;
use crate::snapshot::{mask_absent, post_chunks, Bytes, PostChunk, PostScratch, Scratch, Snapshot};
use crate::staging_rings::Lent;

/// One capture's snapshots, shared by its writer thread and the teardown callback.
pub struct InFlight {
    /// The context the scratch buffers belong to (`ContextHandle::id`); 0 when unknown.
    pub context: usize,
    home: Mutex<Home>,
}

struct Home {
    snapshots: Vec<Snapshot>,
    /// Post chunks of regions brought home by the teardown callback.
    post: Vec<PostChunk>,
    /// The slab's regions still to compare (`compare_later`), before any is written or
    /// brought home.
    later: Option<CompareLater>,
}

impl Home {
    /// Compares what `later` holds, once; on the GPU when `on_gpu` (the snapshots' context is
    /// current), else each region is kept whole for the host to compare.
    fn compare_later(&mut self, on_gpu: bool, pacing: Pacing) {
        if let Some(later) = self.later.take() {
            later.compare(&mut self.snapshots, on_gpu, pacing);
        }
    }
}

fn lock(m: &Mutex<Home>) -> MutexGuard<'_, Home> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Brings `len` bytes of device scratch at `addr` to the host, as `pacing` says (see `quiet`).
/// Only for the teardown path and the host-compare fallback.
fn fetch(addr: u64, len: u64, pacing: Pacing) -> Result<Vec<u8>, RecordError> {
    let n = usize::try_from(len).map_err(|_| RecordError::RegionTooLarge(len))?;
    let mut v = vec![0u8; n];
    // SAFETY: callers pass our own scratch buffers (`addr`, `v.len()` bytes), read after the
    // copies into them completed.
    crate::quiet::paced(pacing, || unsafe { copy_dtoh(&mut v, addr) })
        .map_err(RecordError::ReadBack)?;
    Ok(v)
}

/// Drops a region's scratch (freeing its buffer, or its slab with the last stretch), as
/// `pacing` says.
fn free(buf: Scratch, pacing: Pacing) {
    crate::quiet::paced(pacing, || drop(buf));
}

/// The post chunks of `post` as host chunks (the scratch is freed); `addr` is where the
/// region's bytes are in this process.
fn post_home(
    post: PostScratch,
    pre: &[u8],
    (region, addr, touched): (&kreplay_format::Region, u64, Option<&[(u64, u64)]>),
    out: &mut Vec<PostChunk>,
    pacing: Pacing,
) -> Result<(), RecordError> {
    let first = out.len();
    post_chunks_home(post, pre, (region, addr), out, pacing)?;
    mask_absent(touched, &mut out[first..]);
    Ok(())
}

/// `post_home`'s chunks, before their absent bytes are masked.
fn post_chunks_home(
    post: PostScratch,
    pre: &[u8],
    (region, addr): (&kreplay_format::Region, u64),
    out: &mut Vec<PostChunk>,
    pacing: Pacing,
) -> Result<(), RecordError> {
    let Some(buf) = post.buf else {
        return Ok(());
    };
    let cs = region.chunk_size.max(1);
    match post.runs {
        None => {
            let now = fetch(buf.ptr(), buf.len() as u64, pacing)?;
            let evidence = Evidence::Bytes {
                before: pre,
                after: &now,
            };
            let written = post
                .footprint
                .written(RegionSpan::of(region, addr), evidence);
            out.extend(post_chunks(region.region_id, &written, cs, &now));
        }
        Some(runs) => {
            for r in runs {
                let bytes = fetch(buf.ptr() + r.at, r.len, pacing)?;
                for (k, c) in bytes.chunks(cs as usize).enumerate() {
                    out.push((region.region_id, r.offset + k as u64 * cs, c.to_vec()));
                }
            }
        }
    }
    free(buf, pacing);
    Ok(())
}

/// Turns a device snapshot into a host one: pre bytes to the host, post kept as the chunks
/// that changed (appended to `post`); the scratch is freed. Host snapshots are left.
fn bring_home(
    s: &mut Snapshot,
    post: &mut Vec<PostChunk>,
    pacing: Pacing,
) -> Result<(), RecordError> {
    let Bytes::Device(buf) = &s.pre else {
        return Ok(());
    };
    let pre = fetch(buf.ptr(), buf.len() as u64, pacing)?;
    if let Some(p) = s.post.take() {
        let at = (&s.region, s.device_addr, s.touched.as_deref());
        post_home(p, &pre, at, post, pacing)?;
    }
    if let Bytes::Device(scratch) = std::mem::replace(&mut s.pre, Bytes::Host(pre)) {
        free(scratch, pacing);
    }
    Ok(())
}

/// What a region put in the file: memory bytes (pre and post, uncompressed).
pub type RawBytes = u64;

impl InFlight {
    /// `later`: the slab's regions whose comparison was left to the writer.
    pub fn new(
        context: usize,
        snapshots: Vec<Snapshot>,
        later: Option<CompareLater>,
    ) -> Arc<InFlight> {
        Arc::new(InFlight {
            context,
            home: Mutex::new(Home {
                snapshots,
                post: Vec::new(),
                later,
            }),
        })
    }

    /// Whether any snapshot is still in device scratch.
    pub fn on_device(&self) -> bool {
        lock(&self.home)
            .snapshots
            .iter()
            .any(|s| matches!(s.pre, Bytes::Device(_)))
    }

    /// The staging size the ring needs: for the largest region in device scratch, up to
    /// `staging_rings::MOST_BYTES` (small captures pin little).
    fn staging_bytes(snapshots: &[Snapshot]) -> usize {
        let on_device = || {
            snapshots
                .iter()
                .filter(|s| matches!(s.pre, Bytes::Device(_)))
        };
        let largest = on_device()
            .map(|s| s.region.size.next_multiple_of(s.region.chunk_size.max(1)))
            .max()
            .unwrap_or(0);
        let chunk = on_device().map(|s| s.region.chunk_size).max().unwrap_or(0);
        crate::staging_rings::buffer_bytes(largest, chunk)
    }

    /// Declares the `i`th region in `w` and writes its memory: streamed from device scratch
    /// when it is there, else from the host copy. Its bytes leave the snapshot (host and
    /// device memory are freed as the writer goes). `None` past the last region.
    /// `progress` is told of each stretch of pre bytes written.
    pub(crate) fn write_region<W: Write + Seek>(
        &self,
        i: usize,
        w: &mut CaptureWriter<W>,
        ring: &mut Option<Lent>,
        progress: &dyn Fn(u64),
    ) -> Option<Result<RawBytes, RecordError>> {
        let mut h = lock(&self.home);
        // The writer made the capture's context current.
        h.compare_later(true, Pacing::Writer);
        // Sized once, when the ring is made (for the first region in device scratch): not for
        // each region before it (a capture of host snapshots scanned them all per region).
        let on_device = |s: &Snapshot| matches!(s.pre, Bytes::Device(_));
        let staging = if ring.is_none() && h.snapshots.get(i).is_some_and(on_device) {
            Self::staging_bytes(&h.snapshots)
        } else {
            0
        };
        let s = h.snapshots.get_mut(i)?;
        let written = write_snapshot(s, w, ring, (self.context, staging), progress);
        Some(written)
    }

    /// The pre bytes of every region (what the writer's progress counts).
    pub fn total_bytes(&self) -> u64 {
        lock(&self.home)
            .snapshots
            .iter()
            .map(|s| s.region.size)
            .sum()
    }

    /// Post chunks the teardown callback brought home.
    pub fn take_early_post(&self) -> Vec<PostChunk> {
        std::mem::take(&mut lock(&self.home).post)
    }

    /// Brings every snapshot home (the context is about to be destroyed).
    pub fn evacuate(&self) -> Result<(), RecordError> {
        let mut h = lock(&self.home);
        // The context about to be destroyed is current; a capture whose context is not known
        // may belong to another. Unpaced: this callback does not wait for other threads'
        // stalls (`quiet::Pacing`).
        h.compare_later(self.context != 0, Pacing::Unpaced);
        let Home {
            snapshots, post, ..
        } = &mut *h;
        for s in snapshots.iter_mut() {
            bring_home(s, post, Pacing::Unpaced)?;
        }
        Ok(())
    }
}

fn write_snapshot<W: Write + Seek>(
    s: &mut Snapshot,
    w: &mut CaptureWriter<W>,
    ring: &mut Option<Lent>,
    (context, staging): (usize, usize),
    progress: &dyn Fn(u64),
) -> Result<RawBytes, RecordError> {
    let format = RecordError::Format;
    let (id, size, cs) = (s.region.region_id, s.region.size, s.region.chunk_size);
    // Written during the stall (it did not fit in device scratch): declared and stored.
    if let Some(spilled) = &s.spilled {
        progress(size);
        return Ok(spilled.raw);
    }
    w.region(&s.region).map_err(format)?;
    if let Some(present) = &s.touched {
        w.region_extents(&RegionExtents {
            region_id: id,
            page_size: MIN_EXTENT_PAGE,
            present: present.clone(),
        })
        .map_err(format)?;
    }
    // A whole copy the GPU could not compare is compared on the host (bounded by the region).
    let unscanned = matches!(
        &s.post,
        Some(PostScratch {
            buf: Some(_),
            runs: None,
            ..
        })
    );
    if unscanned {
        let mut post = Vec::new();
        bring_home(s, &mut post, Pacing::Writer)?;
        let raw = write_host(s, w)?;
        progress(size);
        let mut extra = 0;
        for (region, offset, bytes) in &post {
            extra += bytes.len() as u64;
            w.memory(*region, MemoryState::Post, *offset, bytes)
                .map_err(format)?;
        }
        return Ok(raw + extra);
    }
    let Bytes::Device(pre) = &s.pre else {
        let raw = write_host(s, w)?;
        progress(size);
        return Ok(raw);
    };
    if ring.is_none() {
        let made = crate::staging_rings::take(context, staging.max(1));
        *ring = Some(made.map_err(RecordError::cuda("allocating page-locked staging"))?);
    }
    let Some(Lent { ring: r, .. }) = ring.as_mut() else {
        return Err(RecordError::NoContext);
    };
    let cap = r.capacity() as u64;
    let present = s.touched.as_deref();
    let copied = readback::chunks_to_copy(size, cs, s.pre_nonzero.as_deref(), present);
    let steps = readback::pre_steps(pre.ptr(), size, cs, copied.as_deref(), cap);
    readback::write_steps(
        r,
        w,
        (id, MemoryState::Pre, present),
        (&steps, Pacing::Writer),
        progress,
    )?;
    let mut raw = size;
    if let Some(post) = s.post.take() {
        if let (Some(buf), Some(runs)) = (&post.buf, &post.runs) {
            let steps = readback::post_steps(buf.ptr(), runs, cs, cap);
            let to = (id, MemoryState::Post, present);
            raw += readback::write_steps(r, w, to, (&steps, Pacing::Writer), &|_| {})?;
        }
        if let Some(buf) = post.buf {
            free(buf, Pacing::Writer);
        }
    }
    if let Bytes::Device(scratch) = std::mem::replace(&mut s.pre, Bytes::Host(Vec::new())) {
        free(scratch, Pacing::Writer);
    }
    Ok(raw)
}

/// Writes a host snapshot's pre bytes (their memory is freed after).
fn write_host<W: Write + Seek>(
    s: &mut Snapshot,
    w: &mut CaptureWriter<W>,
) -> Result<RawBytes, RecordError> {
    let mut pre = match std::mem::replace(&mut s.pre, Bytes::Host(Vec::new())) {
        Bytes::Host(v) => v,
        Bytes::Device(_) => Vec::new(),
    };
    if let Some(present) = &s.touched {
        kreplay_format::extents::zero_absent(present, 0, &mut pre);
    }
    w.memory(s.region.region_id, MemoryState::Pre, 0, &pre)
        .map_err(RecordError::Format)?;
    Ok(s.region.size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::{
        CaptureHead, Dispatch, MemoryKind, ModuleImage, ModuleKind, Region, RegionRole,
        WriterOptions,
    };
    use std::io::Cursor;

    const PAGE: u64 = MIN_EXTENT_PAGE as u64;

    // Catches: a region with touched pages written whole (no REGION_EXTENTS), its absent bytes
    // stored as the application's (the writer refuses the capture then), a chunk holding no
    // touched page stored anyway, or a post chunk's untouched bytes kept.
    #[test]
    fn a_snapshot_by_touched_pages_is_written_with_its_extents_and_zeros_elsewhere() {
        let size = 9 * PAGE + 100;
        let region = Region {
            region_id: 0,
            address: 0x7000_0000,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 2 * PAGE,
        };
        let pre: Vec<u8> = (0..size).map(|i| (i % 251) as u8 | 1).collect();
        // Pages 1 and 2 (one extent over two chunks), and the short last page.
        let present = kreplay_format::extents::extents_of_pages(&[1, 2, 9], PAGE, size);
        let snapshot = Snapshot {
            region: region.clone(),
            device_addr: region.address,
            pre: Bytes::Host(pre.clone()),
            post: None,
            pre_nonzero: None,
            spilled: None,
            array: None,
            touched: Some(present.clone()),
            kernel_readable: false,
        };
        // A post chunk over pages 2 and 3, page 3 untouched.
        let mut post: Vec<PostChunk> = vec![(0, 2 * PAGE, vec![7u8; (2 * PAGE) as usize])];
        mask_absent(Some(&present), &mut post);
        assert!(post[0].2[..PAGE as usize].iter().all(|&b| b == 7));
        assert!(post[0].2[PAGE as usize..].iter().all(|&b| b == 0));

        let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [0; 16], WriterOptions::default())
            .expect("writer");
        let d = Dispatch::of_kernel("k");
        let module = ModuleImage {
            module_id: 0,
            kind: ModuleKind::Cubin,
            arch: 90,
            image: vec![1, 2, 3],
        };
        w.head(&CaptureHead {
            info: None,
            device: None,
            modules: std::slice::from_ref(&module),
            dispatch: &d,
        })
        .expect("head");
        let flight = InFlight::new(0, vec![snapshot], None);
        let raw = flight
            .write_region(0, &mut w, &mut None, &|_| {})
            .expect("region 0")
            .expect("written");
        assert_eq!(raw, size);
        for (id, offset, bytes) in &post {
            w.memory(*id, MemoryState::Post, *offset, bytes)
                .expect("post");
        }
        w.tail(&kreplay_format::CaptureTail {
            globals: &[],
            textures: &Default::default(),
            pointer_slots: &[],
            timing: None,
            graph: None,
            redaction: None,
            annotations: &[],
        })
        .expect("tail");
        let file = w.finish().expect("finish").into_inner();

        let cap = kreplay_format::Capture::parse(&file).expect("parse");
        let extents = cap.extents(0).expect("the region has extents");
        assert_eq!(extents.present, present);
        assert_eq!(
            kreplay_format::extents::extents_problem(&region, extents),
            None
        );
        // Chunks 0 (page 1), 1 (page 2) and 4 (the last page): chunks 2 and 3 hold no touched
        // page and are not stored.
        let stored: Vec<u64> = cap.chunks(0, MemoryState::Pre).map(|c| c.offset).collect();
        assert_eq!(stored, vec![0, 2 * PAGE, 8 * PAGE]);
        for c in cap.chunks(0, MemoryState::Pre) {
            let mut buf = vec![0u8; c.raw_len as usize];
            cap.read_chunk_into(c, &mut buf).expect("chunk");
            for (k, &b) in buf.iter().enumerate() {
                let at = c.offset + k as u64;
                let want = if kreplay_format::extents::is_present(&present, at, 1) {
                    pre[at as usize]
                } else {
                    0
                };
                assert_eq!(b, want, "byte {at}");
            }
        }
        assert_eq!(cap.chunks(0, MemoryState::Post).count(), 1);
    }
}
