//! CEL expressions as a small typed tree: what the expressions of the native objects are built
//! from, and how they are printed.
//!
//! The constructors fold constants as an expression is made, with only the folds that are exact
//! in CEL. CEL's `&&` and `||` are commutative with error absorption (`false && e` is `false` even
//! when `e` is an error), so a constant operand either decides the whole or can be left out; no
//! other operand is ever reordered or dropped:
//!
//! - `true && x` is `x`, `false && x` is `false`; `false || x` is `x`, `true || x` is `true`;
//! - `!true` is `false`, `!!x` is `x`;
//! - `true ? a : b` is `a`, `false ? a : b` is `b` (the other branch is never evaluated);
//! - `l.all(v, false)` is `size(l) == 0`;
//! - in a concatenation ([`concat`]), adjacent string literals are one literal.
//!
//! An expression prints (`Display`) on one line with the parentheses that precedence needs
//! (`?:` below `||` below `&&` below the relations below `+` below `!` below member access, call
//! and index), string literals single-quoted and escaped. [`Expr::long`] breaks an expression
//! longer than [`WIDTH`] at its operators (and its calls' arguments, its lists' and maps'
//! entries) onto indented lines, which CEL reads as the same expression.

use std::fmt;

/// The longest expression [`Expr::long`] prints on one line: what a YAML writer keeps on one line
/// (a longer single-line string is folded at its spaces, which a person reads as line breaks
/// that are not there).
pub const ONE_LINE: usize = 80;

/// The width, indentation included, that [`Expr::long`] fits the lines of a broken expression
/// into (a string literal longer than that is never broken).
pub const WIDTH: usize = 100;

/// A CEL expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr(Node);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Bool(bool),
    Int(i64),
    Str(String),
    Ident(String),
    /// `operand.field`, or `operand.?field` when optional.
    Select {
        operand: Box<Expr>,
        field: String,
        optional: bool,
    },
    /// `operand[index]`, or `operand[?index]` when optional.
    Index {
        operand: Box<Expr>,
        index: Box<Expr>,
        optional: bool,
    },
    /// `function(args)`, or `target.function(args)` (a method, a namespaced function, a macro).
    Call {
        target: Option<Box<Expr>>,
        function: String,
        args: Vec<Expr>,
    },
    Not(Box<Expr>),
    /// Two operands or more, none a constant or itself an `And`.
    And(Vec<Expr>),
    /// Two operands or more, none a constant or itself an `Or`.
    Or(Vec<Expr>),
    Relation(Relation, Box<Expr>, Box<Expr>),
    /// `a + b + …`, two operands or more, added from the left as CEL parses it.
    Add(Vec<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    List(Vec<Expr>),
    Map(Vec<(Expr, Expr)>),
    /// A message literal: `Name{field: value, …}`.
    Message {
        name: String,
        fields: Vec<(String, Expr)>,
    },
}

/// The relations the generators use: comparisons and `in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    Eq,
    Ne,
    Le,
    Gt,
    In,
}

impl Relation {
    fn symbol(self) -> &'static str {
        match self {
            Relation::Eq => "==",
            Relation::Ne => "!=",
            Relation::Le => "<=",
            Relation::Gt => ">",
            Relation::In => "in",
        }
    }
}

// Precedence, lowest first: an operand of lower precedence than its place allows is
// parenthesised.
const ANY: u8 = 0;
const COND: u8 = 1;
const OR: u8 = 2;
const AND: u8 = 3;
const RELATION: u8 = 4;
const ADD: u8 = 5;
/// Multiplication's level: the right operand of `+` binds at least as tightly.
const MULTIPLY: u8 = 6;
const UNARY: u8 = 7;
const MEMBER: u8 = 8;

/// `true` or `false`.
pub fn bool(value: bool) -> Expr {
    Expr(Node::Bool(value))
}

/// An integer literal.
pub fn int(value: i64) -> Expr {
    Expr(Node::Int(value))
}

/// A string literal.
pub fn str(text: impl Into<String>) -> Expr {
    Expr(Node::Str(text.into()))
}

