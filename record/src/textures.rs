//! Texture and surface objects passed by value in the kernel's arguments: found by asking the
//! driver about each argument word that could be a handle, described for the capture, the
//! arrays behind them read back (their texels are regions of kind `CudaArray`), the linear
//! memory behind them handed to the walk as roots.

use kreplay_cuda::texture::{ForeignArray, ForeignResource, ObjectQuery, MAX_HANDLE};
use kreplay_engine::texture_desc;
use kreplay_format::{ArrayImage, TextureObject, TextureResource, Textures};

/// Offsets of the 8-byte-aligned argument words, inside parameters of 8 bytes or more, whose
/// value could be a texture or surface handle (1 to `MAX_HANDLE`), with that value.
pub fn candidate_words(args: &[u8], layout: &[(u32, u32)]) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for &(off, size) in layout {
        if size < 8 {
            continue;
        }
        let mut w = off.div_ceil(8) * 8;
        while w + 8 <= off + size {
            let v = args
                .get(w as usize..w as usize + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes);
            if (1..=MAX_HANDLE).contains(&v) {
                out.push((w, v));
            }
            w += 8;
        }
    }
    out
}

/// The objects the arguments (and handle tables in captured memory) hold, before their
/// arrays are read.
#[derive(Default)]
pub struct Found {
    /// Objects with `arg_words` and `memory_words`; array resources index `arrays`.
    pub objects: Vec<TextureObject>,
    pub arrays: Vec<(ForeignArray, ArrayImage)>,
    /// Linear memory the objects view (walk roots).
    pub addresses: Vec<u64>,
    pub notes: Vec<String>,
    /// Handles asked about: the object's index, or none when the number names no object
    /// kreplay can capture.
    seen: Vec<(u64, Option<usize>)>,
}

impl Found {
    /// The object `handle` names (asked of the driver once), added when new.
    fn object(&mut self, handle: u64, at: &str) -> Option<usize> {
        if let Some(&(_, i)) = self.seen.iter().find(|(h, _)| *h == handle) {
            return i;
        }
        let i = ObjectQuery::of(handle).and_then(|q| self.add(handle, q, at));
        self.seen.push((handle, i));
        i
    }

    fn add(&mut self, handle: u64, q: ObjectQuery, at: &str) -> Option<usize> {
        let resource = match q.resource {
            ForeignResource::Array(a) => {
                let index = match self.arrays.iter().position(|(x, _)| *x == a) {
                    Some(i) => i,
                    None => match a.image().map(|d| texture_desc::array_image(&d, 0)) {
                        Ok(image) if image.texel_bytes().is_some() => {
                            self.arrays.push((a, image));
                            self.arrays.len() - 1
                        }
                        Ok(image) => {
                            self.notes.push(format!(
                                "{at} holds {} {handle}, whose array has format {:#x} ({} channels), which kreplay cannot capture: the replay passes a handle that means nothing",
                                kind_name(q.surface), image.format, image.channels
                            ));
                            return None;
                        }
                        Err(e) => {
                            self.notes.push(format!(
                                "{at} holds {} {handle}, whose array could not be described: {e}",
                                kind_name(q.surface)
                            ));
                            return None;
                        }
                    },
                } as u32;
                match a {
                    ForeignArray::Plain(_) => TextureResource::Array { index },
                    ForeignArray::Mipmapped(_) => TextureResource::Mipmapped { index },
                }
            }
            ForeignResource::Memory(r) => {
                self.addresses.push(r.address());
                texture_desc::texture_resource(&r)
            }
        };
        self.objects.push(TextureObject {
            handle,
            surface: q.surface,
            resource,
            sampling: q.sampling.as_ref().map(texture_desc::texture_sampling),
            view: q.view.as_ref().map(texture_desc::texture_view),
            arg_words: Vec::new(),
            memory_words: Vec::new(),
        });
        Some(self.objects.len() - 1)
    }

    /// Handle tables in captured memory (an array of `cudaTextureObject_t` the kernel indexes),
    /// as the walk found them (`Walk::handle_tables`): kept when the driver confirms every
    /// value is a live object. Objects found only here view arrays, or memory the walk already
    /// captured (said otherwise).
    pub fn add_tables(&mut self, tables: &[(u32, Vec<(u64, u64)>)]) {
        for (region_id, words) in tables {
            let mut values: Vec<u64> = words.iter().map(|w| w.1).collect();
            values.sort_unstable();
            values.dedup();
            let at = format!("region {region_id}");
            let objects: Option<Vec<(u64, usize)>> = values
                .iter()
                .map(|&v| self.object(v, &at).map(|i| (v, i)))
                .collect();
            let Some(objects) = objects else { continue };
            for &(offset, value) in words {
                if let Some(&(_, i)) = objects.iter().find(|(v, _)| *v == value) {
                    self.objects[i].memory_words.push((*region_id, offset));
                }
            }
        }
    }
}

/// Asks the driver about each candidate argument word (current context).
pub fn find(args: &[u8], layout: &[(u32, u32)]) -> Found {
    let mut found = Found::default();
    for (word, handle) in candidate_words(args, layout) {
        if let Some(i) = found.object(handle, &format!("argument word at offset {word}")) {
            found.objects[i].arg_words.push(word);
        }
    }
    found
}

fn kind_name(surface: bool) -> &'static str {
    if surface {
        "surface object"
    } else {
        "texture object"
    }
}

/// The capture's description, once the arrays' regions are numbered (`first_region` onward, in
/// the order of `found.arrays`).
pub fn describe(found: &Found, first_region: u32) -> Textures {
    Textures {
        arrays: found
            .arrays
            .iter()
            .enumerate()
            .map(|(i, (_, image))| ArrayImage {
                region_id: first_region + i as u32,
                ..image.clone()
            })
            .collect(),
        objects: found.objects.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_candidates_are_small_aligned_words_of_wide_parameters() {
        let mut args = vec![0u8; 40];
        args[0..8].copy_from_slice(&3u64.to_le_bytes()); // a texture-like handle
        args[8..16].copy_from_slice(&0x7f00_0000_0000u64.to_le_bytes()); // a pointer
        args[16..20].copy_from_slice(&5u32.to_le_bytes()); // an int parameter
        args[24..32].copy_from_slice(&7u64.to_le_bytes()); // inside a 16-byte struct
                                                           // (offset, size): u64, pointer, int, 16-byte struct at 24
        let layout = [(0, 8), (8, 8), (16, 4), (24, 16)];
        assert_eq!(candidate_words(&args, &layout), vec![(0, 3), (24, 7)]);
        // Zero is never a handle.
        assert_eq!(candidate_words(&[0u8; 8], &[(0, 8)]), vec![]);
    }
}
