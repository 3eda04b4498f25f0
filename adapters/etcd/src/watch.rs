//! etcd's state and watch events under `{prefix}/cluster/`, turned into controller inputs.
//!
//! The watcher lists every key under [`KeyLayout::cluster`] at one revision and hands the
//! listing over as one relist batch per [`Kind`]; then it watches the prefix from the next
//! revision and turns each watch response into inputs. Whenever the watch cannot go on without
//! a gap (etcd compacted the revisions it needed, the stream broke or ended), it lists again:
//! the core's relist inputs remove whatever the new listing no longer shows, so changes lost in
//! the gap (a deletion above all) still reach the controller.

use std::collections::HashMap;
use std::fmt::Display;
use std::marker::PhantomData;
use std::time::Duration;

use crate::client::{
    Client, Error as ClientError, EventType, KeyValue, WatchOptions, WatchResponse, WatchStream,
};
use attach_detach::controller::{ControllerError, ControllerHandle};
use attach_detach::core::{Input, Kind, NodeFacts};
use tracing::{debug, info, warn};

use crate::codec::{EtcdDomain, decode_volume, decode_volumes, decode_workload, parse_id};
use crate::error::{DecodeError, EtcdError};
use crate::layout::{KeyKind, KeyLayout};
use crate::range::read_prefix;

/// How often [`InputWatcher::run`] looks whether the controller stopped while nothing changes
/// in etcd.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Turns etcd's keys under `{prefix}/cluster/` (see [`KeyLayout`]) into controller
/// [`Input`]s: a relist batch first, then the inputs of each watch response, and a relist again
/// whenever the watch breaks or is compacted.
///
/// # What each key becomes
///
/// | key | put | delete |
/// |---|---|---|
/// | `volume/{v}` | [`Input::SetVolume`] | [`Input::VolumeRemoved`] |
/// | `workload/{w}` | [`Input::WorkloadScheduled`] | [`Input::WorkloadRemoved`] |
/// | `node/{n}` | [`Input::NodeUpdated`] with the node's facts | [`Input::NodeRemoved`] |
/// | `in-use/{n}`, `alive/{n}`, `fence/{n}` | [`Input::NodeUpdated`] if the facts changed | the same |
///
/// A node's [`NodeFacts`] are read from its own keys: `healthy` is whether `alive/{n}` exists,
/// `fenced` whether `fence/{n}` exists, `in_use` the decoded `in-use/{n}` list (`None` while
/// there is no such key). The watcher caches these three keys per node, only while at least
/// one of them exists in etcd; facts written before the node's key are kept and sent with the
/// node when its key appears.
///
/// # Values that do not decode
///
/// A value that does not follow the layout never stops the watcher nor costs another key's
/// event: it is skipped with a `warn!` naming the key and counted ([`undecodable`]). What is
/// kept in force instead is the safe side for each kind:
///
/// - a volume or a workload whose value no longer decodes keeps **its previous input in force**:
///   the watcher sends nothing for it, and in later relists it re-sends that previous input (so
///   the relist does not remove it). Removing it instead would make the controller detach the
///   volume (or the workload's volumes) because of a bad write, while the orchestrator still
///   means it to exist. The previous value comes from the watch event's previous key-value
///   (the watch asks for it) and is held only while the key stays undecodable. An object whose
///   value never decoded while watched (at the first listing, or corrupted during a gap that
///   ended in a relist, whose previous value etcd compacted) is unknown to the watcher: it is
///   left out, as if absent.
/// - an `in-use/{n}` list that does not decode counts as *never reported* (`in_use: None`):
///   every volume attached to the node then counts as mounted. Keeping the previous list could
///   understate what the agent mounts now, and permit a detach under a mount.
/// - a key whose id does not parse as the domain's id names nothing the controller can know: it
///   is skipped (a node key, its facts, a volume or a workload alike).
///
/// # Errors and relists
///
/// [`next`](Self::next) returns `Err` when etcd cannot be reached (while listing, starting the
/// watch, or when the watch stream fails) or cancels the watch for a reason other than a
/// compaction: the caller pauses and calls `next` again, and that call lists afresh. A watch
/// compacted past its revision, or a stream etcd ended, is followed by a relist within the same
/// call. The watch starts at the revision after the listing, when the call after the listing is
/// made, so a listing handed over but not followed up before etcd compacted is detected too.
///
/// A watch only fails if its connection does: give the client
/// [`ConnectOptions::with_keep_alive`](crate::client::ConnectOptions::with_keep_alive), so that
/// a connection that died without a reset is noticed, and
/// [`with_require_leader`](crate::client::ConnectOptions::with_require_leader), so that a watch on
/// a member cut off from its cluster's leader fails instead of waiting in silence. A
/// request timeout ([`with_timeout`](crate::client::ConnectOptions::with_timeout)) does not end an
/// idle watch.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach::Ids;
/// use attach_detach_etcd::{InputWatcher, KeyLayout};
/// type D = Ids<String, String, String, ()>;
///
/// let client = attach_detach_etcd::client::Client::connect(["127.0.0.1:2379"], None)?;
/// let mut watcher = InputWatcher::<D>::new(client, KeyLayout::default());
/// let relist = watcher.next().await?;   // RelistStarted ×3, every object, RelistDone ×3
/// let changes = watcher.next().await?;  // what the next watch response changed
/// # let _ = (relist, changes);
/// # Ok(()) }
/// ```
///
/// [`undecodable`]: Self::undecodable
pub struct InputWatcher<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    phase: Phase,
    /// The revision the inputs handed out so far reflect (0 before the first listing).
    revision: i64,
    /// The nodes whose `node/{n}` key exists, by id in the key.
    nodes: HashMap<String, D::Node>,
    /// The `in-use`, `alive` and `fence` keys per node id, while one of them exists.
    facts: HashMap<String, Facts<D::Volume>>,
    /// The last input of each volume and workload whose value no longer decodes.
    held: HashMap<(KeyKind, String), Input<D>>,
    undecodable: u64,
    relists: u64,
    _domain: PhantomData<fn() -> D>,
}

