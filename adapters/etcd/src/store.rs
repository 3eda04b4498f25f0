//! [`NodeStatusStore`] over etcd v3.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::{Client, Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse};
use async_trait::async_trait;
use attach_detach::traits::{
    NodeStatus, NodeStatusStore, ReportedVolumes, Revision, StoreError, WriteReceipt,
};

use crate::codec::{EtcdDomain, decode_attached, decode_volumes, encode_attached, parse_id};
use crate::error::{CallKind, store_error, undecodable};
use crate::fence::Fence;
use crate::layout::{KeyKind, KeyLayout};
use crate::range::read_prefix;

/// The node status store over etcd: a node's status is its keys of the [`KeyLayout`], read in
/// one transaction and written with compare-and-set on the `attached` key's `mod_revision`.
///
/// - `read` is one transaction of five gets, so the attached list, the agent's in-use list,
///   the fence and the liveness key are one consistent snapshot. The node must exist
///   (`cluster/node/{node}`), or the read is [`StoreError::NotFound`]. `in_use` is `None` until
///   the agent first writes its key; `fenced` and `healthy` are always known (a key present or
///   not).
/// - `write` is a transaction that puts the list if the node still exists, the `attached` key's
///   `mod_revision` is the expected revision (0: never written) and, with a [`Fence`], the
///   leader key is still this replica's. Otherwise it reads back which comparison failed:
///   [`StoreError::NotFound`], [`StoreError::Conflict`] with the current revision, or a refused
///   fence ([`StoreError::Transient`] whose source is [`Deposed`](crate::Deposed); the fence is
///   marked deposed).
/// - `list` reads every node's keys at one revision, page by page.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach::Ids;
/// use attach_detach::traits::NodeStatusStore;
/// use attach_detach_etcd::{EtcdStatusStore, KeyLayout};
/// type D = Ids<String, String, String, ()>;
///
/// let client = attach_detach_etcd::client::Client::connect(["127.0.0.1:2379"], None)?;
/// let store = EtcdStatusStore::<D>::new(client, KeyLayout::new("/attach-detach"));
/// let status = store.read(&"node-a".to_string()).await?;
/// store.write(&"node-a".to_string(), &Default::default(), status.revision).await?;
/// # Ok(()) }
/// ```
pub struct EtcdStatusStore<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    fence: Option<Fence>,
    stats: Arc<WriteStats>,
    _domain: PhantomData<fn() -> D>,
}

impl<D: EtcdDomain> Clone for EtcdStatusStore<D> {
    fn clone(&self) -> Self {
        EtcdStatusStore {
            client: self.client.clone(),
            layout: self.layout.clone(),
            fence: self.fence.clone(),
            stats: Arc::clone(&self.stats),
            _domain: PhantomData,
        }
    }
}

/// What a store wrote, for benchmarks and capacity planning.
#[derive(Debug, Default)]
pub struct WriteStats {
    writes: AtomicU64,
    bytes: AtomicU64,
    refused: AtomicU64,
}

