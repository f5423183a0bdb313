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

/// Redacts `name` and checks every byte of every region against the rules.
fn check_redaction(name: &str) -> PackReport {
    let data = load(name);
    let opts = PackOptions {
        redact: true,
        ..PLAIN
    };
    let (bytes, report) = packed(&data, opts);
    let (again, _) = packed(&data, opts);
    assert_eq!(bytes, again, "{name}: redaction is deterministic");
    let (a, b) = (
        Capture::parse(&data).unwrap(),
        Capture::parse(&bytes).unwrap(),
    );
    assert_eq!(b.reference(), Reference::Redacted, "{name}");
    assert_eq!(a.dispatch, b.dispatch, "{name}: argument bytes kept");
    assert_eq!(a.pointer_slots, b.pointer_slots);
    let mut kept: Vec<(u32, u64)> = a.pointer_slots.clone();
    for o in &a.textures.objects {
        kept.extend(o.memory_words.iter().copied());
    }
    let mut changed = 0u64;
    for r in &a.regions {
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
                    assert_eq!(wy, &pack::redacted_word(r.region_id, at)[..wy.len()]);
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
    for name in ["cuda-saxpy", "host-mapped", "surface", "graph-node"] {
        check_redaction(name);
    }
}

#[test]
fn a_redacted_capture_stays_redacted() {
    let (red, _) = packed(
        &load("cuda-saxpy"),
        PackOptions {
            redact: true,
            ..PLAIN
        },
    );
    let (again, report) = packed(&red, PLAIN);
    assert_eq!(report.reference, Some(Reference::Redacted));
    assert_eq!(
        Capture::parse(&again).unwrap().reference(),
        Reference::Redacted
    );
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
