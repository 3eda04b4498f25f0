//! The node-status store as the simulation sees it: the in-memory store with revisions, a
//! latency on every call (varied by the scenario's seed, as the backend's are), and a trace
//! line for every write.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::SimIds;
use super::panics::guarded;
use super::timeline::Happening;
use super::world::World;
use crate::reported_volumes::ReportedVolumes;
use crate::store::{NodeStatus, NodeStatusStore, Revision, StoreError, WriteReceipt};

pub(crate) struct SimStore {
    pub(crate) inner: Arc<dyn NodeStatusStore<SimIds>>,
    pub(crate) world: Arc<Mutex<World>>,
    pub(crate) epoch: Instant,
    pub(crate) latency: Duration,
    /// Trace writes (the real store), not reads of a lagging view.
    pub(crate) traced: bool,
    /// For the runner's own tests: every write panics, to show the run fails.
    pub(crate) sabotaged: bool,
}

impl SimStore {
    /// This call's latency: the setting, varied by the scenario's seed like the backend's.
    fn latency(&self) -> Duration {
        self.world.lock().jitter(self.latency)
    }
}

#[async_trait]
impl NodeStatusStore<SimIds> for SimStore {
    async fn read(&self, node: &String) -> Result<NodeStatus<SimIds>, StoreError> {
        guarded(&self.world, self.epoch, "store read", async {
            tokio::time::sleep(self.latency()).await;
            self.inner.read(node).await
        })
        .await
    }

    async fn write(
        &self,
        node: &String,
        attached: &ReportedVolumes<SimIds>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write_traced(node, attached, expected, false)
            .await
            .map(|receipt| receipt.revision)
    }

    async fn write_reading_facts(
        &self,
        node: &String,
        attached: &ReportedVolumes<SimIds>,
        expected: Revision,
    ) -> Result<WriteReceipt<SimIds>, StoreError> {
        self.write_traced(node, attached, expected, true).await
    }

    async fn list(&self) -> Result<Vec<(String, NodeStatus<SimIds>)>, StoreError> {
        guarded(&self.world, self.epoch, "store list", async {
            tokio::time::sleep(self.latency()).await;
            self.inner.list().await
        })
        .await
    }
}

impl SimStore {
    /// A write, traced, answering the node's facts with it when `read_facts` is set and the
    /// store under it reads them (the real store does, atomically; a lagging view does not).
    async fn write_traced(
        &self,
        node: &String,
        attached: &ReportedVolumes<SimIds>,
        expected: Revision,
        read_facts: bool,
    ) -> Result<WriteReceipt<SimIds>, StoreError> {
        guarded(&self.world, self.epoch, "store write", async {
            if self.traced {
                let mut w = self.world.lock();
                w.now = self.epoch.elapsed();
                // A copy of the list, which can be long, only for a timeline that is kept.
                if w.timelining {
                    w.record(Happening::StatusWrite {
                        node: node.clone(),
                        volumes: attached.volumes().to_vec(),
                    });
                }
            }
            tokio::time::sleep(self.latency()).await;
            assert!(!self.sabotaged, "sabotaged store write of {node}");
            let result = if read_facts {
                self.inner
                    .write_reading_facts(node, attached, expected)
                    .await
            } else {
                self.inner
                    .write(node, attached, expected)
                    .await
                    .map(WriteReceipt::from)
            };
            let mut w = self.world.lock();
            w.now = self.epoch.elapsed();
            if result.is_ok() {
                // The node's agent reads its list: it must look again.
                w.stored_changed(node);
            }
            if self.traced {
                match &result {
                    Ok(_) => {
                        // The line lists the node's volumes, which can be many: written only
                        // for a trace that is kept.
                        if w.tracing {
                            let names: Vec<&str> =
                                attached.volumes().iter().map(String::as_str).collect();
                            w.log(format!("store: {node} reports [{}]", names.join(",")));
                        }
                        w.changed();
                    }
                    Err(e) => w.log(format!("store: write of {node} failed: {e}")),
                }
                w.record(Happening::StatusAck {
                    node: node.clone(),
                    error: result.as_ref().err().map(ToString::to_string),
                });
            }
            result
        })
        .await
    }
}
