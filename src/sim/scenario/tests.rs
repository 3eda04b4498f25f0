//! The parser's and the printer's unit tests: every statement, every error message, the
//! round trip through text, and inputs a fuzzer would try.

use std::time::Duration;

use super::parser::parse_duration;
use super::*;
use crate::core::calls::volume::Access;

fn ok(text: &str) -> Scenario {
    match parse(text) {
        Ok(scenario) => scenario,
        Err(error) => panic!("{}", error.with_file("test")),
    }
}

fn err(text: &str) -> ParseError {
    match parse(text) {
        Ok(scenario) => panic!("parsed, but should not have: {scenario:?}"),
        Err(error) => error,
    }
}

fn s(name: &str) -> String {
    name.to_string()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The scenario with every step's line set to 0, to compare scenarios from different texts.
fn without_lines(mut scenario: Scenario) -> Scenario {
    for step in &mut scenario.steps {
        step.line = 0;
    }
    scenario
}

const HEADER: &str = "node a\nnode b\nvolume v single-node\nvolume w multi-node\n";

/// The action of a single `at` line after [`HEADER`].
fn action(line: &str) -> Action {
    let scenario = ok(&format!("{HEADER}{line}"));
    assert_eq!(scenario.steps.len(), 1, "{line}");
    assert_eq!(scenario.steps[0].line, 5, "{line}");
    scenario.steps[0].action.clone()
}

#[test]
fn empty_text_is_the_default_scenario() {
    assert_eq!(ok(""), Scenario::default());
    assert_eq!(ok("\n\n   \n# only a comment\n"), Scenario::default());
}

#[test]
fn defaults_are_the_documented_ones() {
    let d = Settings::default();
    assert_eq!(d.reconcile_period, ms(100));
    assert_eq!(d.sync_period, Duration::from_secs(60));
    assert_eq!(d.max_wait_for_unmount, Duration::from_secs(360));
    assert!(!d.force_detach_on_timeout);
    assert_eq!(d.cache_lag, Duration::ZERO);
    assert_eq!(d.attach_latency, ms(200));
    assert_eq!(d.detach_latency, ms(200));
    assert_eq!(d.status_latency, ms(10));
    assert_eq!(d.seed, 0);
    assert!(d.upstream_bugs.is_empty());
    assert_eq!(ok("node a").settings, d);
}

#[test]
fn every_setting_parses() {
    let scenario = ok("set reconcile-period 50ms
            set sync-period 2m
            set max-wait-for-unmount 1h
            set force-detach-on-timeout on
            set cache-lag 300ms
            set status-cache-lag 5s
            set attach-latency 1s
            set detach-latency 2s
            set status-latency 0
            set seed 18446744073709551615
            set max-attaches 20
            set max-detaches 5
            set backend-rate 100ms 30
            set overdue-after 3s
            set max-overdue 2
            set verify-batch 7
            set volumes-per-pass 3
            set upstream-bug c1 on
            set upstream-bug c6 on
            set upstream-bug c3 off");
    let expected = Settings {
        reconcile_period: ms(50),
        sync_period: Duration::from_secs(120),
        max_wait_for_unmount: Duration::from_secs(3600),
        force_detach_on_timeout: true,
        machine_fencing: false,
        cache_lag: ms(300),
        status_cache_lag: ms(5000),
        attach_latency: ms(1000),
        detach_latency: ms(2000),
        status_latency: Duration::ZERO,
        seed: u64::MAX,
        upstream_bugs: [UpstreamBug::C1, UpstreamBug::C6].into(),
        backend_load: crate::config::BackendLoad {
            max_attaches: Some(20),
            max_detaches: Some(5),
            rate: Some(crate::config::RateLimit {
                every: ms(100),
                burst: 30,
            }),
            overdue: Some(crate::config::OverdueCalls {
                after: ms(3000),
                max: 2,
            }),
        },
        verify_batch: Some(7),
        volumes_per_pass: Some(3),
    };
    assert_eq!(scenario.settings, expected);
    // And back to text, as the printer writes it.
    let again = ok(&scenario.to_string());
    assert_eq!(again.settings, expected);
    for refused in [
        "set max-attaches 0",
        "set max-detaches 0",
        "set backend-rate 0s 5",
        "set backend-rate 1s 0",
        "set max-attaches 4294967296",
        "set overdue-after 0s",
        "set max-overdue 0",
    ] {
        assert!(parse(refused).is_err(), "{refused}");
    }
    assert_eq!(
        ok("set force-detach-on-timeout off").settings,
        Settings::default()
    );
    assert!(ok("set machine-fencing on").settings.machine_fencing);
    assert_eq!(
        ok("set machine-fencing off").settings,
        Settings::default(),
        "off by default"
    );
}

#[test]
fn declarations_keep_file_order() {
    let scenario = ok("node b\nvolume z multi-node\nnode a\nvolume y single-node");
    assert_eq!(scenario.nodes, [s("b"), s("a")]);
    assert_eq!(
        scenario.volumes,
        [(s("z"), Access::MultiNode), (s("y"), Access::SingleNode)]
    );
}

#[test]
fn every_action_parses() {
    assert_eq!(
        action("at 1s pod p on a uses v,w"),
        Action::Schedule {
            pod: s("p"),
            node: s("a"),
            volumes: vec![s("v"), s("w")]
        }
    );
    assert_eq!(action("at 1s delete pod p"), Action::Delete { pod: s("p") });
    assert_eq!(
        action("at 1s force-delete pod p"),
        Action::ForceDelete { pod: s("p") }
    );
    assert_eq!(action("at 1s node a crash"), Action::Crash(s("a")));
    assert_eq!(action("at 1s node a recover"), Action::Recover(s("a")));
    assert_eq!(action("at 1s node b fence"), Action::Fence(s("b")));
    assert_eq!(action("at 1s node b unfence"), Action::Unfence(s("b")));
    assert_eq!(
        action("at 1s fail attach v on a"),
        Action::FailAttach {
            volume: s("v"),
            node: s("a"),
            times: 1,
            uncertain: false
        }
    );
    let uncertain_detach = Action::FailDetach {
        volume: s("w"),
        node: s("b"),
        times: 3,
        uncertain: true,
    };
    assert_eq!(
        action("at 1s fail detach w on b times 3 uncertain"),
        uncertain_detach
    );
    assert_eq!(
        action("at 1s fail detach w on b uncertain times 3"),
        uncertain_detach
    );
    assert_eq!(
        action("at 1s fail status a"),
        Action::FailStatus {
            node: s("a"),
            times: 1
        }
    );
    assert_eq!(
        action("at 1s fail status a times 4294967295"),
        Action::FailStatus {
            node: s("a"),
            times: u32::MAX
        }
    );
    assert_eq!(
        action("at 1s restart controller"),
        Action::RestartController
    );
    assert_eq!(action("at 1s node a delete"), Action::DeleteNode(s("a")));
    assert_eq!(action("at 1s node a create"), Action::CreateNode(s("a")));
    assert_eq!(
        action("at 1s node b stop-reporting"),
        Action::StopReporting(s("b"))
    );
    assert_eq!(
        action("at 1s node b resume-reporting"),
        Action::ResumeReporting(s("b"))
    );
    assert_eq!(action("at 1s node a power-off"), Action::PowerOff(s("a")));
    assert_eq!(action("at 1s node a power-on"), Action::PowerOn(s("a")));
    assert_eq!(
        action("at 1s hang unmount v on a"),
        Action::HangUnmount {
            volume: s("v"),
            node: s("a")
        }
    );
    assert_eq!(
        action("at 1s release unmount w on b"),
        Action::ReleaseUnmount {
            volume: s("w"),
            node: s("b")
        }
    );
    assert_eq!(
        action("at 1s partition backend a"),
        Action::PartitionBackend(s("a"))
    );
    assert_eq!(action("at 1s heal backend a"), Action::HealBackend(s("a")));
}

#[test]
fn every_expectation_parses() {
    let expect = |line: &str| match action(line) {
        Action::Expect(expectation) => expectation,
        other => panic!("{line}: not an expectation: {other:?}"),
    };
    for (word, state) in [
        ("running", PodState::Running),
        ("pending", PodState::Pending),
        ("gone", PodState::Gone),
    ] {
        assert_eq!(
            expect(&format!("at 0 expect pod p {word}")),
            Expectation::Pod { pod: s("p"), state }
        );
    }
    assert_eq!(
        expect("at 0 expect attached v a"),
        Expectation::Attached {
            volume: s("v"),
            node: s("a")
        }
    );
    assert_eq!(
        expect("at 0 expect detached w b"),
        Expectation::Detached {
            volume: s("w"),
            node: s("b")
        }
    );
    assert_eq!(
        expect("at 0 expect reported a w,v"),
        Expectation::Reported {
            node: s("a"),
            volumes: vec![s("w"), s("v")]
        }
    );
    assert_eq!(
        expect("at 0 expect reported a none"),
        Expectation::Reported {
            node: s("a"),
            volumes: vec![]
        }
    );
    assert_eq!(
        expect("at 0 expect event multi-attach p"),
        Expectation::Event { pod: s("p") }
    );
    assert_eq!(
        expect("at 0 expect no-event multi-attach p"),
        Expectation::NoEvent { pod: s("p") }
    );
    for (word, cmp) in [("=", Cmp::Eq), ("<=", Cmp::Le), (">=", Cmp::Ge)] {
        assert_eq!(
            expect(&format!("at 0 expect calls detach v b {word} 2")),
            Expectation::Calls {
                op: CallOp::Detach,
                volume: s("v"),
                node: s("b"),
                cmp,
                count: 2
            }
        );
        assert_eq!(
            expect(&format!("at 0 expect writes a {word} 15")),
            Expectation::Writes {
                node: s("a"),
                cmp,
                count: 15
            }
        );
    }
    assert_eq!(
        expect("at 0 expect calls attach w a = 0"),
        Expectation::Calls {
            op: CallOp::Attach,
            volume: s("w"),
            node: s("a"),
            cmp: Cmp::Eq,
            count: 0
        }
    );
    assert_eq!(
        expect("at 0 expect wait p held-elsewhere a"),
        Expectation::Wait {
            subject: s("p"),
            wait: ExpectedWait::Kind(crate::core::WaitKind::HeldElsewhere),
            node: Some(s("a")),
        }
    );
    assert_eq!(
        expect("at 0 expect wait v missing"),
        Expectation::Wait {
            subject: s("v"),
            wait: ExpectedWait::Missing,
            node: None,
        }
    );
}

/// Every kind of wait the core explains has its word in `expect wait`, and a bad word or an
/// undeclared node is refused with what was expected.
#[test]
fn expect_wait_names_every_kind_and_refuses_the_rest() {
    use super::keyword::Keyword;
    for kind in crate::core::WaitKind::ALL {
        let word = ExpectedWait::Kind(kind).word();
        assert_ne!(word, "?", "{kind:?} has no word");
        let line = format!("{HEADER}\nat 0 expect wait p {word} a");
        let scenario = ok(&line);
        assert_eq!(
            scenario.to_string().lines().last().unwrap(),
            format!("at 0s expect wait p {word} a")
        );
    }
    let err = parse(&format!("{HEADER}\nat 0 expect wait p stuck")).unwrap_err();
    assert!(err.to_string().contains("`held-elsewhere`"), "{err}");
    let err = parse(&format!("{HEADER}\nat 0 expect wait p unmount zz")).unwrap_err();
    assert!(
        matches!(err.kind, ParseErrorKind::UndeclaredNode(_)),
        "{err}"
    );
}

#[test]
fn run_is_optional_and_may_come_first() {
    assert_eq!(ok(HEADER).run, None);
    let scenario = ok("run 10s\nnode a\nat 10s node a crash");
    assert_eq!(scenario.run, Some(Duration::from_secs(10)));
    assert_eq!(scenario.steps.len(), 1);
    assert_eq!(ok("at 5s restart controller\nrun 5s").run, Some(ms(5000)));
}

#[test]
fn comments_blank_lines_and_spacing_are_ignored() {
    let scenario = ok("# a scenario\r\n\
             \r\n\
             node a # the only node\r\n\
             \t volume   v\tsingle-node   \r\n\
             #at 1s node a crash\r\n\
             at 2s node a crash#no space before the comment\r\n\
             \n\
             at 3s    expect   attached v a\n");
    assert_eq!(scenario.nodes, [s("a")]);
    assert_eq!(scenario.volumes, [(s("v"), Access::SingleNode)]);
    let lines: Vec<(Duration, usize)> = scenario.steps.iter().map(|s| (s.at, s.line)).collect();
    assert_eq!(lines, [(ms(2000), 6), (ms(3000), 8)]);
}

#[test]
fn a_byte_order_mark_at_the_start_is_skipped() {
    let plain = "node a\nvolume v single-node\nat 1s pod p on a uses v\nrun 2s\n";
    let marked = format!("\u{feff}{plain}");
    assert_eq!(ok(&marked), ok(plain));
    // Lines keep their numbers: the mark is not a line of its own.
    assert_eq!(ok(&marked).steps[0].line, 3);
    assert_eq!(err("\u{feff}node a\nfrobnicate").line, 2);
    // Only at the very start: elsewhere it is part of a token, as any other character.
    assert_eq!(
        err("node a\n\u{feff}node b").kind,
        ParseErrorKind::UnknownStatement(s("\u{feff}node"))
    );
}

#[test]
fn equal_times_are_allowed_and_keep_file_order() {
    let scenario = ok("node a\nat 1s node a crash\nat 1s node a recover\nat 1s node a crash");
    let actions: Vec<&Action> = scenario.steps.iter().map(|s| &s.action).collect();
    assert_eq!(
        actions,
        [
            &Action::Crash(s("a")),
            &Action::Recover(s("a")),
            &Action::Crash(s("a"))
        ]
    );
}

#[test]
fn pods_need_no_declaration_and_may_be_scheduled_twice() {
    let scenario = ok("node a\nvolume v single-node\n\
             at 0s pod p on a uses v\nat 1s pod p on a uses v\nat 2s expect pod q gone");
    assert_eq!(scenario.steps.len(), 3);
}

#[test]
fn durations() {
    let good = [
        ("0", Duration::ZERO),
        ("000", Duration::ZERO),
        ("0ms", Duration::ZERO),
        ("0h", Duration::ZERO),
        ("150ms", ms(150)),
        ("2s", ms(2000)),
        ("6m", Duration::from_secs(360)),
        ("1h", Duration::from_secs(3600)),
        ("007s", ms(7000)),
        ("876000h", MAX_DURATION),
        ("52560000m", MAX_DURATION),
        ("3153600000s", MAX_DURATION),
        ("3153600000000ms", MAX_DURATION),
        ("0003153600000000ms", MAX_DURATION),
    ];
    for (text, expected) in good {
        assert_eq!(parse_duration(text), Ok(expected), "{text}");
    }
    let bad = [
        "",
        "5",
        "1",
        "ms",
        "s",
        "-1s",
        "+1s",
        "1.5s",
        "1sec",
        "1S",
        "1us",
        "1d",
        "1m30s",
        "1 s",
        "١s",
        "1é",
        "é",
        "1ms1",
        "99999999999999999999",
        "99999999999999999999x",
    ];
    for text in bad {
        assert_eq!(
            parse_duration(text),
            Err(ParseErrorKind::BadDuration(s(text))),
            "{text}"
        );
    }
    let too_long = [
        "876001h",
        "3153600001s",
        "3153600000001ms",
        "1000000h",
        "18446744073709551615ms",
        "18446744073709551616ms",
        "18446744073709551615s",
        "18446744073709551616s",
        "307445734561825861m",
        "5124095576030432h",
        "99999999999999999999999999999999h",
    ];
    for text in too_long {
        assert_eq!(
            parse_duration(text),
            Err(ParseErrorKind::DurationTooLong(s(text))),
            "{text}"
        );
    }
}

#[test]
fn durations_print_in_the_largest_exact_unit() {
    let cases = [
        (Duration::ZERO, "0s"),
        (ms(1), "1ms"),
        (ms(1500), "1500ms"),
        (ms(2000), "2s"),
        (ms(90_000), "90s"),
        (Duration::from_secs(360), "6m"),
        (Duration::from_secs(7200), "2h"),
        (Duration::from_secs(3660), "61m"),
        (Duration::from_micros(1500), "1ms"),
        (Duration::from_nanos(1), "0s"),
        (ms(u64::MAX), "18446744073709551615ms"),
        (Duration::from_secs(u64::MAX), "18446744073709551615s"),
    ];
    for (duration, text) in cases {
        assert_eq!(format_duration(duration), text, "{duration:?}");
    }
}

#[test]
fn cmp_holds() {
    assert!(Cmp::Eq.holds(3, 3));
    assert!(!Cmp::Eq.holds(2, 3));
    assert!(Cmp::Le.holds(2, 3));
    assert!(Cmp::Le.holds(3, 3));
    assert!(!Cmp::Le.holds(4, 3));
    assert!(Cmp::Ge.holds(4, 3));
    assert!(Cmp::Ge.holds(3, 3));
    assert!(!Cmp::Ge.holds(2, 3));
}

#[test]
fn each_error_names_its_line() {
    use ParseErrorKind as K;
    let missing = |expected: &str| K::Missing {
        expected: s(expected),
    };
    let unexpected = |expected: &str, found: &str| K::Unexpected {
        expected: s(expected),
        found: s(found),
    };
    // Each case comes after HEADER (4 lines), so its first line is line 5.
    let cases: Vec<(&str, usize, ParseErrorKind)> = vec![
        ("frobnicate", 5, K::UnknownStatement(s("frobnicate"))),
        ("AT 1s restart controller", 5, K::UnknownStatement(s("AT"))),
        ("at 1s explode", 5, K::UnknownAction(s("explode"))),
        ("at 1s expect magic", 5, K::UnknownExpectation(s("magic"))),
        ("\n\nnode", 7, missing("a node name")),
        ("volume x", 5, missing("`single-node` or `multi-node`")),
        (
            "volume x rwo",
            5,
            unexpected("`single-node` or `multi-node`", "rwo"),
        ),
        ("at", 5, missing("a time like 150ms, 2s, 6m or 1h")),
        (
            "at 1s",
            5,
            missing(
                "an action (pod, delete, force-delete, node, fail, hang, release, partition, heal, restart or expect)",
            ),
        ),
        ("at 1s pod p at a uses v", 5, unexpected("`on`", "at")),
        (
            "at 1s pod p on a uses",
            5,
            missing("the volumes it uses, like `v1,v2`"),
        ),
        (
            "at 1s node a reboot",
            5,
            unexpected(
                "`crash`, `recover`, `fence`, `unfence`, `delete`, `create`, `stop-reporting`, \
                 `resume-reporting`, `power-off` or `power-on`",
                "reboot",
            ),
        ),
        (
            "at 1s hang mount v on a",
            5,
            unexpected("`unmount`", "mount"),
        ),
        ("at 1s release unmount v", 5, missing("`on`")),
        (
            "at 1s hang unmount zz on a",
            5,
            K::UndeclaredVolume(s("zz")),
        ),
        (
            "at 1s release unmount v on zz",
            5,
            K::UndeclaredNode(s("zz")),
        ),
        (
            "at 1s partition network a",
            5,
            unexpected("`backend`", "network"),
        ),
        ("at 1s heal backend", 5, missing("a node name")),
        ("at 1s heal backend zz", 5, K::UndeclaredNode(s("zz"))),
        ("at 1s partition backend a b", 5, K::Extra(s("b"))),
        ("at 1s node a delete now", 5, K::Extra(s("now"))),
        (
            "at 1s fail mount v on a",
            5,
            unexpected("`attach`, `detach` or `status`", "mount"),
        ),
        (
            "at 1s fail attach v on a twice",
            5,
            unexpected("`times <k>`, `uncertain` or the end of the line", "twice"),
        ),
        (
            "at 1s fail status a uncertain",
            5,
            unexpected("`times <k>` or the end of the line", "uncertain"),
        ),
        (
            "at 1s fail status a times",
            5,
            missing("a count after `times`"),
        ),
        (
            "at 1s expect pod p dead",
            5,
            unexpected("`running`, `pending` or `gone`", "dead"),
        ),
        (
            "at 1s expect calls verify v a = 1",
            5,
            unexpected("`attach` or `detach`", "verify"),
        ),
        (
            "at 1s expect writes a == 1",
            5,
            unexpected("`=`, `<=` or `>=`", "=="),
        ),
        ("at 1s expect event multi-attach", 5, missing("a pod name")),
        (
            "at 1s expect event attach p",
            5,
            unexpected("`multi-attach`", "attach"),
        ),
        (
            "set upstream-bug c7 on",
            5,
            unexpected("`c1`, `c2`, `c3`, `c4`, `c5`, `c6`, `l1` or `l2`", "c7"),
        ),
        ("set upstream-bug c1", 5, missing("`on` or `off`")),
        (
            "set force-detach-on-timeout yes",
            5,
            unexpected("`on` or `off`", "yes"),
        ),
        ("set", 5, missing("a setting name")),
        ("node c extra", 5, K::Extra(s("extra"))),
        ("at 1s restart controller now", 5, K::Extra(s("now"))),
        ("at 1s expect reported a none v", 5, K::Extra(s("v"))),
        ("run 1s 2s", 5, K::Extra(s("2s"))),
        ("set cache-lag 1.5s", 5, K::BadDuration(s("1.5s"))),
        ("at soon restart controller", 5, K::BadDuration(s("soon"))),
        (
            "run 99999999999999999999h",
            5,
            K::DurationTooLong(s("99999999999999999999h")),
        ),
        ("set seed -1", 5, K::BadNumber(s("-1"))),
        ("set seed +1", 5, K::BadNumber(s("+1"))),
        (
            "set seed 18446744073709551616",
            5,
            K::NumberOverflow(s("18446744073709551616")),
        ),
        (
            "at 1s fail status a times 4294967296",
            5,
            K::NumberOverflow(s("4294967296")),
        ),
        ("at 1s expect writes a = x", 5, K::BadNumber(s("x"))),
        ("at 1s fail attach v on a times 0", 5, K::ZeroTimes),
        ("at 1s fail status a times 00", 5, K::ZeroTimes),
        ("set cache-lags 1s", 5, K::UnknownSetting(s("cache-lags"))),
        (
            "set cache-lag 1s\nset cache-lag 2s",
            6,
            K::DuplicateSetting {
                key: s("cache-lag"),
                first_line: 5,
            },
        ),
        (
            "set upstream-bug c2 on\nset upstream-bug c2 off",
            6,
            K::DuplicateSetting {
                key: s("upstream-bug c2"),
                first_line: 5,
            },
        ),
        (
            "at 1s restart controller\n\nset seed 1",
            7,
            K::SetAfterAt { first_at_line: 5 },
        ),
        (
            "node a",
            5,
            K::DuplicateNode {
                name: s("a"),
                first_line: 1,
            },
        ),
        (
            "volume w single-node",
            5,
            K::DuplicateVolume {
                name: s("w"),
                first_line: 4,
            },
        ),
        ("at 1s node c crash", 5, K::UndeclaredNode(s("c"))),
        ("at 1s pod p on c uses v", 5, K::UndeclaredNode(s("c"))),
        ("at 1s expect writes c = 1", 5, K::UndeclaredNode(s("c"))),
        ("at 1s pod p on a uses v,x", 5, K::UndeclaredVolume(s("x"))),
        ("at 1s fail detach x on a", 5, K::UndeclaredVolume(s("x"))),
        ("at 1s expect reported a x", 5, K::UndeclaredVolume(s("x"))),
        ("at 1s expect attached x a", 5, K::UndeclaredVolume(s("x"))),
        (
            "at 1s node a crash\nnode c\nat 2s node c crash\nat 3s node d crash",
            8,
            K::UndeclaredNode(s("d")),
        ),
        ("node c,d", 5, K::BadName(s("c,d"))),
        ("at 1s delete pod p,q", 5, K::BadName(s("p,q"))),
        ("at 1s pod p on a uses v,", 5, K::BadList(s("v,"))),
        ("at 1s expect reported a ,v", 5, K::BadList(s(",v"))),
        ("at 1s pod p on a uses v,,w", 5, K::BadList(s("v,,w"))),
        ("at 1s pod p on a uses v,w,v", 5, K::DuplicateInList(s("v"))),
        ("volume none single-node", 5, K::ReservedVolumeName),
        (
            "at 1s fail attach v on a times 2 times 3",
            5,
            K::DuplicateOption("times"),
        ),
        (
            "at 1s fail detach v on a uncertain uncertain",
            5,
            K::DuplicateOption("uncertain"),
        ),
        (
            "at 2s node a crash\nat 1999ms node a recover",
            6,
            K::TimeGoesBackwards {
                at: ms(1999),
                previous: ms(2000),
                previous_line: 5,
            },
        ),
        ("run 1s\nrun 1s", 6, K::DuplicateRun { first_line: 5 }),
        (
            "at 2s node a crash\nrun 1s",
            6,
            K::RunTooShort {
                run: ms(1000),
                step_at: ms(2000),
                step_line: 5,
            },
        ),
        (
            "run 1s\nat 1s node a crash\nat 2s node a recover",
            7,
            K::StepAfterRun {
                at: ms(2000),
                run: ms(1000),
                run_line: 5,
            },
        ),
    ];
    for (text, line, kind) in cases {
        let error = err(&format!("{HEADER}{text}"));
        assert_eq!(error, ParseError { line, kind }, "{text}");
    }
}

/// Each place a duration goes refuses one beyond the bound, with a typed error on its line;
/// the bound itself is accepted everywhere.
#[test]
fn durations_beyond_the_bound_are_refused_everywhere() {
    let keys = Settings::duration_keys();
    let mut lines: Vec<String> = keys.iter().map(|k| format!("set {k} {{}}")).collect();
    lines.push("at {} restart controller".into());
    lines.push("run {}".into());
    for line in &lines {
        for huge in ["18446744073709551615s", "1000000h", "876001h"] {
            let text = format!("{HEADER}{}", line.replace("{}", huge));
            assert_eq!(
                err(&text),
                ParseError {
                    line: 5,
                    kind: ParseErrorKind::DurationTooLong(s(huge))
                },
                "{text}"
            );
        }
        let at_bound = ok(&format!("{HEADER}{}", line.replace("{}", "876000h")));
        assert_eq!(at_bound.validate(), Ok(()), "{line}");
    }
    // With a seed the backend stretches latencies by up to half again: still accepted.
    let seeded = ok("set seed 1\nset attach-latency 876000h\nset detach-latency 876000h");
    assert_eq!(seeded.settings.attach_latency, MAX_DURATION);
}

#[test]
fn messages_state_the_bound() {
    assert_eq!(
        err("run 1000000h").to_string(),
        "line 1: duration `1000000h` is too long: a scenario's durations are at most \
             876000h (100 years)"
    );
    assert_eq!(
        err("node a\nat 18446744073709551615s node a crash").to_string(),
        "line 2: duration `18446744073709551615s` is too long: a scenario's durations are \
             at most 876000h (100 years)"
    );
}

/// A scenario built in code gets the same bound from `validate`.
#[test]
fn validate_applies_the_bound_to_built_scenarios() {
    let too_long = MAX_DURATION + ms(1);
    let mut scenario = ok(HEADER);
    assert_eq!(scenario.validate(), Ok(()));
    scenario.settings.status_cache_lag = too_long;
    assert_eq!(
        scenario.validate(),
        Err(ScenarioError::TooLong {
            what: s("`set status-cache-lag`"),
            value: too_long
        })
    );
    scenario.settings = Settings::default();
    scenario.steps.push(Step {
        at: Duration::MAX,
        line: 9,
        action: Action::RestartController,
    });
    let error = scenario.validate().unwrap_err();
    assert_eq!(
        error.to_string(),
        "the time of step 1 (line 9) is 18446744073709551615999ms, longer than 876000h \
             (100 years), the longest a scenario may use"
    );
    scenario.steps.clear();
    scenario.run = Some(too_long);
    assert!(matches!(
        scenario.validate(),
        Err(ScenarioError::TooLong { what, .. }) if what == "`run`"
    ));
}

#[test]
fn messages_read_well() {
    let cases = [
        (
            "foo",
            "line 1: unknown statement `foo` (expected set, node, volume, at or run)",
        ),
        (
            "set cache-lag x",
            "line 1: expected a duration like 150ms, 2s, 6m or 1h, found `x`",
        ),
        (
            "at 1s node a crash",
            "line 1: node `a` is not declared (add `node a` before using it)",
        ),
        (
            "node a\nat 1s pod p on a uses v",
            "line 2: volume `v` is not declared (add `volume v single-node` before using it)",
        ),
        (
            "at 2s restart controller\nat 1500ms restart controller",
            "line 2: time goes backwards: `at 1500ms` comes after `at 2s` on line 1",
        ),
        (
            "at 2m restart controller\nrun 90s",
            "line 2: `run 90s` ends before the step `at 2m` on line 1",
        ),
        (
            "run 1m\nat 61s restart controller",
            "line 2: step `at 61s` lies beyond `run 1m` on line 1",
        ),
        (
            "node a\nat 1s fail status a times 0",
            "line 2: `times 0` injects nothing: use 1 or more",
        ),
        (
            "volume v single",
            "line 1: expected `single-node` or `multi-node`, found `single`",
        ),
        (
            "node",
            "line 1: expected a node name, found the end of the line",
        ),
    ];
    for (text, message) in cases {
        assert_eq!(err(text).to_string(), message, "{text}");
    }
    assert_eq!(
        err("\nnode a b").with_file("incidents/49053.scn"),
        "incidents/49053.scn:2: unexpected `b` after the end of the statement"
    );
}

const RICH: &str = "\
        # Everything the format can say, with non-default settings.
        set reconcile-period 250ms
        set sync-period 90s
        set max-wait-for-unmount 0
        set force-detach-on-timeout on
        set machine-fencing on
        set cache-lag 1500ms
        set attach-latency 2m
        set detach-latency 1h
        set status-latency 0ms
        set seed 12345678901234567890
        set upstream-bug c4 on
        set upstream-bug c2 on
        node node-1 attach-limit 3
        node 节点 attach-limit 1 unreported
        node n3
        volume pvc-1 single-node
        volume pvc-2 multi-node
        volume données multi-node
        volume share single-node claim-only
        at 0 pod web-0 on node-1 uses pvc-1,pvc-2
        at 0 pod web-1 on 节点 uses données
        at 100ms expect pod web-0 pending
        at 100ms expect event node-full web-1
        at 1s fail attach pvc-1 on 节点 uncertain
        at 1s fail detach pvc-1 on node-1 times 3
        at 1s fail detach pvc-2 on node-1 times 2 uncertain
        at 1s fail status node-1
        at 1s fail status 节点 times 7
        at 2s delete pod web-0
        at 2s force-delete pod web-1
        at 3s node 节点 crash
        at 3s node 节点 fence
        at 4s node 节点 unfence
        at 4s node 节点 recover
        at 5s restart controller
        at 6s node node-1 delete
        at 6s node node-1 create
        at 7s node 节点 stop-reporting
        at 8s node 节点 resume-reporting
        at 9s hang unmount pvc-2 on node-1
        at 10s release unmount pvc-2 on node-1
        at 11s partition backend 节点
        at 12s heal backend 节点
        at 13s node node-1 power-off
        at 14s node node-1 power-on
        at 6m expect pod web-0 gone
        at 6m expect pod web-1 running
        at 6m expect attached pvc-1 node-1
        at 6m expect detached pvc-2 节点
        at 6m expect reported node-1 pvc-2,pvc-1
        at 6m expect reported 节点 none
        at 6m expect event multi-attach web-1
        at 6m expect no-event multi-attach web-0
        at 6m expect calls attach pvc-1 node-1 = 1
        at 6m expect calls detach données 节点 <= 0
        at 6m expect writes node-1 >= 18446744073709551615
        run 1h";

#[test]
fn round_trip_of_a_rich_scenario() {
    let scenario = ok(RICH);
    assert_eq!(scenario.steps.len(), 37);
    let text = scenario.to_text();
    assert_eq!(without_lines(ok(&text)), without_lines(scenario.clone()));
    // The printed form is canonical: printing it again changes nothing.
    assert_eq!(ok(&text).to_text(), text);
    // Defaults are not printed; durations use the largest exact unit.
    assert_eq!(
        ok("set seed 0\nset cache-lag 0\nnode a").to_text(),
        "node a\n"
    );
    assert!(text.starts_with(
        "set reconcile-period 250ms\nset sync-period 90s\nset max-wait-for-unmount 0s\n"
    ));
    assert!(
        text.contains("\nset attach-latency 2m\nset detach-latency 1h\nset status-latency 0s\n")
    );
    assert!(text.contains("\nset upstream-bug c2 on\nset upstream-bug c4 on\n"));
    assert!(text.contains("\nat 0s pod web-0 on node-1 uses pvc-1,pvc-2\n"));
    assert!(text.contains("\nat 1s fail status node-1\nat 1s fail status 节点 times 7\n"));
    assert!(text.contains(
        "\nat 6s node node-1 delete\nat 6s node node-1 create\nat 7s node 节点 stop-reporting\n\
         at 8s node 节点 resume-reporting\nat 9s hang unmount pvc-2 on node-1\n\
         at 10s release unmount pvc-2 on node-1\nat 11s partition backend 节点\n\
         at 12s heal backend 节点\nat 13s node node-1 power-off\nat 14s node node-1 power-on\n"
    ));
    assert!(text.contains("\nset force-detach-on-timeout on\nset machine-fencing on\n"));
    assert!(text.ends_with("\nrun 1h\n"));
}

#[test]
fn round_trip_of_a_built_scenario() {
    let mut scenario = Scenario::default();
    scenario.settings.cache_lag = ms(61_000);
    scenario.nodes = vec![s("a")];
    scenario.volumes = vec![(s("v"), Access::SingleNode)];
    scenario.steps = vec![Step {
        at: Duration::from_secs(7200),
        line: 0,
        action: Action::FailDetach {
            volume: s("v"),
            node: s("a"),
            times: 2,
            uncertain: true,
        },
    }];
    scenario.run = Some(Duration::from_secs(7200));
    let text = scenario.to_text();
    assert_eq!(
        text,
        "set cache-lag 61s\nnode a\nvolume v single-node\n\
             at 2h fail detach v on a times 2 uncertain\nrun 2h\n"
    );
    assert_eq!(without_lines(ok(&text)), scenario);
}

/// xorshift64: a tiny deterministic generator so the mutation test needs no dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Applies one random edit to `chars`: text that is nearly valid finds more paths than noise.
fn mutate(rng: &mut XorShift, chars: &mut Vec<char>, tokens: &[&str]) {
    const ALPHABET: &[char] = &[
        ' ', '\t', '\n', '\r', '#', ',', '0', '1', '9', 'm', 's', 'h', '=', '<', '>', 'é', '节',
        '\u{0}', '\u{200b}', '\u{3000}', '🦀', '-', '+', '.',
    ];
    let len = chars.len();
    match rng.below(8) {
        // Delete a run of characters.
        0 if len > 0 => {
            let at = rng.below(len);
            let end = (at + 1 + rng.below(8)).min(len);
            chars.drain(at..end);
        }
        // Insert a character.
        1 => {
            let c = ALPHABET[rng.below(ALPHABET.len())];
            chars.insert(rng.below(len + 1), c);
        }
        // Replace a character.
        2 if len > 0 => chars[rng.below(len)] = ALPHABET[rng.below(ALPHABET.len())],
        // Insert a token from the valid scenario, with a space before it.
        3 => {
            let token = tokens[rng.below(tokens.len())];
            let at = rng.below(len + 1);
            chars.splice(at..at, std::iter::once(' ').chain(token.chars()));
        }
        // Duplicate a line.
        4 => {
            let text: String = chars.iter().collect();
            let lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let line = lines[rng.below(lines.len())];
                let at = rng.below(len + 1);
                let insert: Vec<char> = format!("\n{line}\n").chars().collect();
                chars.splice(at..at, insert);
            }
        }
        // Swap two characters.
        5 if len > 1 => chars.swap(rng.below(len), rng.below(len)),
        // Replace digits with a huge number, to hit the overflow checks.
        6 => {
            let at = rng.below(len + 1);
            chars.splice(at..at, "99999999999999999999".chars());
        }
        // Truncate.
        _ => chars.truncate(rng.below(len + 1)),
    }
}

#[test]
fn mutations_never_panic_and_errors_name_a_real_line() {
    let tokens: Vec<&str> = RICH.split_whitespace().collect();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut parsed, mut failed) = (0, 0);
    for _ in 0..2000 {
        let mut chars: Vec<char> = RICH.chars().collect();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut chars, &tokens);
        }
        let text: String = chars.iter().collect();
        match parse(&text) {
            Ok(scenario) => {
                parsed += 1;
                let again = parse(&scenario.to_text())
                    .unwrap_or_else(|e| panic!("{e} in the printed form of:\n{text}"));
                assert_eq!(without_lines(again), without_lines(scenario), "{text}");
            }
            Err(error) => {
                failed += 1;
                assert!(
                    !error.to_string().chars().any(char::is_control),
                    "{error:?}"
                );
                let lines = text.lines().count();
                assert!(
                    (1..=lines + 1).contains(&error.line),
                    "line {} of {lines}: {error}\n{text}",
                    error.line
                );
            }
        }
    }
    // Both outcomes must be common, or the test is not exercising what it claims to.
    assert!(
        parsed >= 50 && failed >= 50,
        "parsed {parsed}, failed {failed}"
    );
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = XorShift(42);
    for _ in 0..500 {
        let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        if let Err(error) = parse(&text) {
            assert!(error.line >= 1 && error.line <= text.lines().count() + 1);
            assert!(
                !error.to_string().chars().any(char::is_control),
                "{error:?}"
            );
        }
    }
}

