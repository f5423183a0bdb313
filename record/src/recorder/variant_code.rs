//! `kreplay profile --variant`: the variant's function for a matching dispatch, from its
//! module in the dispatch's context (loaded at the context's first match, on the
//! application's time), checked before any variant launch: the same parameter layout as the
//! original's, a block it allows, and room for the dispatch's dynamic shared memory.

use kreplay_engine::compare::Tolerance;
use kreplay_protocol::variant::VariantConfig;

use super::marks::{FlagGuard, SELF_CALLS, VARIANT_CODE};
use super::state::Recorder;
use crate::device_resources::with_variant_module;
use crate::launch::LaunchView;
use crate::variant::VariantInput;
use crate::variant_check::{block_difference, layout_difference};

impl Recorder {
    /// The variant to run beside the dispatch of `name` (its parameter layout `layout`), or
    /// why it cannot run there (the original runs as usual).
    pub(super) fn variant_for(
        &self,
        vc: &VariantConfig,
        name: &str,
        view: &LaunchView,
        layout: &[(u32, u32)],
    ) -> Result<VariantInput, String> {
        let _variant = FlagGuard::force(&VARIANT_CODE);
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        let wanted = vc.kernel.as_deref().unwrap_or(name);
        let function = with_variant_module(&vc.path, |m| {
            m.function(wanted).map_err(|e| {
                format!(
                    "the variant {} has no kernel {wanted} ({e}): name it with --variant-kernel \
                     (`cuobjdump -symbols` lists the cubin's)",
                    vc.path.display()
                )
            })
        })?;
        if let Some(why) = layout_difference(layout, &function.parameter_layout()) {
            return Err(format!(
                "the variant {wanted} was refused, no variant launch made: {why}"
            ));
        }
        let threads: u64 = view.block.iter().map(|&d| u64::from(d)).product();
        let max = function
            .max_threads_per_block()
            .map_err(|e| format!("cannot query the variant {wanted}: {e}"))?;
        if let Some(why) = block_difference(threads, max) {
            return Err(format!(
                "the variant {wanted} was refused, no variant launch made: {why}"
            ));
        }
        if view.shared_bytes > 0 {
            function.set_max_dynamic_shared(view.shared_bytes).map_err(|e| {
                format!(
                    "the variant {wanted} cannot have the dispatch's {} B of dynamic shared memory: {e}",
                    view.shared_bytes
                )
            })?;
        }
        let tolerance = match &vc.tolerance {
            Some(t) => Some(Tolerance::parse(t)?),
            None => None,
        };
        Ok(VariantInput {
            function,
            name: wanted.to_string(),
            tolerance,
            keep: vc.keep_variant,
            passes: self.config.passes,
        })
    }
}
