//! `kreplay diff` of range captures, step by step: how many steps each holds and, step for
//! step, what differs (kind, stream, kernel, geometry, argument bytes, what an op copies or
//! sets). Handles and addresses are the recorded process's, so they are compared as what they
//! stand for: streams and events by their order of first use, pointer words not at all (the
//! memory they point to is compared region by region).

use std::collections::HashMap;

use kreplay_format::{Action, Capture, Dispatch, HostWait, Op, Step};
use serde::Serialize;

use crate::describe::demangle;

/// What differs between the steps of two captures (a single capture counts as one kernel
/// step).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StepsDiff {
    pub steps_a: usize,
    pub steps_b: usize,
    /// The steps both hold that differ, in order.
    pub differing: Vec<StepDifference>,
}

impl StepsDiff {
    pub fn identical(&self) -> bool {
        self.steps_a == self.steps_b && self.differing.is_empty()
    }
}

/// One step that differs, and how (`kind copy-dtod / fill`, `grid (4,1,1) / (7,1,1)`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepDifference {
    pub index: usize,
    pub what: Vec<String>,
}

/// The steps of `c`: a range's, or a single capture's dispatch as one kernel step.
fn steps_of(c: &Capture<'_>) -> Vec<Step> {
    if c.is_range() {
        c.steps.clone()
    } else {
        vec![Step::kernel(0, c.dispatch.clone())]
    }
}

/// Compares the steps of `a` and `b`; None when neither is a range capture (a single
/// capture's diff is of memory alone, as it always was).
pub fn diff_steps(a: &Capture<'_>, b: &Capture<'_>) -> Option<StepsDiff> {
    if !a.is_range() && !b.is_range() {
        return None;
    }
    let (sa, sb) = (steps_of(a), steps_of(b));
    let (mut na, mut nb) = (Ordinals::default(), Ordinals::default());
    let differing = sa
        .iter()
        .zip(&sb)
        .enumerate()
        .filter_map(|(index, (x, y))| {
            let what = step_differences(x, y, &mut na, &mut nb);
            (!what.is_empty()).then_some(StepDifference { index, what })
        })
        .collect();
    Some(StepsDiff {
        steps_a: sa.len(),
        steps_b: sb.len(),
        differing,
    })
}

/// Handles numbered in order of first use (streams and events apart).
#[derive(Debug, Default)]
struct Ordinals {
    streams: HashMap<u64, usize>,
    events: HashMap<u64, usize>,
}

impl Ordinals {
    fn stream(&mut self, h: u64) -> usize {
        let n = self.streams.len();
        *self.streams.entry(h).or_insert(n)
    }

    fn event(&mut self, h: u64) -> usize {
        let n = self.events.len();
        *self.events.entry(h).or_insert(n)
    }
}

fn step_differences(x: &Step, y: &Step, na: &mut Ordinals, nb: &mut Ordinals) -> Vec<String> {
    let mut out = Vec::new();
    let (sx, sy) = (na.stream(x.stream), nb.stream(y.stream));
    if sx != sy {
        out.push(format!("stream #{sx} / #{sy}"));
    }
    match (&x.action, &y.action) {
        (Action::Kernel(a), Action::Kernel(b)) => out.extend(kernel_differences(a, b)),
        (Action::Op(a), Action::Op(b)) => out.extend(op_differences(a, b, na, nb)),
        _ => out.push(format!("kind {} / {}", x.kind(), y.kind())),
    }
    out
}

fn dims(d: [u32; 3]) -> String {
    format!("({},{},{})", d[0], d[1], d[2])
}

/// How two launches differ: kernel, geometry, argument bytes outside pointer words.
pub fn kernel_differences(a: &Dispatch, b: &Dispatch) -> Vec<String> {
    let mut out = Vec::new();
    if a.kernel_name != b.kernel_name {
        out.push(format!(
            "kernel {} / {}",
            demangle(&a.kernel_name),
            demangle(&b.kernel_name)
        ));
    }
    for (name, x, y) in [
        ("grid", a.grid, b.grid),
        ("block", a.block, b.block),
        ("cluster", a.cluster, b.cluster),
    ] {
        if x != y {
            out.push(format!("{name} {} / {}", dims(x), dims(y)));
        }
    }
    if a.dynamic_shared_bytes != b.dynamic_shared_bytes {
        out.push(format!(
            "dynamic shared {} / {} bytes",
            a.dynamic_shared_bytes, b.dynamic_shared_bytes
        ));
    }
    if a.arg_bytes.len() != b.arg_bytes.len() {
        out.push(format!(
            "argument bytes {} / {}",
            a.arg_bytes.len(),
            b.arg_bytes.len()
        ));
    } else if let Some(at) = first_value_difference(a, b) {
        out.push(format!("arguments differ from byte {at}"));
    }
    out
}

/// The first argument byte that differs outside the pointer words of either launch.
fn first_value_difference(a: &Dispatch, b: &Dispatch) -> Option<usize> {
    let pointer = |i: usize| {
        a.pointer_words
            .iter()
            .chain(&b.pointer_words)
            .any(|&w| (w as usize..w as usize + 8).contains(&i))
    };
    (0..a.arg_bytes.len()).find(|&i| a.arg_bytes[i] != b.arg_bytes[i] && !pointer(i))
}