/// A volume may be named like a word of the grammar: `release unmount from a` releases the
/// volume `unmount` (the unmount form has `on` where this one has `from`), and so does
/// `operator-detach`. The grammar once read every `release unmount` as the unmount form, so
/// such a volume could be declared and used but never released.
#[test]
fn a_volume_named_like_a_keyword_can_be_released() {
    let header =
        "node a\nnode from\nnode on\nvolume unmount single-node\nvolume from single-node\n";
    let step = |line: &str| {
        let scenario = ok(&format!("{header}{line}"));
        assert_eq!(scenario.steps.len(), 1, "{line}");
        scenario.steps[0].action.clone()
    };
    let release = |volume: &str, node: &str| Action::ReleaseVolume {
        volume: s(volume),
        node: s(node),
    };
    let unmount = |volume: &str, node: &str| Action::ReleaseUnmount {
        volume: s(volume),
        node: s(node),
    };
    let cases = [
        ("at 1s release unmount from a", release("unmount", "a")),
        (
            "at 1s release unmount from from",
            release("unmount", "from"),
        ),
        ("at 1s release unmount from on", release("unmount", "on")),
        ("at 1s release from from a", release("from", "a")),
        (
            "at 1s release unmount unmount on a",
            unmount("unmount", "a"),
        ),
        ("at 1s release unmount from on a", unmount("from", "a")),
        (
            "at 1s release unmount from on from",
            unmount("from", "from"),
        ),
        (
            "at 1s operator-detach unmount from a",
            Action::OperatorDetach {
                volume: s("unmount"),
                node: s("a"),
            },
        ),
        (
            "at 1s hang unmount unmount on a",
            Action::HangUnmount {
                volume: s("unmount"),
                node: s("a"),
            },
        ),
    ];
    for (line, action) in cases {
        assert_eq!(step(line), action, "{line}");
        // Printed, it reads back as the same step.
        let printed = format!("at 1s {action}");
        assert_eq!(step(&printed), action, "{printed}");
    }
    // A line that is neither form still says what the unmount form expected.
    let error = err(&format!("{header}at 1s release unmount from")).kind;
    assert_eq!(
        error,
        ParseErrorKind::Missing {
            expected: s("`on`")
        }
    );
}

