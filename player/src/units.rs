//! Units and counts shared by the player's outputs and the CLI's text: a time in nanoseconds
//! as the microseconds run records and traces carry, and a count with the noun that agrees
//! with it (the text and HTML reports say "1 capture", "2 captures" alike).

/// Nanoseconds as microseconds.
pub fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// `n` and the noun that agrees with it: "1 capture", "2 captures".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_read_as_microseconds() {
        assert_eq!(micros(0), 0.0);
        assert_eq!(micros(1_500), 1.5);
        assert_eq!(micros(7), 0.007);
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(count(1, "capture", "captures"), "1 capture");
        assert_eq!(count(0, "capture", "captures"), "0 captures");
        assert_eq!(count(2, "other change", "other changes"), "2 other changes");
    }
}
