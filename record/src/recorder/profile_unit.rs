//! The profile unit: one dispatch profiled in place (`kreplay profile`). It opens at the
//! launch's ENTER (the pristine copy and pass 0 prepared, see `profile`) and closes at its
//! EXIT (the passes, the application's output put back); with `--metrics` its counters come
//! later, in its context's batch (`counters`).

use kreplay_protocol::config::{short_kernel_name, MemoryScope};
use kreplay_protocol::report::ProfileRow;

use super::locking::lock;
use super::marks::{FlagGuard, IN_LAUNCH, SELF_CALLS, VARIANT_CODE};
use super::state::Recorder;
use crate::error::RecordError;
use crate::launch::{self, LaunchView};
use crate::profile::{self, Begun, Finished, ProfileInput, ProfilePending};

impl Recorder {
    /// At the launch's ENTER: the unit to close at EXIT, if the dispatch is profiled. A
    /// failure is reported; the application's launch runs regardless.
    pub(super) fn profile_enter(
        &self,
        view: &LaunchView,
        name: String,
        demangled: &str,
        (index, launch_index): (u64, u64),
        correlation: u32,
    ) -> Option<Box<ProfilePending>> {
        let short = short_kernel_name(demangled);
        let result = (|| {
            // SAFETY: inside the launch callback that decoded the view.
            let function = unsafe { view.foreign_function() };
            let layout = function.parameter_layout();
            // SAFETY: the view was decoded in this very callback; the layout is its function's.
            let args =
                unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
            let target = self.target(&name, Some(&function))?;
            let variant = self
                .config
                .variant
                .as_ref()
                .map(|vc| self.variant_for(vc, &name, view, &layout));
            let (variant, variant_refused) = match variant {
                None => (None, None),
                Some(Ok(v)) => (Some(v), None),
                Some(Err(why)) => (None, Some(why)),
            };
            let mut tool = lock(&self.tool);
            profile::profile_begin(
                ProfileInput {
                    view,
                    function,
                    args,
                    layout,
                    kernel_name: name.clone(),
                    short_name: short.clone(),
                    module_objects: &target.objects,
                    allocations: target.allocations,
                    match_index: index,
                    launch_index,
                    cache_flush: self.config.cache_flush,
                    restore_chunk: if self.config.memory == MemoryScope::Touched {
                        u64::from(kreplay_format::MIN_EXTENT_PAGE)
                    } else {
                        kreplay_format::DEFAULT_CHUNK_SIZE
                    },
                    max_passes: kreplay_protocol::config::MAX_PASSES,
                    variant,
                    variant_refused,
                    trace: self.config.trace,
                },
                correlation,
                tool.as_mut(),
            )
        })();
        match result {
            Ok(Begun::Skipped(row)) => self.profile_row(*row),
            Ok(Begun::Pending(p)) => return Some(p),
            Err(e) => self.error(format!(
                "profiling {short} (match {index}) failed: {e}; the application continues"
            )),
        }
        None
    }

    /// At the launch's EXIT: the passes, and the application's output put back.
    pub(super) fn profile_exit(&self, p: Box<ProfilePending>) {
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        // Launches of the passes must not be taken for the application's.
        let _in_launch = FlagGuard::force(&IN_LAUNCH);
        let short = p.short_name().to_string();
        let index = p.match_index();
        let mut metrics = lock(&self.metrics);
        let counters = !self.config.metrics.is_empty();
        // The variant's first launch can load its module lazily.
        let _variant = self
            .config
            .variant
            .is_some()
            .then(|| FlagGuard::force(&VARIANT_CODE));
        let result = profile::profile_finish(*p, lock(&self.tool).as_mut(), counters);
        match result {
            Ok(Finished::Row(row)) => self.profile_row(*row),
            Ok(Finished::Counters(q)) => self.queue_for_counters(&mut metrics, *q),
            Err(e) => self.error(format!(
                "profiling {short} (match {index}) failed after the launch: {e}; the application continues"
            )),
        }
    }

    pub(super) fn profile_row(&self, mut row: ProfileRow) {
        row.pid = self.outputs.pid;
        row.rank = self.outputs.rank;
        self.report.profile(row);
    }

    /// A matching kernel node of a CUDA graph in profile mode: not replayed in place yet.
    pub(super) fn profile_skipped(
        &self,
        name: &str,
        demangled: &str,
        (index, launch_index): (u64, u64),
        (grid, block): ([u32; 3], [u32; 3]),
        why: &str,
    ) {
        self.profile_row(ProfileRow {
            kernel: name.to_string(),
            short_name: short_kernel_name(demangled),
            match_index: index,
            launch_index,
            grid,
            block,
            skipped: Some(why.to_string()),
            ..Default::default()
        });
    }
}