/// An identifier: a request variable (`object`, `request`, …) or a macro's variable.
pub fn ident(name: &str) -> Expr {
    Expr(Node::Ident(name.to_string()))
}

/// `variables.<name>`: a variable of the policy.
pub fn var(name: &str) -> Expr {
    ident("variables").field(name)
}

/// A global function call: `function(args)`.
pub fn call(function: &str, args: impl IntoIterator<Item = Expr>) -> Expr {
    Expr(Node::Call {
        target: None,
        function: function.to_string(),
        args: args.into_iter().collect(),
    })
}

/// `has(field)`: whether the field `field` selects is set.
pub fn has(field: Expr) -> Expr {
    call("has", [field])
}

/// `size(value)`.
pub fn size(value: Expr) -> Expr {
    call("size", [value])
}

/// `string(value)`.
pub fn string(value: Expr) -> Expr {
    call("string", [value])
}

/// `!operand`, folded: `!true` is `false`, `!!x` is `x`.
pub fn not(operand: Expr) -> Expr {
    match operand.0 {
        Node::Bool(value) => bool(!value),
        Node::Not(inner) => *inner,
        node => Expr(Node::Not(Box::new(Expr(node)))),
    }
}

/// `a && b`, folded.
pub fn and(a: Expr, b: Expr) -> Expr {
    all_of([a, b])
}

/// `a || b`, folded.
pub fn or(a: Expr, b: Expr) -> Expr {
    any_of([a, b])
}

/// The operands joined by `&&`, in order: `true` ones left out, `false` if any is `false`,
/// `true` if none is left.
pub fn all_of(operands: impl IntoIterator<Item = Expr>) -> Expr {
    logical(operands, true)
}

/// The operands joined by `||`, in order: `false` ones left out, `true` if any is `true`,
/// `false` if none is left.
pub fn any_of(operands: impl IntoIterator<Item = Expr>) -> Expr {
    logical(operands, false)
}

/// `&&` (`identity` true) or `||` (`identity` false) of `operands`: each constant operand is
/// either the identity, left out, or the other value, which is the result.
fn logical(operands: impl IntoIterator<Item = Expr>, identity: bool) -> Expr {
    let mut kept = Vec::new();
    for operand in operands {
        match operand.0 {
            Node::Bool(value) if value == identity => {}
            Node::Bool(_) => return bool(!identity),
            Node::And(inner) if identity => kept.extend(inner),
            Node::Or(inner) if !identity => kept.extend(inner),
            node => kept.push(Expr(node)),
        }
    }
    if kept.len() < 2 {
        return kept.pop().unwrap_or(bool(identity));
    }
    Expr(if identity {
        Node::And(kept)
    } else {
        Node::Or(kept)
    })
}

/// `condition ? then : otherwise`, folded when the condition is a constant.
pub fn cond(condition: Expr, then: Expr, otherwise: Expr) -> Expr {
    match condition.0 {
        Node::Bool(true) => then,
        Node::Bool(false) => otherwise,
        node => Expr(Node::Cond(
            Box::new(Expr(node)),
            Box::new(then),
            Box::new(otherwise),
        )),
    }
}

/// Strings (or lists) concatenated with `+`: concatenations among `parts` joined into one (both
/// are associative), adjacent string literals made one literal. The empty string when there
/// are no parts.
pub fn concat(parts: impl IntoIterator<Item = Expr>) -> Expr {
    fn push(items: &mut Vec<Expr>, part: Expr) {
        if let (Some(Expr(Node::Str(before))), Node::Str(text)) = (items.last_mut(), &part.0) {
            before.push_str(text);
        } else {
            items.push(part);
        }
    }
    let mut items: Vec<Expr> = Vec::new();
    for part in parts {
        match part.0 {
            Node::Add(inner) => inner.into_iter().for_each(|p| push(&mut items, p)),
            node => push(&mut items, Expr(node)),
        }
    }
    if items.len() < 2 {
        return items.pop().unwrap_or_else(|| str(""));
    }
    Expr(Node::Add(items))
}

