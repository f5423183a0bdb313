//! NVTX push/pop ranges, seen through NVTX's injection hook (`NVTX_INJECTION64_PATH` names
//! this library; NVTX calls `InitializeInjectionNvtx2`, and the recorder puts its own
//! functions into NVTX's function tables). Each thread keeps its stack of open ranges, so a
//! kernel launch knows which ranges it is inside: `--nvtx-include` selects by them, and
//! `kreplay list` shows the innermost one. Each push and pop is also an event for the recorder
//! (`crate::nvtx_events`: `record --nvtx-range`, `list --ranges`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};

pub use kreplay_protocol::nvtx::{NvtxFilter, OpenRange};

use crate::nvtx_events::{self, NvtxEvent};

thread_local! {
    static STACK: RefCell<Vec<OpenRange>> = const { RefCell::new(Vec::new()) };
}

/// This thread's open ranges are still there (not during its thread-locals' destruction).
pub(crate) fn alive() -> bool {
    STACK.try_with(|_| ()).is_ok()
}

/// The ranges open on this thread, outermost first (none once its thread-locals are gone).
pub fn open_ranges() -> Vec<OpenRange> {
    STACK.try_with(|s| s.borrow().clone()).unwrap_or_default()
}

/// The innermost open range on this thread, as a label.
pub fn innermost() -> Option<String> {
    STACK
        .try_with(|s| s.borrow().last().map(OpenRange::label))
        .ok()
        .flatten()
}

/// A push or pop on a thread whose thread-locals are gone (libraries push and pop ranges from
/// their exit handlers, after the main thread's were destroyed; seen on the H200 under
/// `--memory touched`) is not followed: NVTX's "no range" answer, and no panic message.
const GONE: c_int = -1;

fn push(domain: Option<String>, name: String) -> c_int {
    let Ok(depth) = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        s.push(OpenRange { domain, name });
        s.len() - 1
    }) else {
        return GONE;
    };
    // Outside the stack's borrow (the recorder may look at the stack again); the copy is made
    // only when the recorder wants the event.
    nvtx_events::emit(|| NvtxEvent::Push {
        thread: nvtx_events::this_thread(),
        stack: open_ranges(),
    });
    depth as c_int
}

fn pop(domain: Option<&str>) -> c_int {
    let popped = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        let i = s.iter().rposition(|r| r.domain.as_deref() == domain)?;
        s.remove(i);
        Some(i)
    });
    let Ok(Some(index)) = popped else {
        return GONE;
    };
    nvtx_events::emit(|| NvtxEvent::Pop {
        thread: nvtx_events::this_thread(),
        index,
    });
    index as c_int
}

