//! The figures a report's tables show, each with its unit; a missing one is a dash.

const MISSING: &str = "–";

fn or_dash(x: Option<f64>, show: impl Fn(f64) -> String) -> String {
    x.filter(|v| v.is_finite())
        .map_or(MISSING.to_string(), show)
}

/// A time in microseconds, two decimals (the unit is in the column's header).
pub fn us(x: Option<f64>) -> String {
    or_dash(x, |v| format!("{v:.2}"))
}

/// NEW / BASE, three decimals and the times sign.
pub fn ratio(x: Option<f64>) -> String {
    or_dash(x, |v| format!("{v:.3}×"))
}

/// A change in percent with its sign: positive is slower.
pub fn change_pct(x: Option<f64>) -> String {
    or_dash(x, |v| format!("{v:+.1} %"))
}

/// A ratio's noise: the combined pass spread, either way.
pub fn noise_pct(x: Option<f64>) -> String {
    or_dash(x, |v| format!("±{v:.1} %"))
}

/// A run's pass spread ((max - min) / median).
pub fn spread_pct(x: Option<f64>) -> String {
    or_dash(x, |v| format!("{v:.1} %"))
}

/// Wall time in seconds.
pub fn seconds(x: f64) -> String {
    or_dash(Some(x), |v| format!("{v:.1} s"))
}

/// An axis tick: as many decimals as the value needs to be told from its neighbours
/// (1000, 10, 1.05, 0.95), not plotters' one fixed decimal.
pub fn tick(v: f64) -> String {
    let digits = match v.abs() {
        a if a >= 100.0 => 0,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_carry_their_unit_and_missing_or_non_finite_ones_are_a_dash() {
        assert_eq!(us(Some(12.345)), "12.35");
        assert_eq!(us(None), "–");
        assert_eq!(us(Some(f64::NAN)), "–");
        assert_eq!(ratio(Some(1.25)), "1.250×");
        assert_eq!(change_pct(Some(25.0)), "+25.0 %");
        assert_eq!(change_pct(Some(-3.04)), "-3.0 %");
        assert_eq!(noise_pct(Some(2.5)), "±2.5 %");
        assert_eq!(spread_pct(Some(1.0)), "1.0 %");
        assert_eq!(seconds(f64::INFINITY), "–");
        assert_eq!(seconds(3.25), "3.2 s");
    }

    #[test]
    fn ticks_keep_only_the_decimals_they_need() {
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(10.0), "10");
        assert_eq!(tick(1.05), "1.05");
        assert_eq!(tick(0.8), "0.8");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(0.125), "0.125");
    }
}
