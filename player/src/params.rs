//! Parameter values for people: the demangled signature gives each parameter's C++ type, and
//! the argument bytes are shown as that type (integers, floats, bools, pointers); anything
//! else (structs, enums, unknown types, or a kernel without a signature) stays hex. The same
//! types tell redaction what each argument and the memory it points to hold.

use kreplay_format::{Element, ParamShape, ParamType};

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

/// The element type of a C++ type name (`float`, `__nv_bfloat16`, `int`, `float4`, ...), for
/// redaction; `Element::Unknown` for anything else (structs, `void`, templates).
pub fn element_type(ty: &str) -> Element {
    let mut t = ty.trim();
    loop {
        let before = t;
        for q in ["const ", "volatile "] {
            t = t.strip_prefix(q).unwrap_or(t).trim();
        }
        for q in [" const", " volatile", " __restrict__", " __restrict"] {
            t = t.strip_suffix(q).unwrap_or(t).trim();
        }
        if t == before {
            break;
        }
    }
    let base = t.trim_end_matches(|c: char| c.is_ascii_digit());
    match (t, base) {
        ("float", _) | (_, "float") => Element::F32,
        ("double", _) | (_, "double") => Element::F64,
        ("__half" | "half" | "__half2" | "half2" | "__half_raw" | "__half2_raw", _) => Element::F16,
        (
            "__nv_bfloat16" | "nv_bfloat16" | "__nv_bfloat162" | "nv_bfloat162"
            | "__nv_bfloat16_raw" | "__nv_bfloat162_raw",
            _,
        ) => Element::Bf16,
        ("bool", _) => Element::Bool,
        ("char" | "signed char" | "unsigned char" | "int8_t" | "uint8_t", _)
        | (_, "char" | "uchar") => Element::Int(1),
        ("short" | "unsigned short" | "int16_t" | "uint16_t", _) | (_, "short" | "ushort") => {
            Element::Int(2)
        }
        ("int" | "unsigned int" | "unsigned" | "int32_t" | "uint32_t", _) | (_, "int" | "uint") => {
            Element::Int(4)
        }
        (
            "long" | "unsigned long" | "long long" | "unsigned long long" | "int64_t" | "uint64_t"
            | "size_t",
            _,
        )
        | (_, "long" | "ulong" | "longlong" | "ulonglong") => Element::Int(8),
        _ => Element::Unknown,
    }
}

/// The parameter types of a dispatch for redaction, from its demangled signature when that
/// names exactly the captured parameters; empty otherwise (redaction then keeps the arguments).
pub fn param_types(d: &kreplay_format::Dispatch) -> Vec<ParamType> {
    signature_types(&kreplay_protocol::config::demangle(&d.kernel_name))
        .filter(|t| t.len() == d.params.len())
        .map(|t| t.iter().map(|t| param_type(t)).collect())
        .unwrap_or_default()
}

/// A CUDA vector type (`float4`, `int2`, `__half2`).
fn is_vector(t: &str) -> bool {
    let t = t.trim_start_matches("const ").trim_end_matches(" const");
    let base = t.trim_end_matches(|c: char| c.is_ascii_digit());
    matches!(t, "__half2" | "half2" | "__nv_bfloat162" | "nv_bfloat162")
        || (base != t
            && matches!(
                base,
                "float"
                    | "double"
                    | "int"
                    | "uint"
                    | "char"
                    | "uchar"
                    | "short"
                    | "ushort"
                    | "long"
                    | "ulong"
                    | "longlong"
                    | "ulonglong"
            ))
}

/// What redaction needs to know of a parameter of C++ type `ty`: a pointer and its element
/// type, a number (by value), or something else (kept whole).
pub fn param_type(ty: &str) -> ParamType {
    let t = ty.trim();
    let t = t.strip_suffix(" const").unwrap_or(t).trim();
    let t = t.strip_suffix("__restrict__").unwrap_or(t).trim();
    let shape = if let Some(pointee) = t.strip_suffix('*') {
        // A pointer to pointers points at pointer words: the default type.
        if pointee.trim_end().ends_with('*') {
            ParamShape::Pointer(Element::Unknown)
        } else {
            ParamShape::Pointer(element_type(pointee))
        }
    } else if t.ends_with('&') {
        ParamShape::Other
    } else {
        match element_type(t) {
            Element::Unknown => ParamShape::Other,
            // A vector type by value (float4) is a struct of numbers: kept whole.
            _ if is_vector(t) => ParamShape::Other,
            e => ParamShape::Scalar(e),
        }
    };
    ParamType {
        name: ty.to_string(),
        shape,
    }
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

    #[test]
    fn parameter_types_for_redaction() {
        use kreplay_format::{Element as E, ParamShape as S};
        let shape = |t: &str| param_type(t).shape;
        assert_eq!(shape("float const*"), S::Pointer(E::F32));
        assert_eq!(shape("float*"), S::Pointer(E::F32));
        assert_eq!(shape("const float* __restrict__"), S::Pointer(E::F32));
        assert_eq!(shape("__nv_bfloat16*"), S::Pointer(E::Bf16));
        assert_eq!(shape("__half const*"), S::Pointer(E::F16));
        assert_eq!(shape("float4*"), S::Pointer(E::F32));
        assert_eq!(shape("int*"), S::Pointer(E::Int(4)));
        assert_eq!(shape("unsigned long long const*"), S::Pointer(E::Int(8)));
        assert_eq!(shape("float**"), S::Pointer(E::Unknown));
        assert_eq!(shape("Batch*"), S::Pointer(E::Unknown));
        assert_eq!(shape("void*"), S::Pointer(E::Unknown));
        assert_eq!(shape("int"), S::Scalar(E::Int(4)));
        assert_eq!(shape("float"), S::Scalar(E::F32));
        assert_eq!(shape("double const"), S::Scalar(E::F64));
        assert_eq!(shape("__nv_bfloat16"), S::Scalar(E::Bf16));
        assert_eq!(shape("bool"), S::Scalar(E::Bool));
        assert_eq!(shape("float4"), S::Other);
        assert_eq!(shape("Batch"), S::Other);
        assert_eq!(shape("std::array<char*, 2ul>"), S::Other);
        assert_eq!(shape("float const&"), S::Other);
    }
}
