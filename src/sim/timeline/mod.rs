//! What happened in a run, structured for a picture: the simulator records each change of an
//! attachment, a pod, a node or the store as a [`Record`] while it runs
//! ([`Report::timeline`](super::Report::timeline)), and [`render_svg`] draws them, one lane per
//! node, on an axis of virtual seconds.
//!
//! The records are the simulator's own observations (the backend's calls and their effects,
//! the store's writes and answers, the controller's events, the scenario's steps), never a
//! parse of the text trace.
//!
//! ```
//! use attach_detach::sim::{run, scenario::parse, timeline::render_svg};
//! let scenario = parse("node n1\nvolume v single-node\nat 0s pod p on n1 uses v\nrun 10s\n").unwrap();
//! let report = run(&scenario);
//! let svg = render_svg("example", &scenario, &report);
//! assert!(svg.starts_with("<svg") && svg.contains("n1"));
//! assert_eq!(svg, render_svg("example", &scenario, &run(&scenario)), "same run, same bytes");
//! ```

mod axis;
mod draw;
mod labels;
mod lanes;

use std::time::Duration;

pub use draw::render_svg;

/// One observation, at a virtual time since the start of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// When, since the start of the run.
    pub at: Duration,
    /// What happened.
    pub what: Happening,
}

/// Where an attachment stands, as the backend sees it and the controller was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BarState {
    /// An attach call is under way.
    Attaching,
    /// Attached, and the controller was told so.
    Attached,
    /// Attached, but the call answered with an error that may have taken effect: the
    /// controller does not know.
    Uncertain,
    /// A detach call is under way.
    Detaching,
}

/// A pod's life, as the orchestrator and the node agent see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodPhase {
    /// Scheduled to its node, waiting for its volumes.
    Scheduled,
    /// All its volumes are mounted: it runs.
    Running,
    /// Deleted gracefully: its agent unmounts, then it is gone.
    Terminating,
    /// Gone from the API.
    Gone,
}

/// A change of a node the scenario makes (or a controller restart, on no node).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeChange {
    /// The machine crashed: its agent stopped, its mounts stay.
    Crash,
    /// The agent runs again.
    Recover,
    /// Fenced (out-of-service): powered off.
    Fence,
    /// The fence is lifted.
    Unfence,
    /// The node object was deleted from the API.
    Delete,
    /// The node object was created again.
    Create,
    /// The agent's reports stopped reaching the API.
    StopReporting,
    /// The agent reports again.
    ResumeReporting,
    /// The unmount of this volume hangs from now on.
    HangUnmount(String),
    /// The hung unmount of this volume is released.
    ReleaseUnmount(String),
    /// The backend can no longer reach the node.
    Partition,
    /// The partition healed.
    Heal,
    /// The machine was powered off at the provider (no taint): nothing mounted, no agent.
    PowerOff,
    /// The machine was powered on again: a clean boot.
    PowerOn,
}

/// What a [`Record`] says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Happening {
    /// The attachment of `volume` to `node` entered `state`, or ended (`None`: detached, or an
    /// attach that failed without effect).
    Attachment {
        /// The volume.
        volume: String,
        /// The node.
        node: String,
        /// Its new state, `None` when there is no attachment any more.
        state: Option<BarState>,
    },
    /// A pod on `node` entered `phase`.
    Pod {
        /// The pod.
        pod: String,
        /// Its node.
        node: String,
        /// Its new phase.
        phase: PodPhase,
    },
    /// The controller sent a status write for `node` listing `volumes`.
    StatusWrite {
        /// The node.
        node: String,
        /// The list written.
        volumes: Vec<String>,
    },
    /// The store answered a status write for `node`: acknowledged (`error: None`) or not.
    StatusAck {
        /// The node.
        node: String,
        /// The store's error, if the write failed.
        error: Option<String>,
    },
    /// The controller emitted an event.
    Event {
        /// The node it is about, if any.
        node: Option<String>,
        /// Its reason (`MultiAttachVolume`, `WaitingForUnmount`, ...).
        reason: String,
        /// Its message.
        message: String,
        /// Whether it is a warning.
        warning: bool,
    },
    /// The scenario changed a node.
    Node {
        /// The node.
        node: String,
        /// The change.
        change: NodeChange,
    },
    /// A controller (generation 1, 2, ...) started: the first at 0 s, the others restarts.
    ControllerStarted {
        /// Its generation.
        generation: u64,
    },
}

impl Happening {
    /// The node this happening belongs to, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Happening::Attachment { node, .. }
            | Happening::Pod { node, .. }
            | Happening::StatusWrite { node, .. }
            | Happening::StatusAck { node, .. }
            | Happening::Node { node, .. } => Some(node),
            Happening::Event { node, .. } => node.as_deref(),
            Happening::ControllerStarted { .. } => None,
        }
    }
}
