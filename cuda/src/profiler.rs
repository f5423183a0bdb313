//! Hardware counters through the CUPTI range profiler and profiler host APIs (CUDA 12.6+),
//! wrapped once. The player drives it in user-replay mode: CUPTI says how many passes a
//! metric set needs, and the player replays the dispatch that many times, restoring memory
//! before each pass, inside one user range.
//!
//! libcupti is loaded lazily, only when counters are asked for: a player that never collects
//! counters never touches CUPTI, so it can run under `ncu` or `compute-sanitizer`.

use std::ffi::{c_char, CStr, CString};
use std::mem;
use std::ptr;

use crate::context::ContextHandle;
use crate::cupti::{check, sys, CuptiError};
use crate::device::Device;
use sys::CUptiResult;

/// A CUPTI parameter struct, zeroed, with its size set (CUPTI checks the size to know which
/// fields the caller knows about).
macro_rules! params {
    ($ty:ident, $size:ident) => {{
        // SAFETY: every CUPTI parameter struct is plain data (sizes, pointers, enums whose
        // zero value is valid); all-zero is the documented starting state.
        let mut p: sys::$ty = unsafe { mem::zeroed() };
        p.structSize = sys::$size as usize;
        p
    }};
}

/// The kind of a base metric, which decides its valid suffixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A count: `.sum`, `.avg`, `.min`, `.max` (and `.per_second`, `.pct_of_peak_*`, ...).
    Counter,
    /// A ratio: `.pct`, `.ratio`, `.max_rate`.
    Ratio,
    /// A throughput: `.avg.pct_of_peak_sustained_elapsed`, ...
    Throughput,
}

impl MetricKind {
    pub const ALL: [MetricKind; 3] = [
        MetricKind::Counter,
        MetricKind::Ratio,
        MetricKind::Throughput,
    ];

    fn raw(self) -> sys::CUpti_MetricType {
        match self {
            MetricKind::Counter => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_COUNTER,
            MetricKind::Ratio => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO,
            MetricKind::Throughput => sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT,
        }
    }

    fn from_raw(t: sys::CUpti_MetricType) -> MetricKind {
        match t {
            sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO => MetricKind::Ratio,
            sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT => MetricKind::Throughput,
            _ => MetricKind::Counter,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Ratio => "ratio",
            MetricKind::Throughput => "throughput",
        }
    }
}

/// What CUPTI says about a base metric.
#[derive(Debug, Clone)]
pub struct MetricProperties {
    pub kind: MetricKind,
    pub description: String,
    pub hw_unit: String,
    pub dim_unit: String,
}

