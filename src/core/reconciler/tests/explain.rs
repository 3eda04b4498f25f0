//! "Why is my pod stuck?": each wait of the wait table, reached by driving the core, explained
//! as the core will act on it; and the docs' wait table naming every kind of wait.

use super::*;
use crate::config::BackendLoad;
use crate::core::explain::{Placement, Wait, WaitKind};

impl H {
    /// The wait of `volume` on `node` now.
    fn wait_of(&self, volume: &'static str, node: &'static str) -> Wait<T> {
        let explained = self.core.explain_volume(&volume, self.now);
        let pair = explained
            .pairs
            .iter()
            .find(|p| p.node == node)
            .unwrap_or_else(|| panic!("no pair for {volume} on {node}: {explained}"));
        pair.wait.clone()
    }

    /// The one line of `volume` on `node`.
    fn line_of(&self, volume: &'static str, node: &'static str) -> String {
        let explained = self.core.explain_volume(&volume, self.now);
        explained
            .pairs
            .iter()
            .find(|p| p.node == node)
            .map(ToString::to_string)
            .unwrap()
    }
}

#[test]
fn a_recovering_core_waits_for_its_listings() {
    let mut h = H::recovering(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    assert_eq!(h.wait_of("v1", "n1"), Wait::Recovery);
    // A volume it was not told of yet, which its listings may show attached, waits too.
    let unknown = h.core.explain_volume(&"v2", h.now);
    assert!(unknown.recovering && unknown.pairs.is_empty());
    assert!(
        unknown
            .to_string()
            .contains("waiting for the core's recovery listings"),
        "{unknown}"
    );
}

/// A pod whose volume is attached on its node is not held back by another pod waiting for
/// that volume elsewhere: only its own node's pairs, and the holders of a Multi-Attach it
/// waits for, hold a pod back.
#[test]
fn a_holders_pod_is_not_held_back_by_the_pod_waiting_for_it() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(2));
    let holder = h.core.explain_workload(&"p1", h.now);
    assert!(holder.is_settled(), "{holder}");
    assert_eq!(holder.waits().count(), 0, "{holder}");
    let waiting = h.core.explain_workload(&"p2", h.now);
    let waits: Vec<WaitKind> = waiting.waits().map(|p| p.wait.kind()).collect();
    assert_eq!(waits, vec![WaitKind::HeldElsewhere], "{waiting}");
}

/// An attached volume the store does not list yet (its write failing) holds its pod: the
/// node's agent mounts only what the store lists. The write's failure is named.
#[test]
fn an_attached_volume_waits_for_the_status_write_that_lists_it() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.ok(attach);
    let write = h.tick_taking(OpKind::WriteStatus);
    h.fail_status(
        write,
        StoreError::transient("etcdserver: request timed out"),
    );
    assert_eq!(h.wait_of("v1", "n1"), Wait::StatusWrite);
    let explained = h.core.explain_workload(&"p1", h.now);
    assert!(!explained.is_settled());
    let line = h.line_of("v1", "n1");
    assert!(
        line.contains("waiting for \"n1\"'s status to list it")
            && line.contains("etcdserver: request timed out"),
        "{line}"
    );
}

#[test]
fn an_attach_waits_for_its_call_then_is_settled() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    assert_eq!(
        h.wait_of("v1", "n1"),
        Wait::NextPass,
        "decided, not planned"
    );
    let attach = h.tick_taking(OpKind::Attach);
    let Wait::Call { kind, node, since } = h.wait_of("v1", "n1") else {
        panic!("{}", h.line_of("v1", "n1"));
    };
    assert_eq!((kind, node), (OpKind::Attach, "n1"));
    assert!(since <= h.now);
    h.now = since + secs(3);
    assert!(
        h.line_of("v1", "n1").contains("running for 3.0s"),
        "{}",
        h.line_of("v1", "n1")
    );
    h.ok(attach);
    assert_eq!(
        h.wait_of("v1", "n1"),
        Wait::StatusWrite,
        "attached, not yet listed for the node's agent"
    );
    h.run_ok(secs(1));
    assert_eq!(h.wait_of("v1", "n1"), Wait::Settled);
    let workload = h.core.explain_workload(&"p1", h.now);
    assert!(workload.is_settled(), "{workload}");
    assert_eq!(
        workload.to_string(),
        "\"p1\" on \"n1\": every volume attached"
    );
}

