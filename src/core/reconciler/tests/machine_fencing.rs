//! Fencing without a human: the core asks the backend about an unhealthy node's machine and
//! counts it fenced after two fresh `Off` answers, and never otherwise.

use super::*;
use crate::config::MachineFencing;
use crate::core::calls::backend::MachineState;

fn fencing() -> Config {
    Config {
        machine_fencing: Some(MachineFencing::default()),
        ..Config::default()
    }
}

/// n1 ran p1 with v mounted; its agent died (unhealthy, its last report has v in use), p1 was
/// force-deleted and p2 on n2 wants v.
fn dead_node(config: Config) -> H {
    let mut h = H::new(config);
    h.rwo("v");
    h.node("n1", &[]);
    h.node("n2", &[]);
    h.pod("p1", "n1", &["v"]);
    h.run_ok(secs(2));
    h.node("n1", &["v"]);
    h.run_ok(secs(1));
    h.facts("n1", false, false, Some(&["v"]));
    h.unpod("p1");
    h.pod("p2", "n2", &["v"]);
    h.core.take_events();
    h
}

/// Runs `d` tick by tick, every operation answered at once; returns what was planned (less
/// verifies and reads) with when.
fn run_timed(h: &mut H, d: Duration) -> Vec<(Duration, String)> {
    let end = h.now + d;
    let mut seen = Vec::new();
    while h.now < end {
        for op in h.tick() {
            if op.kind() != OpKind::Verify {
                seen.push((h.now, render(&op)));
            }
            h.ok(op);
        }
    }
    seen
}

fn named<'a>(seen: &'a [(Duration, String)], prefix: &str) -> Vec<&'a (Duration, String)> {
    seen.iter().filter(|(_, s)| s.starts_with(prefix)).collect()
}

#[test]
fn off_by_default_nothing_is_asked_and_the_detach_waits_for_a_human() {
    let mut h = dead_node(Config::default());
    h.world.machines.insert("n1", MachineState::Off);
    let seen = run_timed(&mut h, secs(120));
    assert!(named(&seen, "check-machine").is_empty(), "{seen:?}");
    assert!(named(&seen, "detach").is_empty(), "{seen:?}");
    assert!(
        h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::DetachBlocked { .. }))
    );
}

#[test]
fn a_powered_off_node_is_fenced_by_two_fresh_answers_and_its_volume_moves_in_seconds() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    let start = h.now;
    let seen = run_timed(&mut h, secs(30));
    let checks = named(&seen, "check-machine n1");
    assert!(checks.len() >= 2, "{seen:?}");
    let (first, second) = (checks[0].0, checks[1].0);
    assert!(first - start <= secs(1), "asked at once: {seen:?}");
    assert_eq!(second - first, secs(5), "paced by the interval");
    let detach = named(&seen, "detach v n1");
    assert_eq!(detach.len(), 1, "{seen:?}");
    assert_eq!(detach[0].1, "detach v n1 forced:powered-off");
    assert!(detach[0].0 > second, "only after the second Off: {seen:?}");
    assert!(detach[0].0 - start <= secs(6), "{seen:?}");
    let attach = named(&seen, "attach v n2");
    assert_eq!(attach.len(), 1, "{seen:?}");
    // The volume left n1's report before the fresh read and the detach.
    let withheld = seen
        .iter()
        .position(|(_, s)| s == "write n1 []")
        .expect("n1 stops reporting v");
    assert!(seen[withheld].0 <= detach[0].0);
    let events = h.core.take_events();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::NodePoweredOff { node: "n1" }))
            .count(),
        1,
        "{events:?}"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        Event::DetachSucceeded {
            force: Some(ForceReason::PoweredOff),
            ..
        }
    )));
    // Nothing waits any more: no more checks.
    let later = run_timed(&mut h, secs(60));
    assert!(named(&later, "check-machine").is_empty(), "{later:?}");
}

