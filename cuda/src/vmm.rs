//! Mapping device memory back at the virtual addresses it had in the recorded process, through
//! the virtual memory management API. The driver honours an address hint for wide reservations
//! and ignores it for small ones (measured on an H200: a 1.5 GiB reservation placed as asked
//! 7 times of 7, a 2 MiB one 0 of 3), so reservations are padded to `MIN_RESERVATION`
//! and several placements are tried; every result is checked against the hint.

use crate::device::Device;
use crate::error::{check, CuResult, CudaError};
use crate::sys;

/// Smallest reservation asked for: wide enough that the driver places it where asked.
pub const MIN_RESERVATION: u64 = 2 << 30;

/// Why memory could not be mapped where the capture needs it.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("device address range {start:#x}..{end:#x} is not available in this process (the driver placed it at {got:#x}); the capture's pointers cannot be honoured at their original addresses")]
    AddressInUse { start: u64, end: u64, got: u64 },
    #[error(transparent)]
    Cuda(#[from] CudaError),
}

fn prop(ordinal: i32) -> sys::CUmemAllocationProp {
    // SAFETY: CUmemAllocationProp is plain data; zero is a valid value for every field and
    // means "no handle types, no flags".
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = ordinal;
    p
}

/// Allocation granularity of the device.
pub fn granularity(device: &Device) -> CuResult<u64> {
    let p = prop(device.ordinal());
    let mut g = 0usize;
    check(
        // SAFETY: writes one size_t for a filled-in property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut g,
                &p,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        },
        "cuMemGetAllocationGranularity",
    )?;
    Ok(g.max(1) as u64)
}

fn reserve(size: u64, hint: u64) -> CuResult<u64> {
    let mut p = 0;
    check(
        // SAFETY: writes one device pointer; the hint is advisory.
        unsafe { sys::cuMemAddressReserve(&mut p, size as usize, 0, hint, 0) },
        "cuMemAddressReserve",
    )?;
    Ok(p)
}

fn free_reservation(base: u64, size: u64) {
    // SAFETY: frees a reservation made by `reserve` with the same size.
    unsafe {
        sys::cuMemAddressFree(base, size as usize);
    }
}

/// Debug aid: the process mappings around an address range.
fn dump_maps_near(start: u64, len: u64) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let window = 8u64 << 30;
    for line in maps.lines() {
        let Some((range, _)) = line.split_once(' ') else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        if b + window > start && a < start + len + window {
            eprintln!("kreplay: vmm:   {line}");
        }
    }
}

/// Rounds ranges out to `g` and merges those that touch.
pub fn merge_ranges(ranges: &[(u64, u64)], g: u64) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|(_, len)| *len > 0)
        .map(|&(a, len)| {
            let start = a / g * g;
            let end = (a.saturating_add(len)).div_ceil(g).saturating_mul(g);
            (start, end)
        })
        .collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// Hint alignments tried, smallest first: the driver places large reservations on its own
/// alignment and rounds a hint up to it.
const HINT_ALIGNMENTS: [u64; 7] = [
    32 << 20,
    64 << 20,
    128 << 20,
    256 << 20,
    512 << 20,
    1 << 30,
    2 << 30,
];

/// Device memory mapped at fixed addresses; unmapped and released on drop.
pub struct FixedMapping {
    reservations: Vec<(u64, u64)>,
    maps: Vec<(u64, u64, sys::CUmemGenericAllocationHandle)>,
}

