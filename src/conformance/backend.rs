//! The checks of an [`AttachBackend`], each derived from a promise of its documentation.
//!
//! Run them all with [`check_backend`](super::check_backend), list them with
//! [`backend_checks`], or call one by its function. Each check uses fresh volumes from the
//! [`BackendHarness`] on its nodes 0 and 1, looks only at its own volumes, and detaches what
//! it attached when it ends.

use std::fmt::{self, Debug};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::report::{Check, Outcome};
use super::{ConformanceFailure, HarnessError, Steps, fresh};
use crate::core::calls::volume::{Access, VolumeSpec};
use crate::domain::Domain;
use crate::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};

/// What the backend suite needs besides the backend: two nodes to attach to, and fresh
/// volumes.
///
/// ```
/// use async_trait::async_trait;
/// use attach_detach::Ids;
/// use attach_detach::conformance::{self, BackendHarness, HarnessError};
/// use attach_detach::core::{Access, VolumeSpec};
/// use attach_detach::memory::MemoryBackend;
/// use attach_detach::traits::AttachBackend;
///
/// type D = Ids<String, String, String, String>;
///
/// struct Harness {
///     backend: MemoryBackend<D>,
///     tag: String,
/// }
///
/// #[async_trait]
/// impl BackendHarness<D> for Harness {
///     fn backend(&self) -> &dyn AttachBackend<D> {
///         &self.backend
///     }
///     fn node(&self, n: usize) -> String {
///         format!("node-{n}") // a real backend: two test machines
///     }
///     async fn volume(&self, n: usize, access: Access) -> Result<(String, String), HarnessError> {
///         // A real backend: provision a disk of this access mode, return its id and handle.
///         let (volume, handle) = (format!("{}-vol-{n}", self.tag), format!("handle-{n}"));
///         self.backend.set_spec(volume.clone(), VolumeSpec { access, payload: handle.clone(), attach_required: true, driver: None });
///         Ok((volume, handle))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let harness = Harness { backend: MemoryBackend::new(), tag: "run-1".into() };
/// if let Err(failures) = conformance::check_backend(&harness).await {
///     panic!("{failures}");
/// }
/// # });
/// ```
#[async_trait]
pub trait BackendHarness<D: Domain>: Send + Sync {
    /// The backend under test.
    fn backend(&self) -> &dyn AttachBackend<D>;

    /// Node `n`, for `n` 0 or 1 only: the suite needs two distinct nodes, and may use the
    /// same two in every check (it looks only at its own volumes), so they can be real
    /// machines.
    fn node(&self, n: usize) -> D::Node;

    /// A new volume of `access` mode, never attached, and the payload the backend needs for
    /// it (what [`AttachBackend::list`] should report back in its
    /// [`VolumeSpec`]). Each `n` is asked for once per process; build the id from `n` and a
    /// tag unique to this run, or provision a volume.
    async fn volume(
        &self,
        n: usize,
        access: Access,
    ) -> Result<(D::Volume, D::Payload), HarnessError>;

    /// How long any one call may take before it counts as a failure: a backend call, or one of
    /// this harness's. Two minutes unless overridden (a cloud attach can take one).
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
}

/// Every backend check, in the order [`check_backend`](super::check_backend) runs them.
pub fn backend_checks<D, H>() -> Vec<Check<H>>
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    vec![
        check!(
            attach_shows_in_verify_and_list,
            "an attached volume is in verify's answer and in the listing, with its node"
        ),
        check!(
            list_reports_the_spec,
            "the listing reports an attached volume's access mode and payload"
        ),
        check!(
            attach_is_idempotent,
            "attaching an attached volume succeeds and leaves one attachment"
        ),
        check!(
            detach_removes_from_verify_and_list,
            "a detached volume is in neither verify's answer nor the listing"
        ),
        check!(
            detach_of_unattached_pair_succeeds,
            "detaching a volume that is not attached to the node succeeds"
        ),
        check!(
            verify_answers_a_subset_of_what_was_asked,
            "verify answers exactly the asked volumes attached to the node"
        ),
        check!(
            multi_node_volume_on_two_nodes,
            "a multi-node volume attaches to two nodes, and the listing shows both"
        ),
    ]
}

/// One volume the check attached, to detach at the end.
struct Attached<D: Domain> {
    volume: D::Volume,
    node: D::Node,
    payload: D::Payload,
}

/// One run of one check: the harness, the check's steps, and what to detach at the end.
struct Cx<'h, D: Domain, H: ?Sized> {
    harness: &'h H,
    steps: Steps,
    attached: Mutex<Vec<Attached<D>>>,
}

