//! A conformance kit (feature `conformance`): one generic test suite for any
//! [`NodeStatusStore`] and one for any [`AttachBackend`], so that an implementation outside this
//! crate can show, from its own `#[tokio::test]`, that it keeps the promises the controller
//! relies on.
//!
//! Each check derives from the traits' documentation (the rustdoc of
//! [`NodeStatusStore`], [`AttachBackend`], [`NodeStatus`](crate::traits::NodeStatus),
//! [`StoreError`](crate::traits::StoreError) and the README's "Writing a store") and cites it.
//! The crate runs both suites against its in-memory doubles ([`MemoryStore`] and
//! [`MemoryBackend`]), and against deliberately broken implementations to show that the
//! suites catch them; the etcd adapter runs the store suite against a real etcd.
//!
//! # Wiring in your implementation
//!
//! The traits alone cannot create a node or play its agent, so each suite takes a harness you
//! write: a [`StoreHarness`] (your store and a second client of it, plus adding and removing
//! nodes and setting the agent's facts the way your node agent and fencing would) or a
//! [`BackendHarness`] (your backend, two nodes, and fresh volumes). Then [`check_store`] or
//! [`check_backend`] runs every check and returns every failure, each naming the check, what
//! was expected and what was seen; [`store_checks`] and [`backend_checks`] list the checks to
//! run one at a time.
//!
//! ```
//! use async_trait::async_trait;
//! use attach_detach::Ids;
//! use attach_detach::conformance::{self, HarnessError, StoreHarness, Supported};
//! use attach_detach::memory::MemoryStore;
//! use attach_detach::traits::NodeStatusStore;
//!
//! type D = Ids<String, String, String, ()>;
//!
//! /// Your store (here the in-memory one), a second client of it, and a tag that makes this
//! /// run's ids its own.
//! struct Harness {
//!     store: MemoryStore<D>,
//!     second: MemoryStore<D>,
//!     tag: String,
//! }
//!
//! #[async_trait]
//! impl StoreHarness<D> for Harness {
//!     fn store(&self) -> &dyn NodeStatusStore<D> {
//!         &self.store
//!     }
//!     fn second_store(&self) -> &dyn NodeStatusStore<D> {
//!         &self.second // a real store: a second client with its own connection
//!     }
//!     fn node(&self, n: usize) -> String {
//!         format!("{}-node-{n}", self.tag)
//!     }
//!     fn volume(&self, n: usize) -> String {
//!         format!("{}-vol-{n}", self.tag)
//!     }
//!     async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
//!         self.store.add_node(node.clone()); // a real store: register the node, as its agent would
//!         Ok(())
//!     }
//!     async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
//!         self.store.remove_node(node);
//!         Ok(())
//!     }
//!     async fn set_in_use(&self, node: &String, in_use: Vec<String>) -> Result<Supported, HarnessError> {
//!         self.store.set_in_use(node, in_use); // a real store: write what the node agent writes
//!         Ok(Supported::Yes)
//!     }
//!     async fn set_fenced(&self, node: &String, fenced: bool) -> Result<Supported, HarnessError> {
//!         self.store.set_fenced(node, fenced);
//!         Ok(Supported::Yes)
//!     }
//!     async fn set_healthy(&self, node: &String, healthy: bool) -> Result<Supported, HarnessError> {
//!         self.store.set_healthy(node, healthy);
//!         Ok(Supported::Yes) // a store that holds no health says Supported::No
//!     }
//! }
//!
//! // In your crate this is the body of a `#[tokio::test] async fn`.
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // A shared remote store: make the tag unique per run (a timestamp, a UUID).
//! let store = MemoryStore::new();
//! let tag = format!("conformance-{}", std::process::id());
//! let harness = Harness { second: store.clone(), store, tag };
//! // Every check; on failure the error lists each broken promise.
//! if let Err(failures) = conformance::check_store(&harness).await {
//!     panic!("{failures}");
//! }
//! // Or one check at a time.
//! for check in conformance::store_checks::<D, Harness>() {
//!     assert_eq!(check.run(&harness).await, Ok(()), "{}: {}", check.name, check.about);
//! }
//! # });
//! ```
//!
//! # What the suites assume
//!
//! - Ids are fresh: the suites ask the harness for node and volume `n`s never asked for before
//!   in this process, and look only at their own nodes and volumes, so a harness that builds
//!   ids from a tag unique to the run can share a store or a backend with other users (a
//!   listing may hold foreign entries). The backend suite asks only for nodes 0 and 1, which
//!   may be real machines; its volumes are fresh.
//! - Checks run one after another, never concurrently; each removes the nodes it added (store)
//!   or detaches what it attached (backend) when it ends, pass or fail.
//! - The store's two clients ([`StoreHarness::store`] and [`StoreHarness::second_store`])
//!   share only the backing: the checks that race them stand for two controller replicas, or
//!   a deposed leader and its successor, and through a single client a compare-and-set made
//!   on the client side passes for one made by the store.
//! - Every call, to the implementation or to the harness, has an end: one that does not
//!   answer within the harness's `call_timeout` is a failure (README, "Every wait has an
//!   end"). So the runtime needs tokio's timer (`#[tokio::test]` has it), with time not paused
//!   when the implementation talks to a remote service.
//! - A wrong answer is a [`ConformanceFailure`], never a panic; a failed harness call is one
//!   too, and says so.
//!
//! [`AttachBackend`]: crate::traits::AttachBackend
//! [`NodeStatusStore`]: crate::traits::NodeStatusStore
//! [`MemoryStore`]: crate::memory::MemoryStore
//! [`MemoryBackend`]: crate::memory::MemoryBackend

