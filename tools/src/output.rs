//! Printing helpers: a closed stdout (`kreplay info x.krr | head`) is not an error.

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

/// `println!` that returns the error instead of panicking on a closed pipe.
#[macro_export]
macro_rules! out {
    ($w:expr) => { writeln!($w)? };
    ($w:expr, $($arg:tt)*) => { writeln!($w, $($arg)*)? };
}