/// Where the watcher is.
enum Phase {
    /// Nothing listed yet, or the watch broke: the next call lists.
    Relist,
    /// Listed up to the watcher's revision: the next call starts a watch from the next one.
    Listed,
    /// Watching.
    Watching(Box<WatchStream>),
}

/// A node's facts as its keys say.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Facts<V> {
    in_use: Option<Vec<V>>,
    alive: bool,
    fenced: bool,
}

impl<V> Default for Facts<V> {
    fn default() -> Self {
        Facts {
            in_use: None,
            alive: false,
            fenced: false,
        }
    }
}

impl<V: Clone> Facts<V> {
    /// No key of the node exists.
    fn is_empty(&self) -> bool {
        self.in_use.is_none() && !self.alive && !self.fenced
    }

    fn node_facts(&self) -> NodeFacts<V> {
        NodeFacts {
            healthy: self.alive,
            fenced: self.fenced,
            in_use: self.in_use.clone(),
            attach_limit: None,
            driver_limits: Vec::new(),
        }
    }
}

impl<D: EtcdDomain> std::fmt::Debug for InputWatcher<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phase = match self.phase {
            Phase::Relist => "relist",
            Phase::Listed => "listed",
            Phase::Watching(_) => "watching",
        };
        f.debug_struct("InputWatcher")
            .field("prefix", &self.layout.prefix())
            .field("phase", &phase)
            .field("revision", &self.revision)
            .field("nodes", &self.nodes.len())
            .field("undecodable", &self.undecodable)
            .finish_non_exhaustive()
    }
}

impl<D: EtcdDomain> InputWatcher<D> {
    /// A watcher of the keys of `layout` over `client`. It does nothing until the first
    /// [`next`](Self::next).
    pub fn new(client: Client, layout: KeyLayout) -> Self {
        InputWatcher {
            client,
            layout,
            phase: Phase::Relist,
            revision: 0,
            nodes: HashMap::new(),
            facts: HashMap::new(),
            held: HashMap::new(),
            undecodable: 0,
            relists: 0,
            _domain: PhantomData,
        }
    }

    /// The layout.
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// The etcd revision the inputs returned so far reflect: the last listing's, or the last
    /// watched event's if later (0 before the first listing).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// How many values were skipped because they did not decode (each watched event or listed
    /// key counts once), since the watcher was made.
    pub fn undecodable(&self) -> u64 {
        self.undecodable
    }

    /// How many listings were handed out (the first one included).
    pub fn relists(&self) -> u64 {
        self.relists
    }

    /// Drops the watch: the next [`next`](Self::next) lists everything again. For a caller
    /// that lost a batch it was handed, or that wants a periodic full resync.
    pub fn resync(&mut self) {
        self.phase = Phase::Relist;
    }

