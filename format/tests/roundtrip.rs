//! Property tests: whatever is written reads back identically.

mod common;

use std::io::Cursor;

use kreplay_format::*;
use proptest::prelude::*;

const CS: u64 = 256;

fn size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(CS - 1),
        Just(CS),
        Just(CS + 1),
        Just(3 * CS),
        Just(3 * CS - 1),
        Just(3 * CS + 1),
        0u64..5000,
    ]
}

#[derive(Debug, Clone, Copy)]
enum Fill {
    Zeros,
    Random,
    Repetitive,
}

fn fill_strategy() -> impl Strategy<Value = Fill> {
    prop_oneof![
        Just(Fill::Zeros),
        Just(Fill::Random),
        Just(Fill::Repetitive)
    ]
}

fn make(size: u64, fill: Fill, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..size)
        .map(|i| match fill {
            Fill::Zeros => 0,
            Fill::Repetitive => (i % 7) as u8,
            Fill::Random => {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn regions_round_trip(
        regions in prop::collection::vec((size_strategy(), fill_strategy(), any::<u64>(), any::<bool>()), 0..5),
        name in "[a-zA-Z_][a-zA-Z0-9_]{0,40}",
        args in prop::collection::vec(any::<u8>(), 0..64),
        annotations in prop::collection::vec(("[a-z]{1,8}", ".{0,20}"), 0..3),
    ) {
        let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [9; 16], WriterOptions::default()).unwrap();
        let dispatch = Dispatch {
            kernel_name: name.clone(),
            module_id: 0,
            api: LaunchApi::LaunchKernelEx,
            grid: [1, 2, 3],
            block: [32, 1, 1],
            cluster: [2, 1, 1],
            dynamic_shared_bytes: 1 << 16,
            attributes: vec![LaunchAttribute { id: 4, value: vec![1, 2, 3] }],
            params: vec![Param { offset: 0, size: args.len() as u32 }],
            arg_bytes: args.clone(),
            pointer_words: vec![],
            original_duration_ns: None,
        };
        w.dispatch(&dispatch).unwrap();
        let mut expected = Vec::new();
        for (i, (size, fill, seed, written)) in regions.iter().enumerate() {
            let data = make(*size, *fill, *seed);
            w.region(&Region {
                region_id: i as u32,
                address: 0x1000_0000 * (i as u64 + 1),
                size: *size,
                kind: MemoryKind::Device,
                role: RegionRole::Argument,
                chunk_size: CS,
            }).unwrap();
            // Stream in two calls to exercise resumption at a chunk boundary.
            let split = ((*size / CS) / 2 * CS) as usize;
            w.memory(i as u32, MemoryState::Pre, 0, &data[..split]).unwrap();
            w.memory(i as u32, MemoryState::Pre, split as u64, &data[split..]).unwrap();
            let post = if *written && *size > 0 {
                let post = make((*size).min(CS), Fill::Random, seed.wrapping_add(1));
                w.memory(i as u32, MemoryState::Post, 0, &post).unwrap();
                Some(post)
            } else { None };
            expected.push((data, post));
        }
        for (k, v) in &annotations {
            w.annotation(&Annotation { key: k.clone(), value: v.clone() }).unwrap();
        }
        let bytes = w.finish().unwrap().into_inner();
        let report = verify(&bytes).unwrap();
        let cap = Capture::parse(&bytes).unwrap();
        prop_assert_eq!(&cap.dispatch, &dispatch);
        prop_assert_eq!(cap.annotations.len(), annotations.len());
        let mut raw = 0;
        for (i, (data, post)) in expected.iter().enumerate() {
            let back = cap.read_region(i as u32).unwrap();
            prop_assert_eq!(&back, data);
            raw += data.len() as u64;
            match post {
                Some(p) => {
                    let c: Vec<_> = cap.chunks(i as u32, MemoryState::Post).collect();
                    prop_assert_eq!(c.len(), 1);
                    let mut buf = vec![0u8; c[0].raw_len as usize];
                    cap.read_chunk_into(c[0], &mut buf).unwrap();
                    prop_assert_eq!(&buf, p);
                    raw += p.len() as u64;
                }
                None => prop_assert!(!cap.is_written(i as u32)),
            }
        }
        prop_assert_eq!(report.raw_bytes, raw);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Capture::parse(&data);
        let _ = verify(&data);
        let _ = scan(&data);
    }

    #[test]
    fn mutated_sample_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut w = CaptureWriter::new(Cursor::new(Vec::new()), [1; 16], WriterOptions::default()).unwrap();
        w.dispatch(&Dispatch {
            kernel_name: "k".into(), module_id: 0, api: LaunchApi::LaunchKernel,
            grid: [1; 3], block: [1; 3], cluster: [0; 3], dynamic_shared_bytes: 0,
            attributes: vec![], params: vec![], arg_bytes: vec![], pointer_words: vec![],
            original_duration_ns: None,
        }).unwrap();
        w.region(&Region { region_id: 0, address: 0, size: 300, kind: MemoryKind::Device, role: RegionRole::Argument, chunk_size: 128 }).unwrap();
        w.memory(0, MemoryState::Pre, 0, &make(300, Fill::Repetitive, 0)).unwrap();
        let mut bytes = w.finish().unwrap().into_inner();
        for (idx, v) in edits {
            let i = idx.index(bytes.len());
            bytes[i] = v;
        }
        if let Ok(cap) = Capture::parse(&bytes) {
            for r in cap.regions.clone() {
                let _ = cap.read_region(r.region_id);
            }
        }
        let _ = verify(&bytes);
        let _ = salvage(&bytes, Cursor::new(Vec::new()));
    }
}

