//! attach-detach: the volume attach/detach state machine of an orchestrator, with the known
//! Kubernetes bugs corrected, for any Rust controller to embed.
//!
//! Block volumes move between nodes as workloads do. They must be detached from the old node
//! before they are attached to the new one, never written by two nodes at once, and never left
//! out of the list a node waits for before mounting. This crate holds that logic as a pure,
//! synchronous, deterministic core ([`Reconciler`]) that turns changes into planned
//! [`Operation`]s, plus a thin tokio driver that runs them through two traits,
//! [`AttachBackend`] (cloud, CSI, SAN) and [`NodeStatusStore`] (API server, etcd, ...).
//!
//! # Driving the core by hand
//!
//! The core never sleeps, spawns or reads a clock: time is an argument. You feed it what the
//! orchestrator knows, ask it what to do, do it, and tell it how that went, much like raft-rs's
//! `RawNode`.
//!
//! ```
//! use std::time::Duration;
//! use attach_detach::{
//!     AttachInfo, Config, Ids, Input, NodeFacts, Operation, Reconciler, VolumeSpec,
//! };
//!
//! // Kubernetes-style names; the payload would be a CSI handle, here nothing.
//! type K8s = Ids<String, String, String, ()>;
//! let mut core: Reconciler<K8s> = Reconciler::new(Config::default());
//! let s = |x: &str| x.to_string();
//!
//! // 1. What the orchestrator knows, in the order its watchers see it (any order will do): a
//! //    pod that needs a single-node volume on a node, the node (its agent has nothing in use
//! //    yet), and the volume. The pod waits until both are known.
//! core.handle(Input::WorkloadScheduled {
//!     workload: s("pod-1"),
//!     node: s("node-a"),
//!     volumes: vec![s("pvc-1")],
//! }).unwrap();
//! core.handle(Input::NodeUpdated {
//!     node: s("node-a"),
//!     facts: NodeFacts { in_use: Some(vec![]), ..NodeFacts::default() },
//! }).unwrap();
//! core.handle(Input::SetVolume { volume: s("pvc-1"), spec: VolumeSpec::single_node(()) })
//!     .unwrap();
//! assert_eq!(core.desired().pending_len(), 0, "placed");
//!
//! // 2. Ask for work when it is due. The first pass plans the attach (and writes the new
//! //    node's empty status).
//! let mut now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let attach = ops.iter().find(|op| matches!(op, Operation::Attach { .. })).unwrap();
//!
//! // 3. Run it (here: pretend the cloud said yes) and hand the result back. The status
//! //    write is acknowledged too.
//! core.attach_finished(now, attach.id(), Ok(AttachInfo { device: Some(s("/dev/sdb")) })).unwrap();
//! for op in &ops {
//!     if let Operation::WriteStatus { id, .. } = op {
//!         core.status_finished(now, *id, Ok(())).unwrap();
//!     }
//! }
//!
//! // 4. The next pass makes the node report the volume, so its agent can mount it.
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let Operation::WriteStatus { id, node, attached } = &ops[0] else { panic!() };
//! assert_eq!((node.as_str(), attached[0].volume.as_str()), ("node-a", "pvc-1"));
//! core.status_finished(now, *id, Ok(())).unwrap();
//!
//! // 5. The pod goes. The volume leaves the node's report first; only when the store has
//! //    acknowledged that is the detach planned (so the agent never mounts a leaving volume).
//! core.handle(Input::WorkloadRemoved { workload: s("pod-1") }).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! assert!(matches!(&ops[..], [Operation::WriteStatus { attached, .. }] if attached.is_empty()));
//! core.status_finished(now, ops[0].id(), Ok(())).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! assert!(matches!(&ops[..], [Operation::Detach { force: None, .. }]));
//! core.detach_finished(now, ops[0].id(), Ok(())).unwrap();
//! assert!(core.actual().is_empty());
//!
//! // 6. Nothing left to do: no deadline, a driver sleeps until the next input.
//! assert_eq!(core.poll(now + Duration::from_secs(1)), vec![]);
//! ```
//!
//! Everything the orchestrator says comes in as an [`Input`], the same values for
//! [`Reconciler::handle`], a running controller's [`ControllerHandle::send`] and the start-up
//! [`World`], shaped after what a kube-runtime watcher emits: upserts and deletions of volumes,
//! nodes and workloads, in any order (a workload naming a node or a volume not known yet waits
//! for it, visibly and within [`Config::max_pending_workloads`], and is named in an
//! [`Event::WorkloadWaiting`] if it waits too long; a replayed deletion is a no-op), and the
//! start and end of a relist of one kind ([`Input::RelistStarted`], [`Input::RelistDone`]), from
//! which the core derives the deletions the watcher missed.
//!
//! Errors from the backend say whether the call certainly did nothing, may have taken effect
//! (the attachment becomes [`AttachState::Uncertain`]), or found the volume attached elsewhere.
//! Failed operations back off per kind (500 ms doubling to 2 min 2 s). Human-readable
//! [`Event`]s (Multi-Attach, attach and detach results, long waits) come from
//! [`Reconciler::take_events`];
//! the tokio driver adds [`Event::CallTimedOut`] for each call it gives up at its deadline
//! ([`CallTimeouts`]).
//!
//! # What is corrected
//!
//! Each correction has a switch in [`UpstreamBugs`] that puts upstream's behaviour back, so its
//! regression test can be seen to fail against the bug:
//!
//! - **C1** (upstream 49053, 72181, 88565; fixed by 104526): a failed detach keeps the volume in
//!   the node's report, and a volume the node needs again is reported again at once; backoff
//!   never causes status churn.
//! - **C2**: an Uncertain attachment holds a single-node volume against other nodes; the
//!   Multi-Attach event fires once per episode under its own reason (96142).
//! - **C3** (seed 004): the unmount wait is skipped only for a fenced (`out-of-service`) node;
//!   force detach on timeout is opt-in and never applies to a healthy node (110721).
//! - **C4** (141385): a node not yet heard from counts as mounting everything, and its first
//!   in-use report is acted on at once.
//! - **C5**: a detach starts only after the store acknowledged the volume's removal from the
//!   node's report.
//! - **C6** (122413, open upstream): status writes are compared with what the store is known to
//!   hold (our acknowledged write or a fresh read), never with a cache of unknown age.
//! - **C7** (44858, 92145, 130516, 96617): on start the driver rebuilds the actual state from the
//!   store and the backend (what only the backend knows becomes Uncertain) and plans nothing
//!   before both are loaded, so a restart at any point leaks no attachment.
//!
//! And right before every detach, forced or not, the driver reads the node fresh
//! ([`StatusWriter::verify_safe_to_detach`]) and goes ahead only if the node is fenced or its
//! agent reports the volume not in use: the core's own view of the node may be older than a
//! mount that began before the volume left the node's status, or than a lifted fence. A driver
//! of your own must do the same for every [`Operation::Detach`].
#![deny(missing_docs)]

