//! Claims across a restart. A claim-only volume's claim is recorded only in its node's status,
//! and a node object's deletion takes that status with it: after a restart, the agents' in-use
//! reports and the placements on gone nodes are the only evidence of a claim whose status went.
//! Found by the world fuzzer (an I1 violation: granted to a second node while the first still
//! had it mounted).

use super::*;

/// How a node is known to a restarted core.
enum Seen {
    /// Present, its agent reporting these volumes in use.
    Reports(&'static [&'static str]),
    /// Present, no in-use report from its agent.
    Silent,
    /// Its object is gone: the orchestrator does not list it.
    Gone,
}

/// A core still to recover, which knows the claim-only volume `share`, and for each of
/// `nodes`, how the node is seen and a pod there that uses `share`.
fn restarting(nodes: &[(&'static str, Seen, &'static str)]) -> H {
    let mut h = H::recovering(Config {
        resync_period: None,
        ..Config::default()
    });
    h.input(Input::SetVolume {
        volume: "share",
        spec: VolumeSpec::single_node(()).without_attach(),
    });
    for (node, seen, pod) in nodes {
        match seen {
            Seen::Reports(in_use) => h.node(node, in_use),
            Seen::Silent => h.facts(node, true, false, None),
            Seen::Gone => {}
        }
        h.pod(pod, node, &["share"]);
    }
    h
}

/// Recovers with the store listing `listed` as it holds them, and the backend nothing.
fn recover(h: &mut H, listed: &[&'static str]) {
    for op in h.core.poll(h.now) {
        match op {
            Operation::ListStatuses { id } => {
                let statuses = listed.iter().map(|n| (*n, h.read(n).unwrap())).collect();
                h.core
                    .finish(h.now, id, Outcome::ListStatuses(Ok(statuses)))
                    .unwrap();
            }
            Operation::ListAttachments { id } => {
                h.core
                    .finish(h.now, id, Outcome::List(Ok(Vec::new())))
                    .unwrap();
            }
            other => panic!("recovery planned {}", render(&other)),
        }
    }
    assert!(!h.core.is_recovering());
}

fn in_doubt(events: &[Event<T>]) -> Vec<(&'static str, Vec<&'static str>)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ClaimInDoubt { volume, nodes } => Some((*volume, nodes.clone())),
            _ => None,
        })
        .collect()
}

/// Whether `planned` lists `share` on `node`: the claim granted there.
fn granted(planned: &[String], node: &str) -> bool {
    planned.contains(&format!("write {node} [share]"))
}

/// The events so far, after checking that `node` waits for `share` with a Multi-Attach event.
fn waits(h: &mut H, node: &'static str) -> Vec<Event<T>> {
    let events = h.core.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::MultiAttach { node: n, .. } if *n == node)),
        "{node} waits: {events:?}"
    );
    events
}

/// The fuzzer's case: n2 mounts the claim (its pod runs) but its status went with its node
/// object; n1's pod waits for it. Both agents report it in use, and no status lists it: the
/// restarted controller cannot tell which mounts it, so it grants it to neither, and says so.
/// When n1's pod goes and its agent stops using it, n2 is granted it.
#[test]
fn a_restart_grants_a_claim_no_status_lists_to_none_of_the_nodes_using_it() {
    let mut h = restarting(&[
        ("n1", Seen::Reports(&["share"]), "p1"),
        ("n2", Seen::Reports(&["share"]), "p2"),
    ]);
    recover(&mut h, &["n1", "n2"]);
    let planned = h.run_ok(secs(5));
    assert!(
        !granted(&planned, "n1") && !granted(&planned, "n2"),
        "granted to a node while the other may have it mounted: {planned:?}"
    );
    for node in ["n1", "n2"] {
        assert_eq!(
            h.core.actual().state(&"share", &node),
            AttachState::Uncertain
        );
    }
    let events = waits(&mut h, "n1");
    assert_eq!(in_doubt(&events), vec![("share", vec!["n1", "n2"])]);
    // n1's pod goes; once its agent stops using it (and a fresh read agrees), n2 has it.
    h.unpod("p1");
    assert!(!granted(&h.run_ok(secs(2)), "n2"), "n1 still uses it");
    h.node("n1", &[]);
    assert_eq!(h.run_ok(secs(2)), vec!["write n2 [share]"]);
    assert!(
        h.world.log.iter().any(|l| l == "read n1"),
        "a fresh read first"
    );
    assert_eq!(
        h.core.actual().state(&"share", &"n1"),
        AttachState::Detached
    );
    assert_eq!(
        h.core.actual().state(&"share", &"n2"),
        AttachState::Attached
    );
    assert_eq!(h.count("attach") + h.count("detach"), 0);
}

