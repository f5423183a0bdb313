//! Range captures: STEP events round trip, follow their rules, and leave single captures
//! exactly as they were.

mod common;

use std::io::Cursor;

use kreplay_format::*;

fn step(name: &str, stream: u64, duration: u64) -> Step {
    let mut dispatch = common::dispatch();
    dispatch.kernel_name = name.into();
    dispatch.original_duration_ns = Some(duration);
    Step::kernel(stream, dispatch)
}

fn three_steps() -> Vec<Step> {
    vec![
        step("_Z5firstPf", 0, 100),
        step("_Z6secondPf", 0, 200),
        step("_Z5thirdPf", 0, 300),
    ]
}

/// A range capture: the head's dispatch is the first step, then `steps`, one region with a
/// post chunk. `dispatch` overrides the head's dispatch (for the rule tests).
fn range_bytes(steps: &[Step], dispatch: Option<Dispatch>) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    let modules = [ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    }];
    let d = dispatch.unwrap_or_else(|| steps[0].dispatch().expect("kernel").clone());
    w.head(&CaptureHead {
        info: None,
        device: None,
        modules: &modules,
        dispatch: &d,
    })
    .expect("head");
    w.steps(steps).expect("steps");
    let pre = vec![1u8; 1024];
    w.region(&Region {
        region_id: 0,
        address: 0x7f00_0000_0000,
        size: pre.len() as u64,
        kind: MemoryKind::Device,
        role: RegionRole::Argument,
        chunk_size: 256,
    })
    .expect("region");
    w.memory(0, MemoryState::Pre, 0, &pre).expect("pre");
    w.memory(0, MemoryState::Post, 0, &[9u8; 256])
        .expect("post");
    w.finish().expect("finish").into_inner()
}

#[test]
fn steps_round_trip_in_order_and_state_format_1_2() {
    let steps = three_steps();
    let data = range_bytes(&steps, None);
    let cap = Capture::parse(&data).expect("parse");
    assert_eq!(cap.steps, steps);
    assert!(cap.is_range());
    assert_eq!(Some(&cap.dispatch), steps[0].dispatch());
    assert_eq!(cap.header.minor, layout::STEP_MINOR);
    verify(&data).expect("verify");
    let ev = scan(&data)
        .expect("scan")
        .intact
        .into_iter()
        .find(|e| e.frame.kind == EventKind::Step as u16)
        .expect("a step event");
    assert_ne!(
        ev.frame.flags & layout::FLAG_CRITICAL,
        0,
        "a reader that does not know steps must refuse the file"
    );
}

#[test]
fn single_captures_have_no_steps_and_still_state_1_0() {
    let cap_bytes = common::sample();
    let cap = Capture::parse(&cap_bytes).expect("parse");
    assert!(cap.steps.is_empty());
    assert!(!cap.is_range());
    assert_eq!(cap.header.minor, 0);
    assert!(range::refuse_range(&cap, "pack").is_ok());
}

#[test]
fn commands_that_do_not_know_ranges_refuse_them() {
    let data = range_bytes(&three_steps(), None);
    let cap = Capture::parse(&data).expect("parse");
    let msg = range::refuse_range(&cap, "extract").expect_err("refused");
    assert!(
        msg.contains("`extract`") && msg.contains("3 steps"),
        "{msg}"
    );
}

#[test]
fn a_reader_of_1_1_refuses_a_range_naming_both_versions() {
    // What a 1.1 reader sees: an unknown critical kind in a newer-minor file.
    let data = range_bytes(&three_steps(), None);
    let err = FormatError::UnknownCritical {
        offset: 0,
        kind: EventKind::Step as u16,
        found_major: 1,
        found_minor: Capture::parse(&data).expect("parse").header.minor,
        supported_major: 1,
        supported_minor: 1,
    };
    let msg = err.to_string();
    assert!(msg.contains("1.2") && msg.contains("1.1"), "{msg}");
}

#[test]
fn the_first_step_must_be_the_dispatch() {
    let mut other = common::dispatch();
    other.grid = [1, 1, 1];
    let data = range_bytes(&three_steps(), Some(other));
    let err = Capture::parse(&data).expect_err("refused");
    assert!(err.to_string().contains("first kernel step"), "{err}");
}

#[test]
fn a_step_must_name_a_module_the_capture_holds() {
    let mut steps = three_steps();
    steps[1].dispatch_mut().expect("kernel").module_id = 7;
    let err = Capture::parse(&range_bytes(&steps, None)).expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("step 1") && msg.contains("module 7"), "{msg}");
}

