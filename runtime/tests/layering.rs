//! twin-runtime executes a schedule and shares only the vocabulary with the simulator (the
//! scenario, the plan, the schedule IR, the trace and step-outcome types, the profile formats):
//! it does not reach into the simulator's modelling. This test reads every source file of the
//! library (`src/**/*.rs`) and fails, naming file and line, where one names twin-sim's
//! `engine`, `cost` or `predict` module, or an item twin-sim re-exports from them at its root
//! (`twin_sim::predict`, `twin_sim::Staged`, ...; read from twin-sim's `lib.rs`). It reads
//! tokens, not lines: comments and strings do not count, a `use` group split over lines does,
//! and so do paths inside macros and through an alias of the crate (`use twin_sim as sim`).
//!
//! The crate's own tests and examples (`tests/`, `examples/`) play the caller, who may predict
//! a scenario and hand the prediction in, so they are not scanned.
#![cfg(test)] // helpers too are test code, for clippy.toml's allow-*-in-tests

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::str::FromStr;

/// twin-sim's modules of modelling, which the runtime must not name.
const MODELLING: [&str; 3] = ["engine", "cost", "predict"];

/// The names twin-sim's root re-exports from its modelling modules (`pub use predict::{...}`).
fn root_reexports(lib_rs: &str) -> Result<BTreeSet<String>, String> {
    let file = syn::parse_file(lib_rs).map_err(|e| format!("twin-sim's lib.rs: {e}"))?;
    let mut names = BTreeSet::new();
    for item in &file.items {
        if let syn::Item::Use(u) = item {
            if matches!(u.vis, syn::Visibility::Public(_)) {
                reexported(&u.tree, false, &mut names)?;
            }
        }
    }
    Ok(names)
}

/// Collect the names `tree` re-exports from a modelling module (`inside`: the path already
/// went through one).
fn reexported(
    tree: &syn::UseTree,
    inside: bool,
    names: &mut BTreeSet<String>,
) -> Result<(), String> {
    match tree {
        syn::UseTree::Path(p) => {
            let module = p.ident.to_string();
            reexported(
                &p.tree,
                inside || MODELLING.contains(&module.as_str()),
                names,
            )
        }
        syn::UseTree::Name(n) if inside => {
            names.insert(n.ident.to_string());
            Ok(())
        }
        syn::UseTree::Rename(r) if inside => {
            names.insert(r.rename.to_string());
            Ok(())
        }
        syn::UseTree::Glob(_) if inside => Err(
            "twin-sim's lib.rs re-exports a modelling module with a glob: name the items, so \
             that this test knows which root names are modelling"
                .into(),
        ),
        syn::UseTree::Group(g) => g
            .items
            .iter()
            .try_for_each(|t| reexported(t, inside, names)),
        _ => Ok(()),
    }
}

/// One place a source file names the simulator's modelling.
#[derive(Debug, PartialEq, Eq)]
struct Hit {
    line: usize,
    what: String,
}

/// Where `src` names a modelling module of twin-sim or one of `banned_root` (twin-sim's root
/// names that are modelling), through `twin_sim` or an alias of it.
fn hits(src: &str, banned_root: &BTreeSet<String>) -> Result<Vec<Hit>, String> {
    let tokens = TokenStream::from_str(src).map_err(|e| format!("does not lex: {e}"))?;
    let mut crate_names = BTreeSet::from(["twin_sim".to_string()]);
    aliases(tokens.clone(), &mut crate_names);
    let mut out = Vec::new();
    scan(tokens, &crate_names, banned_root, &mut out);
    out.sort_by_key(|h| h.line);
    Ok(out)
}

fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn ident(t: Option<&TokenTree>) -> Option<String> {
    match t {
        Some(TokenTree::Ident(i)) => Some(i.to_string()),
        _ => None,
    }
}

