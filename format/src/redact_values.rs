//! The values redaction writes: the element types it knows (`Element`, as a kernel parameter's
//! type says: `ParamType`, `ParamShape`) and, per region and type, one period of generated
//! values (`redacted_period`). Pure functions of (region, element type), so packing the same
//! capture twice gives the same file. `pack` and `pack_range` both draw from here.

/// One kernel parameter's type, as redaction uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamType {
    /// The C++ type as the signature spells it (shown in the redaction listing).
    pub name: String,
    pub shape: ParamShape,
}

/// What a parameter is, for redaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamShape {
    /// A number passed by value.
    Scalar(Element),
    /// A pointer to elements of this type.
    Pointer(Element),
    /// Anything else (a struct, an enum, a reference, a template): kept whole.
    Other,
}

/// The type of the values redaction writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Element {
    F16,
    Bf16,
    F32,
    F64,
    /// An integer of this many bytes (1, 2, 4 or 8).
    Int(u8),
    Bool,
    /// Not known: the safe default (see the module documentation).
    Unknown,
}

impl Element {
    /// Bytes of one element.
    pub fn size(self) -> u64 {
        match self {
            Element::F16 | Element::Bf16 => 2,
            Element::F32 => 4,
            Element::F64 | Element::Unknown => 8,
            Element::Int(n) => u64::from(n.clamp(1, 8)),
            Element::Bool => 1,
        }
    }

    /// What redacted memory of this type holds, in words.
    pub fn describe(self) -> String {
        match self {
            Element::F16 => "f16 values +-1/16..+-15/16".into(),
            Element::Bf16 => "bf16 values +-1/16..+-15/16".into(),
            Element::F32 => "f32 values +-1/16..+-15/16".into(),
            Element::F64 => "f64 values +-1/16..+-15/16".into(),
            Element::Int(n) => format!("{}-bit integers 0..=15", 8 * n),
            Element::Bool => "bools 0/1".into(),
            Element::Unknown => {
                "8-byte words 0..=15 (type unknown: small as any integer, finite as any float)"
                    .into()
            }
        }
    }
}

/// Redacted memory repeats with this period (bytes): a multiple of every element size. Inside
/// it, elements cycle through 16 distinct values, so every 8-byte stretch of a period is
/// unique in it and zstd at any level finds the repeat one period back: a redacted chunk
/// compresses to a few hundred bytes, so a redacted capture is no larger than the original.
pub const REDACTION_PERIOD: u64 = 128;

pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut z = (a << 40 ^ b).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An f32 that f16 holds exactly (normal or zero, no rounding needed) as f16 bits.
pub(crate) fn f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    if v == 0.0 {
        return sign;
    }
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    sign | ((exp.clamp(1, 30) as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

/// Writes value number `v` (0..16) of element type `e` into `out` (`e.size()` bytes): floats
/// (2v - 15)/16, the odd sixteenths in (-1, 1), exact in f16, bf16, f32 and f64; integers v;
/// bools v & 1.
fn encode(e: Element, v: u64, out: &mut [u8]) {
    let float = (2.0 * (v % 16) as f32 - 15.0) / 16.0;
    let small = v % 16;
    match e {
        Element::F16 => out.copy_from_slice(&f16_bits(float).to_le_bytes()),
        Element::Bf16 => out.copy_from_slice(&((float.to_bits() >> 16) as u16).to_le_bytes()),
        Element::F32 => out.copy_from_slice(&float.to_le_bytes()),
        Element::F64 => out.copy_from_slice(&f64::from(float).to_le_bytes()),
        Element::Int(_) | Element::Unknown => {
            let n = out.len();
            out.copy_from_slice(&small.to_le_bytes()[..n]);
        }
        Element::Bool => out[0] = (v & 1) as u8,
    }
}

/// One period of the redacted bytes of a stretch of `region_id` holding `e` (element 0 at
/// the period's start): the 16 values in an order drawn from the region id (bools: a binary
/// de Bruijn cycle, whose 8-bit windows are all distinct).
pub fn redacted_period(region_id: u32, e: Element) -> Vec<u8> {
    let mut order: [u64; 16] = std::array::from_fn(|i| i as u64);
    for i in (1..16).rev() {
        let j = (mix(u64::from(region_id), i as u64) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    if e == Element::Bool {
        let rot = mix(u64::from(region_id), 99) % 16;
        order = std::array::from_fn(|i| (0b0000_1001_1010_1111u64 >> ((i as u64 + rot) % 16)) & 1);
    }
    let size = e.size() as usize;
    let mut p = vec![0u8; REDACTION_PERIOD as usize];
    for (i, el) in p.chunks_exact_mut(size).enumerate() {
        encode(e, order[i % 16], el);
    }
    p
}
