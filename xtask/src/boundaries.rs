//! The operator's layers, checked (`cargo xtask boundaries`, and part of `lint`): which module of
//! `operator/src` may name which, and no circle between them.
//!
//! A file's references are the `crate::…` and `super::…` paths in its code (comments are
//! skipped; `use crate::{a::b, c}` groups are expanded). A module is the file's path under
//! `operator/src` (`engine/flink/plan.rs` is `engine::flink::plan`); a rule names module
//! prefixes. The circle check works on layers: the top-level modules, with `engine` split into
//! its two adapters and the parts every engine shares. A module declaring and re-exporting its
//! own children (`engine` wiring up its adapters) is not a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// (modules, modules they may not name, why).
const RULES: &[(&str, &[&str], &str)] = &[
    (
        "objects",
        &[
            "decide",
            "engine",
            "controller",
            "http",
            "metrics",
            "leader",
        ],
        "what every engine makes is plain builders every layer shares",
    ),
    (
        "decide",
        &["engine", "controller", "http", "metrics", "leader", "clock"],
        "the decision is pure: it knows no engine adapter and does no I/O",
    ),
    (
        "engine::flink",
        &["engine::runtime"],
        "an engine adapter depends on no other adapter",
    ),
    (
        "engine::runtime",
        &["engine::flink"],
        "an engine adapter depends on no other adapter",
    ),
    (
        "engine::observe",
        &["engine::runtime", "engine::flink"],
        "what every engine observes alike knows no adapter",
    ),
];

/// Every module of the operator crate with the modules it names.
fn references(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).map_err(|e| e.to_string())?;
            let module = module_of(rel);
            let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let code = strip_comments(&text);
            let inline_from = inline_module_start(&code);
            let names: BTreeSet<String> = paths_in(&code)
                .into_iter()
                .filter_map(|(at, p)| {
                    // in an inline module (`mod tests { use super::*; }`) the first `super` is
                    // the file's own module
                    let p = match p.strip_prefix("super::") {
                        Some(rest) if at > inline_from => {
                            format!("{}::{rest}", module_self(&module))
                        }
                        _ => p,
                    };
                    resolve(&module, &p)
                })
                .collect();
            out.insert(module, names);
        }
    }
    Ok(out)
}

/// `engine/flink/plan.rs` → `engine::flink::plan`; `engine/mod.rs` → `engine`; `lib.rs` → ``.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// Where the file's first inline module (`mod tests {`) begins; inline modules come last, by
/// custom, so everything after it is inside one.
fn inline_module_start(code: &str) -> usize {
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let t = line.trim();
        if (t.starts_with("mod ") || t.starts_with("pub mod ") || t.starts_with("pub(crate) mod "))
            && t.ends_with('{')
        {
            return at;
        }
        at += line.len();
    }
    usize::MAX
}

/// The file's own module as a path `resolve` reads (`crate::a::b`, or `crate` for the root).
fn module_self(module: &str) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        format!("crate::{module}")
    }
}

fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // a `//` inside a string ("http://…") is not a comment; good enough for paths
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b` and `super::a` path with its offset, groups expanded
/// (`crate::{a, b::{c}}`).
fn paths_in(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        let mut pos = 0;
        while let Some(i) = code[pos..].find(start) {
            let at = pos + i;
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                pos = at + start.len();
                continue;
            }
            let mut found = Vec::new();
            let (used, ()) = expand(&code[at..], String::new(), &mut found);
            out.extend(found.into_iter().map(|p| (at, p)));
            pos = at + used.max(1);
        }
    }
    out
}

/// Reads one path (or group) at the start of `s` with `prefix`; returns the bytes read.
fn expand(s: &str, prefix: String, out: &mut Vec<String>) -> (usize, ()) {
    let mut path = prefix;
    let mut i = 0;
    let bytes = s.as_bytes();
    loop {
        let seg_end = s[i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(s.len(), |n| i + n);
        if seg_end > i {
            if !path.is_empty() {
                path.push_str("::");
            }
            path.push_str(&s[i..seg_end]);
            i = seg_end;
        }
        if s[i..].starts_with("::{") {
            i += 3;
            loop {
                let skip = s[i..].len() - s[i..].trim_start().len();
                i += skip;
                if i >= s.len() || bytes[i] == b'}' {
                    return (i + 1, ());
                }
                let (used, ()) = expand(&s[i..], path.clone(), out);
                i += used;
                let skip = s[i..].len() - s[i..].trim_start_matches([',', ' ', '\n']).len();
                i += skip;
            }
        }
        if s[i..].starts_with("::") {
            i += 2;
            continue;
        }
        out.push(path);
        return (i, ());
    }
}

/// A path as the module it names (`crate::decide::Action` → `decide`, `super::x` in
/// `engine/flink/plan.rs` → `engine::flink::x`); `None` for the crate root's items.
fn resolve(module: &str, path: &str) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = if segments.first() == Some(&"crate") {
        segments.remove(0);
        Vec::new()
    } else {
        // `super` of module `a::b` (file `a/b.rs` or `a/b/mod.rs`) is `a`
        let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
        while segments.first() == Some(&"super") {
            segments.remove(0);
            base.pop();
        }
        base
    };
    // a module path is its lowercase segments; an item (Type, CONST, fn) ends it
    for s in segments.into_iter().filter(|s| *s != "self") {
        if s.chars().next().is_some_and(|c| c.is_lowercase()) {
            base.push(s);
        } else {
            break;
        }
    }
    (!base.is_empty()).then(|| base.join("::"))
}

fn within(module: &str, prefix: &str) -> bool {
    module == prefix || module.starts_with(&format!("{prefix}::"))
}

/// The layer a module belongs to for the circle check.
fn layer(module: &str) -> String {
    for adapter in ["engine::runtime", "engine::flink"] {
        if within(module, adapter) {
            return adapter.to_string();
        }
    }
    module.split("::").next().unwrap_or(module).to_string()
}

/// Checks the rules and looks for circles; prints the layer graph. Errors name every break.
pub fn check(src: &Path, verbose: bool) -> Result<(), String> {
    let refs = references(src)?;
    let mut broken = Vec::new();
    for (module, names) in &refs {
        for (from, forbidden, why) in RULES {
            if !within(module, from) {
                continue;
            }
            for name in names {
                if let Some(f) = forbidden.iter().find(|f| within(name, f)) {
                    broken.push(format!("{module} names {name} ({f}): {why}"));
                }
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, names) in &refs {
        let from = layer(module);
        if from.is_empty() {
            continue;
        }
        for name in names {
            let to = layer(name);
            // a module wiring its own children up, and a layer's own files, make no edge
            if to == from || within(&to, &from) {
                continue;
            }
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    if verbose {
        for (from, tos) in &graph {
            let tos: Vec<&str> = tos.iter().map(String::as_str).collect();
            println!("{from} → {}", tos.join(", "));
        }
    }
    for cycle in cycles(&graph) {
        broken.push(format!("circle between layers: {}", cycle.join(" → ")));
    }
    if broken.is_empty() {
        eprintln!(
            "layers: {} modules, {} rules kept, no circle",
            refs.len(),
            RULES.len()
        );
        Ok(())
    } else {
        Err(format!(
            "broken layer boundaries:\n  {}",
            broken.join("\n  ")
        ))
    }
}

/// One circle per strongly connected group of layers (each listed from its smallest name).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let mut found: Vec<Vec<String>> = Vec::new();
    for node in graph.keys() {
        if found.iter().any(|c| c.contains(node)) {
            continue;
        }
        let from_node = reach(node);
        if !from_node.contains(node) {
            continue;
        }
        let group: Vec<String> = from_node
            .iter()
            .filter(|other| reach(other).contains(node))
            .cloned()
            .collect();
        found.push(group);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_groups_are_read_as_modules() {
        let code = "use crate::decide::{self, Action, workers::{A, b}};\nuse super::x::Y;\nlet a = crate::objects::names::pod_name(j);\nmycrate::z";
        let mut got: Vec<String> = paths_in(code)
            .into_iter()
            .filter_map(|(_, p)| resolve("engine::flink::plan", &p))
            .collect();
        got.sort();
        got.dedup();
        assert_eq!(
            got,
            [
                "decide",
                "decide::workers",
                "decide::workers::b",
                "engine::flink::x",
                "objects::names::pod_name"
            ]
        );
    }

    #[test]
    fn a_circle_is_found() {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        g.entry("a".into()).or_default().insert("b".into());
        g.entry("b".into()).or_default().insert("a".into());
        g.entry("b".into()).or_default().insert("c".into());
        assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    }
}
