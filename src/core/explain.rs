//! Why a volume or a workload waits: the core's answer to "why is my pod stuck?", in the terms
//! of the wait table (`docs/design.md`, "Every wait has an end"), with what will end the wait.
//!
//! The answers are read off the same state and rules that plan the next step
//! ([`Reconciler::explain_volume`](crate::core::Reconciler::explain_volume)), so they say what
//! the core will do, not what a log once said.

use std::fmt;
use std::time::Duration;

use crate::core::calls::volume::DriverId;
use crate::core::operation::OpKind;
use crate::core::state::actual::AttachState;
use crate::core::state::desired::Missing;
use crate::domain::Domain;

/// The last failure of an operation on a key, while the core remembers its backoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastFailure {
    /// What failed.
    pub kind: OpKind,
    /// When it failed.
    pub at: Duration,
    /// Failures in a row.
    pub failures: u32,
    /// When it may be tried again.
    pub retry_at: Duration,
    /// The error, as its `Display` put it.
    pub error: String,
}

/// What one (volume, node) pair waits for, in the wait table's terms.
///
/// Every variant names what ends it ([`Wait::ends`]). Not `non_exhaustive`: a caller matches
/// it without a wildcard, so a wait added later is a compile error where it must be handled
/// (and a breaking change, in the changelog).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait<D: Domain> {
    /// Nothing: attached where wanted, or gone where not.
    Settled,
    /// A new core's recovery listings are not in yet; nothing is planned before they are.
    Recovery,
    /// A call runs: `kind` on `node`, planned at `since`.
    Call {
        /// The call.
        kind: OpKind,
        /// The node it concerns (for an attach or detach of this volume, possibly another
        /// node than the pair's: a single-node volume runs one at a time).
        node: D::Node,
        /// When it was planned.
        since: Duration,
    },
    /// A failed call's backoff: `kind` may be tried again at `until`.
    Backoff {
        /// The call that failed.
        kind: OpKind,
        /// When it may be tried again.
        until: Duration,
    },
    /// Queued for a slot (or a token) of `Config::backend_load` since `since`.
    BackendLoad {
        /// The call that waits: an attach, or a detach's fresh read.
        kind: OpKind,
        /// When it joined the queue.
        since: Duration,
    },
    /// Room on a node at its attach limit (or at `driver`'s limit there).
    NodeFull {
        /// The driver whose limit is reached; `None` for the node's own limit.
        driver: Option<DriverId>,
        /// Volumes the node holds or is being given that count against it.
        held: u32,
        /// The limit.
        limit: u32,
    },
    /// The backend said the node can hold no more volumes; attaches to it back off until
    /// `until`.
    BackendSaidFull {
        /// When attaches to the node may be tried again.
        until: Duration,
    },
    /// A single-node volume attached (or maybe attached) to other nodes: Multi-Attach.
    HeldElsewhere {
        /// The nodes that hold it.
        holders: Vec<D::Node>,
    },
    /// The store to acknowledge the node's list without the volume, so that the node's agent
    /// stops seeing it before the detach (C5).
    StoreAck,
    /// Attached, and the node's status write that lists it for the node's agent (which mounts
    /// only what the store lists) has not landed: planned, running, or retried after a failure.
    StatusWrite,
    /// The node's agent to unmount the volume. Where a forced detach is allowed (an unhealthy
    /// node, `force_detach_on_timeout`), `forced_at` is when the wait ends anyway.
    Unmount {
        /// When the unmount wait times out into a forced detach, if it may.
        forced_at: Option<Duration>,
    },
    /// A fresh read of the node found the volume in use where the core's view did not: the
    /// node's next report, or the re-check timer.
    HeldBackByRead {
        /// When the unmount wait times out into a forced detach, if it may.
        forced_at: Option<Duration>,
    },
    /// An unhealthy node still reports the volume in use and no forced detach is allowed: a
    /// fence (`out-of-service` taint, or machine fencing's powered-off answers), the node's
    /// health or its report.
    Fence {
        /// Machine fencing is on: the core checks the machine's power meanwhile.
        checking_machine: bool,
    },
    /// The node object was deleted while it holds the volume: its return or a fence.
    NodeDeleted,
    /// A fresh read of the node, which decides the irreversible detach.
    FreshRead,
    /// An operator's release waits for a verify of the node planned after it.
    ReleaseVerify,
    /// Decided: the core's next pass plans the step.
    NextPass,
    /// The core cannot say. No reachable state explains so: the model check asserts it.
    Unknown,
}

