//! Stand-ins for a cloud and for node agents, whose state lives in etcd so that every replica
//! process (and the test or example that plays the rest of the orchestrator) sees the same
//! one: for examples and tests, not for production.
//!
//! [`SimulatedCloud`] is an [`AttachBackend`] that does what it is asked, as the simulator's
//! backend does, and judges the controller instead: it checks the invariants in the very
//! transaction that records each call and writes what it saw broken under
//! `{prefix}/violations/`. [`SimulatedAgents`] plays the node agents: it mounts a volume only
//! once the controller's `attached/{node}` lists it, and unmounts it when no workload on the
//! node needs it any more.

use std::collections::{BTreeMap, BTreeSet};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::{Client, Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};
use async_trait::async_trait;
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
use serde::{Deserialize, Serialize};

use crate::codec::{
    EtcdDomain, decode_attached, decode_volume, decode_volumes, decode_workload, encode_volumes,
    parse_id,
};
use crate::error::EtcdError;
use crate::fence::Fence;
use crate::layout::{KeyKind, KeyLayout};

/// How a [`SimulatedCloud`] behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudConfig {
    /// How long an attach or a detach takes to land, on average: each call takes between half
    /// and one and a half times this (drawn from the seeded generator).
    pub latency: Duration,
    /// The probability (0 to 1) that an attach or a detach fails: half of the failures do
    /// nothing ([`BackendError::Transient`]), half do their work but lose the answer
    /// ([`BackendError::Uncertain`]).
    pub failure_rate: f64,
    /// The seed of the generator behind latencies and failures.
    pub seed: u64,
}

impl Default for CloudConfig {
    fn default() -> Self {
        CloudConfig {
            latency: Duration::from_millis(50),
            failure_rate: 0.0,
            seed: 1,
        }
    }
}

/// Where a volume stands with a node, in a [`SimulatedCloud`]'s record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloudState {
    /// Attached.
    Attached,
    /// An attach is under way: it lands on its own, whatever happens to the caller.
    Attaching,
    /// A detach is under way: still attached until it lands.
    Detaching,
}

/// One line of a [`SimulatedCloud`]'s record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudAttachment<D: EtcdDomain> {
    /// The volume.
    pub volume: D::Volume,
    /// The node.
    pub node: D::Node,
    /// Attached, or a call under way.
    pub state: CloudState,
}

