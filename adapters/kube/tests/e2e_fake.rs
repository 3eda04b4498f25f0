//! End to end without a cluster: `examples/controller.rs` runs as a child process with a
//! kubeconfig pointing at a fake API server served over HTTP on 127.0.0.1 by this test
//! process (`common/apiserver.rs`), which enforces `deploy/rbac.yaml` for the controller's
//! service account (`common/rbac.rs`); kubelets and an external-attacher are simulated on it
//! (`common/sims.rs`). Real time: each scenario takes seconds.
//!
//! The three seeds' incidents run at once, each on nodes and a volume of its own, against one
//! controller; so do the three cases of what the controller manages: a migrated in-tree EBS
//! volume moving between nodes (named as kubelet names it), a driver that needs no attach
//! (nothing attached, nothing listed), and a node whose kubelet attaches by itself (nothing
//! written, and its VolumeAttachments left alone by a restarted controller's recovery). A
//! scenario is a function of [`Sims`] (objects in, waits and assertions out): a migrated
//! in-tree volume is [`Sims::add_claimed`] with an `awsElasticBlockStore` source, a driver
//! without attach a `CSIDriver` object put with [`ApiServer::put`], a kubelet-managed node
//! [`Sims::add_kubelet_node`].
//!
//! The RBAC proof is mechanical: the run records every request; none may be refused (403),
//! and each permission of `deploy/rbac.yaml` must be the only one allowing some request of
//! the run, so that removing it makes the server refuse that request and this test fail.

mod common;
// The endpoints crate's minimal HTTP client; this test uses some of it.
#[path = "../../endpoints/tests/common/mod.rs"]
#[allow(dead_code)]
mod http;

use std::time::Duration;

use serde_json::json;

use common::apiserver::{ATTACHMENTS, ApiServer, EVENTS, LEASES, NODES, PODS};
use common::rbac::Policy;
use common::sims::{
    CONTROLLER, ControllerProcess, MANAGED, Sims, controller_binary, kubelet_attachment_name, until,
};

const DRIVER: &str = "hostpath.csi.k8s.io";
const NS: &str = "default";

/// One scenario at a time: each runs a controller process and watches real time, and the
/// machine has two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A controller on a fresh fake with RBAC enforced, and its simulators.
async fn cluster() -> (ApiServer, Sims, String) {
    let server = ApiServer::start().await;
    server.enforce(Some(Policy::deployed()));
    let token = server.token(CONTROLLER);
    let (sims, _task) = Sims::start(&server);
    (server, sims, token)
}

/// Seed 000 (upstream 49053/72181/88565): a detach refused by an admission webhook, and the
/// pod comes back to the same node: the volume is reported again in the node's
/// `volumesAttached` and the pod runs while the detach is still refused.
async fn seed_000(server: &ApiServer, sims: &Sims, refused: &std::sync::atomic::AtomicBool) {
    sims.add_claimed_volume(NS, "c0", "pv-0", DRIVER, "h0");
    sims.add_pod(NS, "web-0", "s0-n1", "c0");
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "web-0")).await,
        "seed 000: web-0 never ran"
    );
    refused.store(true, std::sync::atomic::Ordering::SeqCst);
    sims.delete_pod(NS, "web-0");
    let detaches_refused = || {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.verb == "delete"
                    && r.resource == "volumeattachments"
                    && r.code == 403
                    && !r.forbidden
            })
            .count()
    };
    // Tried, refused, and retried (the second refusal's event is a repeat: a PATCH).
    assert!(
        until(Duration::from_secs(30), || detaches_refused() >= 2).await,
        "seed 000: the detach was not tried twice ({} refusals)",
        detaches_refused()
    );
    sims.add_pod(NS, "web-1", "s0-n1", "c0");
    assert!(
        until(Duration::from_secs(20), || sims.running(NS, "web-1")).await,
        "seed 000: web-1 did not run while the detach was refused; n1 lists {:?}",
        sims.attached("s0-n1")
    );
    refused.store(false, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unique = sims.unique_name("pv-0").expect("pv-0");
    assert!(sims.running(NS, "web-1"), "seed 000: web-1 stopped");
    assert!(
        sims.attached("s0-n1").contains(&unique),
        "seed 000: the volume left n1's status"
    );
    let va = sims
        .attachment("pv-0", "s0-n1")
        .expect("seed 000: n1's VolumeAttachment");
    assert!(
        va["metadata"]["deletionTimestamp"].is_null(),
        "seed 000: {va}"
    );
}

