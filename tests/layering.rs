//! The layout's rule, checked: `src/` is a stack of floors, and a module imports only from its
//! own floor and the floors below it. Nothing in the core imports from the driver, the
//! in-memory doubles, the conformance kit or the simulator; within the core, the tables know
//! nothing of the protocol, and the reconciler sits on top. On top of the floors, no two files
//! may import each other, directly or around a loop.
//!
//! The check reads every `src/**/*.rs` and follows each `crate::` path in code (comments,
//! doc comments included, are skipped: a doc may link anywhere). A new module gets a floor in
//! [`FLOORS`]; a file outside every floor fails the check, so a new folder cannot slip in
//! unplaced. docs/design.md ("Layout") describes the floors.
//!
//! A unit-test module in a file of its own (`#[cfg(test)] mod tests;`, private, and the files
//! below it) may import from any floor: it is built only for the crate's own tests, nothing
//! else can import it, and it drives its module through the crate's `testkit` like any other
//! test. Everything else, test-only helpers that other modules import included, keeps its floor.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first. A module's floor is that of the longest prefix listed here;
/// modules on one line share a floor.
const FLOORS: &[&[&str]] = &[
    // What everything is generic over, and the upstream-bug switches.
    &["domain", "upstream_bugs"],
    &["config"],
    // The core, bottom up.
    &["core::tables"],
    &["core::calls"],
    &["core::state"],
    &["core::operation"],
    &["core::outcome"],
    &["core::input"],
    // Answers to "why does it wait?", in the state's terms (the reconciler fills them in).
    &["core::explain"],
    &["core::event"],
    &["core::rules"],
    &["core::plan"],
    &["core::reconciler"],
    // The core's facade: core/mod.rs re-exports, and imports nothing else.
    &["core"],
    // Above the core: the traits the driver calls, the doubles, the driver, the kits.
    &["traits"],
    &["testkit"],
    &["memory"],
    &["controller"],
    &["conformance"],
    &["sim"],
];

/// One `crate::` path in a file's code.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    line: usize,
    /// The path's segments after `crate::`, as far as they name modules or items.
    segments: Vec<String>,
}

/// The module a file defines: `src/core/state/actual/mod.rs` is `core::state::actual`,
/// `src/core/mod.rs` is `core`, `src/lib.rs` the root (empty).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap();
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// The index in [`FLOORS`] of `module`'s floor, if it has one. The crate root (its
/// re-exports of `Domain`, `Id`, `Ids`, `Name`) counts as the ground floor.
fn floor_of(module: &str) -> Option<usize> {
    if module.is_empty() {
        return Some(0);
    }
    let mut best: Option<(usize, usize)> = None;
    for (floor, prefixes) in FLOORS.iter().enumerate() {
        for prefix in *prefixes {
            let matches = module == *prefix || module.starts_with(&format!("{prefix}::"));
            if matches && best.is_none_or(|(len, _)| prefix.len() > len) {
                best = Some((prefix.len(), floor));
            }
        }
    }
    best.map(|(_, floor)| floor)
}

/// `line` without its comment, if any (a `//` outside a string literal).
fn code_of(line: &str) -> &str {
    let mut in_string = false;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '"' if prev != '\\' => in_string = !in_string,
            '/' if prev == '/' && !in_string => return &line[..i - 1],
            _ => {}
        }
        prev = c;
    }
    line
}

/// Every `crate::` path in `text`'s code, groups (`crate::a::{b, c::d}`) expanded.
fn imports(text: &str) -> Vec<Import> {
    let mut found = Vec::new();
    // Join the code so that a `use crate::x::{...}` spread over lines reads as one.
    let mut code = String::new();
    let mut line_at = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for _ in 0..code_of(line).len() + 1 {
            line_at.push(n + 1);
        }
        code.push_str(code_of(line));
        code.push('\n');
    }
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(off) = code[at..].find("crate::") {
        let start = at + off;
        at = start + "crate::".len();
        // `crate::` inside a longer identifier (`my_crate::`) is not ours.
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let mut paths = Vec::new();
        parse_tail(&code, &mut at, Vec::new(), &mut paths);
        for segments in paths {
            found.push(Import {
                line: line_at[start],
                segments,
            });
        }
    }
    found
}

