//! The attach and detach decisions, as pure functions of what the core knows: the reconciler
//! gathers the facts, asks, and applies the answer in a small step. Kept apart so that each
//! rule (and each upstream bug it replaces) reads in one place and is tested without a core.

use std::time::Duration;

use smallvec::SmallVec;

use crate::core::operation::ForceReason;
use crate::core::state::actual::AttachState;

/// Why a detach cannot go ahead by any means the controller has, for a human.
pub(crate) const DELETED_NODE: &str = "the node object was deleted while the volume is attached; \
     it stays attached until the node returns or is fenced (or set deleted_node_is_fenced if a \
     deleted node's machine is always gone)";

/// Why a detach from an unhealthy node that still mounts the volume waits for a human.
pub(crate) const UNHEALTHY_MOUNTED: &str = "the node is unhealthy and still reports the volume \
     in use; fence it (out-of-service) once its machine is off, and the volume moves";

/// The same, when machine fencing is on: the controller keeps asking, and says so.
pub(crate) const UNHEALTHY_MOUNTED_CHECKING: &str = "the node is unhealthy and still reports \
     the volume in use, and its machine is not known to be powered off (machine fencing asks the \
     backend every interval, and moves the volume once it says Off twice); fence it \
     (out-of-service) once its machine is off, and the volume moves";

/// What the core knows about an attachment that no workload needs any more, once no other
/// operation on it runs or backs off.
#[derive(Clone, Debug)]
pub(crate) struct DetachFacts {
    pub(crate) now: Duration,
    /// When the unmount wait (`max_wait_for_unmount`) ends.
    pub(crate) unmount_deadline: Duration,
    /// The node object exists.
    pub(crate) present: bool,
    pub(crate) healthy: bool,
    pub(crate) fenced: bool,
    /// The node's last report: whether it has the volume in use; `None` if not heard from.
    pub(crate) in_use: Option<bool>,
    /// `force_detach_on_timeout` (or upstream's C3, which forces regardless).
    pub(crate) force_allowed: bool,
    pub(crate) deleted_node_is_fenced: bool,
    /// The backend said twice, fresh, that the node's machine is powered off
    /// (`Config::machine_fencing`), and the node is unhealthy.
    pub(crate) machine_off: bool,
    /// `Config::machine_fencing` is on (only the wording of a blocked detach changes).
    pub(crate) machine_fencing: bool,
    /// A fresh read held this detach back: the store says the volume is in use while the
    /// core's view says not. The read is the newer fact, so the unmount wait's timeout applies
    /// as if the view said mounted (a crashed agent's last report, never withdrawn, would
    /// otherwise hold an unhealthy node's volume forever).
    pub(crate) held_back: bool,
    /// Upstream's C4: the attachment was first seen without a mount report, and stays
    /// "mounted" until the report for it changes.
    pub(crate) sticky_mount: bool,
    /// The store is known not to list the volume for the node (or cannot: no node, no
    /// status), or upstream's C5 skips the wait for that.
    pub(crate) store_settled: bool,
    /// A fresh read's clearance: the force reason it was checked for, and until when it holds.
    pub(crate) clearance: Option<(Option<ForceReason>, Duration)>,
}

/// What to do about a detach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Detach {
    /// Not yet: the node mounts it. Wake at this time (the end of the unmount wait, where a
    /// forced detach is then allowed) or, with `None`, at the node's next report.
    Wait { wake: Option<Duration> },
    /// Nothing the controller can do: tell a human why, once; wake as for `Wait`.
    Blocked {
        reason: &'static str,
        wake: Option<Duration>,
    },
    /// Justified (by `force`, or unforced): stop reporting the volume, then, in order, wait
    /// for the store to settle, have the node read fresh, and detach.
    Go {
        force: Option<ForceReason>,
        step: Step,
        /// A timer that escalates a detach the fresh read may hold back (a node not heard
        /// from, unhealthy, where forcing is allowed).
        wake: Option<Duration>,
    },
}

