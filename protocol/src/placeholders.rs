//! The `%x` placeholders of an output pattern (`-o`), expanded in one pass: `record -o`'s own
//! (`config::expand_output`) and, before them, a corpus capture's (`each_kernel::expand_slot`).
//! A placeholder the caller does not fill is left as written, so a later pass can fill it.

/// `pattern` with each `%x` that `fill(x)` fills replaced; any other `%x` is kept as it is,
/// and so is a `%` at the end.
pub(crate) fn expand(pattern: &str, fill: impl Fn(char) -> Option<String>) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(x) => match fill(x) {
                Some(text) => out.push_str(&text),
                None => {
                    out.push('%');
                    out.push(x);
                }
            },
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid_only(x: char) -> Option<String> {
        (x == 'p').then(|| "42".to_string())
    }

    #[test]
    fn filled_placeholders_are_replaced_and_the_rest_kept_as_written() {
        assert_eq!(expand("a-%p.krr", pid_only), "a-42.krr");
        assert_eq!(expand("%k/%p-%%", pid_only), "%k/42-%%");
        assert_eq!(expand("end%", pid_only), "end%");
        assert_eq!(expand("µ%p%p", pid_only), "µ4242");
        assert_eq!(expand("", pid_only), "");
    }
}
