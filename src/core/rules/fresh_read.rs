//! The last word before a detach: what a fresh read of the node says about it.
//!
//! The core decides detaches from its own view of a node, fed by the orchestrator's watches,
//! which can be older than a mount that started before the volume left the node's status, or
//! than a fence lifted since. So every detach, forced or not, is planned only after a fresh
//! read of the node ([`Operation::ReadStatus`](crate::core::Operation::ReadStatus)) and only if
//! that read justifies it. The removal is acknowledged before the read is planned (C5), and an
//! agent reports a volume in use before mounting it, so the read sees every mount that could still
//! happen.
//!
//! The write that removes the volume may read the node's facts itself, in the same step
//! ([`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts)):
//! read no earlier than the removal, they see the same mounts, and they stand for the read in
//! the pass right after the write's acknowledgement ([`WrittenFacts`]), and no later.

use crate::core::calls::store::{NodeStatus, Revision, StatusFacts};
use crate::core::operation::ForceReason;
use crate::domain::Domain;

/// The facts a detach is judged by, borrowed from a fresh read or from a write that read them
/// ([`StatusFacts`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fresh<'a, D: Domain> {
    pub(crate) in_use: Option<&'a [D::Volume]>,
    pub(crate) fenced: Option<bool>,
    pub(crate) healthy: Option<bool>,
}

impl<'a, D: Domain> From<&'a NodeStatus<D>> for Fresh<'a, D> {
    fn from(status: &'a NodeStatus<D>) -> Self {
        Fresh {
            in_use: status.in_use.as_deref(),
            fenced: status.fenced,
            healthy: status.healthy,
        }
    }
}

impl<'a, D: Domain> From<&'a StatusFacts<D>> for Fresh<'a, D> {
    fn from(facts: &'a StatusFacts<D>) -> Self {
        Fresh {
            in_use: facts.in_use.as_deref(),
            fenced: facts.fenced,
            healthy: facts.healthy,
        }
    }
}

/// The facts a status write read ([`StatusFacts`]), kept for the pass right after its
/// acknowledgement, where they stand for the fresh read of the detaches that waited for it.
#[derive(Debug)]
pub(crate) struct WrittenFacts<D: Domain> {
    pub(crate) facts: StatusFacts<D>,
    /// The revision the write created: the facts serve only while the core knows the store at
    /// it, that is while the list the write carried is the node's list.
    pub(crate) revision: Revision,
    /// The node object written to, as [`InFlight::WriteStatus`](crate::core::operation::InFlight).
    pub(crate) object: u64,
    /// When the write was acknowledged: the facts serve until the pass due a reconcile
    /// period later, with the slack a read's clearance has, and no later however late that
    /// pass comes (a stalled driver).
    pub(crate) at: std::time::Duration,
}

