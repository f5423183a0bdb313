//! How many replays run at once and on which GPU each goes. Timing wants a GPU to itself, so
//! by default there is one child per device and `--jobs` above that is refused unless timing
//! is off (`--no-timing`: correctness sweeps, where children may share a GPU). Each new child
//! goes to the device with the fewest running, the lowest ordinal on a tie.

/// The number of children at once: `jobs` as asked, or one per device (`slots`: devices, or
/// 1 when none was found and the children are left to say why).
pub fn job_count(jobs: Option<usize>, slots: usize, timing: bool) -> Result<usize, String> {
    let slots = slots.max(1);
    match jobs {
        None => Ok(slots),
        Some(0) => Err("--jobs is at least 1".into()),
        Some(n) if n > slots && timing => Err(format!(
            "--jobs {n} would put more than one timed replay on a GPU ({slots} device(s)): \
             timings would disturb each other; add --no-timing for a correctness sweep, or \
             give more --devices"
        )),
        Some(n) => Ok(n),
    }
}

/// The `CUDA_VISIBLE_DEVICES` a child pinned to `ordinal` gets: the ordinal-th entry of this
/// process's own list when it has one (ordinals count what this process sees), else the
/// ordinal itself (`choose_devices` refuses ordinals past the list when a driver counts them).
pub fn child_visible(parent: Option<&str>, ordinal: u32) -> String {
    parent
        .and_then(|p| {
            p.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .nth(ordinal as usize)
        })
        .map_or_else(|| ordinal.to_string(), str::to_string)
}

/// The GPUs a run uses, as ordinals this process sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoice {
    pub ordinals: Vec<u32>,
    /// `--devices` was taken as given, unchecked: no driver was found to count the GPUs
    /// (each child then reports the driver's own error).
    pub unchecked: bool,
}

/// The GPUs of a run: `--devices` as `asked`, every ordinal below the `visible` count the
/// driver reports, or without `--devices` every visible GPU. `visible` is None when no driver
/// was found: there is nothing to check against, and `asked` is taken as given. An ordinal
/// at or past the count is refused before any child starts: `child_visible` would send it
/// past this process's own `CUDA_VISIBLE_DEVICES` list (`parent_visible`, named in the
/// message), to a GPU this process was not given.
pub fn choose_devices(
    asked: Option<&str>,
    visible: Option<u32>,
    parent_visible: Option<&str>,
) -> Result<DeviceChoice, String> {
    let Some(asked) = asked else {
        return Ok(DeviceChoice {
            ordinals: (0..visible.unwrap_or(0)).collect(),
            unchecked: false,
        });
    };
    let ordinals = parse_devices(asked)?;
    let Some(count) = visible else {
        return Ok(DeviceChoice {
            ordinals,
            unchecked: true,
        });
    };
    if let Some(&bad) = ordinals.iter().find(|&&d| d >= count) {
        let sees = match count {
            0 => "this process sees no GPU".to_string(),
            1 => "this process sees 1 GPU (ordinal 0)".to_string(),
            n => format!("this process sees {n} GPUs (ordinals 0 to {})", n - 1),
        };
        let through = parent_visible
            .map(|v| format!(" through CUDA_VISIBLE_DEVICES={v}"))
            .unwrap_or_default();
        return Err(format!(
            "--devices {asked}: there is no device {bad}: {sees}{through}; ordinals count the \
             GPUs this process sees (nvidia-smi -L lists them all)"
        ));
    }
    Ok(DeviceChoice {
        ordinals,
        unchecked: false,
    })
}

/// `--devices 0,2,3`: ordinals, each once.
pub fn parse_devices(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let d: u32 = part
            .parse()
            .map_err(|_| format!("--devices {s}: {part:?} is not a device ordinal (0, 1, ...)"))?;
        if out.contains(&d) {
            return Err(format!("--devices {s}: device {d} is named twice"));
        }
        out.push(d);
    }
    Ok(out)
}

/// Children running per device.
#[derive(Debug)]
pub struct Slots {
    running: Vec<usize>,
}

impl Slots {
    /// `devices` devices (at least one slot: with no device found the children run anyway).
    pub fn new(devices: usize) -> Slots {
        Slots {
            running: vec![0; devices.max(1)],
        }
    }

