//! Parameter values for people: the demangled signature gives each parameter's C++ type, and
//! the argument bytes are shown as that type (integers, floats, bools, pointers); anything
//! else (structs, enums, unknown types, or a kernel without a signature) stays hex.

/// The parameter types of a demangled signature (`saxpy(int, float, float const*, float*)`
/// → `["int", "float", "float const*", "float*"]`); `None` when it has no parameter list.
pub fn signature_types(demangled: &str) -> Option<Vec<String>> {
    // The top-level parameter list: the first '(' outside template arguments, to its match.
    let mut angle = 0i32;
    let mut start = None;
    for (i, ch) in demangled.char_indices() {
        match ch {
            '<' => angle += 1,
            '>' if angle > 0 => angle -= 1,
            '(' if angle == 0 && i > 0 => {
                start = Some(i);
                break;
            }
            _ => {}
        }
    }
    let start = start?;
    let mut depth = 0i32;
    let mut types = Vec::new();
    let mut cur = String::new();
    for ch in demangled[start + 1..].chars() {
        match ch {
            '(' | '<' | '[' | '{' => {
                depth += 1;
                cur.push(ch);
            }
            ')' if depth == 0 => {
                let t = cur.trim();
                if !t.is_empty() {
                    types.push(t.to_string());
                }
                return Some(if types == ["void"] { Vec::new() } else { types });
            }
            ')' | '>' | ']' | '}' => {
                depth -= 1;
                cur.push(ch);
            }
            ',' if depth == 0 => {
                types.push(cur.trim().to_string());
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    None
}

/// How the bytes of a parameter of C++ type `ty` read, or `None` to leave them hex.
pub fn decode_value(ty: &str, bytes: &[u8]) -> Option<String> {
    let t = ty.trim();
    if t.ends_with('*') || t.ends_with('&') {
        let v = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        return Some(format!("{v:#x}"));
    }
    let t = t.trim_start_matches("const ").trim_end_matches(" const");
    let signed = |n: usize| -> Option<i64> {
        let b = bytes.get(..n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(b);
        let v = u64::from_le_bytes(buf);
        let shift = 64 - 8 * n as u32;
        Some(((v << shift) as i64) >> shift)
    };
    let unsigned = |n: usize| -> Option<u64> {
        let b = bytes.get(..n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(b);
        Some(u64::from_le_bytes(buf))
    };
    let size = bytes.len();
    Some(match t {
        "bool" if size == 1 => (bytes[0] != 0).to_string(),
        "float" if size == 4 => f32::from_le_bytes(bytes.try_into().ok()?).to_string(),
        "double" if size == 8 => f64::from_le_bytes(bytes.try_into().ok()?).to_string(),
        "char" | "signed char" if size == 1 => signed(1)?.to_string(),
        "unsigned char" if size == 1 => unsigned(1)?.to_string(),
        "short" if size == 2 => signed(2)?.to_string(),
        "unsigned short" if size == 2 => unsigned(2)?.to_string(),
        "int" if size == 4 => signed(4)?.to_string(),
        "unsigned int" if size == 4 => unsigned(4)?.to_string(),
        "long" | "long long" if size == 8 => signed(8)?.to_string(),
        "unsigned long" | "unsigned long long" if size == 8 => unsigned(8)?.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_split_at_top_level_commas() {
        assert_eq!(
            signature_types("saxpy(int, float, float const*, float*)").unwrap(),
            ["int", "float", "float const*", "float*"]
        );
        assert_eq!(
            signature_types("void f<(unsigned int)512, g<int, int> >(std::array<char*, 2ul>, int)")
                .unwrap(),
            ["std::array<char*, 2ul>", "int"]
        );
        assert_eq!(signature_types("k()").unwrap(), Vec::<String>::new());
        assert_eq!(signature_types("k(void)").unwrap(), Vec::<String>::new());
        assert!(signature_types("fused_axpy_relu").is_none());
        assert!(signature_types("broken(int, float").is_none());
    }

    #[test]
    fn values_read_as_their_type() {
        assert_eq!(decode_value("int", &(-5i32).to_le_bytes()).unwrap(), "-5");
        assert_eq!(
            decode_value("unsigned int", &u32::MAX.to_le_bytes()).unwrap(),
            "4294967295"
        );
        assert_eq!(decode_value("float", &2.5f32.to_le_bytes()).unwrap(), "2.5");
        assert_eq!(
            decode_value("double const", &0.125f64.to_le_bytes()).unwrap(),
            "0.125"
        );
        assert_eq!(decode_value("long", &(-1i64).to_le_bytes()).unwrap(), "-1");
        assert_eq!(decode_value("bool", &[1]).unwrap(), "true");
        assert_eq!(decode_value("short", &(-2i16).to_le_bytes()).unwrap(), "-2");
        assert_eq!(
            decode_value("float const*", &0x7f00_0000_1000u64.to_le_bytes()).unwrap(),
            "0x7f0000001000"
        );
        // Sizes that do not fit the type, and structs, stay hex.
        assert!(decode_value("int", &[1, 2]).is_none());
        assert!(decode_value("Batch", &[0; 24]).is_none());
        assert!(decode_value("float*", &[0; 4]).is_none());
    }
}
