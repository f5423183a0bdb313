//! Finding the PTX of the captured kernel. The driver is handed code images through
//! `cuLibraryLoadData` (cudart's registration of a binary's fatbin), `cuModuleLoadData[Ex]`
//! and `cuModuleLoadFatBinary`; the recorder notes where PTX can be found at load time and
//! extracts the one module that defines the captured kernel when it writes the capture.
//!
//! Images inside a loaded binary (behind cudart's wrapper) stay mapped while the library is
//! loaded, so only their address is kept (PyTorch registers thousands). Images passed from
//! the heap may be freed after the call, so their PTX is copied at once, and only when it
//! defines a kernel the user asked for.

use std::sync::Arc;

use kreplay_format::fatbin::{self, ImageKind};
use kreplay_format::ptx::{self, target_arch};

/// Longest PTX text copied from a NUL-terminated image.
const MAX_TEXT: usize = 512 << 20;
/// Larger containers are not believed (a corrupt header).
const MAX_CONTAINER: u64 = 4 << 30;

/// Where PTX for some kernels can be found.
#[derive(Debug, Clone)]
pub enum PtxSource {
    /// A fatbin container inside a loaded binary, and which binary it was in (its load
    /// address and path, from `dladdr`) so that it is not read once that binary is unloaded.
    Mapped {
        addr: u64,
        len: u64,
        owner: Option<(usize, Vec<u8>)>,
    },
    /// PTX text copied when it was loaded.
    Text { arch: u32, text: Arc<Vec<u8>> },
}

/// Reads a NUL-terminated string of at most `max` bytes.
///
/// # Safety
/// `p` must point at readable memory up to and including a NUL byte, or `max` bytes.
unsafe fn c_text(p: *const u8, max: usize) -> Vec<u8> {
    let mut n = 0;
    // SAFETY: the caller guarantees readability up to the NUL or `max`.
    while n < max && unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the first n bytes were just read.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}

/// The first bytes of an image, stopping early at a NUL (PTX text may be short).
///
/// # Safety
/// `p` must point at a code image the driver is about to read.
unsafe fn head(p: *const u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for i in 0..16 {
        // SAFETY: an image is at least 16 bytes (ELF and fatbin headers), or NUL-terminated
        // text, where we stop at the NUL.
        let c = unsafe { *p.add(i) };
        // A NUL after text ends a (short) text image; binary headers start with bytes
        // that are not ASCII text (0x7f ELF, 0x50ed55ba, 0xb1436246), so they read on.
        let text_so_far = out
            .iter()
            .all(|b: &u8| b.is_ascii_graphic() || b.is_ascii_whitespace());
        out.push(c);
        if c == 0 && text_so_far {
            break;
        }
    }
    out
}

/// The loaded object (load address and path) whose mapping holds `addr`, per `dladdr`.
fn loaded_object(addr: u64) -> Option<(usize, Vec<u8>)> {
    // SAFETY: Dl_info is plain data; dladdr only reads the loader's tables and writes `info`.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr accepts any address and reports 0 when no loaded object contains it.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0 {
        return None;
    }
    let name = if info.dli_fname.is_null() {
        Vec::new()
    } else {
        // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
            .to_bytes()
            .to_vec()
    };
    Some((info.dli_fbase as usize, name))
}

/// Inspects an image at load time. `wanted` says whether a kernel name is one the user asked
/// for. Returns what to remember, if anything.
///
/// # Safety
/// `image` must be the pointer the application passed to a module or library load call,
/// inside the callback for that call.
pub unsafe fn inspect(image: *const u8, wanted: &dyn Fn(&str) -> bool) -> Option<PtxSource> {
    if image.is_null() {
        return None;
    }
    // SAFETY: per the caller, image is the code the driver is about to load.
    let h = unsafe { head(image) };
    match fatbin::classify(&h) {
        ImageKind::Wrapper => {
            let wrapper_bytes = if h.len() >= 16 { &h[..16] } else { return None };
            let addr = fatbin::wrapper_target(wrapper_bytes)?;
            // SAFETY: the wrapper points at the container inside the same loaded binary.
            let ch = unsafe { std::slice::from_raw_parts(addr as *const u8, 16) };
            let len = fatbin::container_len(ch).filter(|&l| l <= MAX_CONTAINER)?;
            // SAFETY: the container header says how long the container is; it is part of
            // the binary's mapped .nv_fatbin section.
            let all = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
            if fatbin::ptx_entries(all).is_empty() {
                return None;
            }
            Some(PtxSource::Mapped {
                addr,
                len,
                owner: loaded_object(addr),
            })
        }
        ImageKind::Container => {
            let len = fatbin::container_len(&h).filter(|&l| l <= MAX_CONTAINER)?;
            // SAFETY: a container image is as long as its header says.
            let all = unsafe { std::slice::from_raw_parts(image, len as usize) };
            fatbin::ptx_entries(all).into_iter().find_map(|e| {
                let text = e.text().ok()?;
                ptx::entry_names(&text)
                    .iter()
                    .any(|n| wanted(n))
                    .then(|| PtxSource::Text {
                        arch: e.arch,
                        text: Arc::new(text),
                    })
            })
        }
        ImageKind::Ptx => {
            // SAFETY: PTX images are NUL-terminated text.
            let text = unsafe { c_text(image, MAX_TEXT) };
            let arch = target_arch(&text);
            ptx::entry_names(&text)
                .iter()
                .any(|n| wanted(n))
                .then(|| PtxSource::Text {
                    arch,
                    text: Arc::new(text),
                })
        }
        ImageKind::Elf | ImageKind::Unknown => None,
    }
}

