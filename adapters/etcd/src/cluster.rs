//! What the rest of the orchestrator writes: the scheduler's nodes, volumes and workloads, the
//! node agents' in-use lists and liveness, the fencing agent's fences.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use crate::client::{Client, PutOptions};
use attach_detach::core::VolumeSpec;

use crate::codec::{
    EtcdDomain, decode_workload, encode_volume, encode_volumes, encode_workload, parse_id,
};
use crate::error::EtcdError;
use crate::layout::{KeyKind, KeyLayout};
use crate::range::read_prefix;

/// The scheduler's part of the cluster as etcd holds it: what [`ClusterWriter::read`] returns.
#[derive(Clone, Debug)]
pub struct Placements<D: EtcdDomain> {
    /// Every node key.
    pub nodes: Vec<D::Node>,
    /// Every workload's placement.
    pub workloads: BTreeMap<D::Workload, Placement<D>>,
    /// The revision read at.
    pub revision: i64,
}

/// Where the scheduler placed a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement<D: EtcdDomain> {
    /// Its node.
    pub node: D::Node,
    /// The volumes it needs there.
    pub volumes: Vec<D::Volume>,
}

/// Writes the keys the controller reads, for the parts of an orchestrator that own them (and
/// for tests and the example, which play those parts). Each method is one put or delete and
/// returns the revision etcd answered with.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach::Ids;
/// use attach_detach::core::VolumeSpec;
/// use attach_detach_etcd::{ClusterWriter, KeyLayout};
/// type D = Ids<String, String, String, ()>;
///
/// let client = attach_detach_etcd::client::Client::connect(["127.0.0.1:2379"], None)?;
/// let cluster = ClusterWriter::<D>::new(client, KeyLayout::default());
/// cluster.add_node(&"node-a".into()).await?;          // the scheduler
/// cluster.set_in_use(&"node-a".into(), &[]).await?;   // its agent: nothing mounted
/// cluster.set_volume(&"pvc-1".into(), &VolumeSpec::single_node(())).await?;
/// cluster.schedule(&"db-0".into(), &"node-a".into(), &["pvc-1".into()]).await?;
/// # Ok(()) }
/// ```
pub struct ClusterWriter<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    _domain: PhantomData<fn() -> D>,
}

impl<D: EtcdDomain> Clone for ClusterWriter<D> {
    fn clone(&self) -> Self {
        ClusterWriter {
            client: self.client.clone(),
            layout: self.layout.clone(),
            _domain: PhantomData,
        }
    }
}

impl<D: EtcdDomain> ClusterWriter<D> {
    /// A writer over `client` with the keys of `layout`.
    pub fn new(client: Client, layout: KeyLayout) -> Self {
        ClusterWriter {
            client,
            layout,
            _domain: PhantomData,
        }
    }

    /// The layout.
    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// Reads back the nodes and workloads the scheduler wrote, at one revision (paged): what
    /// a scheduler that restarts resumes from. Fails on a key the layout's types do not
    /// read, naming it.
    pub async fn read(&self) -> Result<Placements<D>, EtcdError> {
        let (kvs, revision) = read_prefix(&self.client, &self.layout.cluster(), 0)
            .await
            .map_err(EtcdError::client("reading the scheduler's keys"))?;
        let mut placements = Placements {
            nodes: Vec::new(),
            workloads: BTreeMap::new(),
            revision,
        };
        for kv in &kvs {
            let decode = |source| EtcdError::Decode {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                source,
            };
            match self.layout.parse(kv.key()) {
                Some((KeyKind::Node, id)) => {
                    placements.nodes.push(parse_id(id, "node").map_err(decode)?);
                }
                Some((KeyKind::Workload, id)) => {
                    let workload = parse_id(id, "workload").map_err(decode)?;
                    let (node, volumes) = decode_workload(kv.value()).map_err(decode)?;
                    let placement = Placement { node, volumes };
                    placements.workloads.insert(workload, placement);
                }
                _ => {}
            }
        }
        Ok(placements)
    }