use std::error::Error;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::domain::Domain;

/// One entry of a check list: the check function `$name` (generic over the list's `D` and
/// `H`), named after itself, with the promise it tests.
macro_rules! check {
    ($name:ident, $about:expr) => {
        Check {
            name: stringify!($name),
            about: $about,
            run: |h| Box::pin($name::<D, H>(h)),
        }
    };
}

pub mod backend;
mod report;
pub mod store;

pub use backend::{BackendHarness, backend_checks};
pub use report::{Check, CheckFuture, ConformanceFailure, ConformanceFailures, Outcome};
pub use store::{StoreHarness, store_checks};

/// Why a harness call failed (the remote store was unreachable while adding a node, say): any
/// error will do, and the failure record shows its text.
pub type HarnessError = Box<dyn Error + Send + Sync + 'static>;

/// Whether the store holds a fact of the node agent's or the fencing agent's: a harness
/// answers it when asked to set one.
///
/// A store may not know a fact ([`NodeStatus`](crate::traits::NodeStatus): "`None` when this
/// store does not know"); then the suite checks that the fact reads as `None`, never as a
/// guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Supported {
    /// The store holds the fact: the harness set it, and a read must show it.
    Yes,
    /// The store does not hold the fact: the harness did nothing, and a read must show `None`.
    No,
}

/// Runs every check of [`store_checks`] against the harness's store, one after another, and
/// returns every failure.
pub async fn check_store<D, H>(harness: &H) -> Result<(), ConformanceFailures>
where
    D: Domain,
    H: StoreHarness<D> + ?Sized,
{
    report::run_all(harness, &store_checks::<D, H>()).await
}

/// Runs every check of [`backend_checks`] against the harness's backend, one after another,
/// and returns every failure.
pub async fn check_backend<D, H>(harness: &H) -> Result<(), ConformanceFailures>
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    report::run_all(harness, &backend_checks::<D, H>()).await
}

/// The next `n` no check in this process asked the harness for, so that checks never see
/// each other's nodes or volumes, even when a check runs twice with the same harness.
fn fresh() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What every step of a check shares: the check's name for its failure, and the bound on each
/// call.
struct Steps {
    check: &'static str,
    timeout: Duration,
}

impl Steps {
    /// The failure of this check.
    fn fail(&self, expected: impl Display, seen: impl Display) -> ConformanceFailure {
        ConformanceFailure {
            check: self.check,
            expected: expected.to_string(),
            seen: seen.to_string(),
        }
    }

    /// Awaits `call`, or fails if it does not answer in time.
    async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = T>,
    ) -> Result<T, ConformanceFailure> {
        tokio::time::timeout(self.timeout, call).await.map_err(|_| {
            self.fail(
                format_args!("{what} to answer within {:?}", self.timeout),
                "no answer",
            )
        })
    }

    /// Awaits a harness call, failing if it errs or does not answer in time.
    async fn harness<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, HarnessError>>,
    ) -> Result<T, ConformanceFailure> {
        self.call(what, call).await?.map_err(|e| {
            self.fail(
                format_args!("the harness's {what} to succeed"),
                format_args!("harness error: {e}"),
            )
        })
    }
}
