//! A kernel ready to launch, as the pass loop and a range's steps hold it.

use kreplay_cuda::{AsFunction, KernelArgs, LaunchConfig};

/// A kernel ready to launch: function, geometry and attributes, argument bytes.
pub struct Kernel<F: AsFunction> {
    pub function: F,
    pub config: LaunchConfig,
    pub args: KernelArgs,
}
