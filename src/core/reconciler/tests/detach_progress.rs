//! One attachment's detach as the explicit state on its record ([`DetachProgress`]): the
//! steps a detach walks, the record's `Debug`, and the check that the per-node indexes agree
//! with the records.

use super::*;
use crate::core::state::progress::{DetachProgress, DetachStage, Release, Told};

fn progress(h: &H, volume: &'static str, node: &'static str) -> Option<DetachProgress> {
    h.core.actual().get(&volume, &node).map(|a| a.detach())
}

/// A pod leaves a healthy node: its volume's detach walks Idle, AwaitingAck (the store drops it
/// first), Reading (a fresh read of the node), Cleared, Detaching, and the record goes. The record's `Debug` shows where it is.
#[test]
fn a_detach_walks_its_stages_on_the_record() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    assert_eq!(progress(&h, "v1", "n1"), Some(DetachProgress::default()));
    h.unpod("p1");
    let mut seen = vec![DetachStage::Idle];
    let note = |h: &H, seen: &mut Vec<DetachStage>| {
        let stage = progress(h, "v1", "n1").map_or(DetachStage::Idle, |p| p.stage);
        if seen.last() != Some(&stage) {
            seen.push(stage);
        }
        h.core.check_detach_indexes().unwrap();
    };
    let mut debug_awaiting = None;
    for _ in 0..50 {
        // Answered one at a time, looking at the record after each step.
        let ops = h.tick_raw();
        note(&h, &mut seen);
        if debug_awaiting.is_none() && seen.last() == Some(&DetachStage::AwaitingAck) {
            debug_awaiting = Some(format!("{:?}", h.core.actual().get(&"v1", &"n1").unwrap()));
        }
        for op in ops {
            h.ok(op);
            note(&h, &mut seen);
        }
        h.now += TICK;
        if h.core.actual().get(&"v1", &"n1").is_none() {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![
            DetachStage::Idle,
            DetachStage::AwaitingAck,
            // The acknowledgement came; the next pass wants a read and plans it at once
            // (`ReadWanted` lasts within the pass).
            DetachStage::Idle,
            DetachStage::Reading { force: None },
            DetachStage::Cleared { force: None },
            // The next pass takes the clearance and plans the call.
            DetachStage::Detaching,
            DetachStage::Idle,
        ]
    );
    // (Upstream's C4 adds a flag of its own.)
    let c4 = if cfg!(feature = "upstream-bugs") {
        "assumed_mounted: false, "
    } else {
        ""
    };
    assert_eq!(
        debug_awaiting.unwrap(),
        format!(
            "Attachment {{ node: \"n1\", state: Attached, withheld: true, {c4}landed: true, \
             detach: DetachProgress {{ stage: AwaitingAck, told: {{}}, release: None }} }}"
        )
    );
}

/// The check names the first disagreement between a record and the indexes, and what each
/// says: a detach the index lists as wanting a read while its record is idle.
#[test]
fn the_check_names_an_index_that_disagrees_with_a_record() {
    let mut h = H::attached_rwo(UpstreamBugs::default());
    assert_eq!(h.core.check_detach_indexes(), Ok(()));
    h.core.detaches.moved(
        &"v1",
        &"n1",
        DetachStage::Idle,
        DetachStage::ReadWanted { force: None },
    );
    let error = h.core.check_detach_indexes().unwrap_err();
    assert!(
        error.contains("\"v1\" on \"n1\"") && error.contains("lists it wanting a read"),
        "{error}"
    );
    // And the counts, for a flag told without its record.
    let mut h = H::attached_rwo(UpstreamBugs::default());
    h.core.detaches.told_changed(Told::default(), Told::STUCK);
    let error = h.core.check_detach_indexes().unwrap_err();
    assert!(error.contains("stuck"), "{error}");
}

/// A release accepted while a verify of its node runs that was planned before it: that
/// verify's answer decides nothing, and its end has the volume looked at again, which plans
/// the verify that decides the release at once, not at the next periodic verify a sync period
/// later.
#[test]
fn a_release_behind_a_running_verify_is_decided_by_the_next_at_once() {
    let (mut h, early) = H::released_behind_a_running_verify();
    assert_eq!(
        progress(&h, "v1", "n1").map(|p| p.release),
        Some(Release::BehindVerify)
    );
    // Every other timer of the volume (the failed detach's backoff) fires while it runs.
    let planned = h.run_ok(secs(20));
    assert!(planned.is_empty(), "{planned:?}");
    h.verified(early, &["v1"]);
    assert!(
        !h.core
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::ReleaseRefused { .. })),
        "the early verify decides nothing"
    );
    assert_eq!(
        progress(&h, "v1", "n1").map(|p| p.release),
        Some(Release::Pending)
    );
    let ended = h.now;
    let next = h.run_until_taking(OpKind::Verify);
    assert!(
        h.now - ended < secs(2),
        "the next verify came {:?} after the early one ended",
        h.now - ended
    );
    h.verified(next, &[]);
    assert_eq!(h.core.actual().state(&"v1", &"n1"), AttachState::Detached);
    h.core.check_detach_indexes().unwrap();
}