/// Seed 002 (upstream 122413): a pod leaves and another comes back to the node a second later
/// while a stale second writer writes back 3 s old `volumesAttached` lists: the volume
/// reappears and stays, the stale writes refused by the store's field `test`.
async fn seed_002(server: &ApiServer, sims: &Sims) {
    sims.add_claimed_volume(NS, "c2", "pv-2", DRIVER, "h2");
    let unique = sims.unique_name("pv-2").expect("pv-2");
    sims.add_pod(NS, "db-0", "s2-n1", "c2");
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "db-0")).await,
        "seed 002: db-0 never ran"
    );
    sims.delete_pod(NS, "db-0");
    assert!(
        until(Duration::from_secs(30), || !sims
            .attached("s2-n1")
            .contains(&unique)
            && sims.attachment("pv-2", "s2-n1").is_none())
        .await,
        "seed 002: db-0's volume was not detached"
    );
    let mut history: std::collections::VecDeque<(tokio::time::Instant, serde_json::Value)> =
        Default::default();
    let (mut refused, mut applied) = (0, 0);
    let mut stale_write = |history: &mut std::collections::VecDeque<_>| {
        let now = tokio::time::Instant::now();
        let current =
            server.get(NODES, "", "s2-n1").expect("n1")["status"]["volumesAttached"].clone();
        history.push_back((now, current.clone()));
        while history.len() > 1 && now.duration_since(history[1].0) >= Duration::from_secs(3) {
            history.pop_front();
        }
        let (_, copy) = history.front().cloned().expect("a copy");
        if copy == current {
            return;
        }
        let list = if copy.is_null() {
            json!([])
        } else {
            copy.clone()
        };
        let patch = json!([
            {"op": "test", "path": "/status/volumesAttached", "value": copy},
            {"op": "add", "path": "/status/volumesAttached", "value": list},
        ]);
        match server.patch_status_as_kubelet("s2-n1", &patch) {
            200 => applied += 1,
            _ => refused += 1,
        }
    };
    stale_write(&mut history);
    tokio::time::sleep(Duration::from_secs(1)).await;
    sims.add_pod(NS, "db-1", "s2-n1", "c2");
    let (mut reappeared, mut lost) = (false, false);
    for _ in 0..60 {
        stale_write(&mut history);
        let listed = sims.attached("s2-n1").contains(&unique);
        lost |= reappeared && !listed;
        reappeared |= listed;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        reappeared,
        "seed 002: the volume never reappeared in n1's status"
    );
    assert!(
        !lost,
        "seed 002: the volume was lost again from n1's status"
    );
    assert!(sims.running(NS, "db-1"), "seed 002: db-1 does not run");
    assert_eq!(
        applied, 0,
        "seed 002: a stale list landed ({refused} refused)"
    );
    assert!(refused > 0, "seed 002: the stale writer never tried");

    // A second writer that does land (no `test`) empties the list; the controller's next
    // write, for a pod with another volume, is refused by its `test`: it reads the node again
    // and writes both volumes back.
    let gets = || {
        server
            .requests()
            .iter()
            .filter(|r| r.verb == "get" && r.resource == "nodes")
            .count()
    };
    let before = gets();
    let emptied = json!([{"op": "add", "path": "/status/volumesAttached", "value": []}]);
    assert_eq!(server.patch_status_as_kubelet("s2-n1", &emptied), 200);
    sims.add_claimed_volume(NS, "c2b", "pv-2b", DRIVER, "h2b");
    let other = sims.unique_name("pv-2b").expect("pv-2b");
    sims.add_pod(NS, "db-2", "s2-n1", "c2b");
    assert!(
        until(Duration::from_secs(30), || {
            let listed = sims.attached("s2-n1");
            sims.running(NS, "db-2") && listed.contains(&unique) && listed.contains(&other)
        })
        .await,
        "seed 002: the emptied list was not written back: {:?}",
        sims.attached("s2-n1")
    );
    assert!(
        gets() > before,
        "seed 002: the refused write was not followed by a read"
    );
}