/// A call's answer as a failure shows it.
fn answer<T: Debug, N: Debug>(answer: &Result<T, BackendError<N>>) -> String {
    match answer {
        Ok(value) => format!("success ({value:?})"),
        Err(e) => format!("the error \"{e}\""),
    }
}

impl<'h, D: Domain, H: BackendHarness<D> + ?Sized> Cx<'h, D, H> {
    fn new(harness: &'h H, check: &'static str) -> Self {
        Cx {
            harness,
            steps: Steps {
                check,
                timeout: harness.call_timeout(),
            },
            attached: Mutex::new(Vec::new()),
        }
    }

    /// Runs the check's `body`, then detaches what it attached, whatever the outcome.
    async fn scoped(&self, body: impl Future<Output = Outcome>) -> Outcome {
        let outcome = body.await;
        let attached = std::mem::take(&mut *self.attached.lock());
        for a in attached {
            // Best effort: a detach that fails here is the subject of other checks.
            let detach = self
                .harness
                .backend()
                .detach(&a.volume, &a.node, &a.payload);
            let _ = self.steps.call("detach", detach).await;
        }
        outcome
    }

    fn fail(&self, expected: impl fmt::Display, seen: impl fmt::Display) -> ConformanceFailure {
        self.steps.fail(expected, seen)
    }

    fn node(&self, n: usize) -> D::Node {
        self.harness.node(n)
    }

    /// A fresh volume of `access` mode, with its payload.
    async fn volume(&self, access: Access) -> Result<(D::Volume, D::Payload), ConformanceFailure> {
        self.steps
            .harness("volume", self.harness.volume(fresh(), access))
            .await
    }

    async fn attach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<Result<AttachInfo, BackendError<D::Node>>, ConformanceFailure> {
        // Detached at the end even if the attach fails: it may have landed.
        self.attached.lock().push(Attached {
            volume: volume.clone(),
            node: node.clone(),
            payload: payload.clone(),
        });
        let attach = self.harness.backend().attach(volume, node, payload);
        self.steps.call("attach", attach).await
    }

    /// Attaches, failing the check unless the attach succeeds.
    async fn attach_ok(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
        when: &str,
    ) -> Result<AttachInfo, ConformanceFailure> {
        self.attach(volume, node, payload).await?.map_err(|e| {
            self.fail(
                format_args!("attach of {volume:?} to {node:?} ({when}) to succeed"),
                answer::<(), _>(&Err(e)),
            )
        })
    }

    /// Detaches, failing the check unless the detach succeeds.
    async fn detach_ok(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
        when: &str,
    ) -> Outcome {
        let detach = self.harness.backend().detach(volume, node, payload);
        self.steps.call("detach", detach).await?.map_err(|e| {
            self.fail(
                format_args!("detach of {volume:?} from {node:?} ({when}) to succeed"),
                answer::<(), _>(&Err(e)),
            )
        })
    }

    /// Verifies, failing the check unless the call succeeds.
    async fn verify(
        &self,
        node: &D::Node,
        volumes: &[(D::Volume, D::Payload)],
    ) -> Result<Vec<D::Volume>, ConformanceFailure> {
        let verify = self.harness.backend().verify(node, volumes);
        self.steps.call("verify", verify).await?.map_err(|e| {
            self.fail(
                format_args!("verify on {node:?} to succeed"),
                answer::<(), _>(&Err(e)),
            )
        })
    }

    /// The backend's attachments of `volume`, failing the check unless the listing succeeds.
    async fn listed(
        &self,
        volume: &D::Volume,
    ) -> Result<Vec<BackendAttachment<D>>, ConformanceFailure> {
        let listed = self
            .steps
            .call("list", self.harness.backend().list())
            .await?
            .map_err(|e| self.fail("list to succeed", answer::<(), _>(&Err(e))))?;
        Ok(listed.into_iter().filter(|a| a.volume == *volume).collect())
    }

    /// Fails unless the listing shows `volume` attached to exactly `nodes`, once each.
    async fn expect_listed(&self, volume: &D::Volume, nodes: &[&D::Node], when: &str) -> Outcome {
        let listed = self.listed(volume).await?;
        let mut seen: Vec<&D::Node> = listed.iter().map(|a| &a.node).collect();
        seen.sort();
        let mut expected = nodes.to_vec();
        expected.sort();
        if seen != expected {
            return Err(self.fail(
                format_args!("the listing {when} to show {volume:?} attached to {expected:?}"),
                format_args!("it attached to {seen:?}"),
            ));
        }
        Ok(())
    }