impl WriteStats {
    /// Write transactions sent (whatever their outcome).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Bytes of keys and values those transactions put.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Writes etcd refused because the fence no longer held.
    pub fn refused_by_fence(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl<D: EtcdDomain> EtcdStatusStore<D> {
    /// A store over `client` with the keys of `layout`, writing without a fence (a single
    /// controller, or tests).
    pub fn new(client: Client, layout: KeyLayout) -> Self {
        EtcdStatusStore {
            client,
            layout,
            fence: None,
            stats: Arc::default(),
            _domain: PhantomData,
        }
    }

    /// The same store, whose every write also requires `fence` to hold: a replica that lost
    /// its leadership cannot write, even before it notices.
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// The layout.
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// What this store (and its clones) wrote.
    pub fn stats(&self) -> &WriteStats {
        &self.stats
    }

    /// Builds a node's status from its keys, read at one revision.
    fn status(
        &self,
        attached: Option<&KeyValue>,
        in_use: Option<&KeyValue>,
        fence: Option<&KeyValue>,
        alive: Option<&KeyValue>,
    ) -> Result<NodeStatus<D>, StoreError> {
        let (list, revision) = match attached {
            Some(kv) => (
                decode_attached::<D>(kv.value()).map_err(|e| undecodable(kv.key(), e))?,
                kv.mod_revision(),
            ),
            None => (Vec::new(), 0),
        };
        let in_use = in_use
            .map(|kv| decode_volumes(kv.value()).map_err(|e| undecodable(kv.key(), e)))
            .transpose()?;
        Ok(NodeStatus {
            attached: list,
            in_use,
            fenced: Some(fence.is_some()),
            healthy: Some(alive.is_some()),
            revision: Revision::from(revision),
        })
    }

    /// Every key of `kind` at `revision` (0: the current one; the revision read is
    /// returned), by id.
    async fn all(
        &self,
        kind: KeyKind,
        revision: i64,
    ) -> Result<(BTreeMap<String, KeyValue>, i64), StoreError> {
        let (kvs, revision) = read_prefix(&self.client, &self.layout.range(kind), revision)
            .await
            .map_err(|e| store_error(e, CallKind::Read, "listing node statuses"))?;
        let by_id = kvs
            .into_iter()
            .filter_map(|kv| {
                let (_, id) = self.layout.parse(kv.key())?;
                Some((id.to_owned(), kv))
            })
            .collect();
        Ok((by_id, revision))
    }
}

/// The single key a get inside a transaction found, if any.
fn found(response: &TxnOpResponse) -> Option<&KeyValue> {
    match response {
        TxnOpResponse::Get(get) => get.kvs().first(),
        _ => None,
    }
}

#[async_trait]
impl<D: EtcdDomain> NodeStatusStore<D> for EtcdStatusStore<D> {
    async fn read(&self, node: &D::Node) -> Result<NodeStatus<D>, StoreError> {
        let id = node.to_string();
        let keys = [
            KeyKind::Node,
            KeyKind::Attached,
            KeyKind::InUse,
            KeyKind::Fence,
            KeyKind::Alive,
        ]
        .map(|kind| TxnOp::get(self.layout.key(kind, &id), None));
        let response = self
            .client
            .kv_client()
            .txn(Txn::new().and_then(keys))
            .await
            .map_err(|e| store_error(e, CallKind::Read, &format!("reading node {id}")))?;
        let r = response.op_responses();
        if r.len() != 5 {
            return Err(StoreError::transient(format!(
                "etcd answered a read of node {id} with {} results, not 5",
                r.len()
            )));
        }
        if found(&r[0]).is_none() {
            return Err(StoreError::not_found());
        }
        self.status(found(&r[1]), found(&r[2]), found(&r[3]), found(&r[4]))
    }

    async fn write(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write_txn(node, attached, expected, false)
            .await
            .map(|receipt| receipt.revision)
    }

    /// The same transaction, whose success branch also gets the in-use, fence and liveness
    /// keys after its put: etcd runs a transaction's operations at one revision, so the facts
    /// are exactly the node's as of the write.
    async fn write_reading_facts(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<WriteReceipt<D>, StoreError> {
        self.write_txn(node, attached, expected, true).await
    }

    async fn list(&self) -> Result<Vec<(D::Node, NodeStatus<D>)>, StoreError> {
        // The first listing fixes the revision every other one reads at.
        let (nodes, at) = self.all(KeyKind::Node, 0).await?;
        let (attached, _) = self.all(KeyKind::Attached, at).await?;
        let (in_use, _) = self.all(KeyKind::InUse, at).await?;
        let (fences, _) = self.all(KeyKind::Fence, at).await?;
        let (alive, _) = self.all(KeyKind::Alive, at).await?;
        nodes
            .keys()
            .map(|id| {
                let node = parse_id(id, "node")
                    .map_err(|e| undecodable(&self.layout.key(KeyKind::Node, id), e))?;
                let status = self.status(
                    attached.get(id),
                    in_use.get(id),
                    fences.get(id),
                    alive.get(id),
                )?;
                Ok((node, status))
            })
            .collect()
    }
}

impl<D: EtcdDomain> EtcdStatusStore<D> {
    /// A write's transaction, reading the node's facts in it when `read_facts` is set.
    async fn write_txn(
        &self,
        node: &D::Node,
        attached: &ReportedVolumes<D>,
        expected: Revision,
        read_facts: bool,
    ) -> Result<WriteReceipt<D>, StoreError> {
        let id = node.to_string();
        // The core only hands back revisions this store gave out: numbers.
        let expected: i64 = expected.text().parse().map_err(|_| {
            StoreError::conflict(None)
                .with_source(format!("revision {expected} is not an etcd mod_revision"))
        })?;
        let node_key = self.layout.key(KeyKind::Node, &id);
        let attached_key = self.layout.key(KeyKind::Attached, &id);
        let value = encode_attached::<D>(attached);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add((attached_key.len() + value.len()) as u64, Ordering::Relaxed);

        let mut when = vec![
            Compare::version(node_key.clone(), CompareOp::Greater, 0),
            Compare::mod_revision(attached_key.clone(), CompareOp::Equal, expected),
        ];
        let mut or_else = vec![
            TxnOp::get(node_key, None),
            TxnOp::get(attached_key.clone(), None),
        ];
        if let Some(fence) = &self.fence {
            when.push(fence.compare());
            or_else.push(TxnOp::get(fence.key().to_vec(), None));
        }
        let mut and_then = vec![TxnOp::put(attached_key, value, None)];
        if read_facts {
            and_then.extend(
                [KeyKind::InUse, KeyKind::Fence, KeyKind::Alive]
                    .map(|kind| TxnOp::get(self.layout.key(kind, &id), None)),
            );
        }
        let txn = Txn::new().when(when).and_then(and_then).or_else(or_else);
        let response = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| store_error(e, CallKind::Write, &format!("writing node {id}")))?;
        if response.succeeded() {
            let revision = response.header().map(|h| h.revision()).ok_or_else(|| {
                StoreError::uncertain(format!(
                    "etcd's answer to a write of node {id} had no header"
                ))
            })?;
            let r = response.op_responses();
            // Facts that do not decode are left out: the write landed, and the core's own
            // read of the node reports the bad key.
            let facts = match &r[..] {
                [_, in_use, fence, alive] if read_facts => self
                    .status(None, found(in_use), found(fence), found(alive))
                    .ok()
                    .map(|status| status.facts()),
                _ => None,
            };
            return Ok(WriteReceipt {
                revision: Revision::from(revision),
                facts,
            });
        }
        let r = response.op_responses();
        if let Some(fence) = &self.fence {
            let holds = r
                .get(2)
                .and_then(found)
                .is_some_and(|kv| kv.create_revision() == fence.revision());
            if !holds {
                fence.depose();
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                return Err(
                    StoreError::transient(format!("writing node {id}")).with_source(fence.error())
                );
            }
        }
        if r.first().and_then(found).is_none() {
            return Err(StoreError::not_found());
        }
        let current = r.get(1).and_then(found).map_or(0, KeyValue::mod_revision);
        Err(StoreError::conflict(Revision::from(current)))
    }
}
