//! Texture and surface objects and the CUDA arrays behind them. The recorder asks the driver
//! what an argument's handle is (`ObjectQuery::of`) and reads the arrays' texels
//! (`ForeignArray`); the player makes its own arrays (`CudaArray`) and objects (`TexObject`)
//! from the capture's description.
//!
//! Descriptors go through `#[repr(C)]` mirrors with plain integer fields: the driver may
//! write enum values newer than the bindings know, and a file may hold any number, so no
//! value from either is ever stored in a Rust enum. The described shapes are this crate's
//! own types (`types`).

mod types;

use std::ffi::c_void;
use std::mem::{size_of, MaybeUninit};

pub use types::{
    array_format_bytes, ArrayDesc, MemoryResource, Sampling, View, ARRAY_CUBEMAP, ARRAY_LAYERED,
    MAX_MIP_LEVELS,
};

use crate::error::{check, CuResult, CudaError};
use crate::stream::{AsStream, Stream};
use crate::sys::{self, CUresult};

#[repr(C)]
#[derive(Clone, Copy)]
struct RawResourceDesc {
    res_type: u32,
    res: [u64; 16],
    flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RawTextureDesc {
    address_mode: [u32; 3],
    filter_mode: u32,
    flags: u32,
    max_anisotropy: u32,
    mipmap_filter_mode: u32,
    mipmap_level_bias: u32,
    min_mipmap_level_clamp: u32,
    max_mipmap_level_clamp: u32,
    border_color: [u32; 4],
    reserved: [i32; 12],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RawViewDesc {
    format: u32,
    width: usize,
    height: usize,
    depth: usize,
    first_mipmap_level: u32,
    last_mipmap_level: u32,
    first_layer: u32,
    last_layer: u32,
    reserved: [u32; 16],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RawArrayDesc {
    width: usize,
    height: usize,
    depth: usize,
    format: u32,
    channels: u32,
    flags: u32,
}

const _: () = assert!(size_of::<RawResourceDesc>() == size_of::<sys::CUDA_RESOURCE_DESC>());
const _: () = assert!(size_of::<RawTextureDesc>() == size_of::<sys::CUDA_TEXTURE_DESC>());
const _: () = assert!(size_of::<RawViewDesc>() == size_of::<sys::CUDA_RESOURCE_VIEW_DESC>());
const _: () = assert!(size_of::<RawArrayDesc>() == size_of::<sys::CUDA_ARRAY3D_DESCRIPTOR>());

const RES_ARRAY: u32 = 0;
const RES_MIPMAPPED: u32 = 1;
const RES_LINEAR: u32 = 2;
const RES_PITCH2D: u32 = 3;

/// Handles in the argument words are small integers (the driver numbers objects from 1);
/// larger words are not asked about.
pub const MAX_HANDLE: u64 = u32::MAX as u64;

/// The resource of an application's texture or surface object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForeignResource {
    Array(ForeignArray),
    /// Linear or pitch-2D device memory.
    Memory(MemoryResource),
}

/// The union words of a `CUDA_RESOURCE_DESC` for linear memory: the resource type and
/// `res[0..5]`.
fn memory_words(r: &MemoryResource) -> (u32, [u64; 5]) {
    let (res_type, address, format, channels, rest) = match *r {
        MemoryResource::Linear {
            address,
            format,
            channels,
            size,
        } => (RES_LINEAR, address, format, channels, [size, 0, 0]),
        MemoryResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        } => (
            RES_PITCH2D,
            address,
            format,
            channels,
            [width, height, pitch],
        ),
    };
    let fc = format as u64 | (channels as u64) << 32;
    (res_type, [address, fc, rest[0], rest[1], rest[2]])
}

/// The inverse of `memory_words`, for a descriptor the driver wrote.
fn memory_resource(res_type: u32, res: &[u64; 16]) -> Option<MemoryResource> {
    let (format, channels) = (res[1] as u32, (res[1] >> 32) as u32);
    match res_type {
        RES_LINEAR => Some(MemoryResource::Linear {
            address: res[0],
            format,
            channels,
            size: res[2],
        }),
        RES_PITCH2D => Some(MemoryResource::Pitch2D {
            address: res[0],
            format,
            channels,
            width: res[2],
            height: res[3],
            pitch: res[4],
        }),
        _ => None,
    }
}

/// What the driver says a handle is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectQuery {
    pub surface: bool,
    pub resource: ForeignResource,
    pub sampling: Option<Sampling>,
    pub view: Option<View>,
}