/// A [`Wait`]'s kind, without its data: for tables, metrics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitKind {
    /// [`Wait::Settled`].
    Settled,
    /// [`Wait::Recovery`].
    Recovery,
    /// [`Wait::Call`].
    Call,
    /// [`Wait::Backoff`].
    Backoff,
    /// [`Wait::BackendLoad`].
    BackendLoad,
    /// [`Wait::NodeFull`].
    NodeFull,
    /// [`Wait::BackendSaidFull`].
    BackendSaidFull,
    /// [`Wait::HeldElsewhere`].
    HeldElsewhere,
    /// [`Wait::StoreAck`].
    StoreAck,
    /// [`Wait::StatusWrite`].
    StatusWrite,
    /// [`Wait::Unmount`].
    Unmount,
    /// [`Wait::HeldBackByRead`].
    HeldBackByRead,
    /// [`Wait::Fence`].
    Fence,
    /// [`Wait::NodeDeleted`].
    NodeDeleted,
    /// [`Wait::FreshRead`].
    FreshRead,
    /// [`Wait::ReleaseVerify`].
    ReleaseVerify,
    /// [`Wait::NextPass`].
    NextPass,
    /// [`Wait::Unknown`].
    Unknown,
}

impl WaitKind {
    /// Every kind.
    pub const ALL: [WaitKind; 18] = [
        WaitKind::Settled,
        WaitKind::Recovery,
        WaitKind::Call,
        WaitKind::Backoff,
        WaitKind::BackendLoad,
        WaitKind::NodeFull,
        WaitKind::BackendSaidFull,
        WaitKind::HeldElsewhere,
        WaitKind::StoreAck,
        WaitKind::StatusWrite,
        WaitKind::Unmount,
        WaitKind::HeldBackByRead,
        WaitKind::Fence,
        WaitKind::NodeDeleted,
        WaitKind::FreshRead,
        WaitKind::ReleaseVerify,
        WaitKind::NextPass,
        WaitKind::Unknown,
    ];

    /// The variant's name, as the docs' wait table writes it (`Wait::StoreAck`).
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Settled => "Settled",
            WaitKind::Recovery => "Recovery",
            WaitKind::Call => "Call",
            WaitKind::Backoff => "Backoff",
            WaitKind::BackendLoad => "BackendLoad",
            WaitKind::NodeFull => "NodeFull",
            WaitKind::BackendSaidFull => "BackendSaidFull",
            WaitKind::HeldElsewhere => "HeldElsewhere",
            WaitKind::StoreAck => "StoreAck",
            WaitKind::StatusWrite => "StatusWrite",
            WaitKind::Unmount => "Unmount",
            WaitKind::HeldBackByRead => "HeldBackByRead",
            WaitKind::Fence => "Fence",
            WaitKind::NodeDeleted => "NodeDeleted",
            WaitKind::FreshRead => "FreshRead",
            WaitKind::ReleaseVerify => "ReleaseVerify",
            WaitKind::NextPass => "NextPass",
            WaitKind::Unknown => "Unknown",
        }
    }
}

impl<D: Domain> Wait<D> {
    /// The variant, without its data.
    pub fn kind(&self) -> WaitKind {
        match self {
            Wait::Settled => WaitKind::Settled,
            Wait::Recovery => WaitKind::Recovery,
            Wait::Call { .. } => WaitKind::Call,
            Wait::Backoff { .. } => WaitKind::Backoff,
            Wait::BackendLoad { .. } => WaitKind::BackendLoad,
            Wait::NodeFull { .. } => WaitKind::NodeFull,
            Wait::BackendSaidFull { .. } => WaitKind::BackendSaidFull,
            Wait::HeldElsewhere { .. } => WaitKind::HeldElsewhere,
            Wait::StoreAck => WaitKind::StoreAck,
            Wait::StatusWrite => WaitKind::StatusWrite,
            Wait::Unmount { .. } => WaitKind::Unmount,
            Wait::HeldBackByRead { .. } => WaitKind::HeldBackByRead,
            Wait::Fence { .. } => WaitKind::Fence,
            Wait::NodeDeleted => WaitKind::NodeDeleted,
            Wait::FreshRead => WaitKind::FreshRead,
            Wait::ReleaseVerify => WaitKind::ReleaseVerify,
            Wait::NextPass => WaitKind::NextPass,
            Wait::Unknown => WaitKind::Unknown,
        }
    }

