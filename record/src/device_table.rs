//! The application's `cuMemAlloc` allocations as its allocation callbacks showed them, so that
//! the reachable walk learns which allocation holds a word without asking the driver for each
//! of a pointer table's thousands of words (#34: about 0.33 us a lookup on the H200, 3.2-3.8 ms
//! for 10,000, most of the stall the capture is allowed).
//!
//! An entry the table keeps after its memory is gone would be worse than slow: the GPU pointer
//! scan of freed memory faults and ends the application's context. So the table answers only
//! while it is exact, and otherwise says nothing (the driver answers, as before):
//! - it holds `cuMemAlloc` / `cuMemAllocPitch` memory only, whose only ends are a free and the
//!   destruction of its context; nothing else (pools, VMM mappings, host memory, IPC) is in it;
//! - frees and unmaps take their entries out at the call's ENTER, before the driver runs them
//!   (a free that then fails only loses an entry: the driver answers for that memory);
//! - a context's destruction (CUPTI's CONTEXT_DESTROY_STARTING) empties it;
//! - it answers only while the process has one context (known by its handle from CUPTI's
//!   CONTEXT_CREATED; the destruction of another stops it):
//!   with two (another device) an entry's context would have to be asked, so the table stops
//!   answering for good; an allocation with no context counted stops it too. Whether CUPTI
//!   reports green contexts as created is not verified: their memory is the primary context's;
//! - an allocation over a live entry, by any allocator (the recorder's scratch, a pool, a VMM
//!   mapping), means a free went unseen: it stops answering for good;
//! - it follows a process only from the recorder's subscription at `cuInit` (`follow`), before
//!   any context exists, and only on the CUPTI front end, which enables every callback above.
//!
//! - the CUPTI callback hands every event to the table first (`on_event`), before it looks at
//!   the recorder, its thread-locals or the range: a free at a thread's or the process's exit
//!   (whose other driver calls the recorder drops), or one made while the recorder was still
//!   being set up, still ends its entry; a panic caught in the recorder stops the table.
//!
//! The rules are `DeviceTable`'s, a pure type tested here; the process's one table is a static
//! (`TABLE`) the CUPTI callback updates and the walk reads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use kreplay_cuda::callbacks::{self, Group};
use kreplay_cuda::cupti_events::{
    AllocationChange, AllocationKind, AllocationRequest, CallbackEvent, ResourceEvent, Site,
};

/// Whether the table answers, and why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Not following this process (never subscribed, or the Sanitizer front end).
    Off,
    /// Following: every allocation, free and context event is seen; `context`, the one
    /// context live now (its handle), if any.
    Following { context: Option<usize> },
    /// Stopped for good, and why.
    Lost(&'static str),
}

/// `cuMemAlloc` allocations by base (see the module's rules).
#[derive(Debug)]
pub struct DeviceTable {
    by_base: BTreeMap<u64, u64>,
    trust: Trust,
    /// Counts the table's changes (see `TableView`): the process's table counts in a static,
    /// any other (the tests') in one of its own.
    changes: &'static AtomicU64,
}

// The tests' tables (the process's is the static `TABLE`).
#[cfg(test)]
impl Default for DeviceTable {
    fn default() -> DeviceTable {
        DeviceTable {
            by_base: BTreeMap::new(),
            trust: Trust::Off,
            // One word per table made, never freed: tables other than the process's are the
            // tests' own.
            changes: Box::leak(Box::new(AtomicU64::new(0))),
        }
    }
}

impl DeviceTable {
    /// Starts following: called where every allocation, free and context callback is enabled,
    /// before the process has a context.
    pub fn follow(&mut self) {
        if self.trust == Trust::Off {
            self.trust = Trust::Following { context: None };
        }
    }

    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// Stops the answers for good.
    pub fn lose(&mut self, why: &'static str) {
        self.changed();
        self.by_base.clear();
        self.trust = Trust::Lost(why);
    }