    /// The next inputs: a relist batch on the first call and after a compaction or a broken
    /// watch, else the inputs of the next watch response that changes anything (waiting as
    /// long as etcd shows no change). Never empty.
    ///
    /// A relist batch is [`Input::RelistStarted`] for volumes, nodes and workloads, then every
    /// volume, every node, every workload (each in key order, so that a workload's node and
    /// volumes come before it and it does not wait for them), then [`Input::RelistDone`] for
    /// workloads, nodes and volumes (workloads first, so that a workload removed during a gap
    /// is gone before the removal of its node or volume would make it wait).
    ///
    /// Fails when etcd cannot be reached or cancels the watch (see the type's documentation);
    /// the caller pauses and calls again, and that call relists. Cancel-safe: a call dropped
    /// before it returns loses nothing, and the next one resumes (or relists).
    pub async fn next(&mut self) -> Result<Vec<Input<D>>, EtcdError> {
        loop {
            match &mut self.phase {
                Phase::Relist => {
                    let batch = self.relist().await?;
                    self.phase = Phase::Listed;
                    return Ok(batch);
                }
                Phase::Listed => {
                    let options = WatchOptions::new()
                        .with_prefix()
                        .with_prev_key()
                        .with_start_revision(self.revision + 1);
                    let started = self
                        .client
                        .watch_client()
                        .watch(self.layout.cluster(), Some(options))
                        .await;
                    match started {
                        Ok(stream) => self.phase = Phase::Watching(Box::new(stream)),
                        Err(e) => {
                            self.phase = Phase::Relist;
                            return Err(self.watch_error(e));
                        }
                    }
                }
                Phase::Watching(stream) => match stream.message().await {
                    Err(e) => {
                        self.phase = Phase::Relist;
                        return Err(self.watch_error(e));
                    }
                    Ok(None) => {
                        info!(
                            prefix = self.layout.prefix(),
                            "etcd ended the watch: listing again"
                        );
                        self.phase = Phase::Relist;
                    }
                    Ok(Some(response)) if response.compact_revision() > 0 => {
                        info!(
                            prefix = self.layout.prefix(),
                            wanted = self.revision + 1,
                            compacted = response.compact_revision(),
                            "etcd compacted the revisions the watch needed: listing again"
                        );
                        self.phase = Phase::Relist;
                    }
                    Ok(Some(response)) if response.canceled() => {
                        self.phase = Phase::Relist;
                        let reason = format!("etcd canceled it: {}", response.cancel_reason());
                        return Err(self.watch_error(ClientError::Watch(reason)));
                    }
                    Ok(Some(response)) => {
                        let inputs = self.apply(&response);
                        if !inputs.is_empty() {
                            return Ok(inputs);
                        }
                    }
                },
            }
        }
    }

    /// Feeds `handle` until the controller stops: each batch [`next`](Self::next) returns is
    /// sent with [`ControllerHandle::send_all`], and after an error the watcher waits `retry`
    /// and calls `next` again (which relists). Inputs the core refuses are logged at debug
    /// level (the core says why; a relist's inputs may be refused as any other).
    ///
    /// Returns `Ok` once the controller has stopped (noticed within 100 ms even while etcd
    /// shows no change), and [`ControllerError::Died`] if its task died.
    pub async fn run(
        mut self,
        handle: ControllerHandle<D>,
        retry: Duration,
    ) -> Result<(), ControllerError<D>> {
        loop {
            let next = tokio::select! {
                next = self.next() => next,
                () = stopped(&handle) => return Ok(()),
            };
            match next {
                Ok(batch) => match handle.send_all(batch).await {
                    Ok(refused) => {
                        for rejection in refused {
                            debug!(
                                prefix = self.layout.prefix(),
                                index = rejection.index,
                                error = %rejection.error,
                                "the controller refused an input from etcd"
                            );
                        }
                    }
                    Err(ControllerError::Stopped) => return Ok(()),
                    Err(e) => return Err(e),
                },
                Err(error) => {
                    warn!(
                        prefix = self.layout.prefix(),
                        %error,
                        retry_in = ?retry,
                        "watching etcd failed: listing again after a pause"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(retry) => {}
                        () = stopped(&handle) => return Ok(()),
                    }
                }
            }
        }
    }

    fn watch_error(&self, error: ClientError) -> EtcdError {
        EtcdError::client(format!("watching {}cluster/", self.layout.prefix()))(error)
    }

