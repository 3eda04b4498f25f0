//! Pod events: a pod's volumes resolved (claims through their PVs, inline volumes translated)
//! and sent once it is scheduled to a node the core manages, hidden and revealed as its node
//! changes hands, removed when it ends.

use std::collections::BTreeSet;

use attach_detach::core::{Input, Kind};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use tracing::warn;

use super::index::{PodRef, unlink, unlink_user};
use super::{
    Claim, InformerState, InlineEntry, PodEntry, PodVolume, Source, Translated, key_of, translated,
};
use crate::domain::{AttachSource, Kube, pod_key};
use crate::translate::translate_inline_volume;

impl InformerState {
    /// One event of the Pod watcher.
    pub fn pods(&mut self, event: Event<Pod>) -> Vec<Input<Kube>> {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                self.relist_start(Source::Pods);
                out.push(Input::RelistStarted {
                    kind: Kind::Workload,
                });
            }
            Event::InitApply(pod) => self.apply_pod(&pod, true, &mut out),
            Event::Apply(pod) => self.apply_pod(&pod, false, &mut out),
            Event::Delete(pod) => {
                if let Some(key) = key_of(&pod) {
                    self.remove_pod(&key, &mut out);
                }
            }
            Event::InitDone => {
                let known: Vec<String> = self.pods.keys().cloned().collect();
                // The core removes the unlisted pods at RelistDone; the state forgets them,
                // and the inline volumes only they needed go once they are gone.
                let mut unneeded = Vec::new();
                for key in self.relist_end(Source::Pods, known.into_iter()) {
                    self.forget_pod(&key, &mut unneeded);
                }
                out.push(Input::RelistDone {
                    kind: Kind::Workload,
                });
                out.extend(unneeded);
            }
        }
        out
    }

    fn apply_pod(&mut self, pod: &Pod, relist: bool, out: &mut Vec<Input<Kube>>) {
        let Some(key) = key_of(pod) else { return };
        if relist {
            self.seen(Source::Pods, &key);
        }
        let (Some(node), true) = (scheduled_node(pod), !is_terminated(pod)) else {
            self.remove_pod(&key, out);
            return;
        };
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // A pod's volumes cannot change: the same pod's (same uid) are not translated again
        // at each of its many status updates (nor warned about again).
        let volumes = match self.pods.get(&key) {
            Some(old) if old.uid == uid => old.volumes.clone(),
            _ => volumes_of(pod, &name, &namespace),
        };
        let (sent, inline_sent) = match self.pods.get(&key) {
            Some(old) => {
                let old_namespace = old.namespace.clone();
                let old_claims: Vec<Claim> = old.claims().cloned().collect();
                let (old_node, sent) = (old.node.clone(), old.sent.clone());
                let inline_sent = old.inline_sent.clone();
                for claim in &old_claims {
                    self.unlink_claim(&old_namespace, &claim.name, &key);
                }
                unlink(&mut self.pods_by_node, &old_node, &key);
                (sent, inline_sent)
            }
            None => (None, BTreeSet::new()),
        };
        let entry = PodEntry {
            namespace,
            name,
            uid,
            node: node.clone(),
            volumes,
            sent,
            inline_sent,
        };
        for claim in entry.claims() {
            self.pods_by_claim
                .entry(pod_key(&entry.namespace, &claim.name))
                .or_default()
                .insert(key.clone());
        }
        self.pods_by_node
            .entry(node.clone())
            .or_default()
            .insert(key.clone());
        let volumes = self.resolve(&entry);
        let unchanged = entry
            .sent
            .as_ref()
            .is_some_and(|(sent_node, sent)| *sent_node == node && *sent == volumes);
        self.pods.insert(key.clone(), entry);
        if self.kubelets(&node) {
            self.hide_pod(&key, out);
        } else if relist || !unchanged {
            self.send_pod(&key, volumes, out);
        }
    }

    fn unlink_claim(&mut self, namespace: &str, claim: &str, pod: &str) {
        unlink(&mut self.pods_by_claim, &pod_key(namespace, claim), pod);
    }

    /// Sends `WorkloadScheduled` for an active pod and records what was sent. An inline
    /// volume it needs first is set before (`SetVolume`), one no pod needs any more is
    /// removed after (`VolumeRemoved`).
    fn send_pod(&mut self, key: &str, volumes: Vec<String>, out: &mut Vec<Input<Kube>>) {
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let node = pod.node.clone();
        let previous = pod.sent.replace((node.clone(), volumes.clone()));
        let reference = PodRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let inline: Vec<(Translated, String)> = pod
            .volumes
            .iter()
            .filter_map(|volume| match volume {
                PodVolume::Inline(inline) if volumes.contains(&inline.0.unique) => {
                    Some((**inline).clone())
                }
                _ => None,
            })
            .collect();
        let now: BTreeSet<String> = inline.iter().map(|(t, _)| t.unique.clone()).collect();
        let before = std::mem::replace(&mut pod.inline_sent, now.clone());
        let mut index = self.index.write();
        if let Some((old_node, old)) = previous {
            for volume in old {
                unlink_user(&mut index, &old_node, &volume, key);
            }
        }
        for volume in &volumes {
            index
                .users
                .entry((node.clone(), volume.clone()))
                .or_default()
                .insert(key.to_owned());
        }
        index.pods.insert(key.to_owned(), reference);
        drop(index);
        for (translated, name) in inline {
            if !before.contains(&translated.unique) {
                self.add_inline_user(translated, name, key, out);
            }
        }
        out.push(Input::WorkloadScheduled {
            workload: key.to_owned(),
            node,
            volumes,
        });
        for unique in before.difference(&now) {
            self.remove_inline_user(unique, key, out);
        }
    }

    /// Records that the pod `key` needs the inline volume `translated`; the first pod to
    /// need it sets it, unless a PV gives it a spec already.
    fn add_inline_user(
        &mut self,
        translated: Translated,
        name: String,
        key: &str,
        out: &mut Vec<Input<Kube>>,
    ) {
        let Translated { unique, spec, .. } = translated;
        let entry = self
            .inline
            .entry(unique.clone())
            .or_insert_with(|| InlineEntry {
                spec: spec.clone(),
                users: BTreeSet::new(),
            });
        let first = entry.users.is_empty();
        entry.users.insert(key.to_owned());
        if first {
            self.index.write().inline.insert(unique.clone(), name);
            if self.pv_spec(&unique).is_none() {
                out.push(Input::SetVolume {
                    volume: unique,
                    spec,
                });
            }
        }
    }

    /// Records that the pod `key` no longer needs the inline volume `unique`; once no pod
    /// does, it is removed, unless a PV still gives it a spec.
    fn remove_inline_user(&mut self, unique: &str, key: &str, out: &mut Vec<Input<Kube>>) {
        let Some(entry) = self.inline.get_mut(unique) else {
            return;
        };
        entry.users.remove(key);
        if !entry.users.is_empty() {
            return;
        }
        self.inline.remove(unique);
        self.index.write().inline.remove(unique);
        if self.pv_spec(unique).is_none() {
            out.push(Input::VolumeRemoved {
                volume: unique.to_owned(),
            });
        }
    }

    /// Takes an active pod back from the core (`WorkloadRemoved`), keeping it in the state:
    /// its node is kubelet's.
    fn hide_pod(&mut self, key: &str, out: &mut Vec<Input<Kube>>) {
        let Some(pod) = self.pods.get_mut(key) else {
            return;
        };
        let inline = std::mem::take(&mut pod.inline_sent);
        if let Some((node, sent)) = pod.sent.take() {
            let mut index = self.index.write();
            for volume in &sent {
                unlink_user(&mut index, &node, volume, key);
            }
            index.pods.remove(key);
            drop(index);
            out.push(Input::WorkloadRemoved {
                workload: key.to_owned(),
            });
        }
        for unique in &inline {
            self.remove_inline_user(unique, key, out);
        }
    }

    fn remove_pod(&mut self, key: &str, out: &mut Vec<Input<Kube>>) {
        let mut unneeded = Vec::new();
        if self.forget_pod(key, &mut unneeded) {
            out.push(Input::WorkloadRemoved {
                workload: key.to_owned(),
            });
        }
        out.extend(unneeded);
    }

    /// Drops a pod from the state; whether the core knew it. The inline volumes it alone
    /// needed are removed into `unneeded`.
    fn forget_pod(&mut self, key: &str, unneeded: &mut Vec<Input<Kube>>) -> bool {
        let Some(old) = self.pods.remove(key) else {
            return false;
        };
        for claim in old.claims() {
            self.unlink_claim(&old.namespace, &claim.name, key);
        }
        unlink(&mut self.pods_by_node, &old.node, key);
        for unique in &old.inline_sent {
            self.remove_inline_user(unique, key, unneeded);
        }
        let Some((node, sent)) = old.sent else {
            return false;
        };
        let mut index = self.index.write();
        for volume in &sent {
            unlink_user(&mut index, &node, volume, key);
        }
        index.pods.remove(key);
        true
    }

    /// Sends the active pods on `node` the core does not know (the node became this
    /// controller's, or is no longer known as kubelet's), except, during a pod relist, those
    /// the listing has not shown yet.
    pub(super) fn reveal_pods(&mut self, node: &str, out: &mut Vec<Input<Kube>>) {
        for key in self.pods_on(node) {
            if self.unlisted(&key) {
                continue;
            }
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod.sent.is_none() {
                let volumes = self.resolve(pod);
                self.send_pod(&key, volumes, out);
            }
        }
    }

    /// Takes every active pod on `node` back from the core: the node is kubelet's.
    pub(super) fn hide_pods(&mut self, node: &str, out: &mut Vec<Input<Kube>>) {
        for key in self.pods_on(node) {
            self.hide_pod(&key, out);
        }
    }

    pub(super) fn pods_on(&self, node: &str) -> Vec<String> {
        self.pods_by_node
            .get(node)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether a pod relist is running and has not shown `key` yet.
    fn unlisted(&self, key: &str) -> bool {
        self.relists
            .get(&Source::Pods)
            .is_some_and(|seen| !seen.contains(key))
    }

    /// The unique names of the volumes a pod needs that resolve now, on its node.
    pub(super) fn resolve(&self, pod: &PodEntry) -> Vec<String> {
        let mut volumes: Vec<String> = Vec::new();
        for volume in &pod.volumes {
            let translated = match volume {
                PodVolume::Claim(claim) => self.resolve_claim(&pod.namespace, &pod.uid, claim),
                PodVolume::Inline(inline) => Some(&inline.0),
            };
            if let Some(translated) = translated
                && self.usable_on(&pod.node, translated)
                && !volumes.contains(&translated.unique)
            {
                volumes.push(translated.unique.clone());
            }
        }
        volumes
    }

    fn resolve_claim(&self, namespace: &str, pod_uid: &str, claim: &Claim) -> Option<&Translated> {
        let pvc = self.claims.get(&pod_key(namespace, &claim.name))?;
        if claim.ephemeral && pvc.owner.as_deref() != Some(pod_uid) {
            return None;
        }
        let pv = self.pvs.get(pvc.bound.as_ref()?)?;
        // Upstream's getPVSpecFromCache: a PV whose `claimRef` is unset is not bound yet
        // (the binder sets it before the claim's `volumeName`), and one naming another claim
        // uid is someone else's.
        if pv.claim_uid.as_deref() != Some(pvc.uid.as_str()) {
            return None;
        }
        pv.csi.as_ref()
    }

    /// Sends again the pods named by these claims whose volumes changed.
    pub(super) fn rederive(
        &mut self,
        claims: impl IntoIterator<Item = String>,
        out: &mut Vec<Input<Kube>>,
    ) {
        let mut pods = BTreeSet::new();
        for claim in claims {
            if let Some(users) = self.pods_by_claim.get(&claim) {
                pods.extend(users.iter().cloned());
            }
        }
        self.rederive_pods(pods, out);
    }

    /// Sends again these pods, if the core knows them and their volumes changed.
    pub(super) fn rederive_pods(&mut self, pods: BTreeSet<String>, out: &mut Vec<Input<Kube>>) {
        for key in pods {
            if self.unlisted(&key) {
                continue;
            }
            let Some(pod) = self.pods.get(&key) else {
                continue;
            };
            if pod.sent.is_none() {
                // Not the core's (its node is kubelet's).
                continue;
            }
            let volumes = self.resolve(pod);
            if volumes != pod.sent_volumes() {
                self.send_pod(&key, volumes, out);
            }
        }
    }
}