    /// The context `handle` was created.
    pub fn context_created(&mut self, handle: usize) {
        self.changed();
        match self.trust {
            Trust::Following { context: None } => {
                self.trust = Trust::Following {
                    context: Some(handle),
                }
            }
            Trust::Following { context: Some(_) } => self.lose("a second CUDA context"),
            _ => {}
        }
    }

    /// The context `handle` is about to be destroyed: its allocations go with it (one context
    /// at most being followed, it holds all of them). The destruction of a context the table
    /// did not see created means it missed one: a context is known by its handle, not counted,
    /// so that such a miss cannot leave two contexts live behind a count of one.
    pub fn context_destroying(&mut self, handle: usize) {
        self.changed();
        self.by_base.clear();
        match self.trust {
            Trust::Following { context: Some(c) } if c == handle => {
                self.trust = Trust::Following { context: None }
            }
            Trust::Following { .. } => {
                self.lose("the destruction of a context the table did not see created")
            }
            _ => {}
        }
    }

    /// At the EXIT of the application's successful `cuMemAlloc` or `cuMemAllocPitch`:
    /// `[base, base + size)`.
    pub fn allocated(&mut self, base: u64, size: u64) {
        if self.trust == (Trust::Following { context: None }) {
            return self.lose("an allocation in a context the table did not see created");
        }
        if self.claimed(base, size) {
            self.changed();
            self.by_base.insert(base, size);
        }
    }

    /// At the EXIT of any other successful allocation (a pool's, a VMM mapping, managed
    /// memory, the recorder's own): the driver gave `[base, base + size)` out, so no entry may
    /// overlap it (one that does outlived a free the table missed). Whether the table still
    /// follows, and the range is sound.
    pub fn claimed(&mut self, base: u64, size: u64) -> bool {
        if !matches!(self.trust, Trust::Following { .. }) || size == 0 {
            return false;
        }
        let Some(end) = base.checked_add(size) else {
            self.lose("an allocation past the end of the address space");
            return false;
        };
        let below = self
            .by_base
            .range(..end)
            .next_back()
            .is_some_and(|(&b, &s)| b + s > base);
        if below {
            self.lose("an allocation over a live one (a free went unseen)");
            return false;
        }
        true
    }

    /// At the ENTER of a free (`cuMemFree`, `cuMemFreeAsync`) of `addr`, or of an unmap of
    /// `[addr, addr + len)`: the entries it may end go now, whether or not it succeeds.
    pub fn releasing(&mut self, addr: u64, len: u64) {
        self.changed();
        let end = addr.saturating_add(len.max(1));
        // An entry that starts below `addr` and reaches it goes too (an unmap names a range).
        let first = self
            .by_base
            .range(..=addr)
            .next_back()
            .filter(|(&b, &s)| b + s > addr)
            .map(|(&b, _)| b)
            .unwrap_or(addr);
        let gone: Vec<u64> = self.by_base.range(first..end).map(|(&b, _)| b).collect();
        for b in gone {
            self.by_base.remove(&b);
        }
    }

    /// The table's entries as a sorted list, for a walk to ask without the lock (see
    /// `TableView`); `None` when the table does not answer.
    pub fn view(&self) -> Option<TableView> {
        if !matches!(self.trust, Trust::Following { context: Some(_) }) {
            return None;
        }
        Some(TableView {
            changes: self.changes,
            generation: self.changes.load(Ordering::Acquire),
            entries: self.by_base.iter().map(|(&b, &s)| (b, s)).collect(),
            finger: 0,
        })
    }

    /// The allocation `(base, size)` holding `addr`, when the table may answer.
    pub fn holding(&self, addr: u64) -> Option<(u64, u64)> {
        if !matches!(self.trust, Trust::Following { context: Some(_) }) {
            return None;
        }
        let (&base, &size) = self.by_base.range(..=addr).next_back()?;
        (addr - base < size).then_some((base, size))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_base.len()
    }
}

/// Counts the process's table's changes (made under its lock, before the change): a
/// `TableView` whose count is no longer this one may hold an allocation freed since, and is
/// not asked again.
static CHANGES: AtomicU64 = AtomicU64::new(0);

