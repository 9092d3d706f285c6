//! Short, named steps (issue 49): no product function in `crates/*/src` is longer than
//! [`MAX_LINES`] lines, counted from its `fn` line to its closing brace, and no `#[allow(…)]`
//! goes without a reason in a comment (on the line above it, or after it on its line). Test
//! items (`#[cfg(test)]`), `tests/` and `benches/` are not product code. Every offender is
//! printed.
// A test file: its helpers fail the test the way the test itself does.
#![allow(clippy::unwrap_used, clippy::panic)]

mod source;

use std::path::Path;

use source::{SourceFile, find_word, is_ident, item_end, rust_files};

/// The longest a product function may be, in lines.
const MAX_LINES: usize = 80;

/// Every product source file of the workspace's crates.
fn product_files() -> Vec<SourceFile> {
    let crates = source::workspace_root().join("crates");
    let mut names: Vec<_> = std::fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
        .iter()
        .flat_map(|name| rust_files(&Path::new("crates").join(name).join("src")))
        .map(|p| SourceFile::read(&p))
        .collect()
}

/// The functions of `file` longer than [`MAX_LINES`]: (lines, line of `fn`, name).
fn long_functions(file: &SourceFile) -> Vec<(usize, usize, String)> {
    let code = &file.code;
    let mut out = Vec::new();
    for at in find_word(code, "fn") {
        let name_start = (at + 2..code.len()).find(|&i| !code[i].is_whitespace());
        let Some(name_start) = name_start.filter(|&i| i > at + 2 && is_ident(code[i])) else {
            continue; // `fn(…)`: a function pointer type
        };
        let name: String = code[name_start..]
            .iter()
            .take_while(|c| is_ident(**c))
            .collect();
        let (end, body) = item_end(code, name_start);
        if body.is_none() {
            continue;
        }
        let (first, last) = (file.line_of(at), file.line_of(end));
        let lines = last - first + 1;
        if lines > MAX_LINES {
            out.push((lines, first, name));
        }
    }
    out
}

/// The `#[allow(…)]` and `#![allow(…)]` attributes of `file` with no reason in a comment: the
/// line of each.
fn reasonless_allows(file: &SourceFile) -> Vec<usize> {
    let code = &file.code;
    let mut out = Vec::new();
    for at in find_word(code, "allow") {
        let before: String = code[..at].iter().rev().take(3).collect::<String>();
        let attribute = before.starts_with("[#") || before.starts_with("[!#");
        if !attribute || code.get(at + 5) != Some(&'(') {
            continue;
        }
        let close = matching_bracket(code, at);
        let first = file.line_of(at);
        let last = file.line_of(close);
        let above = first
            .checked_sub(1)
            .filter(|n| *n > 0)
            .map(|n| file.line(n).trim_start())
            .is_some_and(|l| l.starts_with("//") && !l.starts_with("///") && !l.starts_with("//!"));
        let column = close
            - code[..close]
                .iter()
                .rposition(|c| *c == '\n')
                .map_or(0, |n| n + 1);
        let trailing = file
            .line(last)
            .chars()
            .skip(column)
            .collect::<String>()
            .contains("//");
        if !above && !trailing {
            out.push(first);
        }
    }
    out
}

/// The `]` closing the attribute whose name starts at `at` (inside its `[`).
fn matching_bracket(code: &[char], at: usize) -> usize {
    let mut depth = 1;
    for (i, c) in code.iter().enumerate().skip(at) {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len() - 1
}

#[test]
fn no_product_function_is_long_and_no_allow_lacks_a_reason() {
    let mut failing = Vec::new();
    for file in product_files() {
        let path = file.path.display().to_string();
        let mut found: Vec<String> = long_functions(&file)
            .into_iter()
            .map(|(lines, line, name)| format!("{path}:{line}: fn {name}: {lines} lines"))
            .collect();
        found.extend(reasonless_allows(&file).into_iter().map(|line| {
            format!(
                "{path}:{line}: #[allow] without a reason: {}",
                file.line(line).trim()
            )
        }));
        failing.extend(found);
    }
    for offender in &failing {
        println!("offender: {offender}");
    }
    assert!(
        failing.is_empty(),
        "functions over {MAX_LINES} lines or allows without a reason:\n{}",
        failing.join("\n")
    );
}

/// The reader counts a function from its `fn` line to its closing brace, ignores braces in
/// literals and comments and test items, and takes a comment above or after an `#[allow]` as
/// its reason (a doc comment is none).
#[test]
fn the_reader_counts_lines_and_reasons_as_written() {
    let body = "    let s = \"}{\";\n".repeat(MAX_LINES - 1);
    let text = format!(
        "fn long() {{\n{body}}}\nfn short() {{ let c = '}}'; }}\n\
         // a reason\n#[allow(dead_code)]\nfn a() {{}}\n\
         #[allow(dead_code)] // a reason\nfn b() {{}}\n\
         /// a doc, no reason\n#[allow(dead_code)]\nfn c() {{}}\n\
         #[cfg(test)]\nmod tests {{ #[allow(dead_code)]\nfn d() {{}} }}\n"
    );
    let file = SourceFile::of_text(Path::new("x.rs"), text);
    let long: Vec<_> = long_functions(&file)
        .into_iter()
        .map(|f| (f.0, f.2))
        .collect();
    assert_eq!(long, [(MAX_LINES + 1, "long".to_owned())]);
    let line = file
        .text
        .lines()
        .position(|l| l.starts_with("/// a doc"))
        .unwrap()
        + 2;
    assert_eq!(reasonless_allows(&file), [line]);
}
