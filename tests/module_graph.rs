//! No file-level import cycle in either crate: every `.rs` file of `poolguard` (src/) and of
//! `poolguard-core` (src/core/) is a node, every path it names into its own crate (`use
//! crate::…`, `super::…`, `self::…`, a child module, or such a path written inline) is an edge to
//! the file that defines the module it reaches, a parent's use of its children included (a
//! `mod` declaration is not a path, but `child::f()` or `pub use child::X` is): a child that
//! imports from its parent while the parent calls it is a loop like any other, so what both
//! need belongs in a leaf module (as `native::object` holds what the generator's parts share).
//! Test modules (`#[cfg(test)] mod … { … }`, and files declared `#[cfg(test)] mod name;`) are left
//! out too: they may read whatever they test. A second check collapses the files to their
//! top-level modules: those form layers, no two importing each other through any chain.
//! A cycle fails the test and is printed file by file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: module path (`["policy", "memo"]`) -> the file that holds it.
struct Crate {
    modules: BTreeMap<Vec<String>, PathBuf>,
}

impl Crate {
    /// Reads the crate rooted at `root` (the file holding `lib.rs`), leaving out `skip` (another
    /// crate inside the same folder) and `tests/` folders next to a crate root.
    fn read(root: &Path, skip: &[&Path]) -> Crate {
        let mut modules = BTreeMap::new();
        let mut files = Vec::new();
        collect(root, skip, &mut files);
        for file in files {
            let rel = file.strip_prefix(root).unwrap();
            let mut segments: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let last = segments.pop().unwrap();
            let stem = last.trim_end_matches(".rs").to_owned();
            if segments.is_empty() && (stem == "lib" || stem == "main") {
                if stem == "main" {
                    continue; // the binary is a crate of its own
                }
            } else if stem != "mod" {
                segments.push(stem);
            }
            if segments.first().map(String::as_str) == Some("tests") && rel.iter().count() > 1 {
                continue; // integration tests next to the crate root: crates of their own
            }
            modules.insert(segments, file);
        }
        // Files declared `#[cfg(test)] mod name;` are test modules like inline ones.
        let mut test_only = Vec::new();
        for (module, file) in &modules {
            let code = code_only(&std::fs::read_to_string(file).unwrap());
            let mut rest = code.as_str();
            while let Some(at) = rest.find("#[cfg(test)]") {
                rest = &rest[at + "#[cfg(test)]".len()..];
                let decl = rest.trim_start();
                let decl = decl.strip_prefix("pub ").unwrap_or(decl);
                if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.split_once(';')) {
                    let name = name.0.trim();
                    if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        let mut child = module.clone();
                        child.push(name.to_owned());
                        test_only.push(child);
                    }
                }
            }
        }
        modules.retain(|module, _| !test_only.iter().any(|t| module.starts_with(t)));
        Crate { modules }
    }

    /// The file holding the module `path` reaches: its longest prefix that names a module.
    fn file_of(&self, path: &[String]) -> Option<&Vec<String>> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get_key_value(&path[..n]).map(|(k, _)| k))
    }

    /// Edges from each module's file to the files it imports.
    fn edges(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let mut edges = BTreeMap::new();
        for (module, file) in &self.modules {
            let text = std::fs::read_to_string(file).unwrap();
            let code = without_test_modules(&code_only(&text));
            let mut targets = BTreeSet::new();
            for path in paths_in(&code) {
                let Some(absolute) = self.absolute(module, &path) else {
                    continue;
                };
                let Some(target) = self.file_of(&absolute) else {
                    continue;
                };
                if target != module {
                    targets.insert(target.clone());
                }
            }
            edges.insert(module.clone(), targets);
        }
        edges
    }

    /// `path` as written in `module`, made absolute within the crate; `None` when it leaves the
    /// crate (`std::…`, another crate).
    fn absolute(&self, module: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut base: Vec<String> = module.to_vec();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                let mut child = module.to_vec();
                child.push(first.to_owned());
                if !self.modules.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }
}

