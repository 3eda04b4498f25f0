//! Events worth telling a human about, in upstream's vocabulary.

use std::fmt;
use std::time::Duration;

use crate::config::CallKind;
use crate::core::explain::WorkloadExplanation;
use crate::core::input::ReleaseRefusal;
use crate::core::operation::ForceReason;
use crate::core::state::desired::{Missing, Names};
use crate::domain::Domain;

/// A node holding a single-node volume that another node waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder<D: Domain> {
    /// The node the volume is attached (or maybe attached) to.
    pub node: D::Node,
    /// Workloads still placed there that use the volume (empty after a force delete).
    pub workloads: Vec<D::Workload>,
}

/// Something that happened to a volume, for an event recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<D: Domain> {
    /// A single-node volume is wanted on `node` but held elsewhere. Emitted once per episode,
    /// under its own reason so it is not mistaken for a failed attach (upstream 96142).
    MultiAttach {
        /// The volume.
        volume: D::Volume,
        /// The node that waits.
        node: D::Node,
        /// The workloads that wait.
        workloads: Vec<D::Workload>,
        /// Where the volume is held.
        holders: Vec<Holder<D>>,
    },
    /// The backend attached the volume.
    AttachSucceeded {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
    },
    /// The backend failed to attach the volume.
    AttachFailed {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// The backend's message.
        message: String,
    },
    /// The backend detached the volume.
    DetachSucceeded {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// Set when the node still reported the volume mounted.
        force: Option<ForceReason>,
    },
    /// A volume that no workload needs on `node` cannot be detached from it, and nothing the
    /// controller can do will change that: a human (or the orchestrator) must act. Emitted
    /// once per episode.
    DetachBlocked {
        /// The volume.
        volume: D::Volume,
        /// The node it stays attached to.
        node: D::Node,
        /// What would unblock it.
        reason: String,
    },
    /// A detach was held back because a fresh read of the node did not justify it (its agent
    /// reports the volume in use, its fence was lifted, it is healthy again): no call was
    /// made, nothing failed. The detach is looked at again on the node's next report or after
    /// [`Config::unmount_recheck`](crate::config::Config::unmount_recheck). Emitted once per
    /// episode.
    WaitingForUnmount {
        /// The volume.
        volume: D::Volume,
        /// The node that still uses it.
        node: D::Node,
        /// What the fresh read showed.
        reason: String,
    },
    /// The backend failed to detach the volume.
    DetachFailed {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// The backend's message.
        message: String,
    },
    /// A workload has waited [`Config::pending_workload_warning`](crate::config::Config) or longer
    /// for a node or volumes the controller was not told of (never seen, or removed); its volumes
    /// are attached only once they are known. Emitted once per wait; the wait ends when what it
    /// names arrives or the workload is removed.
    WorkloadWaiting {
        /// The workload.
        workload: D::Workload,
        /// The node it is scheduled on.
        node: D::Node,
        /// What it waits for.
        missing: Vec<Missing<D>>,
        /// How long it has waited so far.
        waited: Duration,
    },
    /// A workload's volume cannot be attached to its node because the node holds as many
    /// volumes as it can ([`NodeFacts::attach_limit`](crate::core::NodeFacts::attach_limit), or
    /// the backend answered [`NodeFull`](crate::traits::BackendError::NodeFull)). Emitted once
    /// per wait, and again, naming every waiting workload, when one joins it; the attach goes
    /// ahead, with no further event, as soon as an attachment on the
    /// node ends or its limit is raised. Upstream finds this out only when the cloud refuses.
    NodeFull {
        /// The node.
        node: D::Node,
        /// The volume that waits for room.
        volume: D::Volume,
        /// The workloads on the node that wait for it.
        workloads: Vec<D::Workload>,
        /// Why, for a human: the count against the limit, or the backend's answer.
        reason: String,
    },
    /// A detach has been wanted for [`Config::stuck_after`](crate::config::Config::stuck_after)
    /// or longer and has not happened: the volume stays attached where no workload needs it.
    /// Emitted once per episode; see
    /// [`Reconciler::stuck_detaches`](crate::core::Reconciler::stuck_detaches) for the list.
    DetachStuck {
        /// The volume.
        volume: D::Volume,
        /// The node it stays attached to.
        node: D::Node,
        /// How long its detach has been wanted.
        waited: Duration,
    },
    /// An operator [released](crate::core::Input::ReleaseVolume) the volume from its fenced
    /// node, and the controller forgot the attachment without a detach call: a verify of the
    /// node started after the release found it gone (for a claim-only volume, which the
    /// backend knows nothing of, a fresh read showed the node still fenced).
    VolumeReleased {
        /// The volume.
        volume: D::Volume,
        /// The node it was released from.
        node: D::Node,
    },
    /// An operator's [release](crate::core::Input::ReleaseVolume), accepted, was dropped: a
    /// verify of the node started after it found the volume still attached there
    /// ([`ReleaseRefusal::BackendStillAttached`](crate::core::ReleaseRefusal::BackendStillAttached)),
    /// say because an attach landed after the operator looked. The volume's detach goes ahead
    /// as any other's instead.
    ReleaseRefused {
        /// The volume.
        volume: D::Volume,
        /// The node it stays attached to.
        node: D::Node,
        /// Why.
        reason: ReleaseRefusal<D>,
    },
    /// A claim-only volume (one the backend does not attach, see
    /// [`VolumeSpec::attach_required`](crate::core::VolumeSpec::attach_required)) was granted
    /// to a node: no backend call was made; the node's status lists it, and its agent may use
    /// it.
    ClaimGranted {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
    },
    /// A claim-only volume's claim on a node ended, on the same proofs as a detach (the
    /// node's status acknowledged without it, a fresh read justifying it): no backend call was
    /// made, and another node may be granted it.
    ClaimReleased {
        /// The volume.
        volume: D::Volume,
        /// The node.
        node: D::Node,
        /// Set when the node still reported the volume in use.
        force: Option<ForceReason>,
    },
    /// The backend said twice, fresh, that the unhealthy node's machine is powered off
    /// (`Config::machine_fencing`): the node counts as fenced, and its volumes are detached
    /// (forced, reason `powered-off`) without waiting for a human. Emitted once per run of
    /// `Off` answers.
    NodePoweredOff {
        /// The node.
        node: D::Node,
    },
    /// Asking the backend about the node's machine failed (`Config::machine_fencing`): the
    /// node is not fenced that way until two checks in a row say `Off` again. Emitted once per
    /// run of failures.
    MachineCheckFailed {
        /// The node.
        node: D::Node,
        /// The backend's message.
        message: String,
    },
    /// After a restart, a claim-only single-node volume that no node's status lists may be
    /// mounted on several nodes: each reports it in use, or is a node whose object is gone with
    /// a workload using it placed there. A claim is recorded only in its node's status, which
    /// goes with a deleted node object, and an agent also reports what it is about to mount, so
    /// the core cannot tell which has it mounted: it grants it to none. Each holds it as maybe
    /// claimed until its agent stops using it; then the last one left is granted it. A human
    /// who knows which node really has it mounted ends the wait by removing the others'
    /// workloads.
    ClaimInDoubt {
        /// The volume.
        volume: D::Volume,
        /// The nodes that may have it mounted, in order.
        nodes: Vec<D::Node>,
    },
    /// A call to the backend or the store got no answer within its deadline
    /// ([`CallTimeouts`](crate::config::CallTimeouts)) and was given up. Raised by the driver,
    /// never by the core; a timed-out attach or detach is then handled as an uncertain failure (it
    /// may still take effect), any other call as a transient one, a recovery listing is retried.
    CallTimedOut {
        /// What was called.
        call: CallKind,
        /// The node the call was about (`None` for a recovery listing).
        node: Option<D::Node>,
        /// The volume, for an attach or a detach.
        volume: Option<D::Volume>,
        /// How long the driver waited.
        after: Duration,
    },
    /// A workload placed [`Config::explain_waits_after`](crate::config::Config::explain_waits_after)
    /// ago still waits for its volumes: why, once per placement
    /// ([`Reconciler::explain_workload`](crate::core::Reconciler::explain_workload)).
    WaitExplained {
        /// The workload.
        workload: D::Workload,
        /// The node it is placed on.
        node: D::Node,
        /// How long it has waited.
        waited: Duration,
        /// What each of its volumes waits for (boxed: every event moves as the largest).
        explanation: Box<WorkloadExplanation<D>>,
    },
}