mod actual;
mod backend;
mod config;
mod controller;
mod desired;
mod domain;
mod event;
mod gate;
mod input;
mod memory;
mod operation;
mod reconciler;
mod status;
mod store;
mod volume;

#[cfg(feature = "sim")]
pub mod sim;

/// The README's examples, compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use actual::{ActualState, AttachState, Attachment, NodeFacts};
pub use backend::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
pub use config::{BackoffConfig, CallKind, CallTimeouts, Config, ConfigError, UpstreamBugs};
pub use controller::{
    BuildError, Controller, ControllerError, ControllerHandle, EventRecorder, MemoryRecorder,
    Metrics, MetricsSnapshot, OperationSummary, Outcome, OutcomeCounts, ShutdownReport,
    StatusWriter, TimeoutCounts, World, WriteOutcome,
};
pub use desired::{DesiredError, DesiredState, Missing, PendingWorkload};
pub use domain::{Domain, Id, Ids};
pub use event::{Event, Holder};
pub use gate::{OpKind, OperationGate};
pub use input::{Input, Kind, Rejection};
pub use memory::{BackendOp, CachedView, MemoryBackend, MemoryStore};
pub use operation::{ForceReason, OpId, Operation};
pub use reconciler::{Reconciler, ReconcilerError};
pub use status::StatusBook;
pub use store::{NodeStatus, NodeStatusStore, ReportedVolume, Revision, StoreError};
pub use volume::{Access, VolumeSpec};