fn owned(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI returns NUL-terminated strings that live as long as the host object.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `cuptiProfilerInitialize` for the life of the value.
pub struct ProfilerApi(());

impl ProfilerApi {
    pub fn initialize() -> Result<ProfilerApi, CuptiError> {
        let mut p = params!(
            CUpti_Profiler_Initialize_Params,
            Profiler_Initialize_Params_STRUCT_SIZE
        );
        check(
            // SAFETY: p is a valid, sized parameter struct.
            unsafe { sys::cuptiProfilerInitialize(&mut p) },
            "cuptiProfilerInitialize",
        )?;
        Ok(ProfilerApi(()))
    }
}

impl Drop for ProfilerApi {
    fn drop(&mut self) {
        let mut p = params!(
            CUpti_Profiler_DeInitialize_Params,
            Profiler_DeInitialize_Params_STRUCT_SIZE
        );
        // SAFETY: pairs with the successful initialize above.
        unsafe {
            sys::cuptiProfilerDeInitialize(&mut p);
        }
    }
}

/// Why the range profiler cannot run on a device (`None` when it can).
pub fn unsupported_reason(device: &Device) -> Result<Option<String>, CuptiError> {
    use sys::CUpti_Profiler_Support_Level as L;
    let mut p = params!(
        CUpti_Profiler_DeviceSupported_Params,
        Profiler_DeviceSupported_Params_STRUCT_SIZE
    );
    p.cuDevice = device.raw();
    p.api = sys::CUpti_Profiler_API::CUPTI_PROFILER_RANGE_PROFILING;
    check(
        // SAFETY: valid sized parameters; CUPTI only fills the support levels.
        unsafe { sys::cuptiProfilerDeviceSupported(&mut p) },
        "cuptiProfilerDeviceSupported",
    )?;
    if p.isSupported == L::CUPTI_PROFILER_CONFIGURATION_SUPPORTED {
        return Ok(None);
    }
    let mut why = Vec::new();
    for (level, what) in [
        (p.architecture, "the GPU architecture"),
        (p.sli, "SLI"),
        (p.vGpu, "vGPU"),
        (p.confidentialCompute, "confidential computing"),
        (p.cmp, "a CMP (crypto mining) GPU"),
        (p.wsl, "WSL"),
    ] {
        match level {
            L::CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED => {
                why.push(format!("{what} is not supported"))
            }
            L::CUPTI_PROFILER_CONFIGURATION_DISABLED => {
                why.push(format!("{what} disables profiling"))
            }
            _ => {}
        }
    }
    if why.is_empty() {
        why.push("CUPTI reports the device as not supported".into());
    }
    Ok(Some(why.join("; ")))
}

/// The chip name the host API needs (e.g. `GH100`).
pub fn chip_name(device: &Device) -> Result<String, CuptiError> {
    let mut p = params!(
        CUpti_Device_GetChipName_Params,
        Device_GetChipName_Params_STRUCT_SIZE
    );
    p.deviceIndex = device.ordinal().max(0) as usize;
    check(
        // SAFETY: valid sized parameters; CUPTI writes a pointer to a static string.
        unsafe { sys::cuptiDeviceGetChipName(&mut p) },
        "cuptiDeviceGetChipName",
    )?;
    Ok(owned(p.pChipName))
}

/// Which counters the context can read now (some are taken when another profiler runs).
pub fn counter_availability(ctx: ContextHandle) -> Result<Vec<u8>, CuptiError> {
    let mut p = params!(
        CUpti_Profiler_GetCounterAvailability_Params,
        Profiler_GetCounterAvailability_Params_STRUCT_SIZE
    );
    p.ctx = ctx.raw() as _;
    check(
        // SAFETY: a null image pointer asks for the size only.
        unsafe { sys::cuptiProfilerGetCounterAvailability(&mut p) },
        "cuptiProfilerGetCounterAvailability",
    )?;
    let mut image = vec![0u8; p.counterAvailabilityImageSize];
    p.pCounterAvailabilityImage = image.as_mut_ptr();
    check(
        // SAFETY: image holds counterAvailabilityImageSize bytes.
        unsafe { sys::cuptiProfilerGetCounterAvailability(&mut p) },
        "cuptiProfilerGetCounterAvailability",
    )?;
    Ok(image)
}

fn name_pointers(names: &[CString]) -> Vec<*const c_char> {
    names.iter().map(|n| n.as_ptr()).collect()
}

/// A profiler host object: knows the chip's metrics, builds configuration images, and turns
/// counter data into metric values. Needs no GPU work.
pub struct MetricHost {
    raw: *mut sys::CUpti_Profiler_Host_Object,
    // Kept alive for the host object, which may refer to them.
    _chip: CString,
    _availability: Option<Vec<u8>>,
}

impl MetricHost {
    pub fn new(chip: &str, availability: Option<Vec<u8>>) -> Result<MetricHost, CuptiError> {
        let chip_c = CString::new(chip).map_err(|_| CuptiError {
            call: "cuptiProfilerHostInitialize",
            code: CUptiResult::CUPTI_ERROR_INVALID_PARAMETER as u32,
            name: "chip name contains NUL".into(),
        })?;
        let mut p = params!(
            CUpti_Profiler_Host_Initialize_Params,
            Profiler_Host_Initialize_Params_STRUCT_SIZE
        );
        p.profilerType = sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_RANGE_PROFILER;
        p.pChipName = chip_c.as_ptr();
        p.pCounterAvailabilityImage = availability.as_ref().map_or(ptr::null(), |a| a.as_ptr());
        check(
            // SAFETY: the chip name and availability image outlive the host object (kept in self).
            unsafe { sys::cuptiProfilerHostInitialize(&mut p) },
            "cuptiProfilerHostInitialize",
        )?;
        Ok(MetricHost {
            raw: p.pHostObject,
            _chip: chip_c,
            _availability: availability,
        })
    }

    /// Adds metrics to this host's configuration. Fails as a whole when any name is unknown.
    pub fn add_metrics(&mut self, names: &[CString]) -> Result<(), CuptiError> {
        let mut ptrs = name_pointers(names);
        let mut p = params!(
            CUpti_Profiler_Host_ConfigAddMetrics_Params,
            Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.ppMetricNames = ptrs.as_mut_ptr();
        p.numMetrics = ptrs.len();
        // SAFETY: ptrs points at NUL-terminated names that outlive the call.
        check(
            unsafe { sys::cuptiProfilerHostConfigAddMetrics(&mut p) },
            "cuptiProfilerHostConfigAddMetrics",
        )
    }

    /// The configuration image of every metric added so far.
    pub fn config_image(&self) -> Result<Vec<u8>, CuptiError> {
        let mut s = params!(
            CUpti_Profiler_Host_GetConfigImageSize_Params,
            Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE
        );
        s.pHostObject = self.raw;
        check(
            // SAFETY: valid host object and sized parameters.
            unsafe { sys::cuptiProfilerHostGetConfigImageSize(&mut s) },
            "cuptiProfilerHostGetConfigImageSize",
        )?;
        let mut image = vec![0u8; s.configImageSize];
        let mut p = params!(
            CUpti_Profiler_Host_GetConfigImage_Params,
            Profiler_Host_GetConfigImage_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.configImageSize = image.len();
        p.pConfigImage = image.as_mut_ptr();
        check(
            // SAFETY: image holds configImageSize bytes.
            unsafe { sys::cuptiProfilerHostGetConfigImage(&mut p) },
            "cuptiProfilerHostGetConfigImage",
        )?;
        Ok(image)
    }

    /// Metric values of one range of a decoded counter-data image.
    pub fn evaluate(
        &self,
        counter_data: &[u8],
        range: usize,
        names: &[CString],
    ) -> Result<Vec<f64>, CuptiError> {
        let mut ptrs = name_pointers(names);
        let mut values = vec![0f64; names.len()];
        let mut p = params!(
            CUpti_Profiler_Host_EvaluateToGpuValues_Params,
            Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.pCounterDataImage = counter_data.as_ptr();
        p.counterDataImageSize = counter_data.len();
        p.rangeIndex = range;
        p.ppMetricNames = ptrs.as_mut_ptr();
        p.numMetrics = ptrs.len();
        p.pMetricValues = values.as_mut_ptr();
        check(
            // SAFETY: values has one slot per name; the image and names outlive the call.
            unsafe { sys::cuptiProfilerHostEvaluateToGpuValues(&mut p) },
            "cuptiProfilerHostEvaluateToGpuValues",
        )?;
        Ok(values)
    }

    /// Every base metric of a kind (names without a rollup suffix).
    pub fn base_metrics(&self, kind: MetricKind) -> Result<Vec<String>, CuptiError> {
        let mut p = params!(
            CUpti_Profiler_Host_GetBaseMetrics_Params,
            Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.metricType = kind.raw();
        check(
            // SAFETY: valid host object; CUPTI fills an array it owns.
            unsafe { sys::cuptiProfilerHostGetBaseMetrics(&mut p) },
            "cuptiProfilerHostGetBaseMetrics",
        )?;
        if p.ppMetricNames.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: CUPTI returned numMetrics valid string pointers.
        let names = unsafe { std::slice::from_raw_parts(p.ppMetricNames, p.numMetrics) };
        Ok(names.iter().map(|&n| owned(n)).collect())
    }

    /// Suffixes valid after a base metric (`sum`, `avg.pct_of_peak_sustained_elapsed`, ...).
    pub fn sub_metrics(&self, base: &str, kind: MetricKind) -> Result<Vec<String>, CuptiError> {
        let Ok(c) = CString::new(base) else {
            return Ok(Vec::new());
        };
        let mut p = params!(
            CUpti_Profiler_Host_GetSubMetrics_Params,
            Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.pMetricName = c.as_ptr();
        p.metricType = kind.raw();
        check(
            // SAFETY: valid host object and name; CUPTI fills an array it owns.
            unsafe { sys::cuptiProfilerHostGetSubMetrics(&mut p) },
            "cuptiProfilerHostGetSubMetrics",
        )?;
        if p.ppSubMetrics.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: CUPTI returned numOfSubmetrics valid string pointers.
        let subs = unsafe { std::slice::from_raw_parts(p.ppSubMetrics, p.numOfSubmetrics) };
        Ok(subs.iter().map(|&n| owned(n)).collect())
    }

    /// Description and units of a base metric.
    pub fn properties(&self, base: &str) -> Result<MetricProperties, CuptiError> {
        let c = CString::new(base).map_err(|_| CuptiError {
            call: "cuptiProfilerHostGetMetricProperties",
            code: CUptiResult::CUPTI_ERROR_INVALID_METRIC_NAME as u32,
            name: "metric name contains NUL".into(),
        })?;
        let mut p = params!(
            CUpti_Profiler_Host_GetMetricProperties_Params,
            Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        p.pMetricName = c.as_ptr();
        check(
            // SAFETY: valid host object and name.
            unsafe { sys::cuptiProfilerHostGetMetricProperties(&mut p) },
            "cuptiProfilerHostGetMetricProperties",
        )?;
        Ok(MetricProperties {
            kind: MetricKind::from_raw(p.metricType),
            description: owned(p.pDescription),
            hw_unit: owned(p.pHwUnit),
            dim_unit: owned(p.pDimUnit),
        })
    }
}

impl Drop for MetricHost {
    fn drop(&mut self) {
        let mut p = params!(
            CUpti_Profiler_Host_Deinitialize_Params,
            Profiler_Host_Deinitialize_Params_STRUCT_SIZE
        );
        p.pHostObject = self.raw;
        // SAFETY: the host object came from a successful initialize.
        unsafe {
            sys::cuptiProfilerHostDeinitialize(&mut p);
        }
    }
}

/// How many replay passes a configuration needs.
pub fn passes_needed(config: &mut [u8]) -> Result<usize, CuptiError> {
    let mut p = params!(
        CUpti_Profiler_Host_GetNumOfPasses_Params,
        Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE
    );
    p.configImageSize = config.len();
    p.pConfigImage = config.as_mut_ptr();
    check(
        // SAFETY: config is a configuration image from `MetricHost::config_image`.
        unsafe { sys::cuptiProfilerHostGetNumOfPasses(&mut p) },
        "cuptiProfilerHostGetNumOfPasses",
    )?;
    Ok(p.numOfPasses)
}

/// The range profiler enabled on one context, with its configuration and counter data.
pub struct RangeProfiler {
    raw: *mut sys::CUpti_RangeProfiler_Object,
    // The profiler keeps pointers into both while enabled.
    config: Vec<u8>,
    counter_data: Vec<u8>,
    max_ranges: usize,
}

impl RangeProfiler {
    pub fn enable(ctx: ContextHandle) -> Result<RangeProfiler, CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_Enable_Params,
            RangeProfiler_Enable_Params_STRUCT_SIZE
        );
        p.ctx = ctx.raw() as _;
        check(
            // SAFETY: ctx is a live context; CUPTI returns the profiler object.
            unsafe { sys::cuptiRangeProfilerEnable(&mut p) },
            "cuptiRangeProfilerEnable",
        )?;
        Ok(RangeProfiler {
            raw: p.pRangeProfilerObject,
            config: Vec::new(),
            counter_data: Vec::new(),
            max_ranges: 0,
        })
    }

    /// Sets the metrics (as a configuration image), with room for `max_ranges` ranges.
    /// Ranges are automatic: each kernel launched between `start` and `stop` is one range,
    /// bounded by the hardware at the kernel's own start and end (as ncu measures), so
    /// launch overhead and the profiler's own bookkeeping stay out of the counters. Passes
    /// are replayed by the caller (user replay).
    pub fn configure(
        &mut self,
        config: Vec<u8>,
        names: &[CString],
        max_ranges: usize,
    ) -> Result<(), CuptiError> {
        if !self.config.is_empty() {
            // The images of a configured profiler are never replaced (see `reconfigure`).
            return Err(CuptiError {
                call: "cuptiRangeProfilerSetConfig",
                code: CUptiResult::CUPTI_ERROR_INVALID_OPERATION as u32,
                name: "the range profiler is configured already; use reconfigure".into(),
            });
        }
        let mut ptrs = name_pointers(names);
        let mut s = params!(
            CUpti_RangeProfiler_GetCounterDataSize_Params,
            RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE
        );
        s.pRangeProfilerObject = self.raw;
        s.pMetricNames = ptrs.as_mut_ptr();
        s.numMetrics = ptrs.len();
        s.maxNumOfRanges = max_ranges;
        s.maxNumRangeTreeNodes = max_ranges as u32;
        check(
            // SAFETY: valid profiler object and names.
            unsafe { sys::cuptiRangeProfilerGetCounterDataSize(&mut s) },
            "cuptiRangeProfilerGetCounterDataSize",
        )?;
        self.counter_data = vec![0u8; s.counterDataSize];
        self.initialize_counter_data()?;
        self.config = config;
        self.max_ranges = max_ranges;
        self.set_config()
    }

    /// Makes the profiler ready for a new collection with the configuration and room of
    /// `configure`: the same counter-data image is initialised again in place and set again
    /// with the same configuration image. Nothing is reallocated: CUPTI 13.0 keeps pointers into
    /// both images across collections (replacing them between collections crashed inside CUPTI
    /// on the H200), and re-enabling costs far more than this (measured on the H200: the first
    /// `start` after `enable` about 170 ms, after `reconfigure` about 25 ms).
    pub fn reconfigure(&mut self) -> Result<(), CuptiError> {
        if self.config.is_empty() {
            return Err(CuptiError {
                call: "cuptiRangeProfilerSetConfig",
                code: CUptiResult::CUPTI_ERROR_INVALID_OPERATION as u32,
                name: "the range profiler was never configured".into(),
            });
        }
        self.initialize_counter_data()?;
        self.set_config()
    }

    /// Initialises the counter-data image held in self, in place.
    fn initialize_counter_data(&mut self) -> Result<(), CuptiError> {
        let mut i = params!(
            CUpti_RangeProfiler_CounterDataImage_Initialize_Params,
            RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE
        );
        i.pRangeProfilerObject = self.raw;
        i.counterDataSize = self.counter_data.len();
        i.pCounterData = self.counter_data.as_mut_ptr();
        // SAFETY: counter_data holds counterDataSize bytes (sized by `configure`) and lives in
        // self for as long as the profiler is enabled.
        check(
            unsafe { sys::cuptiRangeProfilerCounterDataImageInitialize(&mut i) },
            "cuptiRangeProfilerCounterDataImageInitialize",
        )
    }

    /// `cuptiRangeProfilerSetConfig` with the images held in self.
    fn set_config(&mut self) -> Result<(), CuptiError> {
        let max_ranges = self.max_ranges;
        let mut c = params!(
            CUpti_RangeProfiler_SetConfig_Params,
            RangeProfiler_SetConfig_Params_STRUCT_SIZE
        );
        c.pRangeProfilerObject = self.raw;
        c.configSize = self.config.len();
        c.pConfig = self.config.as_ptr();
        c.counterDataImageSize = self.counter_data.len();
        c.pCounterDataImage = self.counter_data.as_mut_ptr();
        c.range = sys::CUpti_ProfilerRange::CUPTI_AutoRange;
        c.replayMode = sys::CUpti_ProfilerReplayMode::CUPTI_UserReplay;
        c.maxRangesPerPass = max_ranges;
        c.numNestingLevels = 1;
        c.minNestingLevel = 1;
        c.passIndex = 0;
        c.targetNestingLevel = 1;
        // SAFETY: config and counter data live in self for as long as the profiler is enabled.
        check(
            unsafe { sys::cuptiRangeProfilerSetConfig(&mut c) },
            "cuptiRangeProfilerSetConfig",
        )
    }

    /// The most ranges (kernels) one collection holds.
    pub fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    pub fn start(&mut self) -> Result<(), CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_Start_Params,
            RangeProfiler_Start_Params_STRUCT_SIZE
        );
        p.pRangeProfilerObject = self.raw;
        // SAFETY: valid, configured profiler object.
        check(
            unsafe { sys::cuptiRangeProfilerStart(&mut p) },
            "cuptiRangeProfilerStart",
        )
    }

    /// Ends a pass. True when every pass the configuration needs has been submitted.
    pub fn stop(&mut self) -> Result<bool, CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_Stop_Params,
            RangeProfiler_Stop_Params_STRUCT_SIZE
        );
        p.pRangeProfilerObject = self.raw;
        check(
            // SAFETY: valid, started profiler object.
            unsafe { sys::cuptiRangeProfilerStop(&mut p) },
            "cuptiRangeProfilerStop",
        )?;
        Ok(p.isAllPassSubmitted != 0)
    }

    /// Moves the collected counters into the counter-data image. Returns the ranges dropped.
    pub fn decode(&mut self) -> Result<usize, CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_DecodeData_Params,
            RangeProfiler_DecodeData_Params_STRUCT_SIZE
        );
        p.pRangeProfilerObject = self.raw;
        check(
            // SAFETY: valid profiler object after all passes were submitted.
            unsafe { sys::cuptiRangeProfilerDecodeData(&mut p) },
            "cuptiRangeProfilerDecodeData",
        )?;
        Ok(p.numOfRangeDropped)
    }

    /// Number of ranges in the decoded counter data.
    pub fn ranges(&self) -> Result<usize, CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_GetCounterDataInfo_Params,
            RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE
        );
        p.pCounterDataImage = self.counter_data.as_ptr();
        p.counterDataImageSize = self.counter_data.len();
        check(
            // SAFETY: a counter-data image initialised in `configure`.
            unsafe { sys::cuptiRangeProfilerGetCounterDataInfo(&mut p) },
            "cuptiRangeProfilerGetCounterDataInfo",
        )?;
        Ok(p.numTotalRanges)
    }

    /// The name of a decoded range (for automatic ranges, the kernel's name).
    pub fn range_name(&self, index: usize) -> Result<String, CuptiError> {
        let mut p = params!(
            CUpti_RangeProfiler_CounterData_GetRangeInfo_Params,
            RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE
        );
        p.pCounterDataImage = self.counter_data.as_ptr();
        p.counterDataImageSize = self.counter_data.len();
        p.rangeIndex = index;
        p.rangeDelimiter = c"/".as_ptr();
        check(
            // SAFETY: a decoded counter-data image; CUPTI returns a string it owns.
            unsafe { sys::cuptiRangeProfilerCounterDataGetRangeInfo(&mut p) },
            "cuptiRangeProfilerCounterDataGetRangeInfo",
        )?;
        Ok(owned(p.rangeName))
    }

    pub fn counter_data(&self) -> &[u8] {
        &self.counter_data
    }
}

impl Drop for RangeProfiler {
    fn drop(&mut self) {
        let mut p = params!(
            CUpti_RangeProfiler_Disable_Params,
            RangeProfiler_Disable_Params_STRUCT_SIZE
        );
        p.pRangeProfilerObject = self.raw;
        // SAFETY: the object came from a successful enable.
        unsafe {
            sys::cuptiRangeProfilerDisable(&mut p);
        }
    }
}
