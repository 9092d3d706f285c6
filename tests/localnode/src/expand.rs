//! `$(VAR)` expansion as the kubelet does it for `command`, `args` and `env` values.

use std::collections::HashMap;

/// Expands `$(NAME)` references from `vars`; `$$` escapes a `$`; an unknown or malformed
/// reference is left as written (Kubernetes' `third_party/forked/golang/expansion`).
#[must_use]
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            out.push_str(&input[last..i]);
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                    } else {
                        out.push_str(&input[i..]);
                        i = bytes.len();
                    }
                }
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
            last = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&input[last.min(input.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_the_kubelet() {
        let vars: HashMap<String, String> = [
            ("A".to_owned(), "1".to_owned()),
            ("POD_IP".to_owned(), "10.0.0.2".to_owned()),
        ]
        .into();
        assert_eq!(expand("--x=$(A)", &vars), "--x=1");
        assert_eq!(expand("--ip=$(POD_IP):6443", &vars), "--ip=10.0.0.2:6443");
        assert_eq!(expand("$(MISSING)", &vars), "$(MISSING)");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("cost $5", &vars), "cost $5");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("ünï$(A)ç", &vars), "ünï1ç");
        assert_eq!(expand("end$", &vars), "end$");
    }
}
