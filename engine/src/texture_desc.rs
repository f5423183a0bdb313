//! The seam between the capture format's texture types (what a `.krr` file holds) and the CUDA
//! layer's (what the driver is told or says): the two crates do not know each other, so the
//! crates that use both (player, recorder) convert here. Field for field, except that an
//! array's region id is the format's alone and an object's linear memory moves to where the
//! replay placed it.

use kreplay_cuda::texture::{
    ArrayDesc, CudaArray, MemoryResource, ObjectDesc, ObjectResource, Sampling, View,
};
use kreplay_format::{ArrayImage, TextureObject, TextureResource, TextureSampling, TextureView};

/// The driver's description of a captured array.
pub fn array_desc(image: &ArrayImage) -> ArrayDesc {
    ArrayDesc {
        width: image.width,
        height: image.height,
        depth: image.depth,
        format: image.format,
        channels: image.channels,
        flags: image.flags,
        levels: image.levels,
    }
}

/// A live array's description as the capture holds it, its texels in region `region_id`.
pub fn array_image(desc: &ArrayDesc, region_id: u32) -> ArrayImage {
    ArrayImage {
        region_id,
        width: desc.width,
        height: desc.height,
        depth: desc.depth,
        format: desc.format,
        channels: desc.channels,
        flags: desc.flags,
        levels: desc.levels,
    }
}

/// Linear memory a captured object views; `None` for array resources.
pub fn memory_resource(r: &TextureResource) -> Option<MemoryResource> {
    match *r {
        TextureResource::Linear {
            address,
            format,
            channels,
            size,
        } => Some(MemoryResource::Linear {
            address,
            format,
            channels,
            size,
        }),
        TextureResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        } => Some(MemoryResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        }),
        TextureResource::Array { .. } | TextureResource::Mipmapped { .. } => None,
    }
}

/// Linear memory a live object views, as the capture holds it.
pub fn texture_resource(m: &MemoryResource) -> TextureResource {
    match *m {
        MemoryResource::Linear {
            address,
            format,
            channels,
            size,
        } => TextureResource::Linear {
            address,
            format,
            channels,
            size,
        },
        MemoryResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        } => TextureResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        },
    }
}

pub fn sampling(s: &TextureSampling) -> Sampling {
    Sampling {
        address_mode: s.address_mode,
        filter_mode: s.filter_mode,
        flags: s.flags,
        max_anisotropy: s.max_anisotropy,
        mipmap_filter_mode: s.mipmap_filter_mode,
        mipmap_level_bias: s.mipmap_level_bias,
        min_mipmap_level_clamp: s.min_mipmap_level_clamp,
        max_mipmap_level_clamp: s.max_mipmap_level_clamp,
        border_color: s.border_color,
    }
}

pub fn texture_sampling(s: &Sampling) -> TextureSampling {
    TextureSampling {
        address_mode: s.address_mode,
        filter_mode: s.filter_mode,
        flags: s.flags,
        max_anisotropy: s.max_anisotropy,
        mipmap_filter_mode: s.mipmap_filter_mode,
        mipmap_level_bias: s.mipmap_level_bias,
        min_mipmap_level_clamp: s.min_mipmap_level_clamp,
        max_mipmap_level_clamp: s.max_mipmap_level_clamp,
        border_color: s.border_color,
    }
}

pub fn view(v: &TextureView) -> View {
    View {
        format: v.format,
        width: v.width,
        height: v.height,
        depth: v.depth,
        first_mipmap_level: v.first_mipmap_level,
        last_mipmap_level: v.last_mipmap_level,
        first_layer: v.first_layer,
        last_layer: v.last_layer,
    }
}

pub fn texture_view(v: &View) -> TextureView {
    TextureView {
        format: v.format,
        width: v.width,
        height: v.height,
        depth: v.depth,
        first_mipmap_level: v.first_mipmap_level,
        last_mipmap_level: v.last_mipmap_level,
        first_layer: v.first_layer,
        last_layer: v.last_layer,
    }
}

