//! `record --memory touched`: the recorder on the Compute Sanitizer API's callbacks instead of
//! CUPTI's. On the 13.x drivers the two cannot both deliver callbacks in one process
//! (`scripts/probes/sanitizer-cupti`), so in that mode the launches, code images, module loads
//! and contexts come from the Sanitizer API's driver-API and resource domains: the same
//! callback ids and parameter blocks as CUPTI's, decoded into the same `CallbackEvent`s and
//! routed as CUPTI's are. The one thing CUPTI gives that the Sanitizer API does not is a
//! correlation id tying a call's ENTER to its EXIT: `Correlations` makes them up.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use kreplay_cuda::callbacks::{self, Group};
use kreplay_cuda::cupti_events::{ApiCall, CallbackEvent, ResourceEvent};
use kreplay_cuda::sanitizer::{self, domain, resource, SanitizerEvent};
use kreplay_protocol::config::Config;

use super::state::RECORDER;

/// One thread's calls still open (calls nest: the recorder's own inside the application's).
#[derive(Debug, Default)]
pub(super) struct Correlations {
    open: Vec<u32>,
}

impl Correlations {
    /// The id of the call at this site: a new one (from `next`) at ENTER, the innermost open
    /// call's at EXIT (a new one when none is open: an EXIT whose ENTER was not seen).
    pub(super) fn at(&mut self, enter: bool, next: impl FnOnce() -> u32) -> u32 {
        if enter {
            let id = next();
            self.open.push(id);
            id
        } else {
            self.open.pop().unwrap_or_else(next)
        }
    }
}

thread_local! {
    static OPEN_CALLS: RefCell<Correlations> = RefCell::default();
}

/// Whether this thread's thread-locals are gone or going (a callback during thread exit):
/// the router's (`marks::thread_locals_gone`) and this front end's own.
fn tearing_down() -> bool {
    super::marks::thread_locals_gone() || OPEN_CALLS.try_with(|_| ()).is_err()
}

/// Process-wide, like CUPTI's: the record units are keyed by it.
static NEXT_CORRELATION: AtomicU32 = AtomicU32::new(1);

fn correlation(enter: bool) -> u32 {
    let next = || NEXT_CORRELATION.fetch_add(1, Ordering::Relaxed);
    OPEN_CALLS
        .try_with(|c| c.borrow_mut().at(enter, next))
        .unwrap_or_else(|_| next())
}

/// `KREPLAY_DEBUG_SANITIZER`: each driver-API call the Sanitizer API reports, at its ENTER,
/// on stderr (which entry points and kernel names an application's launches arrive under).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KREPLAY_DEBUG_SANITIZER").is_some())
}

fn trace(cbid: u32, data: &sanitizer::CallbackData) {
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            "-".to_string()
        } else {
            // SAFETY: the Sanitizer API passes NUL-terminated names, or null, valid during
            // the callback.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    crate::diag!(
        "kreplay: sanitizer: driver cbid {cbid} {} symbol {}",
        text(data.function_name),
        text(data.symbol_name)
    );
}

unsafe extern "C" fn callback(_userdata: *mut c_void, dom: u32, cbid: u32, cbdata: *const c_void) {
    let r = std::panic::catch_unwind(|| {
        if super::marks::forked() || cbdata.is_null() {
            return;
        }
        // The Sanitizer API also calls back while a thread's thread-locals are being torn down
        // (seen on the H200 under JAX and Triton); the router reads them, so such a late call
        // is dropped here rather than panicking there.
        if tearing_down() {
            return;
        }
        if dom == domain::DRIVER_API {
            // SAFETY: the driver-API domain passes a `Sanitizer_CallbackData`, alive during
            // this callback.
            let data = unsafe { &*cbdata.cast::<sanitizer::CallbackData>() };
            let enter = data.callback_site == sanitizer::API_ENTER;
            if enter && tracing() {
                trace(cbid, data);
            }
            let id = correlation(enter);
            let Some(rec) = RECORDER.get() else { return };
            // SAFETY: that payload, with its callback id; the call does not outlive this.
            let call = unsafe { ApiCall::from_sanitizer(cbid, id, data) };
            return rec.route(CallbackEvent::Api(call));
        }
        let Some(rec) = RECORDER.get() else { return };
        // SAFETY: what the Sanitizer API passed for (dom, cbid), read during the callback.
        let event = match unsafe { sanitizer::decode(dom, cbid, cbdata) } {
            SanitizerEvent::ModuleLoaded { cubin, .. } => ResourceEvent::ModuleLoaded { cubin },
            SanitizerEvent::ContextCreated { context } => ResourceEvent::ContextCreated { context },
            SanitizerEvent::ContextDestroying { context } => {
                if let Some(f) = crate::touched_run::front() {
                    f.forget_context(context);
                }
                ResourceEvent::ContextDestroying { context }
            }
            SanitizerEvent::ModuleUnloading { context, .. } => {
                ResourceEvent::ModuleUnloading { context }
            }
            _ => return,
        };
        rec.route(CallbackEvent::Resource(event));
    });
    if r.is_err() {
        crate::diag!("kreplay: internal error in the recorder (caught); the application continues");
    }
}

/// Subscribes to the Sanitizer API and enables what a `record` needs (CUPTI's `subscribe`
/// enables the same for the CUPTI front end); why not, with nothing left subscribed.
pub(super) fn subscribe(config: &Config) -> Result<(), String> {
    let front = crate::touched_run::start(callback)?;
    let (api, sub) = (&front.api, front.subscription);
    let enable = || -> Result<(), sanitizer::SanitizerError> {
        for g in [Group::Launch, Group::Graph, Group::ImageLoad] {
            for id in callbacks::ids(g) {
                api.enable_callback(sub, domain::DRIVER_API, id)?;
            }
        }
        // A range capture sees every memory and stream operation while it is open (as on
        // CUPTI, `hook::subscribe`).
        if config.launch_range.is_some() || config.boundary_range.is_some() {
            api.enable_domain(sub, domain::DRIVER_API)?;
        }
        let mut resources = vec![resource::MODULE_LOADED, resource::CONTEXT_DESTROY_STARTING];
        if crate::device_resources::prewarms(config) {
            resources.push(resource::CONTEXT_CREATION_FINISHED);
        }
        for id in resources {
            api.enable_callback(sub, domain::RESOURCE, id)?;
        }
        Ok(())
    };
    enable().map_err(|e| {
        let _ = api.unsubscribe(sub);
        crate::touched_run::clean_up();
        e.to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: an EXIT given a new id (its record unit never closes), or nested calls' ids
    // crossed (the recorder's own call inside a launch's ENTER closing the launch's unit).
    #[test]
    fn a_calls_exit_gets_its_enters_id_and_nested_calls_their_own() {
        let mut n = 0;
        let mut next = || {
            n += 1;
            n
        };
        let mut c = Correlations::default();
        let outer = c.at(true, &mut next);
        let inner = c.at(true, &mut next);
        assert_ne!(outer, inner);
        assert_eq!(c.at(false, &mut next), inner);
        let second = c.at(true, &mut next);
        assert_eq!(c.at(false, &mut next), second);
        assert_eq!(c.at(false, &mut next), outer);
        let orphan = c.at(false, &mut next);
        assert!(![outer, inner, second].contains(&orphan));
    }
}