/// One node reports the claim in use and no status lists it: it holds it (and, wanting it, is
/// granted it), and a node whose agent has not reported it waits with a Multi-Attach event.
#[test]
fn a_restart_keeps_a_claim_for_the_one_node_using_it() {
    let mut h = restarting(&[
        ("n0", Seen::Reports(&[]), "p0"),
        ("n2", Seen::Reports(&["share"]), "p2"),
    ]);
    recover(&mut h, &["n0", "n2"]);
    let planned = h.run_ok(secs(5));
    assert!(
        granted(&planned, "n2") && !granted(&planned, "n0"),
        "{planned:?}"
    );
    assert_eq!(
        h.core.actual().state(&"share", &"n0"),
        AttachState::Detached
    );
    assert!(
        in_doubt(&waits(&mut h, "n0")).is_empty(),
        "one node: no doubt"
    );
}

/// A claim a status lists stays the recovered holder's: another node that reports it in use
/// (its pod waits for it) adopts nothing.
#[test]
fn a_listed_claim_is_not_put_in_doubt_by_a_waiting_node() {
    let mut h = restarting(&[
        ("n1", Seen::Reports(&["share"]), "p1"),
        ("n2", Seen::Reports(&["share"]), "p2"),
    ]);
    h.world.store.get_mut("n1").unwrap().1 = vec![ReportedVolume {
        volume: "share",
        device: None,
    }];
    recover(&mut h, &["n1", "n2"]);
    h.run_ok(secs(5));
    assert_eq!(
        h.core.actual().state(&"share", &"n1"),
        AttachState::Attached
    );
    assert_eq!(
        h.core.actual().state(&"share", &"n2"),
        AttachState::Detached
    );
    assert!(in_doubt(&h.core.take_events()).is_empty());
}

/// After recovery, a node the controller hears of reporting a claim no node holds (registered
/// again with an empty status, say) holds it: a node whose pod asks for it later waits.
#[test]
fn a_node_reporting_an_unheld_claim_holds_it() {
    let mut h = restarting(&[]);
    recover(&mut h, &[]);
    h.node("n0", &[]);
    h.node("n2", &["share"]);
    assert_eq!(
        h.core.actual().state(&"share", &"n2"),
        AttachState::Uncertain
    );
    h.pod("p0", "n0", &["share"]);
    assert!(!granted(&h.run_ok(secs(5)), "n0"));
    // Its agent stops using it: released, and n0 is granted it.
    h.node("n2", &[]);
    let planned = h.run_ok(secs(5));
    assert!(granted(&planned, "n0"), "{planned:?}");
    assert_eq!(
        h.core.actual().state(&"share", &"n2"),
        AttachState::Detached
    );
    // Attach-required and multi-node volumes are the backend's to tell, or shared: no hold.
    h.rwo("disk");
    h.rwx("files");
    h.node("n3", &["disk", "files"]);
    assert_eq!(h.core.actual().state(&"disk", &"n3"), AttachState::Detached);
    assert_eq!(
        h.core.actual().state(&"files", &"n3"),
        AttachState::Detached
    );
}

/// The same loss with the node still gone at the restart: the orchestrator no longer lists n2,
/// but a workload using the claim is still placed there. The old controller kept the claim
/// until the node returned or was fenced; so does the new one, and n0 waits. When n2 returns
/// its agent reports the claim in use and, wanting it, n2 is granted it again.
#[test]
fn a_restart_keeps_a_claim_for_a_gone_node_a_workload_is_placed_on() {
    let mut h = restarting(&[("n0", Seen::Reports(&[]), "p0"), ("n2", Seen::Gone, "p2")]);
    recover(&mut h, &["n0"]);
    assert!(!granted(&h.run_ok(secs(5)), "n0"));
    assert_eq!(
        h.core.actual().state(&"share", &"n2"),
        AttachState::Uncertain
    );
    let events = waits(&mut h, "n0");
    assert!(in_doubt(&events).is_empty(), "one node: no doubt");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::DetachBlocked { node: "n2", .. })),
        "a gone node's claim waits for the node or a fence"
    );
    h.node("n2", &["share"]);
    assert!(granted(&h.run_ok(secs(5)), "n2"));
    assert_eq!(
        h.core.actual().state(&"share", &"n0"),
        AttachState::Detached
    );
}

/// A node whose agent has not reported (no in-use report at all) and on which a workload using
/// the claim is placed may have it mounted: it holds the claim, as a gone node does. A node
/// whose agent reports nothing in use holds nothing.
#[test]
fn a_restart_keeps_a_claim_for_a_silent_node_a_workload_is_placed_on() {
    let mut h = restarting(&[("n0", Seen::Reports(&[]), "p0"), ("n2", Seen::Silent, "p2")]);
    recover(&mut h, &["n0", "n2"]);
    let planned = h.run_ok(secs(5));
    assert!(
        granted(&planned, "n2") && !granted(&planned, "n0"),
        "{planned:?}"
    );
    assert!(
        in_doubt(&waits(&mut h, "n0")).is_empty(),
        "one node: no doubt"
    );
}
