//! `--nvtx-include`: which push/pop ranges select a launch (the recorder keeps the stack of
//! open ranges; this is the filter both sides agree on).

/// An open push/pop range: its domain (`None`: the default domain) and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRange {
    pub domain: Option<String>,
    pub name: String,
}

impl OpenRange {
    pub fn new(domain: Option<&str>, name: &str) -> OpenRange {
        OpenRange {
            domain: domain.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// `domain@name`, or `name` in the default domain (ncu's spelling).
    pub fn label(&self) -> String {
        match &self.domain {
            Some(d) => format!("{d}@{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// `--nvtx-include`, a subset of ncu's push/pop syntax: `[DOMAIN@]RANGE[/RANGE...]`. The
/// launch must be inside RANGE (in DOMAIN, or the default domain); with `A/B`, inside a B
/// opened directly inside an A.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvtxFilter {
    domain: Option<String>,
    path: Vec<String>,
}

impl NvtxFilter {
    pub fn parse(text: &str) -> Result<NvtxFilter, String> {
        let (domain, rest) = match text.split_once('@') {
            Some((d, r)) => (Some(d.to_string()), r),
            None => (None, text),
        };
        let path: Vec<String> = rest.split('/').map(str::to_string).collect();
        if path.iter().any(String::is_empty) || domain.as_deref() == Some("") {
            return Err(format!(
                "--nvtx-include {text}: expected [DOMAIN@]RANGE or [DOMAIN@]OUTER/INNER"
            ));
        }
        Ok(NvtxFilter { domain, path })
    }

    /// Whether a launch with these ranges open (outermost first) is selected.
    pub fn matches(&self, stack: &[OpenRange]) -> bool {
        let names: Vec<&str> = stack
            .iter()
            .filter(|r| r.domain == self.domain)
            .map(|r| r.name.as_str())
            .collect();
        names
            .windows(self.path.len())
            .any(|w| w.iter().zip(&self.path).all(|(a, b)| *a == b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(domain: Option<&str>, name: &str) -> OpenRange {
        OpenRange::new(domain, name)
    }

    #[test]
    fn filters_in_ncu_spelling() {
        let stack = [
            r(None, "model"),
            r(None, "decoder.layer.7"),
            r(Some("cutlass"), "gemm"),
        ];
        assert!(NvtxFilter::parse("decoder.layer.7")
            .unwrap()
            .matches(&stack));
        assert!(NvtxFilter::parse("model/decoder.layer.7")
            .unwrap()
            .matches(&stack));
        assert!(!NvtxFilter::parse("decoder.layer.7/model")
            .unwrap()
            .matches(&stack));
        assert!(!NvtxFilter::parse("decoder.layer.6")
            .unwrap()
            .matches(&stack));
        assert!(NvtxFilter::parse("cutlass@gemm").unwrap().matches(&stack));
        assert!(!NvtxFilter::parse("gemm").unwrap().matches(&stack));
        assert!(!NvtxFilter::parse("model").unwrap().matches(&[]));
        assert!(NvtxFilter::parse("").is_err());
        assert!(NvtxFilter::parse("a//b").is_err());
        assert!(NvtxFilter::parse("@x").is_err());
        assert_eq!(stack[2].label(), "cutlass@gemm");
    }
}
