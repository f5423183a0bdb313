//! `kreplay profile --variant`'s report: one row per dispatch (the original's and the
//! variant's median time, the speedup, the verdict and its error figures) and a summary
//! (geometric-mean speedup, plain and weighted by the original's time; dispatches that
//! differ; dispatches skipped and why). Table (stderr), JSON lines or CSV. Pure formatting.

use kreplay_protocol::report::ProfileRow;
use kreplay_protocol::variant::{geomean, speedup, weighted_geomean, Verdict};
use serde::Serialize;

use crate::figures::{dims, micros_of_ns};

/// What the rows add up to.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VariantSummary {
    /// Dispatches where the variant ran and was judged.
    pub compared: u64,
    pub identical: u64,
    pub within_tolerance: u64,
    pub differ: u64,
    /// Geometric mean of original / variant median time over the compared dispatches (above
    /// 1: the variant is faster).
    pub geomean_speedup: Option<f64>,
    /// The same, each dispatch weighted by the original's median time.
    pub weighted_speedup: Option<f64>,
    /// Dispatches where the variant did not run or was not judged: (reason, how many).
    pub skipped: Vec<(String, u64)>,
}

/// The row's speedup (original median / variant median).
fn row_speedup(r: &ProfileRow) -> Option<f64> {
    r.variant
        .as_ref()
        .and_then(|v| speedup(r.median_ns, v.median_ns))
}

/// Why the variant has no verdict at this row, if it has none.
fn skip_reason(r: &ProfileRow) -> Option<String> {
    if let Some(why) = &r.skipped {
        return Some(format!("not profiled: {why}"));
    }
    if let Some(why) = &r.variant_error {
        return Some(format!("variant not run: {why}"));
    }
    match &r.variant {
        Some(v) if v.verdict.is_some() => None,
        _ => Some("variant not judged: its passes failed (see the errors above)".into()),
    }
}

/// The summary of `rows`.
pub fn summary(rows: &[ProfileRow]) -> VariantSummary {
    let mut s = VariantSummary::default();
    let mut ratios = Vec::new();
    let mut weighted = Vec::new();
    for r in rows {
        if let Some(why) = skip_reason(r) {
            match s.skipped.iter_mut().find(|(w, _)| *w == why) {
                Some((_, n)) => *n += 1,
                None => s.skipped.push((why, 1)),
            }
            continue;
        }
        s.compared += 1;
        match r.variant.as_ref().and_then(|v| v.verdict) {
            Some(Verdict::Identical) => s.identical += 1,
            Some(Verdict::WithinTolerance) => s.within_tolerance += 1,
            Some(Verdict::Differs) | None => s.differ += 1,
        }
        if let Some(x) = row_speedup(r) {
            ratios.push(x);
            weighted.push((x, r.median_ns as f64));
        }
    }
    s.geomean_speedup = geomean(&ratios);
    s.weighted_speedup = weighted_geomean(&weighted);
    s
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}x"))
}

/// The cells after the verdict: max abs, max rel, first differing byte (region+offset).
fn error_cells(r: &ProfileRow) -> [String; 3] {
    match r
        .variant
        .as_ref()
        .filter(|v| v.differing_bytes > 0 || v.wrote_outside)
    {
        None => ["-".into(), "-".into(), "-".into()],
        Some(v) => [
            format!("{:.3e}", v.max_abs),
            format!("{:.3e}", v.max_rel),
            v.first_difference.as_ref().map_or("-".into(), |f| {
                format!("{:#x}+{}", f.region_address, f.offset)
            }),
        ],
    }
}

const HEAD: &str = "kernel                          rank launch           grid    orig us     var us  speedup          verdict    max abs    max rel first diff (region+B)";

