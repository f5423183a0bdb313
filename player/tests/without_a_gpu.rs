//! What the player's public API does where it cannot reach a GPU: these run on any machine
//! (CI without a driver included) and must hold on a GPU machine as well.

use kreplay_format::Capture;
use kreplay_player::{OpenOptions, PlayError, Session};

fn capture_bytes(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../testdata/captures/{name}.krr",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Whether this process can load the CUDA driver and see a GPU (the tests below then check
/// what holds everywhere, and skip what only a machine without one shows).
fn no_gpu(e: &PlayError) -> bool {
    matches!(e, PlayError::Driver(_))
}

#[test]
fn opening_without_a_driver_is_an_error_that_says_so() {
    let bytes = capture_bytes("cuda-saxpy");
    let cap = Capture::parse(&bytes).expect("parse");
    match Session::open(&cap, &OpenOptions::default()) {
        // A GPU machine: the capture opens, nothing more to check here.
        Ok(_) => {}
        Err(e) => {
            assert!(no_gpu(&e), "expected a driver error, got {e:?}");
            let message = e.to_string();
            assert!(
                message.contains("driver") || message.contains("GPU"),
                "the message should point at the driver or the GPU: {message}"
            );
        }
    }
}

#[test]
fn a_device_that_does_not_exist_is_refused_not_a_panic() {
    let bytes = capture_bytes("cuda-saxpy");
    let cap = Capture::parse(&bytes).expect("parse");
    let opts = OpenOptions {
        device: 9999,
        ..Default::default()
    };
    // With a driver: no such device; without: no driver. Never a session.
    let e = Session::open(&cap, &opts)
        .err()
        .expect("device 9999 should not open");
    assert!(no_gpu(&e), "{e:?}");
}

// A damaged dispatch is refused before any GPU work: the same error with or without a GPU.
// Catches: `Session::open` touching the driver before planning the launch.
#[test]
fn a_damaged_dispatch_is_refused_before_the_driver_is_loaded() {
    let bytes = capture_bytes("cuda-saxpy");
    let mut cap = Capture::parse(&bytes).expect("parse");
    cap.dispatch.arg_bytes.truncate(12); // the last pointer parameter now lies outside
    let e = Session::open(&cap, &OpenOptions::default())
        .err()
        .expect("a damaged dispatch should not open");
    assert!(matches!(e, PlayError::Plan(_)), "{e:?}");
    assert!(
        e.to_string().contains("outside the 12 argument bytes"),
        "{e}"
    );
}

// A salvaged capture that lost memory an argument points into cannot be replayed: refused
// up front with what was lost, on any machine.
#[test]
fn a_capture_that_lost_an_argument_region_is_refused_before_the_driver_is_loaded() {
    let bytes = capture_bytes("cuda-saxpy");
    let mut cap = Capture::parse(&bytes).expect("parse");
    let mut salvage = kreplay_format::SalvageRecord::default();
    salvage.dropped_regions.push(cap.regions.remove(0));
    cap.salvage = Some(salvage);
    let e = Session::open(&cap, &OpenOptions::default())
        .err()
        .expect("an unreplayable capture should not open");
    assert!(matches!(e, PlayError::Plan(_)), "{e:?}");
    assert!(e.to_string().contains("region 0"), "{e}");
}
