//! The one place metadata payloads are turned into bytes and back: serde + bincode 2,
//! little-endian, fixed-width integers, with a size limit so a hostile length cannot make
//! the decoder allocate more than the payload could hold. Swap the codec here and nowhere else.

use serde::{de::DeserializeOwned, Serialize};

use crate::error::{FormatError, Result};

/// Largest metadata payload decoded (module images are the big ones: cuBLAS cubins reach
/// tens of MiB).
pub const METADATA_LIMIT: usize = 1 << 30;

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<METADATA_LIMIT>()
}

/// Encodes one metadata value.
pub fn encode<T: Serialize>(value: &T, what: &'static str) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| FormatError::Encode {
        what,
        message: e.to_string(),
    })
}

/// Decodes one metadata value that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], offset: u64, what: &str) -> Result<T> {
    let (value, used): (T, usize) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(|e| FormatError::Decode {
            offset,
            what: what.to_string(),
            message: e.to_string(),
        })?;
    if used != bytes.len() {
        return Err(FormatError::Decode {
            offset,
            what: what.to_string(),
            message: format!(
                "{} bytes left over after decoding {used} of {}",
                bytes.len() - used,
                bytes.len()
            ),
        });
    }
    Ok(value)
}