#[test]
fn a_step_pointer_word_must_lie_inside_its_arguments() {
    let mut steps = three_steps();
    steps[2]
        .dispatch_mut()
        .expect("kernel")
        .pointer_words
        .push(20);
    let err = Capture::parse(&range_bytes(&steps, None)).expect_err("refused");
    assert!(err.to_string().contains("step 2"), "{err}");
}

#[test]
fn step_problem_accepts_a_sound_step() {
    let modules = [ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: vec![],
    }];
    assert_eq!(
        rules::step_problem(three_steps()[0].dispatch().expect("kernel"), 0, &modules),
        None
    );
    assert!(rules::step_problem(three_steps()[0].dispatch().expect("kernel"), 0, &[]).is_some());
}

#[test]
fn a_step_before_the_dispatch_is_refused() {
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    w.module(&ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: vec![],
    })
    .expect("module");
    let steps = three_steps();
    w.steps(&steps).expect("steps");
    w.dispatch(steps[0].dispatch().expect("kernel"))
        .expect("dispatch");
    let data = w.finish().expect("finish").into_inner();
    let err = Capture::parse(&data).expect_err("refused");
    assert!(err.to_string().contains("before the dispatch"), "{err}");
}

#[test]
fn a_step_in_a_file_that_states_an_older_minor_is_refused() {
    let mut data = range_bytes(&three_steps(), None);
    let mut h = layout::FileHeader::decode(&data).expect("header");
    h.minor = 1;
    data[..64].copy_from_slice(&h.encode());
    let err = Capture::parse(&data).expect_err("refused");
    assert!(err.to_string().contains("format 1.1"), "{err}");
}

#[test]
fn every_single_bit_flip_of_a_range_is_detected() {
    let full = range_bytes(&three_steps(), None);
    for byte in 0..full.len() {
        for bit in [0, 5] {
            let mut data = full.clone();
            data[byte] ^= 1 << bit;
            assert!(
                verify(&data).is_err(),
                "flip of bit {bit} in byte {byte} went unnoticed"
            );
        }
    }
}

#[test]
fn salvage_keeps_the_steps_and_their_minor() {
    let full = range_bytes(&three_steps(), None);
    let cap = Capture::parse(&full).expect("parse");
    // Cut the file inside its last event (the post chunk): the steps survive.
    let cut = full[..cap.header.index_offset as usize - 10].to_vec();
    let (out, _) = salvage(&cut, Cursor::new(Vec::new())).expect("salvage");
    let out = out.into_inner();
    let saved = Capture::parse(&out).expect("parse salvaged");
    assert_eq!(saved.steps, three_steps());
    assert!(saved.header.minor >= layout::STEP_MINOR);
}

#[test]
fn a_salvaged_range_whose_later_step_lost_its_argument_memory_cannot_be_replayed() {
    // Step 1 reads region 1, which no other step reaches; its pre chunk is damaged.
    let mut steps = three_steps();
    steps[1].dispatch_mut().expect("kernel").arg_bytes[8..16]
        .copy_from_slice(&0x7f00_0000_8000u64.to_le_bytes());
    let mut w = CaptureWriter::new(
        Cursor::new(Vec::new()),
        common::UUID,
        WriterOptions::default(),
    )
    .expect("writer");
    let modules = [ModuleImage {
        module_id: 1,
        kind: ModuleKind::Cubin,
        arch: 90,
        image: b"\x7fELF".to_vec(),
    }];
    w.head(&CaptureHead {
        info: None,
        device: None,
        modules: &modules,
        dispatch: steps[0].dispatch().expect("kernel"),
    })
    .expect("head");
    w.steps(&steps).expect("steps");
    for (id, address) in [(0u32, 0x7f00_0000_0000u64), (1, 0x7f00_0000_8000)] {
        w.region(&Region {
            region_id: id,
            address,
            size: 256,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 256,
        })
        .expect("region");
        let bytes: Vec<u8> = (0..256u32).map(|i| (i * 7 + id) as u8).collect();
        w.memory(id, MemoryState::Pre, 0, &bytes).expect("pre");
    }
    let mut data = w.finish().expect("finish").into_inner();
    let last_chunk = scan(&data)
        .expect("scan")
        .intact
        .into_iter()
        .rev()
        .find(|e| e.frame.kind == EventKind::MemoryChunk as u16)
        .expect("region 1's chunk");
    let payload = last_chunk.offset as usize + layout::FRAME_LEN + layout::CHUNK_PREFIX_LEN;
    data[payload] ^= 0xff;
    let (out, _) = salvage(&data, Cursor::new(Vec::new())).expect("salvage");
    let out = out.into_inner();
    let saved = Capture::parse(&out).expect("parse salvaged");
    let why = replay_blockers(&saved);
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].starts_with("step 1:") && why[0].contains("region 1"),
        "{why:?}"
    );
}