impl ObjectQuery {
    /// The texture or surface object `handle` names in the current context, if it names one
    /// (the driver answers an error for any other number).
    pub fn of(handle: u64) -> Option<ObjectQuery> {
        if handle == 0 || handle > MAX_HANDLE {
            return None;
        }
        let mut rd = MaybeUninit::<RawResourceDesc>::zeroed();
        // SAFETY: the driver writes one CUDA_RESOURCE_DESC (same size and layout as the mirror)
        // or fails for a number that is not a live texture object.
        let tex = unsafe {
            sys::cuTexObjectGetResourceDesc(rd.as_mut_ptr() as *mut sys::CUDA_RESOURCE_DESC, handle)
        } == CUresult::CUDA_SUCCESS;
        let surface = !tex
            // SAFETY: as above, for surface objects.
            && unsafe {
                sys::cuSurfObjectGetResourceDesc(
                    rd.as_mut_ptr() as *mut sys::CUDA_RESOURCE_DESC,
                    handle,
                )
            } == CUresult::CUDA_SUCCESS;
        if !tex && !surface {
            return None;
        }
        // SAFETY: zero-initialised, then written by the driver; every field is an integer.
        let rd = unsafe { rd.assume_init() };
        let resource = match rd.res_type {
            RES_ARRAY => ForeignResource::Array(ForeignArray::Plain(ArrayHandle(rd.res[0]))),
            RES_MIPMAPPED => {
                ForeignResource::Array(ForeignArray::Mipmapped(ArrayHandle(rd.res[0])))
            }
            t => ForeignResource::Memory(memory_resource(t, &rd.res)?),
        };
        let (sampling, view) = if tex {
            (texture_desc(handle), view_desc(handle))
        } else {
            (None, None)
        };
        Some(ObjectQuery {
            surface,
            resource,
            sampling,
            view,
        })
    }
}

fn texture_desc(handle: u64) -> Option<Sampling> {
    let mut td = MaybeUninit::<RawTextureDesc>::zeroed();
    // SAFETY: the driver writes one CUDA_TEXTURE_DESC into the same-sized mirror.
    let r = unsafe {
        sys::cuTexObjectGetTextureDesc(td.as_mut_ptr() as *mut sys::CUDA_TEXTURE_DESC, handle)
    };
    if r != CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: zero-initialised, then written; integers only.
    let td = unsafe { td.assume_init() };
    Some(Sampling {
        address_mode: td.address_mode,
        filter_mode: td.filter_mode,
        flags: td.flags,
        max_anisotropy: td.max_anisotropy,
        mipmap_filter_mode: td.mipmap_filter_mode,
        mipmap_level_bias: td.mipmap_level_bias,
        min_mipmap_level_clamp: td.min_mipmap_level_clamp,
        max_mipmap_level_clamp: td.max_mipmap_level_clamp,
        border_color: td.border_color,
    })
}

