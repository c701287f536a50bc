//! twin-sim's top-level modules form layers: no module imports, directly or through others,
//! a module that imports it. This test reads every product source file of the crate
//! (`src/**/*.rs`, without test files and `#[cfg(test)] mod` blocks) as tokens, takes every
//! `crate::a::…`, `super::…` and `self::…` path (in `use` trees and in code; comments and
//! strings do not count) as an edge from the file's top-level module to `a`, and fails on a
//! strongly connected component of more than one module, naming the file and line of each edge
//! inside it.
//!
//! `cargo test -p twin-sim --test module_graph -- --nocapture` prints the whole graph.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Files that hold only tests (declared `#[cfg(test)] mod` by their parents).
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "proptests.rs"
        || name == "testkit.rs"
}

/// `engine/run/cores.rs` -> [engine, run, cores]; `engine/mod.rs` -> [engine]; `lib.rs` -> [].
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// One edge of the graph: where it is written.
#[derive(Clone, Debug)]
struct Site {
    file: String,
    line: usize,
}

/// Resolves `segments` (a `crate`/`super`/`self` path) from `module` to its absolute path.
fn resolve(segments: &[String], module: &[String]) -> Option<Vec<String>> {
    let (head, rest) = segments.split_first()?;
    match head.as_str() {
        "crate" => Some(rest.to_vec()),
        "super" | "self" => {
            let mut base = module.to_vec();
            let mut i = 0;
            while let Some(s) = segments.get(i) {
                match s.as_str() {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                i += 1;
            }
            base.extend(segments[i..].iter().cloned());
            Some(base)
        }
        _ => None,
    }
}

/// The first path segment of each item of a `{ a::X, b, c::{..} }` use group.
fn group_heads(stream: TokenStream) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut at_item_start = true;
    for tt in stream {
        match &tt {
            TokenTree::Ident(i) if at_item_start => {
                out.push((i.to_string(), i.span().start().line));
                at_item_start = false;
            }
            TokenTree::Punct(p) if p.as_char() == ',' => at_item_start = true,
            _ => at_item_start = false,
        }
    }
    out
}

/// Every crate-relative path in `stream` as (line, absolute path), skipping
/// `#[cfg(test)] mod name { … }` blocks.
fn paths(stream: TokenStream, module: &[String], out: &mut Vec<(usize, Vec<String>)>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        // #[cfg(test)] mod x { ... }
        if let (Some(TokenTree::Punct(p)), Some(TokenTree::Group(g))) =
            (tokens.get(i), tokens.get(i + 1))
        {
            if p.as_char() == '#'
                && g.delimiter() == Delimiter::Bracket
                && g.stream().to_string().replace(' ', "") == "cfg(test)"
            {
                let mut j = i + 2;
                if matches!(tokens.get(j), Some(TokenTree::Ident(v)) if v == "pub") {
                    j += 1;
                    if matches!(tokens.get(j), Some(TokenTree::Group(_))) {
                        j += 1;
                    }
                }
                if matches!(tokens.get(j), Some(TokenTree::Ident(m)) if m == "mod") {
                    // skip `mod name { .. }` or `mod name;`
                    i = j + 3;
                    continue;
                }
            }
        }
        match &tokens[i] {
            TokenTree::Ident(id)
                if matches!(id.to_string().as_str(), "crate" | "super" | "self")
                    && !preceded_by_path_sep(&tokens, i) =>
            {
                let line = id.span().start().line;
                let mut segments = vec![id.to_string()];
                let mut j = i;
                loop {
                    let sep = matches!(
                        (tokens.get(j + 1), tokens.get(j + 2)),
                        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                            if a.as_char() == ':' && b.as_char() == ':'
                    );
                    if !sep {
                        break;
                    }
                    match tokens.get(j + 3) {
                        Some(TokenTree::Ident(next)) => {
                            segments.push(next.to_string());
                            j += 3;
                        }
                        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                            for (head, l) in group_heads(g.stream()) {
                                let mut s = segments.clone();
                                s.push(head);
                                if let Some(p) = resolve(&s, module) {
                                    out.push((l, p));
                                }
                            }
                            j += 3;
                            break;
                        }
                        _ => break,
                    }
                }
                if segments.len() > 1 {
                    if let Some(p) = resolve(&segments, module) {
                        out.push((line, p));
                    }
                }
                i = j + 1;
            }
            TokenTree::Group(g) => {
                paths(g.stream(), module, out);
                i += 1;
            }
            _ => i += 1,
        }
    }
}