/// How far a justified detach has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The store may still list the volume for the node's agent: wait for it to acknowledge a
    /// list without it (C5).
    AwaitStore,
    /// Read the node fresh first: the core's view of it may be older than a new mount or a
    /// lifted fence.
    ReadNode,
    /// A fresh read justified it in time: plan the detach.
    Detach,
}

/// Decides a detach.
pub(crate) fn decide_detach(f: &DetachFacts) -> Detach {
    let escalates = f.force_allowed && !f.healthy;
    let timed_out = escalates && f.now >= f.unmount_deadline;
    let (force, wake) = if f.fenced {
        // A fenced node cannot write, whatever its last reports say.
        (Some(ForceReason::OutOfService), None)
    } else if !f.present {
        // The node object is gone: no report will come, and its machine may still run. Its
        // health is unknown, not bad, so the opt-in timeout force (for unhealthy nodes) does
        // not apply: only the node's return, a fence, or `deleted_node_is_fenced` ends this.
        if f.deleted_node_is_fenced {
            (Some(ForceReason::NodeDeleted), None)
        } else {
            return Detach::Blocked {
                reason: DELETED_NODE,
                wake: None,
            };
        }
    } else if f.machine_off && !f.healthy {
        // Powered off, twice and fresh: like a fenced node, it cannot write, whatever its
        // reports say (the core's view of them, and the store's, may disagree: a fresh read
        // that holds an unforced detach back would hold this one too).
        (Some(ForceReason::PoweredOff), None)
    } else {
        // C4: follow the latest report; upstream's bug keeps an assumed mount sticky.
        match f.in_use.map(|in_use| in_use || f.sticky_mount) {
            // Unmounted as far as the view knows: unforced, the fresh read decides. If a read
            // already found it mounted, the unmount wait escalates it where forcing is
            // allowed, as for a mount the view knows of.
            Some(false) if f.held_back && timed_out => (Some(ForceReason::Timeout), None),
            Some(false) => (
                None,
                (f.held_back && escalates).then_some(f.unmount_deadline),
            ),
            _ if timed_out => (Some(ForceReason::Timeout), None),
            // Not heard from means mounted, so the core cannot clear the detach itself; but
            // waiting for a first report that may never come would leak the volume. The fresh
            // read decides, and where forcing is allowed a timer escalates it.
            None => (None, escalates.then_some(f.unmount_deadline)),
            // Mounted: the node's next report, a health change or a fence marks the volume
            // again; a timer ends the unmount wait where a forced detach is allowed.
            Some(true) if !f.healthy && !f.force_allowed => {
                return Detach::Blocked {
                    reason: if f.machine_fencing {
                        UNHEALTHY_MOUNTED_CHECKING
                    } else {
                        UNHEALTHY_MOUNTED
                    },
                    wake: None,
                };
            }
            Some(true) => {
                return Detach::Wait {
                    wake: escalates.then_some(f.unmount_deadline),
                };
            }
        }
    };
    let step = if !f.store_settled {
        Step::AwaitStore
    } else {
        match f.clearance {
            Some((checked, until)) if checked == force && f.now <= until => Step::Detach,
            _ => Step::ReadNode,
        }
    };
    Detach::Go { force, step, wake }
}

/// What the core knows about a volume a workload needs on a node.
#[derive(Clone, Debug)]
pub(crate) struct AttachFacts<N> {
    /// The attachment's state there, if any.
    pub(crate) here: Option<AttachState>,
    /// The volume is attached there but not reported (it was leaving).
    pub(crate) withheld: bool,
    /// An attach or detach of it runs (or backs off, for `gate`).
    pub(crate) running: bool,
    /// Whether an attach may start now: `Err(None)` while another operation runs,
    /// `Err(Some(t))` in backoff until `t`.
    pub(crate) gate: Result<(), Option<Duration>>,
    /// Single-node: its attachments on other nodes, with their states.
    pub(crate) single_node: bool,
    pub(crate) elsewhere: SmallVec<[(N, AttachState); 1]>,
    /// Upstream's C1: an attached volume is never reported again once withheld.
    pub(crate) lose_report: bool,
    /// Upstream's C2: an Uncertain attachment elsewhere does not hold the volume.
    pub(crate) ignore_uncertain: bool,
}

