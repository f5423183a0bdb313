//! `kreplay man [DIR]`: man pages generated from the same definitions as `--help`, one per
//! command (`kreplay.1`, `kreplay-record.1`, ...), each with every flag of its command.
//! clap_mangen renders the sections; the description is rendered here, because clap_mangen
//! fills every line into one paragraph and the main page's examples are a column of commands.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap_mangen::roff::{roman, Roff};
use clap_mangen::Man;

/// One rendered page.
pub struct Page {
    /// `kreplay.1`, `kreplay-record.1`, ...
    pub file_name: String,
    pub roff: Vec<u8>,
}

/// A paragraph of a command's long description.
#[derive(Debug, PartialEq, Eq)]
pub enum Block {
    /// Text the formatter fills.
    Prose(String),
    /// Lines kept as they are (every line indented in the source): examples.
    Example(Vec<String>),
}

/// Splits a description into paragraphs at blank lines; a paragraph whose lines are all
/// indented is an example block, its lines kept with the indentation they share removed.
pub fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    for para in text.split("\n\n") {
        let lines: Vec<&str> = para.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            continue;
        }
        if lines.iter().all(|l| l.starts_with(char::is_whitespace)) {
            let indent = lines
                .iter()
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            out.push(Block::Example(
                lines
                    .iter()
                    .map(|l| l[indent..].trim_end().to_string())
                    .collect(),
            ));
        } else {
            out.push(Block::Prose(
                lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "),
            ));
        }
    }
    out
}

fn description(roff: &mut Roff, cmd: &clap::Command) {
    roff.control("SH", ["DESCRIPTION"]);
    let Some(text) = cmd.get_long_about().or_else(|| cmd.get_about()) else {
        return;
    };
    for (i, block) in blocks(&text.to_string()).into_iter().enumerate() {
        if i > 0 {
            roff.control("PP", []);
        }
        match block {
            Block::Prose(p) => {
                roff.text([roman(p)]);
            }
            Block::Example(lines) => {
                // .EX/.EE (groff and mandoc) turn filling off: one command a line, columns kept.
                roff.control("EX", []);
                for l in lines {
                    roff.text([roman(l)]);
                }
                roff.control("EE", []);
            }
        }
    }
}

fn see_also(roff: &mut Roff, citations: &[&str]) {
    if citations.is_empty() {
        return;
    }
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(citations.join(", "))]);
}

/// One page: clap_mangen's sections around this module's description and SEE ALSO.
fn render(cmd: &clap::Command, see: &[&str]) -> std::io::Result<Vec<u8>> {
    // The footer names the package and version on every page (clap_mangen's default is the
    // command's own name, and subcommands have no version).
    let man = Man::new(cmd.clone()).source(format!("kreplay {}", env!("CARGO_PKG_VERSION")));
    let mut w = Vec::new();
    man.render_title(&mut w)?;
    man.render_name_section(&mut w)?;
    man.render_synopsis_section(&mut w)?;
    let mut own = Roff::new();
    description(&mut own, cmd);
    own.to_writer(&mut w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(&mut w)?;
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut w)?;
    }
    let mut own = Roff::new();
    see_also(&mut own, see);
    own.to_writer(&mut w)?;
    Ok(w)
}

fn page_name(cmd: &clap::Command) -> String {
    cmd.get_display_name().unwrap_or(cmd.get_name()).to_string()
}

/// Every page: the main one first, then one per visible subcommand. Each cites only pages in
/// this set: the main page its subcommands', a subcommand's page the main one.
pub fn pages(cmd: clap::Command) -> std::io::Result<Vec<Page>> {
    // clap's `help` subcommand has no flags of its own and no page.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let main_name = page_name(&cmd);
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    let sub_citations: Vec<String> = subs
        .iter()
        .map(|s| format!("{}(1)", page_name(s)))
        .collect();
    let sub_refs: Vec<&str> = sub_citations.iter().map(String::as_str).collect();
    let main_citation = format!("{main_name}(1)");
    let mut out = vec![Page {
        file_name: format!("{main_name}.1"),
        roff: render(&cmd, &sub_refs)?,
    }];
    for sub in subs {
        out.push(Page {
            file_name: format!("{}.1", page_name(sub)),
            roff: render(sub, &[main_citation.as_str()])?,
        });
    }
    Ok(out)
}