    /// Skips a value that does not decode: counted and logged.
    fn skip(&mut self, key: &[u8], error: impl Display, instead: &str) {
        self.undecodable += 1;
        warn!(
            key = %String::from_utf8_lossy(key),
            %error,
            "a value under the cluster prefix does not decode: {instead}"
        );
    }

    /// Every key under the cluster prefix at one revision, page by page, as a relist batch;
    /// the caches are rebuilt from it.
    async fn relist(&mut self) -> Result<Vec<Input<D>>, EtcdError> {
        let context = format!("listing {}cluster/", self.layout.prefix());
        let (kvs, revision) = read_prefix(&self.client, &self.layout.cluster(), 0)
            .await
            .map_err(EtcdError::client(context))?;
        let batch = self.rebuild(kvs);
        self.revision = revision;
        self.relists += 1;
        debug!(
            prefix = self.layout.prefix(),
            revision,
            inputs = batch.len(),
            "listed the cluster keys"
        );
        Ok(batch)
    }

    /// The relist batch of a listing, and the caches it leaves.
    fn rebuild(&mut self, kvs: Vec<KeyValue>) -> Vec<Input<D>> {
        self.facts.clear();
        let mut old_held = std::mem::take(&mut self.held);
        self.nodes.clear();
        let mut node_ids = Vec::new();
        let mut volumes = Vec::new();
        let mut workloads = Vec::new();
        for kv in &kvs {
            let Some((kind, id)) = self.layout.parse(kv.key()) else {
                continue;
            };
            match kind {
                KeyKind::Node => match parse_id::<D::Node>(id, "node") {
                    Ok(node) => {
                        self.nodes.insert(id.to_owned(), node);
                        node_ids.push(id);
                    }
                    Err(e) => self.skip(kv.key(), e, "node left out"),
                },
                KeyKind::Volume | KeyKind::Workload => {
                    let out = if kind == KeyKind::Volume {
                        &mut volumes
                    } else {
                        &mut workloads
                    };
                    match decode_object::<D>(kind, id, kv.value()) {
                        Ok(input) => out.push(input),
                        Err(e) => match old_held.remove(&(kind, id.to_owned())) {
                            Some(previous) => {
                                self.skip(kv.key(), e, "its previous value stays in force");
                                out.push(previous.clone());
                                self.held.insert((kind, id.to_owned()), previous);
                            }
                            None => self.skip(
                                kv.key(),
                                e,
                                "left out (no valid value of it was ever seen)",
                            ),
                        },
                    }
                }
                KeyKind::InUse => {
                    let in_use = match decode_volumes::<D::Volume>(kv.value()) {
                        Ok(list) => Some(list),
                        Err(e) => {
                            self.skip(kv.key(), e, "the node counts as never having reported");
                            None
                        }
                    };
                    // Present even when undecodable: the key exists.
                    let facts = self.facts.entry(id.to_owned()).or_default();
                    facts.in_use = in_use;
                }
                KeyKind::Alive => self.facts.entry(id.to_owned()).or_default().alive = true,
                KeyKind::Fence => self.facts.entry(id.to_owned()).or_default().fenced = true,
                // Outside `cluster/`: never listed or watched here.
                KeyKind::Attached | KeyKind::Cloud | KeyKind::Violation => {}
            }
        }
        // An in-use key that does not decode leaves an entry with nothing set: drop it, so the
        // cache holds only what decodes to something.
        self.facts.retain(|_, f| !f.is_empty());

        let kinds = [Kind::Volume, Kind::Node, Kind::Workload];
        let mut batch = Vec::with_capacity(volumes.len() + node_ids.len() + workloads.len() + 6);
        batch.extend(kinds.map(|kind| Input::RelistStarted { kind }));
        batch.extend(volumes);
        for id in node_ids {
            batch.extend(self.node_input(id));
        }
        batch.extend(workloads);
        batch.extend(
            [Kind::Workload, Kind::Node, Kind::Volume].map(|kind| Input::RelistDone { kind }),
        );
        batch
    }

    /// The `NodeUpdated` of node `id` with its cached facts, if its node key exists.
    fn node_input(&self, id: &str) -> Option<Input<D>> {
        let node = self.nodes.get(id)?.clone();
        let facts = self.facts.get(id).map_or_else(
            || Facts::default().node_facts(),
            |f: &Facts<D::Volume>| f.node_facts(),
        );
        Some(Input::NodeUpdated { node, facts })
    }

