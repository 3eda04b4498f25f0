//! What runs beside the controller on the fake API server of [`super::apiserver`]: kubelets
//! and a CSI external-attacher, as tasks that act on the objects directly, and the example
//! controller as a child process with a kubeconfig pointing at the fake.
//!
//! **Kubelet** (each node not [`Sims::crash`]ed), at every change and every second:
//! - the volumes its pods need: each `persistentVolumeClaim` → the claim's `volumeName` → a
//!   CSI PV, or an `awsElasticBlockStore` PV as CSI migration hands it to `ebs.csi.aws.com`
//!   (the handle is the volume ID without its `aws://{zone}/` prefix) →
//!   `kubernetes.io/csi/{driver}^{handle}`;
//! - `status.volumesInUse`: the needed volumes and those still mounted, reported before they
//!   are attached (as upstream's volume manager reports its desired volumes in use), only
//!   those of drivers that need attach (a CSIDriver with `attachRequired: false` does not);
//! - on a node with the `volumes.kubernetes.io/controller-managed-attach-detach` annotation,
//!   it mounts a needed volume only once `status.volumesAttached` lists it (upstream's
//!   `verifyControllerAttachedVolume`); on a node without it ([`Sims::add_kubelet_node`]), it
//!   attaches by itself: it creates the VolumeAttachment (named as the CSI attacher names it)
//!   and mounts once it is attached, and deletes it once the volume is unmounted (unless
//!   [`Sims::hold_own_detaches`]); a volume of a driver that needs no attach is mounted at
//!   once. A pod is `Running` once all its volumes are mounted; a volume no pod needs is
//!   unmounted;
//! - a pod being deleted stops: its volumes are unmounted and then the kubelet removes the
//!   object;
//! - its `Ready` condition is renewed every second (a heartbeat), so the node object changes
//!   under the controller's writes as a real kubelet's does.
//!
//! **External-attacher** (for every driver): a new VolumeAttachment gets the finalizer
//! `external-attacher/<driver>` and `status.attached` (ControllerPublish succeeded); a deleted
//! one loses its finalizer (ControllerUnpublish succeeded) and goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::apiserver::{ATTACHMENTS, ApiServer, CSI_DRIVERS, NODES, PODS, PVCS, PVS};

/// The annotation of a node whose kubelet leaves attach and detach to the controller.
pub const MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// The controller's service account, as `deploy/rbac.yaml` names it.
pub const CONTROLLER: &str = "system:serviceaccount:kube-system:attach-detach-controller";

/// The simulated kubelets and external-attacher of one fake API server.
#[derive(Clone)]
pub struct Sims {
    server: ApiServer,
    state: Arc<Mutex<SimState>>,
}

#[derive(Default)]
struct SimState {
    /// Nodes whose kubelet runs, and what each has mounted.
    kubelets: BTreeMap<String, BTreeSet<String>>,
    /// Pods (namespace, name) by node, and each pod's node.
    pods_by_node: HashMap<String, BTreeSet<(String, String)>>,
    pod_nodes: HashMap<(String, String), String>,
    /// Nodes to look at, and VolumeAttachments for the attacher.
    dirty: BTreeSet<String>,
    attachments: BTreeSet<String>,
    /// The server's revision seen last.
    seen: u64,
    /// Nodes whose kubelet, attaching by itself, does not delete its VolumeAttachments.
    held: BTreeSet<String>,
}

impl Sims {
    /// Starts the external-attacher and the kubelets' loop on `server`, kubelets posting a
    /// heartbeat every second.
    pub fn start(server: &ApiServer) -> (Sims, JoinHandle<()>) {
        Self::start_with(server, Some(Duration::from_secs(1)))
    }

