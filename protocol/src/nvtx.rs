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
        Self::parse_for("--nvtx-include", text)
    }

    /// `parse`, with the setting named `flag` in the message (`--nvtx-range` takes the same
    /// syntax).
    pub fn parse_for(flag: &str, text: &str) -> Result<NvtxFilter, String> {
        let (domain, rest) = match text.split_once('@') {
            Some((d, r)) => (Some(d.to_string()), r),
            None => (None, text),
        };
        let path: Vec<String> = rest.split('/').map(str::to_string).collect();
        if path.iter().any(String::is_empty) || domain.as_deref() == Some("") {
            return Err(format!(
                "{flag} {text}: expected [DOMAIN@]RANGE or [DOMAIN@]OUTER/INNER"
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

    /// Whether the push that made `stack` (its innermost range, the last) opens an instance
    /// of the filter's range: the pushed range is in the filter's domain and completes the
    /// path there (with `A/B`, a B pushed directly inside an A of that domain). A range
    /// pushed inside an instance does not open another unless it completes the path itself.
    pub fn opened_by_push(&self, stack: &[OpenRange]) -> bool {
        let Some(pushed) = stack.last() else {
            return false;
        };
        if pushed.domain != self.domain {
            return false;
        }
        let names: Vec<&str> = stack
            .iter()
            .filter(|r| r.domain == self.domain)
            .map(|r| r.name.as_str())
            .collect();
        names.len() >= self.path.len()
            && names[names.len() - self.path.len()..]
                .iter()
                .zip(&self.path)
                .all(|(a, b)| *a == b)
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

    #[test]
    fn a_push_opens_an_instance_when_it_completes_the_path() {
        let layer = NvtxFilter::parse("decoder.layer.2").unwrap();
        let nested = NvtxFilter::parse("model/decoder.layer.2").unwrap();
        let in_domain = NvtxFilter::parse("cutlass@gemm").unwrap();
        let model = [r(None, "model")];
        let l2 = [r(None, "model"), r(None, "decoder.layer.2")];
        assert!(layer.opened_by_push(&l2));
        assert!(nested.opened_by_push(&l2));
        assert!(!layer.opened_by_push(&model));
        assert!(!layer.opened_by_push(&[]));
        // Inside an instance, a push of something else opens nothing (the instance is still
        // matched by `matches`, but it was opened once).
        let deeper = [
            r(None, "model"),
            r(None, "decoder.layer.2"),
            r(None, "attn"),
        ];
        assert!(layer.matches(&deeper));
        assert!(!layer.opened_by_push(&deeper));
        // A path needs the outer range directly outside (in the filter's domain).
        let apart = [r(None, "model"), r(None, "x"), r(None, "decoder.layer.2")];
        assert!(!nested.opened_by_push(&apart));
        let other_domain_between = [
            r(None, "model"),
            r(Some("cutlass"), "gemm"),
            r(None, "decoder.layer.2"),
        ];
        assert!(nested.opened_by_push(&other_domain_between));
        // Domains: the pushed range must be in the filter's.
        assert!(in_domain.opened_by_push(&[r(None, "model"), r(Some("cutlass"), "gemm")]));
        assert!(!in_domain.opened_by_push(&[r(None, "gemm")]));
        assert!(!layer.opened_by_push(&[r(Some("d"), "decoder.layer.2")]));
        // The same name nested in itself: each push is an instance.
        let twice = [r(None, "decoder.layer.2"), r(None, "decoder.layer.2")];
        assert!(layer.opened_by_push(&twice));
    }
}
