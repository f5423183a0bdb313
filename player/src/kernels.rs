//! Loading a capture's kernels: the code object's module, the kernel in it with its
//! parameter layout checked against the capture's, its launch configuration and arguments
//! (patched where memory moved), and the module globals it reads.

use kreplay_cuda::{copy_htod, Function, KernelArgs, Module};
use kreplay_engine::plan::{CodePlan, LaunchPlan};
use kreplay_engine::relocate::Relocation;
use kreplay_engine::{CodeSource, Kernel, PlayError, RegionPlacement};
use kreplay_format::{Capture, MemoryState, Region};

/// The kernel's own parameter layout, to compare with the file's. A cubin declares it (its
/// `.nv.info` section), so no driver call is needed; otherwise (PTX through the JIT) the
/// driver is asked parameter by parameter until it says there are no more, which costs one
/// failing call (`compute-sanitizer` lists it as an API error).
fn kernel_layout(
    image: &[u8],
    kernel: &str,
    function: &Function,
    captured: &[(u32, u32)],
) -> Vec<(u32, u32)> {
    declared_layout(image, kernel, captured).unwrap_or_else(|| function.parameter_layout())
}

/// The kernel's parameter layout as the code object declares it, or None when only the
/// driver can tell (PTX, or a cubin whose declaration does not settle it).
fn declared_layout(image: &[u8], kernel: &str, captured: &[(u32, u32)]) -> Option<Vec<(u32, u32)>> {
    match kreplay_format::cubin::declared_params(image, kernel) {
        Some(d) if !d.layout.is_empty() || d.total == Some(0) => Some(d.layout),
        // Only the total is declared: the file's layout stands if it ends there.
        Some(d) if d.total == Some(captured.last().map_or(0, |&(o, s)| o + s)) => {
            Some(captured.to_vec())
        }
        _ => None,
    }
}

/// Why the kernel cannot run with the captured arguments, if its `actual` layout differs
/// from the `captured` one: a `--module` variant is told apart from the capture's own code,
/// since then it is the variant that is wrong, not the file.
fn layout_mismatch(
    kernel: &str,
    source: CodeSource,
    captured: &[(u32, u32)],
    actual: Vec<(u32, u32)>,
) -> Option<PlayError> {
    if actual == captured {
        return None;
    }
    Some(if source == CodeSource::Variant {
        PlayError::VariantMismatch {
            kernel: kernel.to_string(),
            captured: captured.to_vec(),
            variant: actual,
        }
    } else {
        PlayError::LayoutMismatch {
            kernel: kernel.to_string(),
            captured: captured.to_vec(),
            actual,
        }
    })
}

/// Writes `ABSENT_FILL` over the absent bytes of `data`, a region's bytes from offset 0.
pub(crate) fn fill_absent_bytes(data: &mut [u8], present: &[(u64, u64)]) {
    for (o, l) in kreplay_format::extents::absent_ranges(present, 0, data.len() as u64) {
        data[o as usize..(o + l) as usize].fill(kreplay_format::absent::ABSENT_FILL);
    }
}

/// The first `limit` bytes of a region's pre-dispatch state (all of it when it is smaller),
/// decoded chunk by chunk: `limit` comes from the driver, so the file cannot choose the size.
pub(crate) fn read_region_prefix(
    cap: &Capture<'_>,
    r: &Region,
    limit: u64,
) -> Result<Vec<u8>, PlayError> {
    let n = r.size.min(limit);
    let mut out = vec![0u8; n as usize];
    let mut chunk = Vec::new();
    for c in cap.chunks(r.region_id, MemoryState::Pre) {
        if c.offset >= n {
            break;
        }
        chunk.resize(c.raw_len as usize, 0);
        cap.read_chunk_into(c, &mut chunk)?;
        let take = (n - c.offset).min(c.raw_len) as usize;
        out[c.offset as usize..c.offset as usize + take].copy_from_slice(&chunk[..take]);
    }
    Ok(out)
}

/// Loads the planned code and finds the kernel, refusing a kernel whose own parameter layout
/// differs from the capture's: the driver reads the arguments by the kernel's layout, so a
/// damaged or crafted file (or a --module variant with other parameters) would make it read
/// past the argument bytes.
pub(crate) fn load_kernel(
    cap: &Capture<'_>,
    code: &CodePlan,
    launch: &LaunchPlan,
) -> Result<(Module, Function), PlayError> {
    let module = Module::load(&code.image)?;
    let function = find_kernel(&module, &code.image, &cap.dispatch, launch, code.source)?;
    Ok((module, function))
}

