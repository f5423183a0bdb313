//! Comparing two byte ranges as numbers: how many elements differ and by how much, read as
//! f32, f16, bf16, i32 or raw bytes. Answers "is this a different result, or rounding?".
//! `kreplay diff --as` reads captures with it; `kreplay profile --variant` judges a variant's
//! output against the original's with it, within a `Tolerance`.

use serde::Serialize;

/// How to read the bytes (by default as f32, as `kreplay diff --as` and Python's `diff`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Element {
    #[default]
    F32,
    F16,
    Bf16,
    I32,
    U8,
}

impl Element {
    /// Every element type, as `kreplay diff --as` and Python's `as_` name them.
    pub const ALL: [Element; 5] = [
        Element::F32,
        Element::F16,
        Element::Bf16,
        Element::I32,
        Element::U8,
    ];

    /// The name `--as` takes (`f32`, `bf16`...).
    pub fn name(self) -> &'static str {
        match self {
            Element::F32 => "f32",
            Element::F16 => "f16",
            Element::Bf16 => "bf16",
            Element::I32 => "i32",
            Element::U8 => "u8",
        }
    }

    /// The element type called `name`, or None.
    pub fn from_name(name: &str) -> Option<Element> {
        Element::ALL.into_iter().find(|e| e.name() == name)
    }

    pub fn size(self) -> usize {
        match self {
            Element::F32 | Element::I32 => 4,
            Element::F16 | Element::Bf16 => 2,
            Element::U8 => 1,
        }
    }

    fn read(self, b: &[u8]) -> f64 {
        match self {
            Element::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            Element::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            Element::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
            Element::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            Element::U8 => b[0] as f64,
        }
    }
}

/// What differs between two equally long byte ranges, accumulated over many.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Difference {
    pub bytes: u64,
    pub differing_bytes: u64,
    /// Offset of the first differing byte (relative to what was compared).
    pub first_offset: Option<u64>,
    pub elements: u64,
    pub differing_elements: u64,
    /// Largest |a - b| over differing elements (NaN pairs excluded).
    pub max_abs: f64,
    /// Largest |a - b| / max(|a|, |b|) over differing elements.
    pub max_rel: f64,
    /// Elements where exactly one side is NaN, or both are but with other bits.
    pub nan_mismatches: u64,
    /// Differing elements outside the tolerance they were judged by (`add_judged`; a NaN
    /// mismatch is always outside). Left out of JSON when none, as for `kreplay diff`.
    #[serde(skip_serializing_if = "is_zero")]
    pub beyond_tolerance: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How far a result may be from the reference and still count as the same: element `i` is
/// within it when |a - b| <= abs + rel * |a| (a: the reference), as numpy's `isclose`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    pub element: Element,
    pub abs: f64,
    pub rel: f64,
}

/// The element types a tolerance can read (the raw-byte `u8` has no use for one).
const TOLERANCE_ELEMENTS: [Element; 4] = [Element::F32, Element::F16, Element::Bf16, Element::I32];

impl Tolerance {
    /// Parses `DTYPE:ABS[,REL]` (`f32:1e-3`, `bf16:1e-2,1e-2`; REL 0 when left out).
    pub fn parse(text: &str) -> Result<Tolerance, String> {
        let usage = "expected DTYPE:ABS[,REL] with DTYPE f32, f16, bf16 or i32 and ABS, REL \
                     numbers >= 0 (such as f32:1e-3 or bf16:1e-2,1e-2)";
        let (dtype, numbers) = text
            .split_once(':')
            .ok_or_else(|| format!("tolerance '{text}': {usage}"))?;
        let element = Element::from_name(dtype.trim())
            .filter(|e| TOLERANCE_ELEMENTS.contains(e))
            .ok_or_else(|| {
                format!("tolerance '{text}': unknown element type '{dtype}': {usage}")
            })?;
        let (abs, rel) = match numbers.split_once(',') {
            Some((a, r)) => (a, r),
            None => (numbers, "0"),
        };
        let number = |s: &str, what: &str| -> Result<f64, String> {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!("tolerance '{text}': {what} '{s}' is not a number >= 0: {usage}")
                })
        };
        Ok(Tolerance {
            element,
            abs: number(abs, "ABS")?,
            rel: number(rel, "REL")?,
        })
    }

    /// Whether `b` is close enough to the reference `a`.
    pub fn admits(&self, a: f64, b: f64) -> bool {
        (a - b).abs() <= self.abs + self.rel * a.abs()
    }
}

impl Difference {
    pub fn identical(&self) -> bool {
        self.differing_bytes == 0
    }

    /// Adds the comparison of `a` and `b` (equal lengths), found at `offset`.
    pub fn add(&mut self, offset: u64, a: &[u8], b: &[u8], as_: Element) {
        self.add_judged(offset, a, b, as_, None);
    }

