//! The slab's regions compared after the application went on. When the snapshot slab has a
//! second half (`snapshot::queue_into_slab`), the step's end copies every slab region whole
//! into it with one launch, and the application goes on: the comparison that finds each
//! region's write set (a scan over 10,000 regions is host work per region, about 1.5 ms of a
//! pointer table's stall on the H200) runs on the writer thread, between both halves of our
//! own slab, before the first region is written (or in the teardown callback, before the
//! snapshots come home).

use std::sync::Arc;

use kreplay_cuda::many::ManyScan;
use kreplay_cuda::Stream;
use kreplay_engine::write_set::Evidence;

use crate::device_resources::with_writer_chunk_kernels;
use crate::footprint::{Footprint, RegionSpan};
use crate::quiet::Pacing;
use crate::readback;
use crate::snapshot::{in_slab, many_scans, Bytes, ChunkBits, PostScratch, Snapshot};

/// The slab regions whose post-dispatch bytes were copied whole into the slab's second half
/// and are still to be compared.
pub struct CompareLater {
    /// How far the second half is from the first: a region's bytes after the step are this
    /// many bytes past its bytes before.
    pub half: u64,
    /// Decides each region's write set from the chunks that changed.
    pub footprint: Arc<dyn Footprint>,
}

/// Whether `s` waits for `CompareLater`: its pre bytes in the slab and no post state yet.
fn waits(s: &Snapshot) -> bool {
    s.post.is_none() && in_slab(s)
}

/// `KREPLAY_DEBUG_POST=now`: the slab compared during the stall, as before the second half
/// (the same build's baseline, a measurement aid).
pub(crate) fn switched_off() -> bool {
    static NOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NOW.get_or_init(|| std::env::var_os("KREPLAY_DEBUG_POST").is_some_and(|v| v == "now"))
}

impl CompareLater {
    /// Gives each waiting snapshot its post state: the chunks that changed, found by one GPU
    /// scan of both halves, kept where they are in the second half. When the scan cannot run,
    /// each region's second-half bytes are kept whole, compared on the host when written.
    /// `on_gpu` false (the context they belong to is not known to be current): every region
    /// kept whole. `pacing`: the writer's scan waits for windows, a teardown's does not.
    pub(crate) fn compare(&self, snapshots: &mut [Snapshot], on_gpu: bool, pacing: Pacing) {
        let waiting: Vec<usize> = (0..snapshots.len())
            .filter(|&i| waits(&snapshots[i]))
            .collect();
        if waiting.is_empty() {
            return;
        }
        // Built before the measurement window is kept out: host work only. A region's bytes
        // after the step are `half` past its bytes before.
        let scans = on_gpu
            .then(|| many_scans(snapshots, &waiting, |_, pre| pre.ptr() + self.half))
            .flatten();
        let flags = scans.as_ref().and_then(|(scans, _)| {
            crate::quiet::paced(pacing, || {
                let stream = Stream::new().ok()?;
                // SAFETY: each scan reads a region's two stretches of our own slab, both
                // written (the copies' stream was synchronised before the application went
                // on), which lives while the snapshots hold it. The writer's own kernels: the
                // application's next capture never waits for this scan's GPU time.
                with_writer_chunk_kernels(|k| unsafe { k.scan_many(scans, &stream) }).ok()
            })
        });
        match (scans, flags) {
            (Some((scans, _)), Some(flags)) => self.take_flags(snapshots, &waiting, &scans, &flags),
            _ => {
                for &i in &waiting {
                    self.keep_whole(&mut snapshots[i]);
                }
            }
        }
    }

    /// Each waiting snapshot's write set from its stretch of `flags`, its runs where they are
    /// in the second half.
    fn take_flags(
        &self,
        snapshots: &mut [Snapshot],
        waiting: &[usize],
        scans: &[ManyScan],
        flags: &kreplay_cuda::chunks::ChunkFlags,
    ) {
        for (&i, scan) in waiting.iter().zip(scans) {
            let s = &mut snapshots[i];
            let chunks = s.region.size.div_ceil(s.region.chunk_size) as usize;
            let of = scan.first_flag..scan.first_flag + chunks;
            let (Some(changed), Some(nonzero)) =
                (flags.changed.get(of.clone()), flags.nonzero.get(of))
            else {
                self.keep_whole(s);
                continue;
            };
            let span = RegionSpan::of(&s.region, s.device_addr);
            let written = self.footprint.written(span, Evidence::Changed(changed));
            let runs = readback::in_place(&written);
            let buf = match &s.pre {
                Bytes::Device(pre) if !runs.is_empty() => Some(pre.shifted(self.half)),
                _ => None,
            };
            s.post = Some(PostScratch {
                buf,
                runs: Some(runs),
                footprint: self.footprint.clone(),
            });
            s.pre_nonzero = Some(ChunkBits::of(nonzero));
        }
    }

    /// The region's second-half bytes whole, compared on the host when written.
    fn keep_whole(&self, s: &mut Snapshot) {
        if let Bytes::Device(pre) = &s.pre {
            s.post = Some(PostScratch {
                buf: Some(pre.shifted(self.half)),
                runs: None,
                footprint: self.footprint.clone(),
            });
        }
    }
}
