//! Which capture of the base run is which of the new run: by content (SHA-256) when both
//! records have it, by file path otherwise.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::records::RunRecord;

/// How a pair was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedBy {
    /// The same file content: the same capture, wherever it lies.
    Sha256,
    /// The same path; one record (or both) has no SHA-256.
    File,
    /// The same path but different SHA-256s: the capture was re-recorded, so the inputs may
    /// differ too.
    FileShaDiffers,
}

/// A base record and the new record of the same capture (indices into each run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    pub base: usize,
    pub new: usize,
    pub by: PairedBy,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pairing {
    /// In the base run's order.
    pub pairs: Vec<Pair>,
    /// Base records with no partner (indices into the base run), in order.
    pub removed: Vec<usize>,
    /// New records with no partner, in order.
    pub added: Vec<usize>,
    /// Records left out because a later line of the same run has the same file and SHA-256
    /// (a capture run again and appended): (base, new).
    pub superseded: (usize, usize),
}

/// The records that count: of several with the same file and SHA-256, the last one (a
/// capture run again appends its newer result). Indices, in order, and how many were dropped.
pub fn latest_of_each(run: &[RunRecord]) -> (Vec<usize>, usize) {
    let mut seen: HashSet<(&str, Option<&str>)> = HashSet::new();
    let mut kept: Vec<usize> = (0..run.len())
        .rev()
        .filter(|&i| seen.insert((run[i].file.as_str(), run[i].sha256.as_deref())))
        .collect();
    kept.reverse();
    let dropped = run.len() - kept.len();
    (kept, dropped)
}

/// Partners found so far: base index → (new index, how), and the new indices taken.
#[derive(Default)]
struct Partners {
    of_base: HashMap<usize, (usize, PairedBy)>,
    taken: HashSet<usize>,
}

impl Partners {
    fn join(&mut self, base: usize, new: usize, by: PairedBy) {
        self.taken.insert(new);
        self.of_base.insert(base, (new, by));
    }
}

/// Pairs records of equal SHA-256, preferring the same path among several of equal content.
fn pair_by_content(
    base: &[RunRecord],
    base_kept: &[usize],
    new: &[RunRecord],
    new_kept: &[usize],
    p: &mut Partners,
) {
    let mut new_by_sha: HashMap<&str, Vec<usize>> = HashMap::new();
    for &n in new_kept {
        if let Some(sha) = new[n].sha256.as_deref() {
            new_by_sha.entry(sha).or_default().push(n);
        }
    }
    // Same content and path first, for all, so a copy elsewhere cannot take another's partner.
    for same_path_only in [true, false] {
        for &b in base_kept {
            if p.of_base.contains_key(&b) {
                continue;
            }
            let Some(candidates) = base[b].sha256.as_deref().and_then(|s| new_by_sha.get(s)) else {
                continue;
            };
            let chosen = candidates.iter().copied().find(|&n| {
                !p.taken.contains(&n) && (!same_path_only || new[n].file == base[b].file)
            });
            if let Some(n) = chosen {
                p.join(b, n, PairedBy::Sha256);
            }
        }
    }
}

/// Pairs the records still alone by path.
fn pair_by_path(
    base: &[RunRecord],
    base_kept: &[usize],
    new: &[RunRecord],
    new_kept: &[usize],
    p: &mut Partners,
) {
    let mut new_by_file: HashMap<&str, Vec<usize>> = HashMap::new();
    for &n in new_kept.iter().filter(|n| !p.taken.contains(n)) {
        new_by_file.entry(new[n].file.as_str()).or_default().push(n);
    }
    let alone: Vec<usize> = base_kept
        .iter()
        .copied()
        .filter(|b| !p.of_base.contains_key(b))
        .collect();
    for b in alone {
        let Some(candidates) = new_by_file.get(base[b].file.as_str()) else {
            continue;
        };
        if let Some(n) = candidates.iter().copied().find(|n| !p.taken.contains(n)) {
            let both_hashed = base[b].sha256.is_some() && new[n].sha256.is_some();
            let by = if both_hashed {
                PairedBy::FileShaDiffers
            } else {
                PairedBy::File
            };
            p.join(b, n, by);
        }
    }
}