    /// `add`, also counting the differing elements that `tolerance` does not admit (`a` is
    /// the reference); without one, every differing element is beyond it.
    pub fn add_judged(
        &mut self,
        offset: u64,
        a: &[u8],
        b: &[u8],
        as_: Element,
        tolerance: Option<&Tolerance>,
    ) {
        let n = a.len().min(b.len());
        self.bytes += n as u64;
        if a[..n] == b[..n] {
            self.elements += (n / as_.size()) as u64;
            return;
        }
        for (i, (x, y)) in a[..n].iter().zip(&b[..n]).enumerate() {
            if x != y {
                self.differing_bytes += 1;
                if self.first_offset.is_none() {
                    self.first_offset = Some(offset + i as u64);
                }
            }
        }
        let size = as_.size();
        let whole = n - n % size;
        // Bytes past the last whole element are no number a tolerance could admit.
        if a[whole..n] != b[whole..n] {
            self.beyond_tolerance += 1;
        }
        for (ea, eb) in a[..n].chunks_exact(size).zip(b[..n].chunks_exact(size)) {
            self.elements += 1;
            if ea == eb {
                continue;
            }
            self.differing_elements += 1;
            let (va, vb) = (as_.read(ea), as_.read(eb));
            if va.is_nan() || vb.is_nan() {
                self.nan_mismatches += 1;
                self.beyond_tolerance += 1;
                continue;
            }
            if !tolerance.is_some_and(|t| t.admits(va, vb)) {
                self.beyond_tolerance += 1;
            }
            let abs = (va - vb).abs();
            let scale = va.abs().max(vb.abs());
            self.max_abs = self.max_abs.max(abs);
            if scale > 0.0 {
                self.max_rel = self.max_rel.max(abs / scale);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn each_element_is_found_by_its_name_and_only_by_it() {
        for e in Element::ALL {
            assert_eq!(Element::from_name(e.name()), Some(e));
            assert_eq!(
                serde_json::to_string(&e).unwrap(),
                format!("\"{}\"", e.name())
            );
        }
        assert_eq!(Element::from_name("float32"), None);
    }

    #[test]
    fn identical_ranges() {
        let mut d = Difference::default();
        d.add(0, &f32s(&[1.0, 2.0]), &f32s(&[1.0, 2.0]), Element::F32);
        assert!(d.identical());
        assert_eq!(d.elements, 2);
    }

    #[test]
    fn rounding_is_told_apart_from_a_different_result() {
        let mut d = Difference::default();
        d.add(
            64,
            &f32s(&[1.0, 2.0, 100.0, f32::NAN]),
            &f32s(&[1.0, 2.000_000_2, 90.0, 1.0]),
            Element::F32,
        );
        assert_eq!(d.differing_elements, 3);
        assert_eq!(d.first_offset, Some(64 + 4));
        assert_eq!(d.nan_mismatches, 1);
        assert!((d.max_abs - 10.0).abs() < 1e-9, "{d:?}");
        assert!((d.max_rel - 0.1).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn a_tolerance_names_its_element_type_and_its_bounds() {
        let t = Tolerance::parse("f32:1e-3").expect("abs only");
        assert_eq!((t.element, t.abs, t.rel), (Element::F32, 1e-3, 0.0));
        let t = Tolerance::parse("bf16:0.01,0.02").expect("abs and rel");
        assert_eq!((t.element, t.abs, t.rel), (Element::Bf16, 0.01, 0.02));
        assert_eq!(
            Tolerance::parse("i32:0").expect("exact ints").element,
            Element::I32
        );
        assert_eq!(
            Tolerance::parse("f16:1,0").expect("f16").element,
            Element::F16
        );
        for bad in [
            "f32",
            "f64:1e-3",
            "u8:1",
            "f32:",
            "f32:x",
            "f32:-1",
            "f32:1,nan",
            "f32:inf",
        ] {
            let e = Tolerance::parse(bad).expect_err(bad);
            assert!(e.contains("DTYPE:ABS[,REL]"), "{bad}: {e}");
        }
    }

    #[test]
    fn elements_are_judged_against_the_reference_with_abs_plus_rel() {
        let t = Tolerance::parse("f32:0.5,0.1").expect("tolerance");
        assert!(t.admits(10.0, 11.5), "1.5 <= 0.5 + 0.1 * 10");
        assert!(!t.admits(10.0, 11.6));
        assert!(
            !t.admits(-10.0, -11.6),
            "the reference's magnitude scales rel"
        );
        let mut d = Difference::default();
        d.add_judged(
            0,
            &f32s(&[10.0, 1.0, 5.0]),
            &f32s(&[11.0, 2.0, f32::NAN]),
            Element::F32,
            Some(&t),
        );
        assert_eq!(d.differing_elements, 3);
        assert_eq!(
            d.beyond_tolerance, 2,
            "1 vs 2 is outside, a NaN always is: {d:?}"
        );
        let mut d = Difference::default();
        d.add(0, &f32s(&[1.0]), &f32s(&[1.000_001]), Element::F32);
        assert_eq!(
            d.beyond_tolerance, 1,
            "no tolerance: every difference is beyond it"
        );
        let json = serde_json::to_string(&Difference::default()).expect("json");
        assert!(
            !json.contains("beyond_tolerance"),
            "diff's JSON unchanged: {json}"
        );
    }

    #[test]
    fn halves_and_integers() {
        let a = half::f16::from_f32(1.0).to_le_bytes();
        let b = half::f16::from_f32(1.5).to_le_bytes();
        let mut d = Difference::default();
        d.add(0, &a, &b, Element::F16);
        assert!((d.max_abs - 0.5).abs() < 1e-9);
        let a = half::bf16::from_f32(2.0).to_le_bytes();
        let b = half::bf16::from_f32(-2.0).to_le_bytes();
        let mut d = Difference::default();
        d.add(0, &a, &b, Element::Bf16);
        assert!((d.max_abs - 4.0).abs() < 1e-9);
        let mut d = Difference::default();
        d.add(0, &7i32.to_le_bytes(), &(-3i32).to_le_bytes(), Element::I32);
        assert!((d.max_abs - 10.0).abs() < 1e-9);
    }
}