fn view_desc(handle: u64) -> Option<View> {
    let mut vd = MaybeUninit::<RawViewDesc>::zeroed();
    // SAFETY: the driver writes one CUDA_RESOURCE_VIEW_DESC into the same-sized mirror.
    let r = unsafe {
        sys::cuTexObjectGetResourceViewDesc(
            vd.as_mut_ptr() as *mut sys::CUDA_RESOURCE_VIEW_DESC,
            handle,
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        return None;
    }
    // SAFETY: zero-initialised, then written; integers only.
    let vd = unsafe { vd.assume_init() };
    // Format NONE: the object was made without a view.
    (vd.format != 0).then_some(View {
        format: vd.format,
        width: vd.width as u64,
        height: vd.height as u64,
        depth: vd.depth as u64,
        first_mipmap_level: vd.first_mipmap_level,
        last_mipmap_level: vd.last_mipmap_level,
        first_layer: vd.first_layer,
        last_layer: vd.last_layer,
    })
}

/// An application's CUDA array or mipmapped array (not owned: the handle is the
/// application's, valid while it keeps the array). Only `ObjectQuery::of` makes one, from what
/// the driver said a live object views: the handle is private, so no other number reaches the
/// driver as an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForeignArray {
    Plain(ArrayHandle),
    Mipmapped(ArrayHandle),
}

/// The driver's handle of an application's array (see `ForeignArray`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArrayHandle(u64);

// SAFETY: array handles are opaque tokens the driver accepts from any thread.
unsafe impl Send for ForeignArray {}

fn array_desc(array: sys::CUarray) -> CuResult<RawArrayDesc> {
    let mut d = MaybeUninit::<RawArrayDesc>::zeroed();
    check(
        // SAFETY: the driver writes one CUDA_ARRAY3D_DESCRIPTOR into the same-sized mirror.
        unsafe {
            sys::cuArray3DGetDescriptor_v2(
                d.as_mut_ptr() as *mut sys::CUDA_ARRAY3D_DESCRIPTOR,
                array,
            )
        },
        "cuArray3DGetDescriptor",
    )?;
    // SAFETY: zero-initialised, then written; integers only.
    Ok(unsafe { d.assume_init() })
}

fn mip_level(m: sys::CUmipmappedArray, level: u32) -> Option<sys::CUarray> {
    let mut a: sys::CUarray = std::ptr::null_mut();
    // SAFETY: writes one array handle; fails past the last level.
    let r = unsafe { sys::cuMipmappedArrayGetLevel(&mut a, m, level) };
    (r == CUresult::CUDA_SUCCESS && !a.is_null()).then_some(a)
}

impl ForeignArray {
    /// The array's level arrays (one for a plain array).
    fn levels(&self) -> Vec<sys::CUarray> {
        match *self {
            ForeignArray::Plain(a) => vec![a.0 as sys::CUarray],
            ForeignArray::Mipmapped(m) => (0..MAX_MIP_LEVELS)
                .map_while(|l| mip_level(m.0 as sys::CUmipmappedArray, l))
                .collect(),
        }
    }

    /// Its description.
    pub fn image(&self) -> CuResult<ArrayDesc> {
        let levels = self.levels();
        let Some(&first) = levels.first() else {
            return Err(CudaError::refused(
                "cuMipmappedArrayGetLevel",
                CUresult::CUDA_ERROR_INVALID_VALUE,
                "a mipmapped array without levels".into(),
            ));
        };
        let d = array_desc(first)?;
        Ok(ArrayDesc {
            width: d.width as u64,
            height: d.height as u64,
            depth: d.depth as u64,
            format: d.format,
            channels: d.channels,
            flags: d.flags,
            levels: match self {
                ForeignArray::Plain(_) => 0,
                ForeignArray::Mipmapped(_) => levels.len() as u32,
            },
        })
    }

