//! `--shard I/N`: which captures of the corpus this process takes. A capture belongs to shard
//! `fnv1a64(key) % N`, its key being its path relative to the folder or manifest that named
//! it. A hash rather than the index in the sorted list: a capture stays in its shard when
//! others are added to or removed from the corpus (so `--resume` over last night's per-shard
//! files skips the right ones, and two hosts that mount the corpus in different places agree);
//! the price is shards balanced only statistically, which is what corpora of hundreds of
//! captures need. `--shard auto` reads the index and count the cluster's engine sets: Slurm
//! job arrays or Kubernetes Indexed Jobs.

use crate::farm::Entry;

/// This process's part of the corpus: shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

/// FNV-1a, 64-bit: fixed by its definition, so every build and host computes the same shard.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Shard {
    /// `I/N` with 0 <= I < N.
    pub fn parse(s: &str) -> Result<Shard, String> {
        let usage = || format!("--shard {s}: expected I/N (0 <= I < N, such as 0/4), or auto");
        let (i, n) = s.split_once('/').ok_or_else(usage)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| usage())?,
            n.trim().parse().map_err(|_| usage())?,
        );
        Shard::new(index, count).ok_or_else(usage)
    }

    fn new(index: u64, count: u64) -> Option<Shard> {
        (count > 0 && index < count).then_some(Shard { index, count })
    }

    /// `--shard auto`: from `var` (the environment), Slurm's array first, then Kubernetes'.
    /// Slurm numbers array tasks from `SLURM_ARRAY_TASK_MIN` (`--array=1-3` starts at 1), so
    /// the index is counted from there.
    pub fn from_cluster(var: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let number = |name: &str| -> Result<Option<u64>, String> {
            var(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("--shard auto: {name}={v:?} is not a number"))
                })
                .transpose()
        };
        let pairs = [
            ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
            ("JOB_COMPLETION_INDEX", "JOB_COMPLETIONS"),
        ];
        for (id_var, count_var) in pairs {
            let (Some(id), Some(count)) = (number(id_var)?, number(count_var)?) else {
                continue;
            };
            let base = if id_var.starts_with("SLURM") {
                number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0)
            } else {
                0
            };
            return id
                .checked_sub(base)
                .and_then(|i| Shard::new(i, count))
                .ok_or_else(|| {
                    format!("--shard auto: {id_var}={id} is not one of {count} tasks counted from {base}")
                });
        }
        Err(
            "--shard auto: neither SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm job \
             array: sbatch --array) nor JOB_COMPLETION_INDEX and JOB_COMPLETIONS (a Kubernetes \
             Indexed Job) are set; give --shard I/N"
                .to_string(),
        )
    }

    /// Whether the capture whose key is `key` is this shard's.
    pub fn takes(&self, key: &str) -> bool {
        fnv1a64(key.as_bytes()) % self.count == self.index
    }

    /// This shard's captures, in the corpus's order.
    pub fn select(&self, entries: Vec<Entry>) -> Vec<Entry> {
        entries.into_iter().filter(|e| self.takes(&e.key)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn entry(key: &str) -> Entry {
        Entry {
            path: format!("/mnt/{key}").into(),
            shown: key.into(),
            key: key.into(),
            sha256: None,
        }
    }

    fn corpus(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| entry(&format!("k{}/cap-{i}.krr", i % 5)))
            .collect()
    }

    #[test]
    fn every_capture_is_in_exactly_one_shard() {
        let all = corpus(60);
        for count in 1..=7 {
            let mut seen: HashMap<String, u64> = HashMap::new();
            for index in 0..count {
                for e in (Shard { index, count }).select(all.clone()) {
                    *seen.entry(e.key).or_default() += 1;
                }
            }
            assert_eq!(seen.len(), all.len(), "N={count}");
            assert!(seen.values().all(|&c| c == 1), "N={count}");
        }
    }

    // Catches: a shard that depends on where the corpus is mounted or on what else is in it.
    #[test]
    fn a_captures_shard_is_its_keys_alone() {
        let s = Shard { index: 1, count: 3 };
        let alone = s.select(vec![entry("a/x.krr")]).len();
        let mut moved = entry("a/x.krr");
        moved.path = "/elsewhere/a/x.krr".into();
        let mut many = corpus(20);
        many.push(moved);
        let with_others = s.select(many).iter().filter(|e| e.key == "a/x.krr").count();
        assert_eq!(alone, with_others);
    }

    // The hash is part of the contract between hosts: pin it.
    #[test]
    fn the_hash_is_fnv1a_64() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn shards_parse_as_i_of_n_from_zero() {
        assert_eq!(Shard::parse("2/5"), Ok(Shard { index: 2, count: 5 }));
        for bad in ["5/5", "1/0", "1", "a/3", "-1/3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
    }

    #[test]
    fn auto_reads_slurm_then_kubernetes() {
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        assert_eq!(
            Shard::from_cluster(&env(&slurm)),
            Ok(Shard { index: 2, count: 3 })
        );
        let from_one = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        assert_eq!(
            Shard::from_cluster(&env(&from_one)),
            Ok(Shard { index: 2, count: 3 })
        );
        let k8s = [("JOB_COMPLETION_INDEX", "0"), ("JOB_COMPLETIONS", "4")];
        assert_eq!(
            Shard::from_cluster(&env(&k8s)),
            Ok(Shard { index: 0, count: 4 })
        );
    }

    #[test]
    fn auto_without_a_cluster_or_with_nonsense_says_what_it_read() {
        let e = Shard::from_cluster(&env(&[])).expect_err("nothing set");
        assert!(e.contains("SLURM_ARRAY_TASK_ID") && e.contains("JOB_COMPLETION_INDEX"));
        let bad = [("JOB_COMPLETION_INDEX", "x"), ("JOB_COMPLETIONS", "4")];
        assert!(Shard::from_cluster(&env(&bad))
            .expect_err("nan")
            .contains("\"x\""));
        let out = [("JOB_COMPLETION_INDEX", "4"), ("JOB_COMPLETIONS", "4")];
        assert!(Shard::from_cluster(&env(&out)).is_err());
    }
}