fn scheduled_node(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|node| !node.is_empty())
}

/// Upstream's `IsPodTerminated`: phase `Failed` or `Succeeded`, or being deleted with every
/// init, regular and ephemeral container stopped. A container has stopped only when its state
/// says `terminated` or `waiting` (upstream's `notRunning`): one with no state yet may be
/// running, and a debugging container still writes to the pod's volumes.
fn is_terminated(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return pod.metadata.deletion_timestamp.is_some();
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    pod.metadata.deletion_timestamp.is_some()
        && status
            .init_container_statuses
            .iter()
            .chain(status.container_statuses.iter())
            .chain(status.ephemeral_container_statuses.iter())
            .flatten()
            .all(|c| {
                c.state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some() || s.waiting.is_some())
            })
}

/// What the pod's volumes may need attached, in the pod's order: its claims (a generic
/// ephemeral volume's is `{pod}-{volume}`), and its inline in-tree volumes as CSI migration
/// translates them (one that does not translate is skipped, as upstream skips it).
fn volumes_of(pod: &Pod, pod_name: &str, namespace: &str) -> Vec<PodVolume> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                return Some(PodVolume::Claim(Claim {
                    name: pvc.claim_name.clone(),
                    ephemeral: false,
                }));
            }
            if v.ephemeral.is_some() {
                return Some(PodVolume::Claim(Claim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                }));
            }
            match translate_inline_volume(v, namespace) {
                Ok(Some(csi)) => {
                    let name = csi.name().to_owned();
                    let source = AttachSource::Inline(Box::new(csi.spec()));
                    Some(PodVolume::Inline(Box::new((
                        translated(&csi, source),
                        name,
                    ))))
                }
                Ok(None) => None,
                Err(error) => {
                    warn!(pod = pod_key(namespace, pod_name), volume = v.name, %error,
                        "skipping an inline volume CSI migration cannot translate");
                    None
                }
            }
        })
        .collect()
}