impl FixedMapping {
    /// Maps read-write device memory over each range (address, length) at exactly that address.
    pub fn map(ranges: &[(u64, u64)], device: &Device) -> Result<FixedMapping, MapError> {
        let ordinal = device.ordinal();
        let g = granularity(device)?;
        let merged = merge_ranges(ranges, g);
        let mut m = FixedMapping {
            reservations: Vec::new(),
            maps: Vec::new(),
        };
        if merged.is_empty() {
            return Ok(m);
        }
        m.reserve_covering(&merged, g)?;
        let p = prop(ordinal);
        for &(start, len) in &merged {
            let mut h = 0;
            check(
                // SAFETY: writes one handle; prop is fully initialised.
                unsafe { sys::cuMemCreate(&mut h, len as usize, &p, 0) },
                "cuMemCreate",
            )?;
            // SAFETY: [start, start+len) lies inside a reservation we own and is unmapped.
            let r = check(
                unsafe { sys::cuMemMap(start, len as usize, 0, h, 0) },
                "cuMemMap",
            );
            if let Err(e) = r {
                // SAFETY: releases the handle just created.
                unsafe { sys::cuMemRelease(h) };
                return Err(e.into());
            }
            m.maps.push((start, len, h));
            let access = sys::CUmemAccessDesc {
                location: p.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            check(
                // SAFETY: the range is mapped; one access descriptor.
                unsafe { sys::cuMemSetAccess(start, len as usize, &access, 1) },
                "cuMemSetAccess",
            )?;
        }
        Ok(m)
    }

    fn try_reserve(&mut self, start: u64, len: u64) -> CuResult<Option<()>> {
        let got = reserve(len, start)?;
        if std::env::var_os("KREPLAY_DEBUG_VMM").is_some() {
            eprintln!("kreplay: vmm: reserve {len:#x} at {start:#x} -> {got:#x}");
            if got != start {
                dump_maps_near(start, len);
            }
        }
        if got == start {
            self.reservations.push((start, len));
            Ok(Some(()))
        } else {
            free_reservation(got, len);
            Ok(None)
        }
    }

    fn reserve_covering(&mut self, merged: &[(u64, u64)], g: u64) -> Result<(), MapError> {
        let lo = merged[0].0;
        let hi = merged.iter().map(|(s, l)| s + l).max().unwrap_or(lo);
        // One reservation over everything, starting at an aligned address below the lowest
        // range: the driver rounds an unaligned hint up (measured: to 32 MiB), which would
        // miss the range.
        for align in HINT_ALIGNMENTS {
            let start = lo / align * align;
            let len = (hi.max(start + MIN_RESERVATION) - start).div_ceil(g) * g;
            if self.try_reserve(start, len).ok().flatten().is_some() {
                return Ok(());
            }
        }
        // Ranges far apart: one reservation each, the same way.
        for &(range_start, range_len) in merged {
            let mut done = false;
            for align in HINT_ALIGNMENTS {
                let start = range_start / align * align;
                let end = range_start + range_len;
                let len = (end.max(start + MIN_RESERVATION) - start).div_ceil(g) * g;
                // Never overlap a reservation already made for an earlier range.
                if self
                    .reservations
                    .iter()
                    .any(|&(s, l)| start < s + l && s < start + len)
                {
                    continue;
                }
                if self.try_reserve(start, len).ok().flatten().is_some() {
                    done = true;
                    break;
                }
            }
            if done
                || self
                    .reservations
                    .iter()
                    .any(|&(s, l)| range_start >= s && range_start + range_len <= s + l)
            {
                continue;
            }
            let got = reserve(range_len, range_start)?;
            free_reservation(got, range_len);
            return Err(MapError::AddressInUse {
                start: range_start,
                end: range_start + range_len,
                got,
            });
        }
        Ok(())
    }
}

impl Drop for FixedMapping {
    fn drop(&mut self) {
        for &(start, len, h) in &self.maps {
            // SAFETY: unmaps and releases what `map` mapped.
            unsafe {
                sys::cuMemUnmap(start, len as usize);
                sys::cuMemRelease(h);
            }
        }
        for &(base, len) in &self.reservations {
            free_reservation(base, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::merge_ranges;

    #[test]
    fn ranges_are_rounded_and_merged() {
        let g = 0x20_0000;
        let r = merge_ranges(
            &[(0x20_0010, 16), (0x20_1000, 64), (0x60_0000, 1), (0, 0)],
            g,
        );
        assert_eq!(r, vec![(0x20_0000, g), (0x60_0000, g)]);
        let r = merge_ranges(&[(0x10, 0x20_0000), (0x20_0000, 0x100)], g);
        assert_eq!(r, vec![(0, 2 * g)]);
    }
}