/// What to do about an attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Attach<N> {
    /// Already attached there: nothing, or report it again (C1: needed again, so listed again
    /// at once, unless a detach runs, whose result decides).
    Attached { report_again: bool },
    /// An operation on it runs; its end marks the volume again.
    Running,
    /// In backoff until then.
    RetryAt(Duration),
    /// Single-node and held by these nodes (Multi-Attach).
    HeldBy(SmallVec<[N; 1]>),
    /// Plan the attach.
    Go,
}

/// Decides an attach.
#[inline(always)]
pub(crate) fn decide_attach<N: Clone>(f: &AttachFacts<N>) -> Attach<N> {
    if f.here == Some(AttachState::Attached) {
        return Attach::Attached {
            report_again: f.withheld && !f.lose_report && !f.running,
        };
    }
    match f.gate {
        Ok(()) => {}
        Err(None) => return Attach::Running,
        Err(Some(retry)) => return Attach::RetryAt(retry),
    }
    if f.single_node {
        let holders: SmallVec<[N; 1]> = f
            .elsewhere
            .iter()
            .filter(|(_, state)| match state {
                AttachState::Attached => true,
                AttachState::Uncertain => !f.ignore_uncertain,
                AttachState::Detached => false,
            })
            .map(|(node, _)| node.clone())
            .collect();
        if !holders.is_empty() {
            return Attach::HeldBy(holders);
        }
    }
    Attach::Go
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A healthy node, heard from, not using the volume, store settled, no clearance yet.
    fn unused() -> DetachFacts {
        DetachFacts {
            now: s(10),
            unmount_deadline: s(370),
            present: true,
            healthy: true,
            fenced: false,
            in_use: Some(false),
            force_allowed: false,
            deleted_node_is_fenced: false,
            machine_off: false,
            machine_fencing: false,
            held_back: false,
            sticky_mount: false,
            store_settled: true,
            clearance: None,
        }
    }

    fn go(force: Option<ForceReason>, step: Step) -> Detach {
        Detach::Go {
            force,
            step,
            wake: None,
        }
    }

    #[test]
    fn a_detach_goes_store_first_then_read_then_call() {
        let f = unused();
        assert_eq!(decide_detach(&f), go(None, Step::ReadNode));
        let waiting = DetachFacts {
            store_settled: false,
            ..f.clone()
        };
        assert_eq!(decide_detach(&waiting), go(None, Step::AwaitStore));
        let cleared = DetachFacts {
            clearance: Some((None, s(11))),
            ..f.clone()
        };
        assert_eq!(decide_detach(&cleared), go(None, Step::Detach));
        let late = DetachFacts {
            clearance: Some((None, s(9))),
            ..f.clone()
        };
        assert_eq!(decide_detach(&late), go(None, Step::ReadNode), "stale");
        let other_force = DetachFacts {
            fenced: true,
            clearance: Some((None, s(11))),
            ..f
        };
        assert_eq!(
            decide_detach(&other_force),
            go(Some(ForceReason::OutOfService), Step::ReadNode),
            "checked for another justification"
        );
    }

    #[test]
    fn a_mounted_volume_waits_and_only_the_opt_in_timeout_forces_an_unhealthy_node() {
        let mounted = DetachFacts {
            in_use: Some(true),
            ..unused()
        };
        assert_eq!(decide_detach(&mounted), Detach::Wait { wake: None });
        let unhealthy = DetachFacts {
            healthy: false,
            ..mounted.clone()
        };
        assert_eq!(
            decide_detach(&unhealthy),
            Detach::Blocked {
                reason: UNHEALTHY_MOUNTED,
                wake: None
            }
        );
        let allowed = DetachFacts {
            force_allowed: true,
            ..unhealthy
        };
        assert_eq!(decide_detach(&allowed), Detach::Wait { wake: Some(s(370)) });
        let expired = DetachFacts {
            now: s(370),
            ..allowed
        };
        assert_eq!(
            decide_detach(&expired),
            go(Some(ForceReason::Timeout), Step::ReadNode)
        );
        let healthy_expired = DetachFacts {
            healthy: true,
            ..expired
        };
        assert_eq!(
            decide_detach(&healthy_expired),
            Detach::Wait { wake: None },
            "never forced from a healthy node (110721)"
        );
    }

    #[test]
    fn a_mount_only_a_fresh_read_saw_escalates_like_one_the_view_knows() {
        // The view says unmounted; a fresh read, newer, said mounted (a crashed agent's last
        // report). Unforced it goes to the read again; on an unhealthy node where forcing is
        // allowed, the unmount wait's end is timed and then forces.
        let held = DetachFacts {
            held_back: true,
            ..unused()
        };
        assert_eq!(decide_detach(&held), go(None, Step::ReadNode), "healthy");
        let unhealthy = DetachFacts {
            healthy: false,
            force_allowed: true,
            ..held
        };
        assert_eq!(
            decide_detach(&unhealthy),
            Detach::Go {
                force: None,
                step: Step::ReadNode,
                wake: Some(s(370))
            }
        );
        let expired = DetachFacts {
            now: s(370),
            ..unhealthy.clone()
        };
        assert_eq!(
            decide_detach(&expired),
            go(Some(ForceReason::Timeout), Step::ReadNode)
        );
        let not_allowed = DetachFacts {
            force_allowed: false,
            ..expired.clone()
        };
        assert_eq!(decide_detach(&not_allowed), go(None, Step::ReadNode));
        let healthy = DetachFacts {
            healthy: true,
            ..expired.clone()
        };
        assert_eq!(
            decide_detach(&healthy),
            go(None, Step::ReadNode),
            "never forced from a healthy node (110721)"
        );
        let not_held = DetachFacts {
            held_back: false,
            ..expired
        };
        assert_eq!(decide_detach(&not_held), go(None, Step::ReadNode));
    }

    #[test]
    fn a_node_not_heard_from_leaves_it_to_the_fresh_read() {
        let unheard = DetachFacts {
            in_use: None,
            ..unused()
        };
        assert_eq!(decide_detach(&unheard), go(None, Step::ReadNode));
        let escalating = DetachFacts {
            healthy: false,
            force_allowed: true,
            ..unheard
        };
        assert_eq!(
            decide_detach(&escalating),
            Detach::Go {
                force: None,
                step: Step::ReadNode,
                wake: Some(s(370))
            }
        );
    }

    #[test]
    fn a_deleted_node_is_fenced_only_by_configuration_or_a_fence() {
        let deleted = DetachFacts {
            present: false,
            in_use: Some(true),
            ..unused()
        };
        assert_eq!(
            decide_detach(&deleted),
            Detach::Blocked {
                reason: DELETED_NODE,
                wake: None
            }
        );
        // Its health is unknown, not bad: the opt-in timeout force never applies, however
        // long it waited (its machine may run on with the volume mounted).
        let timed_out = DetachFacts {
            force_allowed: true,
            healthy: false,
            now: s(1000),
            ..deleted.clone()
        };
        assert_eq!(
            decide_detach(&timed_out),
            Detach::Blocked {
                reason: DELETED_NODE,
                wake: None
            }
        );
        let trusted = DetachFacts {
            deleted_node_is_fenced: true,
            ..deleted.clone()
        };
        assert_eq!(
            decide_detach(&trusted),
            go(Some(ForceReason::NodeDeleted), Step::ReadNode)
        );
        let fenced = DetachFacts {
            fenced: true,
            ..deleted
        };
        assert_eq!(
            decide_detach(&fenced),
            go(Some(ForceReason::OutOfService), Step::ReadNode)
        );
    }

    #[test]
    fn a_powered_off_machine_forces_a_detach_from_an_unhealthy_node_only() {
        let mounted = DetachFacts {
            healthy: false,
            in_use: Some(true),
            ..unused()
        };
        assert_eq!(
            decide_detach(&mounted),
            Detach::Blocked {
                reason: UNHEALTHY_MOUNTED,
                wake: None
            }
        );
        let checking = DetachFacts {
            machine_fencing: true,
            ..mounted.clone()
        };
        assert_eq!(
            decide_detach(&checking),
            Detach::Blocked {
                reason: UNHEALTHY_MOUNTED_CHECKING,
                wake: None
            },
            "still a human's to fence, and says the controller keeps asking"
        );
        let off = DetachFacts {
            machine_off: true,
            ..checking
        };
        assert_eq!(
            decide_detach(&off),
            go(Some(ForceReason::PoweredOff), Step::ReadNode)
        );
        let unheard = DetachFacts {
            in_use: None,
            ..off.clone()
        };
        assert_eq!(
            decide_detach(&unheard),
            go(Some(ForceReason::PoweredOff), Step::ReadNode)
        );
        // As for a fence: the view's report may be older than the store's, whose fresh read
        // would hold an unforced detach back (a world fuzz finding).
        let unmounted = DetachFacts {
            in_use: Some(false),
            ..off.clone()
        };
        assert_eq!(
            decide_detach(&unmounted),
            go(Some(ForceReason::PoweredOff), Step::ReadNode)
        );
        let tainted = DetachFacts {
            fenced: true,
            ..off.clone()
        };
        assert_eq!(
            decide_detach(&tainted),
            go(Some(ForceReason::OutOfService), Step::ReadNode)
        );
        let healthy = DetachFacts {
            healthy: true,
            ..off
        };
        assert_eq!(decide_detach(&healthy), Detach::Wait { wake: None });
    }

    #[test]
    fn upstream_c4_keeps_an_assumed_mount_sticky() {
        let sticky = DetachFacts {
            sticky_mount: true,
            ..unused()
        };
        assert_eq!(decide_detach(&sticky), Detach::Wait { wake: None });
    }

    fn attach_facts() -> AttachFacts<&'static str> {
        AttachFacts {
            here: None,
            withheld: false,
            running: false,
            gate: Ok(()),
            single_node: true,
            elsewhere: SmallVec::new(),
            lose_report: false,
            ignore_uncertain: false,
        }
    }

    #[test]
    fn an_uncertain_holder_blocks_a_single_node_volume_unless_upstream_c2() {
        let held = AttachFacts {
            elsewhere: [("n2", AttachState::Uncertain)].into_iter().collect(),
            ..attach_facts()
        };
        assert_eq!(
            decide_attach(&held),
            Attach::HeldBy(["n2"].into_iter().collect())
        );
        let c2 = AttachFacts {
            ignore_uncertain: true,
            ..held.clone()
        };
        assert_eq!(decide_attach(&c2), Attach::Go);
        let multi = AttachFacts {
            single_node: false,
            ..held
        };
        assert_eq!(decide_attach(&multi), Attach::Go);
    }

    #[test]
    fn a_withheld_attachment_is_reported_again_unless_a_detach_runs_or_upstream_c1() {
        let back = AttachFacts {
            here: Some(AttachState::Attached),
            withheld: true,
            ..attach_facts()
        };
        assert_eq!(
            decide_attach(&back),
            Attach::Attached { report_again: true }
        );
        let running = AttachFacts {
            running: true,
            ..back.clone()
        };
        assert_eq!(
            decide_attach(&running),
            Attach::Attached {
                report_again: false
            }
        );
        let c1 = AttachFacts {
            lose_report: true,
            ..back
        };
        assert_eq!(
            decide_attach(&c1),
            Attach::Attached {
                report_again: false
            }
        );
        let backoff = AttachFacts {
            gate: Err(Some(s(3))),
            ..attach_facts()
        };
        assert_eq!(decide_attach(&backoff), Attach::RetryAt(s(3)));
    }
}