    /// Copies every level's texels, packed as `ArrayDesc` describes, into `out`.
    pub fn read(&self, image: &ArrayDesc, out: &mut [u8]) -> CuResult<()> {
        let plan = copy_plan(image, out.len() as u64)?;
        let levels = self.levels();
        if levels.len() != plan.len() {
            return Err(CudaError::refused(
                "cuMemcpy3D",
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("{} levels, {} described", levels.len(), plan.len()),
            ));
        }
        for (level, (dims, offset)) in levels.into_iter().zip(plan) {
            // SAFETY: `copy_plan` checked that every packed level fits in `out`, which is
            // borrowed exclusively for the synchronous copy; the level is the driver's own
            // handle for this array.
            unsafe {
                copy3d(
                    Side::Array(level),
                    Side::Host(out[offset as usize..].as_mut_ptr() as *mut c_void),
                    dims,
                    None,
                )?
            };
        }
        Ok(())
    }
}

/// (width in bytes, height, slices) of one level.
type Extent = (u64, u64, u64);

/// (extent, byte offset) of each level of a packed image, checked against the bytes available.
fn copy_plan(image: &ArrayDesc, available: u64) -> CuResult<Vec<(Extent, u64)>> {
    let refuse =
        |why: String| CudaError::refused("cuMemcpy3D", CUresult::CUDA_ERROR_INVALID_VALUE, why);
    let e = image
        .element_bytes()
        .ok_or_else(|| refuse(format!("array format {:#x} is not supported", image.format)))?;
    let total = image
        .texel_bytes()
        .ok_or_else(|| refuse("array size overflows".into()))?;
    if total > available {
        return Err(refuse(format!(
            "array needs {total} bytes, {available} given"
        )));
    }
    let mut offset = 0u64;
    Ok(image
        .level_extents()
        .into_iter()
        .map(|(w, h, d)| {
            let at = offset;
            offset += w * e * h * d;
            ((w * e, h, d), at)
        })
        .collect())
}

/// One end of a 3D copy.
#[derive(Clone, Copy)]
enum Side {
    Array(sys::CUarray),
    Host(*mut c_void),
    Device(u64),
}

/// Copies a packed (width_bytes x height x depth) block between an array level and linear
/// memory, on `stream` when given, else synchronously.
///
/// # Safety
/// A `Host` or `Device` end spans `width_bytes x height x depth` bytes that are *readable* as a
/// source, *writable* as a destination (`crate::memory`'s contracts), until the copy completes.
unsafe fn copy3d(
    src: Side,
    dst: Side,
    (width_bytes, height, depth): Extent,
    stream: Option<&Stream>,
) -> CuResult<()> {
    use sys::CUmemorytype::*;
    let null = std::ptr::null_mut();
    let mut c = sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: CU_MEMORYTYPE_HOST,
        srcHost: null,
        srcDevice: 0,
        srcArray: null as sys::CUarray,
        reserved0: null,
        srcPitch: width_bytes as usize,
        srcHeight: height as usize,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: CU_MEMORYTYPE_HOST,
        dstHost: null,
        dstDevice: 0,
        dstArray: null as sys::CUarray,
        reserved1: null,
        dstPitch: width_bytes as usize,
        dstHeight: height as usize,
        WidthInBytes: width_bytes as usize,
        Height: height as usize,
        Depth: depth as usize,
    };
    match src {
        Side::Array(a) => (c.srcMemoryType, c.srcArray) = (CU_MEMORYTYPE_ARRAY, a),
        Side::Host(p) => (c.srcMemoryType, c.srcHost) = (CU_MEMORYTYPE_HOST, p),
        Side::Device(p) => (c.srcMemoryType, c.srcDevice) = (CU_MEMORYTYPE_DEVICE, p),
    }
    match dst {
        Side::Array(a) => (c.dstMemoryType, c.dstArray) = (CU_MEMORYTYPE_ARRAY, a),
        Side::Host(p) => (c.dstMemoryType, c.dstHost) = (CU_MEMORYTYPE_HOST, p),
        Side::Device(p) => (c.dstMemoryType, c.dstDevice) = (CU_MEMORYTYPE_DEVICE, p),
    }
    match stream {
        // SAFETY: both ends are usable for the block by this function's contract; the stream
        // is borrowed, so alive.
        Some(s) => check(
            unsafe { sys::cuMemcpy3DAsync_v2(&c, s.raw_stream()) },
            "cuMemcpy3DAsync",
        ),
        // SAFETY: as above, synchronous.
        None => check(unsafe { sys::cuMemcpy3D_v2(&c) }, "cuMemcpy3D"),
    }
}

