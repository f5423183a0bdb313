//! The record unit: one dispatch captured to a file. It opens at the launch's ENTER (the
//! pre-state taken), closes at its EXIT (the post-state), and goes to the sink.

use kreplay_cuda::ForeignFunction;
use kreplay_protocol::config::{demangle, short_kernel_name, MemoryScope};

use super::state::Recorder;
use crate::capture::{after_launch, before_launch, repeat_launch, Pending, PreInput};
use crate::error::RecordError;
use crate::launch::{self, LaunchView};
use crate::touched_run::TouchedLaunch;

impl Recorder {
    /// The capture's pre-state at the launch's ENTER. `in_range`: the first step of a range
    /// (which compares its steps itself, see `PreInput::compare_later`).
    pub(super) fn begin(
        &self,
        view: &LaunchView,
        name: String,
        (index, launch_index, correlation): (u64, u64, u32),
        in_range: bool,
    ) -> Result<Pending, RecordError> {
        // SAFETY: inside the launch callback that decoded the view.
        let function = unsafe { view.foreign_function() };
        let layout = function.parameter_layout();
        // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
        let args =
            unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
        let target = self.target(&name, Some(&function))?;
        let open_file = self.outputs.opener(index, &name);
        let touched = self.touched_launch(view, (&function, &target.module.image), &args, &layout);
        let mut p = before_launch(PreInput {
            view,
            function,
            args,
            layout,
            kernel_name: name,
            module: target.module,
            module_objects: &target.objects,
            allocations: target.allocations,
            correlation,
            open_file: Some(&open_file),
            compare_later: touched.is_none() && !in_range,
        })?;
        self.describe(&mut p.data, index, launch_index, target.device);
        p.touched = touched;
        Ok(p)
    }

    /// `--memory touched` on the Sanitizer API: the launch its instrumented run repeats, or
    /// why it cannot be repeated; none in other modes.
    pub(super) fn touched_launch(
        &self,
        view: &LaunchView,
        (function, image): (&ForeignFunction, &std::sync::Arc<Vec<u8>>),
        args: &[u8],
        layout: &[(u32, u32)],
    ) -> Option<Result<TouchedLaunch, String>> {
        if self.config.memory != MemoryScope::Touched || crate::touched_run::front().is_none() {
            return None;
        }
        if crate::touched_run::prints_once(image) {
            return Some(Err(
                "the kernel's module calls printf: running it once more would print its output again".into(),
            ));
        }
        if let Some(why) = crate::touched_run::unseen_accesses(layout) {
            return Some(Err(why));
        }
        Some(
            repeat_launch(view, layout, args)
                .map(|(config, args)| TouchedLaunch {
                    function: *function,
                    config,
                    args,
                })
                .map_err(|why| format!("this launch cannot be repeated ({why})")),
        )
    }

    /// The pages the dispatch touched, found by its instrumented run; whole regions (and the
    /// reason, on stderr and in the capture's notes) when they cannot be.
    fn find_touched(&self, p: &mut Pending) {
        let (Some(touched), Some(front)) = (p.touched.as_mut(), crate::touched_run::front()) else {
            return;
        };
        let t = std::time::Instant::now();
        let views: Vec<u64> = p.data.textures.linear_addresses().collect();
        let found = match touched {
            Ok(launch) => {
                crate::touched_run::find_pages(front, launch, &mut p.data.snapshots, &views)
            }
            Err(why) => Err(why.clone()),
        };
        let ns = t.elapsed().as_nanos() as u64;
        p.data.stall_phases.push(("touched", ns));
        p.data.stall_ns += ns;
        match found {
            Ok(f) => p.data.notes.push(f.note()),
            Err(why) => {
                for s in &mut p.data.snapshots {
                    s.touched = None;
                }
                let name = short_kernel_name(&demangle(&p.data.dispatch.kernel_name));
                crate::diag!(
                    "kreplay: {name}: --memory touched: {why}; this capture holds whole regions, as --memory reachable"
                );
                p.data.notes.push(format!(
                    "--memory touched fell back to whole regions: {why}"
                ));
            }
        }
    }

    pub(super) fn finish(&self, mut pending: Pending) {
        if let Err(e) = after_launch(&mut pending) {
            let name = short_kernel_name(&demangle(&pending.data.dispatch.kernel_name));
            self.error(format!("capture of {name} failed after the launch: {e}"));
            return;
        }
        self.find_touched(&mut pending);
        // The stall is over: the steps a buffered trace kept are printed now.
        crate::trace::flush();
        // The launch is over (`after_launch` synchronised the context): its timer serves the
        // next capture of this context, so no `cuMemFreeHost` waits here on the app's time.
        let Pending { data, timer, .. } = pending;
        crate::spares::return_timer(timer);
        self.sink.write(data);
    }
}
