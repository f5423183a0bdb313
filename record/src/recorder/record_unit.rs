//! The record unit: one dispatch captured to a file. It opens at the launch's ENTER (the
//! pre-state taken), closes at its EXIT (the post-state), and goes to the sink.

use kreplay_protocol::config::{demangle, short_kernel_name};

use super::state::Recorder;
use crate::capture::{after_launch, before_launch, Pending, PreInput};
use crate::error::RecordError;
use crate::launch::{self, LaunchView};

impl Recorder {
    pub(super) fn begin(
        &self,
        view: &LaunchView,
        name: String,
        index: u64,
        launch_index: u64,
        correlation: u32,
    ) -> Result<Pending, RecordError> {
        // SAFETY: inside the launch callback that decoded the view.
        let function = unsafe { view.foreign_function() };
        let layout = function.parameter_layout();
        // SAFETY: the view was decoded in this very callback; the layout belongs to its function.
        let args =
            unsafe { launch::argument_bytes(view, &layout) }.ok_or(RecordError::NoArguments)?;
        let target = self.target(&name, Some(&function))?;
        let open_file = self.outputs.opener(index, &name);
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
        })?;
        self.describe(&mut p.data, index, launch_index, target.device);
        Ok(p)
    }

    pub(super) fn finish(&self, mut pending: Pending) {
        if let Err(e) = after_launch(&mut pending) {
            let name = short_kernel_name(&demangle(&pending.data.dispatch.kernel_name));
            self.error(format!("capture of {name} failed after the launch: {e}"));
            return;
        }
        // The launch is over (`after_launch` synchronised the context): its timer serves the
        // next capture of this context, so no `cuMemFreeHost` waits here on the app's time.
        let Pending { data, timer, .. } = pending;
        crate::spares::return_timer(timer);
        self.sink.write(data);
    }
}
