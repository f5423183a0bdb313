//! Snapshots still in device scratch while a writer thread writes their capture. The
//! application may destroy the context first (`cuCtxDestroy`, `cudaDeviceReset` or
//! `cuDevicePrimaryCtxReset` right after its work): CUPTI announces the destruction before it
//! happens, and that callback brings every snapshot of the context to the host before it
//! returns. Otherwise the writer brings them home one region at a time (host memory stays at
//! one region's pre and post bytes).

use std::sync::{Arc, Mutex, MutexGuard};

use kreplay_cuda::{copy_dtoh, DeviceBuffer};

use crate::capture::{changed_chunks, Bytes, PostChunk, Snapshot};
use crate::error::RecordError;

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
}

/// A region's bytes on the host: its pre bytes and the post chunks that differ.
pub struct RegionBytes {
    pub region: kreplay_format::Region,
    pub pre: Vec<u8>,
    pub post: Vec<PostChunk>,
}

fn lock(m: &Mutex<Home>) -> MutexGuard<'_, Home> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Brings a device-scratch buffer to the host, between measurements (see `quiet`).
fn fetch(buf: &DeviceBuffer) -> Result<Vec<u8>, RecordError> {
    let mut v = vec![0u8; buf.len()];
    crate::quiet::outside_measurement(|| copy_dtoh(&mut v, buf.ptr()))
        .map_err(RecordError::ReadBack)?;
    Ok(v)
}

/// Turns a device snapshot into a host one: pre bytes to the host, post compared and kept as
/// the chunks that changed (appended to `post`); the scratch is freed. Host snapshots are left.
fn bring_home(s: &mut Snapshot, post: &mut Vec<PostChunk>) -> Result<(), RecordError> {
    let Bytes::Device(buf) = &s.pre else {
        return Ok(());
    };
    let pre = fetch(buf)?;
    if let Some(post_buf) = s.post.take() {
        let now = fetch(&post_buf)?;
        crate::quiet::outside_measurement(|| drop(post_buf));
        post.extend(changed_chunks(
            s.region.region_id,
            s.region.chunk_size as usize,
            &pre,
            &now,
        ));
    }
    let scratch = std::mem::replace(&mut s.pre, Bytes::Host(pre));
    crate::quiet::outside_measurement(|| drop(scratch));
    Ok(())
}

impl InFlight {
    pub fn new(context: usize, snapshots: Vec<Snapshot>) -> Arc<InFlight> {
        Arc::new(InFlight {
            context,
            home: Mutex::new(Home {
                snapshots,
                post: Vec::new(),
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

    /// The `i`th region's bytes, brought home now if they are still on the device; its pre
    /// bytes leave the snapshot (host memory is freed as the writer goes).
    /// `None` past the last region.
    pub fn take(&self, i: usize) -> Option<Result<RegionBytes, RecordError>> {
        let mut h = lock(&self.home);
        let s = h.snapshots.get_mut(i)?;
        let mut post = Vec::new();
        if let Err(e) = bring_home(s, &mut post) {
            return Some(Err(e));
        }
        let pre = match std::mem::replace(&mut s.pre, Bytes::Host(Vec::new())) {
            Bytes::Host(v) => v,
            Bytes::Device(_) => Vec::new(), // bring_home made it Host
        };
        Some(Ok(RegionBytes {
            region: s.region.clone(),
            pre,
            post,
        }))
    }

    /// Post chunks the teardown callback brought home.
    pub fn take_early_post(&self) -> Vec<PostChunk> {
        std::mem::take(&mut lock(&self.home).post)
    }

    /// Brings every snapshot home (the context is about to be destroyed).
    pub fn evacuate(&self) -> Result<(), RecordError> {
        let mut h = lock(&self.home);
        let Home { snapshots, post } = &mut *h;
        for s in snapshots.iter_mut() {
            bring_home(s, post)?;
        }
        Ok(())
    }
}
