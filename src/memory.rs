//! In-memory [`AttachBackend`] and [`NodeStatusStore`] with fault injection and call counters,
//! for tests, examples, benchmarks and simulation.
//!
//! Both are cheap-to-clone handles onto shared state: a test keeps one handle to inject faults
//! and inspect the outcome while the controller drives another.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::backend::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use crate::domain::Domain;
use crate::fault::Faults;
use crate::reported_volumes::ReportedVolumes;
use crate::store::{NodeStatus, NodeStatusStore, Revision, StoreError, WriteReceipt};
use crate::volume::VolumeSpec;

/// Which [`AttachBackend`] method a fault or a call counter is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BackendOp {
    /// [`AttachBackend::attach`].
    Attach,
    /// [`AttachBackend::detach`].
    Detach,
    /// [`AttachBackend::verify`].
    Verify,
    /// [`AttachBackend::list`].
    List,
}

impl BackendOp {
    fn index(self) -> usize {
        self as usize
    }
}

/// Which backend calls a fault applies to; `None` matches any.
struct BackendCall<D: Domain> {
    op: BackendOp,
    volume: Option<D::Volume>,
    node: Option<D::Node>,
}

struct BackendState<D: Domain> {
    attached: BTreeMap<D::Volume, BTreeSet<D::Node>>,
    specs: FxHashMap<D::Volume, VolumeSpec<D::Payload>>,
    faults: Faults<BackendCall<D>, BackendError<D::Node>>,
    /// Only looked up by key, so a hash map: a moving cluster adds a key per call.
    calls: FxHashMap<(BackendOp, D::Volume, D::Node), u64>,
    totals: [u64; 4],
    latency: Duration,
}

impl<D: Domain> BackendState<D> {
    /// Consumes one use of the first queued fault matching this call, if any.
    fn take_fault(
        &mut self,
        op: BackendOp,
        node: Option<&D::Node>,
        volumes: &[&D::Volume],
    ) -> Option<BackendError<D::Node>> {
        self.faults.take(|f| {
            f.op == op
                && f.node.as_ref().is_none_or(|n| node == Some(n))
                && f.volume.as_ref().is_none_or(|v| volumes.contains(&v))
        })
    }
}

/// An in-memory [`AttachBackend`] that does exactly what it is told, plus injected faults.
///
/// It does not protect itself: it attaches a single-node volume to a second node if asked, so a
/// test can catch a controller that asks. Attach remembers the payload for [`list`]; the access
/// mode comes from [`insert`](MemoryBackend::insert) or [`set_spec`](MemoryBackend::set_spec)
/// and defaults to single-node.
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::memory::{BackendOp, MemoryBackend};
/// use attach_detach::traits::{AttachBackend, BackendError};
/// type D = Ids<String, String, String, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let backend = MemoryBackend::<D>::new();
/// let (v, n) = ("vol-1".to_string(), "node-a".to_string());
/// // The next attach of vol-1 to node-a times out, but the disk does get attached.
/// backend.fail_next(BackendOp::Attach, v.clone(), n.clone(), 1,
///     BackendError::uncertain("timeout"));
/// assert!(backend.attach(&v, &n, &()).await.is_err());
/// assert!(backend.is_attached(&v, &n));
/// assert_eq!(backend.calls(BackendOp::Attach, &v, &n), 1);
/// # });
/// ```
///
/// [`list`]: AttachBackend::list
pub struct MemoryBackend<D: Domain> {
    inner: Arc<Mutex<BackendState<D>>>,
}

impl<D: Domain> Clone for MemoryBackend<D> {
    fn clone(&self) -> Self {
        MemoryBackend {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Domain> Default for MemoryBackend<D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<D: Domain> std::fmt::Debug for MemoryBackend<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("MemoryBackend")
            .field("attached", &s.attached)
            .field("latency", &s.latency)
            .finish_non_exhaustive()
    }
}

impl<D: Domain> MemoryBackend<D> {
    /// An empty backend with no latency and no faults.
    pub fn new() -> Self {
        MemoryBackend {
            inner: Arc::new(Mutex::new(BackendState {
                attached: BTreeMap::new(),
                specs: FxHashMap::default(),
                faults: Faults::default(),
                calls: FxHashMap::default(),
                totals: [0; 4],
                latency: Duration::ZERO,
            })),
        }
    }

    /// Makes every call sleep `latency` (on tokio's clock) before acting, so a test can observe
    /// calls in flight. Applies to every handle of this backend.
    pub fn with_latency(self, latency: Duration) -> Self {
        self.inner.lock().latency = latency;
        self
    }

    /// The device path attach reports for `volume`: `/dev/disk/by-id/<volume>`.
    pub fn device_path(volume: &D::Volume) -> String {
        let id = format!("{volume:?}").replace('"', "");
        format!("/dev/disk/by-id/{id}")
    }

    /// Makes the next `times` calls of `op` matching `volume` and `node` fail with `error`.
    ///
    /// `None` matches any volume or node; a verify call matches if `volume` is among the volumes
    /// it asks about; a list call matches only a fault with neither volume nor node. An
    /// [`Uncertain`](BackendError::Uncertain) attach or detach still takes effect before
    /// returning the error; every other injected error leaves the backend untouched. Faults
    /// queue: the first queued fault matching a call is the one used.
    pub fn fail_next(
        &self,
        op: BackendOp,
        volume: impl Into<Option<D::Volume>>,
        node: impl Into<Option<D::Node>>,
        times: u32,
        error: BackendError<D::Node>,
    ) {
        let call = BackendCall {
            op,
            volume: volume.into(),
            node: node.into(),
        };
        self.inner.lock().faults.push(call, times, error);
    }