/// A list literal.
pub fn list(items: impl IntoIterator<Item = Expr>) -> Expr {
    Expr(Node::List(items.into_iter().collect()))
}

/// A map literal, its entries in order.
pub fn map(entries: impl IntoIterator<Item = (Expr, Expr)>) -> Expr {
    Expr(Node::Map(entries.into_iter().collect()))
}

/// A message literal: `name{field: value, …}`.
pub fn message<'a>(name: &str, fields: impl IntoIterator<Item = (&'a str, Expr)>) -> Expr {
    Expr(Node::Message {
        name: name.to_string(),
        fields: fields
            .into_iter()
            .map(|(field, value)| (field.to_string(), value))
            .collect(),
    })
}

impl Expr {
    /// `self.name`.
    pub fn field(self, name: &str) -> Expr {
        self.select(name, false)
    }

    /// `self.?name`: an optional of the field.
    pub fn opt_field(self, name: &str) -> Expr {
        self.select(name, true)
    }

    fn select(self, name: &str, optional: bool) -> Expr {
        Expr(Node::Select {
            operand: Box::new(self),
            field: name.to_string(),
            optional,
        })
    }

    /// `self[index]`.
    pub fn index(self, index: Expr) -> Expr {
        self.indexed(index, false)
    }

    /// `self[?index]`: an optional of the entry.
    pub fn opt_index(self, index: Expr) -> Expr {
        self.indexed(index, true)
    }

    fn indexed(self, index: Expr, optional: bool) -> Expr {
        Expr(Node::Index {
            operand: Box::new(self),
            index: Box::new(index),
            optional,
        })
    }

    /// `self.function(args)`: a method or a namespaced function (`optional.of`).
    pub fn method(self, function: &str, args: impl IntoIterator<Item = Expr>) -> Expr {
        Expr(Node::Call {
            target: Some(Box::new(self)),
            function: function.to_string(),
            args: args.into_iter().collect(),
        })
    }

    /// The macro `self.function(variable, body)`.
    fn comprehension(self, function: &str, variable: &str, body: Expr) -> Expr {
        self.method(function, [ident(variable), body])
    }

    /// `self.map(variable, body)`.
    pub fn map(self, variable: &str, body: Expr) -> Expr {
        self.comprehension("map", variable, body)
    }

    /// `self.filter(variable, body)`.
    pub fn filter(self, variable: &str, body: Expr) -> Expr {
        self.comprehension("filter", variable, body)
    }

    /// `self.exists(variable, body)`.
    pub fn exists(self, variable: &str, body: Expr) -> Expr {
        self.comprehension("exists", variable, body)
    }

    /// `self.all(variable, body)`; `size(self) == 0` when the body is `false` (true of an empty
    /// list or map only, an error when `self` is one, as the macro's).
    pub fn all(self, variable: &str, body: Expr) -> Expr {
        if body.0 == Node::Bool(false) {
            return size(self).eq(int(0));
        }
        self.comprehension("all", variable, body)
    }

    fn relation(self, relation: Relation, other: Expr) -> Expr {
        Expr(Node::Relation(relation, Box::new(self), Box::new(other)))
    }

    /// `self == other`.
    pub fn eq(self, other: Expr) -> Expr {
        self.relation(Relation::Eq, other)
    }

    /// `self != other`.
    pub fn ne(self, other: Expr) -> Expr {
        self.relation(Relation::Ne, other)
    }

    /// `self <= other`.
    pub fn le(self, other: Expr) -> Expr {
        self.relation(Relation::Le, other)
    }

    /// `self > other`.
    pub fn gt(self, other: Expr) -> Expr {
        self.relation(Relation::Gt, other)
    }

    /// `self in container`.
    pub fn within(self, container: Expr) -> Expr {
        self.relation(Relation::In, container)
    }

