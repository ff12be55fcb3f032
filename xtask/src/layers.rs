//! `cargo xtask layers`: each crate's files keep to the layer table of its `src/README.md`.
//!
//! The table's rows are the layers, lowest first; the first cell of a row names its files
//! (`` `job.rs` ``) or folders (`` `iter/` ``) in backticks, several for one layer. A file may
//! import from its own row and the rows above it, never from a row below it, and no loop of
//! imports may join more than two files (two files of one concept that call each other are
//! allowed; three are a tangle). Every file of `src/` (but the crate roots, `lib.rs` and
//! `main.rs`, which wire the rest together) must have a row, and every row a file.
//!
//! What counts as an import: every path that starts at the crate (`crate::x`, `$crate::x`,
//! `use crate::{x, y::z}`, and `super::` chains that climb out of a folder), in code only
//! (comments and strings are skipped), resolved to the file or folder that defines it (names
//! re-exported by `lib.rs` resolve to where they come from). Items under `#[cfg(test)]` are
//! left out: a unit test may drive its file through the whole crate.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One import of a file or folder (a *unit*) from another.
#[derive(Debug, Clone)]
struct Import {
    from: String,
    to: String,
    /// Where: `file:line` and the path as written.
    at: String,
}

/// The problems found in the crate whose sources are under `src`: none when it keeps its
/// layers. An error when the sources or the table cannot be read.
pub fn check(src: &Path) -> anyhow::Result<Vec<String>> {
    let readme = src.join("README.md");
    let table = fs::read_to_string(&readme)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}: write its layer table", readme.display()))?;
    let layers = parse_table(&table);
    if layers.is_empty() {
        anyhow::bail!(
            "{} has no layer table (rows `| `file.rs` | concept |`, lowest layer first)",
            readme.display()
        );
    }
    let mut files = Vec::new();
    collect_rs(src, &mut files)?;
    let mut units = BTreeSet::new();
    let mut sources = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src)?.to_path_buf();
        let text = fs::read_to_string(&path)?;
        if let Some(unit) = unit_of(&rel) {
            units.insert(unit);
        }
        sources.push((rel, text));
    }
    let reexports = sources
        .iter()
        .find(|(rel, _)| rel == Path::new("lib.rs"))
        .map(|(_, text)| parse_reexports(&strip(text), &units))
        .unwrap_or_default();
    let mut imports = Vec::new();
    for (rel, text) in &sources {
        let Some(from) = unit_of(rel) else { continue };
        imports.extend(find_imports(rel, &from, text, &units, &reexports));
    }
    Ok(problems(&layers, &units, &imports))
}

/// `cargo xtask layers`: checks `srcs` (default: the workspace's crates) and prints what it
/// finds; 1 when anything was found.
pub fn run(srcs: &[PathBuf]) -> anyhow::Result<i32> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let defaults: Vec<PathBuf> = WORKSPACE_CRATES
        .iter()
        .map(|k| root.join("crates").join(k).join("src"))
        .collect();
    let srcs = if srcs.is_empty() { &defaults[..] } else { srcs };
    let mut code = 0;
    for src in srcs {
        let found = check(src)?;
        if found.is_empty() {
            println!("{}: keeps its layers", src.display());
        }
        for p in found {
            println!("{}: {p}", src.display());
            code = 1;
        }
    }
    Ok(code)
}

/// The crates whose layers are checked.
const WORKSPACE_CRATES: [&str; 3] = ["umt-sys", "umt-rt", "umt-bench"];

