//! `kreplay profile`'s report: one row per profiled dispatch, as a table (stderr), JSON (one
//! object per line) or CSV. Pure formatting, tested on the CPU.

use kreplay_protocol::report::ProfileRow;

use crate::figures::{dims, micros_of_ns};

fn verdict(r: &ProfileRow) -> &'static str {
    match (r.skipped.is_some(), r.deterministic) {
        (true, _) => "skipped",
        (false, Some(true)) => "yes",
        (false, Some(false)) => "NO",
        (false, None) => "-",
    }
}

/// The metric names of the rows, in the order first seen (every row asks for the same set;
/// rows without counters have none).
fn metric_names(rows: &[ProfileRow]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        for m in &r.metrics {
            if !names.contains(&m.name) {
                names.push(m.name.clone());
            }
        }
    }
    names
}

/// A counter for a person: whole numbers with thousands separators, the rest to 2 decimals.
fn counter(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        let digits = format!("{}", v.abs() as u64);
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if v < 0.0 {
            grouped.insert(0, '-');
        }
        grouped
    } else {
        format!("{v:.2}")
    }
}

/// The table `kreplay profile` prints on stderr: kernel, launch index, grid, block, passes,
/// median and minimum time (µs), write set, restore time (µs), deterministic, then one column
/// per metric (its unit in the header); skipped dispatches and missing counters are explained
/// below the table.
pub fn table(rows: &[ProfileRow]) -> String {
    let names = metric_names(rows);
    let heads = metric_heads(rows, &names);
    let metric_cells = |r: &ProfileRow| -> String {
        let mut line = String::new();
        for (n, h) in names.iter().zip(&heads) {
            let v = r
                .metrics
                .iter()
                .find(|m| &m.name == n)
                .map_or("-".to_string(), |m| counter(m.value));
            line.push_str(&format!(" {v:>w$}", w = h.len()));
        }
        line
    };
    let mut out = format!(
        "{:<28} {:>7} {:>6} {:>14} {:>12} {:>6} {:>11} {:>10} {:>11} {:>11} {:>6}",
        "kernel",
        "rank",
        "launch",
        "grid",
        "block",
        "passes",
        "median us",
        "min us",
        "write set",
        "restore us",
        "determ"
    );
    for h in &heads {
        out.push_str(&format!(" {h}"));
    }
    out.push('\n');
    for r in rows {
        out.push_str(&row_cells(r));
        out.push_str(&metric_cells(r));
        out.push('\n');
    }
    out.push_str(&notes(rows));
    out
}

/// The header of each metric's column: its name, and its unit when it has one.
fn metric_heads(rows: &[ProfileRow], names: &[String]) -> Vec<String> {
    let units: Vec<String> = names
        .iter()
        .map(|n| {
            rows.iter()
                .flat_map(|r| r.metrics.iter())
                .find(|m| &m.name == n)
                .map(|m| m.unit.clone())
                .unwrap_or_default()
        })
        .collect();
    names
        .iter()
        .zip(&units)
        .map(|(n, u)| {
            if u.is_empty() {
                n.clone()
            } else {
                format!("{n} ({u})")
            }
        })
        .collect()
}

/// The fixed columns of one row (the metric columns follow).
fn row_cells(r: &ProfileRow) -> String {
    let name: String = r.short_name.chars().take(28).collect();
    format!(
        "{:<28} {:>7} {:>6} {:>14} {:>12} {:>6} {:>11} {:>10} {:>11} {:>11} {:>6}",
        name,
        r.rank.map_or("-".to_string(), |x| x.to_string()),
        r.launch_index,
        dims(r.grid),
        dims(r.block),
        r.durations_ns.len(),
        if r.skipped.is_some() {
            "-".into()
        } else {
            micros_of_ns(r.median_ns)
        },
        if r.skipped.is_some() {
            "-".into()
        } else {
            micros_of_ns(r.min_ns)
        },
        kreplay_format::units::bytes(r.write_set_bytes),
        if r.durations_ns.len() > 1 {
            micros_of_ns(r.restore_median_ns)
        } else {
            "-".into()
        },
        verdict(r)
    )
}

/// Why a dispatch was not profiled, and each distinct reason counters are missing, a line each.
fn notes(rows: &[ProfileRow]) -> String {
    let mut out = String::new();
    for r in rows {
        if let Some(why) = &r.skipped {
            out.push_str(&format!(
                "{} (launch {}): not profiled: {why}\n",
                r.short_name, r.launch_index
            ));
        }
    }
    let mut said: Vec<&str> = Vec::new();
    for r in rows {
        if let Some(why) = &r.metrics_error {
            if !said.contains(&why.as_str()) {
                said.push(why);
                out.push_str(&format!(
                    "{} (launch {}): no counters: {why}\n",
                    r.short_name, r.launch_index
                ));
            }
        }
    }
    out
}

/// One JSON object per dispatch, one per line.
pub fn json_lines(rows: &[ProfileRow]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for r in rows {
        out.push_str(&serde_json::to_string(r)?);
        out.push('\n');
    }
    Ok(out)
}