/// Without DIR, the main page on stdout (`kreplay man > kreplay.1`); with DIR (created when
/// missing), every page into it, each file named on stdout.
pub fn run(dir: Option<&Path>, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let pages = pages(cmd)?;
    let Some(dir) = dir else {
        return super::print_generated(|w| w.write_all(&pages[0].roff));
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut listing = String::new();
    for p in &pages {
        let path = dir.join(&p.file_name);
        std::fs::write(&path, &p.roff)
            .with_context(|| format!("cannot write {}", path.display()))?;
        listing += &format!("{}\n", path.display());
    }
    super::print_generated(|w| w.write_all(listing.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indented_paragraphs_are_examples_and_the_rest_prose() {
        let text = "Record one dispatch\ninto a file.\n\n  kreplay list ./app    # which?\n  \
                    kreplay info x.krr\n\nMore prose.";
        assert_eq!(
            blocks(text),
            [
                Block::Prose("Record one dispatch into a file.".into()),
                Block::Example(vec![
                    "kreplay list ./app    # which?".into(),
                    "kreplay info x.krr".into()
                ]),
                Block::Prose("More prose.".into()),
            ]
        );
    }

    #[test]
    fn an_example_keeps_deeper_indentation() {
        assert_eq!(
            blocks("  a\n    b"),
            [Block::Example(vec!["a".into(), "  b".into()])]
        );
    }

    #[test]
    fn a_paragraph_with_one_unindented_line_is_prose() {
        assert_eq!(blocks("x\n  y"), [Block::Prose("x y".into())]);
    }

    /// How an option's entry in OPTIONS may begin, in roff: its first spelling in bold (`-s`
    /// before `--launch-skip`), or a positional's value name, in <> when required, else [].
    fn entry_heads(a: &clap::Arg) -> Vec<String> {
        match (a.get_short(), a.get_long()) {
            (Some(s), _) => vec![format!("\\fB\\-{s}\\fR")],
            (None, Some(l)) => vec![format!("\\fB\\-\\-{}\\fR", l.replace('-', "\\-"))],
            (None, None) => {
                let value = a.get_value_names().map_or_else(
                    || a.get_id().to_string(),
                    |v| v.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" "),
                );
                vec![format!("<\\fI{value}\\fR>"), format!("[\\fI{value}\\fR]")]
            }
        }
    }

    #[test]
    fn one_page_per_command_each_with_every_flag_of_its_command() {
        let mut cmd = crate::cli::command().disable_help_subcommand(true);
        cmd.build();
        let commands: Vec<&clap::Command> = std::iter::once(&cmd)
            .chain(cmd.get_subcommands().filter(|s| !s.is_hide_set()))
            .collect();
        let pages = pages(crate::cli::command()).expect("pages render");
        assert_eq!(pages.len(), commands.len());
        assert!(pages.iter().any(|p| p.file_name == "kreplay-record.1"));
        for (c, p) in commands.iter().zip(&pages) {
            assert_eq!(p.file_name, format!("{}.1", page_name(c)));
            let roff = String::from_utf8_lossy(&p.roff);
            let options = &roff[roff.find(".SH OPTIONS").expect("an OPTIONS section")..];
            let mut flags = 0;
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                let heads = entry_heads(a);
                assert!(
                    options
                        .lines()
                        .any(|l| heads.iter().any(|h| l.starts_with(h.as_str()))),
                    "{}: no entry {heads:?} for {}",
                    p.file_name,
                    a.get_id()
                );
                flags += 1;
            }
            assert!(flags > 1, "{}: only --help?", p.file_name);
        }
    }

    #[test]
    fn the_main_page_shows_its_examples_unfilled_and_cites_only_written_pages() {
        let pages = pages(crate::cli::command()).expect("pages render");
        let main = String::from_utf8_lossy(&pages[0].roff).replace("\\-", "-");
        assert_eq!(pages[0].file_name, "kreplay.1");
        let ex = main.find("\n.EX\n").expect("an example block");
        assert!(main[ex..].contains("kreplay record"), "{main}");
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name.replace(".1", "(1)"))
            .collect();
        for cited in main.split(|c: char| c.is_whitespace() || c == ',') {
            let cited = cited.trim_start_matches("\\fB").trim_end_matches("\\fR");
            if cited.starts_with("kreplay") && cited.ends_with("(1)") {
                assert!(
                    names.iter().any(|n| n == cited),
                    "{cited} cited, not written"
                );
            }
        }
        assert!(!names.iter().any(|n| n == "kreplay-help(1)"));
    }
}
