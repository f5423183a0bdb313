//! `pack` on the real captures in testdata: a repack keeps every byte, `--drop-post` keeps
//! the write set without its bytes, `--redact` replaces the data but not what the replay
//! needs (pointer and handle words, module globals, zero chunks), the same way every time.

use std::io::Cursor;

use kreplay_format::*;

fn load(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/../testdata/captures/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn packed(data: &[u8], opts: PackOptions) -> (Vec<u8>, PackReport) {
    let cap = Capture::parse(data).unwrap();
    let (out, report) = pack(&cap, Cursor::new(Vec::new()), [7; 16], opts).unwrap();
    let bytes = out.into_inner();
    verify(&bytes).expect("a packed capture verifies");
    (bytes, report)
}

const PLAIN: PackOptions = PackOptions {
    level: 3,
    drop_post: false,
    redact: false,
    param_types: Vec::new(),
    step_param_types: Vec::new(),
};

fn state(cap: &Capture<'_>, region: u32, s: MemoryState) -> Vec<(u64, Vec<u8>)> {
    cap.chunks(region, s)
        .map(|c| {
            let mut b = vec![0; c.raw_len as usize];
            cap.read_chunk_into(c, &mut b).unwrap();
            (c.offset, b)
        })
        .collect()
}

const ALL: [&str; 10] = [
    "cuda-saxpy",
    "cuda-globals",
    "cuda-pointers",
    "cuda-cluster",
    "cuda-coop",
    "driver-extra",
    "graph-node",
    "host-mapped",
    "surface",
    "texture-table",
];

#[test]
fn a_repack_keeps_everything() {
    for name in ALL {
        let data = load(name);
        let (bytes, report) = packed(&data, PLAIN);
        let (a, b) = (
            Capture::parse(&data).unwrap(),
            Capture::parse(&bytes).unwrap(),
        );
        assert_eq!(report.reference, Some(Reference::Recorded), "{name}");
        assert_eq!(b.reference(), Reference::Recorded, "{name}");
        assert_eq!(a.dispatch, b.dispatch, "{name}");
        assert_eq!(a.regions, b.regions, "{name}");
        assert_eq!(a.modules, b.modules, "{name}");
        assert_eq!(a.globals, b.globals, "{name}");
        assert_eq!(a.pointer_slots, b.pointer_slots, "{name}");
        assert_eq!(a.textures, b.textures, "{name}");
        assert_eq!(a.info, b.info, "{name}");
        assert_eq!(a.graph, b.graph, "{name}");
        assert_eq!(a.annotations, b.annotations, "{name}");
        for r in &a.regions {
            for s in [MemoryState::Pre, MemoryState::Post] {
                assert_eq!(
                    state(&a, r.region_id, s),
                    state(&b, r.region_id, s),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn drop_post_keeps_the_write_set_not_its_bytes() {
    let data = load("cuda-saxpy");
    let (bytes, report) = packed(
        &data,
        PackOptions {
            drop_post: true,
            ..PLAIN
        },
    );
    let (a, b) = (
        Capture::parse(&data).unwrap(),
        Capture::parse(&bytes).unwrap(),
    );
    assert_eq!(b.reference(), Reference::Dropped);
    assert!(report.dropped_post_bytes > 0);
    let mut written = 0;
    for r in &a.regions {
        let before: Vec<_> = a.chunks(r.region_id, MemoryState::Post).collect();
        let after: Vec<_> = b.chunks(r.region_id, MemoryState::Post).collect();
        assert_eq!(before.len(), after.len());
        for (x, y) in before.iter().zip(&after) {
            assert_eq!((x.offset, x.raw_len), (y.offset, y.raw_len));
            assert_eq!(y.encoding, ChunkEncoding::Zero);
            written += 1;
        }
        assert_eq!(
            state(&a, r.region_id, MemoryState::Pre),
            state(&b, r.region_id, MemoryState::Pre)
        );
    }
    assert!(written > 0, "saxpy writes y");
    assert!(
        bytes.len() < data.len(),
        "{} !< {}",
        bytes.len(),
        data.len()
    );
}

/// The parameter types of the testdata kernels, as `kreplay pack` reads them from the
/// demangled signatures (this crate has no demangler).
fn param_types(name: &str) -> Vec<ParamType> {
    use Element::*;
    use ParamShape::*;
    let t = |name: &str, shape| ParamType {
        name: name.into(),
        shape,
    };
    let cptr = || t("float const*", Pointer(F32));
    let ptr = || t("float*", Pointer(F32));
    let int = || t("int", Scalar(Int(4)));
    match name {
        "cuda-saxpy" => vec![int(), t("float", Scalar(F32)), cptr(), ptr()],
        "cuda-cluster" | "graph-node" => vec![cptr(), ptr(), int()],
        "cuda-coop" => vec![ptr(), ptr(), int()],
        "cuda-globals" => vec![int(), cptr(), ptr()],
        "cuda-pointers" => vec![t("Batch", Other)],
        "host-mapped" => vec![cptr(), ptr(), ptr(), int()],
        "surface" => vec![
            t("unsigned long long", Scalar(Int(8))),
            t("unsigned long long", Scalar(Int(8))),
            int(),
            int(),
        ],
        "texture-table" => vec![
            t("unsigned long long const*", Pointer(Int(8))),
            int(),
            ptr(),
            int(),
            int(),
        ],
        _ => Vec::new(), // driver-extra: extern "C", no signature
    }
}

fn redact_opts(name: &str) -> PackOptions {
    PackOptions {
        redact: true,
        param_types: param_types(name),
        ..PLAIN
    }
}

/// What redaction writes in `r` (a pure function of region, offset and element type).
struct Expected {
    segments: Vec<(u64, Vec<u8>)>,
}

impl Expected {
    fn new(cap: &Capture<'_>, types: &[ParamType], r: &Region) -> Expected {
        let segments = pack::region_segments(cap, types, r)
            .into_iter()
            .map(|s| (s.start, pack::redacted_period(r.region_id, s.element)))
            .collect();
        Expected { segments }
    }

    fn bytes(&self, at: u64, len: usize) -> Vec<u8> {
        (at..at + len as u64)
            .map(|o| {
                let (start, period) = self
                    .segments
                    .iter()
                    .rev()
                    .find(|s| s.0 <= o)
                    .expect("a first segment at 0");
                period[((o - start) % pack::REDACTION_PERIOD) as usize]
            })
            .collect()
    }
}

/// Redacts `name` and checks every byte of every region against the rules.
fn check_redaction(name: &str) -> PackReport {
    let data = load(name);
    let opts = redact_opts(name);
    let (bytes, report) = packed(&data, opts.clone());
    let (again, _) = packed(&data, opts.clone());
    assert_eq!(bytes, again, "{name}: redaction is deterministic");
    let (a, b) = (
        Capture::parse(&data).unwrap(),
        Capture::parse(&bytes).unwrap(),
    );
    assert_eq!(b.reference(), Reference::Redacted, "{name}");
    assert_eq!(a.dispatch.pointer_words, b.dispatch.pointer_words, "{name}");
    for &w in &a.dispatch.pointer_words {
        let w = w as usize..w as usize + 8;
        assert_eq!(
            a.dispatch.arg_bytes[w.clone()],
            b.dispatch.arg_bytes[w],
            "{name}: pointer kept"
        );
    }
    assert_eq!(a.pointer_slots, b.pointer_slots);
    assert_eq!(a.textures, b.textures);
    let mut kept: Vec<(u32, u64)> = a.pointer_slots.clone();
    for o in &a.textures.objects {
        kept.extend(o.memory_words.iter().copied());
    }
    let mut changed = 0u64;
    for r in &a.regions {
        let expected = Expected::new(&a, &opts.param_types, r);
        let before = state(&a, r.region_id, MemoryState::Pre);
        let after = state(&b, r.region_id, MemoryState::Pre);
        assert_eq!(before.len(), after.len());
        if r.role == RegionRole::Global {
            assert_eq!(before, after, "{name}: global region {} kept", r.region_id);
            continue;
        }
        for ((off, x), (_, y)) in before.iter().zip(&after) {
            if x.iter().all(|&v| v == 0) {
                assert_eq!(x, y, "{name}: zero chunk kept");
                continue;
            }
            for (i, (wx, wy)) in x.chunks(8).zip(y.chunks(8)).enumerate() {
                let at = off + 8 * i as u64;
                if kept.contains(&(r.region_id, at)) {
                    assert_eq!(
                        wx, wy,
                        "{name}: word {at:#x} of region {} kept",
                        r.region_id
                    );
                } else {
                    assert_eq!(wy, expected.bytes(at, wy.len()));
                    changed += (wx != wy) as u64;
                }
            }
        }
        for c in b.chunks(r.region_id, MemoryState::Post) {
            assert_eq!(c.encoding, ChunkEncoding::Zero, "{name}: no output kept");
        }
    }
    assert!(changed > 0, "{name}: some data replaced");
    report
}

#[test]
fn redaction_keeps_pointers_handles_globals_and_zeros() {
    let r = check_redaction("cuda-pointers");
    assert!(r.kept_bytes > 0, "cuda-pointers holds pointer slots: {r:?}");
    let r = check_redaction("texture-table");
    assert!(r.kept_bytes >= 24, "the table's three handles: {r:?}");
    let r = check_redaction("cuda-globals");
    assert!(r.kept_regions > 0, "{r:?}");
    for name in [
        "cuda-saxpy",
        "host-mapped",
        "surface",
        "graph-node",
        "driver-extra",
    ] {
        check_redaction(name);
    }
}

/// Every stretch of `needle` in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Every metadata field of a capture, as bytes: the header's UUID and each event's metadata as
/// the codec encodes it (zstd-compressed metadata decoded); module images apart (code is kept).
/// Memory is checked word by word against what redaction generates; the redaction listing
/// (kreplay's own words) apart.
fn every_field(cap: &Capture<'_>) -> Vec<u8> {
    let mut all = Vec::new();
    let mut add = |v: Vec<u8>| all.extend_from_slice(&v);
    let enc = |v: &dyn erased::Enc| v.bytes();
    add(cap.header.uuid.to_vec());
    add(enc(&cap.info));
    add(enc(&cap.device));
    add(enc(&cap.dispatch));
    add(enc(&cap.regions));
    add(enc(&cap.globals));
    add(enc(&cap.annotations));
    add(enc(&cap.timing));
    add(enc(&cap.graph));
    add(enc(&cap.pointer_slots));
    add(enc(&cap.textures));
    all
}

mod erased {
    pub trait Enc {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Enc for T {
        fn bytes(&self) -> Vec<u8> {
            kreplay_format::codec::encode(self, "test").expect("encode")
        }
    }
}

#[test]
fn a_redacted_capture_holds_nothing_of_the_application() {
    for name in ALL {
        let data = load(name);
        let (bytes, report) = packed(&data, redact_opts(name));
        let (a, b) = (
            Capture::parse(&data).unwrap(),
            Capture::parse(&bytes).unwrap(),
        );
        let all = every_field(&b);
        // The raw file without the listing, whose words ("pointers", "kept whole") are
        // kreplay's and checked on their own below.
        let listing = codec::encode(&b.redaction, "test").expect("encode");
        let mut raw = bytes.clone();
        if let Some(at) = raw
            .windows(listing.len() - 1)
            .position(|w| w == &listing[1..])
        {
            raw[at..at + listing.len() - 1].fill(0);
        }
        let raw_and_fields = [&raw[..], &all[..]];
        let info = a.info.as_ref().expect("the recorder wrote capture info");
        let mut secrets: Vec<(String, Vec<u8>)> = vec![
            ("host".into(), info.host.as_bytes().to_vec()),
            ("time".into(), info.time_unix_ns.to_le_bytes().to_vec()),
            // The recorder's capture UUID holds the time and pid.
            ("capture uuid".into(), a.header.uuid[..8].to_vec()),
            (
                "kernel filter".into(),
                info.kernel_filter.as_bytes().to_vec(),
            ),
        ];
        for arg in &info.command_line {
            secrets.push((format!("command line {arg:?}"), arg.as_bytes().to_vec()));
        }
        if let Some(d) = &a.device {
            secrets.push(("device uuid".into(), d.uuid.to_vec()));
        }
        if let Some(g) = &a.graph {
            secrets.push(("graph handle".into(), g.graph_exec.to_le_bytes().to_vec()));
        }
        // Secrets shorter than 4 bytes (host "vm", an argument "3") would match by chance:
        // their fields are checked below.
        // Nor those the code holds (the kernel's name, strings in the cubin), kept by design.
        let code = |s: &[u8]| {
            contains(a.dispatch.kernel_name.as_bytes(), s)
                || a.modules.iter().any(|m| contains(&m.image, s))
        };
        for (what, s) in secrets.iter().filter(|s| s.1.len() >= 4 && !code(&s.1)) {
            for hay in raw_and_fields {
                assert!(
                    !contains(hay, s),
                    "{name}: the redacted capture holds the {what}"
                );
            }
        }
        // The listing holds none of the environment: host, time, paths, UUIDs.
        let notes: Vec<u8> = b
            .redaction
            .iter()
            .flat_map(|r| &r.fields)
            .flat_map(|f| [f.field.as_bytes(), f.note.as_bytes()].concat())
            .collect();
        for (what, s) in secrets
            .iter()
            .filter(|s| s.1.len() >= 4 && (!s.0.starts_with("command line") || s.1.contains(&b'/')))
        {
            assert!(!contains(&notes, s), "{name}: the listing holds the {what}");
        }
        let i = b.info.as_ref().expect("capture info");
        assert_eq!(
            (
                i.host.as_str(),
                i.pid,
                i.rank,
                i.command_line.len(),
                i.time_unix_ns
            ),
            ("", 0, None, 0, 0),
            "{name}"
        );
        assert_eq!(
            b.device.as_ref().map(|d| (d.uuid, d.ordinal)),
            Some(([0; 16], 0))
        );
        // Launch attributes: only the value's own bytes (cluster dimension: 12).
        for (x, y) in a.dispatch.attributes.iter().zip(&b.dispatch.attributes) {
            assert_eq!(
                x.id, 4,
                "{name}: the testdata holds cluster dimensions only"
            );
            assert_eq!(x.value[..12], y.value[..12], "{name}");
            assert!(
                y.value[12..].iter().all(|&v| v == 0),
                "{name}: union padding zeroed"
            );
        }
        // Arguments: floats replaced, the rest kept.
        let types = param_types(name);
        for (k, (p, t)) in a.dispatch.params.iter().zip(&types).enumerate() {
            let at = p.offset as usize..(p.offset + p.size) as usize;
            let (x, y) = (&a.dispatch.arg_bytes[at.clone()], &b.dispatch.arg_bytes[at]);
            match t.shape {
                ParamShape::Scalar(Element::F32) => {
                    assert_ne!(x, y, "{name}: argument {k} (float) replaced");
                    let v = f32::from_le_bytes(y.try_into().unwrap());
                    assert!(v.is_finite() && v.abs() < 1.0, "{name}: {v}");
                }
                _ => assert_eq!(x, y, "{name}: argument {k} kept"),
            }
        }
        // Memory: finite values of the element type, whatever the original held.
        let kept: Vec<(u32, u64)> = a
            .pointer_slots
            .iter()
            .copied()
            .chain(
                a.textures
                    .objects
                    .iter()
                    .flat_map(|o| o.memory_words.clone()),
            )
            .collect();
        for r in b.regions.iter().filter(|r| r.role != RegionRole::Global) {
            let segs = pack::region_segments(&a, &types, r);
            let expected = Expected::new(&a, &types, r);
            let original = state(&a, r.region_id, MemoryState::Pre);
            for ((off, chunk), (_, was)) in state(&b, r.region_id, MemoryState::Pre)
                .into_iter()
                .zip(original)
            {
                // A zero chunk stays zero (workspaces, counters); any other holds only what
                // redaction generates, nothing of the original's bytes.
                let zero = was.iter().all(|&v| v == 0);
                for (i, w) in chunk.chunks_exact(8).enumerate() {
                    let at = off + 8 * i as u64;
                    if kept.contains(&(r.region_id, at)) {
                        continue;
                    }
                    if zero {
                        assert!(w.iter().all(|&v| v == 0), "{name}: zero chunk kept");
                        continue;
                    } else {
                        assert_eq!(
                            w,
                            expected.bytes(at, 8),
                            "{name}: region {} word {at:#x}",
                            r.region_id
                        );
                    }
                    let e = segs.iter().rev().find(|s| s.start <= at).map(|s| s.element);
                    match e {
                        Some(Element::F32) => {
                            for f in w.chunks_exact(4) {
                                let v = f32::from_le_bytes(f.try_into().unwrap());
                                assert!(
                                    v.is_finite() && v.abs() < 1.0 && v != 0.0,
                                    "{name}: f32 {v}"
                                );
                            }
                        }
                        Some(Element::Unknown) => {
                            let v = u64::from_le_bytes(w.try_into().unwrap());
                            assert!(
                                v <= 15,
                                "{name}: region {} word {at:#x} = {v:#x}",
                                r.region_id
                            );
                            for f in w.chunks_exact(4) {
                                assert!(f32::from_le_bytes(f.try_into().unwrap()).is_finite());
                            }
                        }
                        Some(Element::Int(n)) => {
                            for f in w.chunks_exact(n as usize) {
                                assert!(f.iter().skip(1).all(|&b| b == 0) && f[0] <= 15, "{name}");
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        // Every field replaced or kept is listed.
        let listed = b
            .redaction
            .as_ref()
            .expect("a redacted capture lists its fields");
        assert_eq!(report.redaction.as_ref(), Some(listed));
        let field = |f: &str| listed.fields.iter().find(|x| x.field == f).map(|x| x.kept);
        for f in [
            "host",
            "pid",
            "command line",
            "time",
            "device UUID",
            "capture UUID",
            "recorded output",
        ] {
            assert_eq!(field(f), Some(false), "{name}: {f} listed as replaced");
        }
        for f in [
            "device model",
            "kernel and code",
            "geometry",
            "region addresses and sizes",
        ] {
            assert_eq!(field(f), Some(true), "{name}: {f} listed as kept");
        }
        for r in &b.regions {
            assert!(
                field(&format!("region {}", r.region_id)).is_some(),
                "{name}: region listed"
            );
        }
        for k in 0..b.dispatch.params.len() {
            assert!(
                listed
                    .fields
                    .iter()
                    .any(|f| f.field.starts_with(&format!("argument {k}"))),
                "{name}: argument {k} listed"
            );
        }
    }
}

#[test]
fn a_redacted_capture_is_no_larger_than_the_original() {
    for name in ALL {
        let data = load(name);
        for level in [1, 3, 19] {
            let (bytes, _) = packed(
                &data,
                PackOptions {
                    level,
                    ..redact_opts(name)
                },
            );
            assert!(
                bytes.len() <= data.len(),
                "{name} at level {level}: {} > {} bytes",
                bytes.len(),
                data.len()
            );
        }
    }
}

#[test]
fn a_redacted_capture_stays_redacted() {
    let (red, _) = packed(&load("cuda-saxpy"), redact_opts("cuda-saxpy"));
    let (again, report) = packed(&red, PLAIN);
    assert_eq!(report.reference, Some(Reference::Redacted));
    let (r, a) = (
        Capture::parse(&red).unwrap(),
        Capture::parse(&again).unwrap(),
    );
    assert_eq!(a.reference(), Reference::Redacted);
    assert_eq!(a.redaction, r.redaction, "a repack keeps the listing");
    assert_eq!(a.info, r.info);
}

#[test]
fn a_level_out_of_range_is_refused() {
    let data = load("cuda-saxpy");
    let cap = Capture::parse(&data).unwrap();
    for level in [0, 23, -5] {
        let e = pack(
            &cap,
            Cursor::new(Vec::new()),
            [0; 16],
            PackOptions { level, ..PLAIN },
        )
        .unwrap_err();
        assert!(e.to_string().contains("zstd level"), "{e}");
    }
}
