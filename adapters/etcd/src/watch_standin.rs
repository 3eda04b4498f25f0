//! TEMPORARY stand-in for `watch.rs` (written on its own branch), with the same interface:
//! it relists everything under `{prefix}/cluster/` every 100 ms instead of watching. To be
//! deleted once the real `InputWatcher` is merged.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::Duration;

use attach_detach::controller::{ControllerError, ControllerHandle};
use attach_detach::core::{Input, Kind, NodeFacts};
use etcd_client::{Client, GetOptions};

use crate::codec::{EtcdDomain, decode_volume, decode_volumes, decode_workload, parse_id};
use crate::error::EtcdError;
use crate::layout::{KeyKind, KeyLayout};

const POLL: Duration = Duration::from_millis(100);

pub(crate) struct InputWatcher<D: EtcdDomain> {
    client: Client,
    layout: KeyLayout,
    first: bool,
    _domain: PhantomData<fn() -> D>,
}

impl<D: EtcdDomain> InputWatcher<D> {
    pub(crate) fn new(client: Client, layout: KeyLayout) -> Self {
        InputWatcher {
            client,
            layout,
            first: true,
            _domain: PhantomData,
        }
    }

    fn decode<T>(key: &[u8], r: Result<T, crate::error::DecodeError>) -> Result<T, EtcdError> {
        r.map_err(|source| EtcdError::Decode {
            key: String::from_utf8_lossy(key).into_owned(),
            source,
        })
    }

    pub(crate) async fn next(&mut self) -> Result<Vec<Input<D>>, EtcdError> {
        if !self.first {
            tokio::time::sleep(POLL).await;
        }
        self.first = false;
        let response = self
            .client
            .kv_client()
            .get(self.layout.cluster(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(EtcdError::client("listing the cluster"))?;
        let mut nodes: BTreeMap<String, NodeFacts<D::Volume>> = BTreeMap::new();
        let mut in_use = BTreeMap::new();
        let mut fenced = BTreeMap::new();
        let mut alive = BTreeMap::new();
        let mut inputs = vec![
            Input::RelistStarted { kind: Kind::Volume },
            Input::RelistStarted { kind: Kind::Node },
            Input::RelistStarted {
                kind: Kind::Workload,
            },
        ];
        let mut workloads = Vec::new();
        for kv in response.kvs() {
            let Some((kind, id)) = self.layout.parse(kv.key()) else {
                continue;
            };
            match kind {
                KeyKind::Node => {
                    nodes.insert(
                        id.to_owned(),
                        NodeFacts {
                            healthy: false,
                            fenced: false,
                            in_use: None,
                        },
                    );
                }
                KeyKind::Volume => {
                    let volume = Self::decode(kv.key(), parse_id(id, "volume"))?;
                    let spec = Self::decode(kv.key(), decode_volume(kv.value()))?;
                    inputs.push(Input::SetVolume { volume, spec });
                }
                KeyKind::Workload => {
                    let workload = Self::decode(kv.key(), parse_id(id, "workload"))?;
                    let (node, volumes) = Self::decode(kv.key(), decode_workload(kv.value()))?;
                    workloads.push(Input::WorkloadScheduled {
                        workload,
                        node,
                        volumes,
                    });
                }
                KeyKind::InUse => {
                    in_use.insert(
                        id.to_owned(),
                        Self::decode(kv.key(), decode_volumes(kv.value()))?,
                    );
                }
                KeyKind::Fence => {
                    fenced.insert(id.to_owned(), ());
                }
                KeyKind::Alive => {
                    alive.insert(id.to_owned(), ());
                }
                _ => {}
            }
        }
        for (id, mut facts) in nodes {
            facts.healthy = alive.contains_key(&id);
            facts.fenced = fenced.contains_key(&id);
            facts.in_use = in_use.remove(&id);
            let node = Self::decode(
                self.layout.key(KeyKind::Node, &id).as_slice(),
                parse_id(&id, "node"),
            )?;
            inputs.push(Input::NodeUpdated { node, facts });
        }
        inputs.extend(workloads);
        inputs.extend([
            Input::RelistDone { kind: Kind::Volume },
            Input::RelistDone { kind: Kind::Node },
            Input::RelistDone {
                kind: Kind::Workload,
            },
        ]);
        Ok(inputs)
    }

    pub(crate) async fn run(
        mut self,
        handle: ControllerHandle<D>,
        retry: Duration,
    ) -> Result<(), EtcdError> {
        loop {
            match self.next().await {
                Ok(batch) => match handle.send_all(batch).await {
                    Ok(_) => {}
                    Err(ControllerError::Stopped | ControllerError::Died { .. }) => return Ok(()),
                    Err(e) => tracing::warn!(error = %e, "input refused"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "listing failed");
                    tokio::time::sleep(retry).await;
                }
            }
            if handle.is_stopped() {
                return Ok(());
            }
        }
    }
}
