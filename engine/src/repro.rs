//! The standalone reproducer (`kreplay extract --repro`): the replay plan written out as one
//! C++ program on the CUDA driver API, so that anyone with nvcc and a GPU replays, times and
//! verifies the dispatch without kreplay. The program is fixed (`repro.cpp`); what a capture
//! decides (geometry, attributes, argument bytes, placement, pointer words, region files) is
//! generated into its tables here, from the same plan the player uses, without a GPU.

use std::fmt::Write as _;

use kreplay_format::{
    ptx, Capture, MemoryKind, ModuleImage, ModuleKind, Reference, Region, RegionRole,
};

use crate::options::Placement;
use crate::plan::{LaunchPlan, MemoryPlan, PlanError};

const PROGRAM: &str = include_str!("repro.cpp");

const MAKEFILE: &str =
    "# Builds the reproducer written by `kreplay extract --repro`: nvcc and a CUDA driver.
NVCC ?= nvcc

repro: repro.cpp
\t$(NVCC) -O2 -std=c++17 -o repro repro.cpp -lcuda -lpthread

run: repro
\t./repro

clean:
\trm -f repro

.PHONY: run clean
";

/// Why a capture has no reproducer.
#[derive(Debug, thiserror::Error)]
pub enum ReproError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("CUDA array {0} has a format or size the reproducer cannot lay out: replay it with `kreplay play`")]
    Array(u32),
    #[error(
        "a region file name or global name holds a character the C++ source cannot carry: {0:?}"
    )]
    Name(String),
}

/// What goes into a file of the reproducer's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    Bytes(Vec<u8>),
    /// A region's bytes before the dispatch (`post: false`) or after it (`post: true`: the
    /// recorded output where the kernel wrote, the input elsewhere).
    Region {
        region_id: u32,
        post: bool,
    },
}

/// The files of a reproducer, by name.
#[derive(Debug, Clone)]
pub struct Reproducer {
    pub files: Vec<(String, Content)>,
}

fn c_string(s: &str) -> Result<String, ReproError> {
    if s.chars()
        .any(|c| c.is_control() || c == '"' || c == '\\' || c == '?')
    {
        return Err(ReproError::Name(s.to_string()));
    }
    Ok(format!("\"{s}\""))
}

fn bytes_list(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 5);
    for (i, v) in b.iter().enumerate() {
        if i > 0 {
            s.push(',');
            if i % 24 == 0 {
                s.push_str("\n   ");
            }
        }
        let _ = write!(s, "{v:#04x}");
    }
    s
}

fn ranges(v: &[(u64, u64)]) -> impl Iterator<Item = String> + '_ {
    v.iter().map(|(b, s)| format!("{{{b:#x}ull, {s:#x}ull}}"))
}

/// The generated part of `repro.cpp`: one `static const` definition per line or table.
#[derive(Default)]
struct Tables(String);

impl Tables {
    /// `static const DECL = VALUE;`
    fn def(&mut self, decl: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "static const {decl} = {value};");
    }

    /// `static const std::vector<TYPE> NAME = {ITEM, ...};`, one item per line.
    fn list(&mut self, ty: &str, name: &str, items: impl IntoIterator<Item = String>) {
        let items: Vec<String> = items.into_iter().collect();
        let _ = writeln!(
            self.0,
            "static const std::vector<{ty}> {name} = {{{}}};",
            items.join(",\n    ")
        );
    }
}

impl Reproducer {
    /// The reproducer of a capture: the program with its tables, the Makefile, a README, the
    /// code objects and the region files.
    pub fn of(cap: &Capture<'_>) -> Result<Reproducer, ReproError> {
        let d = &cap.dispatch;
        let launch = LaunchPlan::new(cap)?;
        let memory = MemoryPlan::new(cap, Placement::Original);
        let module = cap
            .module(d.module_id)
            .ok_or(PlanError::NoModule(d.module_id))?;
        let mut files = Vec::new();
        let code = code_files(cap, module, &mut files);
        let reference = cap.reference();
        let mut t = Tables::default();
        launch_tables(cap, &launch, &memory, &code, reference, &mut t)?;
        memory_tables(cap, &memory, reference, &mut files, &mut t)?;
        textures(cap, &mut t)?;
        files.push((
            "repro.cpp".into(),
            Content::Text(PROGRAM.replace("@CAPTURE@", &t.0)),
        ));
        files.push(("Makefile".into(), Content::Text(MAKEFILE.into())));
        files.push(("README.txt".into(), Content::Text(readme(cap, reference))));
        Ok(Reproducer { files })
    }
}