impl DeviceTable {
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }
}

/// The table as it was when a walk began, asked without the lock: a pointer table's 10,000
/// words each took the lock and searched the B-tree (a third of the walk's host time on the
/// H200). Valid while nothing changed the table since (`current`): a free on another thread
/// during the walk makes the walk ask the live table again.
#[derive(Debug, Clone)]
pub struct TableView {
    changes: &'static AtomicU64,
    generation: u64,
    entries: Vec<(u64, u64)>,
    /// Where the last answer was: a pointer table's words usually come in address order.
    finger: usize,
}

impl TableView {
    /// Whether the table is unchanged since the view was taken.
    pub fn current(&self) -> bool {
        self.changes.load(Ordering::Acquire) == self.generation
    }

    /// The entry `(base, size)` holding `addr`.
    pub fn holding(&mut self, addr: u64) -> Option<(u64, u64)> {
        let held = |&(b, s): &(u64, u64)| b <= addr && addr - b < s;
        // The last entry, then the next one, then the one before: a table's words walk the
        // allocations in order, ascending or descending (as an allocator hands them out).
        for at in [self.finger, self.finger + 1, self.finger.wrapping_sub(1)] {
            if let Some(e) = self.entries.get(at).filter(|e| held(e)) {
                self.finger = at;
                return Some(*e);
            }
        }
        let at = self
            .entries
            .partition_point(|&(b, _)| b <= addr)
            .checked_sub(1)?;
        let e = self.entries.get(at).filter(|e| held(e))?;
        self.finger = at;
        Some(*e)
    }
}

/// The process's table.
static TABLE: Mutex<DeviceTable> = Mutex::new(DeviceTable {
    by_base: BTreeMap::new(),
    trust: Trust::Off,
    changes: &CHANGES,
});

/// The process's table, locked (a panic elsewhere while holding it leaves it usable: every
/// change above leaves it consistent, or lost).
pub(crate) fn table() -> std::sync::MutexGuard<'static, DeviceTable> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The table's share of a CUPTI callback, taken before anything else: `self_calls`, whether
/// the recorder itself is calling the driver on this thread (its allocations are claimed, not
/// kept: `is_owned` would hide them from the walk anyway, but an entry freed later unmarked
/// would not).
pub(crate) fn on_event(event: &CallbackEvent<'_>, self_calls: bool) {
    if concerns(event) {
        table().take(event, self_calls);
    }
}

/// Whether an event is one the table takes (`on_event` locks the table for those only).
fn concerns(event: &CallbackEvent<'_>) -> bool {
    match event {
        CallbackEvent::Resource(r) => matches!(
            r,
            ResourceEvent::ContextCreated { .. } | ResourceEvent::ContextDestroying { .. }
        ),
        CallbackEvent::Api(call) => callbacks::group(call.id) == Some(Group::Allocation),
    }
}

/// The driver calls that free or unmap (`cuMemFree_v2`, `cuMemFreeAsync`, its per-thread
/// form, `cuMemUnmap`): one whose ENTER does not decode stops the table (what it frees is
/// unknown).
const RELEASES: [u32; 4] = [
    callbacks::cbid::FREE,
    callbacks::cbid::FREE_ASYNC,
    callbacks::cbid::FREE_ASYNC_PTSZ,
    callbacks::cbid::UNMAP,
];