fn row_line(r: &ProfileRow) -> String {
    let name: String = r.short_name.chars().take(28).collect();
    let (orig, var, verdict) = match (&r.skipped, &r.variant) {
        (Some(_), _) => ("-".into(), "-".into(), "skipped".to_string()),
        (None, None) => (micros_of_ns(r.median_ns), "-".into(), "not run".to_string()),
        (None, Some(v)) => (
            micros_of_ns(r.median_ns),
            micros_of_ns(v.median_ns),
            v.verdict.map_or("failed", |x| x.name()).to_string(),
        ),
    };
    let [abs, rel, first] = error_cells(r);
    format!(
        "{:<28} {:>7} {:>6} {:>14} {:>10} {:>10} {:>8} {:>16} {:>10} {:>10} {}",
        name,
        r.rank.map_or("-".to_string(), |x| x.to_string()),
        r.launch_index,
        dims(r.grid),
        orig,
        var,
        ratio(row_speedup(r)),
        verdict,
        abs,
        rel,
        first
    )
}

/// The summary for a person, a line each.
fn summary_lines(s: &VariantSummary, element: Option<&str>) -> String {
    let mut out = format!(
        "variant: {} dispatch(es) compared: {} identical, {} within tolerance, {} differ; \
         geometric-mean speedup {} (weighted by the original's time {})\n",
        s.compared,
        s.identical,
        s.within_tolerance,
        s.differ,
        ratio(s.geomean_speedup),
        ratio(s.weighted_speedup)
    );
    if let Some(e) = element {
        out.push_str(&format!(
            "variant: errors are read as {e} (max abs in {e} units, max rel a fraction)\n"
        ));
    }
    for (why, n) in &s.skipped {
        out.push_str(&format!("variant: {n} dispatch(es) skipped: {why}\n"));
    }
    out
}

/// The table `kreplay profile --variant` prints on stderr: a row per dispatch (times in µs,
/// speedup as original / variant), then the summary.
pub fn table(rows: &[ProfileRow]) -> String {
    let mut out = format!("{HEAD}\n");
    for r in rows {
        out.push_str(&row_line(r));
        out.push('\n');
    }
    let element = rows
        .iter()
        .find_map(|r| r.variant.as_ref().map(|v| v.element.as_str()));
    out.push_str(&summary_lines(&summary(rows), element));
    out
}

/// One JSON object per dispatch (its `variant` object holds the variant's side), then one
/// line `{"summary": {...}}`.
pub fn json_lines(rows: &[ProfileRow]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for r in rows {
        let mut v = serde_json::to_value(r)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("speedup".into(), serde_json::to_value(row_speedup(r))?);
        }
        out.push_str(&serde_json::to_string(&v)?);
        out.push('\n');
    }
    out.push_str(&serde_json::to_string(
        &serde_json::json!({ "summary": summary(rows) }),
    )?);
    out.push('\n');
    Ok(out)
}