/// The PTX module (arch, text) that defines `kernel`, newest source first.
pub fn resolve(sources: &[PtxSource], kernel: &str) -> Option<(u32, Vec<u8>)> {
    for s in sources.iter().rev() {
        match s {
            PtxSource::Text { arch, text } => {
                if ptx::defines_entry(text, kernel) {
                    return Some((*arch, text.to_vec()));
                }
            }
            PtxSource::Mapped { addr, len, owner } => {
                // The library may have been unloaded (dlclose) since: read only when the
                // same object is still loaded at the same place.
                if owner.is_none() || loaded_object(*addr) != *owner {
                    continue;
                }
                // SAFETY: checked at load time, and the object that held it is still loaded
                // at the same address (dladdr above).
                let all = unsafe { std::slice::from_raw_parts(*addr as *const u8, *len as usize) };
                for e in fatbin::ptx_entries(all) {
                    if let Ok(text) = e.text() {
                        if ptx::defines_entry(&text, kernel) {
                            return Some((e.arch, text));
                        }
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::fatbin::golden;

    #[test]
    fn container_from_the_heap_is_copied_only_when_wanted() {
        let b = golden("driver_kernel.fatbin");
        // SAFETY: b is a complete container.
        let none = unsafe { inspect(b.as_ptr(), &|n| n == "other") };
        assert!(none.is_none());
        // SAFETY: as above.
        let got = unsafe { inspect(b.as_ptr(), &|n| n == "axpb") }.expect("PTX kept");
        let (arch, text) = resolve(&[got], "axpb").expect("resolves");
        assert_eq!(arch, 90);
        assert!(ptx::defines_entry(&text, "axpb"));
    }

    #[test]
    fn wrapped_container_is_remembered_by_address() {
        // Inside this test binary's own image, as cudart's fatbins are inside a loaded binary.
        static KAPPS: &[u8] = include_bytes!("../../testdata/fatbin/kapps.fatbin");
        let b = KAPPS;
        let second = fatbin::container_len(b).expect("first") as usize;
        let mut wrapper = [0u8; 24];
        wrapper[..4].copy_from_slice(&fatbin::WRAPPER_MAGIC.to_le_bytes());
        wrapper[4..8].copy_from_slice(&1u32.to_le_bytes());
        wrapper[8..16].copy_from_slice(&(b[second..].as_ptr() as u64).to_le_bytes());
        // SAFETY: the wrapper points into b, alive for the test.
        let src = unsafe { inspect(wrapper.as_ptr(), &|_| false) }.expect("has PTX");
        assert!(matches!(src, PtxSource::Mapped { .. }));
        let (_, text) = resolve(std::slice::from_ref(&src), "_Z5saxpyifPKfPf").expect("saxpy PTX");
        assert!(ptx::defines_entry(&text, "_Z5saxpyifPKfPf"));
        assert!(resolve(&[src], "no_such_kernel").is_none());
        // The same container on the heap belongs to no loaded object: remembered, but never
        // read back (it could have been freed, like the image of an unloaded library).
        let heap = golden("kapps.fatbin");
        wrapper[8..16].copy_from_slice(&(heap[second..].as_ptr() as u64).to_le_bytes());
        // SAFETY: the wrapper points into heap, alive for the test.
        let src = unsafe { inspect(wrapper.as_ptr(), &|_| false) }.expect("has PTX");
        assert!(matches!(src, PtxSource::Mapped { owner: None, .. }));
        assert!(resolve(&[src], "_Z5saxpyifPKfPf").is_none());
        // The first container has no PTX: nothing to remember.
        wrapper[8..16].copy_from_slice(&(heap.as_ptr() as u64).to_le_bytes());
        // SAFETY: as above.
        assert!(unsafe { inspect(wrapper.as_ptr(), &|_| true) }.is_none());
    }

    #[test]
    fn ptx_text_images() {
        let ptx = b"//\n.version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k1(\n.param .u64 a\n)\n{\nret;\n}\n\0";
        // SAFETY: NUL-terminated text.
        let src = unsafe { inspect(ptx.as_ptr(), &|n| n == "k1") }.expect("kept");
        let (arch, text) = resolve(&[src], "k1").expect("resolves");
        assert_eq!(arch, 80);
        assert_eq!(text.last(), Some(&b'\n'));
        // SAFETY: as above.
        assert!(unsafe { inspect(ptx.as_ptr(), &|n| n == "k2") }.is_none());
        // SAFETY: a short NUL-terminated string is read only up to its NUL.
        assert!(unsafe { inspect(c"//".as_ptr() as *const u8, &|_| true) }.is_none());
    }
}
