//! The deterministic incident simulator: scripted scenarios replayed against the real core and
//! driver under a virtual clock, so that an upstream incident becomes a regression test.
//!
//! The simulated world has node agents that report volumes in use before mounting and mount only
//! what their fresh node status lists and the backend really attached; a backend with latency
//! and injected failures that performs any attach it is asked (so the invariants, not the
//! backend, catch the controller's mistakes); and a node-status store with revisions, whose
//! changes reach the controller through a cache that lags. The controller restarts like a crashed
//! process: calls in flight finish at the backend but their answers are lost.
//!
//! Invariants, checked as things happen and at the end of a run:
//! - **I1** a single-node volume is never attached to two nodes at once, nor, if claim-only
//!   (no backend call), mounted on two nodes at once (unless a controller started while the
//!   first node's object was gone and no pod placed there used the volume: nothing it could
//!   read recorded that claim, the gap the README names); and an operator's release never
//!   makes the controller forget an attachment the backend still holds;
//! - **I2** no detach of a volume mounted on a node that is neither fenced nor allowed by
//!   configuration (force-detach-on-timeout on and the node down);
//! - **I3** at the end, every live node's reported list equals its real attachments, every pod
//!   on a live node runs, and no attachment is left that nothing needs; except that a volume held
//!   by a crashed, unfenced node stays there and the pods waiting for it wait, with a
//!   Multi-Attach event (seed 004's safe outcome); with force-detach-on-timeout on, only until
//!   the unmount wait could have ended (the world still for that wait and five minutes more),
//!   after which a crashed or powered-off node must have let go of a volume no pod there
//!   uses. The same goes for a node whose object was
//!   deleted, whose agent is cut off from the API, or that the backend cannot reach (nothing
//!   may be detached from them on a guess), and for a volume whose unmount hangs. A claim-only
//!   volume is held by a node that mounts it, lists it, or whose agent's last report in the
//!   store still names it in use (a crashed agent never withdraws it). A claim a
//!   restarted controller named in a `ClaimInDoubt` event may stay unlisted, and the pods
//!   that want it wait, while another node it named still has a pod using it. A live node
//!   is up, has its object, its agent reports, and the backend reaches it. A pod may also wait
//!   for room on a node at its attach limit, once a node-full event named it;
//! - **I4** no detach while the node's status still lists the volume for a live agent;
//! - **I5** no attach is planned past a node's reported attach limit (unless a restart lost
//!   the controller track of what the node holds; the backend refuses it either way);
//! - **I6** the attach and the detach calls a controller awaits at once stay within
//!   `Config::backend_load`'s limits, each class its own.
//!
//! A panic anywhere in a run (the controller's task, the simulated backend or store, the
//! simulator's own tasks or the runner) is a violation too, carrying the panic's message.
//!
//! Node agents pass every 100 ms of virtual time, as kubelet's volume manager does, but only
//! over nodes where something changed since their last pass, and a pass looks only at the
//! volumes and pods that changed; with nothing changing the clock jumps to the next step. A run
//! costs what happens in it, not how long it lasts nor how much a node holds, apart from the
//! controller's own work (its periodic sync while anything is attached, and its status writes,
//! each the node's whole list). A run keeps its trace and timeline only if asked
//! ([`Recording`]): both list every status write's volumes.
//!
//! ```
//! use attach_detach::sim::{run, scenario::parse};
//! let scenario = parse("node n1\nvolume v single-node\nat 0s pod p on n1 uses v\nat 5s expect pod p running\nrun 10s\n").unwrap();
//! let report = run(&scenario);
//! assert!(report.passed(), "{:?}", report.violations);
//! assert_eq!(report.attach_calls, 1);
//! ```
//!
//! The scenario format is documented in [`scenario`]. Each run also records what happened as
//! structured [`timeline::Record`]s, which [`timeline::render_svg`] draws; [`seeds::sweep`]
//! reruns a scenario under many jitter seeds; [`cli`] is the `simulate` example's command
//! line. [`id_kinds`] drives one history through cores with ids of five kinds and compares
//! what they plan, line by line.

#[cfg(any(test, fuzzing))]
mod agent_check;
mod backend;
pub mod cli;
pub mod id_kinds;
pub mod library;
pub mod model;
mod panics;
mod runner;
pub mod scenario;
pub mod seeds;
mod store;
pub mod timeline;
mod world;

pub use runner::{
    Recording, Report, SETTLE, config_of, run, run_recording, summary_header, summary_line,
    violation_line,
};
pub use world::Violation;

/// The identifiers the simulator uses: names for nodes, volumes and pods, no payload.
pub type SimIds = crate::Ids<String, String, String, ()>;
