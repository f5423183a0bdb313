//! The TEXTURES event: a capture with a texture object over a 2D array reads back whole, and
//! each rule refuses a file that breaks it (with the event's offset), before a player could
//! size an array or write a handle from it.

mod common;

use std::io::Cursor;

use kreplay_format::*;

const W: u64 = 16;
const H: u64 = 8;

fn array() -> ArrayImage {
    ArrayImage {
        region_id: 7,
        width: W,
        height: H,
        depth: 0,
        format: 0x20,
        channels: 1,
        flags: 0,
        levels: 0,
    }
}

fn object() -> TextureObject {
    TextureObject {
        handle: 3,
        surface: false,
        resource: TextureResource::Array { index: 0 },
        sampling: Some(TextureSampling {
            filter_mode: 1,
            ..Default::default()
        }),
        view: None,
        arg_words: vec![16],
        memory_words: vec![],
    }
}

fn array_region(size: u64, kind: MemoryKind) -> Region {
    Region {
        region_id: 7,
        address: 0,
        size,
        kind,
        role: RegionRole::Argument,
        chunk_size: DEFAULT_CHUNK_SIZE,
    }
}

/// The sample dispatch, an array region of `size` bytes and kind `kind`, then `t`.
fn capture_with(size: u64, kind: MemoryKind, t: &Textures) -> Vec<u8> {
    let mut w: CaptureWriter<Cursor<Vec<u8>>> = common::writer_with_dispatch();
    w.region(&array_region(size, kind)).expect("region");
    let texels: Vec<u8> = (0..size).map(|i| i as u8).collect();
    w.memory(7, MemoryState::Pre, 0, &texels).expect("memory");
    w.textures(t).expect("textures");
    w.finish().expect("finish").into_inner()
}

fn good() -> Textures {
    Textures {
        arrays: vec![array()],
        objects: vec![object()],
    }
}

#[test]
fn a_texture_over_an_array_reads_back() {
    let bytes = capture_with(W * H * 4, MemoryKind::CudaArray, &good());
    let cap = Capture::parse(&bytes).expect("parse");
    assert_eq!(cap.textures, good());
    assert_eq!(cap.region(7).map(|r| r.kind), Some(MemoryKind::CudaArray));
}

fn refused(bytes: &[u8], needle: &str) {
    match Capture::parse(bytes) {
        Err(FormatError::Inconsistent { what, offset }) => {
            assert!(what.contains(needle), "{what}");
            assert!(offset > 0);
        }
        other => panic!("expected an inconsistency about {needle:?}, got {other:?}"),
    }
}

#[test]
fn an_array_region_of_the_wrong_size_or_kind_is_refused() {
    refused(
        &capture_with(W * H * 4 - 4, MemoryKind::CudaArray, &good()),
        "CUDA-array region of 512 bytes",
    );
    refused(
        &capture_with(W * H * 4, MemoryKind::Device, &good()),
        "CUDA-array region",
    );
    let mut t = good();
    t.arrays[0].region_id = 9;
    refused(
        &capture_with(W * H * 4, MemoryKind::CudaArray, &t),
        "names region 9",
    );
}

#[test]
fn unknown_formats_channels_and_levels_are_refused() {
    let mut t = good();
    t.arrays[0].format = 0xb0;
    refused(&capture_with(512, MemoryKind::CudaArray, &t), "unknown");
    let mut t = good();
    t.arrays[0].channels = 3;
    refused(&capture_with(512, MemoryKind::CudaArray, &t), "3 channels");
    let mut t = good();
    t.arrays[0].levels = 33;
    refused(
        &capture_with(512, MemoryKind::CudaArray, &t),
        "33 mip levels",
    );
    // Dimensions whose size overflows u64.
    let mut t = good();
    t.arrays[0].width = u64::MAX;
    refused(&capture_with(512, MemoryKind::CudaArray, &t), "overflows");
}

#[test]
fn objects_must_name_their_array_and_argument_words() {
    let mut t = good();
    t.objects[0].resource = TextureResource::Array { index: 1 };
    refused(
        &capture_with(512, MemoryKind::CudaArray, &t),
        "views array 1",
    );
    let mut t = good();
    t.objects[0].resource = TextureResource::Mipmapped { index: 0 };
    refused(&capture_with(512, MemoryKind::CudaArray, &t), "mipmapped");
    let mut t = good();
    t.objects[0].arg_words = vec![20]; // the sample has 24 argument bytes
    refused(
        &capture_with(512, MemoryKind::CudaArray, &t),
        "outside the kernel-argument bytes",
    );
}

#[test]
fn handle_words_in_memory_must_lie_inside_a_region() {
    let mut t = good();
    t.objects[0].memory_words = vec![(7, 0)]; // inside the array's own texels: not a table
    refused(
        &capture_with(512, MemoryKind::CudaArray, &t),
        "outside region 7",
    );
    let mut t = good();
    t.objects[0].memory_words = vec![(3, 0)]; // no such region
    refused(
        &capture_with(512, MemoryKind::CudaArray, &t),
        "outside region 3",
    );
}

#[test]
fn a_second_textures_event_is_refused() {
    let mut w: CaptureWriter<Cursor<Vec<u8>>> = common::writer_with_dispatch();
    w.region(&array_region(512, MemoryKind::CudaArray))
        .expect("region");
    w.memory(7, MemoryState::Pre, 0, &[0u8; 512])
        .expect("memory");
    w.textures(&good()).expect("textures");
    w.textures(&good()).expect("textures");
    let bytes = w.finish().expect("finish").into_inner();
    refused(&bytes, "a second textures event");
}

#[test]
fn salvage_drops_textures_whose_array_was_lost() {
    // The array's region declares two chunks; only the first was written (the recorder died
    // while writing): the region is dropped, and the textures event with it, said.
    let mut w: CaptureWriter<Cursor<Vec<u8>>> = common::writer_with_dispatch();
    let mut r = array_region(512, MemoryKind::CudaArray);
    r.chunk_size = 256;
    w.region(&r).expect("region");
    w.memory(7, MemoryState::Pre, 0, &[1u8; 256])
        .expect("memory");
    w.textures(&good()).expect("textures");
    let bytes = w.finish().expect("finish").into_inner();
    assert!(Capture::parse(&bytes).is_err(), "the region is incomplete");
    let (out, report) = kreplay_format::salvage::salvage_verified(&bytes).expect("salvage");
    assert_eq!(report.dropped_regions, vec![7]);
    assert!(
        report
            .dropped_events
            .iter()
            .any(|(_, why)| why.contains("texture and surface objects")),
        "{:?}",
        report.dropped_events
    );
    let salvaged = Capture::parse(&out).expect("salvaged parses");
    assert!(salvaged.textures.is_empty());
    assert!(salvaged.region(7).is_none());
}