    /// Fails unless verify on `node`, asked about `volume` alone, answers `attached`.
    async fn expect_verified(
        &self,
        volume: &D::Volume,
        payload: &D::Payload,
        node: &D::Node,
        attached: bool,
        when: &str,
    ) -> Outcome {
        let answer = self
            .verify(node, &[(volume.clone(), payload.clone())])
            .await?;
        let expected: &[D::Volume] = if attached {
            std::slice::from_ref(volume)
        } else {
            &[]
        };
        if answer != expected {
            return Err(self.fail(
                format_args!("verify on {node:?} of [{volume:?}] {when} to answer {expected:?}"),
                format_args!("{answer:?}"),
            ));
        }
        Ok(())
    }
}

/// [`AttachBackend::verify`] "Returns the subset of `volumes` that are still attached to
/// `node`", and [`AttachBackend::list`] is "Every attachment the backend knows": after a
/// successful attach, both show it, the listing with its node.
pub async fn attach_shows_in_verify_and_list<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "attach_shows_in_verify_and_list");
    cx.scoped(async {
        let node = cx.node(0);
        let (volume, payload) = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&volume, &node, &payload, "a new volume")
            .await?;
        cx.expect_verified(&volume, &payload, &node, true, "after the attach")
            .await?;
        cx.expect_listed(&volume, &[&node], "after the attach")
            .await
    })
    .await
}

/// [`BackendAttachment::spec`]: "The volume's access mode and payload, as the backend knows
/// them". A restarted core adopts the listed spec for a volume the orchestrator does not know,
/// and detaches it with that payload, so the listing reports what the harness created: checked
/// for a single-node volume here, for a multi-node one in
/// [`multi_node_volume_on_two_nodes`].
pub async fn list_reports_the_spec<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "list_reports_the_spec");
    cx.scoped(async {
        let node = cx.node(0);
        let (volume, payload) = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&volume, &node, &payload, "a new volume")
            .await?;
        cx.expect_spec(&volume, &VolumeSpec::single_node(payload))
            .await
    })
    .await
}

impl<'h, D: Domain, H: BackendHarness<D> + ?Sized> Cx<'h, D, H> {
    /// Fails unless every listed attachment of `volume` reports `spec`: its access mode, payload
    /// and whether it needs an attach. (Which driver's limit it counts against is the
    /// embedder's numbering: a backend may report it or not.)
    async fn expect_spec(&self, volume: &D::Volume, spec: &VolumeSpec<D::Payload>) -> Outcome {
        let listed = self.listed(volume).await?;
        if listed.is_empty() {
            return Err(self.fail(
                format_args!("the listing to show {volume:?}, attached"),
                "no attachment of it",
            ));
        }
        if let Some(wrong) = listed.iter().find(|a| {
            (a.spec.access, &a.spec.payload, a.spec.attach_required)
                != (spec.access, &spec.payload, spec.attach_required)
        }) {
            return Err(self.fail(
                format_args!("the listing to report {volume:?} with spec {spec:?}"),
                format_args!("spec {:?} (on {:?})", wrong.spec, wrong.node),
            ));
        }
        Ok(())
    }
}

/// [`AttachBackend`]: "Calls must be idempotent: attaching an attached volume ... succeeds".
/// The second attach succeeds, and the volume is still attached once, to its node.
pub async fn attach_is_idempotent<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "attach_is_idempotent");
    cx.scoped(async {
        let node = cx.node(0);
        let (volume, payload) = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&volume, &node, &payload, "a new volume")
            .await?;
        cx.attach_ok(&volume, &node, &payload, "again, already attached")
            .await?;
        cx.expect_verified(&volume, &payload, &node, true, "after attaching twice")
            .await?;
        cx.expect_listed(&volume, &[&node], "after attaching twice")
            .await
    })
    .await
}

/// [`AttachBackend::verify`] answers the volumes "still attached to `node`", and
/// [`AttachBackend::list`] every attachment: after a successful detach, neither shows it. The
/// core settles an Uncertain attachment as gone when verify leaves it out.
pub async fn detach_removes_from_verify_and_list<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "detach_removes_from_verify_and_list");
    cx.scoped(async {
        let node = cx.node(0);
        let (volume, payload) = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&volume, &node, &payload, "a new volume")
            .await?;
        cx.detach_ok(&volume, &node, &payload, "attached").await?;
        cx.expect_verified(&volume, &payload, &node, false, "after the detach")
            .await?;
        cx.expect_listed(&volume, &[], "after the detach").await
    })
    .await
}