    /// [`Sims::start`], with heartbeats every `heartbeat` (`None`: a kubelet writes its status
    /// only when its volumes change, as a real one between its 5-minute reports).
    pub fn start_with(server: &ApiServer, heartbeat: Option<Duration>) -> (Sims, JoinHandle<()>) {
        let sims = Sims {
            server: server.clone(),
            state: Arc::default(),
        };
        let running = sims.clone();
        let task = tokio::spawn(async move {
            let mut changes = running.server.changes();
            let mut beat = tokio::time::interval(heartbeat.unwrap_or(Duration::from_secs(3600)));
            loop {
                let heartbeat = tokio::select! {
                    _ = changes.changed() => false,
                    _ = beat.tick() => heartbeat.is_some(),
                };
                running.absorb();
                running.attacher_step();
                running.kubelet_step(heartbeat);
            }
        });
        (sims, task)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in the server's changes since the last look: which nodes and attachments to
    /// look at.
    fn absorb(&self) {
        let seen = self.lock().seen;
        let (revision, changes) = match self.server.changes_since(seen) {
            Some(found) => found,
            None => {
                // Too far behind: everything, from the objects as they are.
                let revision = self.server.revision();
                let mut all: Vec<(super::apiserver::Resource, Value)> = Vec::new();
                for resource in [PODS, NODES, ATTACHMENTS] {
                    all.extend(
                        self.server
                            .list(resource)
                            .into_iter()
                            .map(|o| (resource, o)),
                    );
                }
                (revision, all)
            }
        };
        let mut state = self.lock();
        state.seen = revision;
        for (resource, object) in changes {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if resource == PODS {
                let ns = object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let key = (ns, name);
                if let Some(old) = state.pod_nodes.remove(&key) {
                    if let Some(pods) = state.pods_by_node.get_mut(&old) {
                        pods.remove(&key);
                    }
                    state.dirty.insert(old);
                }
                let exists = self.server.get(PODS, &key.0, &key.1).is_some();
                if let (true, Some(node)) = (exists, object["spec"]["nodeName"].as_str()) {
                    state
                        .pods_by_node
                        .entry(node.to_owned())
                        .or_default()
                        .insert(key.clone());
                    state.pod_nodes.insert(key, node.to_owned());
                    state.dirty.insert(node.to_owned());
                }
            } else if resource == NODES {
                state.dirty.insert(name);
            } else if resource == ATTACHMENTS {
                state.attachments.insert(name);
            } else if resource == PVCS || resource == PVS || resource == CSI_DRIVERS {
                let all: Vec<String> = state.kubelets.keys().cloned().collect();
                state.dirty.extend(all);
            }
        }
    }

    /// Registers a node whose kubelet runs and leaves attach and detach to the controller
    /// (the `volumes.kubernetes.io/controller-managed-attach-detach` annotation): `Ready`,
    /// nothing attached or in use.
    pub fn add_node(&self, name: &str) {
        {
            let mut state = self.lock();
            state.kubelets.insert(name.to_owned(), BTreeSet::new());
            state.dirty.insert(name.to_owned());
        }
        self.server.put(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {MANAGED: "true"}},
            "spec": {},
            "status": {"conditions": [ready(0)]},
        }));
    }

    /// Registers a node whose kubelet runs and attaches and detaches by itself
    /// (`--enable-controller-attach-detach=false`: no annotation): `Ready`, nothing attached.
    pub fn add_kubelet_node(&self, name: &str) {
        self.add_node(name);
        self.server.edit(NODES, "", name, |n| {
            if let Some(meta) = n["metadata"].as_object_mut() {
                meta.remove("annotations");
            }
        });
    }

    /// Whether the kubelet of `node`, attaching by itself, keeps (`true`) the
    /// VolumeAttachments of the volumes it unmounted instead of deleting them, as one whose
    /// detach is slow.
    pub fn hold_own_detaches(&self, node: &str, held: bool) {
        let mut state = self.lock();
        if held {
            state.held.insert(node.to_owned());
        } else {
            state.held.remove(node);
        }
        state.dirty.insert(node.to_owned());
    }

    /// Registers the kubelet of a node already put on the server, with the volumes of its
    /// `volumesInUse` mounted.
    pub fn adopt_node(&self, name: &str) {
        let node = self.server.get(NODES, "", name).unwrap_or(Value::Null);
        let mounted = node["status"]["volumesInUse"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let mut state = self.lock();
        state.kubelets.insert(name.to_owned(), mounted);
        state.dirty.insert(name.to_owned());
    }

    /// The node's machine dies: its kubelet stops, and the node lifecycle controller marks it
    /// `Ready: Unknown`; `volumesInUse` stays as it was.
    pub fn crash(&self, node: &str) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kubelets
            .remove(node);
        self.server.edit(NODES, "", node, |n| {
            n["status"]["conditions"] = json!([{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            }]);
        });
    }

    /// An operator puts the out-of-service taint on the node.
    pub fn fence(&self, node: &str) {
        self.server.edit(NODES, "", node, |n| {
            n["spec"]["taints"] = json!([{
                "key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                "effect": "NoExecute",
            }]);
        });
    }

    /// A CSI PV `name` of `driver` and `handle`, single-node, bound to claim `namespace/claim`
    /// (created too).
    pub fn add_claimed_volume(
        &self,
        namespace: &str,
        claim: &str,
        name: &str,
        driver: &str,
        handle: &str,
    ) {
        self.add_claimed(
            namespace,
            claim,
            name,
            json!({"csi": {"driver": driver, "volumeHandle": handle}}),
        );
    }

    /// A PV `name` with `source` (its `spec` but access modes and claimRef: `{"csi": ..}`, or
    /// an in-tree source), bound to claim `namespace/claim` (created too).
    pub fn add_claimed(&self, namespace: &str, claim: &str, name: &str, source: Value) {
        let claim_object = self.server.put(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"namespace": namespace, "name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": name},
            "status": {"phase": "Bound"},
        }));
        let mut spec = source;
        spec["accessModes"] = json!(["ReadWriteOnce"]);
        spec["claimRef"] = json!({
            "namespace": namespace, "name": claim,
            "uid": claim_object["metadata"]["uid"],
        });
        self.server.put(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": spec,
            "status": {"phase": "Bound"},
        }));
    }

    /// A pod `namespace/name` on `node` with one volume of claim `claim`.
    pub fn add_pod(&self, namespace: &str, name: &str, node: &str, claim: &str) {
        self.server.put(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            },
            "status": {"phase": "Pending"},
        }));
    }

    /// The pod is deleted gracefully: its kubelet stops it, unmounts, and removes it.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.server.edit(PODS, namespace, name, |p| {
            p["metadata"]["deletionTimestamp"] =
                json!(k8s_openapi::jiff::Timestamp::now().to_string());
        });
    }

    /// The pod is removed at once (`--force --grace-period=0`, or by the pod GC for a dead
    /// node).
    pub fn force_delete_pod(&self, namespace: &str, name: &str) {
        self.server.remove(PODS, namespace, name);
    }

    /// Whether the pod runs.
    pub fn running(&self, namespace: &str, name: &str) -> bool {
        self.server
            .get(PODS, namespace, name)
            .is_some_and(|p| p["status"]["phase"] == "Running")
    }

    /// The names in the node's `status.volumesAttached`.
    pub fn attached(&self, node: &str) -> Vec<String> {
        let node = self.server.get(NODES, "", node).unwrap_or(Value::Null);
        node["status"]["volumesAttached"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The VolumeAttachment of `pv` on `node`, if one exists.
    pub fn attachment(&self, pv: &str, node: &str) -> Option<Value> {
        self.server.list(ATTACHMENTS).into_iter().find(|va| {
            va["spec"]["nodeName"] == node && va["spec"]["source"]["persistentVolumeName"] == pv
        })
    }

    /// The unique name of the CSI volume of PV `pv` (an EBS one as migrated to CSI).
    pub fn unique_name(&self, pv: &str) -> Option<String> {
        let (driver, handle) = self.csi_of(pv)?;
        Some(format!("kubernetes.io/csi/{driver}^{handle}"))
    }

    /// The CSI driver and volume handle of PV `pv`: its `csi` source, or an
    /// `awsElasticBlockStore` volume as CSI migration translates it (`aws://{zone}/{id}` and
    /// `aws:///{id}` become `{id}`).
    pub fn csi_of(&self, pv: &str) -> Option<(String, String)> {
        let pv = self.server.get(PVS, "", pv)?;
        let spec = &pv["spec"];
        if let Some(id) = spec["awsElasticBlockStore"]["volumeID"].as_str() {
            let handle = match id.strip_prefix("aws://") {
                Some(rest) => rest.rsplit('/').next().unwrap_or(rest),
                None => id,
            };
            return Some(("ebs.csi.aws.com".to_owned(), handle.to_owned()));
        }
        let csi = &spec["csi"];
        Some((
            csi["driver"].as_str()?.to_owned(),
            csi["volumeHandle"].as_str()?.to_owned(),
        ))
    }

    /// Whether `driver` needs attach: unless its CSIDriver says `attachRequired: false` (no
    /// CSIDriver: it does, as kubelet assumes).
    pub fn attach_required(&self, driver: &str) -> bool {
        self.server
            .get(CSI_DRIVERS, "", driver)
            .is_none_or(|d| d["spec"]["attachRequired"] != false)
    }

    /// Whether the node leaves attach and detach to the controller (its annotation).
    pub fn controller_managed(&self, node: &str) -> bool {
        self.server
            .get(NODES, "", node)
            .is_some_and(|n| n["metadata"]["annotations"][MANAGED] == "true")
    }

    fn attacher_step(&self) {
        for va in self.server.list(ATTACHMENTS) {
            let name = va["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !va["metadata"]["deletionTimestamp"].is_null() {
                // ControllerUnpublish done: the finalizer goes, and with it the object.
                self.server.remove(ATTACHMENTS, "", &name);
                continue;
            }
            if va["status"]["attached"] == true {
                continue;
            }
            let driver = va["spec"]["attacher"].as_str().unwrap_or_default();
            let finalizer: String = format!("external-attacher/{driver}")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '/' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            self.server.edit(ATTACHMENTS, "", &name, |va| {
                va["metadata"]["finalizers"] = json!([finalizer]);
                va["status"] = json!({"attached": true});
            });
        }
    }

    /// The volumes the pods of `node` need, and the pods, by name, with whether each is being
    /// deleted and what it needs.
    fn pods_of(&self, node: &str) -> Vec<(String, String, bool, Vec<String>)> {
        let keys: Vec<(String, String)> = self
            .lock()
            .pods_by_node
            .get(node)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default();
        keys.into_iter()
            .filter_map(|(ns, name)| self.server.get(PODS, &ns, &name))
            .map(|p| {
                let ns = p["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let deleting = !p["metadata"]["deletionTimestamp"].is_null();
                let needs = p["spec"]["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                    .filter_map(|claim| {
                        let pvc = self.server.get(PVCS, &ns, claim)?;
                        self.unique_name(pvc["spec"]["volumeName"].as_str()?)
                    })
                    .collect();
                (ns, name, deleting, needs)
            })
            .collect()
    }

    /// What a kubelet attaching by itself does for `needed` on `node`: the VolumeAttachment of
    /// each needed volume created if missing, those of volumes neither needed nor `mounted`
    /// deleted (unless held); the volumes whose attachment is attached.
    fn attach_by_itself(
        &self,
        node: &str,
        needed: &BTreeSet<String>,
        mounted: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let pvs: BTreeMap<String, String> = self
            .server
            .list(PVS)
            .into_iter()
            .filter_map(|pv| {
                let name = pv["metadata"]["name"].as_str()?.to_owned();
                Some((self.unique_name(&name)?, name))
            })
            .collect();
        let mut attached = BTreeSet::new();
        for volume in needed {
            let Some(pv) = pvs.get(volume) else { continue };
            let Some((driver, handle)) = self.csi_of(pv) else {
                continue;
            };
            let name = kubelet_attachment_name(&handle, &driver, node);
            match self.server.get(ATTACHMENTS, "", &name) {
                Some(va) => {
                    if va["status"]["attached"] == true
                        && va["metadata"]["deletionTimestamp"].is_null()
                    {
                        attached.insert(volume.clone());
                    }
                }
                None => {
                    self.server.put(json!({
                        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                        "metadata": {"name": name},
                        "spec": {"attacher": driver, "nodeName": node,
                                 "source": {"persistentVolumeName": pv}},
                    }));
                }
            }
        }
        if self.lock().held.contains(node) {
            return attached;
        }
        for va in self.server.list(ATTACHMENTS) {
            if va["spec"]["nodeName"] != node || !va["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let pv = va["spec"]["source"]["persistentVolumeName"]
                .as_str()
                .unwrap_or_default();
            let Some(volume) = self.unique_name(pv) else {
                continue;
            };
            if needed.contains(&volume) || mounted.contains(&volume) {
                continue;
            }
            let name = va["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.server.edit(ATTACHMENTS, "", &name, |va| {
                va["metadata"]["deletionTimestamp"] =
                    json!(k8s_openapi::jiff::Timestamp::now().to_string());
            });
        }
        attached
    }

    fn kubelet_step(&self, heartbeat: bool) {
        let nodes: Vec<(String, BTreeSet<String>)> = {
            let mut state = self.lock();
            let dirty = if heartbeat {
                state.dirty.clear();
                state.kubelets.keys().cloned().collect()
            } else {
                std::mem::take(&mut state.dirty)
            };
            dirty
                .into_iter()
                .filter_map(|n| state.kubelets.get(&n).map(|m| (n, m.clone())))
                .collect()
        };
        for (node, mut mounted) in nodes {
            let pods = self.pods_of(&node);
            let needed: BTreeSet<String> = pods
                .iter()
                .filter(|p| !p.2)
                .flat_map(|p| p.3.iter().cloned())
                .collect();
            let unmounting = mounted.clone();
            mounted.retain(|v| needed.contains(v));
            let attached: BTreeSet<String> = if self.controller_managed(&node) {
                self.attached(&node).into_iter().collect()
            } else {
                self.attach_by_itself(&node, &needed, &unmounting)
            };
            // `kubernetes.io/csi/{driver}^{handle}`: its driver.
            let driver_of = |volume: &str| {
                volume
                    .strip_prefix("kubernetes.io/csi/")
                    .and_then(|v| v.split('^').next())
                    .unwrap_or_default()
                    .to_owned()
            };
            let attachable: BTreeSet<String> = needed
                .iter()
                .chain(&unmounting)
                .filter(|v| self.attach_required(&driver_of(v)))
                .cloned()
                .collect();
            for volume in &needed {
                if attached.contains(volume) || !attachable.contains(volume) {
                    mounted.insert(volume.clone());
                }
            }
            for (ns, name, deleting, needs) in &pods {
                if *deleting {
                    // Stopped and unmounted (its volumes left `mounted` above): gone.
                    self.server.remove(PODS, ns, name);
                    continue;
                }
                let phase = if needs.iter().all(|v| mounted.contains(v)) {
                    "Running"
                } else {
                    "Pending"
                };
                self.server.edit(PODS, ns, name, |p| {
                    p["status"]["phase"] = json!(phase);
                });
            }
            let in_use: Vec<String> = needed
                .union(&mounted)
                .filter(|v| attachable.contains(*v))
                .cloned()
                .collect();
            self.server.edit(NODES, "", &node, |n| {
                if heartbeat {
                    let beat = n["status"]["conditions"][0]["message"]
                        .as_str()
                        .and_then(|m| m.strip_prefix("heartbeat "))
                        .and_then(|b| b.parse::<u64>().ok())
                        .unwrap_or(0);
                    n["status"]["conditions"] = json!([ready(beat + 1)]);
                }
                if in_use.is_empty() {
                    if let Some(status) = n["status"].as_object_mut() {
                        status.remove("volumesInUse");
                    }
                } else {
                    n["status"]["volumesInUse"] = json!(in_use);
                }
            });
            if let Some(kept) = self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .kubelets
                .get_mut(&node)
            {
                *kept = mounted;
            }
        }
    }
}

/// The name upstream's CSI attacher gives the VolumeAttachment of `handle` of `driver` on
/// `node` (`csi-` and the SHA-256 of the three, in hex), computed here as kubelet does.
pub fn kubelet_attachment_name(handle: &str, driver: &str, node: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{handle}{driver}{node}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

fn ready(beat: u64) -> Value {
    json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
           "message": format!("heartbeat {beat}")})
}

