//! Symbols of a cubin (CUDA ELF): kernels and global variables.

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