    /// What ends the wait, in a person's words.
    pub fn ends(&self) -> &'static str {
        match self {
            Wait::Settled => "nothing to wait for",
            Wait::Recovery => "the store's and the backend's listings answering",
            Wait::Call { .. } => "the call's answer (it has a deadline)",
            Wait::Backoff { .. } => "the backoff's timer",
            Wait::BackendLoad { .. } => {
                "a call of its class finishing, or the rate limit's next token"
            }
            Wait::NodeFull { .. } => {
                "a volume leaving the node, or its limit rising, or the volume no longer wanted there"
            }
            Wait::BackendSaidFull { .. } => {
                "the node's backoff timer, or a volume leaving or joining the node"
            }
            Wait::HeldElsewhere { .. } => "the detach from the holders",
            Wait::StoreAck => "the store acknowledging the node's list without it",
            Wait::StatusWrite => {
                "the node's status write landing (a failed one is retried after its backoff)"
            }
            Wait::Unmount { .. } => {
                "the node reporting it unmounted, a fence, or (where allowed) the unmount timeout"
            }
            Wait::HeldBackByRead { .. } => {
                "the node's next report or the re-check timer, or (where allowed) the unmount timeout"
            }
            Wait::Fence { .. } => {
                "a fence (out-of-service taint or a powered-off machine), the node healthy again, or its report"
            }
            Wait::NodeDeleted => "the node's return, or a fence",
            Wait::FreshRead => "the read's answer (it has a deadline)",
            Wait::ReleaseVerify => "the answer of a verify of the node",
            Wait::NextPass => "the core's next pass",
            Wait::Unknown => "unknown",
        }
    }
}

/// Seconds, to a tenth, between `since` and `at`.
struct Ago(Duration, Duration);

impl fmt::Display for Ago {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}s", self.1.saturating_sub(self.0).as_secs_f64())
    }
}

/// A time ahead of `at`, in seconds from it.
struct In(Duration, Duration);

impl fmt::Display for In {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}s", self.0.saturating_sub(self.1).as_secs_f64())
    }
}

/// One (volume, node) pair: where it stands and what it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairExplanation<D: Domain> {
    /// The volume.
    pub volume: D::Volume,
    /// The node.
    pub node: D::Node,
    /// A workload wants the volume on the node.
    pub wanted: bool,
    /// The attachment's state there (`Attached`, or `Uncertain`: maybe attached), `None`
    /// when nothing is attached.
    pub attached: Option<AttachState>,
    /// What it waits for.
    pub wait: Wait<D>,
    /// Since when, where the core knows: when the detach was first wanted, the queue
    /// joined, the call planned.
    pub since: Option<Duration>,
    /// The last failure of the call it needs (an attach where wanted, else a detach), while
    /// the core remembers its backoff.
    pub last_failure: Option<LastFailure>,
    /// When the core was asked: the times above are its own, and read against this one.
    pub at: Duration,
}

impl<D: Domain> PairExplanation<D> {
    fn state(&self) -> &'static str {
        match (self.wanted, self.attached) {
            (true, Some(AttachState::Attached)) => "attached",
            (true, Some(AttachState::Uncertain)) => "maybe attached, to be attached again",
            (true, _) => "to be attached",
            (false, Some(AttachState::Uncertain)) => "maybe attached, to be detached",
            (false, _) => "to be detached",
        }
    }
}