/// A small capture: one dispatch, one 300-byte region in 128-byte chunks of `fill`.
fn sample(fill: Fill) -> Vec<u8> {
    let mut w =
        CaptureWriter::new(Cursor::new(Vec::new()), [1; 16], WriterOptions::default()).unwrap();
    w.dispatch(&Dispatch {
        kernel_name: "k".into(),
        module_id: 0,
        api: LaunchApi::LaunchKernel,
        grid: [1; 3],
        block: [1; 3],
        cluster: [0; 3],
        dynamic_shared_bytes: 0,
        attributes: vec![],
        params: vec![],
        arg_bytes: vec![],
        pointer_words: vec![],
        original_duration_ns: None,
    })
    .unwrap();
    w.region(&Region {
        region_id: 0,
        address: 0,
        size: 300,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: 128,
    })
    .unwrap();
    w.memory(0, MemoryState::Pre, 0, &make(300, fill, 7))
        .unwrap();
    w.finish().unwrap().into_inner()
}

const HEADER: usize = 64;
const FRAME: usize = 24;
const TRAILER: usize = 32;
const MEMORY_CHUNK: u16 = 6;

fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

/// The payload byte ranges of every event (docs/FORMAT.md: frames back to back after the
/// header, the trailer last).
fn payloads(bytes: &[u8]) -> Vec<(u16, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut at = HEADER;
    while at + FRAME <= bytes.len() - TRAILER {
        let kind = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let len = le_u64(&bytes[at + 8..]) as usize;
        out.push((kind, at + FRAME..at + FRAME + len));
        at += FRAME + len;
    }
    out
}

