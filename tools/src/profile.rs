//! `kreplay profile`'s report: one row per profiled dispatch, as a table (stderr), JSON (one
//! object per line) or CSV. Pure formatting, tested on the CPU.

use kreplay_protocol::report::ProfileRow;

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

fn dims(d: [u32; 3]) -> String {
    format!("{}x{}x{}", d[0], d[1], d[2])
}

fn verdict(r: &ProfileRow) -> &'static str {
    match (r.skipped.is_some(), r.deterministic) {
        (true, _) => "skipped",
        (false, Some(true)) => "yes",
        (false, Some(false)) => "NO",
        (false, None) => "-",
    }
}

/// The table `kreplay profile` prints on stderr: kernel, launch index, grid, block, passes,
/// median and minimum time (µs), write set, restore time (µs), deterministic; skipped
/// dispatches say why below the table.
pub fn table(rows: &[ProfileRow]) -> String {
    let mut out = format!(
        "{:<28} {:>7} {:>6} {:>14} {:>12} {:>6} {:>11} {:>10} {:>11} {:>11} {:>6}\n",
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
    for r in rows {
        let name: String = r.short_name.chars().take(28).collect();
        out.push_str(&format!(
            "{:<28} {:>7} {:>6} {:>14} {:>12} {:>6} {:>11} {:>10} {:>11} {:>11} {:>6}\n",
            name,
            r.rank.map_or("-".to_string(), |x| x.to_string()),
            r.launch_index,
            dims(r.grid),
            dims(r.block),
            r.durations_ns.len(),
            if r.skipped.is_some() {
                "-".into()
            } else {
                us(r.median_ns)
            },
            if r.skipped.is_some() {
                "-".into()
            } else {
                us(r.min_ns)
            },
            kreplay_format::units::bytes(r.write_set_bytes),
            if r.durations_ns.len() > 1 {
                us(r.restore_median_ns)
            } else {
                "-".into()
            },
            verdict(r)
        ));
    }
    for r in rows {
        if let Some(why) = &r.skipped {
            out.push_str(&format!(
                "{} (launch {}): not profiled: {why}\n",
                r.short_name, r.launch_index
            ));
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

/// A header and one CSV row per dispatch (durations joined with `;`).
pub fn csv(rows: &[ProfileRow]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
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
    ])?;
    for r in rows {
        w.write_record([
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
        ])?;
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
}
