//! The GPUs a run of many replays uses, and what its records say of each. Found through the
//! driver (`cuDeviceGetCount`, which honours this process's own `CUDA_VISIBLE_DEVICES`); with
//! no driver or no device the list is empty and the children run anyway, each reporting the
//! driver's own error as its verdict `error`.

use kreplay_cuda::DriverUnavailable;

use crate::farm::schedule::child_visible;

/// One GPU children are pinned to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The child's `CUDA_VISIBLE_DEVICES`; None: leave the child's environment as it is.
    pub visible: Option<String>,
    /// As nvidia-smi prints it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: Option<String>,
    /// The kernel module's version (`580.95.05`), else the CUDA driver API's (`cuda 13.0`).
    pub driver: Option<String>,
}

/// How many GPUs this process sees; None when no driver answered (no library, or one that
/// would not initialise for another reason than having no device): nothing to count.
pub fn visible_count() -> Option<u32> {
    match kreplay_cuda::ensure_driver() {
        Ok(()) => {
            let n = kreplay_cuda::device_count().ok()?;
            Some(u32::try_from(n).unwrap_or(0))
        }
        Err(DriverUnavailable::NoDevice) => Some(0),
        Err(_) => None,
    }
}

/// The GPUs at `ordinals` (with nothing found: one slot that leaves the environment alone).
/// The driver is asked for versions and UUIDs only when `driver_found` (`visible_count`
/// answered): without its library, asking does not return.
pub fn describe(ordinals: &[u32], driver_found: bool) -> Vec<Gpu> {
    let parent = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let driver = driver_version(driver_found && !ordinals.is_empty());
    if ordinals.is_empty() {
        return vec![Gpu {
            visible: None,
            uuid: None,
            driver,
        }];
    }
    ordinals
        .iter()
        .map(|&o| Gpu {
            visible: Some(child_visible(parent.as_deref(), o)),
            uuid: i32::try_from(o)
                .ok()
                .filter(|_| driver_found)
                .and_then(|o| kreplay_cuda::Device::open(o).ok())
                .map(|d| uuid_text(&d.props().uuid)),
            driver: driver.clone(),
        })
        .collect()
}

/// The driver's version; the CUDA API's is asked only when `loaded` (the driver library was
/// found: asking without it does not return).
fn driver_version(loaded: bool) -> Option<String> {
    let module = std::fs::read_to_string("/proc/driver/nvidia/version").ok();
    module.as_deref().and_then(module_version).or_else(|| {
        if !loaded {
            return None;
        }
        let v = kreplay_cuda::driver_version().ok()?;
        Some(format!("cuda {}.{}", v / 1000, (v % 1000) / 10))
    })
}

/// The version in `/proc/driver/nvidia/version`'s first line (`NVRM version: NVIDIA UNIX
/// x86_64 Kernel Module  580.95.05  Thu Sep ...`): its first word of digits and dots.
fn module_version(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    first
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

fn uuid_text(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_version_is_read_from_the_first_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 2025\n\
                    GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(module_version(text).as_deref(), Some("580.95.05"));
        assert_eq!(module_version("garbage"), None);
    }

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7,
        ];
        assert_eq!(uuid_text(&u), "GPU-12345678-9abc-def0-0001-020304050607");
    }

    #[test]
    fn with_no_gpu_there_is_one_slot_that_leaves_the_environment_alone() {
        let g = describe(&[], false);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].visible, None);
        // `--devices` with no driver: pinned as asked, the driver never asked (it would not
        // return without its library).
        let blind = describe(&[4], false);
        assert_eq!(
            (blind[0].visible.is_some(), blind[0].uuid.as_ref()),
            (true, None)
        );
    }
}
