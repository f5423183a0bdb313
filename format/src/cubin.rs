//! A cubin (CUDA ELF), read without I/O: its symbols (kernels, global variables and their
//! sizes, through `object`), and the parameter layout it declares for a kernel, read from its `.nv.info.<kernel>`
//! section (EIATTR_KPARAM_INFO: ordinal, offset, size of each parameter; EIATTR_CBANK_PARAM_SIZE:
//! their total). A pure parser over bytes from a file: every offset is checked.

use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSymbol, SymbolKind};

/// What a cubin defines.
#[derive(Debug, Clone, Default)]
pub struct CubinSymbols {
    pub functions: Vec<String>,
    /// Global variables (`__device__`, `__constant__`) with their sizes.
    pub objects: Vec<(String, u64)>,
    /// SM architecture from the ELF flags, when recognisable.
    pub arch: Option<u32>,
}

/// Parses the symbol table; `None` when the bytes are not a 64-bit ELF.
pub fn symbols(image: &[u8]) -> Option<CubinSymbols> {
    let elf = ElfFile64::<Endianness>::parse(image).ok()?;
    let mut out = CubinSymbols::default();
    for sym in elf.symbols() {
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() || !sym.is_definition() {
            continue;
        }
        match sym.kind() {
            SymbolKind::Text => out.functions.push(name.to_string()),
            SymbolKind::Data if sym.size() > 0 => out.objects.push((name.to_string(), sym.size())),
            _ => {}
        }
    }
    // e_flags sits at byte 48 of an ELF64 header (parse() checked the header is there).
    let flags = image
        .get(48..52)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    // Older cubins keep the SM number in the low byte, newer ones in bits 8..16.
    let low = flags & 0xff;
    let high = (flags >> 8) & 0xff;
    out.arch = [low, high].into_iter().find(|a| (30..=200).contains(a));
    Some(out)
}

const EIFMT_SVAL: u8 = 4;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(o..o.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The bytes of the section named `want` in an ELF64 image.
fn section<'a>(elf: &'a [u8], want: &[u8]) -> Option<&'a [u8]> {
    if !elf.starts_with(b"\x7fELF") || elf.get(4) != Some(&2) {
        return None;
    }
    let shoff = usize::try_from(u64_at(elf, 40)?).ok()?;
    let shentsize = u16_at(elf, 58)? as usize;
    let shnum = u16_at(elf, 60)? as usize;
    let shstrndx = u16_at(elf, 62)? as usize;
    if shentsize < 64 {
        return None;
    }
    let header = |i: usize| -> Option<(u32, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let name = u32_at(elf, h)?;
        let off = usize::try_from(u64_at(elf, h + 24)?).ok()?;
        let size = usize::try_from(u64_at(elf, h + 32)?).ok()?;
        Some((name, off, size))
    };
    let (_, str_off, str_size) = header(shstrndx)?;
    let strtab = elf.get(str_off..str_off.checked_add(str_size)?)?;
    (0..shnum).find_map(|i| {
        let (name, off, size) = header(i)?;
        let name = strtab.get(name as usize..)?;
        let end = name.iter().position(|&c| c == 0)?;
        (&name[..end] == want)
            .then(|| elf.get(off..off.checked_add(size)?))
            .flatten()
    })
}

/// What a cubin says about a kernel's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredParams {
    /// (offset, size) of each parameter, in order.
    pub layout: Vec<(u32, u32)>,
    /// Total parameter bytes, when the cubin states it.
    pub total: Option<u32>,
}

/// The parameter layout `elf` declares for `kernel` (mangled name), or `None` when the image
/// is not an ELF cubin or holds no parameter information for it.
pub fn declared_params(elf: &[u8], kernel: &str) -> Option<DeclaredParams> {
    let mut name = b".nv.info.".to_vec();
    name.extend_from_slice(kernel.as_bytes());
    let info = section(elf, &name)?;
    let mut params: Vec<(u16, u32, u32)> = Vec::new();
    let mut total = None;
    let mut p = 0usize;
    while p + 4 <= info.len() {
        let fmt = info[p];
        let attr = info[p + 1];
        let v = u16_at(info, p + 2)?;
        if fmt == EIFMT_SVAL {
            let data = info.get(p + 4..p + 4 + v as usize)?;
            if attr == EIATTR_KPARAM_INFO && data.len() >= 12 {
                let ordinal = u16_at(data, 4)?;
                let offset = u16_at(data, 6)? as u32;
                let size = (u32_at(data, 8)? >> 18) & 0x3fff;
                params.push((ordinal, offset, size));
            }
            p += 4 + v as usize;
        } else {
            if attr == EIATTR_CBANK_PARAM_SIZE {
                total = Some(v as u32);
            }
            p += 4;
        }
    }
    if params.is_empty() && total.is_none() {
        return None;
    }
    params.sort_unstable();
    Some(DeclaredParams {
        layout: params.iter().map(|&(_, o, s)| (o, s)).collect(),
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 holding `.shstrtab` and one `.nv.info.k` section with `info`.
    fn elf_with_info(info: &[u8]) -> Vec<u8> {
        let strtab = b"\0.shstrtab\0.nv.info.k\0";
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        let str_off = b.len();
        b.extend_from_slice(strtab);
        let info_off = b.len();
        b.extend_from_slice(info);
        let shoff = b.len();
        b[40..48].copy_from_slice(&(shoff as u64).to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&3u16.to_le_bytes());
        b[62..64].copy_from_slice(&1u16.to_le_bytes());
        for (name, off, size) in [
            (0u32, 0usize, 0usize),
            (1, str_off, strtab.len()),
            (11, info_off, info.len()),
        ] {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            b.extend_from_slice(&h);
        }
        b
    }

    fn kparam(ordinal: u16, offset: u16, size: u32) -> Vec<u8> {
        let mut v = vec![4, EIATTR_KPARAM_INFO, 12, 0, 0, 0, 0, 0];
        v.extend_from_slice(&ordinal.to_le_bytes());
        v.extend_from_slice(&offset.to_le_bytes());
        v.extend_from_slice(&((size << 18) | 0xf000).to_le_bytes());
        v
    }

    #[test]
    fn reads_the_layout_nvcc_writes() {
        // As nvcc writes saxpy(int, float, const float*, float*): last parameter first.
        let mut info = Vec::new();
        for (o, off, sz) in [(3, 16, 8), (2, 8, 8), (1, 4, 4), (0, 0, 4)] {
            info.extend(kparam(o, off, sz));
        }
        info.extend_from_slice(&[3, 0x50, 0, 0, 3, EIATTR_CBANK_PARAM_SIZE, 24, 0]);
        let d = declared_params(&elf_with_info(&info), "k").expect("declared");
        assert_eq!(d.layout, vec![(0, 4), (4, 4), (8, 8), (16, 8)]);
        assert_eq!(d.total, Some(24));
        assert!(declared_params(&elf_with_info(&info), "other").is_none());
    }

    #[test]
    fn damaged_images_give_none_not_a_panic() {
        let mut info = kparam(0, 0, 8);
        info.extend_from_slice(&[3, EIATTR_CBANK_PARAM_SIZE, 8, 0]);
        let good = elf_with_info(&info);
        for cut in 0..good.len() {
            let _ = declared_params(&good[..cut], "k");
        }
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = declared_params(&b, "k");
        }
        // An SVAL whose size runs past the section.
        let bad = elf_with_info(&[4, EIATTR_KPARAM_INFO, 200, 0]);
        assert!(declared_params(&bad, "k").is_none());
    }
}
