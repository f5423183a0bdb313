//! `kreplay record --each-kernel`: a corpus, the first N executions of every distinct kernel.
//! Its settings (read from the environment by `config`) and the `--max-bytes` size syntax.

/// What tells two kernels apart (`--by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum KeyBy {
    /// The mangled name alone.
    Name,
    /// The mangled name, the grid, the block and the size of the argument bytes.
    Shape,
}

crate::env_word::env_words!(KeyBy, "KREPLAY_EACH_BY", {
    Name => "name",
    Shape => "shape",
});

/// Each-kernel mode's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EachKernel {
    /// Executions captured per distinct kernel (at least 1).
    pub per_kernel: u64,
    pub by: KeyBy,
    /// The corpus's bound in stored bytes: a capture that would pass it is not kept, and
    /// capturing stops there.
    pub max_bytes: Option<u64>,
}

/// Which capture of a corpus a match is: its distinct kernel's index in the process (1-based,
/// first seen first) and which of that kernel's executions (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorpusSlot {
    pub kernel_index: u64,
    pub execution: u64,
}

/// Expands a corpus capture's own placeholders, `%i` (the kernel index) and `%e` (the
/// execution), leaving the others (and `%%`) for `config::expand_output`.
pub fn expand_slot(pattern: &str, slot: CorpusSlot) -> String {
    crate::placeholders::expand(pattern, |x| match x {
        'i' => Some(slot.kernel_index.to_string()),
        'e' => Some(slot.execution.to_string()),
        _ => None,
    })
}

/// Parses `--max-bytes SIZE`: a whole number of bytes, or one with a unit, decimal (`K`, `M`,
/// `G`, `T`, also `KB`...) or binary (`KiB`, `MiB`, `GiB`, `TiB`), case-insensitive; a
/// fraction is allowed with a unit (`1.5G`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("{text}: expected a size in bytes, e.g. 500000000, 500M, 2G or 1.5GiB (K, M, G, T are powers of 1000; KiB, MiB, GiB, TiB of 1024)")
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    if number.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(scale).ok_or_else(bad);
    }
    let x: f64 = number.parse().map_err(|_| bad())?;
    let bytes = x * scale as f64;
    if scale == 1 || !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_fills_its_placeholders_and_leaves_the_others() {
        let slot = CorpusSlot {
            kernel_index: 12,
            execution: 3,
        };
        assert_eq!(expand_slot("d/%i-%k-%e-%p.krr", slot), "d/12-%k-3-%p.krr");
        assert_eq!(expand_slot("%%i%%e%", slot), "%%i%%e%");
    }

    #[test]
    fn sizes_in_decimal_and_binary_units() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("500M"), Ok(500_000_000));
        assert_eq!(parse_size("2g"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(1_610_612_736));
        assert_eq!(parse_size("64 KiB"), Ok(65_536));
        assert_eq!(parse_size("10kb"), Ok(10_000));
        assert_eq!(parse_size("1T"), Ok(1_000_000_000_000));
        for bad in ["", "M", "1.5", "1..5M", "-1", "3X", "99999999999T", "1e3"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }
}