/// Dispatch `d`'s kernel in `module` (loaded from `image`), its parameter layout checked
/// against the capture's (see `load_kernel`).
pub(crate) fn find_kernel(
    module: &Module,
    image: &[u8],
    d: &kreplay_format::Dispatch,
    launch: &LaunchPlan,
    source: CodeSource,
) -> Result<Function, PlayError> {
    let function = module
        .function(&d.kernel_name)
        .map_err(|source| PlayError::KernelNotFound {
            kernel: d.kernel_name.clone(),
            source,
        })?;
    let layout = kernel_layout(image, &d.kernel_name, &function, &launch.layout);
    if let Some(e) = layout_mismatch(&d.kernel_name, source, &launch.layout, layout) {
        return Err(e);
    }
    Ok(function)
}

/// Sets what the launch plan needs of the function before it is launched.
pub(crate) fn prepare_function(function: &Function, launch: &LaunchPlan) -> Result<(), PlayError> {
    if let Some(bytes) = launch.max_dynamic_shared {
        function.set_max_dynamic_shared(bytes)?;
    }
    if launch.non_portable_cluster {
        function.allow_non_portable_cluster()?;
    }
    Ok(())
}

/// Writes each module global's captured bytes into the loaded module's global, sized by the
/// driver's global, never by the file's claim; returns where each landed. `only`: the
/// globals of that module id alone (a range capture holds several modules); `None`: all of
/// them (a single dispatch has one module, or a `--module` variant stands for it).
pub(crate) fn restore_globals(
    cap: &Capture<'_>,
    module: &Module,
    relocation: Option<&Relocation>,
    only: Option<u32>,
) -> Result<Vec<RegionPlacement>, PlayError> {
    let mut placed = Vec::new();
    for g in cap
        .globals
        .iter()
        .filter(|g| only.is_none_or(|id| g.module_id == id))
    {
        let Ok((ptr, size)) = module.global(&g.name) else {
            continue; // the variant module may lack it; the kernel cannot reference it then
        };
        let Some(r) = cap.region(g.region_id) else {
            continue;
        };
        let mut data = read_region_prefix(cap, r, size)?;
        // Captured by touched pages: its absent bytes get the fill, as uploaded regions' do.
        if let Some(e) = cap.extents(g.region_id) {
            fill_absent_bytes(&mut data, &e.present);
        }
        if let Some(rel) = relocation {
            rel.patch_region_window(cap, g.region_id, 0, &mut data);
        }
        // SAFETY: `data` holds at most `size` bytes (`read_region_prefix`), the size of the
        // loaded module's own global at `ptr`.
        unsafe { copy_htod(ptr, &data)? };
        placed.push(RegionPlacement {
            region_id: g.region_id,
            base: ptr,
            usable: data.len() as u64,
        });
    }
    Ok(placed)
}

/// One step's kernel: its function made ready for its launch plan, its arguments patched
/// where memory moved.
pub(crate) fn step_kernel(
    d: &kreplay_format::Dispatch,
    launch: &LaunchPlan,
    function: Function,
    relocation: Option<&Relocation>,
) -> Result<Kernel<Function>, PlayError> {
    prepare_function(&function, launch)?;
    let config = kreplay_engine::plan::launch_config(d, launch)?;
    let mut arg_bytes = d.arg_bytes.clone();
    if let Some(rel) = relocation {
        rel.patch_words(&mut arg_bytes, d.pointer_words.iter().map(|&w| w as u64));
    }
    let args = KernelArgs::new(arg_bytes, &launch.layout).map_err(|what| {
        PlayError::Format(kreplay_format::FormatError::Inconsistent { offset: 0, what })
    })?;
    Ok(Kernel {
        function,
        config,
        args,
    })
}

#[cfg(test)]
mod tests {

    // Catches: a module global's absent bytes left as the file's zeros (its other bytes
    // changed, or the fill past the region written).
    #[test]
    fn a_globals_absent_bytes_get_the_fill() {
        let mut data = vec![7u8; 10_000];
        fill_absent_bytes(&mut data, &[(4096, 4096)]);
        assert!(data[..4096]
            .iter()
            .all(|&b| b == kreplay_format::absent::ABSENT_FILL));
        assert!(data[4096..8192].iter().all(|&b| b == 7));
        assert!(data[8192..]
            .iter()
            .all(|&b| b == kreplay_format::absent::ABSENT_FILL));
        let mut whole = vec![7u8; 100];
        fill_absent_bytes(&mut whole, &[(0, 100)]);
        assert!(whole.iter().all(|&b| b == 7));
    }

