//! Skipping a Rego string literal when scanning Rego as text (the nesting guard, the
//! Gatekeeper lints).

use std::str::Chars;

/// Consumes the rest of a `"…"` string whose opening quote was just read, escapes included.
/// Returns true when the string ended at a line break rather than its closing quote: Rego
/// strings are one line, so a stray quote does not hide the rest of the text.
pub(crate) fn skip_quoted(chars: &mut Chars) -> bool {
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '"' => return false,
            '\n' => return true,
            _ => {}
        }
    }
    false
}
