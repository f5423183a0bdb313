//! The page around a report: the document, its inline style sheet, and the summary table.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::chart::{render_svg, SortedChart};

/// Inline, so the file is whole on its own: no style sheet, font or script is fetched.
const STYLE: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
  margin: 24px 32px; color: #1d2530; background: #ffffff; line-height: 1.4; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
h2 { font-size: 17px; margin: 28px 0 8px 0; border-bottom: 1px solid #d8dde3; padding-bottom: 4px; }
p.lead { color: #56606b; margin: 0 0 16px 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px; text-align: left; vertical-align: top; border-bottom: 1px solid #eceff2; }
th { background: #f3f5f7; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.name, td.file { font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
td.name { overflow-wrap: anywhere; max-width: 560px; }
td.text { overflow-wrap: anywhere; min-width: 280px; }
td.file { white-space: nowrap; }
table.summary th { background: none; width: 230px; }
tr.bad td { background: #fdecec; }
tr.good td { background: #eaf6ec; }
span.bad { color: #b3261e; font-weight: 600; }
span.good { color: #1e7b34; font-weight: 600; }
figure { margin: 8px 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #eceff2; }
figcaption { color: #56606b; font-size: 13px; }
"#;

/// The whole document: `title` in the head and as the heading, `lead` under it, then `body`.
pub fn page(title: &str, lead: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                p.lead { (lead) }
                (body)
            }
        }
    }
    .into_string()
}

/// Rows of label and value; a value is markup so it may carry its own emphasis.
pub fn summary_table(rows: &[(&str, Markup)]) -> Markup {
    html! {
        table.summary {
            @for (label, value) in rows {
                tr { th { (label) } td { (value) } }
            }
        }
    }
}

/// The chart inline with its caption, or why it could not be drawn (the rest of the report
/// stands without it).
pub fn figure(chart: &SortedChart, caption: &str) -> Markup {
    html! {
        figure {
            @match render_svg(chart) {
                Ok(svg) => (PreEscaped(svg)),
                Err(e) => p { (e.to_string()) },
            }
            figcaption { (caption) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_its_title_and_fetches_nothing() {
        let p = page("a<b>&c", "lead <x>", html! { p { "body" } });
        assert!(p.starts_with("<!DOCTYPE html>"), "{p}");
        assert!(p.contains("<title>a&lt;b&gt;&amp;c</title>"), "{p}");
        assert!(p.contains("lead &lt;x&gt;"), "{p}");
        assert!(!p.contains("a<b>"), "{p}");
        for reference in ["http://", "https://", "src=", "<script", "<link"] {
            assert!(!p.contains(reference), "{reference} in {p}");
        }
    }

    #[test]
    fn a_summary_row_per_label() {
        let t = summary_table(&[("one", html! { "1" }), ("two <2>", html! { "2" })]).into_string();
        assert_eq!(t.matches("<tr>").count(), 2, "{t}");
        assert!(t.contains("two &lt;2&gt;"), "{t}");
    }
}
