//! Rego v0 rules with several bodies, `p[x] { a }` then `} {` and another body: OPA reads one
//! rule per body, all with the same head; regorus refuses the form for set rules. [`expand`]
//! repeats the head on each `} {` line (`} p[x] {`), which both read the same way, keeping
//! every line where it was (line numbers in errors stay right).
//! Only heads written on the line that opens the rule are repeated; other forms are left as
//! they are.

use super::lint::code_lines;

/// `rego` with the head of each multi-body rule repeated on its `} {` lines, and how many
/// bodies were given a head.
pub fn expand(rego: &str) -> (String, usize) {
    let code = code_lines(rego);
    let mut depth = 0i64;
    let mut head: Option<String> = None;
    let mut expanded = 0;
    let mut out = Vec::with_capacity(code.len());
    for (line, code) in rego.lines().zip(&code) {
        let code = code.trim();
        let opens = code.matches(['{', '[', '(']).count() as i64;
        let closes = code.matches(['}', ']', ')']).count() as i64;
        let mut text = line.to_string();
        if depth == 0 && code.ends_with('{') && opens - closes == 1 {
            // The head as written (strings included); a line ending in a comment is not used.
            head = line
                .trim()
                .strip_suffix('{')
                .map(|h| h.trim_end().to_string());
        } else if depth == 1 && code == "} {" {
            if let Some(head) = &head {
                let indent = &line[..line.len() - line.trim_start().len()];
                text = format!("{indent}}} {head} {{");
                expanded += 1;
            }
        }
        depth += opens - closes;
        if depth <= 0 {
            depth = 0;
            if !code.ends_with('{') {
                head = None;
            }
        }
        out.push(text);
    }
    let mut text = out.join("\n");
    if rego.ends_with('\n') {
        text.push('\n');
    }
    (text, expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_body_gets_the_head() {
        let rego = "package t\n\nviolation[{\"msg\": m}] {\n  m := \"a\"\n} {\n  m := \"b\"\n}\n\nf(x) = y {\n  y := x\n  } {\n  y := 1\n}\n";
        let (text, n) = expand(rego);
        assert_eq!(n, 2);
        assert_eq!(
            text,
            "package t\n\nviolation[{\"msg\": m}] {\n  m := \"a\"\n} violation[{\"msg\": m}] {\n  m := \"b\"\n}\n\nf(x) = y {\n  y := x\n  } f(x) = y {\n  y := 1\n}\n"
        );
        assert_eq!(text.lines().count(), rego.lines().count());
    }

    #[test]
    fn other_forms_are_left_alone() {
        for rego in [
            "p { true }\nq {\n  x := {1}\n  y := [\n    1,\n  ]\n}\n",
            "p {\n  true\n} else {\n  false\n}\n",
            // A head on several lines is not repeated.
            "violation[{\n  \"msg\": m,\n}] {\n  m := 1\n} {\n  m := 2\n}\n",
            "# } {\nx := \"} {\"\n",
            "p[x] { # the head\n  x := 1\n} {\n  x := 2\n}\n",
        ] {
            assert_eq!(expand(rego), (rego.to_string(), 0), "{rego:?}");
        }
    }
}