    /// `self + other` (numbers: added as written, nothing regrouped; see [`concat`] for strings).
    pub fn add(self, other: Expr) -> Expr {
        match self.0 {
            // `a + b + other`: CEL reads it as `(a + b) + other`.
            Node::Add(mut items) => {
                items.push(other);
                Expr(Node::Add(items))
            }
            node => Expr(Node::Add(vec![Expr(node), other])),
        }
    }

    /// The constant this expression is, if it is `true` or `false`.
    pub fn as_bool(&self) -> Option<bool> {
        match self.0 {
            Node::Bool(value) => Some(value),
            _ => None,
        }
    }

    /// The expression printed for a person: on one line when it is at most [`ONE_LINE`] long,
    /// else broken at its outermost operators onto lines indented by two spaces per level (each
    /// `&&`, `||`, `+`, `?` and `:` at the start of its line), calls' arguments and lists' and
    /// maps' entries one a line, each part that fits in [`WIDTH`] on one line. A string literal
    /// is never broken.
    pub fn long(&self) -> String {
        let flat = self.flat(ANY);
        if flat.chars().count() <= ONE_LINE {
            return flat;
        }
        let mut out = String::new();
        self.layout(&mut out, ANY, 0, WIDTH);
        if !out.contains('\n') {
            // It fits in WIDTH but not in ONE_LINE: broken to the narrower width.
            out.clear();
            self.layout(&mut out, ANY, 0, ONE_LINE);
        }
        out
    }

    fn precedence(&self) -> u8 {
        match &self.0 {
            Node::Cond(..) => COND,
            Node::Or(_) => OR,
            Node::And(_) => AND,
            Node::Relation(..) => RELATION,
            Node::Add(_) => ADD,
            Node::Not(_) => UNARY,
            Node::Int(value) if *value < 0 => UNARY,
            _ => MEMBER,
        }
    }

    /// One line, in parentheses when its precedence is below `min`.
    fn flat(&self, min: u8) -> String {
        let mut out = String::new();
        self.write(&mut out, min);
        out
    }

