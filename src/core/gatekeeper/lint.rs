//! Where regorus (as poolguard configures it) and OPA read the same Rego differently, found by
//! running gatekeeper-library's suites on both:
//!
//! - a line starting with `(` continues the line before it as a call in regorus; OPA starts a
//!   new expression ([`errors`]: refused at load, the result would silently differ);
//! - a v0 set rule with several bodies `p[x] { a } { b }` is refused by regorus's parser:
//!   [`super::bodies`] writes one rule per body first, as OPA reads it;
//! - `not f(x, y)` where `y` is undefined is true in regorus; OPA makes the whole rule
//!   undefined ([`warnings`]);
//! - `sprintf` with fewer arguments than verbs is an evaluation error in regorus; OPA writes
//!   `%!v(MISSING)` ([`warnings`]).
//!
//! The scan is textual: it skips comments and strings, and reports line numbers of the text it
//! was given.

use crate::policy::string_literal::skip_quoted;

/// The code of each line: comments and the contents of strings removed (strings kept as `""`).
pub(super) fn code_lines(rego: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut raw = false;
    for line in rego.lines() {
        let mut code = String::new();
        let mut chars = line.chars();
        if raw {
            match line.find('`') {
                Some(end) => {
                    raw = false;
                    chars = line[end + 1..].chars();
                    code.push('"');
                }
                None => {
                    out.push(String::new());
                    continue;
                }
            }
        }
        while let Some(c) = chars.next() {
            match c {
                '#' => break,
                '"' => {
                    // A line has no line break: the string ends at its quote or the line's end.
                    skip_quoted(&mut chars);
                    code.push_str("\"\"");
                }
                '`' => {
                    let rest: String = chars.by_ref().collect();
                    match rest.find('`') {
                        Some(end) => {
                            code.push_str("\"\"");
                            chars = String::new().chars();
                            code.push_str(&code_lines(&rest[end + 1..]).concat());
                        }
                        None => {
                            raw = true;
                            code.push('"');
                        }
                    }
                    break;
                }
                c => code.push(c),
            }
        }
        out.push(code);
    }
    out
}

/// Constructs that would silently change a result: a line starting with `(` after a line that
/// ends an expression. Each as `line N: why`.
pub fn errors(rego: &str) -> Vec<String> {
    let lines = code_lines(rego);
    let mut found = Vec::new();
    let mut previous: Option<(usize, &str)> = None;
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim();
        if code.is_empty() {
            continue;
        }
        if let (true, Some((at, before))) = (code.starts_with('('), previous) {
            let ends_value = before
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ')' | ']' | '"'));
            if ends_value {
                found.push(format!(
                    "line {}: starts with `(` after line {at} ends a value: regorus reads it as a call continuing line {at}, OPA as a new expression; join the lines or end line {at} with `;`",
                    i + 1,
                    at = at + 1
                ));
            }
        }
        previous = Some((i, code));
    }
    found
}

/// Constructs whose result may differ, without certainty: `not f(..)` with an argument that
/// reads a reference (`a.b`, `a[b]`), and `sprintf` with a literal format and argument list
/// of different lengths. Each as `line N: why`.
pub fn warnings(rego: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, code) in code_lines(rego).iter().enumerate() {
        let n = i + 1;
        if let Some(args) = negated_call_args(code) {
            if top_level(args).into_iter().any(may_be_undefined) {
                found.push(format!(
                    "line {n}: `not` of a call with a reference argument: if the reference is undefined, regorus makes `not` true while OPA makes the rule undefined"
                ));
            }
        }
    }
    for (line, verbs, args) in sprintf_calls(rego) {
        if verbs != args {
            found.push(format!(
                "line {line}: sprintf with {verbs} verbs and {args} arguments: regorus fails the evaluation, OPA writes %!v(MISSING) or %!(EXTRA)"
            ));
        }
    }
    found
}

/// The arguments of a call's argument text, split at the commas outside brackets.
fn top_level(args: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in args.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(args[start..].trim());
    out
}