impl DeviceTable {
    /// `on_event`'s work on this table.
    fn take(&mut self, event: &CallbackEvent<'_>, self_calls: bool) {
        match event {
            CallbackEvent::Resource(ResourceEvent::ContextCreated { context }) => {
                self.context_created(*context)
            }
            CallbackEvent::Resource(ResourceEvent::ContextDestroying { context }) => {
                self.context_destroying(*context)
            }
            // Before the driver frees, whoever frees: removing an entry is always safe.
            CallbackEvent::Api(call) if call.site == Site::Enter => {
                match call.allocation_request() {
                    Some(AllocationRequest::Release { addr, len }) => self.releasing(addr, len),
                    None if RELEASES.contains(&call.id) => {
                        self.lose("a free whose parameters could not be read")
                    }
                    _ => {}
                }
            }
            CallbackEvent::Api(call) => {
                if let Some(AllocationChange::Alloc { addr, size, kind }) = call.allocation() {
                    if kind == AllocationKind::Device && !self_calls {
                        self.allocated(addr, size);
                    } else {
                        self.claimed(addr, size);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `KREPLAY_DEBUG_TABLE`: `0` leaves the table out of the walk (every word asked of the
/// driver, as before it: the benchmark's baseline in the same build); `check` asks the driver
/// about every answer too and counts disagreements (the walk's debug line shows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableUse {
    On,
    Off,
    Check,
}

impl TableUse {
    pub(crate) fn from_env() -> TableUse {
        Self::from_value(std::env::var("KREPLAY_DEBUG_TABLE").ok().as_deref())
    }

    fn from_value(v: Option<&str>) -> TableUse {
        match v {
            Some("0") => TableUse::Off,
            Some("check") => TableUse::Check,
            _ => TableUse::On,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_cuda::cupti::sys as csys;
    use proptest::prelude::*;

    fn followed() -> DeviceTable {
        let mut t = DeviceTable::default();
        t.follow();
        t.context_created(CTX);
        t
    }

    /// The context handle the tests' table follows.
    const CTX: usize = 0xc0;

    proptest! {
        // Catches: the view's finger answering with the entry it last found for an address
        // outside it (the next word of a table pointing elsewhere), an address at an entry's
        // end taken as inside, or the view answering otherwise than the table in any order.
        #[test]
        fn the_view_answers_as_the_table_in_any_order(
            sizes in proptest::collection::vec(1u64..0x3000, 1..40),
            asks in proptest::collection::vec(0u64..0x80_000, 1..200),
        ) {
            let mut t = followed();
            let mut at = 0x1000u64;
            for &n in &sizes {
                t.allocated(at, n);
                at += n.next_multiple_of(0x1000) + 0x1000;
            }
            let mut v = t.view().expect("a followed table gives a view");
            for &a in &asks {
                prop_assert_eq!(v.holding(a), t.holding(a), "address {:#x}", a);
            }
        }
    }

    // Catches: a view still taken for current after a free (the walk would answer with an
    // allocation freed on another thread while it ran, and scan it), or after an allocation.
    #[test]
    fn any_change_to_the_table_outdates_its_views() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        let unchanged = t.view().expect("view");
        assert!(
            t.holding(0x1000).is_some() && unchanged.current(),
            "nothing changed yet"
        );
        let before = t.view().expect("view");
        t.releasing(0x1000, 0);
        assert!(!before.current(), "a free outdates a view");
        let before = t.view().expect("view");
        t.allocated(0x3000, 0x100);
        assert!(!before.current(), "an allocation outdates a view");
        t.lose("test");
        assert!(t.view().is_none(), "a lost table gives no view");
    }

    #[test]
    fn answers_only_while_following_one_context() {
        let mut t = DeviceTable::default();
        t.allocated(0x1000, 0x100);
        assert_eq!(t.holding(0x1000), None, "not following: nothing kept");
        t.follow();
        assert_eq!(t.holding(0x1000), None, "no context yet");
        t.context_created(CTX);
        t.allocated(0x1000, 0x100);
        assert_eq!(t.holding(0x1000), Some((0x1000, 0x100)));
        assert_eq!(t.holding(0x10ff), Some((0x1000, 0x100)));
        assert_eq!(t.holding(0x1100), None, "one past the end");
        assert_eq!(t.holding(0xfff), None);
        t.context_created(CTX + 1);
        assert_eq!(t.trust(), Trust::Lost("a second CUDA context"));
        assert_eq!(t.holding(0x1000), None);
        assert_eq!(t.len(), 0);
        t.context_destroying(CTX + 1);
        t.context_destroying(CTX);
        t.context_created(CTX);
        t.allocated(0x1000, 0x100);
        assert_eq!(t.holding(0x1000), None, "lost for good");
    }

    #[test]
    fn an_allocation_no_counted_context_could_hold_stops_the_answers() {
        let mut t = DeviceTable::default();
        t.follow();
        t.allocated(0x1000, 0x100);
        assert!(matches!(t.trust(), Trust::Lost(_)));
        t.context_created(CTX);
        t.allocated(0x2000, 0x100);
        assert_eq!(t.holding(0x2000), None);
    }

    #[test]
    fn another_allocators_memory_over_an_entry_stops_the_answers() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        assert!(t.claimed(0x2000, 0x100), "elsewhere: fine, and not kept");
        assert_eq!(t.holding(0x2000), None);
        assert_eq!(t.holding(0x1000), Some((0x1000, 0x100)));
        assert!(
            !t.claimed(0x1080, 0x1000),
            "over the entry: a free went unseen"
        );
        assert_eq!(t.holding(0x1000), None);
    }

    #[test]
    fn a_free_or_an_unmap_ends_entries_before_it_runs() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        t.allocated(0x2000, 0x100);
        t.allocated(0x3000, 0x100);
        t.releasing(0x1000, 1);
        assert_eq!(t.holding(0x1000), None);
        assert_eq!(t.holding(0x2000), Some((0x2000, 0x100)));
        t.releasing(0x7777, 1); // not an entry: nothing
        assert_eq!(t.len(), 2);
        // An unmap from inside the first to inside the second takes both.
        t.releasing(0x2080, 0x1000);
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_destroyed_context_takes_its_allocations_and_a_new_one_is_followed() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        t.context_destroying(CTX);
        assert_eq!(t.holding(0x1000), None);
        assert_eq!(t.trust(), Trust::Following { context: None });
        t.context_created(CTX + 1);
        t.allocated(0x1000, 0x200);
        assert_eq!(t.holding(0x11ff), Some((0x1000, 0x200)));
    }

    // Catches: contexts counted rather than known, where the destruction of one never seen
    // created (a missed creation) would leave two live behind a count of one.
    #[test]
    fn the_destruction_of_an_unseen_context_stops_the_answers() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        t.context_destroying(CTX + 7);
        assert!(matches!(t.trust(), Trust::Lost(_)));
        t.context_created(CTX + 8);
        t.allocated(0x1000, 0x100);
        assert_eq!(t.holding(0x1000), None);
    }

    #[test]
    fn an_allocation_over_a_live_one_stops_the_answers() {
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        t.allocated(0x1100, 0x100); // adjacent: fine
        assert_eq!(t.holding(0x1100), Some((0x1100, 0x100)));
        t.allocated(0x10f0, 0x20);
        assert!(matches!(t.trust(), Trust::Lost(_)));
        assert_eq!(t.holding(0x1000), None);
        let mut t = followed();
        t.allocated(u64::MAX - 4, 16);
        assert!(matches!(t.trust(), Trust::Lost(_)));
    }

    /// A CUPTI driver callback's payload, as CUPTI passes it.
    fn payload(
        site: csys::CUpti_ApiCallbackSite,
        params: *const std::ffi::c_void,
        result: &mut u32,
    ) -> csys::CUpti_CallbackData {
        csys::CUpti_CallbackData {
            callbackSite: site,
            functionName: std::ptr::null(),
            functionParams: params,
            functionReturnValue: (result as *mut u32).cast(),
            symbolName: std::ptr::null(),
            context: std::ptr::null_mut(),
            contextUid: 0,
            correlationData: std::ptr::null_mut(),
            correlationId: 1,
        }
    }

    /// `cuMemAlloc`'s parameters for 4 KiB, written to `dptr`.
    fn alloc_params(dptr: &mut u64) -> csys::cuMemAlloc_v2_params {
        csys::cuMemAlloc_v2_params {
            dptr,
            bytesize: 4096,
        }
    }

    /// Driver call `id` at `site` with `params`, returning `result`, through the table.
    fn call(
        t: &mut DeviceTable,
        id: u32,
        site: csys::CUpti_ApiCallbackSite,
        params: *const std::ffi::c_void,
        result: &mut u32,
        self_calls: bool,
    ) {
        take(t, id, &payload(site, params, result), self_calls);
    }

    fn take(t: &mut DeviceTable, id: u32, data: &csys::CUpti_CallbackData, self_calls: bool) {
        let domain = csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API;
        // SAFETY: a payload built above for callback `id`, alive during the call.
        let event = unsafe {
            kreplay_cuda::cupti_events::decode(
                domain,
                id,
                (data as *const csys::CUpti_CallbackData).cast(),
            )
        };
        t.take(&event.expect("a driver call"), self_calls);
    }

    // Catches: a free taken at its EXIT only (a walk between the driver's free and the EXIT
    // would scan freed memory), the recorder's own allocations kept, or its frees skipped.
    #[test]
    fn the_callbacks_reach_the_table_as_the_driver_sees_them() {
        use csys::CUpti_ApiCallbackSite::{CUPTI_API_ENTER, CUPTI_API_EXIT};
        use kreplay_cuda::callbacks::cbid;
        let mut t = followed();
        let mut ok = 0u32;
        let mut dptr: u64 = 0x7000_0000;
        let alloc = alloc_params(&mut dptr);
        let a = (&alloc as *const csys::cuMemAlloc_v2_params).cast();
        call(&mut t, cbid::ALLOC, CUPTI_API_ENTER, a, &mut ok, false);
        assert_eq!(t.holding(0x7000_0000), None, "nothing at the ENTER");
        call(&mut t, cbid::ALLOC, CUPTI_API_EXIT, a, &mut ok, false);
        assert_eq!(t.holding(0x7000_0fff), Some((0x7000_0000, 4096)));
        let free = csys::cuMemFree_v2_params { dptr: 0x7000_0000 };
        let f = (&free as *const csys::cuMemFree_v2_params).cast();
        call(&mut t, cbid::FREE, CUPTI_API_ENTER, f, &mut ok, true);
        assert_eq!(
            t.holding(0x7000_0000),
            None,
            "gone at the ENTER, whoever frees"
        );
        // The recorder's own allocation is claimed, not kept.
        call(&mut t, cbid::ALLOC, CUPTI_API_EXIT, a, &mut ok, true);
        assert_eq!(t.holding(0x7000_0000), None);
        // A failed allocation changes nothing.
        let mut failed = 2u32;
        let mut elsewhere: u64 = 0x9000_0000;
        let alloc = alloc_params(&mut elsewhere);
        let e = (&alloc as *const csys::cuMemAlloc_v2_params).cast();
        call(&mut t, cbid::ALLOC, CUPTI_API_EXIT, e, &mut failed, false);
        assert_eq!(t.holding(0x9000_0000), None);
        assert_eq!(t.trust(), Trust::Following { context: Some(CTX) });
    }

    // Catches: a release id left out of the callbacks the table is sent (or enabled), or the
    // filter in front of the lock dropping a site.
    #[test]
    fn every_release_reaches_the_table_through_the_filter() {
        use csys::CUpti_ApiCallbackSite::{CUPTI_API_ENTER, CUPTI_API_EXIT};
        use kreplay_cuda::callbacks::cbid;
        let group: Vec<u32> = callbacks::ids(Group::Allocation).collect();
        for id in RELEASES {
            assert!(
                group.contains(&id),
                "release id {id} outside the allocation group"
            );
        }
        let domain = csys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API;
        let free = csys::cuMemFree_v2_params { dptr: 0x7000_0000 };
        let f = (&free as *const csys::cuMemFree_v2_params).cast();
        let mut ok = 0u32;
        for site in [CUPTI_API_ENTER, CUPTI_API_EXIT] {
            let data = payload(site, f, &mut ok);
            // SAFETY: a payload built above for cuMemFree_v2, alive during the call.
            let event = unsafe {
                kreplay_cuda::cupti_events::decode(
                    domain,
                    cbid::FREE,
                    (&data as *const csys::CUpti_CallbackData).cast(),
                )
            };
            assert!(concerns(&event.expect("a driver call")), "{site:?}");
        }
        assert!(concerns(&CallbackEvent::Resource(
            ResourceEvent::ContextDestroying { context: 1 }
        )));
        assert!(concerns(&CallbackEvent::Resource(
            ResourceEvent::ContextCreated { context: 1 }
        )));
        let launch = csys::cuMemFree_v2_params { dptr: 0 };
        let data = payload(
            CUPTI_API_ENTER,
            (&launch as *const csys::cuMemFree_v2_params).cast(),
            &mut ok,
        );
        // SAFETY: as above; the id is a launch's, whose payload is never read by `concerns`.
        let event = unsafe {
            kreplay_cuda::cupti_events::decode(
                domain,
                cbid::LAUNCH_KERNEL,
                (&data as *const csys::CUpti_CallbackData).cast(),
            )
        };
        assert!(
            !event.as_ref().is_some_and(concerns),
            "a launch is not the table's"
        );
    }

    #[test]
    fn a_free_that_does_not_decode_stops_the_answers() {
        use csys::CUpti_ApiCallbackSite::CUPTI_API_ENTER;
        use kreplay_cuda::callbacks::cbid;
        let mut t = followed();
        t.allocated(0x1000, 0x100);
        let mut ok = 0u32;
        take(
            &mut t,
            cbid::FREE,
            &payload(CUPTI_API_ENTER, std::ptr::null(), &mut ok),
            false,
        );
        assert!(matches!(t.trust(), Trust::Lost(_)));
    }

    #[test]
    fn the_debug_switch_reads_its_three_words() {
        assert_eq!(TableUse::from_value(None), TableUse::On);
        assert_eq!(TableUse::from_value(Some("0")), TableUse::Off);
        assert_eq!(TableUse::from_value(Some("check")), TableUse::Check);
        assert_eq!(TableUse::from_value(Some("1")), TableUse::On);
    }

    /// One event the table may see (or, `Unseen`, one it missed).
    #[derive(Debug, Clone)]
    enum Event {
        Alloc(u8, u8),
        /// Another allocator's memory (a pool's, a VMM mapping, the recorder's own).
        Other(u8, u8),
        Free(u8),
        Unmap(u8, u8),
        UnseenFree(u8),
        Created,
        /// The destruction of the live context this picks (a handle never created when none
        /// is live).
        Destroyed(u8),
    }

    /// Pages the model's allocations start in: few, so that the driver reuses them often.
    const SLOTS: u8 = 32;

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (0..SLOTS, 1u8..8).prop_map(|(a, s)| Event::Alloc(a, s)),
            1 => (0..SLOTS, 1u8..8).prop_map(|(a, s)| Event::Other(a, s)),
            3 => (0..SLOTS).prop_map(Event::Free),
            1 => (0..SLOTS, 1u8..16).prop_map(|(a, s)| Event::Unmap(a, s)),
            1 => (0..SLOTS).prop_map(Event::UnseenFree),
            1 => Just(Event::Created),
            1 => any::<u8>().prop_map(Event::Destroyed),
        ]
    }

    /// Runs `events` through a table and a model driver (which allocates only where nothing
    /// live is, as the real one does), checking `each` answer against the driver's truth.
    fn run(
        events: Vec<Event>,
        each: impl Fn(
            &BTreeMap<u64, u64>,
            &BTreeMap<u64, u64>,
            u64,
            (u64, u64),
        ) -> Result<(), TestCaseError>,
    ) -> Result<(), TestCaseError> {
        let page = 0x1000u64;
        let mut t = DeviceTable::default();
        t.follow();
        let mut live: BTreeMap<u64, u64> = BTreeMap::new(); // base -> size, in bytes
        let mut other: BTreeMap<u64, u64> = BTreeMap::new(); // the other allocators' memory
        let mut contexts: Vec<usize> = Vec::new();
        let mut next_context = 1usize;
        let vacant = |live: &BTreeMap<u64, u64>, a: u64, s: u64| {
            live.iter().all(|(&b, &n)| b + n <= a || a + s <= b)
        };
        for e in events {
            match e {
                Event::Alloc(a, s) => {
                    let (a, s) = (u64::from(a) * page, u64::from(s) * page);
                    if !contexts.is_empty() && vacant(&live, a, s) && vacant(&other, a, s) {
                        live.insert(a, s);
                        t.allocated(a, s);
                    }
                }
                Event::Other(a, s) => {
                    let (a, s) = (u64::from(a) * page, u64::from(s) * page);
                    if !contexts.is_empty() && vacant(&live, a, s) && vacant(&other, a, s) {
                        other.insert(a, s);
                        t.claimed(a, s);
                    }
                }
                Event::Free(a) => {
                    let a = u64::from(a) * page;
                    t.releasing(a, 1);
                    live.remove(&a);
                    other.remove(&a);
                }
                Event::Unmap(a, s) => {
                    let (a, s) = (u64::from(a) * page, u64::from(s) * page);
                    t.releasing(a, s);
                    live.retain(|&b, &mut n| b + n <= a || a + s <= b);
                    other.retain(|&b, &mut n| b + n <= a || a + s <= b);
                }
                Event::UnseenFree(a) => {
                    live.remove(&(u64::from(a) * page));
                }
                Event::Created => {
                    contexts.push(next_context);
                    t.context_created(next_context);
                    next_context += 1;
                }
                Event::Destroyed(pick) => {
                    // The model frees every context's memory with any one of them: answers
                    // are only checked while one context lives, whose memory is all of it.
                    let handle = if contexts.is_empty() {
                        usize::MAX
                    } else {
                        contexts.remove(usize::from(pick) % contexts.len())
                    };
                    live.clear();
                    other.clear();
                    t.context_destroying(handle);
                }
            }
            for probe in 0..(u64::from(SLOTS) + 16) * 4 {
                let addr = probe * page / 4;
                if let Some((base, size)) = t.holding(addr) {
                    prop_assert_eq!(contexts.len(), 1);
                    prop_assert!(addr >= base && addr - base < size);
                    let given: BTreeMap<u64, u64> =
                        live.iter().chain(&other).map(|(&b, &n)| (b, n)).collect();
                    each(&live, &given, addr, (base, size))?;
                }
            }
        }
        Ok(())
    }

    proptest! {
        // The property that keeps the application alive: with every free seen (the CUPTI
        // front end sees them all), whatever the table answers is a live allocation, with
        // its true base and size.
        #[test]
        fn an_answer_is_always_a_live_allocation(
            events in prop::collection::vec(event(), 0..120)
                .prop_map(|v| v.into_iter().filter(|e| !matches!(e, Event::UnseenFree(_))).collect::<Vec<_>>())
        ) {
            run(events, |live, _, addr, (base, size)| {
                prop_assert_eq!(live.get(&base).copied(), Some(size), "{:#x}", addr);
                Ok(())
            })?;
        }

        // What a missed free can still do, and no more: the stale entry answers only while
        // its memory is given out to nobody else (the driver giving any of it out again, to
        // any allocator, ends the answers). The walk's GPU scan would still read freed memory
        // then, so safety rests on every free being seen (`on_event`, first in the callback).
        #[test]
        fn a_missed_free_never_answers_for_memory_given_out_again(
            events in prop::collection::vec(event(), 0..120)
        ) {
            run(events, |_, given, addr, (base, size)| {
                let other = given.iter().any(|(&b, &n)| (b, n) != (base, size) && b < base + size && base < b + n);
                prop_assert!(!other, "{:#x}: {:#x}+{:#x} overlaps another live allocation", addr, base, size);
                Ok(())
            })?;
        }
    }
}
