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

/// `eprintln!` that never panics: with stderr on a full disk or a closed pipe (`2>/dev/full`)
/// the diagnostic is lost, the command's result and exit status are not.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Text from a capture (kernel names, command lines, hosts, annotations) made safe for a
/// terminal: control characters (ESC sequences, newlines, carriage returns) are shown as
/// escapes instead of acting on the terminal. JSON output needs none of this.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped_and_text_kept() {
        assert_eq!(printable("saxpy(int, float*)"), "saxpy(int, float*)");
        assert_eq!(printable("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ny\rz\u{9b}"), "x\\ny\\rz\\u{9b}");
        assert_eq!(printable("gemm<float, 128> ü"), "gemm<float, 128> ü");
    }
}
