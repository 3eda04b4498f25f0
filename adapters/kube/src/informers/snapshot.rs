//! The state as it stands, as the inputs (or the [`World`]) a controller starts from.

use std::collections::BTreeSet;

use attach_detach::controller::World;
use attach_detach::core::{Input, VolumeSpec};

use super::{InformerState, InlineEntry};
use crate::domain::{CsiVolume, Kube};

impl InformerState {
    /// The inputs that build the state as it stands, for a controller's start-up [`World`]:
    /// every CSI volume, then every node, then every active pod (in name order within each).
    pub fn snapshot(&self) -> Vec<Input<Kube>> {
        let mut inputs = Vec::new();
        let index = self.index.read();
        let mut unique: Vec<(&String, &BTreeSet<String>)> = index.pvs.iter().collect();
        unique.sort();
        for (volume, pvs) in unique {
            if let Some(spec) = pvs.first().and_then(|pv| self.spec_of(pv)) {
                inputs.push(Input::SetVolume {
                    volume: volume.clone(),
                    spec,
                });
            }
        }
        drop(index);
        inputs.extend(self.inline_only());
        let mut nodes: Vec<_> = self.nodes.iter().filter(|(_, n)| n.managed).collect();
        nodes.sort_by(|a, b| a.0.cmp(b.0));
        for (node, entry) in nodes {
            inputs.push(Input::NodeUpdated {
                node: node.clone(),
                facts: entry.facts.clone(),
            });
        }
        let mut pods: Vec<_> = self.pods.iter().filter(|(_, p)| p.sent.is_some()).collect();
        pods.sort_by(|a, b| a.0.cmp(b.0));
        for (key, pod) in pods {
            inputs.push(Input::WorkloadScheduled {
                workload: key.clone(),
                node: pod.node.clone(),
                volumes: self.resolve(pod),
            });
        }
        inputs
    }

    /// [`snapshot`](Self::snapshot) as a [`World`].
    pub fn world(&self) -> World<Kube> {
        self.snapshot().into_iter().collect()
    }

    /// The spec of PV `pv`'s volume, if the core tracks it.
    pub(super) fn spec_of(&self, pv: &str) -> Option<VolumeSpec<CsiVolume>> {
        let spec = &self.pvs.get(pv)?.csi.as_ref()?.spec;
        self.tracked(&spec.payload.driver).then(|| spec.clone())
    }

    /// The spec a tracked PV gives the volume `unique`, if one does.
    pub(super) fn pv_spec(&self, unique: &str) -> Option<VolumeSpec<CsiVolume>> {
        let pv = self.index.read().pvs.get(unique)?.first()?.clone();
        self.spec_of(&pv)
    }

    /// `SetVolume` of each inline volume pods need that no PV gives a spec, by name.
    pub(super) fn inline_only(&self) -> Vec<Input<Kube>> {
        let mut volumes: Vec<(&String, &InlineEntry)> = self
            .inline
            .iter()
            .filter(|(unique, _)| self.pv_spec(unique).is_none())
            .collect();
        volumes.sort_by(|a, b| a.0.cmp(b.0));
        volumes
            .into_iter()
            .map(|(unique, entry)| Input::SetVolume {
                volume: unique.clone(),
                spec: entry.spec.clone(),
            })
            .collect()
    }
}
