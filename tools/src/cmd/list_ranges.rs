//! `kreplay list --ranges`: each NVTX range instance the processes reported, with the launches
//! made inside it, so that a user can choose one for `record --nvtx-range NAME --nth N`.

use kreplay_protocol::nvtx::OpenRange;
use kreplay_protocol::report::{ProcessReport, RangeSpan};

/// One instance as listed: the process it ran in and its span.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ListedRange {
    pub pid: u32,
    #[serde(flatten)]
    pub span: RangeSpan,
}

/// Every process's instances, in report order, and how many the processes left out.
pub fn ranges_of(reports: &[ProcessReport]) -> (Vec<ListedRange>, u64) {
    let listed = reports
        .iter()
        .flat_map(|r| {
            r.ranges.iter().map(|s| ListedRange {
                pid: r.pid,
                span: s.clone(),
            })
        })
        .collect();
    (listed, reports.iter().map(|r| r.ranges_left_out).sum())
}

/// `nvtx-range NAME #N  launches I..J` (`no launches` when none ran inside; the pid when
/// several processes reported; a note when the range was still open at the process's exit).
pub fn range_line(r: &ListedRange, several_processes: bool) -> String {
    let s = &r.span;
    let label = OpenRange::new(s.domain.as_deref(), &s.name).label();
    let launches = match (s.first_launch, s.last_launch) {
        (Some(i), Some(j)) => format!("launches {i}..{j}"),
        _ => "no launches".to_string(),
    };
    let mut line = format!(
        "nvtx-range {} #{}  {launches}",
        crate::output::printable(&label),
        s.instance
    );
    if !s.closed {
        line.push_str("  (still open when the process ended)");
    }
    if several_processes {
        line.push_str(&format!("  (pid {})", r.pid));
    }
    line
}

/// The lines printed after the kernel table.
pub fn range_lines(ranges: &[ListedRange], left_out: u64) -> Vec<String> {
    let mut pids: Vec<u32> = ranges.iter().map(|r| r.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let several = pids.len() > 1;
    let mut lines: Vec<String> = ranges.iter().map(|r| range_line(r, several)).collect();
    if left_out > 0 {
        lines.push(format!(
            "({left_out} more instances were not kept: a process reports a bounded number)"
        ));
    }
    lines
}

/// `list --json --ranges`: the kernels and the ranges in one object.
pub fn json(
    kernels: &[kreplay_protocol::report::KernelStat],
    ranges: &[ListedRange],
    left_out: u64,
) -> serde_json::Value {
    serde_json::json!({
        "kernels": kernels,
        "ranges": ranges,
        "ranges_left_out": left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(
        domain: Option<&str>,
        name: &str,
        instance: u64,
        launches: Option<(u64, u64)>,
    ) -> RangeSpan {
        RangeSpan {
            domain: domain.map(str::to_string),
            name: name.into(),
            instance,
            first_launch: launches.map(|l| l.0),
            last_launch: launches.map(|l| l.1),
            closed: true,
        }
    }

    fn report(pid: u32, ranges: Vec<RangeSpan>) -> ProcessReport {
        ProcessReport {
            pid,
            ranges,
            ..Default::default()
        }
    }

    #[test]
    fn lines_name_the_range_its_instance_and_its_launches() {
        let (ranges, left_out) = ranges_of(&[report(
            7,
            vec![
                span(None, "layer.2", 1, Some((4, 9))),
                span(Some("mydomain"), "layer.2", 1, None),
            ],
        )]);
        assert_eq!(
            range_lines(&ranges, left_out),
            [
                "nvtx-range layer.2 #1  launches 4..9",
                "nvtx-range mydomain@layer.2 #1  no launches"
            ]
        );
    }

    #[test]
    fn open_ranges_several_processes_and_left_out_instances_are_said() {
        let mut open = span(None, "model", 1, Some((1, 3)));
        open.closed = false;
        let mut second = report(9, vec![span(None, "model", 1, None)]);
        second.ranges_left_out = 5;
        let (ranges, left_out) = ranges_of(&[report(8, vec![open]), second]);
        assert_eq!(left_out, 5);
        let lines = range_lines(&ranges, left_out);
        assert_eq!(
            lines[0],
            "nvtx-range model #1  launches 1..3  (still open when the process ended)  (pid 8)"
        );
        assert_eq!(lines[1], "nvtx-range model #1  no launches  (pid 9)");
        assert!(lines[2].starts_with("(5 more instances"), "{}", lines[2]);
    }

    #[test]
    fn json_holds_the_contract_fields_and_the_pid() {
        let (ranges, _) = ranges_of(&[report(3, vec![span(Some("d"), "x", 2, Some((5, 5)))])]);
        let v = json(&[], &ranges, 0);
        let r = &v["ranges"][0];
        assert_eq!(r["domain"], "d");
        assert_eq!(r["name"], "x");
        assert_eq!(r["instance"], 2);
        assert_eq!(r["first_launch"], 5);
        assert_eq!(r["last_launch"], 5);
        assert_eq!(r["closed"], true);
        assert_eq!(r["pid"], 3);
        assert!(v["kernels"].as_array().is_some_and(|k| k.is_empty()));
        let (empty, _) = ranges_of(&[report(3, vec![span(None, "y", 1, None)])]);
        let v = json(&[], &empty, 0);
        assert!(v["ranges"][0]["domain"].is_null());
        assert!(v["ranges"][0]["first_launch"].is_null());
    }
}