    fn write(&self, out: &mut String, min: u8) {
        if self.precedence() < min {
            out.push('(');
            self.write(out, ANY);
            out.push(')');
            return;
        }
        match &self.0 {
            Node::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
            Node::Int(value) => out.push_str(&value.to_string()),
            Node::Str(text) => out.push_str(&quote(text)),
            Node::Ident(name) => out.push_str(name),
            Node::Select {
                operand,
                field,
                optional,
            } => {
                operand.write_target(out);
                out.push_str(if *optional { ".?" } else { "." });
                out.push_str(field);
            }
            Node::Index {
                operand,
                index,
                optional,
            } => {
                operand.write_target(out);
                out.push_str(if *optional { "[?" } else { "[" });
                index.write(out, ANY);
                out.push(']');
            }
            Node::Call {
                target,
                function,
                args,
            } => {
                if let Some(target) = target {
                    target.write_target(out);
                    out.push('.');
                }
                out.push_str(function);
                out.push('(');
                write_joined(out, args, |out, arg| arg.write(out, ANY));
                out.push(')');
            }
            Node::Not(operand) => {
                out.push('!');
                operand.write(out, MEMBER);
            }
            Node::And(operands) | Node::Or(operands) => {
                let (symbol, operand_min) = self.chain();
                for (i, operand) in operands.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                        out.push_str(symbol);
                        out.push(' ');
                    }
                    operand.write(out, operand_min);
                }
            }
            Node::Relation(relation, left, right) => {
                left.write(out, RELATION);
                out.push(' ');
                out.push_str(relation.symbol());
                out.push(' ');
                right.write(out, ADD);
            }
            Node::Add(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" + ");
                    }
                    item.write(out, if i == 0 { ADD } else { MULTIPLY });
                }
            }
            Node::Cond(condition, then, otherwise) => {
                condition.write(out, OR);
                out.push_str(" ? ");
                then.write(out, OR);
                out.push_str(" : ");
                otherwise.write(out, COND);
            }
            Node::List(items) => {
                out.push('[');
                write_joined(out, items, |out, item| item.write(out, ANY));
                out.push(']');
            }
            Node::Map(entries) => {
                out.push('{');
                write_joined(out, entries, |out, (key, value)| {
                    key.write(out, ANY);
                    out.push_str(": ");
                    value.write(out, ANY);
                });
                out.push('}');
            }
            Node::Message { name, fields } => {
                out.push_str(name);
                out.push('{');
                write_joined(out, fields, |out, (field, value)| {
                    out.push_str(field);
                    out.push_str(": ");
                    value.write(out, ANY);
                });
                out.push('}');
            }
        }
    }

    /// The operand of a member access, call or index: parenthesised unless it is one itself, or
    /// a name or literal (a number too, which `1.x` would read as a decimal point).
    fn write_target(&self, out: &mut String) {
        if matches!(self.0, Node::Int(_)) {
            out.push('(');
            self.write(out, ANY);
            out.push(')');
        } else {
            self.write(out, MEMBER);
        }
    }

    /// An `&&` or `||` chain's symbol and the precedence its operands need.
    fn chain(&self) -> (&'static str, u8) {
        match self.0 {
            Node::Or(_) => ("||", AND),
            _ => ("&&", RELATION),
        }
    }

    /// Appends the expression to `out`, whose last line is indented by `indent`: on one line
    /// when that fits in `width` (or cannot be broken: a name, a literal), else broken over lines.
    fn layout(&self, out: &mut String, min: u8, indent: usize, width: usize) {
        let flat = self.flat(min);
        if column(out) + flat.chars().count() <= width {
            out.push_str(&flat);
            return;
        }
        if self.precedence() < min {
            out.push('(');
            newline(out, indent + 2);
            self.layout(out, ANY, indent + 2, width);
            newline(out, indent);
            out.push(')');
            return;
        }
        match &self.0 {
            Node::And(operands) | Node::Or(operands) => {
                let (symbol, operand_min) = self.chain();
                for (i, operand) in operands.iter().enumerate() {
                    let at = if i == 0 {
                        indent
                    } else {
                        newline(out, indent + 2);
                        out.push_str(symbol);
                        out.push(' ');
                        indent + 2
                    };
                    operand.layout(out, operand_min, at, width);
                }
            }
            Node::Add(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i == 0 {
                        item.layout(out, ADD, indent, width);
                    } else {
                        newline(out, indent + 2);
                        out.push_str("+ ");
                        item.layout(out, MULTIPLY, indent + 2, width);
                    }
                }
            }
            Node::Relation(relation, left, right) => {
                left.layout(out, RELATION, indent, width);
                newline(out, indent + 2);
                out.push_str(relation.symbol());
                out.push(' ');
                right.layout(out, ADD, indent + 2, width);
            }
            Node::Cond(condition, then, otherwise) => {
                condition.layout(out, OR, indent, width);
                newline(out, indent + 2);
                out.push_str("? ");
                then.layout(out, OR, indent + 2, width);
                newline(out, indent + 2);
                out.push_str(": ");
                otherwise.layout(out, COND, indent + 2, width);
            }
            Node::Not(operand) => {
                out.push('!');
                operand.layout(out, MEMBER, indent, width);
            }
            Node::Select {
                operand,
                field,
                optional,
            } => {
                operand.layout_target(out, indent, width);
                out.push_str(if *optional { ".?" } else { "." });
                out.push_str(field);
            }
            Node::Index {
                operand,
                index,
                optional,
            } => {
                operand.layout_target(out, indent, width);
                out.push_str(if *optional { "[?" } else { "[" });
                index.layout(out, ANY, indent + 2, width);
                out.push(']');
            }
            Node::Call {
                target,
                function,
                args,
            } => {
                if let Some(target) = target {
                    target.layout_target(out, indent, width);
                    out.push('.');
                }
                out.push_str(function);
                out.push('(');
                let mut flat_args = String::new();
                write_joined(&mut flat_args, args, |out, arg| arg.write(out, ANY));
                if column(out) + flat_args.chars().count() < width {
                    out.push_str(&flat_args);
                    out.push(')');
                    return;
                }
                match args.as_slice() {
                    // A macro: its variable stays with the call, its body goes below.
                    [Expr(Node::Ident(variable)), body] => {
                        out.push_str(variable);
                        out.push(',');
                        newline(out, indent + 2);
                        body.layout(out, ANY, indent + 2, width);
                    }
                    _ => layout_joined(out, args, indent, |out, arg| {
                        arg.layout(out, ANY, indent + 2, width)
                    }),
                }
                newline(out, indent);
                out.push(')');
            }
            Node::List(items) => {
                out.push('[');
                layout_joined(out, items, indent, |out, item| {
                    item.layout(out, ANY, indent + 2, width)
                });
                newline(out, indent);
                out.push(']');
            }
            Node::Map(entries) => {
                out.push('{');
                layout_joined(out, entries, indent, |out, (key, value)| {
                    key.layout(out, ANY, indent + 2, width);
                    out.push_str(": ");
                    value.layout(out, ANY, indent + 2, width);
                });
                newline(out, indent);
                out.push('}');
            }
            Node::Message { name, fields } => {
                out.push_str(name);
                out.push('{');
                layout_joined(out, fields, indent, |out, (field, value)| {
                    out.push_str(field);
                    out.push_str(": ");
                    value.layout(out, ANY, indent + 2, width);
                });
                newline(out, indent);
                out.push('}');
            }
            Node::Bool(_) | Node::Int(_) | Node::Str(_) | Node::Ident(_) => out.push_str(&flat),
        }
    }

    /// [`write_target`](Self::write_target), broken over lines as [`layout`](Self::layout).
    fn layout_target(&self, out: &mut String, indent: usize, width: usize) {
        if matches!(self.0, Node::Int(_)) {
            self.write_target(out);
        } else {
            self.layout(out, MEMBER, indent, width);
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.flat(ANY))
    }
}

