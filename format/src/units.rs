//! Figures for people: byte counts with binary units (the recorder, the CLI and reports print
//! them the same way).

/// A byte count with its unit: `512 B`, `4.0 MiB`, `1.0 TiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn units() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(1023), "1023 B");
        assert_eq!(super::bytes(4 << 20), "4.0 MiB");
        assert_eq!(super::bytes(1 << 40), "1.0 TiB");
        assert_eq!(super::bytes(u64::MAX), "16777216.0 TiB");
    }
}