/// Reads the path after `crate::` from `*at`, pushing each full path (groups expanded).
fn parse_tail(code: &str, at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let bytes = code.as_bytes();
    let mut segments = prefix;
    loop {
        while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
            *at += 1;
        }
        if *at < bytes.len() && bytes[*at] == b'{' {
            *at += 1;
            loop {
                parse_tail(code, at, segments.clone(), out);
                while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
                    *at += 1;
                }
                match bytes.get(*at) {
                    Some(b',') => *at += 1,
                    Some(b'}') => {
                        *at += 1;
                        return;
                    }
                    _ => return,
                }
                while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
                    *at += 1;
                }
                if bytes.get(*at) == Some(&b'}') {
                    *at += 1;
                    return;
                }
            }
        }
        let begin = *at;
        while *at < bytes.len() && (bytes[*at].is_ascii_alphanumeric() || bytes[*at] == b'_') {
            *at += 1;
        }
        if *at > begin {
            segments.push(code[begin..*at].to_string());
        }
        if code[*at..].starts_with("::") {
            *at += 2;
            continue;
        }
        // Skip an `as alias`, so a group's next item starts clean.
        let rest = code[*at..].trim_start();
        if let Some(alias) = rest.strip_prefix("as ") {
            let name = alias.trim_start();
            let len = name
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(name.len());
            *at = code.len() - name.len() + len;
        }
        out.push(segments);
        return;
    }
}