fn op_differences(a: &Op, b: &Op, na: &mut Ordinals, nb: &mut Ordinals) -> Vec<String> {
    if a.kind() != b.kind() {
        return vec![format!("kind {} / {}", a.kind(), b.kind())];
    }
    let mut out = Vec::new();
    if a.bytes() != b.bytes() {
        out.push(format!("{} / {} bytes", a.bytes(), b.bytes()));
    }
    match (a, b) {
        (Op::CopyHostToDevice { host: x, .. }, Op::CopyHostToDevice { host: y, .. }) if x != y => {
            out.push("host bytes differ".into())
        }
        (Op::CopyDeviceToHost { received: x, .. }, Op::CopyDeviceToHost { received: y, .. })
            if x != y =>
        {
            out.push("received bytes differ".into())
        }
        (
            Op::Fill {
                value: x,
                element_bytes: ex,
                ..
            },
            Op::Fill {
                value: y,
                element_bytes: ey,
                ..
            },
        ) if (x, ex) != (y, ey) => out.push(format!(
            "fill value {x:#x} ({ex}-byte) / {y:#x} ({ey}-byte)"
        )),
        (
            Op::RecordEvent { event: x } | Op::WaitEvent { event: x },
            Op::RecordEvent { event: y } | Op::WaitEvent { event: y },
        )
        | (Op::HostWait(HostWait::Event(x)), Op::HostWait(HostWait::Event(y))) => {
            let (ex, ey) = (na.event(*x), nb.event(*y));
            if ex != ey {
                out.push(format!("event #{ex} / #{ey}"));
            }
        }
        (Op::HostWait(x), Op::HostWait(y)) if x != y => {
            out.push(format!("waits for {x:?} / {y:?}"))
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{bytes, golden, parse};

    #[test]
    fn a_range_is_identical_to_itself_step_by_step() {
        let r = golden("range-ops");
        let c = parse(&r);
        let d = diff_steps(&c, &c).expect("a range");
        assert!(d.identical(), "{d:?}");
        assert_eq!((d.steps_a, d.steps_b), (9, 9));
    }

    #[test]
    fn single_captures_have_no_step_diff_and_a_single_is_one_kernel_step() {
        let s = bytes("cuda-saxpy");
        let single = parse(&s);
        assert_eq!(diff_steps(&single, &single), None);
        let r = golden("range-ops");
        let range = parse(&r);
        let d = diff_steps(&range, &single).expect("one is a range");
        assert_eq!((d.steps_a, d.steps_b), (9, 1));
        assert_eq!(d.differing[0].what, ["kind copy-htod / kernel"]);
        assert!(!d.identical());
    }

    #[test]
    fn launches_differ_in_geometry_and_values_not_in_pointers() {
        let s = bytes("cuda-saxpy");
        let a = parse(&s).dispatch.clone();
        let mut b = a.clone();
        b.grid = [7, 1, 1];
        let w = b.pointer_words[0] as usize;
        b.arg_bytes[w] ^= 0x10; // another process's address: not a difference
        assert_eq!(kernel_differences(&a, &b), ["grid (16384,1,1) / (7,1,1)"]);
        b.arg_bytes[4] ^= 1; // the float argument
        assert_eq!(
            kernel_differences(&a, &b)[1],
            "arguments differ from byte 4"
        );
    }

    #[test]
    fn streams_and_events_compare_by_order_of_first_use() {
        let record = |s, e| Step::op(s, Op::RecordEvent { event: e });
        let a = [record(0x10, 0xa), record(0x20, 0xb)];
        let same = [record(0x70, 0x3), record(0x80, 0x4)];
        let swapped = [record(0x70, 0x3), record(0x70, 0x3)];
        let (mut na, mut nb) = (Ordinals::default(), Ordinals::default());
        for (x, y) in a.iter().zip(&same) {
            assert!(step_differences(x, y, &mut na, &mut nb).is_empty());
        }
        let (mut na, mut nb) = (Ordinals::default(), Ordinals::default());
        assert!(step_differences(&a[0], &swapped[0], &mut na, &mut nb).is_empty());
        assert_eq!(
            step_differences(&a[1], &swapped[1], &mut na, &mut nb),
            ["stream #1 / #0", "event #1 / #0"]
        );
    }

    #[test]
    fn ops_differ_in_what_they_move_or_set() {
        let fill = |value, count| Op::Fill {
            dst: 0,
            value,
            element_bytes: 4,
            count,
        };
        let (mut na, mut nb) = (Ordinals::default(), Ordinals::default());
        assert_eq!(
            op_differences(&fill(1, 4), &fill(2, 8), &mut na, &mut nb),
            ["16 / 32 bytes", "fill value 0x1 (4-byte) / 0x2 (4-byte)"]
        );
        let h2d = |b: u8| Op::CopyHostToDevice {
            dst: 0,
            host: vec![b; 4],
        };
        assert_eq!(
            op_differences(&h2d(1), &h2d(2), &mut na, &mut nb),
            ["host bytes differ"]
        );
    }
}