fn collect(dir: &Path, skip: &[&Path], out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if skip.iter().any(|s| path == *s) {
            continue;
        }
        if path.is_dir() {
            collect(&path, skip, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source with comments, string and character literals blanked out.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\'', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                out.push_str("' '");
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The code with every `#[cfg(test)]` module body (`mod name { … }`) removed.
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_inline_mod = trimmed
            .strip_prefix("mod ")
            .and_then(|m| m.find(['{', ';']).map(|p| m.as_bytes()[p] == b'{'))
            .unwrap_or(false);
        if !is_inline_mod {
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every module path the code names: each leaf of each `use` tree, and each `crate::…`,
/// `super::…` or `self::…` path written inline.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut inline = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        inline.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else {
            rest = after;
            break;
        };
        expand_use_tree(after[..end].trim(), &mut Vec::new(), &mut paths);
        rest = &after[end + 1..];
    }
    inline.push_str(rest);
    for start in ["crate", "super", "self"] {
        let mut text = inline.as_str();
        while let Some(at) = find_word(text, start) {
            let mut path = Vec::new();
            let mut tail = &text[at..];
            loop {
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                tail = &tail[name.len()..];
                path.push(name);
                match tail.trim_start().strip_prefix("::") {
                    Some(t) => tail = t.trim_start(),
                    None => break,
                }
            }
            if path.len() > 1 {
                paths.push(path);
            }
            text = &text[at + start.len()..];
        }
    }
    // Paths written inline from a name of this module's scope (`placement::generate(…)` in a
    // parent calls its child): every `a::b` whose first name does not follow `::` or `.`;
    // `absolute` keeps those whose first name is a child module.
    let chars: Vec<(usize, char)> = inline.char_indices().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for (k, &(at, c)) in chars.iter().enumerate() {
        let before = k.checked_sub(1).map(|j| chars[j].1);
        if !(c.is_alphabetic() || c == '_')
            || before.is_some_and(|b| ident(b) || b == ':' || b == '.')
        {
            continue;
        }
        let mut path = Vec::new();
        let mut tail = &inline[at..];
        loop {
            let name: String = tail.chars().take_while(|&c| ident(c)).collect();
            if name.is_empty() {
                break;
            }
            tail = &tail[name.len()..];
            path.push(name);
            match tail.strip_prefix("::") {
                Some(t) => tail = t,
                None => break,
            }
        }
        if path.len() > 1 && !["crate", "super", "self"].contains(&path[0].as_str()) {
            paths.push(path);
        }
    }
    paths
}

/// The byte offset of `word` standing alone (not part of a longer identifier) in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !ident(before) && !ident(after) {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Expands `a::b::{c, d::{e, f}}` with `prefix` in front into its leaves.
fn expand_use_tree(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = segments(&tree[..open]);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(head);
        for part in split_top_level(inner) {
            expand_use_tree(part, prefix, out);
        }
        prefix.truncate(depth);
    } else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        let mut full = prefix.clone();
        full.extend(segments(path));
        if full.last().map(String::as_str) == Some("self") {
            full.pop();
        }
        if !full.is_empty() {
            out.push(full);
        }
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "*")
        .map(str::to_owned)
        .collect()
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The strongly connected components with more than one file (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.edges[v] {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// `file` relative to the package root, as the report names it.
fn shown(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

fn report(name: &str, krate: &Crate) -> Vec<String> {
    let edges = krate.edges();
    cycles(&edges)
        .into_iter()
        .map(|component| {
            let files: Vec<String> = component
                .iter()
                .map(|m| {
                    let imports: Vec<String> = edges[m]
                        .iter()
                        .filter(|t| component.contains(t))
                        .map(|t| shown(&krate.modules[t]))
                        .collect();
                    format!("  {} -> {}", shown(&krate.modules[m]), imports.join(", "))
                })
                .collect();
            format!("{name}: import cycle among\n{}", files.join("\n"))
        })
        .collect()
}

#[test]
fn no_file_level_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let core = src.join("core");
    let mut found = report("poolguard", &Crate::read(&src, &[&core]));
    found.extend(report("poolguard-core", &Crate::read(&core, &[])));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The checker itself sees a cycle when there is one, and none in a chain.
#[test]
fn the_checker_finds_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a.rs", "use crate::b::{Thing, other::{self}};\n");
    write("b.rs", "pub fn f() { super::c::g(); }\n");
    write(
        "c.rs",
        "// use crate::a;\nconst S: &str = \"crate::a::X\";\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
    );
    let krate = Crate::read(dir.path(), &[]);
    assert!(report("t", &krate).is_empty(), "a chain is no cycle");
    write("c.rs", "pub fn g() { let _ = crate::a::X; }\n");
    let found = report("t", &Crate::read(dir.path(), &[]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a.rs") && found[0].contains("b.rs") && found[0].contains("c.rs"));
}

/// Each file's edges collapsed to the top-level modules they belong to (`policy/set.rs` is
/// `policy`), edges within one module left out.
fn top_level(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let top = |m: &Vec<String>| m.iter().take(1).cloned().collect::<Vec<String>>();
    let mut out: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        let entry = out.entry(top(from)).or_default();
        for to in targets {
            if top(to) != top(from) && !to.is_empty() {
                entry.insert(top(to));
            }
        }
    }
    out
}

/// The cycles among a crate's top-level modules, each module with the files that close it.
fn top_level_report(name: &str, krate: &Crate) -> Vec<String> {
    let edges = krate.edges();
    let graph = top_level(&edges);
    cycles(&graph)
        .into_iter()
        .map(|component| {
            let crossing: Vec<String> = edges
                .iter()
                .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
                .filter(|(from, to)| {
                    let top = |m: &Vec<String>| m.iter().take(1).cloned().collect::<Vec<_>>();
                    top(from) != top(to)
                        && component.contains(&top(from))
                        && component.contains(&top(to))
                })
                .map(|(from, to)| {
                    format!(
                        "  {} -> {}",
                        shown(&krate.modules[from]),
                        shown(&krate.modules[to])
                    )
                })
                .collect();
            let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
            format!(
                "{name}: top-level modules in a cycle: {}\n{}",
                names.join(", "),
                crossing.join("\n")
            )
        })
        .collect()
}

/// Each crate's top-level modules form layers: no two of them import each other, directly or
/// through others (`policy` is below `ruleset`, `server` below `app`).
#[test]
fn no_cycle_among_top_level_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let core = src.join("core");
    let mut found = top_level_report("poolguard", &Crate::read(&src, &[&core]));
    found.extend(top_level_report("poolguard-core", &Crate::read(&core, &[])));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Files of different folders that import each other in a chain are a top-level cycle even
/// when no file-level cycle exists; `#[cfg(test)] mod x;` files are left out.
#[test]
fn the_checker_finds_a_top_level_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap()
    };
    write("lib.rs", "pub mod a;\npub mod b;\n");
    write(
        "a/mod.rs",
        "pub mod low;\npub mod high;\n#[cfg(test)]\nmod tests;\n",
    );
    write("a/low.rs", "pub struct X;\n");
    write("a/high.rs", "use crate::b::Y;\n");
    write("a/tests.rs", "use crate::b::Y;\n");
    write("b/mod.rs", "pub struct Y;\n");
    let krate = Crate::read(dir.path(), &[]);
    assert!(report("t", &krate).is_empty());
    assert!(top_level_report("t", &krate).is_empty(), "a -> b only");
    write("b/mod.rs", "pub struct Y(crate::a::low::X);\n");
    let krate = Crate::read(dir.path(), &[]);
    assert!(report("t", &krate).is_empty(), "no file-level cycle");
    let found = top_level_report("t", &krate);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("a/high.rs") && found[0].contains("b/mod.rs"),
        "{found:?}"
    );
    assert!(!found[0].contains("tests.rs"), "{found:?}");
}
