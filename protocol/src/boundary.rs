//! `record --nvtx-range` / `--profiler-range`: a range selected by boundaries the application
//! marks itself (an NVTX push and its pop, `cuProfilerStart` and `cuProfilerStop`), what the
//! CLI hands the recorder and how the capture names where it came from.

use crate::nvtx::NvtxFilter;

/// A range selected by its boundaries in the application (`record --nvtx-range`,
/// `--profiler-range`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundaryRange {
    /// The `nth` (1-based) instance of the NVTX push/pop range `name` (in `domain`, when
    /// given). `name` may be a path `OUTER/INNER` (INNER opened directly inside OUTER), as
    /// `--nvtx-include` takes it.
    Nvtx {
        domain: Option<String>,
        name: String,
        nth: u64,
    },
    /// The `nth` (1-based) `cuProfilerStart` .. `cuProfilerStop` pair.
    Profiler { nth: u64 },
}

impl BoundaryRange {
    /// `--nvtx-range [DOMAIN@]RANGE[/RANGE...]`, its `nth` instance. `flag` names the setting
    /// in the message (the CLI's flag or the recorder's environment variable).
    pub fn nvtx(flag: &str, text: &str, nth: u64) -> Result<BoundaryRange, String> {
        // The filter's syntax check is the one `--nvtx-include` gets.
        NvtxFilter::parse_for(flag, text)?;
        let (domain, name) = match text.split_once('@') {
            Some((d, n)) => (Some(d.to_string()), n.to_string()),
            None => (None, text.to_string()),
        };
        Ok(BoundaryRange::Nvtx { domain, name, nth })
    }

    /// The instance selected (1-based).
    pub fn nth(&self) -> u64 {
        match self {
            BoundaryRange::Nvtx { nth, .. } | BoundaryRange::Profiler { nth } => *nth,
        }
    }

    /// What the user asked for, as `--nvtx-range` takes it (`None` for a profiler range).
    pub fn nvtx_text(&self) -> Option<String> {
        match self {
            BoundaryRange::Nvtx {
                domain: Some(d),
                name,
                ..
            } => Some(format!("{d}@{name}")),
            BoundaryRange::Nvtx { name, .. } => Some(name.clone()),
            BoundaryRange::Profiler { .. } => None,
        }
    }

    /// The filter an NVTX range's pushes are matched with (`None` for a profiler range).
    pub fn nvtx_filter(&self) -> Option<NvtxFilter> {
        NvtxFilter::parse(&self.nvtx_text()?).ok()
    }

    /// Where a capture of this range came from (`RangeInfo.origin`, `info`'s `range`):
    /// `nvtx-range layer.2 #1`, `nvtx-range mydomain@layer.2 #1`, `profiler-range #1`.
    pub fn origin(&self) -> String {
        match self.nvtx_text() {
            Some(text) => format!("nvtx-range {text} #{}", self.nth()),
            None => format!("profiler-range #{}", self.nth()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvtx::OpenRange;

    #[test]
    fn nvtx_ranges_parse_as_nvtx_include_does() {
        let r = BoundaryRange::nvtx("--nvtx-range", "mydomain@layer.2", 3).unwrap();
        assert_eq!(
            r,
            BoundaryRange::Nvtx {
                domain: Some("mydomain".into()),
                name: "layer.2".into(),
                nth: 3
            }
        );
        assert_eq!(r.nth(), 3);
        let plain = BoundaryRange::nvtx("--nvtx-range", "model/layer.2", 1).unwrap();
        assert_eq!(plain.nvtx_text().as_deref(), Some("model/layer.2"));
        for bad in ["", "a//b", "@x", "d@"] {
            let e = BoundaryRange::nvtx("--nvtx-range", bad, 1).unwrap_err();
            assert!(e.starts_with("--nvtx-range "), "{bad:?}: {e}");
        }
    }

    #[test]
    fn origins_name_the_range_and_its_instance() {
        let plain = BoundaryRange::nvtx("x", "layer.2", 1).unwrap();
        assert_eq!(plain.origin(), "nvtx-range layer.2 #1");
        let in_domain = BoundaryRange::nvtx("x", "mydomain@layer.2", 2).unwrap();
        assert_eq!(in_domain.origin(), "nvtx-range mydomain@layer.2 #2");
        assert_eq!(
            BoundaryRange::Profiler { nth: 1 }.origin(),
            "profiler-range #1"
        );
        assert_eq!(BoundaryRange::Profiler { nth: 4 }.nvtx_text(), None);
    }

    #[test]
    fn the_filter_keeps_the_domain() {
        let f = BoundaryRange::nvtx("x", "mydomain@layer.2", 1)
            .unwrap()
            .nvtx_filter()
            .unwrap();
        assert!(f.matches(&[OpenRange::new(Some("mydomain"), "layer.2")]));
        assert!(!f.matches(&[OpenRange::new(None, "layer.2")]));
        assert!(BoundaryRange::Profiler { nth: 1 }.nvtx_filter().is_none());
    }
}