fn write_joined<T>(out: &mut String, items: &[T], mut write: impl FnMut(&mut String, &T)) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write(out, item);
    }
}

/// `items` one per line, indented below `indent`, comma-separated, each written by `layout`.
fn layout_joined<T>(
    out: &mut String,
    items: &[T],
    indent: usize,
    mut layout: impl FnMut(&mut String, &T),
) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        newline(out, indent + 2);
        layout(out, item);
    }
}

/// The characters on the last line of `out`.
fn column(out: &str) -> usize {
    out[out.rfind('\n').map_or(0, |at| at + 1)..]
        .chars()
        .count()
}

fn newline(out: &mut String, indent: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', indent));
}

/// A CEL string literal for `text`: raw (`r'…'`, backslashes as they are) when it holds a
/// backslash and nothing a raw literal cannot hold, else single-quoted with backslash, quote,
/// line breaks, tab and the other control and separator characters escaped.
fn quote(text: &str) -> String {
    let raw = text.contains('\\') && !text.chars().any(|c| c == '\'' || escaped(c));
    if raw {
        return format!("r'{text}'");
    }
    let mut out = String::from("'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped(c) => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Characters a literal holds as an escape: controls, and the line and byte-order marks a YAML
/// block scalar cannot hold (all in the Basic Multilingual Plane: four hex digits).
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(name: &str) -> Expr {
        ident(name)
    }

    #[test]
    fn constants_fold_as_the_expression_is_made() {
        assert_eq!(and(bool(true), x("a")), x("a"));
        assert_eq!(and(x("a"), bool(true)), x("a"));
        assert_eq!(and(x("a"), bool(false)), bool(false));
        assert_eq!(and(bool(false), x("a")), bool(false));
        assert_eq!(or(bool(false), x("a")), x("a"));
        assert_eq!(or(x("a"), bool(true)), bool(true));
        assert_eq!(all_of([]), bool(true));
        assert_eq!(any_of([]), bool(false));
        assert_eq!(all_of([bool(true), bool(true)]), bool(true));
        assert_eq!(any_of([bool(false), bool(false)]), bool(false));
        assert_eq!(not(bool(true)), bool(false));
        assert_eq!(not(not(x("a"))), x("a"));
        assert_eq!(cond(bool(true), x("a"), x("b")), x("a"));
        assert_eq!(cond(bool(false), x("a"), x("b")), x("b"));
        assert_eq!(x("l").all("v", bool(false)).to_string(), "size(l) == 0");
        assert_eq!(x("l").all("v", x("v")).to_string(), "l.all(v, v)");
        // The non-constant operands stay, in order; nested chains are one.
        assert_eq!(
            all_of([x("b"), bool(true), and(x("a"), x("c"))]).to_string(),
            "b && a && c"
        );
        assert_eq!(any_of([x("b"), bool(false), x("a")]).to_string(), "b || a");
        // A condition is not a constant, so nothing folds.
        assert_eq!(
            cond(x("c"), bool(true), bool(false)).to_string(),
            "c ? true : false"
        );
        assert_eq!(
            concat([str("a"), x("b"), str("c"), concat([str("d"), x("e")])]).to_string(),
            "'a' + b + 'cd' + e"
        );
        assert_eq!(concat([str("a"), str("b")]), str("ab"));
        assert_eq!(concat([]), str(""));
    }

    #[test]
    fn parentheses_only_where_precedence_needs_them() {
        let (a, b, c) = (x("a"), x("b"), x("c"));
        assert_eq!(
            or(a.clone(), and(b.clone(), c.clone())).to_string(),
            "a || b && c"
        );
        assert_eq!(
            and(or(a.clone(), b.clone()), c.clone()).to_string(),
            "(a || b) && c"
        );
        assert_eq!(not(and(a.clone(), b.clone())).to_string(), "!(a && b)");
        assert_eq!(not(a.clone().field("f")).to_string(), "!a.f");
        assert_eq!(not(a.clone().eq(b.clone())).to_string(), "!(a == b)");
        assert_eq!(
            and(a.clone().eq(b.clone()), c.clone().within(x("m"))).to_string(),
            "a == b && c in m"
        );
        assert_eq!(
            a.clone().eq(b.clone()).eq(c.clone()).to_string(),
            "a == b == c"
        );
        assert_eq!(
            a.clone().eq(b.clone().eq(c.clone())).to_string(),
            "a == (b == c)"
        );
        assert_eq!(
            a.clone().add(b.clone()).add(c.clone()).to_string(),
            "a + b + c"
        );
        assert_eq!(
            a.clone().add(b.clone().add(c.clone())).to_string(),
            "a + (b + c)"
        );
        assert_eq!(a.clone().add(int(1)).le(int(2)).to_string(), "a + 1 <= 2");
        let choice = cond(a.clone(), b.clone(), c.clone());
        assert_eq!(
            cond(or(a.clone(), b.clone()), choice.clone(), choice.clone()).to_string(),
            "a || b ? (a ? b : c) : a ? b : c"
        );
        assert_eq!(
            cond(choice.clone(), a.clone(), b.clone()).to_string(),
            "(a ? b : c) ? a : b"
        );
        assert_eq!(choice.clone().add(c.clone()).to_string(), "(a ? b : c) + c");
        assert_eq!(
            choice
                .clone()
                .opt_field("f")
                .method("orValue", [list([])])
                .to_string(),
            "(a ? b : c).?f.orValue([])"
        );
        assert_eq!(
            a.clone().add(b.clone()).index(int(0)).to_string(),
            "(a + b)[0]"
        );
        assert_eq!(int(1).field("f").to_string(), "(1).f");
        assert_eq!(not(int(-1)).to_string(), "!(-1)");
        assert_eq!(
            and(
                has(a.clone().field("f")),
                str("k").within(a.clone().field("f"))
            )
            .to_string(),
            "has(a.f) && 'k' in a.f"
        );
        assert_eq!(
            message(
                "JSONPatch",
                [("op", str("add")), ("value", map([(str("k"), b.clone())]))]
            )
            .to_string(),
            "JSONPatch{op: 'add', value: {'k': b}}"
        );
        assert_eq!(
            a.opt_index(str("k"))
                .eq(x("optional").method("of", [b]))
                .to_string(),
            "a[?'k'] == optional.of(b)"
        );
    }

    #[test]
    fn string_literals_are_escaped() {
        assert_eq!(str("a'b\\c").to_string(), "'a\\'b\\\\c'");
        assert_eq!(str("it's").to_string(), "'it\\'s'");
        assert_eq!(
            str("line\nbreak\ttab\u{7}").to_string(),
            "'line\\nbreak\\ttab\\u0007'"
        );
        assert_eq!(str("\u{2028}").to_string(), "'\\u2028'");
        // A backslash and no quote: raw, as a regular expression reads best.
        assert_eq!(str("^a\\.b$").to_string(), "r'^a\\.b$'");
        assert_eq!(str("nö").to_string(), "'nö'");
    }

    #[test]
    fn a_long_expression_breaks_at_its_operators_onto_indented_lines() {
        let sel = var("sel");
        let key = str("agentpool");
        let other = and(
            key.clone().within(sel.clone()),
            sel.clone().index(key.clone()).ne(var("pool")),
        );
        let expression = any_of([
            ident("object").field("kind").eq(str("Pod")),
            not(other.clone()),
            and(
                ident("request").field("operation").eq(str("UPDATE")),
                cond(other.clone(), bool(true), sel.clone().eq(var("oldSel"))),
            ),
        ]);
        assert_eq!(
            expression.long(),
            "object.kind == 'Pod'\n  \
             || !('agentpool' in variables.sel && variables.sel['agentpool'] != variables.pool)\n  \
             || request.operation == 'UPDATE'\n    \
             && (\n      \
             'agentpool' in variables.sel && variables.sel['agentpool'] != variables.pool\n        \
             ? true\n        \
             : variables.sel == variables.oldSel\n    \
             )"
        );
        // What is at most ONE_LINE long stays on one line; a longer one is broken.
        let short = or(ident("a"), ident("b"));
        assert_eq!(short.long(), short.to_string());
        let name = |n: usize| ident(&"n".repeat(n));
        assert_eq!(or(name(40), name(36)).long().lines().count(), 1);
        assert_eq!(or(name(40), name(37)).long().lines().count(), 2);
        // A call's arguments, a list's items: one a line; a literal is never broken.
        let long_text = "x".repeat(120);
        let call = ident("t").method("matches", [str(long_text.clone())]);
        assert_eq!(call.long(), format!("t.matches(\n  '{long_text}'\n)"));
        let items = list((0..30).map(|i| str(format!("item{i}"))));
        let printed = items.long();
        assert!(
            printed.starts_with("[\n  'item0',\n  'item1',\n"),
            "{printed}"
        );
        assert!(printed.ends_with("\n  'item29'\n]"), "{printed}");
    }

    /// The long form is the same expression: only whitespace outside literals differs.
    #[test]
    fn the_long_form_differs_from_the_one_line_form_in_whitespace_only() {
        let r = ident("t");
        let first = r.clone().method("split", [str("/")]).index(int(0));
        let expression = all_of([
            r.clone().method("matches", [str("^[a-z]+(?:\\.[a-z]+)*$")]),
            not(r.clone().method("contains", [str("@")])),
            or(
                size(r.clone()).le(int(247)),
                cond(
                    first.clone().eq(str("localhost")),
                    size(first).add(int(1)),
                    int(0),
                )
                .add(cond(
                    r.clone().method("contains", [str("/")]),
                    int(8),
                    int(0),
                ))
                .le(int(255)),
            ),
            r.clone()
                .map(
                    "c",
                    map([
                        (str("type"), str("container")),
                        (str("name"), string(ident("c"))),
                    ]),
                )
                .method("join", [str("; ")])
                .ne(str("")),
        ]);
        let long = expression.long();
        assert!(long.lines().count() > 3, "{long}");
        assert!(long.lines().all(|l| l.len() <= WIDTH), "{long}");
        let squash = |text: &str| text.split_whitespace().collect::<String>();
        assert_eq!(squash(&long), squash(&expression.to_string()));
    }
}