/// Whether a detach of `volume` may go ahead, given a fresh read of its node or the facts a
/// write read (`None`: the store has no such node). `Err` says why not, for a human.
///
/// A detach may go ahead when the read shows that:
/// - the store has no such node, and the detach is forced because a deleted node counts as
///   fenced (`Config::deleted_node_is_fenced`); without that, a node object deleted while its
///   machine runs (an operator's `kubectl delete node`) may still mount the volume, and the
///   core's own view, which may not have seen the deletion yet, decides nothing;
/// - or the node is fenced (`fenced: Some(true)`): it can no longer write, whatever it reports;
/// - or its agent reports in-use volumes and `volume` is not among them;
/// - or, for a detach forced by the unmount timeout (opt-in), the node is not known healthy;
/// - or, for a detach forced because the backend said twice, fresh, that the node's machine is
///   powered off (`Config::machine_fencing`), the node is not known healthy: the machine's
///   state was itself read fresh (the core plans the detach only while that answer is younger
///   than `MachineFencing::max_age`), and a node whose agent reports healthy again has a
///   running machine, whatever the provider said.
///
/// So an unforced detach from a store that holds no in-use report (`in_use: None`) is held
/// back, and so is an out-of-service detach from a node whose fence was lifted while it still
/// mounts the volume.
pub(crate) fn judge_detach<D: Domain>(
    status: Option<Fresh<'_, D>>,
    volume: &D::Volume,
    force: Option<ForceReason>,
) -> Result<(), String> {
    let Some(status) = status else {
        return if force == Some(ForceReason::NodeDeleted) {
            Ok(())
        } else {
            Err(
                "the store has no such node, and its machine may still run and mount it (set \
                 deleted_node_is_fenced if a deleted node's machine is always gone)"
                    .into(),
            )
        };
    };
    if status.fenced == Some(true) {
        return Ok(());
    }
    let in_use = match status.in_use {
        Some(list) if !list.contains(volume) => return Ok(()),
        Some(_) => "its agent reports it in use",
        None => "the store holds no in-use report for the node",
    };
    if matches!(force, Some(ForceReason::Timeout | ForceReason::PoweredOff))
        && status.healthy != Some(true)
    {
        return Ok(());
    }
    let why = match force {
        // A dead agent's report is never withdrawn: say what moves the volume.
        None if status.healthy == Some(false) => {
            ", and the node is unhealthy: fence it (out-of-service) once its machine is off, \
             and the volume moves (with machine fencing, it also moves once the backend says the \
             machine is off; with force_detach_on_timeout, when the unmount wait ends)"
        }
        None => "",
        Some(ForceReason::OutOfService) => {
            ", and the node is no longer fenced (the fence the detach was planned on is stale)"
        }
        Some(ForceReason::Timeout) => ", and the node is healthy again",
        Some(ForceReason::NodeDeleted) => ", and the node exists again",
        Some(ForceReason::PoweredOff) => {
            ", and the node is healthy again (its machine runs, whatever the backend said)"
        }
    };
    Err(format!("{in_use}{why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type T = Ids<&'static str, &'static str, &'static str>;

    fn status(in_use: Option<&[&'static str]>, fenced: bool, healthy: bool) -> NodeStatus<T> {
        NodeStatus {
            attached: vec![],
            in_use: in_use.map(<[_]>::to_vec),
            fenced: Some(fenced),
            healthy: Some(healthy),
            revision: Revision::from(1),
        }
    }

    #[test]
    fn only_fresh_facts_justify_a_detach() {
        let judge = |s: Option<&NodeStatus<T>>, f| judge_detach::<T>(s.map(Fresh::from), &"v", f);
        // No node object: its machine may run on (found by the world fuzzer: a node deleted
        // while the core's view lagged was detached under a new mount).
        assert!(judge(None, None).unwrap_err().contains("no such node"));
        assert!(judge(None, Some(ForceReason::Timeout)).is_err());
        assert!(judge(None, Some(ForceReason::OutOfService)).is_err());
        assert_eq!(judge(None, Some(ForceReason::NodeDeleted)), Ok(()));
        assert_eq!(judge(Some(&status(Some(&[]), false, true)), None), Ok(()));
        assert_eq!(
            judge(Some(&status(Some(&["v"]), false, true)), None),
            Err("its agent reports it in use".into())
        );
        assert!(judge(Some(&status(None, false, true)), None).is_err());
        // Unhealthy: the event says what a human can do, and what the configuration can.
        let unhealthy = judge(Some(&status(Some(&["v"]), false, false)), None).unwrap_err();
        for advice in [
            "fence it (out-of-service)",
            "with machine fencing",
            "with force_detach_on_timeout",
        ] {
            assert!(unhealthy.contains(advice), "{advice:?} in {unhealthy:?}");
        }
        assert_eq!(
            judge(
                Some(&status(Some(&["v"]), true, true)),
                Some(ForceReason::OutOfService)
            ),
            Ok(())
        );
        let stale_fence = judge(
            Some(&status(Some(&["v"]), false, false)),
            Some(ForceReason::OutOfService),
        );
        assert!(stale_fence.unwrap_err().contains("no longer fenced"));
        assert_eq!(
            judge(
                Some(&status(Some(&["v"]), false, false)),
                Some(ForceReason::Timeout)
            ),
            Ok(()),
            "the unmount wait expired on an unhealthy node"
        );
        assert!(
            judge(
                Some(&status(Some(&["v"]), false, true)),
                Some(ForceReason::Timeout)
            )
            .unwrap_err()
            .contains("healthy again")
        );
        // Powered off: as the timeout, never from a node the store shows healthy, nor from a
        // node the store lacks.
        let off = Some(ForceReason::PoweredOff);
        assert_eq!(
            judge(Some(&status(Some(&["v"]), false, false)), off),
            Ok(())
        );
        assert!(
            judge(Some(&status(Some(&["v"]), false, true)), off)
                .unwrap_err()
                .contains("its machine runs")
        );
        assert!(judge(None, off).is_err());
    }
}