/// The example controller's binary, built once per test process by the cargo running the
/// tests (`cargo build --example controller`, with this build's profile and features), since
/// cargo gives tests the paths of binaries only, not of examples.
pub fn controller_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = std::process::Command::new(cargo);
            build
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args([
                    "build",
                    "-p",
                    "attach-detach-kube",
                    "--example",
                    "controller",
                    "--message-format=json-render-diagnostics",
                ])
                .stderr(Stdio::inherit());
            // What cargo sets for this test process must not reach the build: ring's build
            // script reruns when CARGO_MANIFEST_DIR changes, and with it half the tree.
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy().into_owned();
                let set_for_tests = [
                    "CARGO_PKG_",
                    "CARGO_MANIFEST_",
                    "CARGO_BIN_",
                    "CARGO_CRATE_",
                ]
                .iter()
                .any(|p| key.starts_with(p))
                    || [
                        "CARGO_PRIMARY_PACKAGE",
                        "CARGO_TARGET_TMPDIR",
                        "CARGO_RUSTC_CURRENT_DIR",
                        "OUT_DIR",
                    ]
                    .contains(&key.as_str());
                if set_for_tests {
                    build.env_remove(&key);
                }
            }
            if !cfg!(debug_assertions) {
                build.arg("--release");
            }
            if cfg!(feature = "k8s-latest") {
                build.args(["--features", "k8s-latest"]);
            }
            let output = build.output().expect("cargo runs");
            assert!(output.status.success(), "the example did not build");
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(|m| {
                    m["reason"] == "compiler-artifact" && m["target"]["name"] == "controller"
                })
                .find_map(|m| m["executable"].as_str().map(PathBuf::from))
                .expect("the example's executable")
        })
        .clone()
}