/// The problems of `imports` among `units` against `layers`.
fn problems(
    layers: &BTreeMap<String, usize>,
    units: &BTreeSet<String>,
    imports: &[Import],
) -> Vec<String> {
    let mut out = Vec::new();
    for u in units {
        if !layers.contains_key(u) {
            out.push(format!(
                "`{u}` has no row in the layer table (src/README.md): add it at its layer"
            ));
        }
    }
    for u in layers.keys() {
        if !units.contains(u) {
            out.push(format!(
                "the layer table (src/README.md) names `{u}`, which is not in src/: remove the row"
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for i in imports {
        let (Some(&a), Some(&b)) = (layers.get(&i.from), layers.get(&i.to)) else {
            continue;
        };
        if b > a && seen.insert((i.from.clone(), i.to.clone())) {
            out.push(format!(
                "`{}` imports `{}` ({}), a layer above it in src/README.md's table: move what \
                 it needs down, or let the higher layer register it with the lower one",
                i.from, i.to, i.at
            ));
        }
    }
    for scc in loops(units, imports) {
        let inside: Vec<String> = imports
            .iter()
            .filter(|i| scc.contains(&i.from) && scc.contains(&i.to))
            .map(|i| format!("  {} -> {} ({})", i.from, i.to, i.at))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        out.push(format!(
            "a loop of {} files ({}); at most two may import each other. Its imports:\n{}",
            scc.len(),
            scc.iter().cloned().collect::<Vec<_>>().join(", "),
            inside.join("\n")
        ));
    }
    out
}

/// The row of each unit in the table of `readme`: `` `a.rs` ``, `` `b/` ``, in the first cell.
fn parse_table(readme: &str) -> BTreeMap<String, usize> {
    let mut layers = BTreeMap::new();
    let mut row = 0;
    for line in readme.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let Some(cell) = line.trim_start_matches('|').split('|').next() else {
            continue;
        };
        let mut names = Vec::new();
        for (k, part) in cell.split('`').enumerate() {
            if k % 2 == 1 {
                if let Some(stem) = part.strip_suffix(".rs") {
                    names.push(stem.to_string());
                } else if let Some(dir) = part.strip_suffix('/') {
                    names.push(dir.to_string());
                }
            }
        }
        if names.is_empty() {
            continue;
        }
        for n in names {
            layers.entry(n).or_insert(row);
        }
        row += 1;
    }
    layers
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The unit of a source file: its first path component without `.rs`; none for the roots.
fn unit_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    if rel.components().count() == 1 {
        let stem = first.strip_suffix(".rs")?;
        return (stem != "lib" && stem != "main").then(|| stem.to_string());
    }
    Some(first.to_string())
}

/// How many `super::` climb from `rel`'s module to the crate root: 1 for `a/mod.rs` and
/// `a/b.rs`'s parent... precisely, the module's depth below the root.
fn depth(rel: &Path) -> usize {
    let n = rel.components().count();
    match rel.file_name().and_then(|f| f.to_str()) {
        Some("mod.rs") => n - 1,
        _ => n,
    }
}

/// `text` with comments, strings and character literals blanked (newlines kept, so lines
/// still count), and every item under `#[cfg(test)]` blanked too.
fn strip(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(b.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nest = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    nest += 1;
                    out.extend([' ', ' ']);
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    nest -= 1;
                    out.extend([' ', ' ']);
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !out.last().is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(b[i..j.min(b.len())].iter().map(|&c| blank(c)));
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A character literal ('a', '\n', '\''); a lifetime ('a) has no closing quote.
            let mut j = i + 1;
            if b.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            out.extend(b[i..=j.min(b.len() - 1)].iter().map(|&c| blank(c)));
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    let mut s: String = out.into_iter().collect();
    while let Some((at, len)) = test_attr(&s) {
        let bytes = s.as_bytes();
        let mut j = at + len;
        let mut level = 0usize;
        while j < bytes.len() {
            match bytes[j] {
                b'{' => level += 1,
                b'}' => {
                    level = level.saturating_sub(1);
                    if level == 0 {
                        j += 1;
                        break;
                    }
                }
                b';' if level == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let j = j.min(bytes.len());
        let blanked: String = s[at..j]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        s.replace_range(at..j, &blanked);
    }
    s
}

/// The first `#[cfg(..)]` attribute of `code` that holds only under test (`#[cfg(test)]`,
/// `#[cfg(all(test, not(loom)))]`): where it starts and how long it is.
fn test_attr(code: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(") {
        let at = from + k;
        let len = code[at..].find(")]").map_or(code.len() - at, |e| e + 2);
        let attr = &code[at..at + len];
        let words: Vec<&str> = attr
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let test =
            words.windows(2).any(|w| w[1] == "test" && w[0] != "not") && !words.contains(&"any");
        if test {
            return Some((at, len));
        }
        from = at + len;
    }
    None
}

/// The names `lib.rs` re-exports from a unit (`pub use x::{A, b::C as D};`): name → unit.
fn parse_reexports(lib: &str, units: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut rest = lib;
    while let Some(at) = rest.find("use ") {
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        let tree = after[..end].trim();
        let tree = tree.strip_prefix("crate::").unwrap_or(tree);
        let (head, tail) = tree.split_once("::").unwrap_or((tree, ""));
        if units.contains(head) {
            for leaf in leaves(tail) {
                map.insert(leaf, head.to_string());
            }
        }
        rest = &after[end..];
    }
    map
}

/// The names a use tree brings in: `{A, b::C as D, e::{F}}` gives A, D, F.
fn leaves(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        return split_top(inner).iter().flat_map(|t| leaves(t)).collect();
    }
    if let Some((_, rest)) = tree.split_once("::") {
        return leaves(rest);
    }
    let name = tree.rsplit(" as ").next().unwrap_or(tree).trim();
    if name.is_empty() || name == "*" || name == "self" {
        Vec::new()
    } else {
        vec![name.to_string()]
    }
}

/// `s` split at its commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut level, mut start) = (0usize, 0);
    for (k, c) in s.char_indices() {
        match c {
            '{' => level += 1,
            '}' => level = level.saturating_sub(1),
            ',' if level == 0 => {
                parts.push(&s[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The imports in `text` (file `rel`, of unit `from`) of other units.
fn find_imports(
    rel: &Path,
    from: &str,
    text: &str,
    units: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Vec<Import> {
    let code = strip(text);
    let climb = "super::".repeat(depth(rel));
    let mut starts: Vec<(usize, usize)> = Vec::new();
    for (pos, _) in code.match_indices("crate::") {
        let before = code[..pos].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        starts.push((pos, pos + "crate::".len()));
    }
    if depth(rel) >= 2 {
        for (pos, _) in code.match_indices(&climb) {
            let before = code[..pos].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            starts.push((pos, pos + climb.len()));
        }
    }
    let mut out = Vec::new();
    for (pos, body) in starts {
        let line = code[..pos].matches('\n').count() + 1;
        let rest = code[body..].trim_start();
        let names: Vec<String> = if rest.starts_with('{') {
            let mut level = 0usize;
            let mut end = rest.len();
            for (k, c) in rest.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => {
                        level -= 1;
                        if level == 0 {
                            end = k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            split_top(&rest[1..end])
                .iter()
                .map(|t| ident_at(t.trim()).to_string())
                .collect()
        } else {
            vec![ident_at(rest).to_string()]
        };
        for name in names {
            let to = if units.contains(&name) {
                name.clone()
            } else if let Some(u) = reexports.get(&name) {
                u.clone()
            } else {
                continue;
            };
            if to != from {
                let path = code[pos..].split(|c: char| c.is_whitespace() || c == ';' || c == '(');
                out.push(Import {
                    from: from.to_string(),
                    to,
                    at: format!(
                        "src/{}:{line}: {}",
                        rel.display(),
                        path.into_iter().next().unwrap_or_default()
                    ),
                });
            }
        }
    }
    out
}

/// The loops of more than two units among `imports` (strongly connected components, Tarjan).
fn loops(units: &BTreeSet<String>, imports: &[Import]) -> Vec<BTreeSet<String>> {
    let names: Vec<&String> = units.iter().collect();
    let index: BTreeMap<&String, usize> = names.iter().enumerate().map(|(k, n)| (*n, k)).collect();
    let mut adj = vec![BTreeSet::new(); names.len()];
    for i in imports {
        if let (Some(&a), Some(&b)) = (index.get(&i.from), index.get(&i.to)) {
            adj[a].insert(b);
        }
    }
    struct Tarjan<'a> {
        adj: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on[v] = true;
            for &w in self.adj[v].clone().iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                self.out.push(scc);
            }
        }
    }
    let n = names.len();
    let mut t = Tarjan {
        adj: &adj,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
        .into_iter()
        .filter(|scc| scc.len() > 2)
        .map(|scc| scc.into_iter().map(|k| names[k].clone()).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_workspace_crates_keep_their_layers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for krate in WORKSPACE_CRATES {
            let src = root.join("crates").join(krate).join("src");
            let found = check(&src).unwrap();
            assert!(
                found.is_empty(),
                "{krate} breaks its layers:\n{}",
                found.join("\n")
            );
        }
    }

    #[test]
    fn comments_strings_and_tests_are_not_imports() {
        let text = "// crate::b::X\n/* crate::b */ let s = \"crate::b\"; let c = '\"';\n\
                    let r = r#\"crate::b\"#;\n#[cfg(test)]\nmod tests { use crate::b::Y; }\n\
                    #[cfg(all(test, not(loom)))]\nfn t() { crate::b::z(); }\n\
                    fn f<'a>(x: &'a u8) { crate::c::g(); }\n";
        let found = find_imports(
            Path::new("a.rs"),
            "a",
            text,
            &units(&["a", "b", "c"]),
            &BTreeMap::new(),
        );
        let to: Vec<&str> = found.iter().map(|i| i.to.as_str()).collect();
        assert_eq!(to, ["c"], "{found:?}");
        assert!(found[0].at.starts_with("src/a.rs:8:"), "{}", found[0].at);
    }

    #[test]
    fn groups_reexports_and_climbs_resolve_to_units() {
        let lib = "pub use join::{join, join_all as all};\npub use crate::scope::Scope;\n";
        let all = units(&["join", "scope", "iter", "a"]);
        let re = parse_reexports(&strip(lib), &all);
        assert_eq!(re.get("all").map(String::as_str), Some("join"));
        assert_eq!(re.get("Scope").map(String::as_str), Some("scope"));
        let text = "use crate::{join, scope::{self, Scope}};\nuse super::super::a::X;\n\
                    use super::sibling;\n";
        let found = find_imports(Path::new("iter/drive.rs"), "iter", text, &all, &re);
        let to: BTreeSet<&str> = found.iter().map(|i| i.to.as_str()).collect();
        assert_eq!(to, BTreeSet::from(["join", "scope", "a"]));
    }

    #[test]
    fn an_upward_import_and_a_loop_of_three_are_named() {
        let layers = parse_table(
            "| file | concept |\n|---|---|\n| `a.rs` | low |\n| `b.rs`, `c/` | mid |\n\
             | `d.rs` | high |\n| `gone.rs` | stale |\n",
        );
        assert_eq!(layers["c"], 1);
        let all = units(&["a", "b", "c", "d", "e"]);
        let imp = |from: &str, to: &str| Import {
            from: from.into(),
            to: to.into(),
            at: format!("src/{from}.rs:1: crate::{to}"),
        };
        // b <-> c is allowed (two files, one layer); a -> d goes up; a -> b -> c -> a is a
        // loop of three.
        let found = problems(
            &layers,
            &all,
            &[imp("b", "c"), imp("c", "b"), imp("d", "a")],
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("`e` has no row"));
        assert!(found[1].contains("names `gone`"));
        let found = problems(
            &layers,
            &all,
            &[imp("a", "b"), imp("b", "c"), imp("c", "a"), imp("a", "d")],
        );
        assert!(
            found.iter().any(|p| p.contains("`a` imports `d`")),
            "{found:#?}"
        );
        assert!(
            found
                .iter()
                .any(|p| p.contains("a loop of 3 files (a, b, c)")),
            "{found:#?}"
        );
    }
}