/// A header and one CSV row per dispatch (durations joined with `;`; one column per metric).
pub fn csv(rows: &[ProfileRow]) -> Result<String, csv::Error> {
    let names = metric_names(rows);
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = [
        "kernel",
        "short_name",
        "pid",
        "rank",
        "match_index",
        "launch_index",
        "grid",
        "block",
        "passes",
        "median_ns",
        "min_ns",
        "durations_ns",
        "write_set_bytes",
        "reachable_bytes",
        "restore_median_ns",
        "deterministic",
        "cache_flush",
        "skipped",
        "pass_overhead_ns",
        "counter_passes",
        "metrics_error",
    ]
    .into_iter()
    .map(String::from)
    .chain(names.iter().cloned());
    w.write_record(header)?;
    for r in rows {
        let fixed = [
            r.kernel.clone(),
            r.short_name.clone(),
            r.pid.to_string(),
            r.rank.map_or(String::new(), |x| x.to_string()),
            r.match_index.to_string(),
            r.launch_index.to_string(),
            dims(r.grid),
            dims(r.block),
            r.durations_ns.len().to_string(),
            r.median_ns.to_string(),
            r.min_ns.to_string(),
            r.durations_ns
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(";"),
            r.write_set_bytes.to_string(),
            r.reachable_bytes.to_string(),
            r.restore_median_ns.to_string(),
            r.deterministic.map_or(String::new(), |d| d.to_string()),
            r.cache_flush.to_string(),
            r.skipped.clone().unwrap_or_default(),
            r.pass_overhead_ns.to_string(),
            r.counter_passes.to_string(),
            r.metrics_error.clone().unwrap_or_default(),
        ];
        let metrics = names.iter().map(|n| {
            r.metrics
                .iter()
                .find(|m| &m.name == n)
                .map_or(String::new(), |m| m.value.to_string())
        });
        w.write_record(fixed.into_iter().chain(metrics))?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<ProfileRow> {
        vec![
            ProfileRow {
                kernel: "_Z5saxpyifPKfPf".into(),
                short_name: "saxpy".into(),
                match_index: 1,
                launch_index: 3,
                grid: [4096, 1, 1],
                block: [256, 1, 1],
                durations_ns: vec![15000, 14000, 14500],
                median_ns: 14500,
                min_ns: 14000,
                write_set_bytes: 4 << 20,
                restore_median_ns: 21000,
                deterministic: Some(true),
                cache_flush: true,
                ..Default::default()
            },
            ProfileRow {
                kernel: "graph_node".into(),
                short_name: "graph_node".into(),
                launch_index: 9,
                skipped: Some("a kernel node of a CUDA graph, x".into()),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn the_table_has_a_row_per_dispatch_with_units_and_says_why_one_was_skipped() {
        let t = table(&rows());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("median us") && lines[0].contains("write set"));
        assert!(
            lines[1].starts_with("saxpy")
                && lines[1].contains("14.5")
                && lines[1].contains("4096x1x1")
        );
        assert!(
            lines[1].contains("4.0 MiB") && lines[1].contains("21.0") && lines[1].ends_with("yes")
        );
        assert!(lines[2].starts_with("graph_node") && lines[2].ends_with("skipped"));
        assert_eq!(
            lines[3],
            "graph_node (launch 9): not profiled: a kernel node of a CUDA graph, x"
        );
    }

    #[test]
    fn json_and_csv_carry_every_dispatch() {
        let j = json_lines(&rows()).expect("json");
        let back: Vec<ProfileRow> = j
            .lines()
            .map(|l| serde_json::from_str(l).expect("a row per line"))
            .collect();
        assert_eq!(back, rows());
        let c = csv(&rows()).expect("csv");
        let mut r = csv::Reader::from_reader(c.as_bytes());
        let recs: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
        assert_eq!(recs.len(), 2);
        assert_eq!(&recs[0][11], "15000;14000;14500");
        assert_eq!(&recs[1][17], "a kernel node of a CUDA graph, x");
    }

    #[test]
    fn metrics_get_a_column_each_with_their_unit_and_a_missing_set_is_explained_once() {
        use kreplay_protocol::report::MetricValue;
        let mut rs = rows();
        rs[0].metrics = vec![
            MetricValue {
                name: "smsp__inst_executed.sum".into(),
                value: 1234567.0,
                unit: "inst".into(),
            },
            MetricValue {
                name: "sm__throughput.avg.pct_of_peak_sustained_elapsed".into(),
                value: 12.3456,
                unit: "%".into(),
            },
        ];
        rs[0].counter_passes = 3;
        let mut third = rs[0].clone();
        third.launch_index = 11;
        third.metrics.clear();
        third.metrics_error = Some("CUPTI: busy".into());
        let mut fourth = third.clone();
        fourth.launch_index = 12;
        rs.push(third);
        rs.push(fourth);
        let t = table(&rs);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].ends_with(
            "smsp__inst_executed.sum (inst) sm__throughput.avg.pct_of_peak_sustained_elapsed (%)"
        ));
        assert!(lines[1].contains(" 1,234,567 ") && lines[1].ends_with(" 12.35"));
        assert!(lines[2].ends_with(" -"), "a skipped row has no counters");
        assert_eq!(
            t.matches("no counters: CUPTI: busy").count(),
            1,
            "the same reason is said once"
        );
        let c = csv(&rs).expect("csv");
        let mut r = csv::Reader::from_reader(c.as_bytes());
        let head = r.headers().expect("header").clone();
        let at = head
            .iter()
            .position(|h| h == "smsp__inst_executed.sum")
            .expect("a metric column");
        let recs: Vec<csv::StringRecord> = r.records().map(|x| x.expect("record")).collect();
        assert_eq!(&recs[0][at], "1234567");
        assert_eq!(&recs[1][at], "", "no value where none was collected");
        let j = json_lines(&rs).expect("json");
        let back: Vec<ProfileRow> = j
            .lines()
            .map(|l| serde_json::from_str(l).expect("a row per line"))
            .collect();
        assert_eq!(back, rs);
    }

    #[test]
    fn counters_read_as_people_write_them() {
        assert_eq!(counter(0.0), "0");
        assert_eq!(counter(999.0), "999");
        assert_eq!(counter(1000.0), "1,000");
        assert_eq!(counter(-1234567.0), "-1,234,567");
        assert_eq!(counter(0.125), "0.12");
    }
}
