//! `kreplay profile --variant`: the settings the CLI hands the recorder (a variant kernel run
//! beside the original at every matching dispatch), the result the recorder reports for each
//! dispatch, and the pure figures the CLI sums them up with (speedup, geometric means).

use serde::{Deserialize, Serialize};

/// The environment variables of `--variant` (re-exported in `config::env` with the others).
pub mod env {
    /// Profile mode: a variant's code (cubin or PTX), run beside the original at every
    /// matching dispatch (`--variant`, an absolute path).
    pub const VARIANT: &str = "KREPLAY_VARIANT";
    /// Profile mode: the variant's function name, when not the original's (`--variant-kernel`).
    pub const VARIANT_KERNEL: &str = "KREPLAY_VARIANT_KERNEL";
    /// Profile mode: `DTYPE:ABS[,REL]`, how far the variant's output may be from the
    /// original's (`--tolerance`; unset: bit for bit).
    pub const TOLERANCE: &str = "KREPLAY_TOLERANCE";
    /// Profile mode: `original` (default) or `variant`: whose output the application goes on
    /// with (`--keep`).
    pub const KEEP: &str = "KREPLAY_KEEP";
}

/// What the recorder reads from the environment for `--variant`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantConfig {
    /// The variant's code: a cubin, or PTX the driver compiles (JIT) when it loads it.
    pub path: std::path::PathBuf,
    /// The variant's function name (mangled), when not the original's.
    pub kernel: Option<String>,
    /// `DTYPE:ABS[,REL]` as the user wrote it (`kreplay_engine::compare::Tolerance::parse`
    /// reads it on both sides); `None`: bit for bit.
    pub tolerance: Option<String>,
    /// The application continues with the variant's output instead of the original's.
    pub keep_variant: bool,
}

impl VariantConfig {
    /// `None` when no variant was asked for (`KREPLAY_VARIANT` unset or empty).
    pub fn from_lookup(
        get: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<VariantConfig>, String> {
        let present = |k: &str| get(k).filter(|v| !v.is_empty());
        let Some(path) = present(env::VARIANT) else {
            for k in [env::VARIANT_KERNEL, env::TOLERANCE, env::KEEP] {
                if present(k).is_some() {
                    return Err(format!("{k} needs {} (--variant)", env::VARIANT));
                }
            }
            return Ok(None);
        };
        let keep_variant = match present(env::KEEP).as_deref() {
            None | Some("original") => false,
            Some("variant") => true,
            Some(v) => return Err(format!("{}={v}: expected original or variant", env::KEEP)),
        };
        Ok(Some(VariantConfig {
            path: path.into(),
            kernel: present(env::VARIANT_KERNEL),
            tolerance: present(env::TOLERANCE),
            keep_variant,
        }))
    }
}

/// How the variant's output compares with the original's over the dispatch's write set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// Bit for bit the same bytes.
    #[serde(rename = "identical")]
    Identical,
    /// Different bytes, every element within `--tolerance`.
    #[serde(rename = "within tolerance")]
    WithinTolerance,
    /// Different beyond the tolerance (or at all, without one), or written outside the
    /// original's write set.
    #[serde(rename = "differs")]
    Differs,
}

impl Verdict {
    /// The verdict from what the comparison counted: differing bytes, and of the differing
    /// elements how many the tolerance did not admit; without a tolerance (`tolerance`
    /// false) any differing byte differs.
    pub fn judge(
        differing_bytes: u64,
        beyond_tolerance: u64,
        wrote_outside: bool,
        tolerance: bool,
    ) -> Verdict {
        if wrote_outside {
            Verdict::Differs
        } else if differing_bytes == 0 {
            Verdict::Identical
        } else if tolerance && beyond_tolerance == 0 {
            Verdict::WithinTolerance
        } else {
            Verdict::Differs
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Identical => "identical",
            Verdict::WithinTolerance => "within tolerance",
            Verdict::Differs => "differs",
        }
    }
}

/// Where the variant's output first differs from the original's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FirstDifference {
    /// The region's device address (the allocation's base as the dispatch reaches it).
    pub region_address: u64,
    /// Byte offset inside that region.
    pub offset: u64,
}

/// One dispatch's variant: its timed passes and how its output compares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    /// The variant's function name (mangled).
    pub kernel: String,
    /// Kernel time of each variant pass, in ns; they alternate with the original's.
    pub durations_ns: Vec<u64>,
    pub median_ns: u64,
    /// `None`: the comparison could not run (the row's `variant_error` says why).
    pub verdict: Option<Verdict>,
    /// How the bytes were read for the figures: the tolerance's element type, else f32.
    pub element: String,
    pub differing_bytes: u64,
    pub differing_elements: u64,
    /// Largest |original - variant| and relative error over differing elements (as `element`).
    pub max_abs: f64,
    pub max_rel: f64,
    pub first_difference: Option<FirstDifference>,
    /// The variant wrote a chunk (4 MiB) the original leaves unchanged: its later passes were
    /// not run, and the application keeps the original's output.
    pub wrote_outside: bool,
    /// The application went on with this variant's output (`--keep variant`).
    pub kept: bool,
}

