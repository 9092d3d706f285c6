//! A small reader of the workspace's Rust sources for the structure tests (`layers`,
//! `function_length`): comments, string and character literals are blanked (newlines kept, so
//! line numbers hold), and so is every `#[cfg(test)]` item, which is not product code.
// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// One source file.
pub struct SourceFile {
    /// Its path relative to the workspace root.
    pub path: PathBuf,
    /// Its text as written.
    pub text: String,
    /// Its product code: [`SourceFile::text`] with comments, literals and test items blanked.
    pub code: Vec<char>,
}

impl SourceFile {
    /// Reads `path` (relative to the workspace root).
    pub fn read(path: &Path) -> Self {
        let full = workspace_root().join(path);
        let text =
            std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
        Self::of_text(path, text)
    }

    /// The file `path` holding `text`.
    pub fn of_text(path: &Path, text: String) -> Self {
        let code = blank_test_items(blank_comments_and_literals(&text));
        Self {
            path: path.to_owned(),
            text,
            code,
        }
    }

    /// The 1-based line of the character at `at` in [`SourceFile::code`].
    pub fn line_of(&self, at: usize) -> usize {
        1 + self.code[..at].iter().filter(|c| **c == '\n').count()
    }

    /// Line `n` (1-based) as written.
    pub fn line(&self, n: usize) -> &str {
        self.text.lines().nth(n - 1).unwrap_or_default()
    }
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir` (relative to the workspace root), sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        let entries = std::fs::read_dir(workspace_root().join(&d))
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let name = entry.unwrap().file_name();
            let path = d.join(&name);
            if workspace_root().join(&path).is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Whether `c` can be part of an identifier.
pub fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `src` with comments, string literals (raw and byte ones too) and character literals
/// replaced by spaces, newlines kept.
fn blank_comments_and_literals(src: &str) -> Vec<char> {
    let s: Vec<char> = src.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '/' && at(i + 1) == '/' {
            let end = (i..s.len()).find(|&j| s[j] == '\n').unwrap_or(s.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && at(i + 1) == '*' {
            let (mut depth, mut j) = (0, i);
            while j < s.len() {
                if s[j] == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(hashes) = raw_string_at(&s, i) {
            let open = i + 1 + hashes;
            let mut j = open + 1;
            while j < s.len() && !(s[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#')) {
                j += 1;
            }
            blank(&mut out, open + 1, j);
            i = j + 1 + hashes;
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                if s[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal (a lifetime has no closing quote right after its first
            // character).
            let mut j = i + 1;
            while j < s.len() && s[j] != '\'' {
                if s[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The number of `#` of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) whose `r` is at `i`.
fn raw_string_at(s: &[char], i: usize) -> Option<usize> {
    let before = |k: usize| i.checked_sub(k).map(|j| s[j]);
    let starts = match before(1) {
        None => true,
        Some('b') => before(2).is_none_or(|c| !is_ident(c)),
        Some(c) => !is_ident(c),
    };
    if s[i] != 'r' || !starts {
        return None;
    }
    let hashes = s[i + 1..].iter().take_while(|c| **c == '#').count();
    (s.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

/// The end of the item whose head starts at `from` in `code`: the first `;` or `{` outside
/// parentheses and brackets, and for a `{` its matching `}`. Returns the index of that last
/// character and, for a body, the index of its `{`.
pub fn item_end(code: &[char], from: usize) -> (usize, Option<usize>) {
    let mut depth = 0i32;
    for j in from..code.len() {
        match code[j] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return (j, None),
            '{' if depth == 0 => {
                let mut braces = 0;
                for (k, c) in code.iter().enumerate().skip(j) {
                    match c {
                        '{' => braces += 1,
                        '}' => {
                            braces -= 1;
                            if braces == 0 {
                                return (k, Some(j));
                            }
                        }
                        _ => {}
                    }
                }
                return (code.len() - 1, Some(j));
            }
            _ => {}
        }
    }
    (code.len().saturating_sub(1), None)
}

/// Every index where `word` starts in `code` as a whole word.
pub fn find_word(code: &[char], word: &str) -> Vec<usize> {
    let w: Vec<char> = word.chars().collect();
    (0..code.len().saturating_sub(w.len() - 1))
        .filter(|&i| code[i..i + w.len()] == w[..])
        .filter(|&i| i == 0 || !is_ident(code[i - 1]))
        .filter(|&i| code.get(i + w.len()).is_none_or(|c| !is_ident(*c)))
        .collect()
}

/// `code` with every `#[cfg(test)]` item blanked.
fn blank_test_items(mut code: Vec<char>) -> Vec<char> {
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= code.len() {
        if code[i..i + marker.len()] == marker[..] {
            let (end, _) = item_end(&code, i + marker.len());
            for c in &mut code[i..=end] {
                if *c != '\n' {
                    *c = ' ';
                }
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    code
}