/// A CUDA array (or mipmapped array) made by the player; destroyed on drop.
pub struct CudaArray {
    image: ArrayDesc,
    /// The mipmapped array, when it is one.
    mipmapped: Option<sys::CUmipmappedArray>,
    levels: Vec<sys::CUarray>,
}

// SAFETY: array handles are opaque tokens the driver accepts from any thread.
unsafe impl Send for CudaArray {}

impl CudaArray {
    /// Makes an array as `image` describes (format and size checked first).
    pub fn create(image: &ArrayDesc) -> CuResult<CudaArray> {
        let total = copy_plan(image, u64::MAX)?;
        let refuse = |why: &str| {
            CudaError::refused(
                "cuArray3DCreate",
                CUresult::CUDA_ERROR_INVALID_VALUE,
                why.into(),
            )
        };
        let dims = [image.width, image.height, image.depth];
        if dims.iter().any(|&v| usize::try_from(v).is_err()) || total.is_empty() {
            return Err(refuse("array dimensions out of range"));
        }
        let desc = RawArrayDesc {
            width: image.width as usize,
            height: image.height as usize,
            depth: image.depth as usize,
            format: image.format,
            channels: image.channels,
            flags: image.flags,
        };
        let desc_ptr = &desc as *const RawArrayDesc as *const sys::CUDA_ARRAY3D_DESCRIPTOR;
        let mut a = CudaArray {
            image: image.clone(),
            mipmapped: None,
            levels: Vec::new(),
        };
        if image.levels == 0 {
            let mut h: sys::CUarray = std::ptr::null_mut();
            check(
                // SAFETY: writes one handle; the descriptor mirror has the driver's layout and
                // its format was checked to be a known one (copy_plan).
                unsafe { sys::cuArray3DCreate_v2(&mut h, desc_ptr) },
                "cuArray3DCreate",
            )?;
            a.levels.push(h);
        } else {
            let mut m: sys::CUmipmappedArray = std::ptr::null_mut();
            check(
                // SAFETY: as above, with the level count the image declares (at most 32).
                unsafe { sys::cuMipmappedArrayCreate(&mut m, desc_ptr, image.levels) },
                "cuMipmappedArrayCreate",
            )?;
            a.mipmapped = Some(m);
            a.levels = (0..image.levels).map_while(|l| mip_level(m, l)).collect();
            if a.levels.len() != image.levels as usize {
                return Err(refuse("the driver made fewer mip levels than asked"));
            }
        }
        Ok(a)
    }

    /// The handle a resource descriptor names: the array, or the mipmapped array.
    fn resource_handle(&self) -> u64 {
        match self.mipmapped {
            Some(m) => m as u64,
            None => self.levels.first().map_or(0, |&a| a as u64),
        }
    }

    /// Bytes of the packed texels (`ArrayDesc::texel_bytes`; checked at `create`).
    pub fn texel_bytes(&self) -> u64 {
        self.image.texel_bytes().unwrap_or(0)
    }

    /// Copies packed texels from device memory at `src` into every level, on `stream`.
    ///
    /// # Safety
    /// `[src, src + texel_bytes())` is *readable* (`crate::memory`'s contract) until the
    /// copies complete on `stream`.
    pub unsafe fn copy_from_device(&self, src: u64, stream: &Stream) -> CuResult<()> {
        for (&level, (dims, offset)) in self.levels.iter().zip(copy_plan(&self.image, u64::MAX)?) {
            // SAFETY: the packed level lies inside `[src, src + texel_bytes())`, readable by this
            // function's contract; the level is this array's own.
            unsafe {
                copy3d(
                    Side::Device(src + offset),
                    Side::Array(level),
                    dims,
                    Some(stream),
                )?
            };
        }
        Ok(())
    }