/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: per the contract, a valid NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The message of an `nvtxEventAttributes_t` (version 3 layout: message type at byte 32, the
/// message pointer at byte 40); registered strings and wide strings are not read.
///
/// # Safety
/// `attr` is null or points at an `nvtxEventAttributes_t` valid for the call.
unsafe fn attribute_message(attr: *const u8) -> String {
    if attr.is_null() {
        return String::new();
    }
    // SAFETY: the struct holds its own size at byte 2; fields are read only inside it.
    let size = unsafe { attr.add(2).cast::<u16>().read_unaligned() } as usize;
    if size < 48 {
        return String::new();
    }
    // SAFETY: both fields lie inside the struct (size checked).
    let kind = unsafe { attr.add(32).cast::<i32>().read_unaligned() };
    // SAFETY: as above.
    let msg = unsafe { attr.add(40).cast::<*const c_char>().read_unaligned() };
    const NVTX_MESSAGE_TYPE_ASCII: i32 = 1;
    if kind == NVTX_MESSAGE_TYPE_ASCII {
        // SAFETY: an ASCII message is a NUL-terminated string valid during the call.
        unsafe { text(msg) }
    } else {
        "<registered or wide string>".into()
    }
}

/// A domain handle: a leaked name (domains live for the process).
fn domain_name(handle: *const c_void) -> Option<String> {
    if handle.is_null() {
        return None;
    }
    // SAFETY: non-null domain handles are the `Box<String>`s `domain_create_a` leaked.
    Some(unsafe { &*(handle as *const String) }.clone())
}

extern "C" fn range_push_a(message: *const c_char) -> c_int {
    // SAFETY: NVTX passes the application's NUL-terminated message.
    std::panic::catch_unwind(|| push(None, unsafe { text(message) })).unwrap_or(-1)
}

extern "C" fn range_push_ex(attr: *const u8) -> c_int {
    // SAFETY: NVTX passes the application's attributes.
    std::panic::catch_unwind(|| push(None, unsafe { attribute_message(attr) })).unwrap_or(-1)
}

extern "C" fn range_pop() -> c_int {
    std::panic::catch_unwind(|| pop(None)).unwrap_or(-1)
}

extern "C" fn domain_range_push_ex(domain: *const c_void, attr: *const u8) -> c_int {
    std::panic::catch_unwind(|| {
        // SAFETY: NVTX passes the application's attributes.
        push(domain_name(domain), unsafe { attribute_message(attr) })
    })
    .unwrap_or(-1)
}

extern "C" fn domain_range_pop(domain: *const c_void) -> c_int {
    std::panic::catch_unwind(|| pop(domain_name(domain).as_deref())).unwrap_or(-1)
}

extern "C" fn domain_create_a(name: *const c_char) -> *mut c_void {
    std::panic::catch_unwind(|| {
        // SAFETY: NVTX passes the application's NUL-terminated domain name.
        Box::into_raw(Box::new(unsafe { text(name) })) as *mut c_void
    })
    .unwrap_or(std::ptr::null_mut())
}

type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type FunctionTable = *mut *mut *const c_void;
type GetModuleFunctionTable = unsafe extern "C" fn(u32, *mut FunctionTable, *mut u32) -> c_int;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;
const CORE_RANGE_PUSH_EX: usize = 8;
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_POP: usize = 11;
const CORE2_DOMAIN_RANGE_PUSH_EX: usize = 4;
const CORE2_DOMAIN_RANGE_POP: usize = 5;
const CORE2_DOMAIN_CREATE_A: usize = 12;

/// Puts `slots` into one module's function table.
///
/// # Safety
/// `get` is NVTX's `GetModuleFunctionTable`.
unsafe fn install(get: GetModuleFunctionTable, module: u32, slots: &[(usize, *const c_void)]) {
    let mut table: FunctionTable = std::ptr::null_mut();
    let mut size = 0u32;
    // SAFETY: NVTX fills the table pointer and its length.
    if unsafe { get(module, &mut table, &mut size) } == 0 || table.is_null() {
        return;
    }
    for &(i, f) in slots {
        if i >= size as usize {
            continue;
        }
        // SAFETY: i < size: table[i] is NVTX's pointer to the slot for that function.
        let slot = unsafe { *table.add(i) };
        if !slot.is_null() {
            // SAFETY: the slot is a function pointer NVTX calls through.
            unsafe { *slot = f };
        }
    }
}

/// Entry point NVTX calls when `NVTX_INJECTION64_PATH` names this library. Returns 1 when the
/// hooks are in place, 0 otherwise (NVTX then runs without a tool; the application is
/// unaffected either way).
#[no_mangle]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    std::panic::catch_unwind(|| {
        let Some(get) = get_export_table else {
            return 0;
        };
        // SAFETY: NVTX's export-table getter; the callbacks table is static in NVTX.
        let cb = unsafe { get(ETID_CALLBACKS) } as *const ExportTableCallbacks;
        if cb.is_null() {
            return 0;
        }
        // SAFETY: a valid callbacks table; fields read only within its stated size.
        let Some(gmft) = (unsafe {
            if (*cb).struct_size < std::mem::size_of::<ExportTableCallbacks>() {
                None
            } else {
                (*cb).get_module_function_table
            }
        }) else {
            return 0;
        };
        // SAFETY: NVTX's GetModuleFunctionTable; the functions match NVTX's signatures.
        unsafe {
            install(
                gmft,
                MODULE_CORE,
                &[
                    (CORE_RANGE_PUSH_EX, range_push_ex as *const c_void),
                    (CORE_RANGE_PUSH_A, range_push_a as *const c_void),
                    (CORE_RANGE_POP, range_pop as *const c_void),
                ],
            );
            install(
                gmft,
                MODULE_CORE2,
                &[
                    (
                        CORE2_DOMAIN_RANGE_PUSH_EX,
                        domain_range_push_ex as *const c_void,
                    ),
                    (CORE2_DOMAIN_RANGE_POP, domain_range_pop as *const c_void),
                    (CORE2_DOMAIN_CREATE_A, domain_create_a as *const c_void),
                ],
            );
        }
        1
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_and_pops_per_domain() {
        let dom = domain_create_a(c"mydomain".as_ptr());
        assert_eq!(range_push_a(c"outer".as_ptr()), 0);
        // nvtxEventAttributes_t v3: size 48, ASCII message.
        let mut attr = [0u8; 48];
        attr[2..4].copy_from_slice(&48u16.to_le_bytes());
        attr[32..36].copy_from_slice(&1i32.to_le_bytes());
        let msg = c"inner";
        attr[40..48].copy_from_slice(&(msg.as_ptr() as usize as u64).to_le_bytes());
        assert_eq!(domain_range_push_ex(dom, attr.as_ptr()), 1);
        assert_eq!(innermost().as_deref(), Some("mydomain@inner"));
        // The default domain's pop leaves the other domain's range open.
        assert_eq!(range_pop(), 0);
        assert_eq!(
            open_ranges(),
            vec![OpenRange::new(Some("mydomain"), "inner")]
        );
        assert_eq!(domain_range_pop(dom), 0);
        assert!(open_ranges().is_empty());
        assert_eq!(range_pop(), -1);
        // A too-short attribute struct gives no message rather than a wild read.
        let short = [0u8; 8];
        assert_eq!(range_push_ex(short.as_ptr()), 0);
        assert_eq!(open_ranges(), vec![OpenRange::new(None, "")]);
        range_pop();
    }
}

