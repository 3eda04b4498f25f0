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
//! # Where things are
//!
//! - [`core`]: the state machine and its vocabulary: the [`Reconciler`], the [`Input`]s it
//!   takes, the [`Operation`]s it plans, the [`Event`]s it raises, read-only views of its state.
//! - [`config`]: [`Config`] and its parts, for the core and the driver alike.
//! - [`traits`]: what you implement, [`AttachBackend`] and [`NodeStatusStore`] (feature
//!   `driver`), and the types they take and return.
//! - [`controller`] (feature `driver`): the tokio driver, [`Controller`], with its handle, metrics, stream of
//!   finished operations and event recorders; with the feature `prometheus`, a collector of
//!   its metrics for a `prometheus-client` registry.
//! - [`memory`] (feature `driver`): in-memory backend and store with fault injection, for tests
//!   and examples.
//! - `sim` (feature `sim`): the deterministic incident simulator.
//! - `conformance` (feature `conformance`): test suites for your store and backend.
//! - `testkit` (feature `testkit`): the core on virtual time, driven by hand or by a rule, for
//!   tests that drive it themselves.
//!
//! The feature `driver`, on by default, brings tokio and async-trait with the traits, the
//! driver and the in-memory doubles (`sim`, `conformance` and `prometheus` turn it on). With
//! `default-features = false` the crate is the pure core: `core`, `config` and the values of
//! `traits`, for a driver of your own.
//! - At the root, what every module is generic over: the [`Domain`] of identifiers (node,
//!   volume, workload, per-volume payload), [`Id`], and [`Ids`] to name one; and [`Name`],
//!   interned names to use as ids (a clone is a count, a hash is a pointer's).
//!
//! # Driving the core by hand
//!
//! The core never sleeps, spawns or reads a clock: time is an argument. It plans every step
//! of the protocol as an [`Operation`] (the recovery listings, the fresh read before a detach,
//! the compare-and-set status writes) and decides everything from the results you hand back,
//! much like raft-rs's `RawNode`. A driver of your own only makes the calls; every correction
//! below holds without the crate's tokio driver. It learns five verbs:
//! [`handle`](core::Reconciler::handle) an [`Input`](core::Input),
//! [`poll`](core::Reconciler::poll) when [`next_deadline`](core::Reconciler::next_deadline) is
//! due, [`finish`](core::Reconciler::finish) each operation with its
//! [`Outcome`](core::Outcome), and [`take_events`](core::Reconciler::take_events).
//!
//! ```
//! use std::time::Duration;
//! use attach_detach::Ids;
//! use attach_detach::config::Config;
//! use attach_detach::core::{Event, Input, NodeFacts, Operation, Outcome, Reconciler, VolumeSpec};
//! use attach_detach::traits::{AttachInfo, NodeStatus, ReportedVolume, Revision, StoreError};
//!
//! // Kubernetes-style names; the payload would be a CSI handle, here nothing.
//! type K8s = Ids<String, String, String, ()>;
//! let s = |x: &str| x.to_string();
//! let status = |attached: Vec<ReportedVolume<K8s>>, in_use: Vec<String>, revision| NodeStatus {
//!     attached, in_use: Some(in_use), fenced: Some(false), healthy: Some(true),
//!     revision: Revision::from(revision),
//! };
//! let mut core: Reconciler<K8s> = Reconciler::new(Config::default());
//! let mut now = Duration::ZERO;
//!
//! // 1. Recovery (C7): a new core plans the store's and the backend's listings, and nothing
//! //    else until both are handed back. The store knows node-a, listing nothing, at rev 1.
//! for op in core.poll(now) {
//!     match op {
//!         Operation::ListStatuses { id } => core
//!             .finish(now, id, Outcome::ListStatuses(Ok(vec![(s("node-a"), status(vec![], vec![], 1))])))
//!             .unwrap(),
//!         Operation::ListAttachments { id } => core.finish(now, id, Outcome::List(Ok(vec![]))).unwrap(),
//!         other => unreachable!("{other:?} while recovering"),
//!     }
//! }
//! assert!(!core.is_recovering());
//!
//! // 2. What the orchestrator's watches show, in the order they see it (any order will do):
//! //    a pod that needs a single-node volume on a node, the node (its agent mounts nothing
//! //    yet), and the volume. The pod waits until both are known; then the attach is planned.
//! core.handle(Input::WorkloadScheduled {
//!     workload: s("pod-1"),
//!     node: s("node-a"),
//!     volumes: vec![s("pvc-1")],
//! }).unwrap();
//! core.handle(Input::NodeUpdated {
//!     node: s("node-a"),
//!     facts: NodeFacts { in_use: Some(vec![]), ..NodeFacts::default() },
//! }).unwrap();
//! assert_eq!(core.desired().pending_len(), 1, "waits for its volume");
//! core.handle(Input::SetVolume { volume: s("pvc-1"), spec: VolumeSpec::single_node(()) })
//!     .unwrap();
//! assert_eq!(core.desired().pending_len(), 0, "placed");
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::Attach { id, .. }] = &ops[..] else { panic!("{ops:?}") };
//! core.finish(now, *id, Outcome::Attach(Ok(AttachInfo { device: Some(s("/dev/sdb")) }))).unwrap();
//!
//! // 3. The node is told, with a compare-and-set on the revision the store listed (C6: the
//! //    core compares with what the store is known to hold, never with a cache).
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::WriteStatus { id, attached, expected, .. }] = &ops[..] else { panic!() };
//! assert_eq!((attached.volumes()[0].as_str(), expected), ("pvc-1", &Revision::from(1)));
//! core.finish(now, *id, Outcome::WriteStatus(Ok(Revision::from(2).into()))).unwrap();
//!
//! // 4. The pod goes. The volume leaves the node's report first (C5); then, before the
//! //    detach, the core reads the node fresh: its watch may lag behind a new mount.
//! core.handle(Input::WorkloadRemoved { workload: s("pod-1") }).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::WriteStatus { id, attached, .. }] = &ops[..] else { panic!() };
//! assert!(attached.is_empty());
//! core.finish(now, *id, Outcome::WriteStatus(Ok(Revision::from(3).into()))).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::ReadStatus { id, .. }] = &ops[..] else { panic!("{ops:?}") };
//!
//! // 5. A pod that returns within the cache lag: the watch still says nothing is in use, but
//! //    the agent already reports pvc-1 in use again. The fresh read holds the detach back:
//! //    no call, no failure, one event saying why, and a re-check later.
//! core.finish(now, *id, Outcome::ReadStatus(Ok(status(vec![], vec![s("pvc-1")], 3)))).unwrap();
//! assert!(matches!(&core.take_events()[..], [.., Event::WaitingForUnmount { .. }]));
//! let recheck = now + core.config().unmount_recheck;
//! assert_eq!(core.next_deadline(), Some(recheck), "nothing before the re-check");
//!
//! // 6. The pod is back on the node: the volume is reported again at once (C1), against the
//! //    revision of the core's own acknowledged write, whatever a stale cache shows (seed
//! //    002). Another writer got there first: the conflict makes the core read before
//! //    writing again.
//! core.handle(Input::WorkloadScheduled {
//!     workload: s("pod-1"),
//!     node: s("node-a"),
//!     volumes: vec![s("pvc-1")],
//! }).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::WriteStatus { id, expected, .. }] = &ops[..] else { panic!("{ops:?}") };
//! assert_eq!(expected, &Revision::from(3));
//! core.finish(now, *id, Outcome::WriteStatus(Err(StoreError::conflict(Revision::from(4))))).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::ReadStatus { id, .. }] = &ops[..] else { panic!("{ops:?}") };
//! core.finish(now, *id, Outcome::ReadStatus(Ok(status(vec![], vec![s("pvc-1")], 4)))).unwrap();
//! now = core.next_deadline().unwrap();
//! let ops = core.poll(now);
//! let [Operation::WriteStatus { id, attached, expected, .. }] = &ops[..] else { panic!() };
//! assert_eq!((attached.volumes()[0].as_str(), expected), ("pvc-1", &Revision::from(4)));
//! core.finish(now, *id, Outcome::WriteStatus(Ok(Revision::from(5).into()))).unwrap();
//!
//! // 7. Settled: nothing more is planned until the periodic verify, a minute on.
//! while let Some(due) = core.next_deadline().filter(|d| *d < now + Duration::from_secs(59)) {
//!     assert_eq!(core.poll(due), vec![]);
//! }
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
//! Each correction has a switch in `UpstreamBugs` (with the `upstream-bugs` feature, which the
//! tests, the simulator and the fuzzers enable) that puts upstream's behaviour back, so its
//! regression test can be seen to fail against the bug:
//!
//! - **C1** (upstream 49053, 72181, 88565; fixed by 104526): a failed detach keeps the volume in
//!   the node's report, and a volume the node needs again is reported again at once; backoff
//!   never causes status churn.
//! - **C2**: an Uncertain attachment holds a single-node volume against other nodes; the
//!   Multi-Attach event fires once per episode under its own reason (96142).
//! - **C3** (seed 004): the unmount wait is skipped only for a fenced (`out-of-service`) node,
//!   or, with the opt-in `Config::machine_fencing`, an unhealthy node whose machine the backend
//!   said twice, fresh, is powered off; force detach on timeout is opt-in and never applies to
//!   a healthy node (110721).
//! - **C4** (141385): a node not yet heard from counts as mounting everything, and its first
//!   in-use report is acted on at once.
//! - **C5**: a detach starts only after the store acknowledged the volume's removal from the
//!   node's report.
//! - **C6** (122413, open upstream): status writes are compared with what the store is known to
//!   hold (our acknowledged write or a fresh read), never with a cache of unknown age.
//! - **C7** (44858, 92145, 130516, 96617): a new core first rebuilds the actual state from the
//!   store's and the backend's listings (what only the backend knows becomes Uncertain) and
//!   plans nothing else before both are in, so a restart at any point leaks no attachment.
//!
//! And right before every detach, forced or not, the core reads the node fresh
//! ([`Operation::ReadStatus`]) and plans the detach only if the node is fenced or its agent
//! reports the volume not in use (or, for the opt-in timeout or a machine the backend says is
//! powered off, the node is not healthy): its own
//! view of the node may be older than a mount that began before the volume left the node's
//! status, or than a lifted fence. A read that does not justify the detach holds it back,
//! which is no failure ([`Event::WaitingForUnmount`]).
//!
//! [`AttachBackend`]: traits::AttachBackend
//! [`AttachState::Uncertain`]: core::AttachState::Uncertain
//! [`CallTimeouts`]: config::CallTimeouts
//! [`Config`]: config::Config
//! [`Config::max_pending_workloads`]: config::Config::max_pending_workloads
//! [`Controller`]: controller::Controller
//! [`ControllerHandle::send`]: controller::ControllerHandle::send
//! [`Event`]: core::Event
//! [`Event::CallTimedOut`]: core::Event::CallTimedOut
//! [`Event::WaitingForUnmount`]: core::Event::WaitingForUnmount
//! [`Event::WorkloadWaiting`]: core::Event::WorkloadWaiting
//! [`Input`]: core::Input
//! [`Input::RelistDone`]: core::Input::RelistDone
//! [`Input::RelistStarted`]: core::Input::RelistStarted
//! [`NodeStatusStore`]: traits::NodeStatusStore
//! [`Operation`]: core::Operation
//! [`Operation::ReadStatus`]: core::Operation::ReadStatus
//! [`Reconciler`]: core::Reconciler
//! [`Reconciler::handle`]: core::Reconciler::handle
//! [`Reconciler::take_events`]: core::Reconciler::take_events
//! [`World`]: controller::World
#![deny(missing_docs)]

// Floors, lowest first: a module imports only from its own floor and those listed before it
// (tests/layering.rs checks it; docs/design.md, "Layout", explains it).
mod domain;
mod upstream_bugs;

pub mod config;
pub mod core;
pub mod traits;

#[cfg(feature = "driver")]
pub mod memory;

#[cfg(feature = "driver")]
pub mod controller;

#[cfg(feature = "conformance")]
pub mod conformance;

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use domain::name::Name;
pub use domain::{Domain, Id, Ids};

/// The README's examples, compiled as doctests so they cannot rot.
#[cfg(all(doctest, feature = "driver"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
