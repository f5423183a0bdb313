//! What `cuModuleLoadData` may be handed. The driver takes an image without a length and
//! trusts the offsets inside it, so an image from a file is checked against its own length
//! first: an ELF's header, section and program header tables and every section's bytes must
//! lie inside it; a fatbin container must be as long as its header says; anything else is PTX
//! text and must be NUL-terminated (the caller appends the NUL).

/// What kind of code image a byte string is, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    Elf,
    Fatbin,
    Ptx,
}

const FATBIN_MAGIC: u32 = 0xBA55_ED50;

fn u16_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?) as u64)
}
fn u32_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?) as u64)
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// `off + n * size <= len`, without overflow.
fn table_fits(off: u64, n: u64, size: u64, len: u64) -> bool {
    n.checked_mul(size)
        .and_then(|t| t.checked_add(off))
        .is_some_and(|end| end <= len)
}

fn check_elf(image: &[u8]) -> Result<(), String> {
    let len = image.len() as u64;
    if image.len() < 64 {
        return Err(format!(
            "ELF image of {len} bytes is shorter than an ELF64 header"
        ));
    }
    if image[4] != 2 || image[5] != 1 {
        return Err("not a little-endian ELF64 image (CUDA cubins are)".into());
    }
    let field = |v: Option<u64>| v.ok_or_else(|| "truncated ELF header".to_string());
    let phoff = field(u64_at(image, 32))?;
    let shoff = field(u64_at(image, 40))?;
    let phentsize = field(u16_at(image, 54))?;
    let phnum = field(u16_at(image, 56))?;
    let shentsize = field(u16_at(image, 58))?;
    let shnum = field(u16_at(image, 60))?;
    let shstrndx = field(u16_at(image, 62))?;
    if phnum > 0 && (phentsize < 56 || !table_fits(phoff, phnum, phentsize, len)) {
        return Err(format!(
            "program header table ({phnum} x {phentsize} bytes at {phoff}) runs past the {len}-byte image"
        ));
    }
    if shnum == 0 {
        return Ok(());
    }
    if shentsize < 64 || !table_fits(shoff, shnum, shentsize, len) {
        return Err(format!(
            "section table ({shnum} x {shentsize} bytes at {shoff}) runs past the {len}-byte image"
        ));
    }
    if shstrndx >= shnum {
        return Err(format!(
            "section-name table index {shstrndx} is not one of the {shnum} sections"
        ));
    }
    for i in 0..shnum {
        let h = (shoff + i * shentsize) as usize;
        let sh_type = field(u32_at(image, h + 4))?;
        let offset = field(u64_at(image, h + 24))?;
        let size = field(u64_at(image, h + 32))?;
        const SHT_NOBITS: u64 = 8;
        if sh_type != SHT_NOBITS && !table_fits(offset, 1, size, len) {
            return Err(format!(
                "section {i} ({size} bytes at {offset}) runs past the {len}-byte image"
            ));
        }
    }
    Ok(())
}

/// Checks that `image` can be handed to `cuModuleLoadData` without the driver reading past it.
pub fn check_image(image: &[u8]) -> Result<ImageKind, String> {
    if image.starts_with(b"\x7fELF") {
        check_elf(image)?;
        return Ok(ImageKind::Elf);
    }
    if u32_at(image, 0) == Some(FATBIN_MAGIC as u64) {
        // Container header: magic, version (u16), header size (u16), payload size (u64).
        let header = u16_at(image, 6).ok_or("truncated fatbin header")?;
        let payload = u64_at(image, 8).ok_or("truncated fatbin header")?;
        if header < 16 || !table_fits(header, 1, payload, image.len() as u64) {
            return Err(format!(
                "fatbin header claims {header} + {payload} bytes, the image has {}",
                image.len()
            ));
        }
        return Ok(ImageKind::Fatbin);
    }
    if image.contains(&0) && image.last() != Some(&0) {
        return Err("PTX text holds a NUL byte before its end".into());
    }
    Ok(ImageKind::Ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with `n` sections of 16 bytes each after the header.
    fn elf(n: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        let data_at = 64u64;
        let shoff = data_at + 16 * n as u64;
        b.resize(shoff as usize, 0xaa);
        b[40..48].copy_from_slice(&shoff.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&n.to_le_bytes());
        b[62..64].copy_from_slice(&0u16.to_le_bytes());
        for i in 0..n as u64 {
            let mut h = [0u8; 64];
            h[4..8].copy_from_slice(&1u32.to_le_bytes());
            h[24..32].copy_from_slice(&(data_at + 16 * i).to_le_bytes());
            h[32..40].copy_from_slice(&16u64.to_le_bytes());
            b.extend_from_slice(&h);
        }
        b
    }

    #[test]
    fn a_well_formed_elf_passes() {
        assert_eq!(check_image(&elf(3)), Ok(ImageKind::Elf));
    }

    #[test]
    fn every_truncation_of_an_elf_is_refused() {
        let good = elf(3);
        for cut in 4..good.len() {
            assert!(check_image(&good[..cut]).is_err(), "cut at {cut} passed");
        }
    }

    #[test]
    fn sections_and_tables_outside_the_image_are_refused() {
        let mut e = elf(2);
        let sh1 = e.len() - 64;
        e[sh1 + 32..sh1 + 40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(check_image(&e).unwrap_err().contains("section 1"));
        let mut e = elf(2);
        e[60..62].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(check_image(&e).unwrap_err().contains("section table"));
        let mut e = elf(2);
        e[56..58].copy_from_slice(&5u16.to_le_bytes());
        e[54..56].copy_from_slice(&56u16.to_le_bytes());
        e[32..40].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        assert!(check_image(&e).unwrap_err().contains("program header"));
        // A NOBITS section (.bss) may point anywhere.
        let mut e = elf(1);
        let sh0 = e.len() - 64;
        e[sh0 + 4..sh0 + 8].copy_from_slice(&8u32.to_le_bytes());
        e[sh0 + 32..sh0 + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(check_image(&e), Ok(ImageKind::Elf));
    }

    #[test]
    fn fatbin_length_is_checked_and_ptx_passes() {
        let mut f = vec![0u8; 16];
        f[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f[6..8].copy_from_slice(&16u16.to_le_bytes());
        f[8..16].copy_from_slice(&32u64.to_le_bytes());
        assert!(check_image(&f).is_err());
        f.resize(48, 0);
        assert_eq!(check_image(&f), Ok(ImageKind::Fatbin));
        assert_eq!(check_image(b".version 8.0\n"), Ok(ImageKind::Ptx));
        assert_eq!(check_image(b".version 8.0\n\0"), Ok(ImageKind::Ptx));
        assert!(check_image(b".version\0 8.0\n").is_err());
    }
}