    /// How many times `op` was called for `volume` on `node`, failed calls included. A verify
    /// call counts once for each volume it asks about; list calls are only in
    /// [`total_calls`](MemoryBackend::total_calls).
    pub fn calls(&self, op: BackendOp, volume: &D::Volume, node: &D::Node) -> u64 {
        let key = (op, volume.clone(), node.clone());
        self.inner.lock().calls.get(&key).copied().unwrap_or(0)
    }

    /// How many times `op` was called at all, failed calls included.
    pub fn total_calls(&self, op: BackendOp) -> u64 {
        self.inner.lock().totals[op.index()]
    }

    /// Every current attachment as `(volume, node)`, sorted.
    pub fn attachments(&self) -> Vec<(D::Volume, D::Node)> {
        let s = self.inner.lock();
        s.attached
            .iter()
            .flat_map(|(v, nodes)| nodes.iter().map(move |n| (v.clone(), n.clone())))
            .collect()
    }

    /// The nodes `volume` is attached to, sorted: more than one for a single-node volume means
    /// the controller double-attached it.
    pub fn nodes_of(&self, volume: &D::Volume) -> Vec<D::Node> {
        let s = self.inner.lock();
        s.attached
            .get(volume)
            .map(|nodes| nodes.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `volume` is attached to `node` right now.
    pub fn is_attached(&self, volume: &D::Volume, node: &D::Node) -> bool {
        let s = self.inner.lock();
        s.attached
            .get(volume)
            .is_some_and(|nodes| nodes.contains(node))
    }

    /// Seeds an attachment without counting a call, e.g. one left over from before a restart.
    pub fn insert(&self, volume: D::Volume, node: D::Node, spec: VolumeSpec<D::Payload>) {
        let mut s = self.inner.lock();
        s.attached.entry(volume.clone()).or_default().insert(node);
        s.specs.insert(volume, spec);
    }

    /// Declares `volume`'s spec, so that [`list`](AttachBackend::list) reports the right access
    /// mode for volumes the controller attaches later.
    pub fn set_spec(&self, volume: D::Volume, spec: VolumeSpec<D::Payload>) {
        self.inner.lock().specs.insert(volume, spec);
    }

    /// Counts a call and returns the latency to wait before acting.
    fn begin(&self, op: BackendOp, node: Option<&D::Node>, volumes: &[&D::Volume]) -> Duration {
        let mut s = self.inner.lock();
        s.totals[op.index()] += 1;
        if let Some(node) = node {
            for v in volumes {
                *s.calls.entry((op, (*v).clone(), node.clone())).or_default() += 1;
            }
        }
        s.latency
    }

    async fn wait(latency: Duration) {
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
}

#[async_trait]
impl<D: Domain> AttachBackend<D> for MemoryBackend<D> {
    async fn attach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<AttachInfo, BackendError<D::Node>> {
        let op = BackendOp::Attach;
        Self::wait(self.begin(op, Some(node), &[volume])).await;
        let mut s = self.inner.lock();
        let fault = s.take_fault(op, Some(node), &[volume]);
        if let Some(e) = fault.as_ref().filter(|e| !e.may_have_taken_effect()) {
            return Err(e.clone());
        }
        s.attached
            .entry(volume.clone())
            .or_default()
            .insert(node.clone());
        s.specs
            .entry(volume.clone())
            .and_modify(|spec| spec.payload = payload.clone())
            .or_insert_with(|| VolumeSpec::single_node(payload.clone()));
        match fault {
            Some(e) => Err(e),
            None => Ok(AttachInfo {
                device: Some(Self::device_path(volume)),
            }),
        }
    }

    async fn detach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<(), BackendError<D::Node>> {
        let op = BackendOp::Detach;
        Self::wait(self.begin(op, Some(node), &[volume])).await;
        let mut s = self.inner.lock();
        let fault = s.take_fault(op, Some(node), &[volume]);
        if let Some(e) = fault.as_ref().filter(|e| !e.may_have_taken_effect()) {
            return Err(e.clone());
        }
        if let Some(nodes) = s.attached.get_mut(volume) {
            nodes.remove(node);
            if nodes.is_empty() {
                s.attached.remove(volume);
            }
        }
        if let Some(spec) = s.specs.get_mut(volume) {
            spec.payload = payload.clone();
        }
        fault.map_or(Ok(()), Err)
    }

    async fn verify(
        &self,
        node: &D::Node,
        volumes: &[(D::Volume, D::Payload)],
    ) -> Result<Vec<D::Volume>, BackendError<D::Node>> {
        let op = BackendOp::Verify;
        let asked: Vec<&D::Volume> = volumes.iter().map(|(v, _)| v).collect();
        Self::wait(self.begin(op, Some(node), &asked)).await;
        let mut s = self.inner.lock();
        if let Some(e) = s.take_fault(op, Some(node), &asked) {
            return Err(e);
        }
        Ok(asked
            .into_iter()
            .filter(|v| s.attached.get(*v).is_some_and(|nodes| nodes.contains(node)))
            .cloned()
            .collect())
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<D::Node>> {
        let op = BackendOp::List;
        Self::wait(self.begin(op, None, &[])).await;
        let mut s = self.inner.lock();
        if let Some(e) = s.take_fault(op, None, &[]) {
            return Err(e);
        }
        let mut out = Vec::new();
        for (volume, nodes) in &s.attached {
            // Every attached volume got a spec from `insert` or `attach`.
            let Some(spec) = s.specs.get(volume) else {
                continue;
            };
            for node in nodes {
                out.push(BackendAttachment {
                    volume: volume.clone(),
                    node: node.clone(),
                    spec: spec.clone(),
                });
            }
        }
        Ok(out)
    }
}

/// One node's status over time, oldest first; `None` while the node did not exist.
type History<D> = VecDeque<(Instant, Option<NodeStatus<D>>)>;

/// A node's status as the store holds it. A write keeps the list it was given (shared with
/// the writer, as [`ReportedVolumes`] is) and copies it into the status only when the status
/// is read. A real store serialises the list, reading each entry; copying it into a `Vec` at
/// every write took a count on each device path, on the lines the controller's loop counts
/// the same paths on, from the other core: about a tenth of a controller benchmark's time
/// went to that double's artefact (PERFORMANCE.md, round 3, sixteenth step).
#[derive(Debug)]
struct StoredStatus<D: Domain> {
    /// The status; its `attached` is stale while `written` holds a list.
    status: NodeStatus<D>,
    /// The list last written, not yet copied into `status`.
    written: Option<ReportedVolumes<D>>,
}

impl<D: Domain> StoredStatus<D> {
    fn new(status: NodeStatus<D>) -> Self {
        StoredStatus {
            status,
            written: None,
        }
    }

    /// The whole status, the list last written copied in.
    fn full(&mut self) -> &mut NodeStatus<D> {
        if let Some(list) = self.written.take() {
            self.status.attached = list.to_vec();
        }
        &mut self.status
    }

    /// Takes in a written list under `revision`.
    fn write(&mut self, list: &ReportedVolumes<D>, revision: Revision) {
        self.status.attached = Vec::new();
        self.written = Some(list.clone());
        self.status.revision = revision;
    }
}

/// Moves the store's revision counter `last` on and returns the new revision.
fn revision_after(last: &mut u64) -> Revision {
    *last += 1;
    Revision::from(*last)
}

struct StoreState<D: Domain> {
    nodes: BTreeMap<D::Node, StoredStatus<D>>,
    history: BTreeMap<D::Node, History<D>>,
    /// The largest lag any cached view asked for: history older than that is dropped.
    max_lag: Duration,
    /// Whether any cached view exists; without one no history is kept.
    viewed: bool,
    last_revision: u64,
    writes: BTreeMap<D::Node, u64>,
    faults: Faults<Option<D::Node>, StoreError>,
}

impl<D: Domain> StoreState<D> {
    fn next_revision(&mut self) -> Revision {
        revision_after(&mut self.last_revision)
    }

    /// Appends `node`'s new status (or its removal) to its history and drops what no view needs.
    fn record(&mut self, node: &D::Node, status: Option<&NodeStatus<D>>) {
        if !self.viewed {
            // No cached view reads history: keep none (and copy nothing per write).
            return;
        }
        let now = Instant::now();
        let cutoff = now.checked_sub(self.max_lag);
        let history = self.history.entry(node.clone()).or_default();
        history.push_back((now, status.cloned()));
        if let Some(cutoff) = cutoff {
            // Keep the newest entry at or before the cutoff: it is what the laggiest view sees.
            while history.len() >= 2 && history[1].0 <= cutoff {
                history.pop_front();
            }
        }
    }

    /// `node`'s status as it was `lag` ago, if it existed then.
    fn as_of(&self, node: &D::Node, lag: Duration) -> Option<NodeStatus<D>> {
        let cutoff = Instant::now().checked_sub(lag)?;
        let history = self.history.get(node)?;
        let (_, status) = history.iter().rev().find(|(at, _)| *at <= cutoff)?;
        status.clone()
    }

    /// Replaces `node`'s list if its revision is still `expected`.
    fn compare_and_set(
        &mut self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let stored = self.nodes.get_mut(node).ok_or_else(StoreError::not_found)?;
        if stored.status.revision != expected {
            return Err(StoreError::conflict(stored.status.revision.clone()));
        }
        // The counter alone: `stored` still borrows the nodes.
        let revision = revision_after(&mut self.last_revision);
        stored.write(attached, revision.clone());
        if self.viewed {
            let status = stored.full().clone();
            self.record(node, Some(&status));
        }
        Ok(revision)
    }

    fn take_fault(&mut self, node: &D::Node) -> Option<StoreError> {
        self.faults.take(|n| n.as_ref().is_none_or(|n| n == node))
    }
}

/// An in-memory [`NodeStatusStore`] with compare-and-set revisions, injected write failures and
/// lagging [cached views](MemoryStore::cached).
///
/// Revisions come from one counter for the whole store, so they never repeat, not even for a
/// node that is removed and added again.
///
/// Clones are handles on one store, and a handle keeps nothing of its own: each clone is a
/// client of the same state, as a second connection to a remote store is (the conformance
/// kit's second client is a clone), and every compare-and-set is made under the store's lock.
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::memory::MemoryStore;
/// use attach_detach::traits::{NodeStatusStore, ReportedVolume, StoreError};
/// type D = Ids<String, String, String, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::<D>::new();
/// let node = "node-a".to_string();
/// store.add_node(node.clone());
/// let read = store.read(&node).await.unwrap();
/// let vol = ReportedVolume { volume: "vol-1".to_string(), device: None };
/// store.write(&node, &[vol.clone()].into(), read.revision.clone()).await.unwrap();
/// // A second writer still holding the old revision loses instead of erasing vol-1.
/// let lost = store.write(&node, &[].into(), read.revision).await;
/// assert!(matches!(lost, Err(StoreError::Conflict { .. })));
/// assert_eq!(store.status(&node).unwrap().attached, vec![vol]);
/// # });
/// ```
pub struct MemoryStore<D: Domain> {
    inner: Arc<Mutex<StoreState<D>>>,
}

impl<D: Domain> Clone for MemoryStore<D> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<D: Domain> Default for MemoryStore<D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<D: Domain> std::fmt::Debug for MemoryStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("MemoryStore")
            .field("nodes", &s.nodes)
            .finish_non_exhaustive()
    }
}

impl<D: Domain> MemoryStore<D> {
    /// An empty store: no nodes, no faults.
    pub fn new() -> Self {
        MemoryStore {
            inner: Arc::new(Mutex::new(StoreState {
                nodes: BTreeMap::new(),
                history: BTreeMap::new(),
                max_lag: Duration::ZERO,
                viewed: false,
                last_revision: 0,
                writes: BTreeMap::new(),
                faults: Faults::default(),
            })),
        }
    }

    /// Registers `node` with no attached volumes and a fresh revision; does nothing if it exists.
    ///
    /// The node starts as a registered node agent would leave it: healthy, not fenced, and
    /// reporting nothing in use. So an unforced detach from it is confirmed safe by a fresh read
    /// until [`set_in_use`](Self::set_in_use) says otherwise; use
    /// [`set_in_use_unknown`](Self::set_in_use_unknown) for a store that holds no in-use report.
    pub fn add_node(&self, node: D::Node) {
        let mut s = self.inner.lock();
        if s.nodes.contains_key(&node) {
            return;
        }
        let status = NodeStatus {
            attached: Vec::new(),
            in_use: Some(Vec::new()),
            fenced: Some(false),
            healthy: Some(true),
            revision: s.next_revision(),
        };
        s.record(&node, Some(&status));
        s.nodes.insert(node, StoredStatus::new(status));
    }

    /// Deletes `node`: later reads and writes of it fail with [`StoreError::NotFound`].
    pub fn remove_node(&self, node: &D::Node) {
        let mut s = self.inner.lock();
        if s.nodes.remove(node).is_some() {
            s.record(node, None);
        }
    }

    /// Records what `node`'s agent reports in use, as the agent's own status update would: the
    /// node's revision moves on, so a controller write against the old one conflicts. Does
    /// nothing for an unknown node.
    pub fn set_in_use(&self, node: &D::Node, in_use: Vec<D::Volume>) {
        self.update(node, |status| status.in_use = Some(in_use));
    }

    /// Makes the store hold no in-use report for `node`, like a store that does not carry one:
    /// no unforced detach from the node can then be confirmed safe.
    pub fn set_in_use_unknown(&self, node: &D::Node) {
        self.update(node, |status| status.in_use = None);
    }

    /// Records whether `node` is fenced (Kubernetes: the `out-of-service` taint), as the
    /// operator's or fencing agent's update of the node would. Does nothing for an unknown node.
    pub fn set_fenced(&self, node: &D::Node, fenced: bool) {
        self.update(node, |status| status.fenced = Some(fenced));
    }

    /// Records whether `node` answers (Kubernetes: Ready). Does nothing for an unknown node.
    pub fn set_healthy(&self, node: &D::Node, healthy: bool) {
        self.update(node, |status| status.healthy = Some(healthy));
    }

    /// Changes `node`'s status as someone other than the controller would: its revision moves
    /// on, so a controller write against the old one conflicts.
    fn update(&self, node: &D::Node, change: impl FnOnce(&mut NodeStatus<D>)) {
        let mut s = self.inner.lock();
        // Taken out and put back, not copied: a node's status can be long.
        let Some(mut stored) = s.nodes.remove(node) else {
            return;
        };
        let status = stored.full();
        change(status);
        status.revision = s.next_revision();
        s.record(node, Some(status));
        s.nodes.insert(node.clone(), stored);
    }

    /// `node`'s current status, without counting or failing like a trait call would.
    pub fn status(&self, node: &D::Node) -> Option<NodeStatus<D>> {
        self.inner
            .lock()
            .nodes
            .get_mut(node)
            .map(|stored| stored.full().clone())
    }

    /// Calls `f` with `node`'s current status (`None` for an unknown node) without copying it,
    /// for a caller that needs one fact of a long status, as often as it likes. (A list
    /// written since the status was last read is copied into it once, as any read does.)
    ///
    /// `f` runs with the store locked: it must not call the store.
    pub fn with_status<R>(&self, node: &D::Node, f: impl FnOnce(Option<&NodeStatus<D>>) -> R) -> R {
        f(self
            .inner
            .lock()
            .nodes
            .get_mut(node)
            .map(|stored| &*stored.full()))
    }

    /// Calls `f` with the volumes `node`'s status lists, in volume order (none for an unknown
    /// node), read where they are: unlike [`with_status`](Self::with_status), a list written
    /// since the status was last read is not copied into it, so a caller that reads the list
    /// after every write copies nothing.
    ///
    /// `f` runs with the store locked: it must not call the store.
    pub fn with_listed<R>(
        &self,
        node: &D::Node,
        f: impl FnOnce(&mut dyn Iterator<Item = &D::Volume>) -> R,
    ) -> R {
        let s = self.inner.lock();
        match s.nodes.get(node) {
            Some(StoredStatus {
                written: Some(list),
                ..
            }) => f(&mut list.volumes().iter()),
            Some(stored) => f(&mut stored.status.attached.iter().map(|r| &r.volume)),
            None => f(&mut std::iter::empty()),
        }
    }

    /// How many writes of `node` were attempted, failed and conflicting ones included.
    pub fn writes(&self, node: &D::Node) -> u64 {
        self.inner.lock().writes.get(node).copied().unwrap_or(0)
    }

    /// Makes the next `times` writes of `node` (`None`: of any node) fail with `error`.
    ///
    /// An error that [may have taken effect](StoreError::may_have_taken_effect)
    /// ([`StoreError::Uncertain`], a write that timed out) is returned after the write is carried
    /// out as usual: it lands if the revision matches. Every other error leaves the store
    /// untouched. Faults queue: the first matching one is used.
    pub fn fail_next_write(&self, node: impl Into<Option<D::Node>>, times: u32, error: StoreError) {
        self.inner.lock().faults.push(node.into(), times, error);
    }

    /// A view that reads every node's status as it was `lag` ago, like an informer cache, and
    /// writes through to this store.
    ///
    /// It lets a test reproduce a controller that trusts a stale cache. History is kept only for
    /// the largest lag requested so far, so create views before the writes they must lag behind.
    pub fn cached(&self, lag: Duration) -> CachedView<D> {
        let mut s = self.inner.lock();
        s.max_lag = s.max_lag.max(lag);
        if !s.viewed {
            // History starts now, from what the store holds.
            s.viewed = true;
            let now: Vec<(D::Node, NodeStatus<D>)> = s
                .nodes
                .iter_mut()
                .map(|(n, stored)| (n.clone(), stored.full().clone()))
                .collect();
            for (node, status) in now {
                s.record(&node, Some(&status));
            }
        }
        CachedView {
            store: self.clone(),
            lag,
        }
    }

    /// Writes under the lock, and with `read_facts` reads the node's facts under the same
    /// lock: atomically, as an etcd transaction does.
    fn write_now(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
        read_facts: bool,
    ) -> Result<WriteReceipt<D>, StoreError> {
        let mut s = self.inner.lock();
        *s.writes.entry(node.clone()).or_default() += 1;
        let uncertain = match s.take_fault(node) {
            // A write that timed out: it is carried out as usual, and the answer lost.
            Some(e) if e.may_have_taken_effect() => Some(e),
            Some(e) => return Err(e),
            None => None,
        };
        let revision = s.compare_and_set(node, attached, expected);
        if let Some(e) = uncertain {
            return Err(e);
        }
        let revision = revision?;
        let facts = read_facts
            .then(|| s.nodes.get(node).map(|stored| stored.status.facts()))
            .flatten();
        Ok(WriteReceipt { revision, facts })
    }
}

#[async_trait]
impl<D: Domain> NodeStatusStore<D> for MemoryStore<D> {
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError> {
        self.status(node).ok_or_else(StoreError::not_found)
    }

    async fn write(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write_now(node, attached, expected, false)
            .map(|receipt| receipt.revision)
    }

    /// Reads the facts under the same lock as the write.
    async fn write_reading_facts(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<WriteReceipt<D>, StoreError> {
        self.write_now(node, attached, expected, true)
    }

    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError> {
        let mut s = self.inner.lock();
        Ok(s.nodes
            .iter_mut()
            .map(|(n, stored)| (n.clone(), stored.full().clone()))
            .collect())
    }
}

/// A lagging view of a [`MemoryStore`]: reads see the past, writes hit the present.
///
/// Models an informer cache. Kubernetes' status updater once diffed against such a cache and
/// published a node status missing a just-attached volume; with this view a test can replay
/// that and check that compare-and-set on the real revision stops it.
///
/// ```
/// use std::time::Duration;
/// use attach_detach::Ids;
/// use attach_detach::memory::MemoryStore;
/// use attach_detach::traits::{NodeStatusStore, StoreError};
/// type D = Ids<String, String, String, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let store = MemoryStore::<D>::new();
/// let cache = store.cached(Duration::from_secs(1));
/// let node = "node-a".to_string();
/// store.add_node(node.clone());
/// assert_eq!(cache.read(&node).await, Err(StoreError::not_found())); // not seen yet
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// assert!(cache.read(&node).await.is_ok());
/// # });
/// ```
pub struct CachedView<D: Domain> {
    store: MemoryStore<D>,
    lag: Duration,
}

impl<D: Domain> Clone for CachedView<D> {
    fn clone(&self) -> Self {
        CachedView {
            store: self.store.clone(),
            lag: self.lag,
        }
    }
}

impl<D: Domain> std::fmt::Debug for CachedView<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedView")
            .field("lag", &self.lag)
            .finish_non_exhaustive()
    }
}

impl<D: Domain> CachedView<D> {
    /// How far behind the store this view reads.
    pub fn lag(&self) -> Duration {
        self.lag
    }
}

#[async_trait]
impl<D: Domain> NodeStatusStore<D> for CachedView<D> {
    /// Reads `node`'s status as it was [`lag`](CachedView::lag) ago: deliberately stale.
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError> {
        let s = self.store.inner.lock();
        s.as_of(node, self.lag).ok_or_else(StoreError::not_found)
    }