fn preceded_by_path_sep(tokens: &[TokenTree], i: usize) -> bool {
    i >= 1 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == ':')
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The graph of top-level modules: module -> (imported module -> first site).
fn graph() -> BTreeMap<String, BTreeMap<String, Site>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let top: BTreeSet<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&src).ok()?.to_string_lossy().to_string();
            module_of(&rel).first().cloned()
        })
        .collect();
    let mut g: BTreeMap<String, BTreeMap<String, Site>> = BTreeMap::new();
    for f in files {
        let rel = f
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if is_test_file(&rel) {
            continue;
        }
        let module = module_of(&rel);
        let Some(from) = module.first().cloned() else {
            continue; // lib.rs declares the modules
        };
        let text = std::fs::read_to_string(&f).expect("readable source");
        let stream = TokenStream::from_str(&text)
            .unwrap_or_else(|e| panic!("{rel}: not Rust tokens: {e:?}"));
        let mut found = Vec::new();
        paths(stream, &module, &mut found);
        let node = g.entry(from.clone()).or_default();
        for (line, path) in found {
            let Some(to) = path.first() else { continue };
            if *to == from || !top.contains(to) {
                continue;
            }
            node.entry(to.clone()).or_insert(Site {
                file: rel.clone(),
                line,
            });
        }
    }
    g
}

/// Strongly connected components (Tarjan), each sorted; singletons included.
fn components(g: &BTreeMap<String, BTreeMap<String, Site>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, Site>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(edges) = t.g.get(v) {
            for w in edges.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(lw));
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(iw));
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            t.out.push(comp);
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn twin_sim_modules_have_no_import_cycle() {
    let g = graph();
    for (from, edges) in &g {
        let to: Vec<&str> = edges.keys().map(String::as_str).collect();
        println!("{from} -> {}", to.join(", "));
    }
    let mut report = String::new();
    for comp in components(&g).into_iter().filter(|c| c.len() > 1) {
        report.push_str(&format!("cycle among {}:\n", comp.join(", ")));
        for from in &comp {
            for (to, site) in &g[from] {
                if comp.contains(to) {
                    report.push_str(&format!(
                        "  {from} -> {to}  (sim/src/{}:{})\n",
                        site.file, site.line
                    ));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "twin-sim's modules import each other in a cycle; move the shared type down a \
         layer (docs/architecture.md):\n{report}"
    );
}

/// The reader finds what it must: the edges of a known layering, through `use` groups,
/// `super::` paths and paths in code.
#[test]
fn the_reader_sees_use_groups_super_paths_and_code_paths() {
    let text = r#"
        use crate::{plan::Plan, scenario::{Model, Precision}};
        use super::sibling::X;
        // use crate::commented::Out;
        fn f() { let _ = crate::engine::run(); let s = "crate::in_string::No"; }
        #[cfg(test)]
        mod tests { use crate::testing::small; }
    "#;
    let module = vec!["schedule".to_string(), "emit".to_string()];
    let mut found = Vec::new();
    paths(
        TokenStream::from_str(text).expect("tokens"),
        &module,
        &mut found,
    );
    let heads: BTreeSet<String> = found.iter().map(|(_, p)| p[0].clone()).collect();
    let want: BTreeSet<String> = ["plan", "scenario", "schedule", "engine"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(heads, want);
}