/// What to make for a captured object: over `array` (array resources; `None` when the capture
/// names an array it lacks, which makes this `None`), or over its linear memory moved to
/// `address` (where the replay placed it).
pub fn object_desc<'a>(
    obj: &TextureObject,
    array: Option<&'a CudaArray>,
    address: u64,
) -> Option<ObjectDesc<'a>> {
    let resource = match memory_resource(&obj.resource) {
        Some(m) => ObjectResource::Memory(m.at(address)),
        None => ObjectResource::Array(array?),
    };
    Some(ObjectDesc {
        surface: obj.surface,
        resource,
        sampling: obj.sampling.as_ref().map(sampling),
        view: obj.view.as_ref().map(view),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(depth: u64, flags: u32, levels: u32) -> ArrayImage {
        ArrayImage {
            region_id: 7,
            width: 64,
            height: 48,
            depth,
            format: 0x10,
            channels: 2,
            flags,
            levels,
        }
    }

    #[test]
    fn arrays_convert_both_ways_and_agree_on_their_texel_bytes() {
        let shapes = [
            image(0, 0, 0),
            image(6, kreplay_format::ARRAY_CUBEMAP, 0),
            image(5, kreplay_format::ARRAY_LAYERED, 3),
            image(9, 0, 4),
            ArrayImage {
                format: 0x7f, // unknown to both
                ..image(0, 0, 0)
            },
        ];
        for im in shapes {
            let d = array_desc(&im);
            assert_eq!(array_image(&d, im.region_id), im);
            assert_eq!(d.texel_bytes(), im.texel_bytes(), "{im:?}");
            assert_eq!(d.level_extents(), im.level_extents(), "{im:?}");
        }
        assert_eq!(
            kreplay_cuda::texture::ARRAY_LAYERED,
            kreplay_format::ARRAY_LAYERED
        );
        assert_eq!(
            kreplay_cuda::texture::ARRAY_CUBEMAP,
            kreplay_format::ARRAY_CUBEMAP
        );
        assert_eq!(
            kreplay_cuda::texture::MAX_MIP_LEVELS,
            kreplay_format::MAX_MIP_LEVELS
        );
        for f in 0..=0x40 {
            assert_eq!(
                kreplay_cuda::texture::array_format_bytes(f),
                kreplay_format::array_format_bytes(f),
                "format {f:#x}"
            );
        }
    }

    #[test]
    fn resources_samplings_and_views_round_trip() {
        let linear = TextureResource::Linear {
            address: 0x7f00_0000_1000,
            format: 0x20,
            channels: 4,
            size: 1 << 20,
        };
        let pitched = TextureResource::Pitch2D {
            address: 0x7f00_0010_0000,
            format: 0x01,
            channels: 2,
            width: 256,
            height: 192,
            pitch: 1024,
        };
        for r in [linear, pitched] {
            let m = memory_resource(&r).expect("a memory resource");
            assert_eq!(Some(m.address()), r.address());
            assert_eq!(texture_resource(&m), r);
        }
        assert_eq!(memory_resource(&TextureResource::Array { index: 0 }), None);
        assert_eq!(
            memory_resource(&TextureResource::Mipmapped { index: 1 }),
            None
        );
        let s = TextureSampling {
            address_mode: [1, 2, 3],
            filter_mode: 1,
            flags: 2,
            max_anisotropy: 16,
            mipmap_filter_mode: 1,
            mipmap_level_bias: 0x3f80_0000,
            min_mipmap_level_clamp: 4,
            max_mipmap_level_clamp: 5,
            border_color: [6, 7, 8, 9],
        };
        assert_eq!(texture_sampling(&sampling(&s)), s);
        let v = TextureView {
            format: 0x11,
            width: 10,
            height: 11,
            depth: 12,
            first_mipmap_level: 1,
            last_mipmap_level: 2,
            first_layer: 3,
            last_layer: 4,
        };
        assert_eq!(texture_view(&view(&v)), v);
    }

    #[test]
    fn an_object_over_memory_moves_to_the_placed_address_and_keeps_its_sampling() {
        let obj = TextureObject {
            handle: 3,
            surface: false,
            resource: TextureResource::Linear {
                address: 0x1000,
                format: 0x20,
                channels: 1,
                size: 4096,
            },
            sampling: Some(TextureSampling {
                filter_mode: 1,
                ..TextureSampling::default()
            }),
            view: None,
            arg_words: vec![0],
            memory_words: vec![],
        };
        let d = object_desc(&obj, None, 0x9000).expect("memory needs no array");
        assert!(!d.surface);
        match &d.resource {
            ObjectResource::Memory(m) => assert_eq!(m.address(), 0x9000),
            ObjectResource::Array(_) => panic!("a linear resource became an array"),
        }
        assert_eq!(d.sampling.map(|s| s.filter_mode), Some(1));
        assert!(d.view.is_none());
        // An array resource without its array cannot be made.
        let over_array = TextureObject {
            resource: TextureResource::Array { index: 4 },
            surface: true,
            ..obj
        };
        assert!(object_desc(&over_array, None, 0).is_none());
    }
}