/// The value of `cloud/{volume}`.
#[derive(Serialize, Deserialize)]
struct Record<P> {
    access: AccessText,
    payload: P,
    nodes: BTreeMap<String, Entry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum AccessText {
    SingleNode,
    MultiNode,
}

impl From<Access> for AccessText {
    fn from(access: Access) -> Self {
        match access {
            Access::SingleNode => AccessText::SingleNode,
            Access::MultiNode => AccessText::MultiNode,
        }
    }
}

impl From<AccessText> for Access {
    fn from(access: AccessText) -> Self {
        match access {
            AccessText::SingleNode => Access::SingleNode,
            AccessText::MultiNode => Access::MultiNode,
        }
    }
}

/// A call under way lands at `until` (milliseconds since the Unix epoch, wall clock, so that
/// every process on the machine agrees), whoever reads the record then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
enum Entry {
    Attached,
    Attaching { until: u64 },
    Detaching { until: u64 },
}

impl Entry {
    /// The state at `now`; `None`: detached.
    fn at(self, now: u64) -> Option<CloudState> {
        match self {
            Entry::Attached => Some(CloudState::Attached),
            Entry::Attaching { until } if until <= now => Some(CloudState::Attached),
            Entry::Attaching { .. } => Some(CloudState::Attaching),
            Entry::Detaching { until } if until <= now => None,
            Entry::Detaching { .. } => Some(CloudState::Detaching),
        }
    }
}

impl<P> Record<P> {
    /// Lands every call due by `now`.
    fn settle(&mut self, now: u64) {
        self.nodes.retain(|_, entry| match entry.at(now) {
            None => false,
            Some(CloudState::Attached) => {
                *entry = Entry::Attached;
                true
            }
            Some(_) => true,
        });
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn sleep_until_ms(until: u64) {
    let now = now_ms();
    if until > now {
        tokio::time::sleep(Duration::from_millis(until - now)).await;
    }
}

/// A fault drawn for one call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    Transient,
    Uncertain,
}

/// xorshift64*: small, seeded, good enough to draw latencies and failures.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Never zero, and different seeds far apart.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The single key a get inside a transaction found, if any.
fn found(response: Option<&TxnOpResponse>) -> Option<&KeyValue> {
    match response {
        Some(TxnOpResponse::Get(get)) => get.kvs().first(),
        _ => None,
    }
}

fn mod_revision(kv: Option<&KeyValue>) -> i64 {
    kv.map_or(0, KeyValue::mod_revision)
}

/// A stand-in for a cloud's attach API, for examples and tests: its attachment record lives
/// in etcd under `{prefix}/cloud/{volume}`, so every replica process sees the same cloud.
///
/// - It does what it is asked, like the simulator's backend: it does not refuse to attach a
///   single-node volume attached elsewhere. It judges instead, in the same transaction that
///   records the call (a compare on every key it read, retried on a race): **I1**, an attach
///   of a single-node volume while it is attached to another node (or will still be when this
///   attach lands); **I2**, a detach of a volume that the node's `cluster/in-use/{node}` lists
///   while the node is not fenced (`cluster/fence/{node}` absent). Each is written under
///   `{prefix}/violations/`; read them with [`violations`](SimulatedCloud::violations).
/// - A call takes [`CloudConfig::latency`] (jittered) to land, and lands even if its caller is
///   gone (a killed replica), as with a real cloud: the record keeps when it is due.
/// - It keeps the backend promises of [`AttachBackend`]: calls are idempotent (an attach under
///   way is waited for, a detach of a detached volume succeeds); an attach of a pair whose
///   detach is under way, or the reverse, is refused as transient; `verify` and `list` count
///   attaches under way (and detaches not yet landed) as attached.
/// - With a [`Fence`] ([`fenced`](SimulatedCloud::fenced)), every attach and detach carries it:
///   a deposed leader's call is refused by etcd, does nothing, and deposes the fence.
/// - Failures are injected at [`CloudConfig::failure_rate`], from a seeded generator.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach::Ids;
/// use attach_detach_etcd::{CloudConfig, KeyLayout, SimulatedCloud};
/// type D = Ids<String, String, String, ()>;
///
/// let client = attach_detach_etcd::client::Client::connect(["127.0.0.1:2379"], None)?;
/// let cloud = SimulatedCloud::<D>::new(client, KeyLayout::default(), CloudConfig::default());
/// assert!(cloud.violations().await?.is_empty());
/// println!("{:?}", cloud.record().await?);
/// # Ok(()) }
/// ```
pub struct SimulatedCloud<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    fence: Option<Fence>,
    config: CloudConfig,
    rng: Arc<Mutex<Rng>>,
    refused: Arc<AtomicU64>,
    _domain: PhantomData<fn() -> D>,
}

impl<D: EtcdDomain> Clone for SimulatedCloud<D> {
    fn clone(&self) -> Self {
        SimulatedCloud {
            client: self.client.clone(),
            layout: self.layout.clone(),
            fence: self.fence.clone(),
            config: self.config.clone(),
            rng: Arc::clone(&self.rng),
            refused: Arc::clone(&self.refused),
            _domain: PhantomData,
        }
    }
}

/// How many times a call re-reads and tries again after another writer changed what it read.
const CONTENTION: usize = 32;

impl<D: EtcdDomain> SimulatedCloud<D> {
    /// A cloud over `client` whose record lives under `layout`'s prefix, unfenced (a reader,
    /// or a single controller).
    pub fn new(client: Client, layout: KeyLayout, config: CloudConfig) -> Self {
        SimulatedCloud {
            client,
            layout,
            fence: None,
            rng: Arc::new(Mutex::new(Rng::new(config.seed))),
            config,
            refused: Arc::default(),
            _domain: PhantomData,
        }
    }

