//! The pass loop: restore → (flush L2) → launch → time → (check), as many times as asked.
//! `Replayer` owns what a pass needs (the kernel ready to launch, the restorer, a stream) and
//! nothing about where they came from, so the player (a capture made live) and the in-process
//! replay service (a live dispatch of the application) run the same loop.

use std::time::Instant;

use kreplay_cuda::cache::L2Flush;
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{AsFunction, DeviceProps, Event, KernelArgs, LaunchConfig, Stream};
use serde::Serialize;

use crate::arrays::ArraySync;
use crate::error::PlayError;
use crate::options::{CacheState, RunOptions, Verification};
use crate::restore::Restorer;

/// The L2 flush sweeps this many times the L2 size (at least `MIN_FLUSH_BYTES`).
const FLUSH_L2_MULTIPLE: u64 = 4;
const MIN_FLUSH_BYTES: u64 = 64 << 20;

/// A read-only L2 sweep sized for a device.
pub fn new_flush(props: &DeviceProps) -> Result<L2Flush, PlayError> {
    let bytes = (props.l2_bytes * FLUSH_L2_MULTIPLE).max(MIN_FLUSH_BYTES);
    Ok(L2Flush::new(bytes as usize, props.sm_count)?)
}

/// A kernel ready to launch: function, geometry and attributes, argument bytes.
pub struct Kernel<F: AsFunction> {
    pub function: F,
    pub config: LaunchConfig,
    pub args: KernelArgs,
}

/// What the pass loop measured.
#[derive(Debug, Clone, Default)]
pub struct PassStats {
    pub timing: PassTiming,
    /// Every pass produced the same bytes in the write set (checked only when verifying).
    pub deterministic: bool,
    /// Passes whose output differed from the first pass's (1-based).
    pub divergent_passes: Vec<u32>,
}

/// Timing of the passes (`play --json` carries these fields at its top level).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassTiming {
    pub passes: u32,
    pub warmup: u32,
    pub durations_ns: Vec<u64>,
    pub min_ns: u64,
    pub median_ns: u64,
    pub max_ns: u64,
    /// Restore copy time per pass (not inside `durations_ns`), median.
    pub restore_median_ns: u64,
    /// Kernel times exclude launch overhead (the stream was gated until the launch queued).
    pub gated_timing: bool,
    /// From opening to the first launch, in milliseconds.
    pub setup_ms: f64,
}

fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

/// A dispatch that can be run again and again on restored memory.
pub struct Replayer<F: AsFunction> {
    // Field order is drop order: the kernel and copies before the stream they ran on.
    kernel: Kernel<F>,
    restorer: Restorer,
    /// Arrays the kernel writes, synchronised with their shadows around each pass.
    arrays: ArraySync,
    /// Made on the first pass that flushes.
    flush: Option<L2Flush>,
    props: DeviceProps,
    stream: Stream,
    /// The kernel ran at least once, so the write set must be restored before the next pass.
    launched: bool,
    opened: Instant,
}

impl<F: AsFunction> Replayer<F> {
    /// `restorer` must have been snapshotted with the input in place; `opened` is when the
    /// caller began preparing (for the setup time).
    ///
    /// # Safety
    /// `kernel`, launched with its arguments any number of times while the `Replayer` lives,
    /// touches only memory it may (`kreplay_cuda::launch`'s contract): `launch` queues it
    /// without further checks. A capture's kernel over the memory the replay placed for it,
    /// or the application's own dispatch replayed in place, qualifies.
    pub unsafe fn new(
        kernel: Kernel<F>,
        restorer: Restorer,
        stream: Stream,
        props: DeviceProps,
        opened: Instant,
    ) -> Replayer<F> {
        Replayer {
            kernel,
            restorer,
            arrays: ArraySync::default(),
            flush: None,
            props,
            stream,
            launched: false,
            opened,
        }
    }