/// Seed 004: a node dies with the volume mounted; its pod moves: Multi-Attach (upstream's
/// event, on the new pod), no detach while the dead node is not fenced, and the move once the
/// out-of-service taint is put on it.
async fn seed_004(server: &ApiServer, sims: &Sims) {
    sims.add_claimed_volume(NS, "c4", "pv-4", DRIVER, "h4");
    let unique = sims.unique_name("pv-4").expect("pv-4");
    sims.add_pod(NS, "app-0", "s4-n1", "c4");
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "app-0")
            && sims.attached("s4-n1").contains(&unique))
        .await,
        "seed 004: app-0 never ran: {:?} {:?}",
        server.get(common::apiserver::PODS, NS, "app-0"),
        server.get(NODES, "", "s4-n1")
    );
    sims.crash("s4-n1");
    sims.force_delete_pod(NS, "app-0");
    sims.add_pod(NS, "app-1", "s4-n2", "c4");
    let multi_attach = "Multi-Attach error for volume \"pv-4\" Volume is already exclusively attached to one node and can't be attached to another";
    let told = || {
        server.list(EVENTS).iter().any(|e| {
            e["involvedObject"]["name"] == "app-1"
                && e["reason"] == "FailedAttachVolume"
                && e["message"] == multi_attach
        })
    };
    assert!(
        until(Duration::from_secs(20), told).await,
        "seed 004: no Multi-Attach event for app-1: {:#?}",
        server.list(EVENTS)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let va = sims
        .attachment("pv-4", "s4-n1")
        .expect("seed 004: n1 keeps its attachment");
    assert!(
        va["metadata"]["deletionTimestamp"].is_null(),
        "seed 004: detached unfenced: {va}"
    );
    assert!(
        !sims.running(NS, "app-1"),
        "seed 004: app-1 ran beside a live attachment: n2 lists {:?}, attachments {:#?}",
        sims.attached("s4-n2"),
        server.list(common::apiserver::ATTACHMENTS)
    );
    sims.fence("s4-n1");
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "app-1")
            && sims.attachment("pv-4", "s4-n1").is_none()
            && sims.attached("s4-n2").contains(&unique)
            && !sims.attached("s4-n1").contains(&unique))
        .await,
        "seed 004: the volume did not move once n1 was fenced: n1 {:?}, n2 {:?}",
        sims.attached("s4-n1"),
        sims.attached("s4-n2")
    );
}

