//! Live device allocations, tracked through the driver's allocation entry points (decoded by
//! `kreplay_cuda::cupti_events`), for `--memory all`.

use std::collections::BTreeMap;

use kreplay_cuda::cupti_events::{AllocationChange, AllocationKind};
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

impl From<AllocationChange> for Change {
    fn from(c: AllocationChange) -> Change {
        match c {
            AllocationChange::Alloc { addr, size, kind } => Change::Alloc {
                addr,
                size,
                kind: memory_kind(kind),
            },
            AllocationChange::Free { addr } => Change::Free { addr },
            AllocationChange::Unmap { addr, size } => Change::Unmap { addr, size },
        }
    }
}

/// The capture format's name for an allocator.
fn memory_kind(k: AllocationKind) -> MemoryKind {
    match k {
        AllocationKind::Device => MemoryKind::Device,
        AllocationKind::Managed => MemoryKind::Managed,
        AllocationKind::Async => MemoryKind::Async,
        AllocationKind::Vmm => MemoryKind::Vmm,
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
    fn decoded_changes_keep_their_allocator() {
        let cases = [
            (AllocationKind::Device, MemoryKind::Device),
            (AllocationKind::Managed, MemoryKind::Managed),
            (AllocationKind::Async, MemoryKind::Async),
            (AllocationKind::Vmm, MemoryKind::Vmm),
        ];
        for (from, to) in cases {
            let c: Change = AllocationChange::Alloc {
                addr: 0x1000,
                size: 64,
                kind: from,
            }
            .into();
            assert_eq!(
                c,
                Change::Alloc {
                    addr: 0x1000,
                    size: 64,
                    kind: to
                }
            );
        }
        let unmap: Change = AllocationChange::Unmap { addr: 8, size: 16 }.into();
        assert_eq!(unmap, Change::Unmap { addr: 8, size: 16 });
        let free: Change = AllocationChange::Free { addr: 8 }.into();
        assert_eq!(free, Change::Free { addr: 8 });
    }

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
