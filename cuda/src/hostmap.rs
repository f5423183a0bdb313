//! Page-locked host memory a kernel reaches through a device pointer, placed for a replay: at
//! the address it had in the recorded process (an anonymous mapping made there and registered
//! with the driver; under unified addressing its device address is its host address), or
//! anywhere (`PinnedBuffer::mapped`) when that address is taken.

use std::ffi::c_void;

use crate::error::check;
use crate::sys;
use crate::vmm::{merge_ranges, MapError};

const PAGE: u64 = 4096;

/// Host memory mapped and registered at fixed addresses; unregistered and unmapped on drop.
pub struct HostMapping {
    pieces: Vec<Piece>,
}

struct Piece {
    start: u64,
    len: u64,
    registered: bool,
}

impl Drop for Piece {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `HostMapping::map` (and registered when flagged);
        // nothing else refers to it once the mapping is dropped.
        unsafe {
            if self.registered {
                sys::cuMemHostUnregister(self.start as *mut c_void);
            }
            libc::munmap(self.start as *mut c_void, self.len as usize);
        }
    }
}

impl HostMapping {
    /// Maps zeroed, page-locked, device-visible host memory over each range (address, length),
    /// rounded out to pages, at exactly that address.
    pub fn map(ranges: &[(u64, u64)]) -> Result<HostMapping, MapError> {
        let mut m = HostMapping { pieces: Vec::new() };
        for (start, len) in merge_ranges(ranges, PAGE) {
            let end = start.saturating_add(len);
            let in_use = |got: u64| MapError::AddressInUse { start, end, got };
            let Ok(n) = usize::try_from(len) else {
                return Err(in_use(0));
            };
            // SAFETY: an anonymous private mapping; MAP_FIXED_NOREPLACE never replaces an
            // existing mapping (a kernel without it takes the address as a hint, checked below).
            let p = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    n,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(in_use(0));
            }
            let mut piece = Piece {
                start: p as u64,
                len,
                registered: false,
            };
            if p as u64 != start {
                return Err(in_use(p as u64));
            }
            check(
                // SAFETY: [p, p+n) is a mapping we own; DEVICEMAP makes it reachable from kernels.
                unsafe { sys::cuMemHostRegister_v2(p, n, sys::CU_MEMHOSTREGISTER_DEVICEMAP) },
                "cuMemHostRegister",
            )?;
            piece.registered = true;
            let mut device = 0;
            check(
                // SAFETY: writes one device pointer for registered memory.
                unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, p, 0) },
                "cuMemHostGetDevicePointer",
            )?;
            m.pieces.push(piece);
            if device != start {
                return Err(in_use(device));
            }
        }
        Ok(m)
    }
}