/// variant speedup over the original: original time / variant time (above 1: the variant is
/// faster); `None` when either time is missing.
pub fn speedup(original_ns: u64, variant_ns: u64) -> Option<f64> {
    (original_ns > 0 && variant_ns > 0).then(|| original_ns as f64 / variant_ns as f64)
}

/// The geometric mean of `ratios` (each > 0; others are passed over), the mean ratio that
/// treats 2x slower and 2x faster as opposites: `profile --variant`'s speedup and `kreplay
/// compare`'s NEW/BASE; `None` for none.
pub fn geomean(ratios: &[f64]) -> Option<f64> {
    weighted_geomean(&ratios.iter().map(|&r| (r, 1.0)).collect::<Vec<_>>())
}

/// The geometric mean of `(ratio, weight)` pairs, each ratio counting by its weight (the
/// original's time: a dispatch that costs more counts more); `None` when the weights sum to 0.
pub fn weighted_geomean(pairs: &[(f64, f64)]) -> Option<f64> {
    let kept: Vec<(f64, f64)> = pairs
        .iter()
        .copied()
        .filter(|&(r, w)| r > 0.0 && r.is_finite() && w > 0.0)
        .collect();
    let total: f64 = kept.iter().map(|&(_, w)| w).sum();
    if total <= 0.0 {
        return None;
    }
    let log_sum: f64 = kept.iter().map(|&(r, w)| w * r.ln()).sum();
    Some((log_sum / total).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_variant_settings_come_from_the_environment() {
        assert_eq!(VariantConfig::from_lookup(&lookup(&[])), Ok(None));
        let c = VariantConfig::from_lookup(&lookup(&[
            (env::VARIANT, "/tmp/v.cubin"),
            (env::VARIANT_KERNEL, "_Z3fooPf"),
            (env::TOLERANCE, "f32:1e-3"),
            (env::KEEP, "variant"),
        ]))
        .expect("valid")
        .expect("a variant");
        assert_eq!(c.path, std::path::PathBuf::from("/tmp/v.cubin"));
        assert_eq!(c.kernel.as_deref(), Some("_Z3fooPf"));
        assert_eq!(c.tolerance.as_deref(), Some("f32:1e-3"));
        assert!(c.keep_variant);
        let plain = VariantConfig::from_lookup(&lookup(&[
            (env::VARIANT, "v.ptx"),
            (env::VARIANT_KERNEL, ""),
        ]))
        .expect("valid")
        .expect("a variant");
        assert_eq!((plain.kernel, plain.keep_variant), (None, false));
        let e = VariantConfig::from_lookup(&lookup(&[(env::KEEP, "variant")])).expect_err("no");
        assert!(e.contains(env::VARIANT), "{e}");
        let e = VariantConfig::from_lookup(&lookup(&[(env::VARIANT, "v"), (env::KEEP, "both")]))
            .expect_err("bad keep");
        assert!(e.contains("original or variant"), "{e}");
    }

    #[test]
    fn the_verdict_separates_exact_rounding_and_wrong() {
        assert_eq!(Verdict::judge(0, 0, false, false), Verdict::Identical);
        assert_eq!(Verdict::judge(0, 0, false, true), Verdict::Identical);
        assert_eq!(Verdict::judge(12, 0, false, true), Verdict::WithinTolerance);
        assert_eq!(Verdict::judge(12, 1, false, true), Verdict::Differs);
        assert_eq!(
            Verdict::judge(12, 0, false, false),
            Verdict::Differs,
            "bit for bit: any differing byte"
        );
        assert_eq!(
            Verdict::judge(0, 0, true, true),
            Verdict::Differs,
            "wrote elsewhere"
        );
        assert_eq!(
            serde_json::to_string(&Verdict::WithinTolerance).expect("json"),
            "\"within tolerance\""
        );
        assert_eq!(Verdict::Differs.name(), "differs");
    }

    #[test]
    fn speedups_and_their_means() {
        assert_eq!(speedup(200, 100), Some(2.0));
        assert_eq!(speedup(100, 400), Some(0.25));
        assert_eq!(speedup(0, 100), None);
        assert_eq!(speedup(100, 0), None);
        let g = geomean(&[2.0, 0.5]).expect("two");
        assert!((g - 1.0).abs() < 1e-12, "{g}");
        let g = geomean(&[4.0, 1.0]).expect("two");
        assert!((g - 2.0).abs() < 1e-12, "{g}");
        assert_eq!(geomean(&[]), None);
        assert!((geomean(&[1.1]).expect("one") - 1.1).abs() < 1e-12);
        // A ratio no time can give is not averaged in.
        assert_eq!(geomean(&[0.0, f64::NAN, -1.0]), None);
        assert!((geomean(&[4.0, 0.0]).expect("one usable") - 4.0).abs() < 1e-12);
        // A dispatch three times as long counts three times: (2^3 * 0.5)^(1/4) = 4^(1/4).
        let w = weighted_geomean(&[(2.0, 3.0), (0.5, 1.0)]).expect("weighted");
        assert!((w - 4f64.powf(0.25)).abs() < 1e-12, "{w}");
        assert_eq!(weighted_geomean(&[(2.0, 0.0)]), None);
    }
}
