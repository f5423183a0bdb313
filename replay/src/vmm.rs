//! Mapping device memory back at the virtual addresses it had in the recorded process, through
//! the virtual memory management API. The driver honours an address hint for wide reservations
//! and ignores it for small ones (DESIGN.md), so reservations are padded to `MIN_RESERVATION`
//! and several placements are tried; every result is checked against the hint.

use crate::driver::{check, sys, CuResult, CudaError};
use crate::placeholder::Placeholders;

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
pub fn granularity(ordinal: i32) -> CuResult<u64> {
    let p = prop(ordinal);
    let mut g = 0usize;
    // SAFETY: writes one size_t for a filled-in property struct.
    check(
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
    // SAFETY: writes one device pointer; the hint is advisory.
    check(
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

/// Granularity assumed before the driver can be asked (2 MiB on every current NVIDIA GPU);
/// the real one is applied when mapping.
pub const PLAN_GRANULARITY: u64 = 2 << 20;

/// Claims host placeholders for what `FixedMapping::map` will ask the driver for: one wide
/// reservation over everything when possible, otherwise each range.
pub fn claim_plan(ranges: &[(u64, u64)]) -> Placeholders {
    let merged = merge_ranges(ranges, PLAN_GRANULARITY);
    let (Some(lo), Some(hi)) = (
        merged.first().map(|r| r.0),
        merged.iter().map(|r| r.0 + r.1).max(),
    ) else {
        return Placeholders::default();
    };
    let wide = (hi - lo).max(MIN_RESERVATION);
    let p = Placeholders::claim(&[(lo, wide)]);
    if p.refused.is_empty() {
        return p;
    }
    drop(p);
    Placeholders::claim(&merged)
}

/// Device memory mapped at fixed addresses; unmapped and released on drop.
pub struct FixedMapping {
    reservations: Vec<(u64, u64)>,
    maps: Vec<(u64, u64, sys::CUmemGenericAllocationHandle)>,
    /// How many reservation attempts it took (reported by benchmarks).
    pub attempts: u32,
}

impl FixedMapping {
    /// Maps read-write device memory over each range (address, length) at exactly that address.
    /// `holds` are host placeholders over the ranges (see `claim_plan`); each is released right
    /// before the driver is asked for that range.
    pub fn map(
        ranges: &[(u64, u64)],
        ordinal: i32,
        holds: &mut Placeholders,
    ) -> Result<FixedMapping, MapError> {
        let g = granularity(ordinal)?;
        let merged = merge_ranges(ranges, g);
        let mut m = FixedMapping {
            reservations: Vec::new(),
            maps: Vec::new(),
            attempts: 0,
        };
        if merged.is_empty() {
            return Ok(m);
        }
        m.reserve_covering(&merged, g, holds)?;
        let p = prop(ordinal);
        for &(start, len) in &merged {
            let mut h = 0;
            // SAFETY: writes one handle; prop is fully initialised.
            check(
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
            // SAFETY: the range is mapped; one access descriptor.
            check(
                unsafe { sys::cuMemSetAccess(start, len as usize, &access, 1) },
                "cuMemSetAccess",
            )?;
        }
        Ok(m)
    }

    fn try_reserve(
        &mut self,
        start: u64,
        len: u64,
        holds: &mut Placeholders,
    ) -> CuResult<Option<()>> {
        self.attempts += 1;
        holds.release(start, len);
        let got = reserve(len, start)?;
        if got == start {
            self.reservations.push((start, len));
            Ok(Some(()))
        } else {
            free_reservation(got, len);
            Ok(None)
        }
    }

    fn reserve_covering(
        &mut self,
        merged: &[(u64, u64)],
        g: u64,
        holds: &mut Placeholders,
    ) -> Result<(), MapError> {
        let lo = merged[0].0;
        let hi = merged.iter().map(|(s, l)| s + l).max().unwrap_or(lo);
        let span = hi - lo;
        let wide = span.max(MIN_RESERVATION).div_ceil(g) * g;
        // One reservation over everything, padded up, then padded down, then exact.
        let mut candidates = vec![(lo, wide)];
        if wide > span && hi >= wide {
            candidates.push((hi - wide, wide));
        }
        candidates.push((lo, span));
        for (start, len) in candidates {
            if self.try_reserve(start, len, holds).ok().flatten().is_some() {
                return Ok(());
            }
        }
        // Ranges far apart: one reservation each, padded the same way.
        for &(start, len) in merged {
            let padded = len.max(MIN_RESERVATION).div_ceil(g) * g;
            if self.try_reserve(start, padded, holds).ok().flatten().is_some() {
                continue;
            }
            if self.try_reserve(start, len, holds)?.is_some() {
                continue;
            }
            self.attempts += 1;
            let got = reserve(len, start)?;
            free_reservation(got, len);
            return Err(MapError::AddressInUse {
                start,
                end: start + len,
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
        let r = merge_ranges(&[(0x20_0010, 16), (0x20_1000, 64), (0x60_0000, 1), (0, 0)], g);
        assert_eq!(r, vec![(0x20_0000, g), (0x60_0000, g)]);
        let r = merge_ranges(&[(0x10, 0x20_0000), (0x20_0000, 0x100)], g);
        assert_eq!(r, vec![(0, 2 * g)]);
    }
}
