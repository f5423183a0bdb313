use std::path::PathBuf;

/// Why the check could not read the tree (as opposed to what it found wrong in it).
#[derive(Debug, thiserror::Error)]
pub enum HouseError {
    #[error("cannot read {0}")]
    Read(PathBuf),
    #[error("cannot parse {path}:{line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{from}: `mod {name};` names no file (looked for {})", .tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    MissingModule {
        from: PathBuf,
        name: String,
        tried: Vec<PathBuf>,
    },
    #[error("cannot list {path}: {source}")]
    List {
        path: PathBuf,
        source: std::io::Error,
    },
}