/// Pairs the captures of two runs: first by SHA-256, then what is left by path.
pub fn pair(base: &[RunRecord], new: &[RunRecord]) -> Pairing {
    let (base_kept, base_dropped) = latest_of_each(base);
    let (new_kept, new_dropped) = latest_of_each(new);
    let mut p = Partners::default();
    pair_by_content(base, &base_kept, new, &new_kept, &mut p);
    pair_by_path(base, &base_kept, new, &new_kept, &mut p);
    Pairing {
        pairs: base_kept
            .iter()
            .filter_map(|&b| {
                p.of_base
                    .get(&b)
                    .map(|&(new, by)| Pair { base: b, new, by })
            })
            .collect(),
        removed: base_kept
            .iter()
            .copied()
            .filter(|b| !p.of_base.contains_key(b))
            .collect(),
        added: new_kept
            .iter()
            .copied()
            .filter(|n| !p.taken.contains(n))
            .collect(),
        superseded: (base_dropped, new_dropped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs_compare::records::Verdict;

    fn line(file: &str, sha: Option<&str>) -> RunRecord {
        RunRecord {
            file: file.into(),
            sha256: sha.map(str::to_string),
            kernel: None,
            mangled: None,
            device: None,
            device_uuid: None,
            driver: None,
            verdict: Verdict::Matched,
            median_us: None,
            first_us: None,
            in_app_us: None,
            passes: None,
            spread_pct: None,
            error: None,
            wall_s: 0.0,
        }
    }

    fn pairs(p: &Pairing) -> Vec<(usize, usize, PairedBy)> {
        p.pairs.iter().map(|x| (x.base, x.new, x.by)).collect()
    }

    #[test]
    fn content_pairs_across_paths() {
        let base = [line("old/a.krr", Some("aa")), line("old/b.krr", Some("bb"))];
        let new = [line("new/b.krr", Some("bb")), line("new/a.krr", Some("aa"))];
        let p = pair(&base, &new);
        assert_eq!(
            pairs(&p),
            [(0, 1, PairedBy::Sha256), (1, 0, PairedBy::Sha256)]
        );
        assert!(p.added.is_empty() && p.removed.is_empty());
    }

    #[test]
    fn without_a_hash_on_either_side_the_path_pairs() {
        let base = [line("a.krr", None), line("b.krr", Some("bb"))];
        let new = [line("a.krr", Some("aa")), line("b.krr", None)];
        let p = pair(&base, &new);
        assert_eq!(pairs(&p), [(0, 0, PairedBy::File), (1, 1, PairedBy::File)]);
    }

    #[test]
    fn same_path_other_content_is_paired_and_says_so() {
        let p = pair(&[line("a.krr", Some("aa"))], &[line("a.krr", Some("a2"))]);
        assert_eq!(pairs(&p), [(0, 0, PairedBy::FileShaDiffers)]);
    }

    #[test]
    fn captures_in_one_run_only_are_added_or_removed() {
        let base = [line("a.krr", Some("aa")), line("gone.krr", Some("gg"))];
        let new = [line("fresh.krr", Some("ff")), line("a.krr", Some("aa"))];
        let p = pair(&base, &new);
        assert_eq!(pairs(&p), [(0, 1, PairedBy::Sha256)]);
        assert_eq!(p.removed, [1]);
        assert_eq!(p.added, [0]);
    }

    #[test]
    fn equal_content_prefers_the_same_path_then_pairs_in_order() {
        let base = [line("x.krr", Some("s")), line("y.krr", Some("s"))];
        let new = [line("y.krr", Some("s")), line("z.krr", Some("s"))];
        let p = pair(&base, &new);
        assert_eq!(
            pairs(&p),
            [(0, 1, PairedBy::Sha256), (1, 0, PairedBy::Sha256)]
        );
    }

    #[test]
    fn a_capture_run_again_counts_once_with_its_last_result() {
        let mut again = line("a.krr", Some("aa"));
        again.verdict = Verdict::Mismatch;
        let new = [line("a.krr", Some("aa")), line("b.krr", None), again];
        assert_eq!(latest_of_each(&new), (vec![1, 2], 1));
        let p = pair(&[line("a.krr", Some("aa"))], &new);
        assert_eq!(pairs(&p), [(0, 2, PairedBy::Sha256)]);
        assert_eq!(p.added, [1]);
        assert_eq!(p.superseded, (0, 1));
    }
}