    /// Copies every level's texels, packed, to device memory at `dst`, on `stream`.
    ///
    /// # Safety
    /// `[dst, dst + texel_bytes())` is *writable* (`crate::memory`'s contract) until the
    /// copies complete on `stream`.
    pub unsafe fn copy_to_device(&self, dst: u64, stream: &Stream) -> CuResult<()> {
        for (&level, (dims, offset)) in self.levels.iter().zip(copy_plan(&self.image, u64::MAX)?) {
            // SAFETY: the packed level lies inside `[dst, dst + texel_bytes())`, writable by this
            // function's contract; the level is this array's own.
            unsafe {
                copy3d(
                    Side::Array(level),
                    Side::Device(dst + offset),
                    dims,
                    Some(stream),
                )?
            };
        }
        Ok(())
    }
}

impl Drop for CudaArray {
    fn drop(&mut self) {
        // SAFETY: destroys the arrays made in `create` (levels belong to the mipmapped array).
        unsafe {
            match self.mipmapped {
                Some(m) => {
                    sys::cuMipmappedArrayDestroy(m);
                }
                None => {
                    for &a in &self.levels {
                        sys::cuArrayDestroy(a);
                    }
                }
            }
        }
    }
}

/// A texture or surface object made by the player; destroyed on drop.
pub struct TexObject {
    handle: u64,
    surface: bool,
}

/// What an object made by the player views.
pub enum ObjectResource<'a> {
    /// One of the player's arrays (plain or mipmapped, as it was made).
    Array(&'a CudaArray),
    /// Linear memory, at its address in this process.
    Memory(MemoryResource),
}

/// An object to make: its kind, resource and, for texture objects, how it samples.
pub struct ObjectDesc<'a> {
    pub surface: bool,
    pub resource: ObjectResource<'a>,
    /// Texture objects only (the driver's defaults when absent).
    pub sampling: Option<Sampling>,
    pub view: Option<View>,
}

/// The resource descriptor mirror for `resource`, its format checked for memory resources.
fn resource_desc(resource: &ObjectResource<'_>) -> CuResult<RawResourceDesc> {
    let mut rd = RawResourceDesc {
        res_type: 0,
        res: [0; 16],
        flags: 0,
    };
    match resource {
        ObjectResource::Array(a) => {
            rd.res_type = if a.mipmapped.is_some() {
                RES_MIPMAPPED
            } else {
                RES_ARRAY
            };
            rd.res[0] = a.resource_handle();
        }
        ObjectResource::Memory(m) => {
            let (res_type, words) = memory_words(m);
            let format = words[1] as u32;
            known_format(format).ok_or_else(|| {
                CudaError::refused(
                    "cuTexObjectCreate",
                    CUresult::CUDA_ERROR_INVALID_VALUE,
                    format!("format {format:#x}"),
                )
            })?;
            rd.res_type = res_type;
            rd.res[..5].copy_from_slice(&words);
        }
    }
    Ok(rd)
}

fn raw_texture_desc(s: &Sampling) -> RawTextureDesc {
    RawTextureDesc {
        address_mode: s.address_mode,
        filter_mode: s.filter_mode,
        flags: s.flags,
        max_anisotropy: s.max_anisotropy,
        mipmap_filter_mode: s.mipmap_filter_mode,
        mipmap_level_bias: s.mipmap_level_bias,
        min_mipmap_level_clamp: s.min_mipmap_level_clamp,
        max_mipmap_level_clamp: s.max_mipmap_level_clamp,
        border_color: s.border_color,
        reserved: [0; 12],
    }
}