#[cfg(test)]
mod exit_tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    static PUSHED: AtomicI32 = AtomicI32::new(0);
    static POPPED: AtomicI32 = AtomicI32::new(0);
    static STACK_WAS_GONE: AtomicI32 = AtomicI32::new(0);

    /// Pushes and pops from its destructor, as a library's exit handler does after the
    /// thread's thread-locals were destroyed.
    struct LateCaller;
    impl Drop for LateCaller {
        fn drop(&mut self) {
            STACK_WAS_GONE.store(i32::from(!alive()), Ordering::SeqCst);
            PUSHED.store(push(None, "late".into()), Ordering::SeqCst);
            POPPED.store(pop(None), Ordering::SeqCst);
        }
    }

    thread_local! {
        static LATE: LateCaller = const { LateCaller };
    }

    // Catches: a push or pop after the thread-locals were destroyed panicking in
    // `LocalKey::with` (caught by the entry point, but its message reaches the application's
    // stderr; seen on the H200 at exit). std runs a thread's destructors last registered
    // first, so LATE (registered first) is dropped after STACK.
    #[test]
    fn a_push_and_pop_after_the_thread_locals_are_gone_answer_no_range_without_panicking() {
        let joined = std::thread::spawn(|| {
            LATE.with(|_| ());
            assert_eq!(push(None, "live".into()), 0);
            assert_eq!(pop(None), 0);
        })
        .join();
        assert!(joined.is_ok(), "the thread panicked");
        assert_eq!(
            STACK_WAS_GONE.load(Ordering::SeqCst),
            1,
            "STACK outlived LATE"
        );
        assert_eq!(PUSHED.load(Ordering::SeqCst), GONE);
        assert_eq!(POPPED.load(Ordering::SeqCst), GONE);
    }
}
