//! Node and CSINode events: whether the core manages a node and its facts, and what a node's
//! CSINode says of CSI migration.

use attach_detach::core::{DriverId, Input, Kind, NodeFacts};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::runtime::watcher::Event;
use tracing::warn;

use super::{InformerState, NodeEntry, Source};
use crate::domain::{Kube, driver_id, facts_of};
use crate::nodes::controller_managed;
use crate::translate::MigratedNode;

impl InformerState {
    /// One event of the Node watcher.
    pub fn nodes(&mut self, event: Event<Node>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Nodes);
                out.push(Input::RelistStarted { kind: Kind::Node });
            }
            Event::InitApply(node) => self.apply_node(&node, true, &mut out),
            Event::Apply(node) => self.apply_node(&node, false, &mut out),
            Event::Delete(node) => {
                if let Some(name) = node.metadata.name
                    && self.forget_node(&name, &mut out)
                {
                    out.push(Input::NodeRemoved { node: name });
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.nodes.keys().cloned().collect();
                let mut revealed = Vec::new();
                for name in self.relist_end(Source::Nodes, known.into_iter()) {
                    // The core removes a managed one at RelistDone.
                    self.forget_node(&name, &mut revealed);
                }
                out.push(Input::RelistDone { kind: Kind::Node });
                out.extend(revealed);
            }
        }
        out
    }

    /// Drops a node (deleted, or missing from a relist); whether the core knew it. The pods
    /// of a node kubelet managed are sent from then on, as any pod whose node is not known
    /// (the core lets them wait for it).
    fn forget_node(&mut self, name: &str, out: &mut Vec<Input<Kube>>) -> bool {
        let Some(entry) = self.nodes.remove(name) else {
            return false;
        };
        self.managed.remove(name);
        self.index.write().nodes.remove(name);
        if !entry.managed {
            self.reveal_pods(name, out);
        }
        entry.managed
    }

    fn apply_node(&mut self, node: &Node, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if relist {
            self.seen(Source::Nodes, &name);
        }
        if let Some(uid) = &node.metadata.uid {
            self.index.write().nodes.insert(name.clone(), uid.clone());
        }
        let annotated = controller_managed(&node.metadata);
        let mut facts = node_facts(node);
        facts.driver_limits = self.csi_limits.get(&name).cloned().unwrap_or_default();
        let previous = self.nodes.get(&name);
        let was_managed = previous.is_some_and(|entry| entry.managed);
        if was_managed && !annotated && previous.is_some_and(|entry| entry.annotated) {
            warn!(
                node = name,
                "the node lost its controller-managed-attach-detach annotation: its kubelet \
                 attaches by itself from now on, but this controller keeps managing it (as \
                 upstream does) until the node is deleted or the controller restarts"
            );
        }
        let entry = NodeEntry {
            managed: was_managed || annotated,
            annotated,
            facts,
        };
        if !entry.managed {
            let known = previous.is_some();
            self.nodes.insert(name.clone(), entry);
            self.managed.set(&name, false);
            if !known {
                // Pods sent before the node was seen are kubelet's.
                self.hide_pods(&name, out);
            }
            return;
        }
        let unchanged = was_managed && previous.is_some_and(|old| old.facts == entry.facts);
        let revealed = previous.is_some() && !was_managed;
        let facts = entry.facts.clone();
        self.nodes.insert(name.clone(), entry);
        self.managed.set(&name, true);
        if relist || !unchanged {
            out.push(Input::NodeUpdated {
                node: name.clone(),
                facts,
            });
        }
        if revealed {
            self.reveal_pods(&name, out);
        }
    }

    /// One event of the CSINode watcher: what a node's CSINode says of CSI migration
    /// ([`MigratedNode`]) decides whether its pods' volumes of an in-tree plugin whose
    /// migration is not complete are the core's; when it changes, they are sent again.
    pub fn csi_nodes(&mut self, event: Event<CSINode>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => self.relist_start(Source::CsiNodes),
            Event::InitApply(csi_node) | Event::Apply(csi_node) => {
                if let Some(name) = csi_node.metadata.name.clone() {
                    self.seen(Source::CsiNodes, &name);
                    let migrated = MigratedNode::of(&csi_node);
                    if self.csi_nodes.get(&name) != Some(&migrated) {
                        self.csi_nodes.insert(name.clone(), migrated);
                        self.rederive_pods(self.pods_on(&name).into_iter().collect(), &mut out);
                    }
                    self.set_driver_limits(&name, driver_limits(&csi_node), &mut out);
                }
            }
            Event::Delete(csi_node) => {
                if let Some(name) = csi_node.metadata.name {
                    self.forget_csi_node(&name, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.csi_nodes.keys().cloned().collect();
                for name in self.relist_end(Source::CsiNodes, known.into_iter()) {
                    self.forget_csi_node(&name, &mut out);
                }
            }
        }
        out
    }

    fn forget_csi_node(&mut self, name: &str, out: &mut Vec<Input<Kube>>) {
        if self.csi_nodes.remove(name).is_some() {
            self.rederive_pods(self.pods_on(name).into_iter().collect(), out);
        }
        self.set_driver_limits(name, Vec::new(), out);
    }

    /// A node's CSINode says `limits`: a managed node's facts change with them, and the core
    /// hears of it.
    fn set_driver_limits(
        &mut self,
        name: &str,
        limits: Vec<(DriverId, u32)>,
        out: &mut Vec<Input<Kube>>,
    ) {
        let old = self.csi_limits.get(name).map_or(&[][..], Vec::as_slice);
        if old == limits.as_slice() {
            return;
        }
        if limits.is_empty() {
            self.csi_limits.remove(name);
        } else {
            self.csi_limits.insert(name.to_owned(), limits.clone());
        }
        if let Some(entry) = self.nodes.get_mut(name) {
            entry.facts.driver_limits = limits;
            if entry.managed {
                out.push(Input::NodeUpdated {
                    node: name.to_owned(),
                    facts: entry.facts.clone(),
                });
            }
        }
    }
}

/// The per-driver attach limits a CSINode publishes: each driver's `allocatable.count`, where
/// set (a driver without one has no limit), sorted by the core's driver number.
pub fn driver_limits(csi_node: &CSINode) -> Vec<(DriverId, u32)> {
    let mut limits: Vec<(DriverId, u32)> = (csi_node.spec.drivers.iter())
        .filter_map(|driver| {
            let count = driver.allocatable.as_ref()?.count?;
            Some((driver_id(&driver.name), u32::try_from(count).unwrap_or(0)))
        })
        .collect();
    limits.sort();
    limits.dedup_by_key(|(driver, _)| *driver);
    limits
}

/// A node's facts (see [`InformerState`]).
pub fn node_facts(node: &Node) -> NodeFacts<String> {
    let status = node.status.as_ref();
    facts_of(
        status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str())),
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|t| t.key.as_str()),
        status.and_then(|s| s.volumes_in_use.as_deref()),
    )
}