/// The example's endpoints, while it leads with a recovered controller: ready, healthy, and
/// its metrics those of the running term with `attach_detach_leader` at 1.
async fn the_leaders_endpoints_say_so(controller: &ControllerProcess) {
    let log = controller.log();
    let addr = controller
        .endpoints()
        .unwrap_or_else(|| panic!("no endpoints line: {log}"));
    assert!(addr.ip().is_loopback(), "{addr}");
    for path in ["/readyz", "/healthz"] {
        let reply = http::get(addr, path).await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok"), "{path}");
    }
    let metrics = http::get(addr, "/metrics").await;
    assert_eq!(metrics.status, 200);
    for line in [
        "\nattach_detach_leader 1\n",
        "\nattach_detach_recovering 0\n",
        "\nattach_detach_operations_total{kind=\"attach\",outcome=\"succeeded\"} ",
    ] {
        assert!(metrics.body.contains(line), "{line:?} in {}", metrics.body);
    }
    let unknown = http::get(addr, "/explain?volume=kubernetes.io/csi/none%5Enone").await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(
        unknown.body.contains("does not know volume"),
        "{}",
        unknown.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_and_what_it_manages_through_the_example_over_http_under_rbac() {
    let _serial = SERIAL.lock().await;
    let (server, sims, token) = cluster().await;
    for node in [
        "s0-n1", "s0-n2", "s2-n1", "s4-n1", "s4-n2", "m-n1", "m-n2", "a-n1",
    ] {
        sims.add_node(node);
    }
    for node in ["k-n1", "k-n2"] {
        sims.add_kubelet_node(node);
    }
    for node in ["m-n1", "m-n2"] {
        server.put(ebs_csinode(node));
    }
    server.put(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": NFS}, "spec": {"attachRequired": false},
    }));
    // Seed 000's admission webhook: refuses deletes of s0-n1's VolumeAttachments while set.
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (hook_server, hook_refused) = (server.clone(), refused.clone());
    server.admission(Some(std::sync::Arc::new(move |r| {
        let refusing = hook_refused.load(std::sync::atomic::Ordering::SeqCst);
        let va = r.name.as_deref().and_then(|n| hook_server.get(common::apiserver::ATTACHMENTS, "", n));
        (refusing && r.verb == "delete" && va.is_some_and(|va| va["spec"]["nodeName"] == "s0-n1"))
            .then(|| (403, "admission webhook \"deny-detach.example.com\" denied the request: detach refused".to_owned()))
    })));
    let controller = ControllerProcess::start(&server, &token, &[]);
    tokio::join!(
        seed_000(&server, &sims, &refused),
        seed_002(&server, &sims),
        seed_004(&server, &sims),
        migrated_ebs_moves(&sims),
        attach_free_driver_is_left_alone(&server, &sims),
        kubelet_managed_nodes_are_left_alone(&server, &sims),
    );
    the_leaders_endpoints_say_so(&controller).await;
    let log = controller.log();
    assert_eq!(controller.stop().await, Some(0), "{log}");
    // It released the lease at SIGTERM.
    let lease = server
        .get(LEASES, "kube-system", "attach-detach-controller")
        .expect("the lease");
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");

    let controller =
        a_restarted_controller_leaves_kubelets_attachments_alone(&server, &sims, &token).await;
    let log = controller.log();
    assert_eq!(controller.stop().await, Some(0), "{log}");

    let requests = server.requests();
    let forbidden: Vec<_> = requests.iter().filter(|r| r.forbidden).collect();
    assert!(
        forbidden.is_empty(),
        "RBAC refused requests: {forbidden:#?}\n{log}"
    );
    let policy = Policy::deployed();
    let mut unneeded = Vec::new();
    for permission in policy.permissions() {
        let without = policy.without(&permission);
        let needed = requests
            .iter()
            .filter(|r| r.user.as_deref() == Some(CONTROLLER) && !r.forbidden)
            .any(|r| {
                let a = common::rbac::Attributes {
                    user: CONTROLLER,
                    verb: r.verb,
                    group: r.group,
                    resource: &r.resource,
                    namespace: r.namespace.as_deref(),
                    name: r.name.as_deref(),
                };
                policy.allows(&a) && !without.allows(&a)
            });
        if !needed {
            unneeded.push(permission.to_string());
        }
    }
    assert!(
        unneeded.is_empty(),
        "deploy/rbac.yaml grants what no request of the run needed (remove it, or make a \
         scenario need it): {unneeded:#?}"
    );
}

/// The EBS CSI driver, to which CSI migration hands `awsElasticBlockStore` volumes.
const EBS: &str = "ebs.csi.aws.com";
/// A driver whose CSIDriver says `attachRequired: false`.
const NFS: &str = "nfs.csi.k8s.io";

/// The CSINode the kubelet of `node` writes when it migrated the in-tree EBS plugin and runs
/// the EBS driver.
fn ebs_csinode(node: &str) -> serde_json::Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": node, "annotations": {
            "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"}},
        "spec": {"drivers": [{"name": EBS, "nodeID": format!("i-{node}"),
                              "topologyKeys": ["topology.ebs.csi.aws.com/zone"]}]},
    })
}

/// Requests of the controller that create, delete or patch the VolumeAttachment `name`.
fn writes_of_attachment(server: &ApiServer, name: &str) -> Vec<common::apiserver::Served> {
    server
        .requests()
        .into_iter()
        .filter(|r| {
            r.user.as_deref() == Some(CONTROLLER)
                && r.resource == "volumeattachments"
                && (r.creates.as_deref() == Some(name)
                    || (r.name.as_deref() == Some(name) && r.verb != "get"))
        })
        .collect()
}