/// The example controller, running against `server` as the controller's service account.
pub struct ControllerProcess {
    /// The child.
    pub child: Child,
    /// What it wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    _kubeconfig: tempfile_path::TempPath,
}

/// A file removed when dropped.
mod tempfile_path {
    /// The path of a temporary file, removed on drop.
    pub struct TempPath(pub std::path::PathBuf);
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl ControllerProcess {
    /// Starts the example with a kubeconfig for `server` and `token`, no `HOSTNAME` in its
    /// environment, and `env` set.
    pub fn start(server: &ApiServer, token: &str, env: &[(&str, &str)]) -> ControllerProcess {
        let path = std::env::temp_dir().join(format!(
            "attach-detach-e2e-{}-{}.kubeconfig",
            std::process::id(),
            token
        ));
        std::fs::write(&path, server.kubeconfig(token)).expect("a kubeconfig file");
        let mut command = Command::new(controller_binary());
        command
            .env_clear()
            .env("KUBECONFIG", &path)
            .env("POD_NAMESPACE", "kube-system")
            .env("RUST_LOG", "info,attach_detach=info")
            // Any free port: two controllers run at once, and 9808 may be taken.
            .env("ENDPOINTS_ADDRESS", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the example starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut pipe = child.stderr.take().expect("stderr");
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buffer = vec![0; 8192];
            while let Ok(n) = pipe.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        ControllerProcess {
            child,
            stderr,
            _kubeconfig: tempfile_path::TempPath(path),
        }
    }

    /// Where its endpoints listen, from the line it prints once they do.
    pub fn endpoints(&self) -> Option<std::net::SocketAddr> {
        let log = self.log();
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix("attach-detach: endpoints on http://"))?;
        line.split_whitespace().next()?.parse().ok()
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// SIGTERM, then waits for it to stop (at most 20 s); its exit code.
    pub async fn stop(mut self) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => None,
        }
    }
}

/// Waits until `done` holds, checking every 100 ms, at most `limit`; whether it did.
pub async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