/// The code object files of a reproducer and what the program calls them.
struct CodeFiles {
    /// The module that defines the kernel.
    code_file: String,
    code_is_text: bool,
    /// A PTX module that also defines the kernel, for a GPU the cubin does not run on.
    ptx_file: Option<String>,
}

/// Adds the kernel's module, and a PTX module defining the same entry if there is one.
fn code_files(
    cap: &Capture<'_>,
    module: &ModuleImage,
    files: &mut Vec<(String, Content)>,
) -> CodeFiles {
    let ext = |k: ModuleKind| match k {
        ModuleKind::Cubin => "cubin",
        ModuleKind::Ptx => "ptx",
        ModuleKind::Fatbin => "fatbin",
    };
    let code_file = format!("module-{}.{}", module.module_id, ext(module.kind));
    files.push((code_file.clone(), Content::Bytes(module.image.clone())));
    let ptx_file = cap
        .modules
        .iter()
        .find(|p| {
            p.kind == ModuleKind::Ptx
                && p.module_id != module.module_id
                && ptx::defines_entry(&p.image, &cap.dispatch.kernel_name)
        })
        .map(|p| {
            let name = format!("module-{}.ptx", p.module_id);
            files.push((name.clone(), Content::Bytes(p.image.clone())));
            name
        });
    CodeFiles {
        code_file,
        code_is_text: module.kind == ModuleKind::Ptx,
        ptx_file,
    }
}

/// The kernel, its launch configuration and arguments (and why memory cannot move), as tables.
fn launch_tables(
    cap: &Capture<'_>,
    launch: &LaunchPlan,
    memory: &MemoryPlan,
    code: &CodeFiles,
    reference: Reference,
    t: &mut Tables,
) -> Result<(), ReproError> {
    let d = &cap.dispatch;
    let recorded = cap
        .device
        .as_ref()
        .map_or("an unknown GPU".to_string(), |v| {
            format!("{} (sm_{}{})", v.name, v.cc_major, v.cc_minor)
        });
    let attrs = launch.attributes.iter().map(|a| {
        format!(
            "{{{}, {}, {{{}}}}}",
            a.id,
            a.needs_event,
            bytes_list(&a.value)
        )
    });
    t.def("char *KERNEL", c_string(&d.kernel_name)?);
    t.def(
        "char *RECORDED_DEVICE",
        c_string(&recorded).unwrap_or("\"?\"".into()),
    );
    t.def("char *CODE_FILE", format!("\"{}\"", code.code_file));
    t.def("bool CODE_IS_TEXT", code.code_is_text);
    t.def(
        "char *PTX_FILE",
        format!("\"{}\"", code.ptx_file.as_deref().unwrap_or("")),
    );
    t.def(
        "unsigned GRID[3]",
        format!("{{{}, {}, {}}}", d.grid[0], d.grid[1], d.grid[2]),
    );
    t.def(
        "unsigned BLOCK[3]",
        format!("{{{}, {}, {}}}", d.block[0], d.block[1], d.block[2]),
    );
    t.def("unsigned DYNAMIC_SHARED", d.dynamic_shared_bytes);
    t.def(
        "unsigned MAX_DYNAMIC_SHARED",
        launch.max_dynamic_shared.unwrap_or(0),
    );
    t.def("bool NON_PORTABLE_CLUSTER", launch.non_portable_cluster);
    t.def(
        "unsigned long long ORIGINAL_NS",
        format!("{}ull", d.original_duration_ns.unwrap_or(0)),
    );
    t.def("bool REFERENCE", reference == Reference::Recorded);
    t.def("char *REFERENCE_WHY", format!("\"{}\"", reference.name()));
    let blocker = memory.relocation_blocker.as_deref().unwrap_or("");
    // The only blocker today names a TMA tensor map; a name the source cannot carry says so.
    t.def(
        "char *RELOCATION_BLOCKER",
        c_string(blocker).unwrap_or("\"a TMA tensor map\"".into()),
    );
    t.list("unsigned char", "ARGS", [bytes_list(&d.arg_bytes)]);
    t.list(
        "Param",
        "PARAMS",
        launch.layout.iter().map(|(o, s)| format!("{{{o}, {s}}}")),
    );
    t.list(
        "unsigned",
        "POINTER_WORDS",
        d.pointer_words.iter().map(|w| w.to_string()),
    );
    t.list("Attribute", "ATTRIBUTES", attrs);
    Ok(())
}

