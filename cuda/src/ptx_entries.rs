//! Test aid: the kernel names a PTX text defines, so the shipped PTX can be checked against
//! the names this crate looks up, without a driver.

/// The name after each `.entry` directive, in order.
pub fn entry_names(ptx: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = ptx.split_whitespace();
    while let Some(w) = words.next() {
        if w != ".entry" {
            continue;
        }
        if let Some(next) = words.next() {
            let name: String = next
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

#[test]
fn names_follow_entry_directives_up_to_their_parameter_list() {
    let ptx = ".visible .entry first(\n.param .u64 p)\n{}\n.entry $second (\n)\n// .entryless\n";
    assert_eq!(entry_names(ptx), vec!["first", "$second"]);
    assert!(entry_names(".version 7.0\n.target sm_70\n").is_empty());
}
