//! Which part of the recorder handles a decoded callback, and whether it is the
//! application's at all. Decisions only: the work is in the owners and units.

use kreplay_cuda::callbacks::{self, Group};
use kreplay_cuda::cupti_events::{ApiCall, CallbackEvent, ResourceEvent, Site};

use super::locking::lock;
use super::marks::{self, FlagGuard, IN_LAUNCH, SELF_CALLS};
use super::state::Recorder;

/// What the calling thread is doing for kreplay when a driver callback arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ThreadMarks {
    /// The recorder itself is calling the driver (capture, write, profile passes, counter
    /// batches, graph re-runs).
    pub self_calls: bool,
    /// Inside the ENTER callback of a launch.
    pub in_launch: bool,
}

impl ThreadMarks {
    fn now() -> ThreadMarks {
        ThreadMarks {
            self_calls: SELF_CALLS.with(|f| f.get()),
            in_launch: IN_LAUNCH.with(|f| f.get()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Handle,
    Ignore,
}

/// Whether a driver callback is the application's. Every launch kreplay makes (chunk scans,
/// L2 sweeps, timing gates, the heap probe, profile passes, graph ancestor re-runs) is
/// invisible at ENTER and EXIT, so that it is never matched, counted, listed or profiled: a
/// chunk scan matched at the EXIT site of the capture it serves waited on the capture's own
/// lock forever (issue 29). Graph calls the recorder makes are not the application's either.
fn driver_gate(group: Option<Group>, marks: ThreadMarks) -> Gate {
    match group {
        Some(Group::Launch) if marks.self_calls => Gate::Ignore,
        // A launch from inside a launch's ENTER callback is the recorder's; its EXIT too (and
        // at the process's exit the thread's other state may be gone already).
        Some(Group::Launch) if marks.in_launch => Gate::Ignore,
        Some(Group::Graph) if marks.self_calls => Gate::Ignore,
        // Allocation and image-load callbacks check the marks themselves (an allocation's
        // ENTER decides on counter batches first); module loads are judged by their kernels.
        _ => Gate::Handle,
    }
}

/// Where a driver callback goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Ignore,
    ImageLoad,
    Allocation,
    Graph,
    /// A launch; `mark_thread` at ENTER: the thread is marked as inside a launch until the
    /// callback returns, so that the recorder's launches made from inside it are refused.
    Launch {
        mark_thread: bool,
    },
}

fn route_of(group: Option<Group>, site: Site, marks: ThreadMarks) -> Route {
    match (group, driver_gate(group, marks)) {
        (_, Gate::Ignore) | (None, _) => Route::Ignore,
        (Some(Group::ImageLoad), _) => Route::ImageLoad,
        (Some(Group::Allocation), _) => Route::Allocation,
        (Some(Group::Graph), _) => Route::Graph,
        (Some(Group::Launch), _) => Route::Launch {
            mark_thread: site == Site::Enter,
        },
    }
}

/// Whether a driver call is one an open range must look at (at its ENTER, before it runs, to
/// take it as a step or refuse it; at its EXIT, to finish the step): the application's own
/// call (not the recorder's, not made inside a launch's ENTER), and not a launch (launches
/// come to the range through the launch callbacks).
fn watched_for_range(group: Option<Group>, marks: ThreadMarks) -> bool {
    group != Some(Group::Launch) && !marks.self_calls && !marks.in_launch
}

/// Whether a driver call can be a boundary of `--profiler-range` (`cuProfilerStart`,
/// `cuProfilerStop`): the application's own call, at its ENTER, so that each is seen once.
fn is_boundary_call(site: Site, marks: ThreadMarks) -> bool {
    site == Site::Enter && !marks.self_calls && !marks.in_launch
}

impl Recorder {
    /// Hands a decoded callback to the part of the recorder it concerns.
    pub(super) fn route(&self, event: CallbackEvent<'_>) {
        match event {
            CallbackEvent::Resource(ResourceEvent::ModuleLoaded { cubin }) => {
                if let Some(cubin) = cubin.filter(|_| !marks::variant_code()) {
                    self.on_module_loaded(cubin);
                }
            }
            CallbackEvent::Resource(ResourceEvent::ContextCreated { context }) => {
                // Also enabled for the walk's table, which counts contexts (`device_table`).
                if crate::device_resources::prewarms(&self.config) {
                    self.on_context_created(context)
                }
            }
            CallbackEvent::Resource(ResourceEvent::ContextDestroying { context }) => {
                self.on_context_destroy(context)
            }
            CallbackEvent::Resource(ResourceEvent::ModuleUnloading { context }) => {
                // A waiting dispatch's function may be in the module: its batch goes first.
                self.collect_batches(|c| c.context == context)
            }
            CallbackEvent::Api(call) => self.route_call(&call),
        }
    }

    fn route_call(&self, call: &ApiCall<'_>) {
        let group = callbacks::group(call.id);
        let marks = ThreadMarks::now();
        if self.records_range() && watched_for_range(group, marks) {
            match call.site {
                Site::Enter => self.on_call_in_range(call),
                Site::Exit => self.on_call_exit_in_range(call),
            }
        }
        // cuProfilerStart / cuProfilerStop of `--profiler-range`, after the range's own look.
        if self.selection.is_some() && is_boundary_call(call.site, marks) {
            self.on_boundary_call(call.id);
        }
        match route_of(group, call.site, marks) {
            Route::Ignore => {}
            Route::ImageLoad => self.on_image_load(call),
            Route::Allocation => self.on_allocation(call),
            Route::Graph => self.on_graph(call),
            Route::Launch { mark_thread } => {
                let _in_launch = if mark_thread {
                    FlagGuard::set(&IN_LAUNCH)
                } else {
                    None
                };
                match call.site {
                    Site::Enter => self.on_launch_enter(call),
                    Site::Exit => self.on_launch_exit(call.correlation),
                }
            }
        }
    }

    fn on_allocation(&self, call: &ApiCall<'_>) {
        // The walk's table (`device_table`) took its share before the route.
        if call.site == Site::Enter {
            return self.before_allocation_change(call);
        }
        if marks::self_calls() {
            return;
        }
        if let Some(change) = call.allocation() {
            lock(&self.allocations).apply(change.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: ThreadMarks = ThreadMarks {
        self_calls: false,
        in_launch: false,
    };
    // A chunk scan launched while a capture finishes at the application launch's EXIT: the
    // thread is marked as the recorder's, not inside a launch's ENTER.
    const FINISHING: ThreadMarks = ThreadMarks {
        self_calls: true,
        in_launch: false,
    };
    const INSIDE_ENTER: ThreadMarks = ThreadMarks {
        self_calls: true,
        in_launch: true,
    };

    #[test]
    fn the_recorders_own_launches_are_invisible_at_enter_and_exit() {
        let launch = Some(Group::Launch);
        assert_eq!(driver_gate(launch, APP), Gate::Handle);
        assert_eq!(driver_gate(launch, FINISHING), Gate::Ignore);
        assert_eq!(driver_gate(launch, INSIDE_ENTER), Gate::Ignore);
        assert_eq!(
            driver_gate(
                launch,
                ThreadMarks {
                    self_calls: false,
                    in_launch: true
                }
            ),
            Gate::Ignore
        );
        assert_eq!(driver_gate(Some(Group::Graph), FINISHING), Gate::Ignore);
        assert_eq!(driver_gate(Some(Group::Graph), APP), Gate::Handle);
        // Allocation callbacks judge the marks themselves (ENTER of a free collects batches).
        assert_eq!(
            driver_gate(Some(Group::Allocation), FINISHING),
            Gate::Handle
        );
    }

    #[test]
    fn an_application_launch_marks_its_thread_at_enter_only() {
        let launch = Some(Group::Launch);
        assert_eq!(
            route_of(launch, Site::Enter, APP),
            Route::Launch { mark_thread: true }
        );
        assert_eq!(
            route_of(launch, Site::Exit, APP),
            Route::Launch { mark_thread: false }
        );
        for site in [Site::Enter, Site::Exit] {
            assert_eq!(route_of(launch, site, FINISHING), Route::Ignore);
            assert_eq!(route_of(launch, site, INSIDE_ENTER), Route::Ignore);
        }
    }

    #[test]
    fn a_range_watches_the_applications_other_calls() {
        assert!(watched_for_range(None, APP));
        assert!(watched_for_range(Some(Group::Allocation), APP));
        assert!(watched_for_range(Some(Group::Graph), APP));
        assert!(!watched_for_range(Some(Group::Launch), APP));
        // The recorder's own synchronisations and copies are never steps.
        assert!(!watched_for_range(None, FINISHING));
        assert!(!watched_for_range(None, INSIDE_ENTER));
    }

    #[test]
    fn profiler_boundaries_are_the_applications_calls_at_enter() {
        assert!(is_boundary_call(Site::Enter, APP));
        assert!(!is_boundary_call(Site::Exit, APP));
        assert!(!is_boundary_call(Site::Enter, FINISHING));
        assert!(!is_boundary_call(Site::Enter, INSIDE_ENTER));
    }

    #[test]
    fn each_group_goes_to_its_own_part() {
        assert_eq!(
            route_of(Some(Group::ImageLoad), Site::Enter, APP),
            Route::ImageLoad
        );
        // The recorder's own allocations reach the allocation part, which tells them apart.
        assert_eq!(
            route_of(Some(Group::Allocation), Site::Exit, FINISHING),
            Route::Allocation
        );
        assert_eq!(route_of(Some(Group::Graph), Site::Exit, APP), Route::Graph);
        assert_eq!(
            route_of(Some(Group::Graph), Site::Enter, FINISHING),
            Route::Ignore
        );
        assert_eq!(route_of(None, Site::Enter, APP), Route::Ignore);
    }
}