/// The placement ranges of memory and every region (with its files), as tables.
fn memory_tables(
    cap: &Capture<'_>,
    memory: &MemoryPlan,
    reference: Reference,
    files: &mut Vec<(String, Content)>,
    t: &mut Tables,
) -> Result<(), ReproError> {
    t.list("Range", "DEVICE_RANGES", ranges(&memory.fixed_ranges));
    t.list("Range", "DEVICE_GROUPS", ranges(&memory.move_groups));
    t.list("Range", "HOST_GROUPS", ranges(&memory.host_move_groups));
    let mut regions = Vec::new();
    for r in &cap.regions {
        if let Some(row) = region_row(cap, r, reference, files)? {
            regions.push(row);
        }
    }
    t.list("Region", "REGIONS", regions);
    t.list(
        "Slot",
        "SLOTS",
        cap.pointer_slots
            .iter()
            .map(|(r, o)| format!("{{{r}, {o:#x}ull}}")),
    );
    t.list("Absent", "ABSENT", absent_rows(cap));
    Ok(())
}

/// The ABSENT table: every absent range of every region captured by touched pages, in
/// region order (none for a capture of whole regions).
fn absent_rows(cap: &Capture<'_>) -> Vec<String> {
    let mut rows = Vec::new();
    for r in &cap.regions {
        let Some(e) = cap.extents(r.region_id) else {
            continue;
        };
        for (o, l) in kreplay_format::extents::absent_ranges(&e.present, 0, r.size) {
            rows.push(format!("{{{}, {o:#x}ull, {l:#x}ull}}", r.region_id));
        }
    }
    rows
}

/// One region's row of the REGIONS table, after adding its pre-state file (and post-state
/// file, when the capture's reference is recorded); `None` for a region the player skips too.
fn region_row(
    cap: &Capture<'_>,
    r: &Region,
    reference: Reference,
    files: &mut Vec<(String, Content)>,
) -> Result<Option<String>, ReproError> {
    let (kind, global) = if r.role == RegionRole::Global {
        match cap.globals.iter().find(|g| g.region_id == r.region_id) {
            Some(g) => ("MODULE_GLOBAL", c_string(&g.name)?),
            // A global region no variable names cannot be placed.
            None => return Ok(None),
        }
    } else if r.kind == MemoryKind::CudaArray {
        ("CUDA_ARRAY", "nullptr".to_string())
    } else if r.kind == MemoryKind::HostMapped {
        ("HOST_MAPPED", "nullptr".to_string())
    } else {
        ("DEVICE", "nullptr".to_string())
    };
    let pre = format!("region-{}.bin", r.region_id);
    files.push((
        pre.clone(),
        Content::Region {
            region_id: r.region_id,
            post: false,
        },
    ));
    let post = if cap.is_written(r.region_id) {
        let name = format!("region-{}.post.bin", r.region_id);
        if reference == Reference::Recorded {
            files.push((
                name.clone(),
                Content::Region {
                    region_id: r.region_id,
                    post: true,
                },
            ));
        }
        format!("\"{name}\"")
    } else {
        "nullptr".into()
    };
    Ok(Some(format!(
        "{{{}, {:#x}ull, {:#x}ull, {kind}, {global}, \"{pre}\", {post}}}",
        r.region_id, r.address, r.size
    )))
}

