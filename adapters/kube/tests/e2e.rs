//! End to end against a real cluster: runs only when `KUBECONFIG` is set, and skips loudly
//! otherwise (no API server can be had on the machines this crate is built on).
//!
//! Prerequisites (see the README): a cluster (kind) with upstream's attach/detach controller
//! off, a CSI driver with `attachRequired: true` and an external-attacher (csi-driver-host-path,
//! StorageClass `csi-hostpath-sc`, or `E2E_STORAGE_CLASS`), and the example controller running.
//!
//! It creates a PVC and a pod using it, waits for the VolumeAttachment of the volume on the
//! pod's node and for the node's `status.volumesAttached` to list it, deletes the pod, and
//! waits until both are gone. Objects are named `attach-detach-e2e-*` in `E2E_NAMESPACE`
//! (default `default`) and deleted at the end.

use std::future::Future;
use std::io::Write;
use std::time::Duration;

use attach_detach_kube::unique_name;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

const NAME: &str = "attach-detach-e2e";
const TIMEOUT: Duration = Duration::from_secs(180);

/// Polls `probe` every second until it yields a value, for at most [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn attached_to(node: &Node, volume: &str) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.volumes_attached.as_ref())
        .is_some_and(|v| v.iter().any(|a| a.name == volume))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_volume_is_attached_then_detached() {
    if std::env::var_os("KUBECONFIG").is_none() {
        // Straight to stderr: the test harness captures `eprintln!` of a passing test, and a
        // skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "*** SKIPPED attach-detach-kube e2e: KUBECONFIG is not set (needs a cluster with a \
             CSI driver and the example controller running; see adapters/kube/README.md) ***"
        );
        return;
    }
    let client = Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let namespace = std::env::var("E2E_NAMESPACE").unwrap_or_else(|_| "default".into());
    let class = std::env::var("E2E_STORAGE_CLASS").unwrap_or_else(|_| "csi-hostpath-sc".into());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());

    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "1Mi"}}}
    }))
    .unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": NAME},
        "spec": {
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                            "volumeMounts": [{"name": "v", "mountPath": "/data"}]}],
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": NAME}}],
            "terminationGracePeriodSeconds": 1
        }
    }))
    .unwrap();
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("create the PVC");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the pod");

    // Scheduled and bound: the pod's node and the PV's unique name.
    let node = eventually("the pod to be scheduled", || async {
        pods.get(NAME).await.ok()?.spec?.node_name
    })
    .await;
    let pv = eventually("the PVC to be bound", || async {
        pvcs.get(NAME).await.ok()?.spec?.volume_name
    })
    .await;
    let csi = pvs
        .get(&pv)
        .await
        .unwrap()
        .spec
        .unwrap()
        .csi
        .expect("a CSI PV");
    let volume = unique_name(&csi.driver, &csi.volume_handle);
    let attachment = attach_detach_kube::attachment_name(&csi.volume_handle, &csi.driver, &node);

    eventually("the VolumeAttachment to be attached", || async {
        let va = attachments.get(&attachment).await.ok()?;
        assert_eq!(va.spec.node_name, node);
        va.status?.attached.then_some(())
    })
    .await;
    eventually("Node.status.volumesAttached to list the volume", || async {
        attached_to(&nodes.get(&node).await.ok()?, &volume).then_some(())
    })
    .await;

    pods.delete(NAME, &DeleteParams::default())
        .await
        .expect("delete the pod");
    eventually("the VolumeAttachment to be deleted", || async {
        attachments
            .get_opt(&attachment)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("Node.status.volumesAttached to drop the volume", || async {
        (!attached_to(&nodes.get(&node).await.ok()?, &volume)).then_some(())
    })
    .await;

    let _ = pvcs.delete(NAME, &DeleteParams::default()).await;
}