#[test]
fn a_failed_attach_waits_for_its_backoff_and_names_its_error() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.rwo("v1");
    h.pod("p1", "n1", &["v1"]);
    let attach = h.tick_taking(OpKind::Attach);
    h.fail(attach, BackendError::transient("disk quota exceeded"));
    let Wait::Backoff { kind, until } = h.wait_of("v1", "n1") else {
        panic!("{}", h.line_of("v1", "n1"));
    };
    assert_eq!(kind, OpKind::Attach);
    assert!(until > h.now);
    let explained = h.core.explain_volume(&"v1", h.now);
    let failure = explained.pairs[0]
        .last_failure
        .clone()
        .expect("the failure");
    assert_eq!((failure.kind, failure.failures), (OpKind::Attach, 1));
    assert!(failure.error.contains("disk quota exceeded"), "{failure:?}");
    assert!(
        h.line_of("v1", "n1").contains("disk quota exceeded"),
        "{}",
        h.line_of("v1", "n1")
    );
}

#[test]
fn a_single_node_volume_held_elsewhere_names_the_holder_and_its_unmount() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n1", &["v1"]);
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    h.run_ok(secs(5));
    assert_eq!(
        h.wait_of("v1", "n2"),
        Wait::HeldElsewhere {
            holders: vec!["n1"]
        }
    );
    assert_eq!(h.wait_of("v1", "n1"), Wait::Unmount { forced_at: None });
    let line = h.line_of("v1", "n1");
    assert!(
        line.starts_with(
            "\"v1\" on \"n1\": to be detached; waiting for \"n1\"'s agent to unmount it (since"
        ),
        "{line}"
    );
    // The workload's answer carries both: its own wait and the holder's.
    let workload = h.core.explain_workload(&"p2", h.now);
    let waits: Vec<WaitKind> = workload.waits().map(|p| p.wait.kind()).collect();
    assert_eq!(waits, vec![WaitKind::Unmount, WaitKind::HeldElsewhere]);
    assert!(!workload.is_settled());
}

#[test]
fn a_detach_waits_for_the_store_then_a_fresh_read() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.unpod("p1");
    let write = h.tick().pop().unwrap();
    assert_eq!(render(&write), "write n1 []");
    assert_eq!(h.wait_of("v1", "n1"), Wait::StoreAck);
    h.ok(write);
    let read = h.tick_raw().pop().expect("the read before the detach");
    assert_eq!(render(&read), "read n1");
    assert_eq!(h.wait_of("v1", "n1"), Wait::FreshRead);
    h.ok(read);
}

#[test]
fn an_unhealthy_node_using_the_volume_waits_for_a_fence_or_a_timeout() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.facts("n1", false, false, Some(&["v1"]));
    h.unpod("p1");
    h.run_ok(secs(2));
    assert_eq!(
        h.wait_of("v1", "n1"),
        Wait::Fence {
            checking_machine: false
        }
    );
    // Where a forced detach is allowed, the unmount wait ends at its timeout.
    let mut h = H::unhealthy_still_using(Config {
        force_detach_on_timeout: true,
        ..Config::default()
    });
    h.run_ok(secs(2));
    let Wait::Unmount {
        forced_at: Some(at),
    } = h.wait_of("v1", "n1")
    else {
        panic!("{}", h.line_of("v1", "n1"));
    };
    assert!(at > h.now && at <= h.now + secs(360), "{at:?}");
}

#[test]
fn a_deleted_node_holding_the_volume_waits_for_its_return_or_a_fence() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.node("n1", &["v1"]);
    h.unpod("p1");
    h.unnode("n1");
    h.run_ok(secs(2));
    assert_eq!(h.wait_of("v1", "n1"), Wait::NodeDeleted);
}

#[test]
fn a_full_node_names_its_limit() {
    let mut h = H::new(Config::default());
    let facts = NodeFacts {
        in_use: Some(Vec::new()),
        attach_limit: Some(1),
        ..NodeFacts::default()
    };
    h.world
        .store
        .entry("n1")
        .or_insert((facts.clone(), Vec::new(), 1));
    h.input(Input::NodeUpdated { node: "n1", facts });
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.pod("p2", "n1", &["v2"]);
    h.run_ok(secs(1));
    assert_eq!(
        h.wait_of("v2", "n1"),
        Wait::NodeFull {
            driver: None,
            held: 1,
            limit: 1
        }
    );
}