/// The arrays (with the packed layout of each level in their region) and the texture and
/// surface objects, as tables.
fn textures(cap: &Capture<'_>, t: &mut Tables) -> Result<(), ReproError> {
    let mut arrays = Vec::new();
    let mut levels = Vec::new();
    for (i, a) in cap.textures.arrays.iter().enumerate() {
        let e = a.element_bytes().ok_or(ReproError::Array(a.region_id))?;
        arrays.push(format!(
            "{{{}, {}ull, {}ull, {}ull, {:#x}, {}, {:#x}, {}}}",
            a.region_id, a.width, a.height, a.depth, a.format, a.channels, a.flags, a.levels
        ));
        let mut offset = 0u64;
        for (level, (w, h, d)) in a.level_extents().into_iter().enumerate() {
            let bytes = w
                .checked_mul(e)
                .and_then(|x| x.checked_mul(h))
                .and_then(|x| x.checked_mul(d))
                .ok_or(ReproError::Array(a.region_id))?;
            levels.push(format!(
                "{{{i}, {level}, {}ull, {h}ull, {d}ull, {offset}ull}}",
                w * e
            ));
            offset += bytes;
        }
        let size = cap.region(a.region_id).map_or(0, |r| r.size);
        if offset > size {
            return Err(ReproError::Array(a.region_id));
        }
    }
    let mut objects = Vec::new();
    for o in &cap.textures.objects {
        use kreplay_format::TextureResource as R;
        let (kind, array, address, format, channels, size, width, height, pitch) = match o.resource
        {
            R::Array { index } => (0, index as i64, 0, 0, 0, 0, 0, 0, 0),
            R::Mipmapped { index } => (1, index as i64, 0, 0, 0, 0, 0, 0, 0),
            R::Linear {
                address,
                format,
                channels,
                size,
            } => (2, -1, address, format, channels, size, 0, 0, 0),
            R::Pitch2D {
                address,
                format,
                channels,
                width,
                height,
                pitch,
            } => (3, -1, address, format, channels, 0, width, height, pitch),
        };
        let s = o.sampling.clone().unwrap_or_default();
        let v = o.view.clone();
        let words: Vec<String> = o.arg_words.iter().map(|w| w.to_string()).collect();
        let memory: Vec<String> = o
            .memory_words
            .iter()
            .map(|(r, off)| format!("{{{r}, {off:#x}ull}}"))
            .collect();
        objects.push(format!(
            "{{{}, {kind}, {array}, {address:#x}ull, {format:#x}, {channels}, {size}ull, {width}ull, {height}ull, {pitch}ull,\n     \
             {{{}, {}, {}}}, {}, {:#x}, {}, {}, {:#x}, {:#x}, {:#x}, {{{:#x}, {:#x}, {:#x}, {:#x}}},\n     \
             {}, {:#x}, {}ull, {}ull, {}ull, {}, {}, {}, {},\n     {{{}}}, {{{}}}}}",
            o.surface,
            s.address_mode[0],
            s.address_mode[1],
            s.address_mode[2],
            s.filter_mode,
            s.flags,
            s.max_anisotropy,
            s.mipmap_filter_mode,
            s.mipmap_level_bias,
            s.min_mipmap_level_clamp,
            s.max_mipmap_level_clamp,
            s.border_color[0],
            s.border_color[1],
            s.border_color[2],
            s.border_color[3],
            v.is_some(),
            v.as_ref().map_or(0, |v| v.format),
            v.as_ref().map_or(0, |v| v.width),
            v.as_ref().map_or(0, |v| v.height),
            v.as_ref().map_or(0, |v| v.depth),
            v.as_ref().map_or(0, |v| v.first_mipmap_level),
            v.as_ref().map_or(0, |v| v.last_mipmap_level),
            v.as_ref().map_or(0, |v| v.first_layer),
            v.as_ref().map_or(0, |v| v.last_layer),
            words.join(", "),
            memory.join(", ")
        ));
    }
    t.list("ArrayDesc", "ARRAYS", arrays);
    t.list("LevelCopy", "LEVELS", levels);
    t.list("TexObject", "OBJECTS", objects);
    Ok(())
}

