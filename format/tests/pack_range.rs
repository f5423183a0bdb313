//! `pack` of a range capture (the golden range-ops.krr): a repack keeps the steps and the
//! RANGE event (with `--drop-post` too), `--redact` replaces
//! the application's data inside the steps and says so, the same way every time.

use std::io::Cursor;

use kreplay_format::*;

fn golden() -> Vec<u8> {
    let p = format!(
        "{}/../testdata/golden/range-ops.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn saxpy_types() -> Vec<ParamType> {
    let t = |name: &str, shape| ParamType {
        name: name.into(),
        shape,
    };
    vec![
        t("int", ParamShape::Scalar(Element::Int(4))),
        t("float", ParamShape::Scalar(Element::F32)),
        t("float const*", ParamShape::Pointer(Element::F32)),
        t("float*", ParamShape::Pointer(Element::F32)),
    ]
}

fn options(drop_post: bool, redact: bool) -> PackOptions {
    let cap_bytes = golden();
    let cap = Capture::parse(&cap_bytes).expect("parse");
    PackOptions {
        level: 3,
        drop_post,
        redact,
        param_types: saxpy_types(),
        step_param_types: cap
            .steps
            .iter()
            .map(|s| match s.dispatch() {
                Some(_) => saxpy_types(),
                None => Vec::new(),
            })
            .collect(),
    }
}

fn packed(opts: PackOptions) -> (Vec<u8>, PackReport) {
    let data = golden();
    let cap = Capture::parse(&data).expect("parse");
    let (out, report) = pack(&cap, Cursor::new(Vec::new()), [7; 16], opts).expect("pack");
    let bytes = out.into_inner();
    verify(&bytes).expect("a packed range verifies");
    (bytes, report)
}

#[test]
fn a_repack_keeps_the_steps_and_the_range() {
    let data = golden();
    let before = Capture::parse(&data).expect("parse");
    let (bytes, _) = packed(options(false, false));
    let after = Capture::parse(&bytes).expect("parse packed");
    assert_eq!(after.steps, before.steps);
    assert_eq!(after.range, before.range);
    assert_eq!(after.header.minor, layout::RANGE_MINOR);
    assert_eq!(after.reference(), Reference::Recorded);
}

#[test]
fn drop_post_keeps_the_steps_and_the_range_whole() {
    // The digests and the received bytes are still true of the input, and what a replay
    // without post chunks checks.
    let data = golden();
    let before = Capture::parse(&data).expect("parse");
    let (bytes, _) = packed(options(true, false));
    let after = Capture::parse(&bytes).expect("parse packed");
    assert_eq!(after.steps, before.steps);
    assert_eq!(after.range, before.range);
    assert_eq!(after.reference(), Reference::Dropped);
}

fn field<'r>(r: &'r Redaction, name: &str) -> &'r RedactedField {
    r.fields
        .iter()
        .find(|f| f.field == name)
        .unwrap_or_else(|| panic!("no field {name:?} in {:#?}", r.fields))
}

#[test]
fn redaction_replaces_the_data_inside_the_steps_and_lists_it() {
    let data = golden();
    let before = Capture::parse(&data).expect("parse");
    let (bytes, report) = packed(options(false, true));
    let after = Capture::parse(&bytes).expect("parse redacted");
    assert_eq!(after.steps.len(), before.steps.len());
    assert_eq!(
        Some(&after.dispatch),
        after.steps[1].dispatch(),
        "the format's rule"
    );
    let host = |c: &Capture<'_>| match &c.steps[0].action {
        Action::Op(Op::CopyHostToDevice { host, .. }) => host.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(host(&after).len(), host(&before).len());
    assert_ne!(host(&after), host(&before), "the application's host bytes");
    let Action::Op(Op::CopyDeviceToHost { received, .. }) = &after.steps[7].action else {
        panic!("step 7 is the device-to-host copy")
    };
    assert!(received.iter().all(|&b| b == 0));
    // The second kernel's float argument (1.5 in saxpy) is replaced like the dispatch's.
    let scalar = |c: &Capture<'_>| c.steps[6].dispatch().expect("kernel").arg_bytes[4..8].to_vec();
    assert_ne!(scalar(&after), scalar(&before));
    // Handles are the recorded process's addresses: renumbered alike in steps and RANGE.
    let range = after.range.as_ref().expect("range");
    let handles: Vec<u64> = range.streams.iter().map(|s| s.handle).collect();
    assert_eq!(handles, [0x100, 0x101]);
    assert!(after.steps.iter().all(|s| handles.contains(&s.stream)));
    assert_eq!(
        after.steps[2].action,
        Action::Op(Op::RecordEvent { event: 1 })
    );
    assert_eq!(
        after.steps[3].action,
        Action::Op(Op::WaitEvent { event: 1 })
    );
    assert!(range.digests.is_empty());
    assert_eq!(range.origin, "launch-range 2:3");
    assert_eq!(after.reference(), Reference::Redacted);
    let log = report.redaction.as_ref().expect("listing");
    assert_eq!(after.redaction.as_ref(), Some(log), "written as reported");
    assert!(!field(log, "step 0 host bytes (copy-htod)").kept);
    assert!(!field(log, "step 7 received bytes (copy-dtoh)").kept);
    assert!(!field(log, "step 6 argument 1 (float)").kept);
    assert!(field(log, "step 6 argument 2 (float const*)").kept);
    assert!(!field(log, "stream and event handles").kept);
    assert!(!field(log, "step digests").kept);
    assert!(field(log, "range origin").kept);
    // A pure function of the capture.
    assert_eq!(packed(options(false, true)).0, bytes);
}

#[test]
fn a_later_kernel_step_types_the_memory_it_points_to() {
    let data = golden();
    let cap = Capture::parse(&data).expect("parse");
    let y = &cap.regions[1];
    let untyped = pack::range_region_segments(&cap, &[], &[], y);
    assert_eq!(untyped[0].element, Element::Unknown);
    let mut types: Vec<Vec<ParamType>> = vec![Vec::new(); cap.steps.len()];
    let mut ints = saxpy_types();
    ints[3] = ParamType {
        name: "int*".into(),
        shape: ParamShape::Pointer(Element::Int(4)),
    };
    types[6] = ints;
    let typed = pack::range_region_segments(&cap, &[], &types, y);
    assert_eq!(typed[0].element, Element::Int(4));
    assert_eq!(typed[0].source, "step 6 argument 3 (int*)");
    // The DISPATCH's own type comes first.
    let both = pack::range_region_segments(&cap, &saxpy_types(), &types, y);
    assert_eq!(
        (both[0].element, both[0].source.as_str()),
        (Element::F32, "argument 3 (float*)")
    );
}

#[test]
fn a_single_capture_packs_as_before() {
    let p = format!(
        "{}/../testdata/captures/cuda-saxpy.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    let data = std::fs::read(p).expect("capture");
    let cap = Capture::parse(&data).expect("parse");
    let opts = PackOptions {
        step_param_types: Vec::new(),
        ..options(false, true)
    };
    let (out, _) = pack(&cap, Cursor::new(Vec::new()), [7; 16], opts).expect("pack");
    let out = out.into_inner();
    let packed = Capture::parse(&out).expect("parse");
    assert!(packed.steps.is_empty() && packed.range.is_none());
    assert_eq!(packed.header.minor, 0);
}
