//! Writes each node's reported list to the store with compare-and-set, never trusting a cache
//! (correction C6, upstream 122413).

use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tracing::debug;

use super::deadline::{Deadlines, no_answer};
use super::metrics::Metrics;
use crate::config::{CallKind, CallTimeouts};
use crate::domain::Domain;
use crate::event::Event;
use crate::operation::ForceReason;
use crate::store::{NodeStatus, NodeStatusStore, ReportedVolume, Revision, StoreError};

/// How a [`StatusWriter::write`] succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The store took the list; `attempts` counts the compare-and-set calls it needed.
    Written {
        /// The node's new revision.
        revision: Revision,
        /// Write calls made, conflicts included.
        attempts: u32,
    },
    /// A fresh read showed the store already holds the list.
    AlreadyCurrent {
        /// The revision read.
        revision: Revision,
    },
    /// Upstream's bug (only with [`StatusWriter::diff_against`]): a read from the diff source,
    /// which may be stale, matched the list, so nothing was written.
    SkippedStale,
}

/// The list the store holds for a node, as a fresh read found it.
enum Fresh {
    Matches(Revision),
    Differs(Revision),
}

/// Whether two reported lists hold the same volumes with the same devices, in any order.
fn same_list<D: Domain>(a: &[ReportedVolume<D>], b: &[ReportedVolume<D>]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    fn sorted<D: Domain>(l: &[ReportedVolume<D>]) -> Vec<&ReportedVolume<D>> {
        let mut l: Vec<_> = l.iter().collect();
        l.sort_by(|x, y| x.volume.cmp(&y.volume));
        l
    }
    sorted(a) == sorted(b)
}

/// Executes [`Operation::WriteStatus`](crate::Operation::WriteStatus): makes the store list
/// exactly the given volumes for a node.
///
/// Upstream computes a patch against an informer copy of the node and skips the write when the
/// patch is empty; when the copy lags behind a write of its own, the skip loses a volume forever
/// (122413). This writer instead remembers, per node, the revision of its own acknowledged write
/// (or of a fresh read) and writes against it with compare-and-set. A conflict means someone
/// else wrote: it reads fresh and retries, at most [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS) times.
/// The only "nothing to write" it ever concludes comes from a fresh read.
///
/// The core already serialises writes per node and only asks for a write when the list changed
/// or is unknown, so the writer is shared by every write task and needs no queue of its own.
///
/// Every store call has a deadline ([`CallTimeouts::status_read`] and
/// [`CallTimeouts::status_write`], the defaults unless [`with_timeouts`](Self::with_timeouts)
/// says otherwise); a read without an answer by then fails as [`StoreError::Transient`], a
/// write as [`StoreError::Uncertain`], as it may still land: the writer keeps the revision it
/// wrote against, so its next write conflicts, reads fresh and finds out. The deadlines need a
/// tokio runtime with its time driver enabled.
///
/// ```
/// use std::sync::Arc;
/// use attach_detach::{Ids, MemoryStore, ReportedVolume, StatusWriter, WriteOutcome};
/// type D = Ids<String, String, String, ()>;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::<D>::new();
/// let node = "node-a".to_string();
/// store.add_node(node.clone());
/// let writer = StatusWriter::new(Arc::new(store.clone()));
/// let list = vec![ReportedVolume { volume: "vol-1".to_string(), device: None }];
/// // No revision known yet: a fresh read provides one, then the write lands.
/// let outcome = writer.write(&node, &list).await.unwrap();
/// assert!(matches!(outcome, WriteOutcome::Written { attempts: 1, .. }));
/// assert_eq!(store.status(&node).unwrap().attached, list);
/// # });
/// ```
pub struct StatusWriter<D: Domain> {
    store: Arc<dyn NodeStatusStore<D>>,
    /// Upstream C6: where the skip-if-equal read comes from.
    diff_source: Option<Arc<dyn NodeStatusStore<D>>>,
    revisions: Mutex<FxHashMap<D::Node, Revision>>,
    metrics: Option<Arc<Metrics>>,
    deadlines: Deadlines<D>,
}