impl<D: Domain> fmt::Display for PairExplanation<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at;
        write!(f, "{:?} on {:?}: {}", self.volume, self.node, self.state())?;
        match &self.wait {
            Wait::Settled => return write!(f, "; nothing to wait for"),
            Wait::Recovery => write!(f, "; waiting for the core's recovery listings")?,
            Wait::Call { kind, node, since } => write!(
                f,
                "; waiting for a {kind:?} call on {node:?} (running for {})",
                Ago(*since, at)
            )?,
            Wait::Backoff { kind, until } => write!(
                f,
                "; waiting to retry a failed {kind:?} (in {})",
                In(*until, at)
            )?,
            Wait::BackendLoad { kind, .. } => {
                write!(f, "; {kind:?} queued for the backend's load limit")?
            }
            Wait::NodeFull {
                driver,
                held,
                limit,
            } => match driver {
                Some(d) => write!(
                    f,
                    "; waiting for room: the node holds {held} of driver {}'s limit of {limit}",
                    d.get()
                )?,
                None => write!(
                    f,
                    "; waiting for room: the node holds {held} of its limit of {limit}"
                )?,
            },
            Wait::BackendSaidFull { until } => write!(
                f,
                "; waiting for room: the backend said the node is full (retry in {})",
                In(*until, at)
            )?,
            Wait::HeldElsewhere { holders } => write!(
                f,
                "; waiting for it to be detached from {holders:?} (Multi-Attach)"
            )?,
            Wait::StoreAck => write!(
                f,
                "; waiting for the store to stop listing it for {:?}",
                self.node
            )?,
            Wait::StatusWrite => write!(
                f,
                "; waiting for {:?}'s status to list it, so that its agent mounts it",
                self.node
            )?,
            Wait::Unmount { forced_at } | Wait::HeldBackByRead { forced_at } => {
                if matches!(self.wait, Wait::HeldBackByRead { .. }) {
                    write!(
                        f,
                        "; a fresh read found {:?}'s agent still using it; waiting for it to unmount it",
                        self.node
                    )?;
                } else {
                    write!(f, "; waiting for {:?}'s agent to unmount it", self.node)?;
                }
                if let Some(t) = forced_at {
                    write!(f, " (a forced detach in {})", In(*t, at))?;
                }
            }
            Wait::Fence { checking_machine } => {
                write!(
                    f,
                    "; waiting for a fence: {:?} is unhealthy and still uses it",
                    self.node
                )?;
                if *checking_machine {
                    write!(f, " (checking its machine's power)")?;
                }
            }
            Wait::NodeDeleted => write!(
                f,
                "; waiting for {:?} to return or be fenced: its node object was deleted",
                self.node
            )?,
            Wait::FreshRead => write!(f, "; waiting for a fresh read of {:?}", self.node)?,
            Wait::ReleaseVerify => write!(
                f,
                "; an operator's release waits for a verify of {:?}",
                self.node
            )?,
            Wait::NextPass => write!(f, "; the next pass plans its step")?,
            Wait::Unknown => write!(f, "; the core cannot say why")?,
        }
        if let Some(since) = self.since {
            write!(f, " (since {} ago)", Ago(since, at))?;
        }
        write!(f, "; ends with {}", self.wait.ends())?;
        if let Some(failure) = &self.last_failure {
            write!(
                f,
                "; last failure {} ago ({:?}, {} in a row): {}",
                Ago(failure.at, at),
                failure.kind,
                failure.failures,
                failure.error
            )?;
        }
        Ok(())
    }
}

/// A volume: every node where it is wanted or attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeExplanation<D: Domain> {
    /// The volume.
    pub volume: D::Volume,
    /// The core knows the volume: registered, wanted or attached.
    pub known: bool,
    /// The core's recovery listings are not in yet: it may know nothing of the volume so far.
    pub recovering: bool,
    /// One per node where it is wanted or attached, by node.
    pub pairs: Vec<PairExplanation<D>>,
}

impl<D: Domain> fmt::Display for VolumeExplanation<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.recovering && self.pairs.is_empty() {
            return write!(
                f,
                "{:?}: waiting for the core's recovery listings; ends with {}",
                self.volume,
                Wait::<D>::Recovery.ends()
            );
        }
        if !self.known {
            return write!(f, "{:?}: the core does not know this volume", self.volume);
        }
        if self.pairs.is_empty() {
            return write!(f, "{:?}: wanted nowhere, attached nowhere", self.volume);
        }
        for (i, pair) in self.pairs.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{pair}")?;
        }
        Ok(())
    }
}

