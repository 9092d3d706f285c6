//! `docs/lifecycle.md` shows the lifecycle matrix of [`kamaji_api::lifecycle::decide`] as it
//! is: the table, how each operation is asked for, and the reason of each pair that is not
//! "together", each between its markers. On a mismatch the test prints what belongs there;
//! `KAMAJI_BLESS=1 cargo test -p kamaji-api --test lifecycle_page` writes it into the page.
// A test file: its helpers fail the test the way the test itself does.
#![allow(clippy::unwrap_used, clippy::panic)]

use kamaji_api::lifecycle::{matrix_markdown, notes_markdown, operations_markdown};

fn page() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lifecycle.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Where the text between `<!-- <name>:begin -->` and `<!-- <name>:end -->` starts and ends.
fn span(page: &str, name: &str) -> (usize, usize) {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let start = page.find(&begin).unwrap_or_else(|| panic!("no {begin}")) + begin.len();
    let stop = page[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("no {end}"))
        + start;
    (start, stop)
}

/// The text between the `name` markers, trimmed.
fn between(page: &str, name: &str) -> String {
    let (start, stop) = span(page, name);
    page[start..stop].trim().to_owned()
}

/// `page` with `text` between the `name` markers.
fn with(page: &str, name: &str, text: &str) -> String {
    let (start, stop) = span(page, name);
    format!("{}\n{}\n{}", &page[..start], text.trim(), &page[stop..])
}

#[test]
fn the_lifecycle_page_shows_the_matrix_as_decided() {
    let mut page = page();
    if std::env::var_os("KAMAJI_BLESS").is_some() {
        for (name, text) in [
            ("matrix", matrix_markdown()),
            ("operations", operations_markdown()),
            ("notes", notes_markdown()),
        ] {
            page = with(&page, name, &text);
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lifecycle.md");
        std::fs::write(path, &page).unwrap();
    }
    for (name, expected) in [
        ("matrix", matrix_markdown()),
        ("operations", operations_markdown()),
        ("notes", notes_markdown()),
    ] {
        let expected = expected.trim();
        assert_eq!(
            between(&page, name),
            expected,
            "docs/lifecycle.md, between the {name} markers, must read:\n{expected}\n"
        );
    }
}