impl<D: Domain> std::fmt::Debug for StatusWriter<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("revisions", &*self.revisions.lock())
            .field("diff_source", &self.diff_source.is_some())
            .field("timeouts", &self.deadlines.limits())
            .finish_non_exhaustive()
    }
}

impl<D: Domain> StatusWriter<D> {
    /// Compare-and-set write calls per [`write`](Self::write) before a persistent conflict is
    /// returned as an error (the core then backs off).
    pub const MAX_ATTEMPTS: u32 = 3;

    /// A writer to `store` that knows no revision yet.
    pub fn new(store: Arc<dyn NodeStatusStore<D>>) -> Self {
        StatusWriter {
            store,
            diff_source: None,
            revisions: Mutex::new(FxHashMap::default()),
            metrics: None,
            deadlines: Deadlines::new(CallTimeouts::default()),
        }
    }

    /// Puts back upstream's bug C6 (122413): before writing, read the node from `source` (e.g. an
    /// informer cache, [`MemoryStore::cached`](crate::MemoryStore::cached)) and skip the write
    /// when that read already matches. For regression tests and incident replays only.
    pub fn diff_against(mut self, source: Arc<dyn NodeStatusStore<D>>) -> Self {
        self.diff_source = Some(source);
        self
    }

    /// Counts store calls, skips and timeouts in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.deadlines.set_metrics(Arc::clone(&metrics));
        self.metrics = Some(metrics);
        self
    }

    /// Gives each store read and write the deadline `timeouts` sets for it (`status_read`,
    /// `status_write`; the other settings are not used here).
    pub fn with_timeouts(mut self, timeouts: CallTimeouts) -> Self {
        self.deadlines.set_limits(timeouts);
        self
    }

    /// Sends an [`Event::CallTimedOut`] to `events` for each store call that misses its deadline.
    pub(crate) fn report_timeouts_to(mut self, events: mpsc::UnboundedSender<Event<D>>) -> Self {
        self.deadlines.set_events(events);
        self
    }

    /// Remembers that the store held `node` at `revision`, e.g. from a fresh list at recovery.
    pub fn seed(&self, node: D::Node, revision: Revision) {
        self.revisions.lock().insert(node, revision);
    }

    /// The revision the next write of `node` will be conditional on, if known.
    pub fn revision(&self, node: &D::Node) -> Option<Revision> {
        self.revisions.lock().get(node).cloned()
    }

    /// Forgets `node`'s revision: its next write starts with a fresh read.
    pub fn forget(&self, node: &D::Node) {
        self.revisions.lock().remove(node);
    }

    fn count(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.metrics {
            f(m);
        }
    }

    /// Upstream's verify-safe-to-detach, extended to forced detaches: reads `node` fresh right
    /// before the detach and refuses unless what it reads justifies the call.
    ///
    /// The core decides from its own view of the node, which can be older than a mount that
    /// started before the volume left the node's status, or than a fence lifted since. The
    /// removal is acknowledged before any detach is planned (C5), and an agent reports a volume
    /// in use before mounting it, so a fresh read taken now sees every mount that could still
    /// happen. A detach may go ahead when the fresh read shows that:
    ///
    /// - the node is fenced (`fenced: Some(true)`): it can no longer write, whatever it reports;
    /// - or its agent reports in-use volumes and `volume` is not among them;
    /// - or, for a detach forced by the unmount timeout (opt-in), the node is not known healthy;
    /// - or the store has no such node (as upstream: no node object, no agent to protect).
    ///
    /// So an unforced detach from a store that holds no in-use report (`in_use: None`) is
    /// refused, and so is an out-of-service detach from a node whose fence was lifted while it
    /// still mounts the volume: a cache of unknown age decides nothing irreversible.
    pub async fn verify_safe_to_detach(
        &self,
        node: &D::Node,
        volume: &D::Volume,
        force: Option<ForceReason>,
    ) -> Result<(), String> {
        let status = match self.read(node).await {
            Ok(status) => status,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(error) => {
                return Err(format!(
                    "not safe to detach: cannot read node {node:?} to check it does not use volume {volume:?}: {error}"
                ));
            }
        };
        if status.fenced == Some(true) {
            return Ok(());
        }
        let in_use = match &status.in_use {
            Some(list) if !list.contains(volume) => return Ok(()),
            Some(_) => "reports it in use",
            None => "has no in-use report in the store",
        };
        if force == Some(ForceReason::Timeout) && status.healthy != Some(true) {
            return Ok(());
        }
        let why = match force {
            None => String::new(),
            Some(ForceReason::OutOfService) => {
                " and is no longer fenced (the fence the detach was planned on is stale)".into()
            }
            Some(ForceReason::Timeout) => " and is healthy again".into(),
            Some(ForceReason::NodeDeleted) => " and exists again".into(),
        };
        Err(format!(
            "not safe to detach volume {volume:?}: node {node:?} {in_use}{why}"
        ))
    }

    /// Makes the store list exactly `attached` for `node`.
    ///
    /// Errors: [`StoreError::NotFound`] when the node is gone (its revision is forgotten, so a
    /// node recreated under the same name is read afresh: upstream 50721);
    /// [`StoreError::Conflict`] when [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS) writes all lost a race;
    /// [`StoreError::Transient`] or [`StoreError::Uncertain`] as the store returned it, or when a
    /// read (transient) or a write (uncertain) got no answer within its deadline. After any error
    /// the caller must treat what the store holds as unknown.
    pub async fn write(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
    ) -> Result<WriteOutcome, StoreError> {
        if let Some(source) = &self.diff_source {
            // C6, upstream's bug: trust a read of unknown age.
            if let Ok(seen) = self.read_from(source.as_ref(), node).await {
                if same_list(&seen.attached, attached) {
                    self.count(Metrics::status_write_skipped_stale);
                    return Ok(WriteOutcome::SkippedStale);
                }
            }
        }
        let mut expected = match self.revision(node) {
            Some(revision) => revision,
            None => match self.read_fresh(node, attached).await? {
                Fresh::Matches(revision) => return Ok(WriteOutcome::AlreadyCurrent { revision }),
                Fresh::Differs(revision) => revision,
            },
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            self.count(Metrics::store_write);
            match self.write_once(node, attached, expected.clone()).await {
                Ok(revision) => {
                    self.seed(node.clone(), revision.clone());
                    return Ok(WriteOutcome::Written { revision, attempts });
                }
                Err(error @ StoreError::NotFound { .. }) => {
                    self.forget(node);
                    return Err(error);
                }
                Err(error @ StoreError::Conflict { .. }) => {
                    self.count(Metrics::store_write_conflict);
                    debug!(node = ?node, %expected, %error, attempts, "status write conflicted");
                    if attempts >= Self::MAX_ATTEMPTS {
                        self.forget(node);
                        return Err(error);
                    }
                    match self.read_fresh(node, attached).await? {
                        Fresh::Matches(revision) => {
                            return Ok(WriteOutcome::AlreadyCurrent { revision });
                        }
                        Fresh::Differs(revision) => expected = revision,
                    }
                }
                // Did nothing, or (a timeout) may have landed: keep the revision either way. If it
                // landed, the next write conflicts on it and reads fresh.
                Err(e @ (StoreError::Transient { .. } | StoreError::Uncertain { .. })) => {
                    return Err(e);
                }
            }
        }
    }

    /// One read of `node` from the store itself, within its deadline.
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError> {
        self.read_from(self.store.as_ref(), node).await
    }

    /// One read of `node` from `store`, within its deadline.
    async fn read_from(
        &self,
        store: &dyn NodeStatusStore<D>,
        node: &D::Node,
    ) -> Result<NodeStatus<D>, StoreError> {
        let read = store.read(node);
        self.deadlines
            .run(CallKind::StatusRead, Some(node), None, read)
            .await
            .unwrap_or_else(|after| Err(StoreError::transient(no_answer(after))))
    }

    /// One compare-and-set write of `node`, within its deadline.
    async fn write_once(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        let write = self.store.write(node, attached, expected);
        self.deadlines
            .run(CallKind::StatusWrite, Some(node), None, write)
            .await
            .unwrap_or_else(|after| Err(StoreError::uncertain(no_answer(after))))
    }

    /// Reads `node` from the store itself and remembers the revision read.
    async fn read_fresh(
        &self,
        node: &D::Node,
        attached: &[ReportedVolume<D>],
    ) -> Result<Fresh, StoreError> {
        let status = match self.read(node).await {
            Ok(status) => status,
            Err(e) => {
                if matches!(e, StoreError::NotFound { .. }) {
                    self.forget(node);
                }
                return Err(e);
            }
        };
        self.seed(node.clone(), status.revision.clone());
        if same_list(&status.attached, attached) {
            self.count(Metrics::status_write_unneeded);
            Ok(Fresh::Matches(status.revision))
        } else {
            Ok(Fresh::Differs(status.revision))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mockall::Sequence;

    use super::*;
    use crate::domain::Ids;
    use crate::memory::MemoryStore;
    use crate::store::{MockNodeStatusStore, NodeStatus};

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    fn rv(v: &'static str) -> ReportedVolume<D> {
        ReportedVolume {
            volume: v,
            device: Some(format!("/dev/{v}").into()),
        }
    }

    fn status(rev: u64, vols: &[&'static str]) -> NodeStatus<D> {
        NodeStatus {
            attached: vols.iter().copied().map(rv).collect(),
            in_use: None,
            fenced: None,
            healthy: None,
            revision: Revision::from(rev),
        }
    }

    #[test]
    fn lists_compare_as_sets_with_devices() {
        assert!(same_list::<D>(&[rv("a"), rv("b")], &[rv("b"), rv("a")]));
        assert!(!same_list::<D>(&[rv("a")], &[rv("a"), rv("b")]));
        let other_device = ReportedVolume {
            volume: "a",
            device: None,
        };
        assert!(!same_list::<D>(&[rv("a")], &[other_device]));
    }

    #[tokio::test]
    async fn writes_against_its_own_last_revision_without_reading() {
        let mut store = MockNodeStatusStore::<D>::new();
        let mut seq = Sequence::new();
        store
            .expect_write()
            .withf(|n, l, r| *n == "node-a" && l.len() == 1 && *r == Revision::from(4))
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Ok(Revision::from(9)));
        store
            .expect_write()
            .withf(|_, l, r| l.is_empty() && *r == Revision::from(9))
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Ok(Revision::from(12)));
        store.expect_read().never();
        let writer = StatusWriter::new(Arc::new(store));
        writer.seed("node-a", Revision::from(4));
        assert_eq!(
            writer.write(&"node-a", &[rv("v")]).await,
            Ok(WriteOutcome::Written {
                revision: Revision::from(9),
                attempts: 1
            })
        );
        writer.write(&"node-a", &[]).await.unwrap();
        assert_eq!(writer.revision(&"node-a"), Some(Revision::from(12)));
    }

    #[tokio::test]
    async fn conflict_reads_fresh_and_retries_on_the_new_revision() {
        let mut store = MockNodeStatusStore::<D>::new();
        let mut seq = Sequence::new();
        store
            .expect_write()
            .withf(|_, _, r| *r == Revision::from(1))
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Err(StoreError::conflict(Revision::from(5))));
        store
            .expect_read()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_| Ok(status(5, &["other"])));
        store
            .expect_write()
            .withf(|_, _, r| *r == Revision::from(5))
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Ok(Revision::from(6)));
        let metrics = Arc::new(Metrics::default());
        let writer = StatusWriter::new(Arc::new(store)).with_metrics(metrics.clone());
        writer.seed("node-a", Revision::from(1));
        assert_eq!(
            writer.write(&"node-a", &[rv("v")]).await,
            Ok(WriteOutcome::Written {
                revision: Revision::from(6),
                attempts: 2
            })
        );
        let m = metrics.snapshot();
        assert_eq!((m.store_writes, m.store_write_conflicts), (2, 1));
    }

    #[tokio::test]
    async fn conflict_with_the_wanted_list_already_stored_is_success() {
        let mut store = MockNodeStatusStore::<D>::new();
        store
            .expect_write()
            .times(1)
            .returning(|_, _, _| Err(StoreError::conflict(Revision::from(5))));
        store
            .expect_read()
            .times(1)
            .returning(|_| Ok(status(5, &["v"])));
        let writer = StatusWriter::new(Arc::new(store));
        writer.seed("node-a", Revision::from(1));
        assert_eq!(
            writer.write(&"node-a", &[rv("v")]).await,
            Ok(WriteOutcome::AlreadyCurrent {
                revision: Revision::from(5)
            })
        );
        assert_eq!(writer.revision(&"node-a"), Some(Revision::from(5)));
    }

    #[tokio::test]
    async fn conflicts_are_bounded_and_the_revision_forgotten() {
        let mut store = MockNodeStatusStore::<D>::new();
        store
            .expect_write()
            .times(StatusWriter::<D>::MAX_ATTEMPTS as usize)
            .returning(|_, _, r| Err(StoreError::conflict(r.plus(1))));
        let reads = std::sync::atomic::AtomicU64::new(1);
        store.expect_read().times(2).returning(move |_| {
            let r = reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(status(r * 10, &[]))
        });
        let writer = StatusWriter::new(Arc::new(store));
        writer.seed("node-a", Revision::from(1));
        assert_eq!(
            writer.write(&"node-a", &[rv("v")]).await,
            Err(StoreError::conflict(Revision::from(21)))
        );
        assert_eq!(writer.revision(&"node-a"), None);
    }

    #[tokio::test]
    async fn not_found_forgets_the_revision_and_transient_keeps_it() {
        let mut store = MockNodeStatusStore::<D>::new();
        let mut seq = Sequence::new();
        store
            .expect_write()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Err(StoreError::transient("etcd")));
        store
            .expect_write()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Err(StoreError::not_found()));
        store
            .expect_read()
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_| Err(StoreError::not_found()));
        let writer = StatusWriter::new(Arc::new(store));
        writer.seed("node-a", Revision::from(3));
        assert!(matches!(
            writer.write(&"node-a", &[]).await,
            Err(StoreError::Transient { .. })
        ));
        assert_eq!(writer.revision(&"node-a"), Some(Revision::from(3)));
        assert_eq!(
            writer.write(&"node-a", &[]).await,
            Err(StoreError::not_found())
        );
        assert_eq!(writer.revision(&"node-a"), None);
        // No revision: the next write reads first, and a missing node stays missing.
        assert_eq!(
            writer.write(&"node-a", &[]).await,
            Err(StoreError::not_found())
        );
    }

    /// Seed 002 at the writer's level: remove a volume from the node's status, then list it again
    /// within the cache's lag. Returns what the store lists at the end.
    async fn remove_then_readd(stale_diff: bool) -> Vec<ReportedVolume<D>> {
        let store = MemoryStore::<D>::new();
        let informer = store.cached(Duration::from_secs(5));
        store.add_node("node-a");
        let mut writer = StatusWriter::new(Arc::new(store.clone()));
        if stale_diff {
            writer = writer.diff_against(Arc::new(informer));
        }
        writer.write(&"node-a", &[rv("v")]).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await; // the informer catches up
        writer.write(&"node-a", &[]).await.unwrap(); // workload deleted: stop reporting
        assert!(store.status(&"node-a").unwrap().attached.is_empty());
        tokio::time::sleep(Duration::from_secs(1)).await; // detach, workload back, attach
        writer.write(&"node-a", &[rv("v")]).await.unwrap();
        store.status(&"node-a").unwrap().attached
    }

    /// A store that never answers.
    struct Silent;

    #[async_trait::async_trait]
    impl NodeStatusStore<D> for Silent {
        async fn read(&self, _: &&'static str) -> Result<NodeStatus<D>, StoreError> {
            std::future::pending().await
        }
        async fn write(
            &self,
            _: &&'static str,
            _: &[ReportedVolume<D>],
            _: Revision,
        ) -> Result<Revision, StoreError> {
            std::future::pending().await
        }
        async fn list(&self) -> Result<Vec<(&'static str, NodeStatus<D>)>, StoreError> {
            std::future::pending().await
        }
    }

    /// Awaits `call`, failing the test if it takes an hour: without deadlines, it never ends.
    async fn within_an_hour<T>(call: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(3600), call)
            .await
            .expect("the writer gave up on the hung store by its deadline")
    }

    fn no_answer_within(secs: u64) -> String {
        format!("no answer within {secs}s")
    }

    #[tokio::test(start_paused = true)]
    async fn hung_reads_fail_as_transient_and_hung_writes_as_uncertain() {
        let metrics = Arc::new(Metrics::default());
        let writer = StatusWriter::<D>::new(Arc::new(Silent))
            .with_metrics(Arc::clone(&metrics))
            .with_timeouts(CallTimeouts {
                status_read: Duration::from_secs(7),
                ..CallTimeouts::default()
            });
        // No revision known: the fresh read hangs.
        let start = tokio::time::Instant::now();
        assert_eq!(
            within_an_hour(writer.write(&"node-a", &[rv("v")])).await,
            Err(StoreError::transient(no_answer_within(7)))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        assert_eq!(writer.revision(&"node-a"), None);
        // A revision known: the write hangs, may still land, and the revision is kept (if the
        // write landed after all, the next one conflicts on it and reads fresh).
        writer.seed("node-a", Revision::from(3));
        let start = tokio::time::Instant::now();
        assert_eq!(
            within_an_hour(writer.write(&"node-a", &[rv("v")])).await,
            Err(StoreError::uncertain(no_answer_within(30)))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(30), "the default");
        assert_eq!(writer.revision(&"node-a"), Some(Revision::from(3)));
        let m = metrics.snapshot();
        assert_eq!((m.timeouts.status_read, m.timeouts.status_write), (1, 1));
        assert_eq!(m.store_writes, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_read_is_not_safe_to_detach() {
        let writer = StatusWriter::<D>::new(Arc::new(Silent));
        let refused = within_an_hour(writer.verify_safe_to_detach(&"node-a", &"v", None)).await;
        assert!(
            refused.as_ref().is_err_and(
                |m| m.contains("cannot read node") && m.contains("no answer within 30s")
            ),
            "{refused:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_diff_source_does_not_stop_the_write() {
        let store = MemoryStore::<D>::new();
        store.add_node("node-a");
        let writer = StatusWriter::new(Arc::new(store.clone())).diff_against(Arc::new(Silent));
        let outcome = within_an_hour(writer.write(&"node-a", &[rv("v")])).await;
        assert!(
            matches!(outcome, Ok(WriteOutcome::Written { .. })),
            "{outcome:?}"
        );
        assert_eq!(store.status(&"node-a").unwrap().attached, vec![rv("v")]);
    }

    #[tokio::test(start_paused = true)]
    async fn seed_002_a_lagging_cache_cannot_hide_a_write() {
        assert_eq!(remove_then_readd(false).await, vec![rv("v")]);
    }

    #[tokio::test(start_paused = true)]
    async fn seed_002_upstream_diff_against_the_cache_loses_the_volume() {
        assert!(
            remove_then_readd(true).await.is_empty(),
            "with C6 the stale cache still lists the volume, so the write is skipped"
        );
    }
}