/// [`AttachBackend`]: "Calls must be idempotent: ... detaching a detached one succeeds". Checked
/// for a volume never attached, for one attached to the other node only, and for a second
/// detach; none of them attaches anything.
pub async fn detach_of_unattached_pair_succeeds<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "detach_of_unattached_pair_succeeds");
    cx.scoped(async {
        let (node, other) = (cx.node(0), cx.node(1));
        let (never, never_payload) = cx.volume(Access::SingleNode).await?;
        cx.detach_ok(&never, &node, &never_payload, "never attached")
            .await?;
        let (elsewhere, elsewhere_payload) = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&elsewhere, &other, &elsewhere_payload, "a new volume")
            .await?;
        cx.detach_ok(
            &elsewhere,
            &node,
            &elsewhere_payload,
            "attached to another node only",
        )
        .await?;
        cx.expect_listed(
            &elsewhere,
            &[&other],
            "after detaching it from a node it was not on",
        )
        .await?;
        cx.detach_ok(&elsewhere, &other, &elsewhere_payload, "attached")
            .await?;
        cx.detach_ok(
            &elsewhere,
            &other,
            &elsewhere_payload,
            "again, already detached",
        )
        .await?;
        cx.expect_listed(&never, &[], "after detaching a volume never attached")
            .await?;
        cx.expect_listed(&elsewhere, &[], "after detaching twice")
            .await
    })
    .await
}

/// [`AttachBackend::verify`] "Returns the subset of `volumes` that are still attached to
/// `node`, or are being attached": asked about a volume attached there, one never attached,
/// one attached to the other node and one attached and detached, it answers the first only,
/// and never a volume it was not asked about.
pub async fn verify_answers_a_subset_of_what_was_asked<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "verify_answers_a_subset_of_what_was_asked");
    cx.scoped(async {
        let (node, other) = (cx.node(0), cx.node(1));
        let attached = cx.volume(Access::SingleNode).await?;
        let never = cx.volume(Access::SingleNode).await?;
        let elsewhere = cx.volume(Access::SingleNode).await?;
        let gone = cx.volume(Access::SingleNode).await?;
        let unasked = cx.volume(Access::SingleNode).await?;
        cx.attach_ok(&attached.0, &node, &attached.1, "a new volume").await?;
        cx.attach_ok(&elsewhere.0, &other, &elsewhere.1, "a new volume").await?;
        cx.attach_ok(&gone.0, &node, &gone.1, "a new volume").await?;
        cx.detach_ok(&gone.0, &node, &gone.1, "attached").await?;
        cx.attach_ok(&unasked.0, &node, &unasked.1, "a new volume").await?;
        let asked = [never.clone(), elsewhere.clone(), attached.clone(), gone.clone()];
        let answer = cx.verify(&node, &asked).await?;
        if answer != [attached.0.clone()] {
            return Err(cx.fail(
                format_args!(
                    "verify on {node:?} of [{:?} (never attached), {:?} (attached to {other:?}), {:?} (attached), {:?} (detached)] to answer [{:?}]",
                    never.0, elsewhere.0, attached.0, gone.0, attached.0
                ),
                format_args!("{answer:?}"),
            ));
        }
        let empty = cx.verify(&node, &[]).await?;
        if !empty.is_empty() {
            return Err(cx.fail(
                format_args!("verify on {node:?} of no volume to answer []"),
                format_args!("{empty:?}"),
            ));
        }
        Ok(())
    })
    .await
}

/// A multi-node volume ([`Access::MultiNode`]: "any number of nodes at once") attaches to two
/// nodes; verify on each shows it, and [`AttachBackend::list`] ("Every attachment the backend
/// knows") shows both attachments with the multi-node spec; detached from one node, it stays
/// on the other.
pub async fn multi_node_volume_on_two_nodes<D, H>(harness: &H) -> Outcome
where
    D: Domain,
    H: BackendHarness<D> + ?Sized,
{
    let cx = Cx::new(harness, "multi_node_volume_on_two_nodes");
    cx.scoped(async {
        let (a, b) = (cx.node(0), cx.node(1));
        let (volume, payload) = cx.volume(Access::MultiNode).await?;
        cx.attach_ok(&volume, &a, &payload, "a new multi-node volume")
            .await?;
        cx.attach_ok(
            &volume,
            &b,
            &payload,
            "a multi-node volume attached to another node",
        )
        .await?;
        for node in [&a, &b] {
            cx.expect_verified(
                &volume,
                &payload,
                node,
                true,
                "after attaching it to both nodes",
            )
            .await?;
        }
        cx.expect_listed(&volume, &[&a, &b], "after attaching it to both nodes")
            .await?;
        cx.expect_spec(&volume, &VolumeSpec::multi_node(payload.clone()))
            .await?;
        cx.detach_ok(&volume, &a, &payload, "attached to both nodes")
            .await?;
        cx.expect_verified(
            &volume,
            &payload,
            &b,
            true,
            "after detaching it from the other node",
        )
        .await?;
        cx.expect_listed(&volume, &[&b], "after detaching it from one node")
            .await
    })
    .await
}
