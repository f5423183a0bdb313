//! CUPTI callback API, wrapped once. Used by the recorder (injected into the application) to
//! see kernel launches and module loads. Like libcuda, libcupti is loaded lazily: check
//! `cupti_present` first.

use std::ffi::{c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::ptr;

pub use cudarc::cupti::sys;
use sys::CUptiResult;

/// A failed CUPTI call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{call} failed: {name} ({code})")]
pub struct CuptiError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

impl CuptiError {
    /// Another tool (a profiler, a tracer) already holds the one CUPTI subscriber slot.
    pub fn is_multiple_subscribers(&self) -> bool {
        self.code == CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED as u32
    }

    pub fn is(&self, code: CUptiResult) -> bool {
        self.code == code as u32
    }
}

pub(crate) fn check(code: CUptiResult, call: &'static str) -> Result<(), CuptiError> {
    if code == CUptiResult::CUPTI_SUCCESS {
        return Ok(());
    }
    let mut p: *const std::ffi::c_char = ptr::null();
    // SAFETY: writes a pointer to a static string or leaves it null.
    let r = unsafe { sys::cuptiGetResultString(code, &mut p) };
    let name = if r == CUptiResult::CUPTI_SUCCESS && !p.is_null() {
        // SAFETY: static NUL-terminated string from CUPTI.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("{code:?}")
    };
    Err(CuptiError {
        call,
        code: code as u32,
        name,
    })
}

/// Whether libcupti can be loaded.
pub fn cupti_present() -> bool {
    // SAFETY: only dlopens the library.
    unsafe { sys::is_culib_present() }
}

/// The libcupti this process uses (the one the bindings loaded) and its version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CuptiInfo {
    pub path: String,
    /// `cuptiGetVersion`: the CUPTI API version (e.g. 130000 for 13.0).
    pub api_version: u32,
    /// The profiler libraries loaded from the same directory (empty when CUPTI's own lookup
    /// is left to find them).
    pub nvperf: Vec<String>,
}

/// The CUDA major version of the CUPTI headers these bindings were generated from.
pub const BINDINGS_MAJOR: u32 = 13;

/// (major, minor) of a CUPTI API version as `cuptiGetVersion` reports it (130001: 13.0).
/// CUPTI before 13.0 counted API versions with small integers (18 to 26 in CUDA 12.x): those
/// read as major 0.
pub fn cupti_release(api_version: u32) -> (u32, u32) {
    (api_version / 10_000, (api_version / 100) % 100)
}

/// A CUPTI API version in words.
fn release_text(api_version: u32) -> String {
    match cupti_release(api_version) {
        (0, _) => format!("CUDA 12 or older (CUPTI API version {api_version})"),
        (major, minor) => format!("CUDA {major}.{minor}"),
    }
}

/// Whether the range profiler of the CUPTI with `api_version` can be used here, with a
/// driver of `driver_version` (`cuDriverGetVersion`: 13000 for 13.0). A CUPTI of another
/// major release than the bindings has other structures; one newer than the driver crashes
/// inside CUPTI when it loads the profiler (measured: 13.4 and 13.5 on a 13.0 driver).
pub fn profiler_compatibility(api_version: u32, driver_version: u32) -> Result<(), String> {
    let (major, minor) = cupti_release(api_version);
    let (dmajor, dminor) = (driver_version / 1000, (driver_version % 1000) / 10);
    let release = release_text(api_version);
    if major != BINDINGS_MAJOR {
        return Err(format!(
            "this CUPTI is from {release}, and kreplay's counter collection is built for CUPTI \
             {BINDINGS_MAJOR}.x: put a CUDA {BINDINGS_MAJOR}.x CUPTI first on LD_LIBRARY_PATH"
        ));
    }
    if (major, minor) > (dmajor, dminor) {
        return Err(format!(
            "this CUPTI is from {release}, newer than the driver (CUDA {dmajor}.{dminor}), and \
             cannot collect counters with it: upgrade the driver, or put the CUPTI of CUDA \
             {dmajor}.{dminor} (the toolkit's) first on LD_LIBRARY_PATH"
        ));
    }
    Ok(())
}

/// The directory of the loaded object holding `addr` (symlinks resolved).
fn object_path(addr: *const c_void) -> Option<std::path::PathBuf> {
    // SAFETY: Dl_info is plain data; dladdr only reads the loader's tables.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about; 0 means no loaded object holds it.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    Some(path.canonicalize().unwrap_or(path))
}