impl<D: Domain> Event<D> {
    /// A short machine-readable reason, as Kubernetes events carry.
    pub fn reason(&self) -> &'static str {
        match self {
            Event::MultiAttach { .. } => "MultiAttachVolume",
            Event::AttachSucceeded { .. } => "SuccessfulAttachVolume",
            Event::AttachFailed { .. } => "FailedAttachVolume",
            Event::DetachSucceeded { force: None, .. } => "SuccessfulDetachVolume",
            Event::DetachSucceeded { force: Some(_), .. } => "ForcedDetachVolume",
            Event::DetachFailed { .. } => "FailedDetachVolume",
            Event::DetachBlocked { .. } => "DetachBlocked",
            Event::WaitingForUnmount { .. } => "WaitingForUnmount",
            Event::WorkloadWaiting { .. } => "WorkloadWaiting",
            Event::CallTimedOut { .. } => "CallTimedOut",
            Event::ClaimInDoubt { .. } => "ClaimInDoubt",
            Event::NodeFull { .. } => "NodeFull",
            Event::DetachStuck { .. } => "DetachStuck",
            Event::VolumeReleased { .. } => "VolumeReleased",
            Event::ReleaseRefused { .. } => "ReleaseRefused",
            Event::ClaimGranted { .. } => "ClaimGranted",
            Event::ClaimReleased { force: None, .. } => "ClaimReleased",
            Event::ClaimReleased { force: Some(_), .. } => "ForcedClaimRelease",
            Event::NodePoweredOff { .. } => "NodePoweredOff",
            Event::MachineCheckFailed { .. } => "MachineCheckFailed",
            Event::WaitExplained { .. } => "WaitExplained",
        }
    }

    /// Whether this is a warning rather than a normal event.
    pub fn is_warning(&self) -> bool {
        !matches!(
            self,
            Event::AttachSucceeded { .. }
                | Event::DetachSucceeded { force: None, .. }
                | Event::WaitingForUnmount { .. }
                | Event::ClaimGranted { .. }
                | Event::ClaimReleased { force: None, .. }
        )
    }
}

