//! The timeline picture (`simulate --timeline`): deterministic bytes, the structure a reader
//! relies on (a lane per node, a bar per attachment, the fence, violations in red), and the
//! copy committed for the README kept current.
#![cfg(feature = "sim")]

use attach_detach::sim::library::LIBRARY;
use attach_detach::sim::scenario::{Scenario, UpstreamBug, parse};
use attach_detach::sim::timeline::{BarState, Happening, NodeChange, render_svg};
use attach_detach::sim::{Report, run};

fn scenario(name: &str) -> Scenario {
    let text = LIBRARY
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no bundled scenario {name}"))
        .1;
    parse(text).unwrap_or_else(|e| panic!("{}", e.with_file(name)))
}

fn picture(name: &str) -> (Report, String) {
    let s = scenario(name);
    let report = run(&s);
    let svg = render_svg(name, &s, &report);
    (report, svg)
}

/// How often `needle` occurs in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Whether the picture has a text element saying exactly `words` (the svg crate writes a
/// text element's content on a line of its own).
fn has_text(svg: &str, words: &str) -> bool {
    svg.contains(&format!(">\n{words}\n</text>")) || svg.contains(&format!(">{words}</text>"))
}

/// The text of the lane of `node`: from its group to the next lane's (or the lane groups' end).
fn lane<'a>(svg: &'a str, node: &str) -> &'a str {
    let start = svg
        .find(&format!("class=\"lane\" data-node=\"{node}\""))
        .unwrap_or_else(|| panic!("no lane for {node}"));
    let rest = &svg[start..];
    let end = rest[1..]
        .find("class=\"lane\"")
        .map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

#[test]
fn the_same_run_draws_the_same_bytes() {
    for name in [
        "seed-000-failed-detach-pod-returns",
        "seed-004-node-dies-fence-first",
        "restart-during-attach",
        "backend-partition-one-node",
    ] {
        let (_, a) = picture(name);
        let (_, b) = picture(name);
        assert!(a == b, "{name}: two renderings differ");
        assert!(
            a.starts_with("<svg") && a.trim_end().ends_with("</svg>"),
            "{name}"
        );
    }
}

#[test]
fn every_bundled_picture_is_well_formed_svg() {
    for (name, _) in LIBRARY {
        let (_, svg) = picture(name);
        let mut depth = 0i64;
        for event in svg::read(&svg).unwrap_or_else(|e| panic!("{name}: {e}")) {
            match event {
                svg::parser::Event::Error(e) => panic!("{name}: {e:?}"),
                svg::parser::Event::Tag(_, svg::node::element::tag::Type::Start, _) => depth += 1,
                svg::parser::Event::Tag(_, svg::node::element::tag::Type::End, _) => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0, "{name}: a tag closes that was not opened");
        }
        assert_eq!(depth, 0, "{name}: unclosed tags");
    }
}

/// Seed 004: a lane per node, the volume's bar on each (attaching, then attached), the pods,
/// the crash and the fence on n1, the Multi-Attach warning on n2, the legend, a labelled axis,
/// and no violation.
#[test]
fn seed_004_shows_the_fence_and_a_bar_per_node() {
    let (report, svg) = picture("seed-004-node-dies-fence-first");
    assert!(report.passed(), "{:?}", report.violations);
    let (n1, n2) = (lane(&svg, "n1"), lane(&svg, "n2"));
    assert_eq!(count(&svg, "class=\"lane\""), 2);
    assert!(n1.contains("class=\"state fenced\"") && n1.contains("class=\"state crashed\""));
    assert!(
        !n2.contains("class=\"state "),
        "nothing happened to n2 itself"
    );
    for mark in ["class=\"mark crash\"", "class=\"mark fence\""] {
        assert_eq!(count(&svg, mark), 1, "{mark}");
    }
    // One row for disk-a per node; its bars: attaching and attached on each, detaching on n1.
    assert_eq!(
        count(&svg, "class=\"volume-row\" data-name=\"volume disk-a\""),
        2
    );
    assert_eq!(count(&svg, "class=\"bar attaching\""), 2);
    assert_eq!(count(&svg, "class=\"bar detaching\""), 1);
    assert!(count(&svg, "class=\"bar attached\"") >= 2);
    assert!(svg.contains("data-name=\"pod db-0\"") && svg.contains("data-name=\"pod db-1\""));
    assert!(svg.contains("MultiAttachVolume") && svg.contains("ForcedDetachVolume"));
    for word in [
        "attaching",
        "attached",
        "uncertain",
        "detaching",
        "node fenced",
    ] {
        assert!(has_text(&svg, word), "legend lacks {word}");
    }
    for tick in ["0s", "10s", "10m", "11m", "12m", "virtual time"] {
        assert!(has_text(&svg, tick), "axis lacks {tick}");
    }
    assert!(has_text(&svg, "≈8m35s idle"), "the idle minutes are folded");
    // A minute into db-1's wait the controller says why: n1 must be fenced first.
    assert!(svg.contains("WaitExplained") && svg.contains("waiting for a fence"));
    assert_eq!(
        count(&svg, "violation"),
        1,
        "only the legend names violations"
    );
}