    async fn write(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        // A cache reads no facts fresh: the default `write_reading_facts` answers none.
        self.store
            .write_now(node, attached, expected, false)
            .map(|receipt| receipt.revision)
    }

    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError> {
        let s = self.store.inner.lock();
        Ok(s.history
            .keys()
            .filter_map(|n| s.as_of(n, self.lag).map(|status| (n.clone(), status)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Ids;
    use crate::store::ReportedVolume;
    use crate::volume::Access;

    type D = Ids<String, String, String, u32>;

    fn s(x: &str) -> String {
        x.to_string()
    }

    fn transient() -> BackendError<String> {
        BackendError::transient(s("503"))
    }

    fn uncertain() -> BackendError<String> {
        BackendError::uncertain(s("timeout"))
    }

    #[tokio::test]
    async fn attach_detach_and_counters() {
        let backend = MemoryBackend::<D>::new();
        let handle = backend.clone();
        let (v, n) = (s("vol-1"), s("node-a"));

        let info = backend.attach(&v, &n, &1).await.unwrap();
        assert_eq!(info.device.as_deref(), Some("/dev/disk/by-id/vol-1"));
        assert!(handle.is_attached(&v, &n));
        // Idempotent.
        backend.attach(&v, &n, &1).await.unwrap();
        assert_eq!(handle.attachments(), vec![(v.clone(), n.clone())]);

        backend.detach(&v, &n, &1).await.unwrap();
        backend.detach(&v, &n, &1).await.unwrap();
        assert!(!handle.is_attached(&v, &n));
        assert!(handle.attachments().is_empty());

        assert_eq!(handle.calls(BackendOp::Attach, &v, &n), 2);
        assert_eq!(handle.calls(BackendOp::Detach, &v, &n), 2);
        assert_eq!(handle.calls(BackendOp::Attach, &v, &s("node-b")), 0);
        assert_eq!(handle.total_calls(BackendOp::Attach), 2);
        assert_eq!(handle.total_calls(BackendOp::List), 0);
    }

    #[tokio::test]
    async fn does_not_protect_single_node_volumes() {
        let backend = MemoryBackend::<D>::new();
        let v = s("vol-1");
        backend.set_spec(v.clone(), VolumeSpec::single_node(0));
        backend.attach(&v, &s("node-b"), &0).await.unwrap();
        backend.attach(&v, &s("node-a"), &0).await.unwrap();
        assert_eq!(backend.nodes_of(&v), vec![s("node-a"), s("node-b")]);
        assert_eq!(
            backend.attachments(),
            vec![(v.clone(), s("node-a")), (v, s("node-b"))]
        );
    }

    #[tokio::test]
    async fn transient_fault_does_nothing_and_counts_down() {
        let backend = MemoryBackend::<D>::new();
        let (v, n) = (s("vol-1"), s("node-a"));
        backend.fail_next(BackendOp::Attach, v.clone(), n.clone(), 2, transient());

        // Another volume is not affected.
        backend.attach(&s("vol-2"), &n, &0).await.unwrap();
        assert_eq!(backend.attach(&v, &n, &0).await, Err(transient()));
        assert!(!backend.is_attached(&v, &n));
        assert_eq!(backend.attach(&v, &n, &0).await, Err(transient()));
        assert!(!backend.is_attached(&v, &n));
        backend.attach(&v, &n, &0).await.unwrap();
        assert!(backend.is_attached(&v, &n));
        assert_eq!(backend.calls(BackendOp::Attach, &v, &n), 3);
    }

    #[tokio::test]
    async fn uncertain_fault_takes_effect_then_errors() {
        let backend = MemoryBackend::<D>::new();
        let (v, n) = (s("vol-1"), s("node-a"));
        backend.fail_next(BackendOp::Attach, v.clone(), n.clone(), 1, uncertain());
        assert_eq!(backend.attach(&v, &n, &0).await, Err(uncertain()));
        assert!(backend.is_attached(&v, &n));

        backend.fail_next(BackendOp::Detach, None, None, 1, uncertain());
        assert_eq!(backend.detach(&v, &n, &0).await, Err(uncertain()));
        assert!(!backend.is_attached(&v, &n));

        backend.fail_next(BackendOp::Detach, None, n.clone(), 1, transient());
        backend.insert(v.clone(), n.clone(), VolumeSpec::single_node(0));
        assert_eq!(backend.detach(&v, &n, &0).await, Err(transient()));
        assert!(backend.is_attached(&v, &n));
    }

    #[tokio::test]
    async fn attached_elsewhere_fault_attaches_nothing() {
        let backend = MemoryBackend::<D>::new();
        let (v, n) = (s("vol-1"), s("node-a"));
        let elsewhere = BackendError::attached_elsewhere(s("node-b"), s("in use"));
        backend.fail_next(BackendOp::Attach, v.clone(), None, 1, elsewhere.clone());
        assert_eq!(backend.attach(&v, &n, &0).await, Err(elsewhere));
        assert!(backend.attachments().is_empty());
    }

    #[tokio::test]
    async fn verify_returns_the_attached_subset() {
        let backend = MemoryBackend::<D>::new();
        let n = s("node-a");
        backend.insert(s("vol-1"), n.clone(), VolumeSpec::single_node(1));
        backend.insert(s("vol-3"), n.clone(), VolumeSpec::single_node(3));
        backend.insert(s("vol-2"), s("node-b"), VolumeSpec::single_node(2));
        let asked = [(s("vol-3"), 3), (s("vol-2"), 2), (s("vol-1"), 1)];
        assert_eq!(
            backend.verify(&n, &asked).await.unwrap(),
            vec![s("vol-3"), s("vol-1")]
        );
        assert_eq!(backend.calls(BackendOp::Verify, &s("vol-2"), &n), 1);
        assert_eq!(backend.total_calls(BackendOp::Verify), 1);

        backend.fail_next(BackendOp::Verify, s("vol-2"), None, 1, transient());
        assert_eq!(
            backend.verify(&n, &asked[..1]).await.unwrap(),
            vec![s("vol-3")]
        );
        assert_eq!(backend.verify(&n, &asked).await, Err(transient()));
        assert_eq!(backend.verify(&n, &[]).await, Ok(vec![]));
    }

    #[tokio::test]
    async fn list_reports_specs() {
        let backend = MemoryBackend::<D>::new();
        backend.insert(s("vol-1"), s("node-b"), VolumeSpec::multi_node(1));
        backend.insert(s("vol-1"), s("node-a"), VolumeSpec::multi_node(1));
        backend.attach(&s("vol-2"), &s("node-a"), &2).await.unwrap();
        backend.set_spec(s("vol-3"), VolumeSpec::multi_node(0));
        backend.attach(&s("vol-3"), &s("node-c"), &3).await.unwrap();

        let listed = backend.list().await.unwrap();
        let summary: Vec<_> = listed
            .iter()
            .map(|a| {
                (
                    a.volume.as_str(),
                    a.node.as_str(),
                    a.spec.access,
                    a.spec.payload,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("vol-1", "node-a", Access::MultiNode, 1),
                ("vol-1", "node-b", Access::MultiNode, 1),
                ("vol-2", "node-a", Access::SingleNode, 2),
                ("vol-3", "node-c", Access::MultiNode, 3),
            ]
        );

        backend.fail_next(BackendOp::List, None, None, 1, transient());
        assert_eq!(backend.list().await, Err(transient()));
        assert_eq!(backend.list().await.unwrap().len(), 4);
        assert_eq!(backend.total_calls(BackendOp::List), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_delays_the_effect() {
        let backend = MemoryBackend::<D>::new().with_latency(Duration::from_secs(2));
        let (v, n) = (s("vol-1"), s("node-a"));
        let task = tokio::spawn({
            let backend = backend.clone();
            let (v, n) = (v.clone(), n.clone());
            async move { backend.attach(&v, &n, &0).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(backend.calls(BackendOp::Attach, &v, &n), 1);
        assert!(!backend.is_attached(&v, &n));
        tokio::time::sleep(Duration::from_secs(1)).await;
        task.await.unwrap().unwrap();
        assert!(backend.is_attached(&v, &n));
    }

    #[tokio::test]
    async fn memory_types_work_as_trait_objects() {
        let backend: Arc<dyn AttachBackend<D>> = Arc::new(MemoryBackend::<D>::new());
        let store: Arc<dyn NodeStatusStore<D>> = Arc::new(MemoryStore::<D>::new());
        assert!(backend.list().await.unwrap().is_empty());
        assert!(store.list().await.unwrap().is_empty());
    }

    fn reported(v: &str) -> ReportedVolume<D> {
        ReportedVolume {
            volume: s(v),
            device: Some(MemoryBackend::<D>::device_path(&s(v)).into()),
        }
    }

    #[tokio::test]
    async fn compare_and_set() {
        let store = MemoryStore::<D>::new();
        let n = s("node-a");
        store.add_node(n.clone());
        let first = store.read(&n).await.unwrap();
        assert!(first.attached.is_empty());

        let second = store
            .write(&n, &[reported("vol-1")].into(), first.revision.clone())
            .await
            .unwrap();
        assert_ne!(second, first.revision);
        assert_eq!(
            store.write(&n, &[].into(), first.revision).await,
            Err(StoreError::conflict(second.clone()))
        );
        let now = store.read(&n).await.unwrap();
        assert_eq!(now.attached, vec![reported("vol-1")]);
        assert_eq!(now.revision, second);
        assert_eq!(store.writes(&n), 2);

        // Adding an existing node changes nothing; revisions are global.
        store.add_node(n.clone());
        assert_eq!(store.status(&n).unwrap().revision, second);
        store.add_node(s("node-b"));
        assert_ne!(store.status(&s("node-b")).unwrap().revision, second);
    }

    #[tokio::test]
    async fn with_status_reads_in_place() {
        let store = MemoryStore::<D>::new();
        let n = s("node-a");
        assert!(!store.with_status(&n, |status| status.is_some()));
        store.add_node(n.clone());
        let rev = store.read(&n).await.unwrap().revision;
        let written = store
            .write(&n, &[reported("vol-1")].into(), rev.clone())
            .await
            .unwrap();
        store.set_in_use(&n, vec![s("vol-1")]);
        let lists = |v: &str| {
            store.with_status(&n, |status| {
                status.is_some_and(|st| st.attached.iter().any(|r| r.volume == v))
            })
        };
        assert!(lists("vol-1") && !lists("vol-2"));
        // Setting in use kept the list, moved the revision on, and is what a read sees.
        let read = store.read(&n).await.unwrap();
        assert_eq!(read.attached, vec![reported("vol-1")]);
        assert_eq!(read.in_use, Some(vec![s("vol-1")]));
        assert_ne!(read.revision, rev);
        assert_ne!(read.revision, written);
        assert_eq!(store.with_status(&n, |st| st.cloned()), Some(read));
    }

    /// The store keeps a written list as given and copies it into the status when read: every
    /// way of reading sees the last list written, and a write keeps the node's other facts.
    #[tokio::test(start_paused = true)]
    async fn a_written_list_is_what_every_read_sees() {
        let store = MemoryStore::<D>::new();
        let view = store.cached(Duration::from_secs(1));
        let n = s("node-a");
        store.add_node(n.clone());
        store.set_in_use(&n, vec![s("vol-2")]);
        store.set_fenced(&n, true);
        let mut rev = store.read(&n).await.unwrap().revision;
        // Two writes with no read between them: the second list replaces the first whole.
        for list in [
            vec![reported("vol-1")],
            vec![reported("vol-2"), reported("vol-3")],
        ] {
            rev = store
                .write_reading_facts(&n, &list.into(), rev)
                .await
                .unwrap()
                .revision;
        }
        let want = vec![reported("vol-2"), reported("vol-3")];
        let read = store.read(&n).await.unwrap();
        assert_eq!((&read.attached, &read.revision), (&want, &rev));
        assert_eq!(read.in_use, Some(vec![s("vol-2")]));
        assert_eq!(read.fenced, Some(true));
        assert_eq!(store.list().await.unwrap(), vec![(n.clone(), read.clone())]);
        assert_eq!(store.status(&n), Some(read.clone()));
        assert_eq!(store.with_status(&n, |st| st.cloned()), Some(read.clone()));
        // The lagging view recorded each write's whole list as it landed.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(view.read(&n).await.unwrap(), read);
        // Another party's update keeps the written list.
        store.set_healthy(&n, false);
        assert_eq!(store.read(&n).await.unwrap().attached, want);
    }

    #[tokio::test]
    async fn removed_nodes_are_not_found() {
        let store = MemoryStore::<D>::new();
        let n = s("node-a");
        store.add_node(n.clone());
        store.add_node(s("node-b"));
        let old = store.read(&n).await.unwrap();
        store.remove_node(&n);
        assert_eq!(store.read(&n).await, Err(StoreError::not_found()));
        assert_eq!(
            store.write(&n, &[].into(), old.revision.clone()).await,
            Err(StoreError::not_found())
        );
        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, s("node-b"));

        // Re-added, the node gets a fresh revision: the old writer conflicts.
        store.add_node(n.clone());
        assert!(matches!(
            store.write(&n, &[].into(), old.revision).await,
            Err(StoreError::Conflict { .. })
        ));
    }

    #[tokio::test]
    async fn injected_write_faults_write_nothing() {
        let store = MemoryStore::<D>::new();
        let (a, b) = (s("node-a"), s("node-b"));
        store.add_node(a.clone());
        store.add_node(b.clone());
        let err = StoreError::transient(s("etcd leader lost"));
        store.fail_next_write(a.clone(), 2, err.clone());
        let rev = store.read(&a).await.unwrap().revision;

        let rev_b = store.read(&b).await.unwrap().revision;
        let rev_b = store
            .write(&b, &[reported("vol-9")].into(), rev_b)
            .await
            .unwrap();
        assert_eq!(
            store
                .write(&a, &[reported("vol-1")].into(), rev.clone())
                .await,
            Err(err.clone())
        );
        assert_eq!(
            store
                .write(&a, &[reported("vol-1")].into(), rev.clone())
                .await,
            Err(err)
        );
        assert_eq!(store.status(&a).unwrap().revision, rev.clone());
        assert!(store.status(&a).unwrap().attached.is_empty());
        store
            .write(&a, &[reported("vol-1")].into(), rev)
            .await
            .unwrap();
        assert_eq!(store.writes(&a), 3);
        assert_eq!(store.writes(&b), 1);

        store.fail_next_write(None, 1, StoreError::not_found());
        assert_eq!(
            store.write(&b, &[].into(), rev_b).await,
            Err(StoreError::not_found())
        );
    }

    #[tokio::test]
    async fn uncertain_write_fault_lands_then_errors() {
        let store = MemoryStore::<D>::new();
        let n = s("node-a");
        store.add_node(n.clone());
        let rev = store.read(&n).await.unwrap().revision;
        let timeout = StoreError::uncertain("timeout");
        store.fail_next_write(n.clone(), 2, timeout.clone());
        // The write lands although the caller hears of a timeout...
        assert_eq!(
            store
                .write(&n, &[reported("vol-1")].into(), rev.clone())
                .await,
            Err(timeout.clone())
        );
        let now = store.status(&n).unwrap();
        assert_eq!(now.attached, vec![reported("vol-1")]);
        assert_ne!(now.revision, rev);
        // ...and a write against a revision that no longer holds still changes nothing.
        assert_eq!(store.write(&n, &[].into(), rev).await, Err(timeout));
        assert_eq!(store.status(&n).unwrap(), now);
        assert_eq!(store.writes(&n), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cached_view_lags_then_catches_up() {
        let store = MemoryStore::<D>::new();
        let cache = store.cached(Duration::from_secs(5));
        assert_eq!(cache.lag(), Duration::from_secs(5));
        let n = s("node-a");
        store.add_node(n.clone());
        assert_eq!(cache.read(&n).await, Err(StoreError::not_found()));
        assert!(cache.list().await.unwrap().is_empty());

        tokio::time::advance(Duration::from_secs(5)).await;
        let seen = cache.read(&n).await.unwrap();
        assert!(seen.attached.is_empty());

        // A write through the view lands in the store at once...
        let fresh = store.read(&n).await.unwrap();
        let rev = cache
            .write(&n, &[reported("vol-1")].into(), fresh.revision)
            .await
            .unwrap();
        assert_eq!(store.status(&n).unwrap().revision, rev.clone());
        // ...but the view keeps showing the old status for the lag.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(cache.read(&n).await.unwrap(), seen);
        // Writing against the stale revision conflicts instead of erasing vol-1.
        assert_eq!(
            cache.write(&n, &[].into(), seen.revision).await,
            Err(StoreError::conflict(rev.clone()))
        );

        tokio::time::advance(Duration::from_secs(2)).await;
        let caught_up = cache.read(&n).await.unwrap();
        assert_eq!(caught_up.attached, vec![reported("vol-1")]);
        assert_eq!(caught_up.revision, rev);
        assert_eq!(cache.list().await.unwrap(), vec![(n.clone(), caught_up)]);

        // Removal shows up late too.
        store.remove_node(&n);
        assert!(cache.read(&n).await.is_ok());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(cache.read(&n).await, Err(StoreError::not_found()));
    }

    #[tokio::test(start_paused = true)]
    async fn history_is_trimmed_to_the_largest_lag() {
        let store = MemoryStore::<D>::new();
        let _cache = store.cached(Duration::from_secs(10));
        let n = s("node-a");
        store.add_node(n.clone());
        for _ in 0..100 {
            let rev = store.read(&n).await.unwrap().revision;
            store.write(&n, &[].into(), rev).await.unwrap();
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        let kept = store.inner.lock().history[&n].len();
        // Ten seconds of one write a second, plus the entry the laggiest view sits on.
        assert!(kept <= 12, "kept {kept} entries");

        // Without any view, no history at all; a view made later starts from the present.
        let plain = MemoryStore::<D>::new();
        plain.add_node(n.clone());
        for _ in 0..10 {
            let rev = plain.read(&n).await.unwrap().revision;
            plain.write(&n, &[].into(), rev).await.unwrap();
        }
        assert!(plain.inner.lock().history.is_empty());
        let late = plain.cached(Duration::ZERO);
        assert_eq!(late.read(&n).await, plain.read(&n).await);
    }
}