fn readme(cap: &Capture<'_>, reference: Reference) -> String {
    let d = &cap.dispatch;
    let mut s = format!(
        "Standalone reproducer of one dispatch of {}, written by kreplay extract --repro.\n\n\
         make            # nvcc -O2 -std=c++17 -o repro repro.cpp -lcuda -lpthread\n\
         ./repro         # 8 timed passes, memory restored between them, output verified\n\
         ./repro --passes 100 --relocate --ptx --device 1\n\n\
         Grid {:?}, block {:?}, {} bytes of dynamic shared memory, {} argument bytes, {} memory region(s).\n\
         repro.cpp holds the launch (its first part is generated from the capture); module-*.cubin/ptx\n\
         the code; region-N.bin each buffer's bytes before the dispatch",
        d.kernel_name,
        d.grid,
        d.block,
        d.dynamic_shared_bytes,
        d.arg_bytes.len(),
        cap.regions.len()
    );
    if reference == Reference::Recorded {
        s.push_str(", region-N.post.bin after it (the reference output).\n");
    } else {
        s.push_str(&format!(
            ".\nThe capture holds no reference output ({}): the reproducer checks that passes agree.\n",
            reference.name()
        ));
    }
    s.push_str(
        "The buffers are mapped at their original device addresses when this process can have them;\n\
         otherwise (or with --relocate) they move and the pointers the capture knows of are rewritten.\n\
         Exit status: 0 matched, 1 output differs from the recorded one, 2 could not replay.\n",
    );
    if cap.has_extents() {
        s.push_str(
            "Captured by touched pages (record --memory touched): the region files hold zeros where the\n\
             capture holds nothing; the reproducer writes 0xFF there (the ABSENT table), as kreplay play does.\n",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::capture;

    fn text<'a>(r: &'a Reproducer, name: &str) -> &'a str {
        match r.files.iter().find(|f| f.0 == name) {
            Some((_, Content::Text(t))) => t,
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn names_the_source_cannot_carry_are_refused() {
        for bad in ["a\"b", "a\\b", "a\nb", "a??=b"] {
            assert!(matches!(c_string(bad), Err(ReproError::Name(_))), "{bad:?}");
        }
        assert_eq!(c_string("_Z5saxpyifPKfPf").unwrap(), "\"_Z5saxpyifPKfPf\"");
        capture("cuda-saxpy", |cap| {
            let mut cap = cap.clone();
            cap.dispatch.kernel_name = "evil\"); system(\"rm".into();
            assert!(matches!(Reproducer::of(&cap), Err(ReproError::Name(_))));
        });
    }

    #[test]
    fn the_program_carries_the_plan() {
        capture("cuda-globals", |cap| {
            let r = Reproducer::of(cap).unwrap();
            let cpp = text(&r, "repro.cpp");
            assert!(!cpp.contains("@CAPTURE@"));
            // Every region has a file, globals by name, the written one its output.
            for reg in &cap.regions {
                assert!(r.files.iter().any(|f| f.1
                    == Content::Region {
                        region_id: reg.region_id,
                        post: false
                    }));
                assert!(cpp.contains(&format!("{{{}, {:#x}ull,", reg.region_id, reg.address)));
            }
            for g in &cap.globals {
                assert!(
                    cpp.contains(&format!("MODULE_GLOBAL, \"{}\"", g.name)),
                    "{}",
                    g.name
                );
            }
            let outputs = r
                .files
                .iter()
                .filter(|f| matches!(f.1, Content::Region { post: true, .. }))
                .count();
            let written = cap
                .regions
                .iter()
                .filter(|x| cap.is_written(x.region_id))
                .count();
            assert_eq!(outputs, written);
            assert!(cpp.contains("static const bool REFERENCE = true;"));
            assert!(text(&r, "Makefile").contains("-lcuda"));
        });
        // The cooperative launch becomes an attribute (id 2) of cuLaunchKernelEx.
        capture("cuda-coop", |cap| {
            let r = Reproducer::of(cap).unwrap();
            assert!(text(&r, "repro.cpp").contains("ATTRIBUTES = {{2, false, {0x01,"));
        });
    }
}
