//! The one error type of the format crate. Every variant that comes from reading a file
//! carries the byte offset where the problem was found, so a user can tell a truncated
//! download from a bit flip from a recorder that died.

use thiserror::Error;

/// Result alias for the format crate.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Everything that can be wrong with a `.krr` file, or with writing one.
#[derive(Debug, Error)]
pub enum FormatError {
    #[error("not a kreplay capture: the file does not start with the .krr magic (found {found:02x?}){hint}")]
    NotKrr { found: Vec<u8>, hint: &'static str },

    #[error("capture format {found_major}.{found_minor} was written by a newer kreplay; this build reads {supported_major}.x (up to {supported_major}.{supported_minor}): upgrade kreplay")]
    NewerMajor {
        found_major: u16,
        found_minor: u16,
        supported_major: u16,
        supported_minor: u16,
    },

    #[error("incomplete capture: the recorder did not finish writing it (it died or is still running); {intact_events} events are intact up to byte {intact_until}; `kreplay verify --salvage OUT` keeps them")]
    Incomplete {
        intact_events: u64,
        intact_until: u64,
    },

    #[error("truncated capture: {what} at byte {offset} needs {needed} bytes but the file has {available} bytes left")]
    Truncated {
        offset: u64,
        what: &'static str,
        needed: u64,
        available: u64,
    },

    #[error("checksum mismatch in {what} at byte {offset}: stored {stored:#010x}, computed {computed:#010x} (the file is corrupt)")]
    Checksum {
        offset: u64,
        what: String,
        stored: u32,
        computed: u32,
    },

    #[error("inconsistent capture at byte {offset}: {what}")]
    Inconsistent { offset: u64, what: String },

    #[error("unknown critical event kind {kind} at byte {offset}: it was written by a newer kreplay (format {found_major}.{found_minor}, this build reads {supported_major}.{supported_minor}) and cannot be skipped")]
    UnknownCritical {
        offset: u64,
        kind: u16,
        found_major: u16,
        found_minor: u16,
        supported_major: u16,
        supported_minor: u16,
    },

    #[error("cannot decode {what} at byte {offset}: {message}")]
    Decode {
        offset: u64,
        what: String,
        message: String,
    },

    #[error(
        "garbage after the trailer: the capture ends at byte {end} but the file has {len} bytes"
    )]
    TrailingGarbage { end: u64, len: u64 },

    #[error("cannot encode {what}: {message}")]
    Encode { what: &'static str, message: String },

    #[error("{what} is out of range: {message}")]
    Limit { what: &'static str, message: String },

    /// No `source`: the message already holds the I/O error, and a source would make
    /// `{:#}` chains print it twice.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for FormatError {
    fn from(e: std::io::Error) -> Self {
        FormatError::Io(e)
    }
}

impl FormatError {
    /// Byte offset the error refers to, when it came from reading a file.
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::NotKrr { .. } => Some(0),
            FormatError::Truncated { offset, .. }
            | FormatError::Checksum { offset, .. }
            | FormatError::Inconsistent { offset, .. }
            | FormatError::UnknownCritical { offset, .. }
            | FormatError::Decode { offset, .. } => Some(*offset),
            FormatError::Incomplete { intact_until, .. } => Some(*intact_until),
            FormatError::TrailingGarbage { end, .. } => Some(*end),
            _ => None,
        }
    }

    /// A short stable name for the kind of damage, used by `kreplay verify --json`.
    pub fn kind(&self) -> &'static str {
        match self {
            FormatError::NotKrr { .. } => "not-krr",
            FormatError::NewerMajor { .. } => "newer-version",
            FormatError::Incomplete { .. } => "incomplete",
            FormatError::Truncated { .. } => "truncated",
            FormatError::Checksum { .. } => "checksum",
            FormatError::Inconsistent { .. } => "inconsistent",
            FormatError::UnknownCritical { .. } => "unknown-critical-event",
            FormatError::Decode { .. } => "decode",
            FormatError::TrailingGarbage { .. } => "trailing-garbage",
            FormatError::Encode { .. } => "encode",
            FormatError::Limit { .. } => "limit",
            FormatError::Io(_) => "io",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_is_told_once() {
        let e = FormatError::from(std::io::Error::from_raw_os_error(21));
        assert!(std::error::Error::source(&e).is_none());
        let chained = anyhow_like(&e);
        assert_eq!(chained.matches("os error 21").count(), 1, "{chained}");
    }

    /// `{:#}` of an error chain, as anyhow prints it.
    fn anyhow_like(e: &dyn std::error::Error) -> String {
        let mut s = e.to_string();
        let mut c = e.source();
        while let Some(x) = c {
            s += &format!(": {x}");
            c = x.source();
        }
        s
    }
}