fn raw_view_desc(v: &View) -> RawViewDesc {
    RawViewDesc {
        format: v.format,
        width: v.width as usize,
        height: v.height as usize,
        depth: v.depth as usize,
        first_mipmap_level: v.first_mipmap_level,
        last_mipmap_level: v.last_mipmap_level,
        first_layer: v.first_layer,
        last_layer: v.last_layer,
        reserved: [0; 16],
    }
}

impl TexObject {
    /// Makes the object `desc` describes.
    ///
    /// # Safety
    /// For a memory resource, the memory it names is *readable* (a texture object) or
    /// *readable and writable* (a surface object) (`crate::memory`'s contracts) for every
    /// kernel that uses the object while it lives: the object hands the address to kernels.
    pub unsafe fn create(desc: &ObjectDesc<'_>) -> CuResult<TexObject> {
        let rd = resource_desc(&desc.resource)?;
        let rd_ptr = &rd as *const RawResourceDesc as *const sys::CUDA_RESOURCE_DESC;
        let mut handle = 0u64;
        if desc.surface {
            check(
                // SAFETY: writes one handle; the resource mirror has the driver's layout and holds
                // only arrays made here, or memory this function's contract covers, with a
                // checked format.
                unsafe { sys::cuSurfObjectCreate(&mut handle, rd_ptr) },
                "cuSurfObjectCreate",
            )?;
        } else {
            let td = raw_texture_desc(&desc.sampling.clone().unwrap_or_default());
            let vd = desc.view.as_ref().map(raw_view_desc);
            let vd_ptr = vd.as_ref().map_or(std::ptr::null(), |v| {
                v as *const RawViewDesc as *const sys::CUDA_RESOURCE_VIEW_DESC
            });
            check(
                // SAFETY: writes one handle; the mirrors have the driver's layouts and live across
                // the call; the resource is as for surfaces above; the driver validates the
                // sampling and view numbers and answers an error for bad ones.
                unsafe {
                    sys::cuTexObjectCreate(
                        &mut handle,
                        rd_ptr,
                        &td as *const RawTextureDesc as *const sys::CUDA_TEXTURE_DESC,
                        vd_ptr,
                    )
                },
                "cuTexObjectCreate",
            )?;
        }
        Ok(TexObject {
            handle,
            surface: desc.surface,
        })
    }

    pub fn handle(&self) -> u64 {
        self.handle
    }
}

impl Drop for TexObject {
    fn drop(&mut self) {
        // SAFETY: destroys the object made in `create`.
        unsafe {
            if self.surface {
                sys::cuSurfObjectDestroy(self.handle);
            } else {
                sys::cuTexObjectDestroy(self.handle);
            }
        }
    }
}

fn known_format(format: u32) -> Option<u64> {
    array_format_bytes(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_resources_round_trip_through_descriptor_words() {
        for r in [
            MemoryResource::Linear {
                address: 0x7f00_0000_1000,
                format: 0x20,
                channels: 4,
                size: 1 << 20,
            },
            MemoryResource::Pitch2D {
                address: 0x7f00_0010_0000,
                format: 0x01,
                channels: 2,
                width: 256,
                height: 192,
                pitch: 1024,
            },
        ] {
            let (t, words) = memory_words(&r);
            assert_eq!(words[0], r.address());
            let mut res = [0u64; 16];
            res[..5].copy_from_slice(&words);
            assert_eq!(memory_resource(t, &res), Some(r));
        }
        assert_eq!(memory_resource(RES_ARRAY, &[0; 16]), None);
    }

    #[test]
    fn mirrors_have_the_driver_layouts() {
        // Field offsets the driver reads (sizes are checked at compile time above).
        let rd = RawResourceDesc {
            res_type: 0,
            res: [0; 16],
            flags: 0,
        };
        let base = &rd as *const _ as usize;
        assert_eq!(&rd.res as *const _ as usize - base, 8);
        assert_eq!(&rd.flags as *const _ as usize - base, 136);
    }
}
