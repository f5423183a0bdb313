//! The figures the CLI's text tables print, each in the unit its column's header names; a
//! missing one is `-`. (The HTML reports have their own, `kreplay_player::html_report`.)

use kreplay_player::units::micros;

/// A time already in microseconds, two decimals (`play DIR`'s table, `compare`'s text).
pub fn micros_or_dash(us: Option<f64>) -> String {
    us.map_or("-".to_string(), |v| format!("{v:.2}"))
}

/// A time in nanoseconds as microseconds, one decimal (`profile`'s tables).
pub fn micros_of_ns(ns: u64) -> String {
    format!("{:.1}", micros(ns))
}

/// A grid or block as `XxYxZ`.
pub fn dims(d: [u32; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_keep_their_decimals_and_a_missing_one_is_a_dash() {
        assert_eq!(micros_or_dash(Some(12.345)), "12.35");
        assert_eq!(micros_or_dash(Some(3.0)), "3.00");
        assert_eq!(micros_or_dash(None), "-");
        assert_eq!(micros_of_ns(12_345), "12.3");
        assert_eq!(micros_of_ns(0), "0.0");
    }

    #[test]
    fn dimensions_read_x_by_y_by_z() {
        assert_eq!(dims([256, 1, 1]), "256x1x1");
        assert_eq!(dims([4, 2, 8]), "4x2x8");
    }
}