/// A header and one CSV row per dispatch (the summary is in the table and the JSON).
pub fn csv(rows: &[ProfileRow]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "kernel",
        "short_name",
        "pid",
        "rank",
        "launch_index",
        "grid",
        "block",
        "original_median_ns",
        "variant_median_ns",
        "speedup",
        "verdict",
        "element",
        "differing_bytes",
        "max_abs",
        "max_rel",
        "first_diff_region",
        "first_diff_offset",
        "kept",
        "skipped",
    ])?;
    for r in rows {
        let v = r.variant.as_ref();
        let first = v.and_then(|v| v.first_difference.as_ref());
        w.write_record([
            r.kernel.clone(),
            r.short_name.clone(),
            r.pid.to_string(),
            r.rank.map_or(String::new(), |x| x.to_string()),
            r.launch_index.to_string(),
            dims(r.grid),
            dims(r.block),
            r.median_ns.to_string(),
            v.map_or(String::new(), |v| v.median_ns.to_string()),
            row_speedup(r).map_or(String::new(), |x| format!("{x:.4}")),
            v.and_then(|v| v.verdict)
                .map_or(String::new(), |x| x.name().to_string()),
            v.map_or(String::new(), |v| v.element.clone()),
            v.map_or(String::new(), |v| v.differing_bytes.to_string()),
            v.map_or(String::new(), |v| v.max_abs.to_string()),
            v.map_or(String::new(), |v| v.max_rel.to_string()),
            first.map_or(String::new(), |f| format!("{:#x}", f.region_address)),
            first.map_or(String::new(), |f| f.offset.to_string()),
            v.is_some_and(|v| v.kept).to_string(),
            skip_reason(r).unwrap_or_default(),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::variant::{FirstDifference, VariantResult};

    fn row(launch: u64, original_ns: u64, variant_ns: u64, verdict: Verdict) -> ProfileRow {
        ProfileRow {
            kernel: "_Z5scalePfif".into(),
            short_name: "scale".into(),
            launch_index: launch,
            grid: [64, 1, 1],
            block: [256, 1, 1],
            median_ns: original_ns,
            variant: Some(VariantResult {
                kernel: "_Z5scalePfif".into(),
                median_ns: variant_ns,
                verdict: Some(verdict),
                element: "f32".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn rows() -> Vec<ProfileRow> {
        let mut wrong = row(5, 30_000, 10_000, Verdict::Differs);
        if let Some(v) = wrong.variant.as_mut() {
            v.differing_bytes = 4;
            v.differing_elements = 1;
            v.max_abs = 1.0;
            v.max_rel = 0.5;
            v.first_difference = Some(FirstDifference {
                region_address: 0x7f00_0000_0000,
                offset: 4096,
            });
        }
        let refused = ProfileRow {
            short_name: "scale".into(),
            launch_index: 7,
            median_ns: 1000,
            variant_error: Some("parameter 2 differs".into()),
            ..Default::default()
        };
        let graph = ProfileRow {
            short_name: "scale".into(),
            launch_index: 9,
            skipped: Some("a kernel node of a CUDA graph".into()),
            ..Default::default()
        };
        vec![
            row(3, 10_000, 20_000, Verdict::Identical),
            wrong,
            refused,
            graph,
        ]
    }

    #[test]
    fn the_summary_counts_verdicts_means_speedups_and_says_why_dispatches_were_skipped() {
        let s = summary(&rows());
        assert_eq!((s.compared, s.identical, s.differ), (2, 1, 1));
        // Speedups 0.5 and 3: geomean sqrt(1.5); weighted by 10 us and 30 us.
        let g = s.geomean_speedup.expect("two");
        assert!((g - 1.5f64.sqrt()).abs() < 1e-12, "{g}");
        let w = s.weighted_speedup.expect("weighted");
        assert!(
            (w - (0.5f64.ln() * 0.25 + 3f64.ln() * 0.75).exp()).abs() < 1e-12,
            "{w}"
        );
        assert_eq!(
            s.skipped,
            vec![
                ("variant not run: parameter 2 differs".to_string(), 1),
                ("not profiled: a kernel node of a CUDA graph".to_string(), 1)
            ]
        );
    }

    #[test]
    fn the_table_has_a_row_per_dispatch_with_times_speedup_verdict_and_the_first_difference() {
        let t = table(&rows());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("orig us") && lines[0].contains("speedup"));
        assert!(
            lines[1].contains("10.0") && lines[1].contains("20.0"),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("0.50x") && lines[1].contains("identical"));
        assert!(lines[2].contains("3.00x") && lines[2].contains("differs"));
        assert!(lines[2].ends_with("0x7f0000000000+4096"), "{}", lines[2]);
        assert!(lines[3].contains("not run") && lines[4].contains("skipped"));
        assert!(
            lines[5].contains("2 dispatch(es) compared: 1 identical, 0 within tolerance, 1 differ")
        );
        assert!(lines[5].contains("speedup 1.22x"), "{}", lines[5]);
        assert!(t.contains("1 dispatch(es) skipped: variant not run: parameter 2 differs"));
    }

    #[test]
    fn json_lines_end_with_the_summary_and_csv_has_a_row_each() {
        let j = json_lines(&rows()).expect("json");
        let lines: Vec<serde_json::Value> = j
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0]["variant"]["verdict"], "identical");
        assert_eq!(lines[0]["speedup"], 0.5);
        assert_eq!(lines[1]["variant"]["first_difference"]["offset"], 4096);
        assert_eq!(lines[4]["summary"]["differ"], 1);
        let c = csv(&rows()).expect("csv");
        let mut r = csv::Reader::from_reader(c.as_bytes());
        let recs: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
        assert_eq!(recs.len(), 4);
        assert_eq!(&recs[1][10], "differs");
        assert_eq!(&recs[1][16], "4096");
        assert_eq!(&recs[2][18], "variant not run: parameter 2 differs");
    }
}
