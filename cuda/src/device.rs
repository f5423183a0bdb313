//! The driver and its devices. A device is resolved once into a `Device` value (ordinal, the
//! driver's handle, its static properties); everything sized or placed per device takes it.

use std::ffi::CStr;

use crate::error::{check, CuResult, DriverUnavailable};
use crate::sys;

/// Loads libcuda and calls `cuInit`. Safe to call many times.
pub fn ensure_driver() -> Result<(), DriverUnavailable> {
    // SAFETY: probing for the library only dlopens it.
    if !unsafe { sys::is_culib_present() } {
        return Err(DriverUnavailable::NoLibrary);
    }
    // SAFETY: cuInit has no preconditions.
    match check(unsafe { sys::cuInit(0) }, "cuInit") {
        // The driver is there and sees no GPU (CUDA_VISIBLE_DEVICES empty, none installed).
        Err(e) if e.is(sys::CUresult::CUDA_ERROR_NO_DEVICE) => {
            return Err(DriverUnavailable::NoDevice)
        }
        r => r.map_err(DriverUnavailable::Init)?,
    }
    if device_count().map_err(DriverUnavailable::Init)? == 0 {
        return Err(DriverUnavailable::NoDevice);
    }
    Ok(())
}

pub fn device_count() -> CuResult<i32> {
    let mut n = 0;
    // SAFETY: the only pointer is to a local int, the one value the driver writes.
    check(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
    Ok(n)
}

pub fn driver_version() -> CuResult<u32> {
    let mut v = 0;
    check(
        // SAFETY: the only pointer is to a local int, the one value the driver writes.
        unsafe { sys::cuDriverGetVersion(&mut v) },
        "cuDriverGetVersion",
    )?;
    Ok(v as u32)
}

/// Static facts about one device.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    pub ordinal: i32,
    pub name: String,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub uuid: [u8; 16],
    pub total_memory: u64,
    pub sm_count: u32,
    pub l2_bytes: u64,
}

impl DeviceProps {
    /// SM architecture as major*10+minor (90 for sm_90).
    pub fn arch(&self) -> u32 {
        self.cc_major * 10 + self.cc_minor
    }
}

/// One device, resolved once.
#[derive(Debug, Clone)]
pub struct Device {
    raw: sys::CUdevice,
    props: DeviceProps,
}

fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> CuResult<i32> {
    let mut v = 0;
    check(
        // SAFETY: the only pointer is to a local int; `dev` came from `cuDeviceGet`.
        unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) },
        "cuDeviceGetAttribute",
    )?;
    Ok(v)
}

impl Device {
    /// Loads the driver and resolves device `ordinal`, refusing one that does not exist.
    pub fn open(ordinal: i32) -> Result<Device, DriverUnavailable> {
        ensure_driver()?;
        let count = device_count().map_err(DriverUnavailable::Init)?;
        if ordinal < 0 || ordinal >= count {
            return Err(DriverUnavailable::NoSuchDevice {
                requested: ordinal,
                count,
            });
        }
        Device::resolve(ordinal).map_err(DriverUnavailable::Init)
    }

    /// The device of the calling thread's current context (the driver is initialised).
    pub fn current() -> CuResult<Device> {
        let mut d = 0;
        // SAFETY: the only pointer is to a local `CUdevice`, the one value the driver writes.
        check(unsafe { sys::cuCtxGetDevice(&mut d) }, "cuCtxGetDevice")?;
        let mut ordinal = 0;
        // The handle and the ordinal coincide on every driver so far, but only the ordinal is
        // documented: ask for it.
        for i in 0..device_count()? {
            let mut h = 0;
            // SAFETY: the only pointer is to a local `CUdevice`, the one value the driver writes.
            check(unsafe { sys::cuDeviceGet(&mut h, i) }, "cuDeviceGet")?;
            if h == d {
                ordinal = i;
                break;
            }
        }
        Device::resolve(ordinal)
    }

    fn resolve(ordinal: i32) -> CuResult<Device> {
        use sys::CUdevice_attribute::*;
        let mut dev = 0;
        check(
            // SAFETY: the only pointer is to a local `CUdevice`, the one value the driver writes.
            unsafe { sys::cuDeviceGet(&mut dev, ordinal) },
            "cuDeviceGet",
        )?;
        let mut name = [0 as std::ffi::c_char; 256];
        check(
            // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates within that length.
            unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) },
            "cuDeviceGetName",
        )?;
        // SAFETY: NUL-terminated by the driver (buffer zeroed beforehand as a backstop).
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut uuid = sys::CUuuid { bytes: [0; 16] };
        check(
            // SAFETY: the only pointer is to a local `CUuuid` of the size the driver writes.
            unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, dev) },
            "cuDeviceGetUuid",
        )?;
        let mut total = 0usize;
        check(
            // SAFETY: the only pointer is to a local `usize` (size_t), the one value the
            // driver writes.
            unsafe { sys::cuDeviceTotalMem_v2(&mut total, dev) },
            "cuDeviceTotalMem",
        )?;
        let props = DeviceProps {
            ordinal,
            name,
            cc_major: attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
            cc_minor: attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
            uuid: uuid.bytes.map(|b| b as u8),
            total_memory: total as u64,
            sm_count: attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attribute(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as u64,
        };
        Ok(Device { raw: dev, props })
    }

    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    pub fn ordinal(&self) -> i32 {
        self.props.ordinal
    }

    pub(crate) fn raw(&self) -> sys::CUdevice {
        self.raw
    }
}

/// Free and total device memory of the current context's device.
pub fn memory_info() -> CuResult<(u64, u64)> {
    let mut free = 0usize;
    let mut total = 0usize;
    check(
        // SAFETY: both pointers are to local `usize`s (size_t), the values the driver writes.
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo",
    )?;
    Ok((free as u64, total as u64))
}