#[test]
fn a_single_off_answer_followed_by_running_never_fences() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    // Up to the first answer only.
    let mut seen = Vec::new();
    while named(&seen, "check-machine").is_empty() {
        seen.extend(run_timed(&mut h, TICK));
    }
    h.world.machines.insert("n1", MachineState::Running);
    seen.extend(run_timed(&mut h, secs(60)));
    assert!(named(&seen, "detach").is_empty(), "{seen:?}");
    // It keeps asking while the detach waits, once per interval.
    let checks = named(&seen, "check-machine n1").len();
    assert!((12..=14).contains(&checks), "{checks} checks in a minute");
    // Off again: it takes two answers again.
    h.world.machines.insert("n1", MachineState::Off);
    let seen = run_timed(&mut h, secs(20));
    let checks = named(&seen, "check-machine n1");
    let detach = named(&seen, "detach v n1");
    assert_eq!(detach.len(), 1, "{seen:?}");
    assert!(detach[0].0 > checks[1].0, "{seen:?}");
}

#[test]
fn a_merely_unreachable_node_is_never_fenced_this_way() {
    for state in [MachineState::Running, MachineState::Unknown] {
        let mut h = dead_node(fencing());
        h.world.machines.insert("n1", state);
        let seen = run_timed(&mut h, secs(10 * 60));
        assert!(named(&seen, "detach").is_empty(), "{state:?}: {seen:?}");
        assert!(named(&seen, "attach v n2").is_empty());
        let events = h.core.take_events();
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::MultiAttach { node: "n2", .. }))
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::NodePoweredOff { .. }))
        );
    }
}

#[test]
fn a_failed_check_resets_the_run_and_is_announced_once() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    let mut seen = Vec::new();
    let mut checks = 0;
    // Off, two failures, then Off answers again.
    while h.now < secs(200) && named(&seen, "detach").is_empty() {
        for op in h.tick() {
            seen.push((h.now, render(&op)));
            if op.kind() == OpKind::CheckMachine {
                checks += 1;
                if (2..=3).contains(&checks) {
                    h.fail(op, transient());
                    continue;
                }
            }
            h.ok(op);
        }
    }
    let checks = named(&seen, "check-machine n1");
    let detach = named(&seen, "detach v n1");
    assert_eq!(detach.len(), 1, "{seen:?}");
    // Off (1), failed (2, 3), then two more Offs (4, 5) before the detach.
    assert!(detach[0].0 > checks[4].0, "{seen:?}");
    let events = h.core.take_events();
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::MachineCheckFailed { node: "n1", .. }))
            .count(),
        1,
        "{events:?}"
    );
}

#[test]
fn a_stale_confirmation_is_checked_again_before_the_detach() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    // Two Offs confirm it; the status write that withholds v then hangs, and so does the
    // next check, past max_age.
    let mut write = None;
    let mut hung_check = None;
    let mut checks = 0;
    while write.is_none() || hung_check.is_none() {
        for op in h.tick() {
            match op.kind() {
                OpKind::WriteStatus if write.is_none() => write = Some(op),
                OpKind::CheckMachine => {
                    checks += 1;
                    if checks > 2 {
                        hung_check = Some(op);
                    } else {
                        h.ok(op);
                    }
                }
                _ => h.ok(op),
            }
        }
        assert!(h.now < secs(60), "no write and third check");
    }
    let confirmed_at = h.now;
    while h.now < confirmed_at + secs(31) {
        let ops = h.tick();
        assert!(
            ops.iter().all(|op| op.kind() == OpKind::Verify),
            "{:?}",
            rendered(&ops)
        );
    }
    h.ok(write.unwrap());
    // The store settled, but the confirmation is stale: no read for it, no detach.
    let mut seen = run_timed(&mut h, secs(2));
    assert!(named(&seen, "detach").is_empty(), "{seen:?}");
    // The hung check answers Off, but it was asked long ago: still stale.
    h.ok(hung_check.unwrap());
    seen = run_timed(&mut h, TICK * 3);
    assert!(named(&seen, "detach").is_empty(), "{seen:?}");
    // A fresh check confirms it again, and only then the detach.
    seen = run_timed(&mut h, secs(10));
    let check = named(&seen, "check-machine n1");
    let detach = named(&seen, "detach v n1");
    assert_eq!(detach.len(), 1, "{seen:?}");
    assert!(detach[0].0 > check[0].0, "{seen:?}");
}

fn rendered(ops: &[Operation<T>]) -> Vec<String> {
    ops.iter().map(render).collect()
}