    /// The inputs of one watch response; the caches follow it.
    fn apply(&mut self, response: &WatchResponse) -> Vec<Input<D>> {
        let mut out = Vec::new();
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            self.revision = self.revision.max(kv.mod_revision());
            let Some((kind, id)) = self.layout.parse(kv.key()) else {
                continue;
            };
            let put = event.event_type() == EventType::Put;
            match kind {
                KeyKind::Node if put => match parse_id::<D::Node>(id, "node") {
                    Ok(node) => {
                        self.nodes.insert(id.to_owned(), node);
                        out.extend(self.node_input(id));
                    }
                    Err(e) => self.skip(kv.key(), e, "node left out"),
                },
                KeyKind::Node => {
                    if let Some(node) = self.nodes.remove(id) {
                        out.push(Input::NodeRemoved { node });
                    }
                }
                KeyKind::Volume | KeyKind::Workload if put => {
                    match decode_object::<D>(kind, id, kv.value()) {
                        Ok(input) => {
                            self.held.remove(&(kind, id.to_owned()));
                            out.push(input);
                        }
                        Err(e) => self.hold(kind, id, kv.key(), e, event.prev_kv()),
                    }
                }
                KeyKind::Volume => {
                    self.held.remove(&(kind, id.to_owned()));
                    if let Ok(volume) = parse_id(id, "volume") {
                        out.push(Input::VolumeRemoved { volume });
                    }
                }
                KeyKind::Workload => {
                    self.held.remove(&(kind, id.to_owned()));
                    if let Ok(workload) = parse_id(id, "workload") {
                        out.push(Input::WorkloadRemoved { workload });
                    }
                }
                KeyKind::InUse => {
                    let in_use = if put {
                        match decode_volumes::<D::Volume>(kv.value()) {
                            Ok(list) => Some(list),
                            Err(e) => {
                                self.skip(kv.key(), e, "the node counts as never having reported");
                                None
                            }
                        }
                    } else {
                        None
                    };
                    self.update_facts(id, &mut out, |f| f.in_use = in_use);
                }
                KeyKind::Alive => self.update_facts(id, &mut out, |f| f.alive = put),
                KeyKind::Fence => self.update_facts(id, &mut out, |f| f.fenced = put),
                // Outside `cluster/`: never listed or watched here.
                KeyKind::Attached | KeyKind::Cloud | KeyKind::Violation => {}
            }
        }
        out
    }

    /// A volume or workload put whose value does not decode: its previous input stays in
    /// force, held for later relists.
    fn hold(
        &mut self,
        kind: KeyKind,
        id: &str,
        key: &[u8],
        error: DecodeError,
        previous: Option<&KeyValue>,
    ) {
        let slot = (kind, id.to_owned());
        if self.held.contains_key(&slot) {
            self.skip(key, error, "its previous value stays in force");
            return;
        }
        match previous.and_then(|kv| decode_object::<D>(kind, id, kv.value()).ok()) {
            Some(input) => {
                self.held.insert(slot, input);
                self.skip(key, error, "its previous value stays in force");
            }
            None => self.skip(key, error, "ignored (no valid value of it was seen)"),
        }
    }

    /// Changes node `id`'s cached facts; sends the node's new facts if they changed and the
    /// node exists.
    fn update_facts(
        &mut self,
        id: &str,
        out: &mut Vec<Input<D>>,
        change: impl FnOnce(&mut Facts<D::Volume>),
    ) {
        let facts = self.facts.entry(id.to_owned()).or_default();
        let before = facts.clone();
        change(facts);
        let changed = *facts != before;
        if facts.is_empty() {
            self.facts.remove(id);
        }
        if changed {
            out.extend(self.node_input(id));
        }
    }
}

/// The upsert of the volume or workload `id` with `value`.
fn decode_object<D: EtcdDomain>(
    kind: KeyKind,
    id: &str,
    value: &[u8],
) -> Result<Input<D>, DecodeError> {
    if kind == KeyKind::Volume {
        Ok(Input::SetVolume {
            volume: parse_id(id, "volume")?,
            spec: decode_volume(value)?,
        })
    } else {
        let (node, volumes) = decode_workload(value)?;
        Ok(Input::WorkloadScheduled {
            workload: parse_id(id, "workload")?,
            node,
            volumes,
        })
    }
}

/// Returns once the controller behind `handle` has stopped.
async fn stopped<D: EtcdDomain>(handle: &ControllerHandle<D>) {
    let mut tick = tokio::time::interval(STOP_POLL);
    loop {
        tick.tick().await;
        if handle.is_stopped() {
            return;
        }
    }
}
