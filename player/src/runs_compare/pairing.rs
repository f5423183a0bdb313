//! Which capture of the base run is which of the new run: by content (SHA-256) when both
//! records have it, by path otherwise: first the path relative to the folder or manifest
//! (the record's key: two runs of one corpus mounted at different roots pair), when it names
//! one capture in each run, then the path as shown (lines of older versions carry no key).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::records::RunRecord;

/// How a pair was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedBy {
    /// The same file content: the same capture, wherever it lies.
    Sha256,
    /// The same path (relative to the corpus's folder or manifest when both records say it);
    /// one record (or both) has no SHA-256.
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
                !p.taken.contains(&n) && (!same_path_only || same_place(&base[b], &new[n]))
            });
            if let Some(n) = chosen {
                p.join(b, n, PairedBy::Sha256);
            }
        }
    }
}

/// Whether two records name the same path: the same key, or the same shown path.
fn same_place(a: &RunRecord, b: &RunRecord) -> bool {
    a.file == b.file || (a.key.is_some() && a.key == b.key)
}

/// The keys that name one capture only among `kept` records of `run` (two folders of one run
/// can each hold an `a.krr`: that key names neither).
fn unique_keys<'r>(run: &'r [RunRecord], kept: &[usize]) -> HashSet<&'r str> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for &i in kept {
        if let Some(k) = run[i].key.as_deref() {
            *count.entry(k).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter_map(|(k, n)| (n == 1).then_some(k))
        .collect()
}

/// Pairs the records still alone whose `name` is the same (a record without one stays alone).
fn pair_by_name<'r>(
    (base, base_kept): (&'r [RunRecord], &[usize]),
    (new, new_kept): (&'r [RunRecord], &[usize]),
    p: &mut Partners,
    name: impl Fn(&'r RunRecord) -> Option<&'r str>,
) {
    let mut new_by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for &n in new_kept.iter().filter(|n| !p.taken.contains(n)) {
        if let Some(k) = name(&new[n]) {
            new_by_name.entry(k).or_default().push(n);
        }
    }
    let alone: Vec<usize> = base_kept
        .iter()
        .copied()
        .filter(|b| !p.of_base.contains_key(b))
        .collect();
    for b in alone {
        let Some(candidates) = name(&base[b]).and_then(|k| new_by_name.get(k)) else {
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

/// Pairs the records still alone by path: by key where it names one capture in each run,
/// then by the path shown.
fn pair_by_path(
    base: &[RunRecord],
    base_kept: &[usize],
    new: &[RunRecord],
    new_kept: &[usize],
    p: &mut Partners,
) {
    let (base_keys, new_keys) = (unique_keys(base, base_kept), unique_keys(new, new_kept));
    let key_in = |keys: &HashSet<&str>, r: &RunRecord| -> bool {
        r.key.as_deref().is_some_and(|k| keys.contains(k))
    };
    // A key pairs only when it names one capture in each run.
    let both_unique = |r: &RunRecord| key_in(&base_keys, r) && key_in(&new_keys, r);
    pair_by_name((base, base_kept), (new, new_kept), p, |r| {
        r.key.as_deref().filter(|_| both_unique(r))
    });
    pair_by_name((base, base_kept), (new, new_kept), p, |r| {
        Some(r.file.as_str())
    });
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
            key: None,
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

    /// A directory run's line of `root`/`key`.
    fn at(root: &str, key: &str) -> RunRecord {
        let mut r = line(&format!("{root}/{key}"), None);
        r.key = Some(key.into());
        r
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

    // Catches: one corpus replayed under two mount points compared as all removed and added.
    #[test]
    fn runs_under_different_roots_pair_by_the_key() {
        let base = [at("/mnt/a/corpus", "k/1.krr"), at("/mnt/a/corpus", "2.krr")];
        let new = [at("/scratch/c", "2.krr"), at("/scratch/c", "k/1.krr")];
        let p = pair(&base, &new);
        assert_eq!(pairs(&p), [(0, 1, PairedBy::File), (1, 0, PairedBy::File)]);
        assert!(p.added.is_empty() && p.removed.is_empty());
        // An older line (no key) still pairs by the path shown.
        let old = [line("/mnt/a/corpus/2.krr", None)];
        assert_eq!(pairs(&pair(&old, &base)), [(0, 1, PairedBy::File)]);
    }

    // Catches: two folders' `a.krr` in one run (one key, two captures) paired crosswise.
    #[test]
    fn a_key_naming_two_captures_of_a_run_pairs_by_the_path_shown() {
        let base = [at("/x", "a.krr"), at("/y", "a.krr")];
        let new = [at("/y", "a.krr"), at("/z", "a.krr")];
        let p = pair(&base, &new);
        assert_eq!(pairs(&p), [(1, 0, PairedBy::File)]);
        assert_eq!(
            (p.removed.as_slice(), p.added.as_slice()),
            (&[0][..], &[1][..])
        );
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
