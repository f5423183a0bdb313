//! Live device allocations, tracked through the driver's allocation entry points, for
//! `--memory all`; and, for `kreplay profile --metrics`, the frees and requests that must wait
//! for the dispatches waiting for their counters (`counter_batch`).

use std::collections::BTreeMap;
use std::ffi::c_void;

use kreplay_cuda::callbacks::cbid;
use kreplay_cuda::cupti::sys as csys;
use kreplay_format::MemoryKind;

/// One change to the set of live allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Alloc {
        addr: u64,
        size: u64,
        kind: MemoryKind,
    },
    Free {
        addr: u64,
    },
    Unmap {
        addr: u64,
        size: u64,
    },
}

/// Reads an allocation callback at its EXIT site (output pointers are written by then).
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `id`, at EXIT.
pub unsafe fn decode(id: u32, params: *const c_void) -> Option<Change> {
    if params.is_null() {
        return None;
    }
    // SAFETY: in every arm, CUPTI passes the parameter struct matching the callback id; output
    // pointers point at values the driver has written when the call succeeded.
    unsafe {
        let out = |p: *mut u64| if p.is_null() { None } else { Some(*p) };
        match id {
            cbid::ALLOC => {
                let p = &*(params as *const csys::cuMemAlloc_v2_params);
                Some(Change::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: MemoryKind::Device,
                })
            }
            cbid::ALLOC_PITCH => {
                let p = &*(params as *const csys::cuMemAllocPitch_v2_params);
                let pitch = if p.pPitch.is_null() { 0 } else { *p.pPitch };
                Some(Change::Alloc {
                    addr: out(p.dptr)?,
                    size: (pitch as u64).saturating_mul(p.Height as u64),
                    kind: MemoryKind::Device,
                })
            }
            cbid::ALLOC_MANAGED => {
                let p = &*(params as *const csys::cuMemAllocManaged_params);
                Some(Change::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: MemoryKind::Managed,
                })
            }
            cbid::ALLOC_ASYNC | cbid::ALLOC_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemAllocAsync_params);
                Some(Change::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: MemoryKind::Async,
                })
            }
            cbid::ALLOC_POOL | cbid::ALLOC_POOL_PTSZ => {
                let p = &*(params as *const csys::cuMemAllocFromPoolAsync_params);
                Some(Change::Alloc {
                    addr: out(p.dptr)?,
                    size: p.bytesize as u64,
                    kind: MemoryKind::Async,
                })
            }
            cbid::FREE => {
                let p = &*(params as *const csys::cuMemFree_v2_params);
                Some(Change::Free { addr: p.dptr })
            }
            cbid::FREE_ASYNC | cbid::FREE_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemFreeAsync_params);
                Some(Change::Free { addr: p.dptr })
            }
            cbid::MAP => {
                let p = &*(params as *const csys::cuMemMap_params);
                Some(Change::Alloc {
                    addr: p.ptr,
                    size: p.size as u64,
                    kind: MemoryKind::Vmm,
                })
            }
            cbid::UNMAP => {
                let p = &*(params as *const csys::cuMemUnmap_params);
                Some(Change::Unmap {
                    addr: p.ptr,
                    size: p.size as u64,
                })
            }
            _ => None,
        }
    }
}

/// An allocation call about to run, as its ENTER site shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entering {
    /// Memory at `[addr, addr + len)` is about to be freed or unmapped (`len` 1 where the
    /// call does not say: a free names its allocation's base).
    Release { addr: u64, len: u64 },
    /// The application asks for `bytes` of device memory.
    Request { bytes: u64 },
}