    /// Arrays the kernel writes (see `arrays`).
    pub fn with_arrays(mut self, arrays: ArraySync) -> Replayer<F> {
        self.arrays = arrays;
        self
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Restores the write set and puts the restored texels into written arrays.
    fn restore(&self) -> Result<(), PlayError> {
        self.restorer.restore(&self.stream)?;
        self.arrays.push(&self.stream)?;
        Ok(())
    }

    pub fn restorer(&self) -> &Restorer {
        &self.restorer
    }

    /// Puts the input back when an earlier pass changed it.
    pub fn restore_if_launched(&self) -> Result<(), PlayError> {
        if self.launched {
            self.restore()?;
        }
        Ok(())
    }

    pub fn launch(&mut self) -> Result<(), PlayError> {
        let k = &mut self.kernel;
        // SAFETY: what the kernel touches was vouched for at `Replayer::new`.
        unsafe { kreplay_cuda::launch(&k.function, &k.config, &mut k.args, &self.stream)? };
        self.launched = true;
        Ok(())
    }

    /// Empties L2 (queued on the stream) when `cache` asks for it.
    pub fn prepare_cache(&mut self, cache: CacheState) -> Result<(), PlayError> {
        if cache == CacheState::Keep {
            return Ok(());
        }
        if self.flush.is_none() {
            self.flush = Some(new_flush(&self.props)?);
        }
        if let Some(f) = &self.flush {
            f.run(&self.stream)?;
        }
        Ok(())
    }

    /// Runs warm-up and timed passes. With verification on, `check_reference` is called once
    /// with the output of a pass that ran on the captured input (the first timed pass, or an
    /// extra one after warm-up), and every pass's write set is compared with the first's.
    pub fn run(
        &mut self,
        opts: &RunOptions,
        check_reference: &mut dyn FnMut() -> Result<(), PlayError>,
    ) -> Result<PassStats, PlayError> {
        let verify = opts.verification == Verification::Check;
        let mut timer = GatedTimer::new()?;
        let stop = Event::new()?;
        let restore_start = Event::new()?;
        let mut setup_ms = 0.0;
        for _ in 0..opts.warmup {
            if self.launched {
                self.restore()?;
            } else {
                setup_ms = self.opened.elapsed().as_secs_f64() * 1e3;
            }
            self.launch()?;
            self.stream.synchronize()?;
        }
        let mut durations = Vec::new();
        let mut restores = Vec::new();
        let mut divergent = Vec::new();
        let mut reference: Option<Vec<u32>> = None;
        for pass in 0..opts.passes.max(1) {
            if self.launched {
                restore_start.record(&self.stream)?;
                self.restore()?;
                stop.record(&self.stream)?;
                stop.synchronize()?;
                restores.push(stop.elapsed_ns_since(&restore_start)?);
            }
            self.prepare_cache(opts.cache)?;
            if !self.launched {
                setup_ms = self.opened.elapsed().as_secs_f64() * 1e3;
            }
            timer.arm(&self.stream)?;
            let launched_ok = self.launch();
            timer.finish(&self.stream)?;
            launched_ok?;
            durations.push(timer.elapsed_ns()?);
            if verify && !self.arrays.is_empty() {
                self.arrays.pull(&self.stream)?;
                self.stream.synchronize()?;
            }
            if verify {
                if pass == 0 && opts.warmup == 0 {
                    check_reference()?;
                }
                let digest = self.restorer.digest()?;
                match &reference {
                    None => reference = Some(digest),
                    Some(r) if *r != digest => divergent.push(pass + 1),
                    Some(_) => {}
                }
            }
        }
        if verify && opts.warmup > 0 {
            // Warm-up passes ran first: restore and run once more for the reference check.
            self.restore()?;
            self.launch()?;
            self.arrays.pull(&self.stream)?;
            self.stream.synchronize()?;
            check_reference()?;
        }
        if !verify && !self.arrays.is_empty() {
            // The shadows hold the last pass's output (for --save-output); a verified run
            // pulled it already.
            self.arrays.pull(&self.stream)?;
            self.stream.synchronize()?;
        }
        let mut sorted = durations.clone();
        sorted.sort_unstable();
        Ok(PassStats {
            timing: PassTiming {
                passes: opts.passes.max(1),
                warmup: opts.warmup,
                min_ns: sorted.first().copied().unwrap_or(0),
                median_ns: median(&durations),
                max_ns: sorted.last().copied().unwrap_or(0),
                durations_ns: durations,
                restore_median_ns: median(&restores),
                gated_timing: timer.is_gated(),
                setup_ms,
            },
            deterministic: divergent.is_empty(),
            divergent_passes: divergent,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_is_the_middle_of_the_sorted_values() {
        assert_eq!(super::median(&[5, 1, 3]), 3);
        assert_eq!(super::median(&[4, 1]), 4);
        assert_eq!(super::median(&[]), 0);
    }
}
