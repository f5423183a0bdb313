//! Printing helpers: a closed stdout (`kreplay info x.krr | head`) is not an error.

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
            // A format error tells its I/O error in its text, not as a source (printed once).
            || c.downcast_ref::<kreplay_format::FormatError>().is_some_and(|f| {
                matches!(f, kreplay_format::FormatError::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
            })
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

/// While alive, file descriptor 1 is stderr: a replayed kernel that calls device `printf`
/// writes through the driver to fd 1 (at every synchronisation), which would mix its text into
/// `--json` / `--csv` output. Machine-readable output is written after the guard is dropped,
/// to the stdout the command was given.
pub struct StdoutToStderr {
    saved: Option<std::os::fd::OwnedFd>,
}

impl StdoutToStderr {
    /// Redirects fd 1 to fd 2 when `active`; a failure leaves stdout where it was (device
    /// output then goes there, as it would without the guard).
    pub fn new(active: bool) -> StdoutToStderr {
        use std::os::fd::FromRawFd;
        if !active {
            return StdoutToStderr { saved: None };
        }
        let _ = std::io::Write::flush(&mut std::io::stdout());
        // SAFETY: dup of fd 1 returns a new descriptor we own (or -1).
        let saved = unsafe { libc::dup(1) };
        if saved < 0 {
            return StdoutToStderr { saved: None };
        }
        // SAFETY: `saved` is a fresh descriptor owned by nobody else.
        let saved = unsafe { std::os::fd::OwnedFd::from_raw_fd(saved) };
        // SAFETY: dup2 on two open descriptors; fd 1 now refers to stderr's file.
        if unsafe { libc::dup2(2, 1) } < 0 {
            return StdoutToStderr { saved: None };
        }
        StdoutToStderr { saved: Some(saved) }
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        if let Some(saved) = self.saved.take() {
            // C stdio may hold device output the driver wrote through `stdout`: flush it to
            // stderr before fd 1 goes back.
            // SAFETY: fflush(NULL) flushes every C output stream; no pointers of ours involved.
            unsafe { libc::fflush(std::ptr::null_mut()) };
            // SAFETY: both descriptors are open; fd 1 gets back the original stdout.
            unsafe { libc::dup2(saved.as_raw_fd(), 1) };
        }
    }
}

/// When to colour verdicts (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// When stdout is a terminal, `NO_COLOR` is unset and `TERM` is not `dumb`.
    Auto,
    Always,
    Never,
}

static COLOR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Decides once, from `--color` and the environment, whether verdicts are coloured.
pub fn init_color(choice: ColorChoice) {
    use std::io::IsTerminal;
    let on = match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var("TERM").map_or(true, |t| t != "dumb")
        }
    };
    let _ = COLOR.set(on);
}

/// A verdict word, green when good and red when not, if colour is on.
pub fn verdict(text: &str, good: bool) -> String {
    paint(text, good, COLOR.get().copied().unwrap_or(false))
}

fn paint(text: &str, good: bool, on: bool) -> String {
    if on {
        format!("\x1b[{}m{text}\x1b[0m", if good { "32" } else { "31" })
    } else {
        text.to_string()
    }
}

/// Writes `rows` (header first) as CSV, quoting as needed (kernel names hold commas).
pub fn write_csv(w: &mut impl std::io::Write, rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut c = csv::Writer::from_writer(w);
    for r in rows {
        c.write_record(r)?;
    }
    c.flush()?;
    Ok(())
}

/// A JSON object flattened into CSV columns: nested objects become `outer_inner`, arrays are
/// joined with `;`, null is empty.
pub fn flatten_json(v: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        use serde_json::Value as V;
        match v {
            V::Object(m) => {
                for (k, x) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}_{k}")
                    };
                    walk(&key, x, out);
                }
            }
            V::Array(a) => out.push((
                prefix.to_string(),
                a.iter()
                    .map(|x| match x {
                        V::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(";"),
            )),
            V::Null => out.push((prefix.to_string(), String::new())),
            V::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out
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

/// An error and its causes as kreplay prints it: `context: cause: cause`, each text once (a
/// message that already quotes its cause, as `I/O error: {0}` does, is not followed by that
/// cause again), control characters inert, and a message of several lines printed as lines,
/// each one after the first indented under it (never a literal `\n`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        let c = c.trim_end();
        if c.is_empty() || text.contains(c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(c);
    }
    text.lines()
        .map(|l| printable(l.trim_end_matches('\r')).into_owned())
        .collect::<Vec<_>>()
        .join("\n  ")
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[derive(Debug)]
    struct Quoting(std::io::Error);
    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "I/O error: {}", self.0)
        }
    }
    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn errors_print_each_cause_once_and_on_real_lines() {
        let io = std::io::Error::from_raw_os_error(21);
        let e = anyhow::Error::new(Quoting(io)).context("cannot pack x.krr");
        let t = super::error_text(&e);
        assert_eq!(t.matches("os error 21").count(), 1, "{t}");
        assert!(t.starts_with("cannot pack x.krr: I/O error: "), "{t}");
        let e = anyhow::anyhow!("line one\nline two\x1b[2J\n").context("outer");
        assert_eq!(
            super::error_text(&e),
            "outer: line one\n  line two\\u{1b}[2J"
        );
    }

    #[test]
    fn verdicts_are_painted_only_when_asked() {
        assert_eq!(super::paint("matched", true, false), "matched");
        assert_eq!(
            super::paint("matched", true, true),
            "\x1b[32mmatched\x1b[0m"
        );
        assert_eq!(
            super::paint("MISMATCH", false, true),
            "\x1b[31mMISMATCH\x1b[0m"
        );
    }

    #[test]
    fn json_flattens_into_columns() {
        let v = serde_json::json!({"kernel": "k<a, b>", "verify": {"matched": true}, "d": [1, 2], "x": null});
        let cols = super::flatten_json(&v);
        assert!(cols.contains(&("kernel".into(), "k<a, b>".into())));
        assert!(cols.contains(&("verify_matched".into(), "true".into())));
        assert!(cols.contains(&("d".into(), "1;2".into())));
        assert!(cols.contains(&("x".into(), String::new())));
        let mut out = Vec::new();
        super::write_csv(&mut out, &[vec!["a".into(), "b,c".into()]]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a,\"b,c\"\n");
    }

    #[test]
    fn control_characters_are_escaped_and_text_kept() {
        assert_eq!(printable("saxpy(int, float*)"), "saxpy(int, float*)");
        assert_eq!(printable("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("x\ny\rz\u{9b}"), "x\\ny\\rz\\u{9b}");
        assert_eq!(printable("gemm<float, 128> ü"), "gemm<float, 128> ü");
    }

    #[test]
    fn a_broken_pipe_inside_a_format_error_is_still_a_broken_pipe() {
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let e = anyhow::Error::new(kreplay_format::FormatError::from(io)).context("writing");
        assert!(super::is_broken_pipe(&e));
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(kreplay_format::FormatError::from(other));
        assert!(!super::is_broken_pipe(&e));
    }
}
