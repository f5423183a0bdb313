//! Where a driver-API callback fires (its own file so the payload decoders under
//! `cupti_events` and the module that re-exports them do not import each other).

/// Where a driver-API callback fires: before the call runs, or after it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    Enter,
    Exit,
}