    async fn put(
        &self,
        kind: KeyKind,
        id: &str,
        value: Vec<u8>,
        lease: Option<i64>,
    ) -> Result<i64, EtcdError> {
        let key = self.layout.key(kind, id);
        let options = lease.map(|lease| PutOptions::new().with_lease(lease));
        let response = self
            .client
            .kv_client()
            .put(key, value, options)
            .await
            .map_err(EtcdError::client(format!("writing {kind:?} {id}")))?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    async fn delete(&self, kind: KeyKind, id: &str) -> Result<i64, EtcdError> {
        let response = self
            .client
            .kv_client()
            .delete(self.layout.key(kind, id), None)
            .await
            .map_err(EtcdError::client(format!("deleting {kind:?} {id}")))?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    /// The scheduler registers a node.
    pub async fn add_node(&self, node: &D::Node) -> Result<i64, EtcdError> {
        self.put(KeyKind::Node, &node.to_string(), b"{}".to_vec(), None)
            .await
    }

    /// The node object is deleted.
    pub async fn remove_node(&self, node: &D::Node) -> Result<i64, EtcdError> {
        self.delete(KeyKind::Node, &node.to_string()).await
    }

    /// A volume exists with this spec.
    pub async fn set_volume(
        &self,
        volume: &D::Volume,
        spec: &VolumeSpec<D::Payload>,
    ) -> Result<i64, EtcdError> {
        self.put(
            KeyKind::Volume,
            &volume.to_string(),
            encode_volume(spec),
            None,
        )
        .await
    }

    /// A volume is gone.
    pub async fn remove_volume(&self, volume: &D::Volume) -> Result<i64, EtcdError> {
        self.delete(KeyKind::Volume, &volume.to_string()).await
    }

    /// The scheduler places `workload` on `node`, needing `volumes` there.
    pub async fn schedule(
        &self,
        workload: &D::Workload,
        node: &D::Node,
        volumes: &[D::Volume],
    ) -> Result<i64, EtcdError> {
        self.put(
            KeyKind::Workload,
            &workload.to_string(),
            encode_workload(node, volumes),
            None,
        )
        .await
    }

    /// A workload is gone.
    pub async fn remove_workload(&self, workload: &D::Workload) -> Result<i64, EtcdError> {
        self.delete(KeyKind::Workload, &workload.to_string()).await
    }

    /// A node agent reports what it mounts (an empty list: nothing).
    pub async fn set_in_use(
        &self,
        node: &D::Node,
        volumes: &[D::Volume],
    ) -> Result<i64, EtcdError> {
        self.put(
            KeyKind::InUse,
            &node.to_string(),
            encode_volumes(volumes),
            None,
        )
        .await
    }

    /// The node's in-use list is forgotten: as if its agent had never reported.
    pub async fn clear_in_use(&self, node: &D::Node) -> Result<i64, EtcdError> {
        self.delete(KeyKind::InUse, &node.to_string()).await
    }

    /// The node agent says it is alive, for as long as `lease` is kept alive (`None`: until
    /// [`set_dead`](ClusterWriter::set_dead); for tests).
    pub async fn set_alive(&self, node: &D::Node, lease: Option<i64>) -> Result<i64, EtcdError> {
        self.put(KeyKind::Alive, &node.to_string(), b"{}".to_vec(), lease)
            .await
    }

    /// The node agent's liveness key is gone (what its lease expiring does).
    pub async fn set_dead(&self, node: &D::Node) -> Result<i64, EtcdError> {
        self.delete(KeyKind::Alive, &node.to_string()).await
    }

    /// The fencing agent (or an operator) has powered the node off or isolated it; `reason`
    /// is kept as the key's value for whoever looks.
    pub async fn fence(&self, node: &D::Node, reason: &str) -> Result<i64, EtcdError> {
        self.put(
            KeyKind::Fence,
            &node.to_string(),
            reason.as_bytes().to_vec(),
            None,
        )
        .await
    }

    /// The fence is lifted.
    pub async fn unfence(&self, node: &D::Node) -> Result<i64, EtcdError> {
        self.delete(KeyKind::Fence, &node.to_string()).await
    }
}