    /// The same cloud, whose every attach and detach requires `fence` to hold.
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Attaches and detaches etcd refused because the fence no longer held.
    pub fn refused_by_fence(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Every attachment now (calls under way included), by volume then node.
    pub async fn record(&self) -> Result<Vec<CloudAttachment<D>>, EtcdError> {
        let now = now_ms();
        let mut out = Vec::new();
        for (volume, record) in self.records().await? {
            for (node, entry) in record.nodes {
                if let Some(state) = entry.at(now) {
                    out.push(CloudAttachment {
                        volume: volume.clone(),
                        node: self.id(&node, "node")?,
                        state,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Every invariant violation recorded under `{prefix}/violations/`, oldest first.
    pub async fn violations(&self) -> Result<Vec<String>, EtcdError> {
        let response = self
            .client
            .kv_client()
            .get(
                self.layout.range(KeyKind::Violation),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(EtcdError::client("reading the violations"))?;
        Ok(response
            .kvs()
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
            .collect())
    }

    fn id<T: crate::codec::KeyId>(&self, text: &str, what: &'static str) -> Result<T, EtcdError> {
        parse_id(text, what).map_err(|source| EtcdError::Decode {
            key: text.to_owned(),
            source,
        })
    }

    /// Every record, by volume.
    async fn records(&self) -> Result<Vec<(D::Volume, Record<D::Payload>)>, EtcdError> {
        let response = self
            .client
            .kv_client()
            .get(
                self.layout.range(KeyKind::Cloud),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(EtcdError::client("reading the cloud's record"))?;
        response
            .kvs()
            .iter()
            .filter_map(|kv| {
                let (_, id) = self.layout.parse(kv.key())?;
                Some((id, kv))
            })
            .map(|(id, kv)| {
                let record = serde_json::from_slice(kv.value()).map_err(|e| EtcdError::Decode {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    source: e.into(),
                })?;
                Ok((self.id(id, "volume")?, record))
            })
            .collect()
    }

    /// Draws a fault and a latency for one call.
    fn draw(&self) -> (Option<Fault>, Duration) {
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        let fault = if rng.unit() < self.config.failure_rate {
            Some(if rng.next().is_multiple_of(2) {
                Fault::Transient
            } else {
                Fault::Uncertain
            })
        } else {
            None
        };
        let latency = self.config.latency.mul_f64(0.5 + rng.unit());
        (fault, latency)
    }

    /// Reads `keys` in one transaction.
    async fn read(
        &self,
        keys: Vec<Vec<u8>>,
        what: &str,
    ) -> Result<Vec<Option<KeyValue>>, BackendError<D::Node>> {
        let n = keys.len();
        let response = self
            .client
            .kv_client()
            .txn(
                Txn::new().and_then(
                    keys.into_iter()
                        .map(|k| TxnOp::get(k, None))
                        .collect::<Vec<_>>(),
                ),
            )
            .await
            .map_err(|e| BackendError::transient(format!("reading {what}")).with_source(e))?;
        let r = response.op_responses();
        Ok((0..n).map(|i| found(r.get(i)).cloned()).collect())
    }

    /// Commits `puts` if every key read is unchanged (`unchanged`: key and the `mod_revision`
    /// read, 0 for absent) and the fence holds. `Ok(false)`: something changed, read again.
    async fn commit(
        &self,
        what: &str,
        unchanged: Vec<(Vec<u8>, i64)>,
        puts: Vec<TxnOp>,
    ) -> Result<bool, BackendError<D::Node>> {
        let mut when: Vec<Compare> = unchanged
            .into_iter()
            .map(|(key, revision)| Compare::mod_revision(key, CompareOp::Equal, revision))
            .collect();
        let mut or_else = Vec::new();
        if let Some(fence) = &self.fence {
            when.push(fence.compare());
            or_else.push(TxnOp::get(fence.key().to_vec(), None));
        }
        let response = self
            .client
            .kv_client()
            .txn(Txn::new().when(when).and_then(puts).or_else(or_else))
            .await
            // Perhaps applied: the caller must assume it was.
            .map_err(|e| BackendError::uncertain(what.to_owned()).with_source(e))?;
        if response.succeeded() {
            return Ok(true);
        }
        if let Some(fence) = &self.fence {
            let holds = found(response.op_responses().first())
                .is_some_and(|kv| kv.create_revision() == fence.revision());
            if !holds {
                fence.depose();
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(BackendError::transient(what.to_owned()).with_source(fence.error()));
            }
        }
        Ok(false)
    }

    fn violation(&self, text: String) -> TxnOp {
        tracing::error!(violation = %text, "invariant broken");
        let id = format!(
            "{:016}-{:016x}",
            now_ms(),
            self.rng.lock().unwrap_or_else(|e| e.into_inner()).next()
        );
        TxnOp::put(self.layout.key(KeyKind::Violation, &id), text, None)
    }

    fn decode_record(
        &self,
        kv: Option<&KeyValue>,
    ) -> Result<Option<Record<D::Payload>>, BackendError<D::Node>> {
        kv.map(|kv| {
            serde_json::from_slice(kv.value()).map_err(|e| {
                BackendError::transient(format!(
                    "cannot read {}",
                    String::from_utf8_lossy(kv.key())
                ))
                .with_source(e)
            })
        })
        .transpose()
    }

    fn encode(record: &Record<D::Payload>) -> Vec<u8> {
        serde_json::to_vec(record).expect("a payload that implements Serialize serializes to JSON")
    }
}

#[async_trait]
impl<D: EtcdDomain> AttachBackend<D> for SimulatedCloud<D> {
    async fn attach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<AttachInfo, BackendError<D::Node>> {
        let (v, n) = (volume.to_string(), node.to_string());
        let what = format!("attach {v} to {n}");
        let info = AttachInfo {
            device: Some(format!("/dev/disk/by-id/{v}")),
        };
        let record_key = self.layout.key(KeyKind::Cloud, &v);
        let volume_key = self.layout.key(KeyKind::Volume, &v);
        for _ in 0..CONTENTION {
            let read = self
                .read(vec![record_key.clone(), volume_key.clone()], &what)
                .await?;
            let now = now_ms();
            let declared = read[1]
                .as_ref()
                .and_then(|kv| decode_volume::<D::Payload>(kv.value()).ok())
                .map(|spec| spec.access);
            let mut record = self.decode_record(read[0].as_ref())?.unwrap_or(Record {
                access: declared.unwrap_or(Access::SingleNode).into(),
                payload: payload.clone(),
                nodes: BTreeMap::new(),
            });
            record.settle(now);
            match record.nodes.get(&n) {
                Some(Entry::Attached) => return Ok(info),
                Some(Entry::Attaching { until }) => {
                    sleep_until_ms(*until).await;
                    return Ok(info);
                }
                Some(Entry::Detaching { .. }) => {
                    return Err(BackendError::transient(format!(
                        "{what}: a detach of {v} from {n} is under way"
                    )));
                }
                None => {}
            }
            let (fault, latency) = self.draw();
            if fault == Some(Fault::Transient) {
                return Err(BackendError::transient(format!("{what}: injected failure")));
            }
            let until = now + latency.as_millis() as u64;
            if let Some(access) = declared {
                record.access = access.into();
            }
            record.payload = payload.clone();
            let mut puts = Vec::new();
            if record.access == AccessText::SingleNode {
                // Attached elsewhere when this attach lands: attached, being attached, or a
                // detach that lands later.
                let elsewhere: Vec<&str> = record
                    .nodes
                    .iter()
                    .filter(|(other, entry)| {
                        **other != n
                            && match entry {
                                Entry::Attached | Entry::Attaching { .. } => true,
                                Entry::Detaching { until: done } => *done > until,
                            }
                    })
                    .map(|(other, _)| other.as_str())
                    .collect();
                if !elsewhere.is_empty() {
                    puts.push(self.violation(format!(
                        "I1: attach of single-node volume {v} to {n} while attached to {}",
                        elsewhere.join(",")
                    )));
                }
            }
            record.nodes.insert(n.clone(), Entry::Attaching { until });
            puts.push(TxnOp::put(record_key.clone(), Self::encode(&record), None));
            let unchanged = vec![
                (record_key.clone(), mod_revision(read[0].as_ref())),
                (volume_key.clone(), mod_revision(read[1].as_ref())),
            ];
            if !self.commit(&what, unchanged, puts).await? {
                continue;
            }
            sleep_until_ms(until).await;
            return match fault {
                Some(_) => Err(BackendError::uncertain(format!(
                    "{what}: injected failure after the attach was done"
                ))),
                None => Ok(info),
            };
        }
        Err(BackendError::transient(format!(
            "{what}: the record kept changing"
        )))
    }

    async fn detach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        _payload: &D::Payload,
    ) -> Result<(), BackendError<D::Node>> {
        let (v, n) = (volume.to_string(), node.to_string());
        let what = format!("detach {v} from {n}");
        let record_key = self.layout.key(KeyKind::Cloud, &v);
        let in_use_key = self.layout.key(KeyKind::InUse, &n);
        let fence_key = self.layout.key(KeyKind::Fence, &n);
        for _ in 0..CONTENTION {
            let read = self
                .read(
                    vec![record_key.clone(), in_use_key.clone(), fence_key.clone()],
                    &what,
                )
                .await?;
            let now = now_ms();
            let Some(mut record) = self.decode_record(read[0].as_ref())? else {
                return Ok(());
            };
            record.settle(now);
            match record.nodes.get(&n) {
                None => return Ok(()),
                Some(Entry::Detaching { until }) => {
                    sleep_until_ms(*until).await;
                    return Ok(());
                }
                Some(Entry::Attaching { .. }) => {
                    return Err(BackendError::transient(format!(
                        "{what}: an attach of {v} to {n} is under way"
                    )));
                }
                Some(Entry::Attached) => {}
            }
            let (fault, latency) = self.draw();
            if fault == Some(Fault::Transient) {
                return Err(BackendError::transient(format!("{what}: injected failure")));
            }
            let until = now + latency.as_millis() as u64;
            let mut puts = Vec::new();
            let mounted = read[1]
                .as_ref()
                .and_then(|kv| decode_volumes::<String>(kv.value()).ok())
                .is_some_and(|in_use| in_use.contains(&v));
            if mounted && read[2].is_none() {
                puts.push(self.violation(format!(
                    "I2: detach of {v} from {n} while its agent has it in use and {n} is not fenced"
                )));
            }
            record.nodes.insert(n.clone(), Entry::Detaching { until });
            puts.push(TxnOp::put(record_key.clone(), Self::encode(&record), None));
            let unchanged = vec![
                (record_key.clone(), mod_revision(read[0].as_ref())),
                (in_use_key.clone(), mod_revision(read[1].as_ref())),
                (fence_key.clone(), mod_revision(read[2].as_ref())),
            ];
            if !self.commit(&what, unchanged, puts).await? {
                continue;
            }
            sleep_until_ms(until).await;
            return match fault {
                Some(_) => Err(BackendError::uncertain(format!(
                    "{what}: injected failure after the detach was done"
                ))),
                None => Ok(()),
            };
        }
        Err(BackendError::transient(format!(
            "{what}: the record kept changing"
        )))
    }

    async fn verify(
        &self,
        node: &D::Node,
        volumes: &[(D::Volume, D::Payload)],
    ) -> Result<Vec<D::Volume>, BackendError<D::Node>> {
        let n = node.to_string();
        let attached: BTreeSet<D::Volume> = self
            .record()
            .await
            .map_err(|e| BackendError::transient(format!("verify {n}")).with_source(e))?
            .into_iter()
            .filter(|a| a.node.to_string() == n)
            .map(|a| a.volume)
            .collect();
        Ok(volumes
            .iter()
            .filter(|(v, _)| attached.contains(v))
            .map(|(v, _)| v.clone())
            .collect())
    }

    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<D::Node>> {
        let now = now_ms();
        let records = self
            .records()
            .await
            .map_err(|e| BackendError::transient("list").with_source(e))?;
        let mut out = Vec::new();
        for (volume, record) in records {
            for (node, entry) in &record.nodes {
                if entry.at(now).is_some() {
                    out.push(BackendAttachment {
                        volume: volume.clone(),
                        node: self
                            .id(node, "node")
                            .map_err(|e| BackendError::transient("list").with_source(e))?,
                        spec: VolumeSpec {
                            access: record.access.into(),
                            payload: record.payload.clone(),
                            attach_required: true,
                            driver: None,
                        },
                    });
                }
            }
        }
        Ok(out)
    }
}

/// What one agent reads of its node.
#[derive(Default)]
struct AgentView {
    /// `attached/{node}`'s volumes.
    attached: Vec<String>,
    /// `cluster/in-use/{node}`, if written.
    in_use: Option<Vec<String>>,
    /// `attached/{node}`'s `mod_revision` (0: absent).
    revision: i64,
}

/// A stand-in for the node agents of every node, for examples and tests: each
/// [`pass`](SimulatedAgents::pass) brings every node's `cluster/in-use/{node}` up to date.
///
/// An agent mounts a volume that a workload on its node needs only once the controller's
/// `attached/{node}` lists it, and writes its in-use list in a transaction that requires
/// `attached/{node}` unchanged since it read it, as a real agent must (otherwise it could
/// mount a volume the controller just took off the list to detach it). It unmounts a volume
/// once no workload on the node needs it.
pub struct SimulatedAgents<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    _domain: PhantomData<fn() -> D>,
}

impl<D: EtcdDomain> SimulatedAgents<D> {
    /// The agents of every node under `layout`.
    pub fn new(client: Client, layout: KeyLayout) -> Self {
        SimulatedAgents {
            client,
            layout,
            _domain: PhantomData,
        }
    }

    /// One round of every node's agent; returns how many in-use lists it changed.
    pub async fn pass(&self) -> Result<usize, EtcdError> {
        let mut kv = self.client.kv_client();
        let response = kv
            .get(
                self.layout.prefix().as_bytes(),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(EtcdError::client("reading the cluster for the agents"))?;
        let decode = |key: &[u8], e| EtcdError::Decode {
            key: String::from_utf8_lossy(key).into_owned(),
            source: e,
        };
        let mut nodes: BTreeMap<String, AgentView> = BTreeMap::new();
        let mut needed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for item in response.kvs() {
            let Some((kind, id)) = self.layout.parse(item.key()) else {
                continue;
            };
            match kind {
                KeyKind::Node => {
                    nodes.entry(id.to_owned()).or_default();
                }
                KeyKind::Workload => {
                    let (node, volumes): (String, Vec<String>) =
                        decode_workload(item.value()).map_err(|e| decode(item.key(), e))?;
                    needed.entry(node).or_default().extend(volumes);
                }
                _ => {}
            }
        }
        for item in response.kvs() {
            let Some((kind, id)) = self.layout.parse(item.key()) else {
                continue;
            };
            let Some(node) = nodes.get_mut(id) else {
                continue;
            };
            match kind {
                KeyKind::Attached => {
                    node.attached = decode_attached::<D>(item.value())
                        .map_err(|e| decode(item.key(), e))?
                        .into_iter()
                        .map(|r| r.volume.to_string())
                        .collect();
                    node.revision = item.mod_revision();
                }
                KeyKind::InUse => {
                    node.in_use =
                        Some(decode_volumes(item.value()).map_err(|e| decode(item.key(), e))?);
                }
                _ => {}
            }
        }
        let mut changed = 0;
        let none = BTreeSet::new();
        for (id, view) in nodes {
            let AgentView {
                attached,
                in_use,
                revision: attached_revision,
            } = view;
            let needs = needed.get(&id).unwrap_or(&none);
            let mut next: BTreeSet<String> = in_use
                .iter()
                .flatten()
                .filter(|v| needs.contains(*v))
                .cloned()
                .collect();
            next.extend(attached.into_iter().filter(|v| needs.contains(v)));
            let next: Vec<String> = next.into_iter().collect();
            let mut current = in_use.clone().unwrap_or_default();
            current.sort();
            if in_use.is_some() && current == next {
                continue;
            }
            let attached_key = self.layout.key(KeyKind::Attached, &id);
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    attached_key,
                    CompareOp::Equal,
                    attached_revision,
                )])
                .and_then([TxnOp::put(
                    self.layout.key(KeyKind::InUse, &id),
                    encode_volumes(&next),
                    None,
                )]);
            let response = kv
                .txn(txn)
                .await
                .map_err(EtcdError::client(format!("writing in-use of {id}")))?;
            if response.succeeded() {
                changed += 1;
            }
        }
        Ok(changed)
    }
}