/// An error message shows a control character escaped (`\0`, `\u{1b}`), never raw: a NUL or an
/// escape sequence from a scenario must not reach the terminal. The typed error keeps the token
/// as it was.
#[test]
fn error_messages_escape_control_characters() {
    let error = err("frob\0nicate\u{1b}[2J");
    assert_eq!(
        error.kind,
        ParseErrorKind::UnknownStatement(s("frob\0nicate\u{1b}[2J"))
    );
    assert_eq!(
        error.to_string(),
        "line 1: unknown statement `frob\\0nicate\\u{1b}[2J` (expected set, node, volume, at or \
         run)"
    );
    // Quotes and ordinary non-ASCII text stay as they are; a backslash is doubled so that an
    // escape cannot be forged.
    assert_eq!(
        err("node a\nat 1s node \"b'é\\0 crash").to_string(),
        "line 2: node `\"b'é\\\\0` is not declared (add `node \"b'é\\\\0` before using it)"
    );
    for text in [
        "set seed 1\u{7}",
        "set cache-lag 1\0s",
        "node a\nat 1s node a reboot\u{0}",
        "node a\nvolume v single-node\nat 1s pod p on a uses v,\u{85}",
        "at 1s\u{0}",
        "node \u{202e}a b",
    ] {
        let message = err(text).to_string();
        assert!(
            !message.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{message:?}"
        );
    }
}