/// What ends a pending workload's wait.
pub const PENDING_ENDS: &str =
    "the orchestrator announcing what is missing, or the workload's removal";

/// Where a workload stands for the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement<D: Domain> {
    /// Placed on `node`: its volumes are wanted there.
    Placed {
        /// The node.
        node: D::Node,
    },
    /// Scheduled on `node`, but it names something the core was not told of.
    Pending {
        /// The node.
        node: D::Node,
        /// What is missing.
        missing: Vec<Missing<D>>,
        /// When the core first saw it wait.
        since: Option<Duration>,
    },
    /// The core does not know the workload.
    Unknown,
}

/// A workload: its placement and, for each of its volumes, every node where that volume is
/// wanted or attached (a holder's detach is what a Multi-Attach waits for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadExplanation<D: Domain> {
    /// The workload.
    pub workload: D::Workload,
    /// Where it stands.
    pub placement: Placement<D>,
    /// Its volumes, sorted.
    pub volumes: Vec<VolumeExplanation<D>>,
    /// When the core was asked.
    pub at: Duration,
}

impl<D: Domain> WorkloadExplanation<D> {
    /// Whether the core's recovery listings are not in yet (what it says may still change).
    pub fn recovering(&self) -> bool {
        self.volumes.iter().any(|v| v.recovering)
    }

    /// The node it is placed or scheduled on.
    fn node(&self) -> Option<&D::Node> {
        match &self.placement {
            Placement::Placed { node } | Placement::Pending { node, .. } => Some(node),
            Placement::Unknown => None,
        }
    }

    /// Whether nothing keeps the workload waiting: placed, and each of its volumes settled on
    /// its node.
    pub fn is_settled(&self) -> bool {
        let Placement::Placed { node } = &self.placement else {
            return false;
        };
        self.volumes.iter().all(|v| {
            v.pairs
                .iter()
                .any(|p| p.node == *node && p.wait == Wait::Settled)
        })
    }

    /// The pairs that hold the workload back: its volumes' on its node that wait, and, where
    /// one waits for holders elsewhere (Multi-Attach), the holders' pairs that wait. Other
    /// nodes' pairs of a shared volume do not hold it back.
    pub fn waits(&self) -> impl Iterator<Item = &PairExplanation<D>> {
        let node = self.node();
        self.volumes.iter().flat_map(move |v| {
            let here = v.pairs.iter().find(|p| Some(&p.node) == node);
            let holders: &[D::Node] = match here.map(|p| &p.wait) {
                Some(Wait::HeldElsewhere { holders }) => holders,
                _ => &[],
            };
            v.pairs.iter().filter(move |p| {
                p.wait != Wait::Settled && (Some(&p.node) == node || holders.contains(&p.node))
            })
        })
    }
}

impl<D: Domain> fmt::Display for WorkloadExplanation<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.placement {
            Placement::Unknown => {
                return write!(
                    f,
                    "{:?}: the core does not know this workload",
                    self.workload
                );
            }
            Placement::Pending {
                node,
                missing,
                since,
            } => {
                write!(f, "{:?} on {node:?}: waiting for ", self.workload)?;
                for (i, m) in missing.iter().enumerate() {
                    write!(f, "{}{m}", if i == 0 { "" } else { ", " })?;
                }
                if let Some(since) = since {
                    write!(f, " (since {} ago)", Ago(*since, self.at))?;
                }
                write!(f, "; ends with {PENDING_ENDS}")?;
            }
            Placement::Placed { node } => {
                write!(f, "{:?} on {node:?}: ", self.workload)?;
                if self.is_settled() {
                    write!(f, "every volume attached")?;
                } else if self.recovering() {
                    write!(
                        f,
                        "waiting for the core's recovery listings; ends with {}",
                        Wait::<D>::Recovery.ends()
                    )?;
                } else {
                    write!(f, "waiting for its volumes")?;
                }
            }
        }
        for pair in self.waits() {
            write!(f, "\n  {pair}")?;
        }
        Ok(())
    }
}