/// Makes CUPTI's profiler libraries (`libnvperf_host.so`, `libnvperf_target.so`) the ones
/// shipped beside the libcupti in use, and says which CUPTI that is. libcupti loads them by
/// bare name: with a newer CUPTI's folder first on `LD_LIBRARY_PATH` (a pip wheel holds
/// `libcupti.so.13` but no `libcupti.so`), the bindings load the toolkit's libcupti while
/// libcupti then picks the wheel's libnvperf, and the mismatched pair crashes. Loading the
/// pair by full path first (RTLD_GLOBAL) makes libcupti's later lookup by name find them.
/// Call before the first profiler call; later calls return the first answer.
pub fn pair_profiler_libraries() -> Result<&'static CuptiInfo, CuptiError> {
    static INFO: std::sync::OnceLock<Result<CuptiInfo, CuptiError>> = std::sync::OnceLock::new();
    INFO.get_or_init(|| {
        let mut version = 0u32;
        check(
            // SAFETY: writes one integer; loads libcupti (the caller checked it is present).
            unsafe { sys::cuptiGetVersion(&mut version) },
            "cuptiGetVersion",
        )?;
        // The address of a libcupti function tells which file the bindings loaded.
        // SAFETY: culib returns the library the bindings loaded (present: the call above
        // went through it); the symbol is only used as an address.
        let path = unsafe { sys::culib().get::<unsafe extern "C" fn()>(b"cuptiGetVersion\0") }
            .ok()
            .and_then(|f| object_path(*f as *const c_void));
        let mut nvperf = Vec::new();
        if let Some(dir) = path.as_ref().and_then(|p| p.parent()) {
            for name in ["libnvperf_host.so", "libnvperf_target.so"] {
                let lib = dir.join(name);
                if !lib.is_file() {
                    continue;
                }
                // SAFETY: loading NVIDIA's profiler library runs its initialisers, as
                // libcupti itself would when it loads it.
                let loaded = unsafe {
                    libloading::os::unix::Library::open(
                        Some(&lib),
                        libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                    )
                };
                if let Ok(l) = loaded {
                    // Kept for the life of the process, as libcupti would keep it.
                    std::mem::forget(l);
                    nvperf.push(lib.display().to_string());
                }
            }
        }
        Ok(CuptiInfo {
            path: path.map_or_else(|| "libcupti.so".into(), |p| p.display().to_string()),
            api_version: version,
            nvperf,
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The callback signature CUPTI calls.
pub type RawCallback = unsafe extern "C" fn(
    userdata: *mut c_void,
    domain: sys::CUpti_CallbackDomain,
    cbid: sys::CUpti_CallbackId,
    cbdata: *const c_void,
);

/// A CUPTI subscriber. Kept for the life of the process (the recorder never unsubscribes:
/// callbacks may be in flight on other threads at exit).
pub struct Subscriber {
    raw: sys::CUpti_SubscriberHandle,
}

// SAFETY: the handle is an opaque token CUPTI accepts from any thread.
unsafe impl Send for Subscriber {}
// SAFETY: as above; CUPTI serialises its own state.
unsafe impl Sync for Subscriber {}

impl Subscriber {
    pub fn subscribe(callback: RawCallback) -> Result<Subscriber, CuptiError> {
        let mut raw = ptr::null_mut();
        check(
            // SAFETY: callback is a valid function for the life of the process; no userdata.
            unsafe { sys::cuptiSubscribe(&mut raw, Some(callback), ptr::null_mut()) },
            "cuptiSubscribe",
        )?;
        Ok(Subscriber { raw })
    }

    pub fn enable_callback(
        &self,
        domain: sys::CUpti_CallbackDomain,
        cbid: u32,
    ) -> Result<(), CuptiError> {
        // SAFETY: valid subscriber handle.
        check(
            unsafe { sys::cuptiEnableCallback(1, self.raw, domain, cbid) },
            "cuptiEnableCallback",
        )
    }

    /// Enables every callback of `domain` (a range capture watches every driver call the
    /// application makes while the range is open).
    pub fn enable_domain(&self, domain: sys::CUpti_CallbackDomain) -> Result<(), CuptiError> {
        // SAFETY: valid subscriber handle.
        check(
            unsafe { sys::cuptiEnableDomain(1, self.raw, domain) },
            "cuptiEnableDomain",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cupti_releases_against_drivers() {
        assert_eq!(cupti_release(130001), (13, 0));
        assert_eq!(cupti_release(130400), (13, 4));
        // The toolkit's own CUPTI on its driver, and an older 13.x on a newer driver.
        assert!(profiler_compatibility(130001, 13000).is_ok());
        assert!(profiler_compatibility(130001, 13040).is_ok());
        // Newer than the driver: refused, with both versions named.
        let e = profiler_compatibility(130400, 13000).unwrap_err();
        assert!(e.contains("13.4") && e.contains("13.0"), "{e}");
        assert!(!e.contains("  "), "{e}");
        // Another major release than the bindings.
        let e = profiler_compatibility(120900, 13000).unwrap_err();
        assert!(e.contains("12.9"), "{e}");
        let e = profiler_compatibility(26, 13000).unwrap_err();
        assert!(e.contains("CUDA 12 or older"), "{e}");
    }
}
