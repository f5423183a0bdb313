//! `kreplay --version`: the version, the commit it was built from, and the CUDA driver and
//! CUPTI this machine would give it: the three facts a bug report needs first. It never
//! fails and never initialises CUDA (`cuDriverGetVersion` and `cuptiGetVersion` need no
//! `cuInit`), so it stays fast on a machine with many GPUs and works on one with none.

use std::process::ExitCode;

use kreplay_cuda::cupti;

/// The commit `build.rs` found at build time ("unknown" outside a git checkout).
const COMMIT: &str = env!("KREPLAY_GIT_COMMIT");

/// The CUPTI library the bindings load and the API version it reports.
pub struct CuptiFound {
    pub api_version: u32,
    pub path: String,
}

/// What `--version` found at run time; each `Err` is the sentence to print instead.
pub struct Runtime {
    /// `cuDriverGetVersion` (13000 for CUDA 13.0).
    pub driver: Result<u32, String>,
    pub cupti: Result<CuptiFound, String>,
}

/// A CUDA version as the driver encodes it (13000 → "13.0", 12080 → "12.8").
fn cuda_release(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn cupti_line(c: &CuptiFound) -> String {
    let release = match cupti::cupti_release(c.api_version) {
        (0, _) => "CUDA 12 or older".to_string(),
        (major, minor) => format!("CUDA {major}.{minor}"),
    };
    format!(
        "{release} (API version {}, {})",
        c.api_version,
        crate::output::printable(&c.path)
    )
}

/// The text `kreplay --version` prints (pure, so its shape is tested without a GPU).
pub fn text(version: &str, commit: &str, found: &Runtime) -> String {
    let mut s = format!("kreplay {version} (commit {commit})\n");
    match &found.driver {
        Ok(v) => s += &format!("CUDA driver: {} ({v})\n", cuda_release(*v)),
        Err(why) => s += &format!("CUDA driver: {why}\n"),
    }
    match &found.cupti {
        Ok(c) => s += &format!("CUPTI: {}\n", cupti_line(c)),
        Err(why) => s += &format!("CUPTI: {why}\n"),
    }
    // The pair that makes `--metrics` crash or refuse is worth saying before anyone tries.
    if let (Ok(d), Ok(c)) = (&found.driver, &found.cupti) {
        if let Err(why) = cupti::profiler_compatibility(c.api_version, *d) {
            s += &format!("counters (--metrics): unavailable: {why}\n");
        }
    }
    s
}

fn probe_driver() -> Result<u32, String> {
    // SAFETY: only tries to dlopen libcuda (and closes it again); runs no driver code.
    if !unsafe { kreplay_cuda::sys::is_culib_present() } {
        return Err("no CUDA driver found (libcuda.so could not be loaded)".into());
    }
    kreplay_cuda::driver_version().map_err(|e| format!("the driver did not say its version: {e}"))
}

fn probe_cupti() -> Result<CuptiFound, String> {
    if !cupti::cupti_present() {
        return Err(
            "CUPTI not found (libcupti.so could not be loaded: it comes with the CUDA toolkit; \
             put its lib64 folder on LD_LIBRARY_PATH)"
                .into(),
        );
    }
    match cupti::pair_profiler_libraries() {
        Ok(info) => Ok(CuptiFound {
            api_version: info.api_version,
            path: info.path.clone(),
        }),
        Err(e) => Err(format!("CUPTI found, but it did not say its version: {e}")),
    }
}

/// Runs a probe, turning a panic of the bindings (a library without an expected symbol)
/// into a sentence: `--version` must answer whatever is installed.
fn guarded<T>(probe: fn() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(probe)
        .unwrap_or_else(|_| Err("could not be asked (the library is not one kreplay knows)".into()))
}

/// Prints the version text; a closed stdout is not an error.
pub fn print() -> ExitCode {
    // The bindings' panic messages would only repeat what `guarded` prints.
    std::panic::set_hook(Box::new(|_| {}));
    let found = Runtime {
        driver: guarded(probe_driver),
        cupti: guarded(probe_cupti),
    };
    let t = text(env!("CARGO_PKG_VERSION"), COMMIT, &found);
    let _ = std::io::Write::write_all(&mut std::io::stdout(), t.as_bytes());
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cupti_13_0() -> CuptiFound {
        CuptiFound {
            api_version: 130001,
            path: "/usr/local/cuda/lib64/libcupti.so.13".into(),
        }
    }

    #[test]
    fn names_version_commit_driver_and_cupti() {
        let t = text(
            "0.1.0",
            "abc1234",
            &Runtime {
                driver: Ok(13000),
                cupti: Ok(cupti_13_0()),
            },
        );
        assert_eq!(
            t,
            "kreplay 0.1.0 (commit abc1234)\nCUDA driver: 13.0 (13000)\nCUPTI: CUDA 13.0 (API \
             version 130001, /usr/local/cuda/lib64/libcupti.so.13)\n"
        );
    }

    #[test]
    fn says_what_is_missing() {
        let t = text(
            "0.1.0",
            "unknown",
            &Runtime {
                driver: Err("no CUDA driver found".into()),
                cupti: Err("CUPTI not found".into()),
            },
        );
        assert_eq!(
            t,
            "kreplay 0.1.0 (commit unknown)\nCUDA driver: no CUDA driver found\nCUPTI: CUPTI not \
             found\n"
        );
    }

    #[test]
    fn warns_of_a_cupti_newer_than_the_driver() {
        let newer = CuptiFound {
            api_version: 130400,
            path: "/wheel/libcupti.so.13".into(),
        };
        let t = text(
            "0.1.0",
            "abc1234",
            &Runtime {
                driver: Ok(13000),
                cupti: Ok(newer),
            },
        );
        assert!(t.contains("CUPTI: CUDA 13.4"), "{t}");
        assert!(t.contains("counters (--metrics): unavailable:"), "{t}");
        assert!(t.contains("newer than the driver"), "{t}");
    }

    #[test]
    fn cuda_versions_read_as_releases() {
        assert_eq!(cuda_release(13000), "13.0");
        assert_eq!(cuda_release(12080), "12.8");
    }
}