/// Requests of the controller that write the status of `node`.
fn status_writes_of(server: &ApiServer, node: &str) -> Vec<common::apiserver::Served> {
    server
        .requests()
        .into_iter()
        .filter(|r| {
            r.user.as_deref() == Some(CONTROLLER)
                && r.resource == "nodes/status"
                && r.name.as_deref() == Some(node)
        })
        .collect()
}

/// Issue 71: a migrated EBS volume moves: an in-tree `awsElasticBlockStore` PV, whose nodes' CSINodes
/// say their kubelets migrated the plugin, is attached under the translated handle and the
/// VolumeAttachment name kubelet computes, and when its pod moves to another node the old
/// VolumeAttachment is deleted and a new one created there.
async fn migrated_ebs_moves(sims: &Sims) {
    sims.add_claimed(
        NS,
        "c-ebs",
        "pv-ebs",
        json!({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-0e5b", "fsType": "ext4"}}),
    );
    let unique = "kubernetes.io/csi/ebs.csi.aws.com^vol-0e5b".to_owned();
    assert_eq!(sims.unique_name("pv-ebs").as_ref(), Some(&unique));
    sims.add_pod(NS, "ebs-0", "m-n1", "c-ebs");
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "ebs-0")).await,
        "migrated EBS: ebs-0 never ran; m-n1 lists {:?}",
        sims.attached("m-n1")
    );
    let first = sims
        .attachment("pv-ebs", "m-n1")
        .expect("migrated EBS: m-n1's VolumeAttachment");
    assert_eq!(
        first["metadata"]["name"],
        kubelet_attachment_name("vol-0e5b", EBS, "m-n1"),
        "migrated EBS: {first}"
    );
    assert_eq!(first["spec"]["attacher"], EBS, "migrated EBS: {first}");
    assert!(sims.attached("m-n1").contains(&unique));

    sims.delete_pod(NS, "ebs-0");
    sims.add_pod(NS, "ebs-1", "m-n2", "c-ebs");
    assert!(
        until(Duration::from_secs(40), || sims.running(NS, "ebs-1")
            && sims.attachment("pv-ebs", "m-n1").is_none())
        .await,
        "migrated EBS: the volume did not move: m-n1 lists {:?}, m-n2 lists {:?}",
        sims.attached("m-n1"),
        sims.attached("m-n2")
    );
    let second = sims
        .attachment("pv-ebs", "m-n2")
        .expect("migrated EBS: m-n2's VolumeAttachment");
    assert_eq!(
        second["metadata"]["name"],
        kubelet_attachment_name("vol-0e5b", EBS, "m-n2"),
        "migrated EBS: {second}"
    );
    assert_eq!(second["spec"]["attacher"], EBS, "migrated EBS: {second}");
    assert_eq!(
        second["spec"]["source"]["persistentVolumeName"], "pv-ebs",
        "migrated EBS: {second}"
    );
    assert!(sims.attached("m-n2").contains(&unique));
    assert!(!sims.attached("m-n1").contains(&unique));
}

/// A driver whose CSIDriver says `attachRequired: false`: its pod runs, and the controller
/// neither creates a VolumeAttachment for its volume nor lists it in the node's
/// `volumesAttached`.
async fn attach_free_driver_is_left_alone(server: &ApiServer, sims: &Sims) {
    sims.add_claimed_volume(NS, "c-nfs", "pv-nfs", NFS, "share-1");
    let unique = sims.unique_name("pv-nfs").expect("pv-nfs");
    sims.add_pod(NS, "nfs-0", "a-n1", "c-nfs");
    let mut listed = false;
    let ran = until(Duration::from_secs(30), || {
        listed |= sims.attached("a-n1").contains(&unique);
        sims.running(NS, "nfs-0")
    })
    .await;
    assert!(ran, "attach-free: nfs-0 never ran");
    // Time for a controller that tracked it to attach it.
    for _ in 0..30 {
        listed |= sims.attached("a-n1").contains(&unique);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !listed,
        "attach-free: a-n1's volumesAttached listed {unique}"
    );
    assert!(
        sims.attachment("pv-nfs", "a-n1").is_none(),
        "attach-free: a VolumeAttachment exists"
    );
    let name = kubelet_attachment_name("share-1", NFS, "a-n1");
    let writes = writes_of_attachment(server, &name);
    assert!(
        writes.is_empty(),
        "attach-free: the controller wrote its VolumeAttachment: {writes:#?}"
    );
}