/// A name with a control character is refused: names go into traces, violations and the
/// timeline picture, where a NUL or an escape sequence has no place.
#[test]
fn names_cannot_contain_control_characters() {
    for (text, line) in [
        ("node a\u{0}b", 1),
        ("volume v\u{1b} single-node", 1),
        (
            "node a\nvolume v single-node\nat 1s pod p\u{7f} on a uses v",
            3,
        ),
        ("node a\nat 1s delete pod \u{1}", 2),
    ] {
        let error = err(text);
        assert_eq!(error.line, line, "{text:?}");
        assert!(
            matches!(error.kind, ParseErrorKind::ControlCharacter(_)),
            "{text:?}: {error}"
        );
    }
    assert_eq!(
        err("node a\u{0}b").to_string(),
        "line 1: `a\\0b` is not a name: names cannot contain control characters"
    );
}

/// Text that is not UTF-8 is refused with the line it is on and a typed error, not as a file
/// that cannot be read; an error on an earlier line comes first, and valid text parses as
/// [`parse`] parses it.
#[test]
fn invalid_utf8_names_its_line() {
    let error = parse_bytes(b"node a\n# caf\xc3\xa9\nnode b\xff\nnode c\n").unwrap_err();
    assert_eq!(
        error,
        ParseError {
            line: 3,
            kind: ParseErrorKind::InvalidUtf8 { column: 7 }
        }
    );
    assert_eq!(
        error.to_string(),
        "line 3: the text is not UTF-8 (byte 7 of the line is not part of a valid character)"
    );
    // CRLF line ends count as one.
    assert_eq!(parse_bytes(b"node a\r\n\r\n\xe2\x82").unwrap_err().line, 3);
    // The first error in line order wins.
    assert_eq!(
        parse_bytes(b"frob\nnode \xff").unwrap_err().kind,
        ParseErrorKind::UnknownStatement(s("frob"))
    );
    let text = RICH.as_bytes();
    assert_eq!(parse_bytes(text), parse(RICH));
    assert_eq!(parse_bytes(b"\xef\xbb\xbfnode a"), parse("node a"));
    let mut rng = XorShift(7);
    for _ in 0..500 {
        let bytes: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
        match (parse_bytes(&bytes), std::str::from_utf8(&bytes)) {
            (result, Ok(text)) => assert_eq!(result, parse(text)),
            (Err(error), Err(_)) => {
                let lines = bytes.split(|b| *b == b'\n').count();
                assert!((1..=lines).contains(&error.line), "{error}");
                assert!(!error.to_string().chars().any(char::is_control), "{error}");
            }
            (Ok(scenario), Err(_)) => panic!("not UTF-8, yet parsed: {scenario:?}"),
        }
    }
}