/// Recomputes every CRC the format holds (header, each frame and payload, each RAW chunk's
/// raw bytes, the trailer) so that edited payload bytes reach the decoders.
fn repair_crcs(bytes: &mut [u8]) {
    for (kind, p) in payloads(bytes) {
        if kind == MEMORY_CHUNK && p.len() >= 32 && bytes[p.start + 5] == 0 {
            let raw = crc32fast::hash(&bytes[p.start + 32..p.end]);
            bytes[p.start + 24..p.start + 28].copy_from_slice(&raw.to_le_bytes());
        }
        let f = p.start - FRAME;
        let crc = crc32fast::hash(&bytes[p.clone()]);
        bytes[f + 4..f + 8].copy_from_slice(&crc.to_le_bytes());
        let crc = crc32fast::hash(&bytes[f..f + 20]);
        bytes[f + 20..f + 24].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32fast::hash(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    let t = bytes.len() - TRAILER;
    let crc = crc32fast::hash(&bytes[t..t + 28]);
    bytes[t + 28..t + 32].copy_from_slice(&crc.to_le_bytes());
}

/// The repair is what makes the hostile-payload property test reach the decoders: an edited
/// RAW chunk with its CRCs repaired verifies and reads back edited; unrepaired, it does not.
#[test]
fn repaired_crcs_let_edited_payloads_through() {
    let mut bytes = sample(Fill::Random);
    let mut clean = bytes.clone();
    repair_crcs(&mut clean);
    assert_eq!(
        clean, bytes,
        "the repair of an untouched file changes nothing"
    );
    let (_, chunk) = payloads(&bytes)
        .into_iter()
        .find(|(k, p)| *k == MEMORY_CHUNK && bytes[p.start + 5] == 0)
        .expect("a RAW chunk (random bytes do not compress)");
    bytes[chunk.start + 40] ^= 0xff;
    assert!(verify(&bytes).is_err(), "an edit without repair is caught");
    repair_crcs(&mut bytes);
    verify(&bytes).expect("the repaired file verifies");
    let cap = Capture::parse(&bytes).expect("parses");
    let read = cap.read_region(0).expect("reads");
    assert_ne!(read, make(300, Fill::Random, 7));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Edits inside payloads (metadata, chunk prefixes and data) with every CRC repaired: the
    /// decoders see checksum-valid hostile input and must refuse it or read it, never panic.
    #[test]
    fn checksum_valid_hostile_payloads_never_panic(
        fill in fill_strategy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = sample(fill);
        let spans: Vec<_> = payloads(&bytes).into_iter().map(|(_, p)| p).collect();
        let total: usize = spans.iter().map(|p| p.len()).sum();
        for (idx, v) in edits {
            let mut i = idx.index(total);
            let p = spans.iter().find(|p| if i < p.len() { true } else { i -= p.len(); false }).unwrap();
            bytes[p.start + i] = v;
        }
        repair_crcs(&mut bytes);
        let _ = scan(&bytes);
        let _ = verify(&bytes);
        if let Ok(cap) = Capture::parse(&bytes) {
            for r in cap.regions.clone() {
                if r.size <= 1 << 26 {
                    let _ = cap.read_region(r.region_id);
                }
            }
        }
        let _ = salvage(&bytes, Cursor::new(Vec::new()));
    }
}

/// `zeros` (the recorder's path for chunks the GPU found all zero) writes exactly what
/// `memory` writes for the same zero bytes, and refuses the ranges `memory` refuses.
#[test]
fn zeros_writes_what_memory_writes_for_zero_bytes() {
    let size = 5 * CS + 123;
    // A writer with one region of `size` bytes declared.
    let declared = || {
        let mut w = common::writer_with_dispatch();
        w.region(&Region {
            region_id: 0,
            address: 0x1000,
            size,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: CS,
        })
        .expect("region");
        w
    };
    let write = |as_zeros: bool| {
        let mut w = declared();
        if as_zeros {
            w.zeros(0, MemoryState::Pre, 0, 2 * CS).expect("zeros");
            w.memory(0, MemoryState::Pre, 2 * CS, &vec![7u8; CS as usize])
                .expect("memory");
            w.zeros(0, MemoryState::Pre, 3 * CS, size - 3 * CS)
                .expect("zeros to the end");
            w.zeros(0, MemoryState::Post, 0, CS).expect("post zeros");
        } else {
            let mut data = vec![0u8; size as usize];
            data[2 * CS as usize..3 * CS as usize].fill(7);
            w.memory(0, MemoryState::Pre, 0, &data).expect("memory");
            w.memory(0, MemoryState::Post, 0, &vec![0u8; CS as usize])
                .expect("post memory");
        }
        w.finish().expect("finish").into_inner()
    };
    let (a, b) = (write(true), write(false));
    assert_eq!(a, b, "zero chunks differ from encoded zero bytes");
    verify(&a).expect("verifies");

    let mut w = declared();
    assert!(
        w.zeros(0, MemoryState::Pre, 1, CS).is_err(),
        "unaligned start"
    );
    assert!(
        w.zeros(0, MemoryState::Pre, 0, CS + 1).is_err(),
        "unaligned end"
    );
    assert!(
        w.zeros(0, MemoryState::Pre, 5 * CS, 124).is_err(),
        "past the end"
    );
    assert!(
        w.zeros(1, MemoryState::Pre, 0, CS).is_err(),
        "undeclared region"
    );
}