/// A node whose kubelet attaches by itself (no controller-managed annotation): its pod's
/// volume is attached by the kubelet, and the controller neither writes its VolumeAttachment
/// nor the node's status.
async fn kubelet_managed_nodes_are_left_alone(server: &ApiServer, sims: &Sims) {
    for (node, pod, claim, pv, handle) in [
        ("k-n1", "kub-0", "c-kub", "pv-kub", "h-kub"),
        ("k-n2", "kub-1", "c-kub2", "pv-kub2", "h-kub2"),
    ] {
        sims.add_claimed_volume(NS, claim, pv, DRIVER, handle);
        sims.add_pod(NS, pod, node, claim);
    }
    assert!(
        until(Duration::from_secs(30), || sims.running(NS, "kub-0")
            && sims.running(NS, "kub-1"))
        .await,
        "kubelet-managed: kub-0 or kub-1 never ran"
    );
    // Time for a controller that managed the nodes to attach and write their status.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (node, handle) in [("k-n1", "h-kub"), ("k-n2", "h-kub2")] {
        let name = kubelet_attachment_name(handle, DRIVER, node);
        let writes = writes_of_attachment(server, &name);
        assert!(
            writes.is_empty(),
            "kubelet-managed: the controller wrote {node}'s VolumeAttachment: {writes:#?}"
        );
        let writes = status_writes_of(server, node);
        assert!(
            writes.is_empty(),
            "kubelet-managed: the controller wrote {node}'s status: {writes:#?}"
        );
        assert!(sims.attached(node).is_empty());
    }
}

