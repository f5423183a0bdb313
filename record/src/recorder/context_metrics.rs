//! One context's counters in profile mode with `--metrics`, and its batch of dispatches
//! waiting for them.

use crate::counter_batch::{ContextCounters, CounterBatch};

/// One context's counters (`counter_batch`).
pub(super) struct ContextMetrics {
    pub context: usize,
    pub counters: Result<ContextCounters, String>,
    pub batch: CounterBatch,
}