    use super::*;
    use crate::testdata;

    const MIB: u64 = 1 << 20;

    // Catches: `n = limit` (a file-sized read past the region) or a take that ignores the
    // limit inside a chunk.
    #[test]
    fn a_region_prefix_is_the_first_bytes_of_its_input_up_to_the_limit() {
        let b = testdata::bytes("cuda-globals");
        let cap = testdata::parse(&b);
        let coef = cap.region(2).expect("coef");
        let whole = cap.read_region(2).expect("coef");
        assert_eq!(read_region_prefix(&cap, coef, 16).expect("16"), whole);
        assert_eq!(
            read_region_prefix(&cap, coef, 1 << 30).expect("more"),
            whole
        );
        assert_eq!(read_region_prefix(&cap, coef, 5).expect("5"), whole[..5]);
        assert_eq!(
            read_region_prefix(&cap, coef, 0).expect("0"),
            Vec::<u8>::new()
        );
        // Across chunks: saxpy's x, cut inside its second chunk.
        let saxpy = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&saxpy);
        let x = cap.read_region(0).expect("x");
        let n = 4 * MIB + 12;
        let prefix = read_region_prefix(&cap, cap.region(0).expect("x"), n).expect("prefix");
        assert_eq!(prefix, x[..n as usize]);
    }

    fn layout_of(cap: &Capture<'_>) -> Vec<(u32, u32)> {
        cap.dispatch
            .params
            .iter()
            .map(|p| (p.offset, p.size))
            .collect()
    }

    // Catches: `declared_layout` returning None for a cubin that declares its parameters
    // (the driver's failing call made for nothing) or Some for PTX (the driver never asked).
    #[test]
    fn a_cubin_declares_the_layout_and_ptx_leaves_it_to_the_driver() {
        let b = testdata::bytes("cuda-saxpy");
        let cap = testdata::parse(&b);
        let layout = layout_of(&cap);
        assert_eq!(layout, vec![(0, 4), (4, 4), (8, 8), (16, 8)]);
        let image = &cap.modules[0].image;
        let kernel = &cap.dispatch.kernel_name;
        assert_eq!(
            declared_layout(image, kernel, &layout),
            Some(layout.clone())
        );
        // The cubin's declaration wins over the file's claim.
        let claimed = vec![(0, 8)];
        assert_eq!(declared_layout(image, kernel, &claimed), Some(layout));
        // A kernel the cubin does not hold: only the driver can tell.
        assert_eq!(declared_layout(image, "no_such_kernel", &claimed), None);
        // graph-node's module 1 is PTX.
        let g = testdata::bytes("graph-node");
        let cap = testdata::parse(&g);
        let ptx = cap.modules.iter().find(|m| m.module_id == 1).expect("ptx");
        let layout = layout_of(&cap);
        assert_eq!(
            declared_layout(&ptx.image, &cap.dispatch.kernel_name, &layout),
            None
        );
    }

    // Catches: the variant test inverted (a bad --module blamed on the file, or the file on
    // the variant) or a mismatch let through.
    #[test]
    fn a_layout_mismatch_blames_the_variant_or_the_file() {
        let captured = [(0, 4), (8, 8)];
        let other = vec![(0, 8)];
        assert!(layout_mismatch("k", CodeSource::Cubin, &captured, captured.to_vec()).is_none());
        assert!(layout_mismatch("k", CodeSource::Variant, &captured, captured.to_vec()).is_none());
        match layout_mismatch("k", CodeSource::Variant, &captured, other.clone()) {
            Some(PlayError::VariantMismatch {
                kernel,
                captured: c,
                variant,
            }) => assert_eq!(
                (kernel.as_str(), c, variant),
                ("k", captured.to_vec(), other.clone())
            ),
            e => panic!("{e:?}"),
        }
        for source in [CodeSource::Cubin, CodeSource::PtxJit] {
            match layout_mismatch("k", source, &captured, other.clone()) {
                Some(PlayError::LayoutMismatch { actual, .. }) => assert_eq!(actual, other),
                e => panic!("{source:?}: {e:?}"),
            }
        }
    }
}