impl<D: Domain> fmt::Display for Event<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::MultiAttach {
                volume, holders, ..
            } => {
                write!(f, "Multi-Attach error for volume {volume:?}: ")?;
                let users: Vec<_> = holders.iter().flat_map(|h| &h.workloads).collect();
                let nodes: Vec<_> = holders.iter().map(|h| &h.node).collect();
                if users.is_empty() {
                    write!(
                        f,
                        "Volume is already exclusively attached to one node ({nodes:?}) and can't be attached to another"
                    )
                } else {
                    write!(
                        f,
                        "Volume is already used by workload(s) {users:?} on node(s) {nodes:?}"
                    )
                }
            }
            Event::AttachSucceeded { volume, node } => {
                write!(
                    f,
                    "AttachVolume.Attach succeeded for volume {volume:?} on node {node:?}"
                )
            }
            Event::AttachFailed {
                volume,
                node,
                message,
            } => write!(
                f,
                "AttachVolume.Attach failed for volume {volume:?} on node {node:?}: {message}"
            ),
            Event::DetachSucceeded {
                volume,
                node,
                force,
            } => {
                write!(
                    f,
                    "DetachVolume.Detach succeeded for volume {volume:?} on node {node:?}"
                )?;
                if let Some(reason) = force {
                    write!(f, " (forced: {})", reason.as_str())?;
                }
                Ok(())
            }
            Event::DetachBlocked {
                volume,
                node,
                reason,
            } => write!(
                f,
                "DetachVolume.Detach blocked for volume {volume:?} on node {node:?}: {reason}"
            ),
            Event::WaitingForUnmount {
                volume,
                node,
                reason,
            } => write!(
                f,
                "DetachVolume.Detach waits for volume {volume:?} on node {node:?}: {reason}"
            ),
            Event::DetachFailed {
                volume,
                node,
                message,
            } => write!(
                f,
                "DetachVolume.Detach failed for volume {volume:?} on node {node:?}: {message}"
            ),
            Event::WorkloadWaiting {
                workload,
                node,
                missing,
                waited,
            } => write!(
                f,
                "Workload {workload:?} scheduled on node {node:?} has waited {waited:?} for {} unknown to the controller; its volumes are attached once they are known",
                Names(missing)
            ),
            Event::DetachStuck {
                volume,
                node,
                waited,
            } => write!(
                f,
                "DetachVolume.Detach of volume {volume:?} from node {node:?} has been wanted for {waited:?} and has not happened"
            ),
            Event::VolumeReleased { volume, node } => write!(
                f,
                "Volume {volume:?} was released from fenced node {node:?} by an operator; the controller forgot the attachment without a detach call"
            ),
            Event::ReleaseRefused {
                volume,
                node,
                reason,
            } => write!(
                f,
                "The release of volume {volume:?} from node {node:?} was dropped: {reason}"
            ),
            Event::ClaimGranted { volume, node } => write!(
                f,
                "Claim-only volume {volume:?} was granted to node {node:?}, with no backend call"
            ),
            Event::ClaimReleased {
                volume,
                node,
                force,
            } => {
                write!(
                    f,
                    "Claim-only volume {volume:?} was released from node {node:?}, with no backend call"
                )?;
                if let Some(reason) = force {
                    write!(f, " (forced: {})", reason.as_str())?;
                }
                Ok(())
            }
            Event::NodeFull {
                node,
                volume,
                workloads,
                reason,
            } => write!(
                f,
                "AttachVolume.Attach of volume {volume:?} for workload(s) {workloads:?} waits for room on node {node:?}: {reason}"
            ),
            Event::NodePoweredOff { node } => write!(
                f,
                "The machine of node {node:?} is powered off (twice, fresh): the node counts as fenced and its volumes are detached"
            ),
            Event::MachineCheckFailed { node, message } => write!(
                f,
                "Asking whether the machine of node {node:?} is powered off failed: {message}"
            ),
            Event::WaitExplained {
                workload,
                node,
                waited,
                explanation,
            } => {
                write!(
                    f,
                    "Workload {workload:?} on node {node:?} has waited {waited:?} for its volumes:"
                )?;
                for pair in explanation.waits() {
                    write!(f, " {pair}.")?;
                }
                Ok(())
            }
            Event::ClaimInDoubt { volume, nodes } => write!(
                f,
                "Claim-only volume {volume:?} may be mounted on any of nodes {nodes:?} and no node status lists it (a claim's status goes with a deleted node object): none is granted it until all but one stop using it"
            ),
            Event::CallTimedOut {
                call,
                node,
                volume,
                after,
            } => {
                write!(f, "The {call} call")?;
                if let Some(volume) = volume {
                    write!(f, " for volume {volume:?}")?;
                }
                if let Some(node) = node {
                    write!(f, " on node {node:?}")?;
                }
                write!(f, " got no answer within {after:?} and was given up")?;
                if call.may_take_effect() {
                    write!(f, "; it may still take effect")?;
                }
                Ok(())
            }
        }
    }
}