/// Whether an argument reads a reference that may be undefined: it has a `.` or `[`, and is
/// neither `input.review` (always there) nor an `object.get` (which has a default).
fn may_be_undefined(arg: &str) -> bool {
    (arg.contains('.') || arg.contains('['))
        && arg != "input.review"
        && !arg.starts_with("object.get(")
}

/// The argument text of a `not name(...)` call on a line of code, if there is one.
fn negated_call_args(code: &str) -> Option<&str> {
    let at = code.find("not ")?;
    if at > 0
        && code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    {
        return None;
    }
    let rest = code[at + 4..].trim_start();
    let name_len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(rest.len());
    if name_len == 0 || !rest[name_len..].starts_with('(') {
        return None;
    }
    let args = &rest[name_len + 1..];
    Some(args.rfind(')').map_or(args, |end| &args[..end]))
}

/// Every `sprintf("literal", [a, b])` in `rego`: its line, the verbs in the format (`%%` not
/// counted) and the arguments in the list.
fn sprintf_calls(rego: &str) -> Vec<(usize, usize, usize)> {
    let mut calls = Vec::new();
    for (at, _) in rego.match_indices("sprintf(") {
        let line = rego[..at].matches('\n').count() + 1;
        let rest = rego[at + "sprintf(".len()..].trim_start();
        let Some(format) = rest.strip_prefix('"') else {
            continue;
        };
        let mut verbs = 0;
        let mut end = None;
        let mut chars = format.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = Some(i);
                    break;
                }
                '%' => match chars.next() {
                    Some((_, '%')) | None => {}
                    Some(_) => verbs += 1,
                },
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        let after = format[end + 1..].trim_start();
        let Some(list) = after.strip_prefix(',').map(str::trim_start) else {
            continue;
        };
        let Some(list) = list.strip_prefix('[') else {
            continue; // not a literal list
        };
        let (mut depth, mut args, mut any) = (0i32, 0, false);
        let mut in_string = false;
        let mut escaped = false;
        for c in list.chars() {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => {
                    in_string = true;
                    any = true;
                }
                '[' | '(' | '{' => {
                    depth += 1;
                    any = true;
                }
                ']' | ')' | '}' if depth == 0 => break,
                ']' | ')' | '}' => depth -= 1,
                ',' if depth == 0 => args += 1,
                c if !c.is_whitespace() => any = true,
                _ => {}
            }
        }
        if any {
            args += 1;
        }
        calls.push((line, verbs, args));
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paren_line_after_a_value_is_an_error() {
        let rego = "package p\nviolation[{\"msg\": m}] {\n  m := f\n  (x)\n}\n";
        let errors = errors(rego);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("line 4: starts with `(` after line 3"),
            "{errors:?}"
        );
        // After an operator or a comma the expression goes on in both engines; comments and
        // strings do not count.
        for fine in [
            "x := a +\n  (b)\n",
            "x := f(a,\n  (b))\n",
            "x := a # (\n# y\n",
            "x := \"a\"; # c\ny := 1\n",
            "x := `raw\n(text`\n",
        ] {
            assert_eq!(super::errors(fine), Vec::<String>::new(), "{fine:?}");
        }
        assert_eq!(super::errors("x := a # note\n(b)\n").len(), 1);
    }

    #[test]
    fn negated_calls_with_references_and_sprintf_mismatches_are_warned() {
        let rego = "package p\nv { not startswith(input.x, \"a\") }\nw { not f(y) }\nx { not f(input.review, object.get(a, \"b\", 1)) }\nm := sprintf(\"%v and %v\", [a])\nn := sprintf(\"%v %%\", [a])\no := sprintf(\"%v\", [f(a, b)])\n";
        let warnings = warnings(rego);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("line 2: `not` of a call"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with("line 5: sprintf with 2 verbs and 1 arguments"),
            "{warnings:?}"
        );
    }
}
