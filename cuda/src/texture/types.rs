//! What the driver says CUDA arrays and texture/surface objects are, as plain integers
//! (`CUDA_ARRAY3D_DESCRIPTOR`, `CUDA_RESOURCE_DESC`, `CUDA_TEXTURE_DESC`,
//! `CUDA_RESOURCE_VIEW_DESC`). These are the CUDA layer's own types: the capture format keeps
//! its on-disk twins and the crates that use both convert at the seam, so this crate depends on
//! nothing of kreplay's. Values a newer driver or a damaged file may hold stay integers.

/// `CUDA_ARRAY3D_LAYERED`.
pub const ARRAY_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_CUBEMAP`.
pub const ARRAY_CUBEMAP: u32 = 0x04;
/// Most mip levels an array can have (2^31 texels wide is beyond any device).
pub const MAX_MIP_LEVELS: u32 = 32;

/// A CUDA array or mipmapped array: level 0's `CUDA_ARRAY3D_DESCRIPTOR` and the level count.
/// Its texels, packed, are level after level, each slice after slice (depth, layers, cube
/// faces: as `cuMemcpy3D` counts them), rows of `width x element size` bytes without pitch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrayDesc {
    /// Height 0 for 1D, depth 0 for 1D/2D.
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    /// `CUarray_format`.
    pub format: u32,
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags (layered, cubemap, surface load/store, texture gather, ...).
    pub flags: u32,
    /// 0: a plain array; N: a mipmapped array of N levels.
    pub levels: u32,
}

/// Bytes per element of a `CUarray_format` (one channel), `None` for formats this layer does
/// not know.
pub fn array_format_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => return None,
    })
}

impl ArrayDesc {
    /// Bytes of one element (all channels).
    pub fn element_bytes(&self) -> Option<u64> {
        array_format_bytes(self.format)?.checked_mul(self.channels as u64)
    }

    /// (width, height, slices) of each level, as `cuMemcpy3D` copies it (height and slices at
    /// least 1; mip levels halve width, height and, for 3D arrays, depth).
    pub fn level_extents(&self) -> Vec<(u64, u64, u64)> {
        let layered = self.flags & (ARRAY_LAYERED | ARRAY_CUBEMAP) != 0;
        (0..self.levels.max(1))
            .map(|l| {
                let shrink = |v: u64| (v >> l).max(1);
                let h = if self.height == 0 {
                    1
                } else {
                    shrink(self.height)
                };
                let d = match (self.depth, layered) {
                    (0, _) => 1,
                    (d, true) => d,
                    (d, false) => shrink(d),
                };
                (shrink(self.width), h, d)
            })
            .collect()
    }

    /// Bytes of the packed texels, `None` on overflow or an unknown format.
    pub fn texel_bytes(&self) -> Option<u64> {
        let e = self.element_bytes()?;
        self.level_extents()
            .iter()
            .try_fold(0u64, |acc, &(w, h, d)| {
                acc.checked_add(w.checked_mul(h)?.checked_mul(d)?.checked_mul(e)?)
            })
    }
}

/// Linear or pitch-2D device memory an object views (`CU_RESOURCE_TYPE_LINEAR` / `PITCH2D`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryResource {
    Linear {
        address: u64,
        format: u32,
        channels: u32,
        size: u64,
    },
    Pitch2D {
        address: u64,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
}

impl MemoryResource {
    /// The device address of the memory it views.
    pub fn address(&self) -> u64 {
        match *self {
            MemoryResource::Linear { address, .. } | MemoryResource::Pitch2D { address, .. } => {
                address
            }
        }
    }

    /// The same resource over memory at `address` (where a replay placed it).
    pub fn at(&self, address: u64) -> MemoryResource {
        let mut r = self.clone();
        match &mut r {
            MemoryResource::Linear { address: a, .. }
            | MemoryResource::Pitch2D { address: a, .. } => *a = address,
        }
        r
    }
}

/// `CUDA_TEXTURE_DESC`, floats as their bits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sampling {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub flags: u32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: u32,
    pub min_mipmap_level_clamp: u32,
    pub max_mipmap_level_clamp: u32,
    pub border_color: [u32; 4],
}

/// `CUDA_RESOURCE_VIEW_DESC`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub format: u32,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub first_mipmap_level: u32,
    pub last_mipmap_level: u32,
    pub first_layer: u32,
    pub last_layer: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(width: u64, height: u64, depth: u64, flags: u32, levels: u32) -> ArrayDesc {
        ArrayDesc {
            width,
            height,
            depth,
            format: 0x20,
            channels: 4,
            flags,
            levels,
        }
    }

    #[test]
    fn texel_bytes_count_layers_faces_and_levels() {
        assert_eq!(array(256, 0, 0, 0, 0).texel_bytes(), Some(256 * 16));
        assert_eq!(
            array(256, 192, 5, ARRAY_LAYERED, 0).texel_bytes(),
            Some(256 * 192 * 5 * 16)
        );
        assert_eq!(
            array(8, 4, 3, ARRAY_LAYERED, 2).level_extents(),
            vec![(8, 4, 3), (4, 2, 3)]
        );
        // A 3D mip chain halves depth too.
        assert_eq!(
            array(8, 8, 8, 0, 3).level_extents(),
            vec![(8, 8, 8), (4, 4, 4), (2, 2, 2)]
        );
        assert_eq!(array(u64::MAX, 2, 0, 0, 0).texel_bytes(), None);
        let unknown = ArrayDesc {
            format: 0x7f,
            ..array(4, 0, 0, 0, 0)
        };
        assert_eq!(unknown.texel_bytes(), None);
    }

    #[test]
    fn a_memory_resource_moves_to_a_new_address_keeping_its_shape() {
        let r = MemoryResource::Pitch2D {
            address: 0x1000,
            format: 1,
            channels: 2,
            width: 3,
            height: 4,
            pitch: 512,
        };
        let moved = r.at(0x9000);
        assert_eq!(moved.address(), 0x9000);
        assert_eq!(moved.at(0x1000), r);
    }
}
