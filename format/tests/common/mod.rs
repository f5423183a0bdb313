//! A small, deterministic capture used by the golden, corruption and salvage tests.
#![allow(dead_code)]

use std::io::Cursor;

use kreplay_format::*;

pub const UUID: [u8; 16] = *b"kreplay-golden-1";

pub fn dispatch() -> Dispatch {
    Dispatch {
        kernel_name: "_Z5saxpyifPKfPf".into(),
        module_id: 1,
        api: LaunchApi::LaunchKernel,
        grid: [4, 1, 1],
        block: [128, 1, 1],
        cluster: [0, 0, 0],
        dynamic_shared_bytes: 0,
        attributes: vec![],
        params: vec![
            Param { offset: 0, size: 4 },
            Param { offset: 4, size: 4 },
            Param { offset: 8, size: 8 },
            Param {
                offset: 16,
                size: 8,
            },
        ],
        arg_bytes: {
            let mut a = vec![0u8; 24];
            a[0..4].copy_from_slice(&512i32.to_le_bytes());
            a[4..8].copy_from_slice(&2.0f32.to_le_bytes());
            a[8..16].copy_from_slice(&0x7f00_0000_0000u64.to_le_bytes());
            a[16..24].copy_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
            a
        },
        pointer_words: vec![8, 16],
        original_duration_ns: Some(4321),
    }
}

/// A writer that has written a stand-in cubin module and the sample dispatch: the start of a
/// capture whose memory a test writes itself.
pub fn writer_with_dispatch() -> CaptureWriter<Cursor<Vec<u8>>> {
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), UUID, WriterOptions::default())
        .expect("writer");
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    })
    .expect("module");
    w.dispatch(&dispatch()).expect("dispatch");
    w
}

/// Writes the sample with the given chunk size; returns the file bytes.
pub fn sample_with(chunk_size: u64) -> Vec<u8> {
    let mut w = CaptureWriter::new(Cursor::new(Vec::new()), UUID, WriterOptions::default())
        .expect("writer");
    w.capture_info(&CaptureInfo {
        tool_version: "0.1.0".into(),
        host: "golden".into(),
        pid: 42,
        rank: None,
        command_line: vec!["./saxpy".into(), "512".into()],
        time_unix_ns: 1_700_000_000_000_000_000,
        match_index: 1,
        launch_index: 3,
        kernel_filter: "saxpy".into(),
    })
    .expect("info");
    w.device(&DeviceInfo {
        name: "NVIDIA H200".into(),
        ordinal: 0,
        cc_major: 9,
        cc_minor: 0,
        uuid: [7; 16],
        driver_version: 13000,
        total_memory: 150_000_000_000,
        sm_count: 132,
    })
    .expect("device");
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF-not-a-real-cubin".to_vec(),
    })
    .expect("module");
    w.dispatch(&dispatch()).expect("dispatch");
    let x: Vec<u8> = (0..512u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let y: Vec<u8> = vec![0u8; 2048];
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: x.len() as u64,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size,
    })
    .expect("region 0");
    w.memory(0, MemoryState::Pre, 0, &x).expect("x");
    w.region(&Region {
        region_id: 1,
        address: 0x7f00_0000_1000,
        size: y.len() as u64,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size,
    })
    .expect("region 1");
    w.memory(1, MemoryState::Pre, 0, &y).expect("y");
    let post: Vec<u8> = (0..512u32)
        .flat_map(|i| (2.0 * i as f32).to_le_bytes())
        .collect();
    w.memory(1, MemoryState::Post, 0, &post).expect("post");
    w.annotation(&Annotation {
        key: "note".into(),
        value: "golden sample".into(),
    })
    .expect("annotation");
    w.finish().expect("finish").into_inner()
}

/// What a recorder that died before `finish` leaves behind: every event up to the index,
/// header still RECORDING.
pub fn unfinished_bytes(chunk_size: u64) -> Vec<u8> {
    let full = sample_with(chunk_size);
    let cap = Capture::parse(&full).expect("parse");
    // Everything before the index is what a dead recorder left behind, with header RECORDING.
    let mut bytes = full[..cap.header.index_offset as usize].to_vec();
    let header = kreplay_format::layout::FileHeader {
        state: kreplay_format::layout::STATE_RECORDING,
        index_offset: 0,
        ..cap.header
    };
    bytes[..64].copy_from_slice(&header.encode());
    bytes
}

pub fn sample() -> Vec<u8> {
    sample_with(1024)
}

pub fn sample_region0() -> Vec<u8> {
    (0..512u32).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// Page of the extents sample.
pub const EXTENTS_PAGE: u64 = 4096;
/// Region 0 of the extents sample: five pages and 100 bytes, in chunks of two pages.
pub const EXTENTS_REGION_SIZE: u64 = 5 * EXTENTS_PAGE + 100;

/// The present ranges of the extents sample's region 0: its second page (in chunk 0) and
/// everything from its fifth page to its end (chunk 2, the short last extent); chunk 1 is
/// wholly absent.
pub fn extents_present() -> Vec<(u64, u64)> {
    vec![
        (EXTENTS_PAGE, EXTENTS_PAGE),
        (4 * EXTENTS_PAGE, EXTENTS_PAGE + 100),
    ]
}

/// Region 0's pre-dispatch bytes as the extents sample stores them: a pattern where present,
/// zero where absent.
pub fn extents_region0() -> Vec<u8> {
    let mut bytes = vec![0u8; EXTENTS_REGION_SIZE as usize];
    for (o, l) in extents_present() {
        for i in o..o + l {
            bytes[i as usize] = (i % 251) as u8 + 1;
        }
    }
    bytes
}

/// A small capture by touched pages (format 1.4): region 0 with extents (two of its three
/// chunks stored, its post chunk where present bytes changed), region 1 held whole.
pub fn sample_extents() -> Vec<u8> {
    let mut w = writer_with_dispatch();
    let chunk_size = 2 * EXTENTS_PAGE;
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: EXTENTS_REGION_SIZE,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size,
    })
    .expect("region 0");
    w.region_extents(&RegionExtents {
        region_id: 0,
        page_size: EXTENTS_PAGE as u32,
        present: extents_present(),
    })
    .expect("extents");
    let pre = extents_region0();
    // The whole region goes in: the writer leaves the wholly absent chunk out.
    w.memory(0, MemoryState::Pre, 0, &pre).expect("pre");
    let mut post = pre[2 * chunk_size as usize..].to_vec();
    post[..8].copy_from_slice(&[9; 8]);
    w.memory(0, MemoryState::Post, 2 * chunk_size, &post)
        .expect("post");
    w.region(&Region {
        region_id: 1,
        address: 0x7f00_0001_0000,
        size: 1024,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: 1024,
    })
    .expect("region 1");
    w.memory(1, MemoryState::Pre, 0, &[5u8; 1024]).expect("y");
    w.finish().expect("finish").into_inner()
}