#[test]
fn a_queued_attach_waits_for_backend_load() {
    let mut h = H::new(Config {
        backend_load: BackendLoad {
            max_attaches: Some(1),
            ..BackendLoad::UNBOUNDED
        },
        ..Config::default()
    });
    h.node("n1", &[]);
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1", "v2"]);
    let first = h.tick_raw();
    assert_eq!(H::attaches(&first), vec!["attach v1 n1"]);
    let queued = h.wait_of("v2", "n1");
    assert!(
        matches!(
            queued,
            Wait::BackendLoad {
                kind: OpKind::Attach,
                ..
            }
        ),
        "{}",
        h.line_of("v2", "n1")
    );
}

#[test]
fn a_pending_workload_names_what_is_missing() {
    let mut h = H::new(Config::default());
    h.node("n1", &[]);
    h.pod("p1", "n1", &["v9"]);
    h.tick();
    let explained = h.core.explain_workload(&"p1", h.now);
    let Placement::Pending { missing, .. } = &explained.placement else {
        panic!("{explained}");
    };
    assert_eq!(missing, &vec![Missing::Volume("v9")]);
    assert!(
        explained.to_string().contains("waiting for volume \"v9\""),
        "{explained}"
    );
    let unknown = h.core.explain_workload(&"nobody", h.now);
    assert_eq!(unknown.placement, Placement::Unknown);
    assert!(!h.core.explain_volume(&"v7", h.now).known);
}

/// Every kind of wait the explanation can give is named in the docs' wait table, so that a
/// reader of an answer finds what ends it.
#[test]
fn every_kind_of_wait_is_in_the_docs_wait_table() {
    let design = include_str!("../../../../docs/design.md");
    let table = design
        .split("## Every wait has an end")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the wait table's section");
    for kind in WaitKind::ALL {
        let name = format!("`Wait::{}`", kind.name());
        assert!(table.contains(&name), "{name} is not in the wait table");
    }
}

fn explained_events(h: &mut H) -> Vec<(&'static str, Vec<WaitKind>)> {
    h.core
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::WaitExplained {
                workload,
                explanation,
                ..
            } => Some((
                workload,
                explanation.waits().map(|p| p.wait.kind()).collect(),
            )),
            _ => None,
        })
        .collect()
}

/// A workload still waiting `explain_waits_after` after its placement is explained once, in
/// an event that names what each of its volumes waits for; one attached in time, or moved
/// since, is not; and with the setting off nothing is.
#[test]
fn a_long_wait_is_explained_once_in_an_event() {
    let config = Config {
        explain_waits_after: Some(secs(120)),
        ..Config::default()
    };
    let mut h = H::new(config.clone());
    h.node("n1", &["v1"]);
    h.node("n2", &[]);
    h.node("n3", &[]);
    h.rwo("v1");
    h.rwo("v2");
    h.pod("p1", "n1", &["v1"]);
    h.run_ok(secs(1));
    h.node("n1", &["v1"]);
    h.unpod("p1");
    h.pod("p2", "n2", &["v1"]);
    h.pod("p3", "n3", &["v2"]);
    h.pod("p4", "n2", &["v2"]);
    h.run_ok(secs(5));
    h.pod("p4", "n3", &["v2"]);
    h.core.take_events();
    h.run_ok(secs(110));
    assert_eq!(explained_events(&mut h), vec![], "not yet");
    h.run_ok(secs(20));
    assert_eq!(
        explained_events(&mut h),
        vec![("p2", vec![WaitKind::Unmount, WaitKind::HeldElsewhere])],
        "p3 and p4 were attached in time; p4's first placement is stale"
    );
    h.run_ok(secs(600));
    assert_eq!(explained_events(&mut h), vec![], "once per placement");

    let mut off = H::new(Config::default());
    off.node("n1", &["v1"]);
    off.node("n2", &[]);
    off.rwo("v1");
    off.pod("p1", "n1", &["v1"]);
    off.run_ok(secs(1));
    off.unpod("p1");
    off.pod("p2", "n2", &["v1"]);
    off.run_ok(secs(600));
    assert_eq!(explained_events(&mut off), vec![]);
}