/// With no controller running, the pod of kubelet-managed `k-n1` goes and its kubelet
/// unmounts the volume, but its own detach is slow: a controller started now must leave the
/// VolumeAttachment to it. Then `k-n2` is switched to controller-managed attach/detach (its
/// kubelet restarted so, the annotation put): the controller takes over the volume its kubelet
/// attached, whose VolumeAttachment exists (a create answered AlreadyExists, then a read), and
/// lists it in the node's status.
async fn a_restarted_controller_leaves_kubelets_attachments_alone(
    server: &ApiServer,
    sims: &Sims,
    token: &str,
) -> ControllerProcess {
    sims.hold_own_detaches("k-n1", true);
    sims.delete_pod(NS, "kub-0");
    let name = kubelet_attachment_name("h-kub", DRIVER, "k-n1");
    assert!(
        until(Duration::from_secs(20), || {
            server.get(PODS, NS, "kub-0").is_none()
                && server.get(NODES, "", "k-n1").expect("k-n1")["status"]["volumesInUse"].is_null()
        })
        .await,
        "kubelet-managed: kub-0 did not go"
    );
    let mark = server.requests().len();
    let controller = ControllerProcess::start(server, token, &[]);
    let recovered = until(Duration::from_secs(30), || {
        server.requests()[mark..].iter().any(|r| {
            r.user.as_deref() == Some(CONTROLLER)
                && r.verb == "list"
                && r.resource == "volumeattachments"
        })
    })
    .await;
    assert!(
        recovered,
        "the new controller never listed VolumeAttachments"
    );
    // Time for a controller that adopted it to detach it: nothing uses it there.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let va = server
        .get(ATTACHMENTS, "", &name)
        .expect("kubelet-managed: k-n1's VolumeAttachment is gone");
    assert!(
        va["metadata"]["deletionTimestamp"].is_null(),
        "kubelet-managed: k-n1's VolumeAttachment is being deleted: {va}"
    );
    let writes = writes_of_attachment(server, &name);
    assert!(
        writes.is_empty(),
        "kubelet-managed: the controller wrote k-n1's VolumeAttachment at recovery: {writes:#?}"
    );
    // Its kubelet detaches it in its own time.
    sims.hold_own_detaches("k-n1", false);
    assert!(
        until(Duration::from_secs(20), || server
            .get(ATTACHMENTS, "", &name)
            .is_none())
        .await,
        "kubelet-managed: k-n1's kubelet did not detach"
    );

    // k-n2 becomes the controller's.
    server.edit(NODES, "", "k-n2", |n| {
        n["metadata"]["annotations"] = json!({MANAGED: "true"});
    });
    let unique = sims.unique_name("pv-kub2").expect("pv-kub2");
    assert!(
        until(Duration::from_secs(30), || sims
            .attached("k-n2")
            .contains(&unique))
        .await,
        "switched: k-n2's volume was not listed in its status"
    );
    assert!(sims.running(NS, "kub-1"), "switched: kub-1 stopped");
    let name = kubelet_attachment_name("h-kub2", DRIVER, "k-n2");
    let va = server
        .get(ATTACHMENTS, "", &name)
        .expect("k-n2's VolumeAttachment");
    assert!(
        va["metadata"]["deletionTimestamp"].is_null(),
        "switched: {va}"
    );
    controller
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_says_in_one_line_what_stops_it_and_waits_out_an_unreachable_server() {
    let _serial = SERIAL.lock().await;
    // No cluster configured: one line, exit 2.
    let out = tokio::process::Command::new(controller_binary())
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("RUST_LOG", "off")
        .output()
        .await
        .expect("the example runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.starts_with("attach-detach: no cluster to talk to: set KUBECONFIG"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");

    // Forbidden: one line naming the refusal, exit 3.
    let server = ApiServer::start().await;
    server.enforce(Some(Policy::default()));
    let token = server.token(CONTROLLER);
    let controller = ControllerProcess::start(&server, &token, &[("RUST_LOG", "off")]);
    let mut controller = controller;
    let code = tokio::time::timeout(Duration::from_secs(20), controller.child.wait())
        .await
        .expect("it stops by itself")
        .expect("an exit status")
        .code();
    let said = controller.log();
    assert_eq!(code, Some(3), "{said}");
    let refusal = said
        .lines()
        .find(|l| l.contains("forbids the controller"))
        .unwrap_or_else(|| panic!("no refusal line: {said}"));
    assert!(
        refusal.contains("cannot get resource \"leases\"") && refusal.contains("deploy/rbac.yaml"),
        "{refusal}"
    );

    // Unreachable: retried with backoff, one line each, until the API server is there.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        probe.local_addr().expect("an address").port()
    };
    let absent = ApiServer::start().await;
    let token = absent.token(CONTROLLER);
    // A kubeconfig naming the free port, where nothing listens yet.
    let config = absent
        .kubeconfig(&token)
        .replace(&absent.url(), &format!("http://127.0.0.1:{port}"));
    let path = std::env::temp_dir().join(format!(
        "attach-detach-unreachable-{}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(&path, config).expect("a kubeconfig");
    let mut child = tokio::process::Command::new(controller_binary())
        .env_clear()
        .env("KUBECONFIG", &path)
        .env("RUST_LOG", "off")
        .env("ENDPOINTS_ADDRESS", "127.0.0.1:0")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example runs");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        child.try_wait().expect("a status").is_none(),
        "it exited instead of retrying"
    );
    let server = ApiServer::start_at(port).await;
    let token = server.token(CONTROLLER);
    assert_eq!(
        token, "token-1",
        "the kubeconfig's token authenticates here too"
    );
    let led = until(Duration::from_secs(20), || {
        server
            .get(LEASES, "kube-system", "attach-detach-controller")
            .is_some_and(|l| !l["spec"]["holderIdentity"].is_null())
    })
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().expect("a pid").to_string()])
        .status();
    let out = child.wait_with_output().await.expect("it stops");
    let _ = std::fs::remove_file(&path);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(led, "it never led once the server was there: {said}");
    let retries: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("cannot reach the API server at http://127.0.0.1"))
        .collect();
    assert!(retries.len() >= 2, "{said}");
    assert!(retries[0].ends_with("retrying in 1s"), "{said}");
    assert!(retries[1].ends_with("retrying in 2s"), "{said}");
    assert!(retries[0].contains("Connection refused"), "{said}");
}