/// Reads an allocation callback at its ENTER site (inputs only).
///
/// # Safety
/// `params` must be the `functionParams` of a CUPTI driver callback with id `id`.
pub unsafe fn entering(id: u32, params: *const c_void) -> Option<Entering> {
    if params.is_null() {
        return None;
    }
    // SAFETY: in every arm, CUPTI passes the parameter struct matching the callback id; only its
    // input fields are read.
    unsafe {
        match id {
            cbid::FREE => {
                let p = &*(params as *const csys::cuMemFree_v2_params);
                Some(Entering::Release {
                    addr: p.dptr,
                    len: 1,
                })
            }
            cbid::FREE_ASYNC | cbid::FREE_ASYNC_PTSZ => {
                let p = &*(params as *const csys::cuMemFreeAsync_params);
                Some(Entering::Release {
                    addr: p.dptr,
                    len: 1,
                })
            }
            cbid::UNMAP => {
                let p = &*(params as *const csys::cuMemUnmap_params);
                Some(Entering::Release {
                    addr: p.ptr,
                    len: p.size as u64,
                })
            }
            cbid::ALLOC => Some(Entering::Request {
                bytes: (*(params as *const csys::cuMemAlloc_v2_params)).bytesize as u64,
            }),
            cbid::ALLOC_MANAGED => Some(Entering::Request {
                bytes: (*(params as *const csys::cuMemAllocManaged_params)).bytesize as u64,
            }),
            cbid::ALLOC_ASYNC | cbid::ALLOC_ASYNC_PTSZ => Some(Entering::Request {
                bytes: (*(params as *const csys::cuMemAllocAsync_params)).bytesize as u64,
            }),
            cbid::ALLOC_POOL | cbid::ALLOC_POOL_PTSZ => Some(Entering::Request {
                bytes: (*(params as *const csys::cuMemAllocFromPoolAsync_params)).bytesize as u64,
            }),
            cbid::ALLOC_PITCH => {
                let p = &*(params as *const csys::cuMemAllocPitch_v2_params);
                Some(Entering::Request {
                    bytes: (p.WidthInBytes as u64).saturating_mul(p.Height as u64),
                })
            }
            _ => None,
        }
    }
}

/// The live allocations of the process.
#[derive(Debug, Default)]
pub struct AllocationTable {
    live: BTreeMap<u64, (u64, MemoryKind)>,
}

impl AllocationTable {
    pub fn apply(&mut self, c: Change) {
        match c {
            Change::Alloc { addr, size, kind } if size > 0 => {
                self.live.insert(addr, (size, kind));
            }
            Change::Alloc { .. } => {}
            Change::Free { addr } => {
                self.live.remove(&addr);
            }
            Change::Unmap { addr, size } => {
                let end = addr.saturating_add(size);
                let gone: Vec<u64> = self.live.range(addr..end).map(|(a, _)| *a).collect();
                for a in gone {
                    self.live.remove(&a);
                }
            }
        }
    }

    /// (address, size, kind) of every live allocation, by address. Contiguous VMM mappings
    /// are joined: an allocator that maps in pieces places one buffer across several.
    pub fn list(&self) -> Vec<(u64, u64, MemoryKind)> {
        let mut out: Vec<(u64, u64, MemoryKind)> = Vec::new();
        for (&a, &(s, k)) in &self.live {
            match out.last_mut() {
                Some(last)
                    if k == MemoryKind::Vmm
                        && last.2 == MemoryKind::Vmm
                        && last.0 + last.1 == a =>
                {
                    last.1 += s
                }
                _ => out.push((a, s, k)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_alloc_free_and_unmap() {
        let mut t = AllocationTable::default();
        t.apply(Change::Alloc {
            addr: 0x1000,
            size: 0x100,
            kind: MemoryKind::Device,
        });
        t.apply(Change::Alloc {
            addr: 0x4000,
            size: 0x200000,
            kind: MemoryKind::Vmm,
        });
        t.apply(Change::Alloc {
            addr: 0x9000,
            size: 0,
            kind: MemoryKind::Device,
        });
        assert_eq!(t.list().len(), 2);
        t.apply(Change::Free { addr: 0x1000 });
        assert_eq!(t.list(), vec![(0x4000, 0x200000, MemoryKind::Vmm)]);
        t.apply(Change::Unmap {
            addr: 0x4000,
            size: 0x200000,
        });
        assert!(t.list().is_empty());
        t.apply(Change::Free { addr: 0x7777 }); // unknown: ignored
    }

    #[test]
    fn contiguous_vmm_mappings_are_joined() {
        let mut t = AllocationTable::default();
        t.apply(Change::Alloc {
            addr: 0x20_0000,
            size: 0x20_0000,
            kind: MemoryKind::Vmm,
        });
        t.apply(Change::Alloc {
            addr: 0x40_0000,
            size: 0x20_0000,
            kind: MemoryKind::Vmm,
        });
        t.apply(Change::Alloc {
            addr: 0x60_0000,
            size: 0x100,
            kind: MemoryKind::Device,
        });
        t.apply(Change::Alloc {
            addr: 0x60_0100,
            size: 0x100,
            kind: MemoryKind::Device,
        });
        assert_eq!(
            t.list(),
            vec![
                (0x20_0000, 0x40_0000, MemoryKind::Vmm),
                (0x60_0000, 0x100, MemoryKind::Device),
                (0x60_0100, 0x100, MemoryKind::Device),
            ]
        );
    }
}