#[test]
fn a_node_healthy_again_starts_over_and_the_fresh_read_holds_a_healthy_one() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    let mut seen = Vec::new();
    while named(&seen, "check-machine").is_empty() {
        seen.extend(run_timed(&mut h, TICK));
    }
    // Its agent reports healthy again, then dies again: two answers again.
    h.facts("n1", true, false, Some(&["v"]));
    h.run_ok(TICK * 2);
    h.facts("n1", false, false, Some(&["v"]));
    let seen = run_timed(&mut h, secs(20));
    let checks = named(&seen, "check-machine n1");
    let detach = named(&seen, "detach v n1");
    assert_eq!(detach.len(), 1, "{seen:?}");
    assert!(detach[0].0 > checks[1].0, "{seen:?}");

    // The core's view says unhealthy, the store says healthy again: held back.
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    h.world.store.get_mut("n1").unwrap().0.healthy = true;
    let seen = run_timed(&mut h, secs(20));
    assert!(named(&seen, "detach").is_empty(), "{seen:?}");
    let events = h.core.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::WaitingForUnmount { reason, .. } if reason.contains("its machine runs")
        )),
        "{events:?}"
    );
}

#[test]
fn no_check_for_a_node_with_nothing_to_free_or_removed() {
    let mut h = H::new(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    h.rwo("v");
    h.node("n1", &[]);
    h.pod("p1", "n1", &["v"]);
    h.run_ok(secs(2));
    h.facts("n1", false, false, Some(&["v"]));
    let seen = run_timed(&mut h, secs(30));
    assert!(named(&seen, "check-machine").is_empty(), "{seen:?}");
    // Removed while a check runs: the answer counts for nothing and is taken.
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    let check = h.run_until_taking(OpKind::CheckMachine);
    h.unnode("n1");
    h.ok(check);
    assert_eq!(h.core.calls.machine.len(), 0);
}

#[test]
fn machine_checked_refuses_unknown_ids_and_other_kinds() {
    let mut h = dead_node(fencing());
    h.world.machines.insert("n1", MachineState::Off);
    let check = h.run_until_taking(OpKind::CheckMachine);
    let id = check.id();
    assert_eq!(
        h.core.finish(
            h.now,
            OpId(999_999),
            Outcome::CheckMachine(Ok(MachineState::Off))
        ),
        Err(ReconcilerError::UnknownOperation { id: OpId(999_999) })
    );
    assert_eq!(
        h.core.finish(h.now, id, Outcome::Detach(Ok(()))),
        Err(ReconcilerError::WrongResult {
            id,
            actual: OpKind::CheckMachine,
            given: OpKind::Detach
        })
    );
    // Still running after both refusals.
    h.core
        .finish(h.now, id, Outcome::CheckMachine(Ok(MachineState::Off)))
        .unwrap();
    let write = h.run_until_taking(OpKind::WriteStatus);
    assert_eq!(
        h.core.finish(
            h.now,
            write.id(),
            Outcome::CheckMachine(Ok(MachineState::Off))
        ),
        Err(ReconcilerError::WrongResult {
            id: write.id(),
            actual: OpKind::WriteStatus,
            given: OpKind::CheckMachine
        })
    );
}

#[test]
fn a_detach_a_fresh_read_holds_back_on_an_unhealthy_node_asks_about_its_machine() {
    // The world fuzzer's finding: the core's view says n1 uses nothing, the store still has
    // the dead agent's report with v in use, so every fresh read holds the unforced detach
    // back. The machine is asked about all the same, and once off, the detach is forced.
    let mut h = dead_node(fencing());
    h.input(Input::NodeUpdated {
        node: "n1",
        facts: NodeFacts {
            healthy: false,
            fenced: false,
            in_use: Some(vec![]),
            attach_limit: None,
            driver_limits: Vec::new(),
        },
    });
    h.world.machines.insert("n1", MachineState::Off);
    let seen = run_timed(&mut h, secs(20));
    let checks = named(&seen, "check-machine n1");
    let detach = named(&seen, "detach v n1");
    assert!(checks.len() >= 2, "{seen:?}");
    assert_eq!(detach.len(), 1, "{seen:?}");
    assert_eq!(detach[0].1, "detach v n1 forced:powered-off");
    assert!(detach[0].0 > checks[1].0, "{seen:?}");
}