/// A failing run draws each violation as a red line at its time, with its message.
#[test]
fn violations_are_drawn_in_red_at_their_time() {
    let mut s = scenario("seed-004-node-dies-fence-first");
    s.settings.upstream_bugs.insert(UpstreamBug::C3);
    let report = run(&s);
    assert!(!report.passed());
    let svg = render_svg("seed-004 with c3", &s, &report);
    assert_eq!(
        count(&svg, "class=\"violation-line\""),
        report.violations.len()
    );
    assert!(svg.contains("stroke=\"#e00000\""));
    assert!(svg.contains(": FAIL, "));
    let first = &report.violations[0].message;
    assert!(svg.contains(&first[..first.len().min(40)]), "{first}");
}

/// The structured records come from the simulator, and say what the new statements did.
#[test]
fn the_records_show_what_happened() {
    let (report, svg) = picture("backend-partition-one-node");
    let partitioned = report.timeline.iter().any(|r| {
        matches!(&r.what, Happening::Node { node, change: NodeChange::Partition } if node == "n1")
    });
    assert!(partitioned);
    // The hung detach stays "detaching" until the partition heals at 5 min.
    let hung = report.timeline.iter().any(|r| {
        r.at.as_secs() == 10
            && matches!(&r.what, Happening::Attachment { volume, node, state: Some(BarState::Detaching) }
                if volume == "a-data" && node == "n1")
    });
    assert!(hung, "{:#?}", report.timeline);
    assert!(lane(&svg, "n1").contains("class=\"state partitioned\""));
    assert!(svg.contains("CallTimedOut"));
    let times: Vec<_> = report.timeline.iter().map(|r| r.at).collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "records in time order"
    );

    let (_, svg) = picture("unmount-hangs");
    assert!(lane(&svg, "n1").contains("class=\"state unmount-hangs\""));
    assert!(svg.contains("class=\"bar pod terminating\"") || svg.contains("pod terminating"));
    let (_, svg) = picture("node-deleted-and-recreated");
    assert!(lane(&svg, "n3").contains("class=\"state deleted\""));
    assert!(lane(&svg, "n3").contains("class=\"mark create\""));
    let (_, svg) = picture("agent-stops-reporting");
    assert!(lane(&svg, "n1").contains("class=\"state silent\""));
    let (_, svg) = picture("machine-powered-off-volumes-move");
    assert!(lane(&svg, "n1").contains("class=\"state powered-off\""));
    assert!(svg.contains("<title>10.000s machine powered off</title>"));
    let (_, svg) = picture("restart-during-attach");
    assert!(svg.contains("class=\"restart-line\""));
}

/// The picture in the README is what `simulate --timeline` draws now: regenerate it with
/// `cargo run --release --example simulate --features sim -- --timeline
/// docs/seed-004-timeline.svg examples/scenarios/seed-004-node-dies-fence-first.scn`.
#[test]
fn the_committed_seed_004_picture_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/seed-004-timeline.svg");
    let committed = std::fs::read_to_string(path).expect("docs/seed-004-timeline.svg");
    let (_, now) = picture("seed-004-node-dies-fence-first");
    assert!(
        committed == now,
        "docs/seed-004-timeline.svg is stale: regenerate it (see this test's doc comment)"
    );
}