/// The file a path lands in: the longest prefix of its segments that is a module of a file.
fn target_module(modules: &BTreeSet<String>, segments: &[String]) -> String {
    (0..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

/// The unit-test modules among `files`: each one its parent declares private and test-only
/// (`#[cfg(test)]` on the line before `mod name;`), and every module below one.
fn test_modules(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut declared = BTreeSet::new();
    for (module, text) in files {
        let mut test_only = false;
        for line in text.lines().map(|l| code_of(l).trim()) {
            if let Some(name) = line.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                if test_only {
                    let name = name.trim();
                    declared.insert(if module.is_empty() {
                        name.to_string()
                    } else {
                        format!("{module}::{name}")
                    });
                }
            }
            if !line.is_empty() {
                test_only = line == "#[cfg(test)]";
            }
        }
    }
    files
        .keys()
        .filter(|m| {
            declared
                .iter()
                .any(|t| *m == t || m.starts_with(&format!("{t}::")))
        })
        .cloned()
        .collect()
}

/// What the check finds wrong: imports running up a floor, files outside every floor, loops.
fn violations(files: &BTreeMap<String, String>) -> Vec<String> {
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let tests = test_modules(files);
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in files {
        let Some(own) = floor_of(module) else {
            wrong.push(format!("{module}: in no floor; give it one in FLOORS"));
            continue;
        };
        for import in imports(text) {
            let target = target_module(&modules, &import.segments);
            let path = import.segments.join("::");
            match floor_of(&target) {
                Some(floor) if floor > own && !module.is_empty() && !tests.contains(module) => {
                    wrong.push(format!(
                        "{module}:{}: imports crate::{path} from floor {:?}, above its own {:?}",
                        import.line, FLOORS[floor], FLOORS[own]
                    ))
                }
                None => wrong.push(format!(
                    "{module}:{}: imports crate::{path}, in no floor",
                    import.line
                )),
                _ => {}
            }
            if target != *module && !module.is_empty() {
                edges.entry(module).or_default().insert(target);
            }
        }
    }
    wrong.extend(cycles(&edges));
    wrong
}

/// Each loop of files importing each other, once.
fn cycles(edges: &BTreeMap<&str, BTreeSet<String>>) -> Vec<String> {
    // Depth-first, colouring: a grey node met again closes a loop.
    fn visit<'a>(
        node: &'a str,
        edges: &'a BTreeMap<&str, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, bool>,
        stack: &mut Vec<&'a str>,
        found: &mut Vec<String>,
    ) {
        state.insert(node, false);
        stack.push(node);
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(false) => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut loop_ = stack[from..].to_vec();
                    loop_.push(next);
                    found.push(format!("import circle: {}", loop_.join(" -> ")));
                }
                Some(true) => {}
                None => visit(next, edges, state, stack, found),
            }
        }
        stack.pop();
        state.insert(node, true);
    }
    let mut state = BTreeMap::new();
    let mut found = Vec::new();
    for node in edges.keys() {
        if !state.contains_key(node) {
            visit(node, edges, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_stays_on_its_floor_or_goes_down_and_none_loops() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: BTreeMap<String, String> = paths
        .iter()
        .map(|p| (module_of(&src, p), fs::read_to_string(p).unwrap()))
        .collect();
    assert!(files.len() > 50, "read only {} files", files.len());
    let wrong = violations(&files);
    assert!(
        wrong.is_empty(),
        "the layering is broken:\n{}",
        wrong.join("\n")
    );
}

/// The check itself finds what it must: a import up a floor, a loop within one, a file in no
/// floor, a group import, and it skips comments.
#[test]
fn the_check_finds_an_import_up_a_loop_and_an_unplaced_file() {
    let file = |m: &str, text: &str| (m.to_string(), text.to_string());
    let clean: BTreeMap<_, _> = [
        file("domain", ""),
        file("core::plan::schedule", ""),
        file(
            "core::state::actual",
            "use crate::core::tables::marks::Marks;\n",
        ),
        file(
            "core::tables::marks",
            "// see crate::core::reconciler\n/// [x](crate::sim)\n",
        ),
        file(
            "core::reconciler",
            "use crate::core::{state::actual::X, tables::marks::{self, Y as Z}};\n",
        ),
    ]
    .into();
    assert_eq!(violations(&clean), Vec::<String>::new());

    let mut up = clean.clone();
    up.insert(
        "core::state::actual".into(),
        "fn f() { crate::core::reconciler::Reconciler::new(); }\n".into(),
    );
    let found = violations(&up);
    assert!(
        found
            .iter()
            .any(|w| w.starts_with("core::state::actual:1: imports crate::core::reconciler")),
        "{found:?}"
    );

    let mut grouped = clean.clone();
    grouped.insert(
        "core::tables::marks".into(),
        "use crate::{domain::Id,\n    core::{plan::schedule::S}};\n".into(),
    );
    let found = violations(&grouped);
    assert!(
        found
            .iter()
            .any(|w| w.contains("core::tables::marks:1: imports crate::core::plan")),
        "{found:?}"
    );

    let mut circle = clean.clone();
    circle.insert(
        "core::rules::a".into(),
        "use crate::core::rules::b::B;\n".into(),
    );
    circle.insert(
        "core::rules::b".into(),
        "use crate::core::rules::a::A;\n".into(),
    );
    let found = violations(&circle);
    assert!(
        found
            .iter()
            .any(|w| w
                .starts_with("import circle: core::rules::a -> core::rules::b -> core::rules::a")),
        "{found:?}"
    );

    // A private test module, in its own file or below one, may use the testkit; the module it
    // tests, a test-only helper others import, and a module merely next to a `#[cfg(test)]`
    // line may not.
    let mut tested = clean.clone();
    tested.insert(
        "core::reconciler".into(),
        "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod helper;\n#[cfg(test)]\nfn f() {}\nmod plain;\nfn g() { crate::testkit::Harness::new(); }\n".into(),
    );
    tested.insert("testkit".into(), String::new());
    for module in [
        "core::reconciler::tests",
        "core::reconciler::tests::more",
        "core::reconciler::helper",
        "core::reconciler::plain",
    ] {
        tested.insert(module.into(), "use crate::testkit::Harness;\n".into());
    }
    let found = violations(&tested);
    // Each finding starts `module:line: imports`.
    let up: Vec<&str> = found
        .iter()
        .filter_map(|w| w.split_once(": imports")?.0.rsplit_once(':'))
        .map(|(module, _)| module)
        .collect();
    assert_eq!(
        up,
        [
            "core::reconciler",
            "core::reconciler::helper",
            "core::reconciler::plain"
        ],
        "{found:?}"
    );

    let mut unplaced = clean;
    unplaced.insert("driver".into(), String::new());
    assert_eq!(
        violations(&unplaced),
        vec!["driver: in no floor; give it one in FLOORS".to_string()]
    );
}