    /// The device index (into the device list) the next child goes to.
    pub fn take(&mut self) -> usize {
        let (i, _) = self
            .running
            .iter()
            .enumerate()
            .min_by_key(|(i, n)| (**n, *i))
            .unwrap_or((0, &0));
        if let Some(n) = self.running.get_mut(i) {
            *n += 1;
        }
        i
    }

    /// A child on device index `i` ended.
    pub fn give_back(&mut self, i: usize) {
        if let Some(n) = self.running.get_mut(i) {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_gets_one_child_per_device_sweeps_may_share() {
        assert_eq!(job_count(None, 4, true), Ok(4));
        assert_eq!(job_count(None, 0, true), Ok(1));
        assert_eq!(job_count(Some(2), 4, true), Ok(2));
        assert!(job_count(Some(5), 4, true)
            .expect_err("shared while timing")
            .contains("--no-timing"));
        assert_eq!(job_count(Some(8), 1, false), Ok(8));
        assert!(job_count(Some(0), 1, false).is_err());
    }

    #[test]
    fn a_child_sees_this_processs_own_device_list() {
        assert_eq!(child_visible(None, 2), "2");
        assert_eq!(child_visible(Some("3,5"), 1), "5");
        assert_eq!(child_visible(Some("GPU-aa, GPU-bb"), 1), "GPU-bb");
        assert_eq!(child_visible(Some("3"), 4), "4");
    }

    #[test]
    fn devices_parse_as_distinct_ordinals() {
        assert_eq!(parse_devices("0,2, 3"), Ok(vec![0, 2, 3]));
        assert!(parse_devices("0,0").is_err());
        assert!(parse_devices("a").is_err());
        assert!(parse_devices("").is_err());
    }

    // Catches: `CUDA_VISIBLE_DEVICES=3 --devices 4` sending a child to physical GPU 4.
    #[test]
    fn an_ordinal_past_the_visible_gpus_is_refused_naming_the_list() {
        let e = choose_devices(Some("4"), Some(1), Some("3")).expect_err("no device 4");
        assert!(e.contains("--devices 4: there is no device 4"), "{e}");
        assert!(
            e.contains("sees 1 GPU (ordinal 0) through CUDA_VISIBLE_DEVICES=3"),
            "{e}"
        );
        let e = choose_devices(Some("0,2"), Some(2), None).expect_err("no device 2");
        assert!(
            e.contains("no device 2: this process sees 2 GPUs (ordinals 0 to 1)"),
            "{e}"
        );
        let e = choose_devices(Some("0"), Some(0), Some("")).expect_err("no GPU");
        assert!(e.contains("sees no GPU"), "{e}");
        assert!(choose_devices(Some("1,x"), Some(4), None).is_err());
    }

    #[test]
    fn ordinals_below_the_count_pass_and_without_a_driver_nothing_is_checked() {
        let ok = choose_devices(Some("1,0"), Some(2), None).expect("both exist");
        assert_eq!(ok.ordinals, [1, 0]);
        assert!(!ok.unchecked);
        let every = choose_devices(None, Some(3), None).expect("every GPU");
        assert_eq!((every.ordinals, every.unchecked), (vec![0, 1, 2], false));
        let none = choose_devices(None, None, None).expect("no driver");
        assert!(none.ordinals.is_empty() && !none.unchecked);
        let blind = choose_devices(Some("4"), None, Some("3")).expect("no driver to ask");
        assert_eq!((blind.ordinals, blind.unchecked), (vec![4], true));
    }

    // Catches: two timed children piled on one GPU while another is idle.
    #[test]
    fn children_spread_over_the_least_busy_devices() {
        let mut s = Slots::new(3);
        assert_eq!([s.take(), s.take(), s.take()], [0, 1, 2]);
        s.give_back(1);
        assert_eq!(s.take(), 1);
        assert_eq!(s.take(), 0);
        s.give_back(2);
        s.give_back(2);
        assert_eq!(s.take(), 2);
        let mut none = Slots::new(0);
        assert_eq!([none.take(), none.take()], [0, 0]);
    }
}