/// `twin_sim as X` (in `use` or `extern crate`) and `twin_sim::{self as X}`: X names the crate.
fn aliases(tokens: TokenStream, names: &mut BTreeSet<String>) {
    let t: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tok) in t.iter().enumerate() {
        if let TokenTree::Group(g) = tok {
            aliases(g.stream(), names);
        }
        let alias = |at: usize| match (ident(t.get(at)), ident(t.get(at + 1))) {
            (Some(a), Some(x)) if a == "as" => Some(x),
            _ => None,
        };
        if ident(Some(tok)).as_deref() == Some("twin_sim") {
            if let Some(x) = alias(i + 1) {
                names.insert(x);
            }
            // twin_sim::{self as X, ...}
            if is_punct(t.get(i + 1), ':') && is_punct(t.get(i + 2), ':') {
                if let Some(TokenTree::Group(g)) = t.get(i + 3) {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    for (j, x) in inner.iter().enumerate() {
                        if ident(Some(x)).as_deref() == Some("self") {
                            if let (Some(a), Some(name)) =
                                (ident(inner.get(j + 1)), ident(inner.get(j + 2)))
                            {
                                if a == "as" {
                                    names.insert(name);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn line(span: Span) -> usize {
    span.start().line
}

/// Every `CRATE::` followed by a modelling name, a `{...}` group naming one at its top, or `*`.
fn scan(
    tokens: TokenStream,
    crate_names: &BTreeSet<String>,
    banned_root: &BTreeSet<String>,
    out: &mut Vec<Hit>,
) {
    let t: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tok) in t.iter().enumerate() {
        if let TokenTree::Group(g) = tok {
            scan(g.stream(), crate_names, banned_root, out);
        }
        let Some(name) = ident(Some(tok)) else {
            continue;
        };
        if !crate_names.contains(&name)
            || !is_punct(t.get(i + 1), ':')
            || !is_punct(t.get(i + 2), ':')
        {
            continue;
        }
        match t.get(i + 3) {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                group_hits(g.stream(), &name, banned_root, out);
            }
            Some(next) => {
                if let Some(h) = element_hit(next, &name, banned_root) {
                    out.push(h);
                }
            }
            None => {}
        }
    }
}

/// The first token of one path after `CRATE::`: a hit when it is a modelling name or a glob.
fn element_hit(first: &TokenTree, krate: &str, banned_root: &BTreeSet<String>) -> Option<Hit> {
    match first {
        TokenTree::Ident(i) => {
            let n = i.to_string();
            let what = if MODELLING.contains(&n.as_str()) {
                format!("{krate}::{n}: the simulator's `{n}` module")
            } else if banned_root.contains(&n) {
                format!("{krate}::{n}: re-exported by twin-sim from a modelling module")
            } else {
                return None;
            };
            Some(Hit {
                line: line(i.span()),
                what,
            })
        }
        TokenTree::Punct(p) if p.as_char() == '*' => Some(Hit {
            line: line(p.span()),
            what: format!("{krate}::*: a glob import takes the modelling names too"),
        }),
        _ => None,
    }
}

/// The paths of a `CRATE::{a::B, c, ...}` group: each element's first token.
fn group_hits(group: TokenStream, krate: &str, banned_root: &BTreeSet<String>, out: &mut Vec<Hit>) {
    let mut at_start = true;
    for tok in group {
        if at_start {
            match &tok {
                TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                    group_hits(g.stream(), krate, banned_root, out)
                }
                other => out.extend(element_hit(other, krate, banned_root)),
            }
        }
        at_start = matches!(&tok, TokenTree::Punct(p) if p.as_char() == ',');
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn banned_root() -> BTreeSet<String> {
    let lib = manifest_dir().join("../sim/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    root_reexports(&text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_runtime_names_no_modelling_of_the_simulator() {
    let banned = banned_root();
    let root = manifest_dir();
    let pattern = root.join("src/**/*.rs");
    let mut files = 0;
    let mut found = Vec::new();
    for entry in glob::glob(&pattern.to_string_lossy()).expect("a valid glob pattern") {
        let path = entry.expect("a readable source path");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        files += 1;
        match hits(&text, &banned) {
            Ok(h) => found.extend(
                h.into_iter()
                    .map(|h| format!("runtime/{shown}:{}: {}", h.line, h.what)),
            ),
            Err(e) => found.push(format!("runtime/{shown}: {e}")),
        }
    }
    assert!(
        files > 20,
        "only {files} source files under {}",
        pattern.display()
    );
    assert!(
        found.is_empty(),
        "twin-runtime names the simulator's modelling (engine, cost, predict); the runtime shares \
         only the vocabulary (scenario, plan, schedule, trace, outcome, profile, host_backend). \
         Move a shared item into the vocabulary, or have the caller compute a prediction and \
         pass it in:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_root_reexports_of_predict_are_known() {
    let banned = banned_root();
    for name in [
        "predict",
        "predict_with",
        "Staged",
        "PredictOptions",
        "Prediction",
    ] {
        assert!(banned.contains(name), "{name} not in {banned:?}");
    }
    // Vocabulary re-exported at the root would not count.
    let lib = "pub mod plan;\nmod predict;\npub use predict::{predict, Staged as S};\npub use plan::Plan;\n";
    let names = root_reexports(lib).unwrap();
    assert_eq!(
        names,
        BTreeSet::from(["predict".to_string(), "S".to_string()])
    );
    assert!(root_reexports("pub use engine::*;").is_err());
}

fn lines(src: &str) -> Vec<usize> {
    let banned = BTreeSet::from(["Staged".to_string(), "predict".to_string()]);
    hits(src, &banned).unwrap().iter().map(|h| h.line).collect()
}

#[test]
fn a_modelling_import_is_found_in_any_layout() {
    assert_eq!(lines("use twin_sim::engine::SimResult;"), vec![1]);
    // A use group over several lines: the line of the modelling path.
    let group = "use twin_sim::{\n    plan::Plan,\n    engine::{RankStats, SimResult},\n};\n";
    assert_eq!(lines(group), vec![3]);
    let nested = "use twin_sim::{plan::Plan, {cost::Analytic}};";
    assert_eq!(lines(nested), vec![1]);
    // Paths in code, in macros, and the root re-exports of predict.
    let code = "fn f() {\n    let p = twin_sim::predict(&s, &o);\n    assert_eq!(x, \
                ::twin_sim::cost::HOST);\n    let s = twin_sim::Staged::new(&s);\n}\n";
    assert_eq!(lines(code), vec![2, 3, 4]);
    // Through an alias of the crate, and a glob.
    assert_eq!(
        lines("use twin_sim as sim;\nfn f() { sim::cost::x(); }"),
        vec![2]
    );
    assert_eq!(
        lines("use twin_sim::{self as s};\nuse s::engine::X;"),
        vec![2]
    );
    assert_eq!(lines("use twin_sim::*;"), vec![1]);
    assert_eq!(lines("use twin_sim::{plan::Plan, *};"), vec![1]);
}

#[test]
fn vocabulary_comments_and_strings_are_not_imports() {
    let src = "//! Like `twin_sim::engine::turns`.\n/// See [`twin_sim::cost`].\nuse \
               twin_sim::outcome::SimResult;\nuse twin_sim::{plan::Plan, schedule::{Op, \
               OpKind}};\n/* twin_sim::predict */\nconst S: &str = \"twin_sim::cost\";\nfn \
               f(x: twin_sim::trace::Trace) {}\n";
    assert_eq!(lines(src), Vec::<usize>::new());
    // A module named like a modelling one elsewhere in a path is not twin-sim's.
    assert_eq!(
        lines("use crate::engine::X;\nuse other::cost::Y;"),
        Vec::<usize>::new()
    );
}

#[test]
fn a_source_that_does_not_lex_is_reported() {
    assert!(hits("fn f() { \"unterminated }", &BTreeSet::new()).is_err());
}
