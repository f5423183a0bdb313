//! Keeping the host address space free where captured device memory must go.
//!
//! With unified addressing a device virtual address is also a host virtual address, so a
//! replay can only map memory where nothing of the player process lives. The player's own
//! host mappings (libcuda, the driver's address pools, the mmap of the capture, thread stacks)
//! land where the kernel likes, so claim the captured ranges first with inaccessible
//! placeholder mappings, before CUDA initialises, and hand each one to the driver right
//! before reserving it.

/// Host address ranges held with `PROT_NONE` mappings.
#[derive(Debug, Default)]
pub struct Placeholders {
    held: Vec<(u64, u64)>,
    /// Ranges that could not be claimed (something already lives there).
    pub refused: Vec<(u64, u64)>,
}

fn map_fixed_noreplace(start: u64, len: u64) -> bool {
    // SAFETY: an anonymous, inaccessible, unreserved mapping at a fixed address that the
    // kernel refuses (MAP_FIXED_NOREPLACE) rather than replacing anything already there.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    if p as u64 != start {
        // Old kernels treat the flag as a hint: undo a mapping placed elsewhere.
        // SAFETY: unmaps exactly what this call mapped.
        unsafe { libc::munmap(p, len as usize) };
        return false;
    }
    true
}

impl Placeholders {
    /// Claims every range it can (each as one mapping).
    pub fn claim(ranges: &[(u64, u64)]) -> Placeholders {
        let mut p = Placeholders::default();
        for &(start, len) in ranges {
            if len == 0 {
                continue;
            }
            if map_fixed_noreplace(start, len) {
                p.held.push((start, len));
            } else {
                p.refused.push((start, len));
            }
        }
        p
    }

    /// Releases whatever part of `[start, start+len)` is held, so the driver can take it.
    pub fn release(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let mut keep = Vec::new();
        for &(s, l) in &self.held {
            let e = s + l;
            let (a, b) = (s.max(start), e.min(end));
            if a >= b {
                keep.push((s, l));
                continue;
            }
            // SAFETY: [a, b) lies inside a placeholder this value mapped.
            unsafe { libc::munmap(a as *mut libc::c_void, (b - a) as usize) };
            if s < a {
                keep.push((s, a - s));
            }
            if b < e {
                keep.push((b, e - b));
            }
        }
        self.held = keep;
    }

    pub fn held(&self) -> &[(u64, u64)] {
        &self.held
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for &(s, l) in &self.held {
            // SAFETY: unmaps a placeholder this value mapped and still holds.
            unsafe { libc::munmap(s as *mut libc::c_void, l as usize) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn claims_free_space_and_refuses_taken_space() {
        // Find free space by mapping and unmapping.
        let len = 1u64 << 24;
        // SAFETY: plain anonymous mapping, unmapped right after.
        let probe = unsafe {
            libc::mmap(ptr::null_mut(), len as usize, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(probe, libc::MAP_FAILED);
        let start = probe as u64;
        // SAFETY: unmaps the probe.
        unsafe { libc::munmap(probe, len as usize) };
        let mut p = Placeholders::claim(&[(start, len)]);
        assert_eq!(p.held(), &[(start, len)]);
        // The same range cannot be claimed twice.
        let q = Placeholders::claim(&[(start, len)]);
        assert_eq!(q.refused, vec![(start, len)]);
        // Releasing the middle keeps both ends.
        p.release(start + (1 << 20), 1 << 20);
        assert_eq!(p.held(), &[(start, 1 << 20), (start + (2 << 20), len - (2 << 20))]);
        drop(p);
        let r = Placeholders::claim(&[(start, len)]);
        assert_eq!(r.held().len(), 1, "released on drop");
    }
}
