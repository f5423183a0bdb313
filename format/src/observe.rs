//! What long work over a capture tells its caller as it goes: progress (for a progress bar)
//! and which bytes of the input it will not read again (a caller reading a mapped file drops
//! those pages, so memory stays bounded whatever the file's size).

/// The stage a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Verification: every event's frame and payload CRC, front to back (file bytes).
    Scan,
    /// Verification: every stored chunk decoded against its CRC (decoded bytes).
    Chunks,
    /// Repacking: region memory rewritten (decoded bytes).
    Pack,
}

/// Both default to doing nothing.
pub trait Observer {
    /// `done` of `total` in `phase`.
    fn progress(&mut self, _phase: Phase, _done: u64, _total: u64) {}
    /// The bytes `[start, end)` of the input will not be read again.
    fn done_with(&mut self, _start: u64, _end: u64) {}
}

impl Observer for () {}
