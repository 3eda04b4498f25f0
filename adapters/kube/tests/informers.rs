//! Every rule of [`InformerState`], with k8s-openapi objects built by hand: no API server.

use attach_detach::core::{Access, Input, Kind, NodeFacts, VolumeSpec};
use attach_detach_kube::{
    AttachSource, CsiMigration, CsiVolume, InTreePlugin, InformerState, Kube, driver_id,
    unique_name,
};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStatus, EphemeralVolumeSource, Node, NodeCondition, NodeSpec, NodeStatus,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod,
    PodSpec, PodStatus, Taint, Volume,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, CSINode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::runtime::watcher::Event;

const DRIVER: &str = "hostpath.csi.k8s.io";

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: namespace.map(str::to_owned),
        name: Some(name.to_owned()),
        uid: Some(format!("uid-{name}")),
        ..ObjectMeta::default()
    }
}

fn claim_volume(volume: &str, claim: &str) -> Volume {
    Volume {
        name: volume.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: None,
        }),
        ..Volume::default()
    }
}

/// A running pod in `ns` on `node` (if any) with one volume per claim.
fn pod(name: &str, node: Option<&str>, claims: &[&str]) -> Pod {
    Pod {
        metadata: meta(Some("ns"), name),
        spec: Some(PodSpec {
            node_name: node.map(str::to_owned),
            volumes: Some(
                claims
                    .iter()
                    .enumerate()
                    .map(|(i, c)| claim_volume(&format!("v{i}"), c))
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

fn with_phase(mut pod: Pod, phase: &str) -> Pod {
    pod.status.as_mut().unwrap().phase = Some(phase.into());
    pod
}

/// A claim in `ns`, bound to `pv` if given.
fn pvc(name: &str, pv: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(Some("ns"), name),
        spec: Some(PersistentVolumeClaimSpec {
            volume_name: pv.map(str::to_owned),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some(if pv.is_some() { "Bound" } else { "Pending" }.into()),
            ..PersistentVolumeClaimStatus::default()
        }),
    }
}

/// A CSI PV of `DRIVER` with handle `h-{name}`, claimed by `ns/{claim}` if given.
fn pv(name: &str, modes: &[&str], claim: Option<&str>) -> PersistentVolume {
    PersistentVolume {
        metadata: meta(None, name),
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: format!("h-{name}"),
                ..CSIPersistentVolumeSource::default()
            }),
            claim_ref: claim.map(|c| ObjectReference {
                namespace: Some("ns".into()),
                name: Some(c.into()),
                uid: Some(format!("uid-{c}")),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

/// A single-node CSI PV bound to claim `ns/c1`.
fn rwo(name: &str) -> PersistentVolume {
    pv(name, &["ReadWriteOnce"], Some("c1"))
}

fn volume(pv: &str) -> String {
    unique_name(DRIVER, &format!("h-{pv}"))
}

fn spec(pv: &str, access: Access) -> VolumeSpec<CsiVolume> {
    VolumeSpec {
        access,
        payload: CsiVolume::persistent(pv, DRIVER, format!("h-{pv}")),
        attach_required: true,
        driver: Some(driver_id(DRIVER)),
    }
}

/// The annotation kubelet puts on its node when the attach/detach controller is to manage it
/// (`--enable-controller-attach-detach`, the default).
const CONTROLLER_MANAGED: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// A node whose kubelet leaves attach and detach to the controller (the annotation set).
fn node(name: &str, ready: Option<&str>, in_use: &[&str], taints: &[&str]) -> Node {
    let mut metadata = meta(None, name);
    metadata.annotations = Some([(CONTROLLER_MANAGED.to_owned(), "true".to_owned())].into());
    Node {
        metadata,
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|k| Taint {
                        key: k.to_string(),
                        effect: "NoExecute".into(),
                        ..Taint::default()
                    })
                    .collect(),
            ),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: ready.map(|status| {
                vec![NodeCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    ..NodeCondition::default()
                }]
            }),
            volumes_in_use: Some(in_use.iter().map(|v| v.to_string()).collect()),
            ..NodeStatus::default()
        }),
    }
}

/// The same node as its kubelet leaves it when it attaches and detaches by itself
/// (`--enable-controller-attach-detach=false`): no annotation.
fn kubelet_managed(mut node: Node) -> Node {
    node.metadata.annotations = None;
    node
}

fn scheduled(pod: &str, node: &str, volumes: &[String]) -> Input<Kube> {
    Input::WorkloadScheduled {
        workload: format!("ns/{pod}"),
        node: node.into(),
        volumes: volumes.to_vec(),
    }
}

fn removed(pod: &str) -> Input<Kube> {
    Input::WorkloadRemoved {
        workload: format!("ns/{pod}"),
    }
}

/// A state that knows PV `pv-1` (RWO) bound to claim `c1`.
fn with_volume() -> InformerState {
    let mut s = InformerState::new();
    s.volumes(Event::Apply(rwo("pv-1")));
    s.claims(Event::Apply(pvc("c1", Some("pv-1"))));
    s
}

#[test]
fn a_scheduled_pod_needs_the_csi_volumes_of_its_bound_claims() {
    let mut s = with_volume();
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn an_unscheduled_pod_is_not_sent_until_it_is_scheduled() {
    let mut s = with_volume();
    assert!(s.pods(Event::Apply(pod("p", None, &["c1"]))).is_empty());
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn an_unbound_claim_contributes_nothing_until_it_binds_then_the_pod_is_sent_again() {
    let mut s = InformerState::new();
    s.claims(Event::Apply(pvc("c1", None)));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])]
    );
    // Bound to a PV not seen yet: still nothing.
    assert!(s.claims(Event::Apply(pvc("c1", Some("pv-1")))).is_empty());
    // The PV arrives: it is registered and the pod sent with it.
    assert_eq!(
        s.volumes(Event::Apply(rwo("pv-1"))),
        vec![
            Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", Access::SingleNode)
            },
            scheduled("p", "n1", &[volume("pv-1")]),
        ]
    );
}

#[test]
fn a_missing_claim_contributes_nothing_until_it_appears() {
    let mut s = InformerState::new();
    s.volumes(Event::Apply(rwo("pv-1")));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])]
    );
    assert_eq!(
        s.claims(Event::Apply(pvc("c1", Some("pv-1")))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn a_claim_is_looked_up_in_the_pods_namespace() {
    let mut s = with_volume();
    let mut other = pod("p", Some("n1"), &["c1"]);
    other.metadata.namespace = Some("other".into());
    assert_eq!(
        s.pods(Event::Apply(other)),
        vec![Input::WorkloadScheduled {
            workload: "other/p".into(),
            node: "n1".into(),
            volumes: vec![]
        }]
    );
}

#[test]
fn a_volume_named_twice_is_needed_once() {
    let mut s = with_volume();
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1", "c1"]))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn a_non_csi_pv_is_not_this_controllers() {
    let mut s = InformerState::new();
    let mut nfs = rwo("pv-nfs");
    nfs.spec.as_mut().unwrap().csi = None;
    assert!(s.volumes(Event::Apply(nfs.clone())).is_empty());
    s.claims(Event::Apply(pvc("c1", Some("pv-nfs"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])]
    );
    assert!(s.volumes(Event::Delete(nfs)).is_empty());
}

#[test]
fn a_pv_claimed_by_another_claim_does_not_resolve() {
    let mut s = InformerState::new();
    s.volumes(Event::Apply(pv(
        "pv-1",
        &["ReadWriteOnce"],
        Some("someone-else"),
    )));
    s.claims(Event::Apply(pvc("c1", Some("pv-1"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])]
    );
    // Its own claim does.
    assert_eq!(
        s.volumes(Event::Apply(pv("pv-1", &["ReadWriteOnce"], Some("c1")))),
        vec![
            Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", Access::SingleNode)
            },
            scheduled("p", "n1", &[volume("pv-1")]),
        ]
    );
}

#[test]
fn a_generic_ephemeral_volume_resolves_only_through_a_claim_the_pod_owns() {
    let mut s = InformerState::new();
    s.volumes(Event::Apply(pv(
        "pv-1",
        &["ReadWriteOnce"],
        Some("p-scratch"),
    )));
    let mut p = pod("p", Some("n1"), &[]);
    p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "scratch".into(),
        ephemeral: Some(EphemeralVolumeSource::default()),
        ..Volume::default()
    }]);
    assert_eq!(s.pods(Event::Apply(p)), vec![scheduled("p", "n1", &[])]);
    // `p-scratch`, bound, but owned by nobody: not this pod's.
    assert!(
        s.claims(Event::Apply(pvc("p-scratch", Some("pv-1"))))
            .is_empty()
    );
    let mut owned = pvc("p-scratch", Some("pv-1"));
    owned.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "p".into(),
        uid: "uid-p".into(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    assert_eq!(
        s.claims(Event::Apply(owned)),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn a_pod_is_sent_again_only_when_its_node_or_volumes_change() {
    let mut s = with_volume();
    let p = pod("p", Some("n1"), &["c1"]);
    assert_eq!(s.pods(Event::Apply(p.clone())).len(), 1);
    assert!(s.pods(Event::Apply(p.clone())).is_empty(), "status churn");
    // A relist sends it whatever: the core must see it.
    assert_eq!(
        s.pods(Event::Init),
        vec![Input::RelistStarted {
            kind: Kind::Workload
        }]
    );
    assert_eq!(
        s.pods(Event::InitApply(p)),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
}

#[test]
fn a_terminal_pod_is_removed() {
    for phase in ["Succeeded", "Failed"] {
        let mut s = with_volume();
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
        assert_eq!(
            s.pods(Event::Apply(with_phase(
                pod("p", Some("n1"), &["c1"]),
                phase
            ))),
            vec![removed("p")],
            "{phase}"
        );
        // Already gone: nothing more, even on delete.
        assert!(
            s.pods(Event::Delete(pod("p", Some("n1"), &["c1"])))
                .is_empty()
        );
        // And a claim change no longer touches it.
        assert!(s.claims(Event::Apply(pvc("c1", None))).is_empty());
    }
}

#[test]
fn a_terminal_pod_never_seen_active_sends_nothing() {
    let mut s = with_volume();
    assert!(
        s.pods(Event::Apply(with_phase(
            pod("p", Some("n1"), &["c1"]),
            "Succeeded"
        )))
        .is_empty()
    );
}

#[test]
fn a_deleted_pod_is_removed() {
    let mut s = with_volume();
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    assert_eq!(
        s.pods(Event::Delete(pod("p", Some("n1"), &["c1"]))),
        vec![removed("p")]
    );
}

#[test]
fn a_pod_being_deleted_is_removed_once_no_container_runs() {
    let mut s = with_volume();
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    let status = |running: bool| ContainerStatus {
        name: "c".into(),
        state: Some(ContainerState {
            running: running.then(ContainerStateRunning::default),
            terminated: (!running).then(ContainerStateTerminated::default),
            waiting: None,
        }),
        ..ContainerStatus::default()
    };
    let mut deleting = pod("p", Some("n1"), &["c1"]);
    deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
    deleting.status.as_mut().unwrap().container_statuses = Some(vec![status(true)]);
    assert!(
        s.pods(Event::Apply(deleting.clone())).is_empty(),
        "a container still runs: the pod still needs its volumes"
    );
    deleting.status.as_mut().unwrap().container_statuses = Some(vec![status(false)]);
    assert_eq!(s.pods(Event::Apply(deleting)), vec![removed("p")]);
}

#[test]
fn access_modes_give_single_or_multi_node() {
    for (modes, access) in [
        (&["ReadWriteOnce"][..], Access::SingleNode),
        (&["ReadWriteOncePod"][..], Access::SingleNode),
        (&["ReadWriteMany"][..], Access::MultiNode),
        (&["ReadOnlyMany"][..], Access::MultiNode),
        (&["ReadWriteOnce", "ReadOnlyMany"][..], Access::MultiNode),
        (&[][..], Access::SingleNode),
    ] {
        let mut s = InformerState::new();
        assert_eq!(
            s.volumes(Event::Apply(pv("pv-1", modes, None))),
            vec![Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", access)
            }],
            "{modes:?}"
        );
    }
}

#[test]
fn a_deleted_pv_is_removed_and_its_pods_no_longer_need_it() {
    let mut s = with_volume();
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    assert_eq!(
        s.volumes(Event::Delete(rwo("pv-1"))),
        vec![
            Input::VolumeRemoved {
                volume: volume("pv-1")
            },
            scheduled("p", "n1", &[]),
        ]
    );
}

#[test]
fn an_unchanged_pv_is_not_sent_again() {
    let mut s = InformerState::new();
    assert_eq!(s.volumes(Event::Apply(rwo("pv-1"))).len(), 1);
    assert!(s.volumes(Event::Apply(rwo("pv-1"))).is_empty());
}

#[test]
fn two_pvs_of_one_handle_are_one_volume_removed_with_the_last() {
    let mut s = InformerState::new();
    let mut twin = rwo("pv-1");
    twin.metadata.name = Some("pv-1-twin".into());
    s.volumes(Event::Apply(rwo("pv-1")));
    s.volumes(Event::Apply(twin.clone()));
    let mut payload = spec("pv-1", Access::SingleNode);
    payload.payload.source = AttachSource::PersistentVolume("pv-1-twin".into());
    assert_eq!(
        s.volumes(Event::Delete(rwo("pv-1"))),
        vec![Input::SetVolume {
            volume: volume("pv-1"),
            spec: payload
        }]
    );
    assert_eq!(
        s.volumes(Event::Delete(twin)),
        vec![Input::VolumeRemoved {
            volume: volume("pv-1")
        }]
    );
}

#[test]
fn a_claim_change_sends_its_pods_again() {
    let mut s = with_volume();
    s.volumes(Event::Apply(rwo("pv-2")));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    s.pods(Event::Apply(pod("q", Some("n2"), &["c1"])));
    assert_eq!(
        s.claims(Event::Apply(pvc("c1", Some("pv-2")))),
        vec![
            scheduled("p", "n1", &[volume("pv-2")]),
            scheduled("q", "n2", &[volume("pv-2")]),
        ]
    );
    assert_eq!(
        s.claims(Event::Delete(pvc("c1", Some("pv-2")))),
        vec![scheduled("p", "n1", &[]), scheduled("q", "n2", &[])]
    );
}

#[test]
fn node_facts_follow_ready_taints_and_volumes_in_use() {
    let mut s = InformerState::new();
    let facts = |healthy, fenced, in_use: Option<Vec<&str>>| NodeFacts {
        healthy,
        fenced,
        in_use: in_use.map(|v| v.into_iter().map(str::to_owned).collect()),
        attach_limit: None,
        driver_limits: Vec::new(),
    };
    let updated = |facts| {
        vec![Input::<Kube>::NodeUpdated {
            node: "n1".into(),
            facts,
        }]
    };
    assert_eq!(
        s.nodes(Event::Apply(node("n1", Some("True"), &["v"], &[]))),
        updated(facts(true, false, Some(vec!["v"])))
    );
    assert!(
        s.nodes(Event::Apply(node("n1", Some("True"), &["v"], &[])))
            .is_empty(),
        "heartbeats change nothing"
    );
    assert_eq!(
        s.nodes(Event::Apply(node("n1", Some("Unknown"), &["v"], &[]))),
        updated(facts(false, false, Some(vec!["v"])))
    );
    assert_eq!(
        s.nodes(Event::Apply(node(
            "n1",
            Some("False"),
            &[],
            &["node.kubernetes.io/out-of-service"]
        ))),
        updated(facts(false, true, Some(vec![])))
    );
    assert_eq!(
        s.nodes(Event::Apply(node(
            "n1",
            Some("False"),
            &[],
            &["node.kubernetes.io/unreachable"]
        ))),
        updated(facts(false, false, Some(vec![])))
    );
    // No Ready condition at all: the kubelet never reported, nothing is known unmounted.
    assert_eq!(
        s.nodes(Event::Apply(node("n1", None, &[], &[]))),
        updated(facts(false, false, None))
    );
    assert_eq!(
        s.nodes(Event::Delete(node("n1", None, &[], &[]))),
        vec![Input::NodeRemoved { node: "n1".into() }]
    );
}

#[test]
fn relists_of_pods_volumes_and_nodes_are_bracketed_and_forget_the_unlisted() {
    let mut s = with_volume();
    s.pods(Event::Apply(pod("gone", Some("n1"), &["c1"])));
    s.nodes(Event::Apply(node("n-gone", Some("True"), &[], &[])));

    assert_eq!(
        s.pods(Event::Init),
        vec![Input::RelistStarted {
            kind: Kind::Workload
        }]
    );
    assert_eq!(
        s.pods(Event::InitApply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
    assert_eq!(
        s.pods(Event::InitDone),
        vec![Input::RelistDone {
            kind: Kind::Workload
        }]
    );
    // `gone` was forgotten: a claim change sends `p` only.
    assert_eq!(
        s.claims(Event::Apply(pvc("c1", None))),
        vec![scheduled("p", "n1", &[])]
    );

    assert_eq!(
        s.volumes(Event::Init),
        vec![Input::RelistStarted { kind: Kind::Volume }]
    );
    assert_eq!(
        s.volumes(Event::InitApply(rwo("pv-1"))),
        vec![Input::SetVolume {
            volume: volume("pv-1"),
            spec: spec("pv-1", Access::SingleNode)
        }],
        "unchanged, but sent: the core records it as seen"
    );
    assert_eq!(
        s.volumes(Event::InitDone),
        vec![Input::RelistDone { kind: Kind::Volume }]
    );

    assert_eq!(
        s.nodes(Event::Init),
        vec![Input::RelistStarted { kind: Kind::Node }]
    );
    assert_eq!(
        s.nodes(Event::InitApply(node("n1", Some("True"), &[], &[])))
            .len(),
        1
    );
    assert_eq!(
        s.nodes(Event::InitDone),
        vec![Input::RelistDone { kind: Kind::Node }]
    );
    // The unlisted node is forgotten: seen again, it is sent.
    assert_eq!(
        s.nodes(Event::Apply(node("n-gone", Some("True"), &[], &[])))
            .len(),
        1
    );
}

#[test]
fn a_pv_missing_from_a_relist_leaves_its_pods_and_the_core_removes_it() {
    let mut s = with_volume();
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    s.volumes(Event::Init);
    assert_eq!(
        s.volumes(Event::InitDone),
        vec![
            scheduled("p", "n1", &[]),
            Input::RelistDone { kind: Kind::Volume }
        ],
        "no VolumeRemoved: the core's RelistDone removes it"
    );
}

#[test]
fn a_claim_deleted_during_a_gap_is_dropped_at_the_end_of_the_claim_relist() {
    let mut s = with_volume();
    s.claims(Event::Apply(pvc("c2", Some("pv-1"))));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    // The watch broke; c1 was deleted meanwhile. Claims have no core relist.
    assert!(s.claims(Event::Init).is_empty());
    assert!(
        s.claims(Event::InitApply(pvc("c2", Some("pv-1"))))
            .is_empty()
    );
    assert_eq!(s.claims(Event::InitDone), vec![scheduled("p", "n1", &[])]);
}

#[test]
fn during_a_pod_relist_only_listed_pods_are_sent_again() {
    let mut s = with_volume();
    s.volumes(Event::Apply(rwo("pv-2")));
    s.pods(Event::Apply(pod("a", Some("n1"), &["c1"])));
    s.pods(Event::Apply(pod("b", Some("n1"), &["c1"])));
    s.pods(Event::Init);
    s.pods(Event::InitApply(pod("a", Some("n1"), &["c1"])));
    // `b` is not listed yet (it may have been deleted in the gap): not sent.
    assert_eq!(
        s.claims(Event::Apply(pvc("c1", Some("pv-2")))),
        vec![scheduled("a", "n1", &[volume("pv-2")])]
    );
    // Listed later, it is sent with what it resolves to now.
    assert_eq!(
        s.pods(Event::InitApply(pod("b", Some("n1"), &["c1"]))),
        vec![scheduled("b", "n1", &[volume("pv-2")])]
    );
}

#[test]
fn drivers_go_to_the_registry_and_unlisted_ones_are_removed() {
    let mut s = InformerState::new();
    let registry = s.csi_drivers();
    let driver = |name: &str| CSIDriver {
        metadata: meta(None, name),
        spec: CSIDriverSpec {
            attach_required: Some(false),
            ..CSIDriverSpec::default()
        },
    };
    // No volume of theirs is known: nothing for the core.
    assert!(s.drivers(Event::Apply(driver("a"))).is_empty());
    assert!(!registry.attach_required("a"));
    s.drivers(Event::Apply(driver("b")));
    assert!(s.drivers(Event::Delete(driver("b"))).is_empty());
    assert!(registry.attach_required("b"), "deleted: attach again");
    s.drivers(Event::Apply(driver("c")));
    assert!(s.drivers(Event::Init).is_empty());
    assert!(s.drivers(Event::InitApply(driver("c"))).is_empty());
    assert!(s.drivers(Event::InitDone).is_empty());
    assert!(
        registry.attach_required("a"),
        "missing from the relist: removed"
    );
    assert!(!registry.attach_required("c"));
}

#[test]
fn synced_once_every_watcher_listed_and_the_snapshot_builds_the_world() {
    let mut s = InformerState::new();
    assert!(!s.synced());
    s.pods(Event::Init);
    s.pods(Event::InitApply(pod("p", Some("n1"), &["c1"])));
    s.pods(Event::InitDone);
    s.claims(Event::Init);
    s.claims(Event::InitApply(pvc("c1", Some("pv-1"))));
    s.claims(Event::InitDone);
    s.nodes(Event::Init);
    s.nodes(Event::InitApply(node("n1", Some("True"), &[], &[])));
    s.nodes(Event::InitDone);
    s.drivers(Event::Init);
    s.drivers(Event::InitDone);
    assert!(!s.synced(), "PVs not listed yet");
    s.volumes(Event::Init);
    s.volumes(Event::InitApply(rwo("pv-1")));
    s.volumes(Event::InitDone);
    assert!(!s.synced(), "CSINodes not listed yet");
    s.csi_nodes(Event::Init);
    s.csi_nodes(Event::InitDone);
    assert!(s.synced());
    assert_eq!(
        s.snapshot(),
        vec![
            Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", Access::SingleNode)
            },
            Input::NodeUpdated {
                node: "n1".into(),
                facts: NodeFacts {
                    healthy: true,
                    fenced: false,
                    in_use: Some(vec![]),
                    attach_limit: None,
                    driver_limits: Vec::new(),
                }
            },
            scheduled("p", "n1", &[volume("pv-1")]),
        ]
    );
    assert_eq!(s.world().len(), 3);
}

#[test]
fn the_index_names_pvs_pods_and_nodes_for_events() {
    let mut s = with_volume();
    let index = s.index();
    s.nodes(Event::Apply(node("n1", Some("True"), &[], &[])));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    assert_eq!(index.pv_name(&volume("pv-1")).as_deref(), Some("pv-1"));
    assert_eq!(index.node_uid("n1").as_deref(), Some("uid-n1"));
    let users = index.pods_using(&volume("pv-1"), "n1");
    assert_eq!(users.len(), 1);
    assert_eq!(
        (
            users[0].namespace.as_str(),
            users[0].name.as_str(),
            users[0].uid.as_str()
        ),
        ("ns", "p", "uid-p")
    );
    assert!(index.pods_using(&volume("pv-1"), "n2").is_empty());
    s.pods(Event::Delete(pod("p", Some("n1"), &["c1"])));
    assert!(index.pods_using(&volume("pv-1"), "n1").is_empty());
    assert!(index.pod("ns/p").is_none());
}

// ---- nodes kubelet manages (upstream's `addNodeToDswp`: only annotated nodes) ----

#[test]
fn a_node_kubelet_manages_is_invisible_and_so_are_its_pods() {
    let mut s = with_volume();
    assert!(
        s.nodes(Event::Apply(kubelet_managed(node(
            "n1",
            Some("True"),
            &[],
            &[]
        ))))
        .is_empty(),
        "no NodeUpdated for a node whose kubelet attaches by itself"
    );
    assert!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])))
            .is_empty(),
        "its pods are kubelet's too"
    );
    // A claim change does not reveal it either.
    s.volumes(Event::Apply(rwo("pv-2")));
    assert!(s.claims(Event::Apply(pvc("c1", Some("pv-2")))).is_empty());
    assert!(
        s.pods(Event::Delete(pod("p", Some("n1"), &["c1"])))
            .is_empty()
    );
    // Neither is in the world a controller starts from.
    s.pods(Event::Apply(pod("q", Some("n1"), &["c1"])));
    assert!(
        s.snapshot().iter().all(|input| !matches!(
            input,
            Input::NodeUpdated { .. } | Input::WorkloadScheduled { .. }
        )),
        "{:?}",
        s.snapshot()
    );
}

#[test]
fn a_node_that_gets_the_annotation_is_managed_from_then_on_with_its_pods() {
    let mut s = with_volume();
    s.nodes(Event::Apply(kubelet_managed(node(
        "n1",
        Some("True"),
        &[],
        &[],
    ))));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    // kubelet restarted with controller-managed attach/detach: the annotation appears.
    let inputs = s.nodes(Event::Apply(node("n1", Some("True"), &[], &[])));
    assert_eq!(
        inputs,
        vec![
            Input::NodeUpdated {
                node: "n1".into(),
                facts: NodeFacts {
                    healthy: true,
                    fenced: false,
                    in_use: Some(vec![]),
                    attach_limit: None,
                    driver_limits: Vec::new(),
                }
            },
            scheduled("p", "n1", &[volume("pv-1")]),
        ]
    );
}

#[test]
fn a_pod_sent_before_its_node_was_seen_is_taken_back_when_the_node_is_kubelets() {
    let mut s = with_volume();
    // The pod watcher was faster: the node is not known yet, so the pod is sent (the core
    // lets it wait for its node and attaches nothing meanwhile).
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[volume("pv-1")])]
    );
    assert_eq!(
        s.nodes(Event::Apply(kubelet_managed(node(
            "n1",
            Some("True"),
            &[],
            &[]
        )))),
        vec![removed("p")]
    );
    assert!(s.index().pods_using(&volume("pv-1"), "n1").is_empty());
}

#[test]
fn a_managed_node_that_loses_the_annotation_stays_managed_as_upstream_keeps_it() {
    let mut s = with_volume();
    s.nodes(Event::Apply(node("n1", Some("True"), &[], &[])));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    // Upstream's node update only ever adds a node to its desired state; dropping it here
    // would detach what its pods use.
    assert_eq!(
        s.nodes(Event::Apply(kubelet_managed(node(
            "n1",
            Some("False"),
            &[],
            &[]
        )))),
        vec![Input::NodeUpdated {
            node: "n1".into(),
            facts: NodeFacts {
                healthy: false,
                fenced: false,
                in_use: Some(vec![]),
                attach_limit: None,
                driver_limits: Vec::new(),
            }
        }]
    );
    assert!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])))
            .is_empty()
    );
    assert_eq!(
        s.pods(Event::Delete(pod("p", Some("n1"), &["c1"]))),
        vec![removed("p")]
    );
}

#[test]
fn a_relist_does_not_send_nodes_kubelet_manages() {
    let mut s = InformerState::new();
    s.nodes(Event::Init);
    assert!(
        s.nodes(Event::InitApply(kubelet_managed(node(
            "n1",
            Some("True"),
            &[],
            &[]
        ))))
        .is_empty()
    );
    assert_eq!(
        s.nodes(Event::InitApply(node("n2", Some("True"), &[], &[])))
            .len(),
        1
    );
    assert_eq!(
        s.nodes(Event::InitDone),
        vec![Input::RelistDone { kind: Kind::Node }]
    );
    // Deleted, a node kubelet managed is not announced as removed: the core never had it.
    assert!(
        s.nodes(Event::Delete(kubelet_managed(node(
            "n1",
            Some("True"),
            &[],
            &[]
        ))))
        .is_empty()
    );
}

// ---- drivers that need no attach (upstream never tracks them; kubelet never waits) ----

/// The CSIDriver object of `name`, saying whether its volumes need attach.
fn csi_driver(name: &str, attach_required: Option<bool>) -> CSIDriver {
    CSIDriver {
        metadata: meta(None, name),
        spec: CSIDriverSpec {
            attach_required,
            ..CSIDriverSpec::default()
        },
    }
}

#[test]
fn volumes_of_a_driver_that_needs_no_attach_are_not_tracked() {
    let mut s = InformerState::new();
    s.drivers(Event::Apply(csi_driver(DRIVER, Some(false))));
    assert!(
        s.volumes(Event::Apply(rwo("pv-1"))).is_empty(),
        "no SetVolume: nothing attaches it, kubelet does not wait for it"
    );
    s.claims(Event::Apply(pvc("c1", Some("pv-1"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])],
        "so no Multi-Attach warning and no volumesAttached entry either"
    );
    assert!(
        s.snapshot()
            .iter()
            .all(|i| !matches!(i, Input::SetVolume { .. }))
    );
    assert!(s.volumes(Event::Delete(rwo("pv-1"))).is_empty());
}

#[test]
fn a_driver_switched_to_no_attach_stops_tracking_its_volumes_and_back() {
    let mut s = with_volume();
    assert!(
        s.drivers(Event::Apply(csi_driver(DRIVER, None))).is_empty(),
        "absent attachRequired is true, as before"
    );
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    // Removed: the core detaches it where still attached, once its pods stopped using it
    // (kubelet keeps it mounted while they run); the pod no longer needs it.
    assert_eq!(
        s.drivers(Event::Apply(csi_driver(DRIVER, Some(false)))),
        vec![
            Input::VolumeRemoved {
                volume: volume("pv-1")
            },
            scheduled("p", "n1", &[]),
        ]
    );
    // The pod no longer needs it, and it is no longer a volume of the core's.
    assert_eq!(
        s.pods(Event::Apply(pod("q", Some("n2"), &["c1"]))),
        vec![scheduled("q", "n2", &[])]
    );
    assert!(
        s.snapshot()
            .iter()
            .all(|i| !matches!(i, Input::SetVolume { .. })),
        "{:?}",
        s.snapshot()
    );
    // Back to attach (here: the CSIDriver object deleted): tracked again.
    assert_eq!(
        s.drivers(Event::Delete(csi_driver(DRIVER, Some(false)))),
        vec![
            Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", Access::SingleNode)
            },
            scheduled("p", "n1", &[volume("pv-1")]),
            scheduled("q", "n2", &[volume("pv-1")]),
        ]
    );
    assert_eq!(
        s.pods(Event::Apply(pod("r", Some("n3"), &["c1"]))),
        vec![scheduled("r", "n3", &[volume("pv-1")])]
    );
}

// ---- in-tree volumes, served by their CSI drivers through CSI migration ----

/// The unique name kubelet gives a migrated EBS volume.
const EBS_VOLUME: &str = "kubernetes.io/csi/ebs.csi.aws.com^vol-1";

/// An in-tree EBS PersistentVolume `pv-ebs` (volume `vol-1`), RWO, claimed by `ns/c-ebs`.
fn ebs_pv() -> PersistentVolume {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-ebs", "uid": "uid-pv-ebs"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "awsElasticBlockStore": {"volumeID": "aws://us-west-2a/vol-1", "fsType": "ext4"},
            "claimRef": {"namespace": "ns", "name": "c-ebs", "uid": "uid-c-ebs"},
        },
    }))
    .unwrap()
}

/// A running pod on `node` with the one inline `volume`.
fn pod_with(name: &str, node: &str, volume: serde_json::Value) -> Pod {
    let mut pod = pod(name, Some(node), &[]);
    pod.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(volume).unwrap()]);
    pod
}

fn inline_ebs() -> serde_json::Value {
    serde_json::json!({"name": "data", "awsElasticBlockStore": {"volumeID": "vol-1"}})
}

/// What the inline EBS volume `vol-1` is set as: its translated spec is the attachment's
/// `inlineVolumeSpec`.
fn inline_ebs_spec() -> VolumeSpec<CsiVolume> {
    let spec = serde_json::from_value(serde_json::json!({
        "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1", "volumeAttributes": {"partition": "0"}},
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    }))
    .unwrap();
    VolumeSpec {
        access: Access::SingleNode,
        payload: CsiVolume {
            source: AttachSource::Inline(Box::new(spec)),
            driver: "ebs.csi.aws.com".into(),
            handle: "vol-1".into(),
        },
        attach_required: true,
        // A migrated volume counts against its CSI driver's limit, as kubelet counts it.
        driver: Some(driver_id("ebs.csi.aws.com")),
    }
}

#[test]
fn an_in_tree_pv_is_set_under_its_csi_name_and_its_pods_need_it() {
    let mut s = InformerState::new();
    assert_eq!(
        s.volumes(Event::Apply(ebs_pv())),
        vec![Input::SetVolume {
            volume: EBS_VOLUME.into(),
            spec: VolumeSpec {
                access: Access::SingleNode,
                payload: CsiVolume::persistent("pv-ebs", "ebs.csi.aws.com", "vol-1"),
                attach_required: true,
                driver: Some(driver_id("ebs.csi.aws.com")),
            },
        }]
    );
    s.claims(Event::Apply(pvc("c-ebs", Some("pv-ebs"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c-ebs"]))),
        vec![scheduled("p", "n1", &[EBS_VOLUME.into()])]
    );
    assert_eq!(
        s.index().pv_name(EBS_VOLUME).as_deref(),
        Some("pv-ebs"),
        "events name it by its PV"
    );
}

#[test]
fn a_gce_pd_declared_read_write_many_is_single_node_as_its_driver_attaches_it() {
    let mut s = InformerState::new();
    let pd: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-pd"},
        "spec": {"accessModes": ["ReadWriteMany"], "gcePersistentDisk": {"pdName": "disk-1"}},
    }))
    .unwrap();
    let inputs = s.volumes(Event::Apply(pd));
    let [Input::SetVolume { volume, spec }] = inputs.as_slice() else {
        panic!("{inputs:?}");
    };
    assert_eq!(
        volume,
        "kubernetes.io/csi/pd.csi.storage.gke.io^projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk-1"
    );
    assert_eq!(spec.access, Access::SingleNode);
}

#[test]
fn an_in_tree_pv_that_does_not_translate_is_nobodys() {
    let mut s = InformerState::new();
    let mut bad = ebs_pv();
    bad.spec
        .as_mut()
        .unwrap()
        .aws_elastic_block_store
        .as_mut()
        .unwrap()
        .volume_id = "aws://us-west-2a/not-a-volume".into();
    assert!(s.volumes(Event::Apply(bad)).is_empty());
    s.claims(Event::Apply(pvc("c-ebs", Some("pv-ebs"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c-ebs"]))),
        vec![scheduled("p", "n1", &[])]
    );
}

#[test]
fn an_inline_in_tree_volume_is_set_while_a_pod_needs_it() {
    let mut s = InformerState::new();
    assert_eq!(
        s.pods(Event::Apply(pod_with("p", "n1", inline_ebs()))),
        vec![
            Input::SetVolume {
                volume: EBS_VOLUME.into(),
                spec: inline_ebs_spec()
            },
            scheduled("p", "n1", &[EBS_VOLUME.into()]),
        ]
    );
    // A second pod with the same disk: already set.
    assert_eq!(
        s.pods(Event::Apply(pod_with("q", "n2", inline_ebs()))),
        vec![scheduled("q", "n2", &[EBS_VOLUME.into()])]
    );
    assert_eq!(
        s.index().pv_name(EBS_VOLUME).as_deref(),
        Some("ebs.csi.aws.com-vol-1"),
        "events name it as upstream's translation names it"
    );
    assert_eq!(
        s.pods(Event::Delete(pod_with("p", "n1", inline_ebs()))),
        vec![removed("p")]
    );
    // The last pod gone, the volume goes: the core detaches it where still attached.
    assert_eq!(
        s.pods(Event::Delete(pod_with("q", "n2", inline_ebs()))),
        vec![
            removed("q"),
            Input::VolumeRemoved {
                volume: EBS_VOLUME.into()
            }
        ]
    );
}

#[test]
fn inline_volumes_are_in_the_world_and_survive_a_pv_relist() {
    let mut s = InformerState::new();
    s.pods(Event::Apply(pod_with("p", "n1", inline_ebs())));
    assert_eq!(
        s.snapshot(),
        vec![
            Input::SetVolume {
                volume: EBS_VOLUME.into(),
                spec: inline_ebs_spec()
            },
            scheduled("p", "n1", &[EBS_VOLUME.into()]),
        ]
    );
    // The PV watcher relists: the core removes the volumes it does not see set, and an
    // inline volume has no PV. It is set again before the relist ends.
    s.volumes(Event::Init);
    assert_eq!(
        s.volumes(Event::InitDone),
        vec![
            Input::SetVolume {
                volume: EBS_VOLUME.into(),
                spec: inline_ebs_spec()
            },
            Input::RelistDone { kind: Kind::Volume },
        ]
    );
    // A pod relist that no longer shows the pod: the volume goes after the relist.
    s.pods(Event::Init);
    assert_eq!(
        s.pods(Event::InitDone),
        vec![
            Input::RelistDone {
                kind: Kind::Workload
            },
            Input::VolumeRemoved {
                volume: EBS_VOLUME.into()
            },
        ]
    );
}

#[test]
fn an_inline_volume_of_a_driver_that_needs_no_attach_is_not_tracked() {
    let mut s = InformerState::new();
    s.drivers(Event::Apply(csi_driver("file.csi.azure.com", Some(false))));
    let share = serde_json::json!({"name": "share", "azureFile": {"secretName": "s", "shareName": "files"}});
    assert_eq!(
        s.pods(Event::Apply(pod_with("p", "n1", share))),
        vec![scheduled("p", "n1", &[])]
    );
    // The EBS driver switched to no attach: its inline volume goes, with its pod's need.
    s.pods(Event::Apply(pod_with("q", "n2", inline_ebs())));
    assert_eq!(
        s.drivers(Event::Apply(csi_driver("ebs.csi.aws.com", Some(false)))),
        vec![
            scheduled("q", "n2", &[]),
            Input::VolumeRemoved {
                volume: EBS_VOLUME.into()
            },
        ]
    );
}

#[test]
fn a_portworx_volume_needs_to_know_the_node_migrated_it() {
    // Portworx's migration is not complete by default: only where the node's CSINode says
    // its kubelet migrated it. With no CSINode known, the pod does not get it.
    let mut s = InformerState::new();
    let px: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-px"},
        "spec": {"accessModes": ["ReadWriteOnce"], "portworxVolume": {"volumeID": "px-1"},
                 "claimRef": {"namespace": "ns", "name": "c-px", "uid": "uid-c-px"}},
    }))
    .unwrap();
    assert_eq!(
        s.volumes(Event::Apply(px)).len(),
        1,
        "set: a node may migrate it"
    );
    s.claims(Event::Apply(pvc("c-px", Some("pv-px"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c-px"]))),
        vec![scheduled("p", "n1", &[])]
    );
}

/// The CSINode of `node`: the plugins its kubelet migrated, the drivers installed.
fn csi_node(node: &str, migrated: Option<&str>, drivers: &[&str]) -> CSINode {
    let mut object = serde_json::json!({
        "metadata": {"name": node},
        "spec": {"drivers": drivers.iter().map(|d| serde_json::json!({"name": d, "nodeID": node})).collect::<Vec<_>>()},
    });
    if let Some(migrated) = migrated {
        object["metadata"]["annotations"] =
            serde_json::json!({"storage.alpha.kubernetes.io/migrated-plugins": migrated});
    }
    serde_json::from_value(object).unwrap()
}

const PX_VOLUME: &str = "kubernetes.io/csi/pxd.portworx.com^px-1";

/// A state with the in-tree Portworx PV `pv-px` bound to `c-px`, used by pod `p` on `n1`.
fn with_portworx() -> InformerState {
    let mut s = InformerState::new();
    let px: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-px"},
        "spec": {"accessModes": ["ReadWriteOnce"], "portworxVolume": {"volumeID": "px-1"},
                 "claimRef": {"namespace": "ns", "name": "c-px", "uid": "uid-c-px"}},
    }))
    .unwrap();
    s.volumes(Event::Apply(px));
    s.claims(Event::Apply(pvc("c-px", Some("pv-px"))));
    s.pods(Event::Apply(pod("p", Some("n1"), &["c-px"])));
    s
}

#[test]
fn a_node_whose_csinode_says_it_migrated_portworx_gets_its_volumes() {
    // upstream's isCSIMigrationSupportedOnNode: the plugin in the CSINode's
    // migrated-plugins annotation, and its driver installed there.
    let mut s = with_portworx();
    let migrated = "kubernetes.io/aws-ebs,kubernetes.io/portworx-volume";
    assert_eq!(
        s.csi_nodes(Event::Apply(csi_node(
            "n1",
            Some(migrated),
            &["pxd.portworx.com"]
        ))),
        vec![scheduled("p", "n1", &[PX_VOLUME.into()])]
    );
    // Another node's CSINode changes nothing here.
    assert!(
        s.csi_nodes(Event::Apply(csi_node("n2", Some(migrated), &[])))
            .is_empty()
    );
    // Listed as migrated, but the driver is gone: the volume waits there.
    assert_eq!(
        s.csi_nodes(Event::Apply(csi_node("n1", Some(migrated), &[]))),
        vec![scheduled("p", "n1", &[])]
    );
    assert_eq!(
        s.csi_nodes(Event::Apply(csi_node(
            "n1",
            Some(migrated),
            &["pxd.portworx.com"]
        ))),
        vec![scheduled("p", "n1", &[PX_VOLUME.into()])]
    );
    // Not migrated there (the in-tree plugin serves it): not this controller's.
    assert_eq!(
        s.csi_nodes(Event::Apply(csi_node(
            "n1",
            Some("kubernetes.io/aws-ebs"),
            &["pxd.portworx.com"]
        ))),
        vec![scheduled("p", "n1", &[])]
    );
    s.csi_nodes(Event::Apply(csi_node(
        "n1",
        Some(migrated),
        &["pxd.portworx.com"],
    )));
    assert_eq!(
        s.csi_nodes(Event::Delete(csi_node(
            "n1",
            Some(migrated),
            &["pxd.portworx.com"]
        ))),
        vec![scheduled("p", "n1", &[])]
    );
}

#[test]
fn a_csinode_missing_from_a_relist_is_forgotten() {
    let mut s = with_portworx();
    let migrated = Some("kubernetes.io/portworx-volume");
    s.csi_nodes(Event::Apply(csi_node(
        "n1",
        migrated,
        &["pxd.portworx.com"],
    )));
    assert!(
        s.csi_nodes(Event::Init).is_empty(),
        "no core relist of its own"
    );
    assert!(s.csi_nodes(Event::InitDone) == vec![scheduled("p", "n1", &[])]);
    // Listed again: the pod is sent with it.
    assert_eq!(
        s.csi_nodes(Event::Apply(csi_node(
            "n1",
            migrated,
            &["pxd.portworx.com"]
        ))),
        vec![scheduled("p", "n1", &[PX_VOLUME.into()])]
    );
}

#[test]
fn with_every_migration_complete_no_csinode_is_needed() {
    let mut s = InformerState::with_csi_migration(CsiMigration::complete(InTreePlugin::ALL));
    let px: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-px"},
        "spec": {"accessModes": ["ReadWriteOnce"], "portworxVolume": {"volumeID": "px-1"},
                 "claimRef": {"namespace": "ns", "name": "c-px", "uid": "uid-c-px"}},
    }))
    .unwrap();
    s.volumes(Event::Apply(px));
    s.claims(Event::Apply(pvc("c-px", Some("pv-px"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c-px"]))),
        vec![scheduled("p", "n1", &[PX_VOLUME.into()])]
    );
}

#[test]
fn a_pod_recreated_under_its_name_in_a_watch_gap_brings_its_own_inline_volumes() {
    let mut s = InformerState::new();
    s.pods(Event::Apply(pod_with("p", "n1", inline_ebs())));
    // Deleted and created again (another uid, another disk) while the watch was down.
    let mut again = pod_with(
        "p",
        "n1",
        serde_json::json!({"name": "data", "awsElasticBlockStore": {"volumeID": "vol-2"}}),
    );
    again.metadata.uid = Some("uid-p-2".into());
    let inputs = s.pods(Event::Apply(again));
    assert_eq!(inputs.len(), 3, "{inputs:?}");
    assert!(
        matches!(&inputs[0], Input::SetVolume { volume, .. } if volume == "kubernetes.io/csi/ebs.csi.aws.com^vol-2")
    );
    assert_eq!(
        inputs[1..],
        [
            scheduled(
                "p",
                "n1",
                &["kubernetes.io/csi/ebs.csi.aws.com^vol-2".into()]
            ),
            Input::VolumeRemoved {
                volume: EBS_VOLUME.into()
            },
        ]
    );
}

#[test]
fn a_pv_without_a_claim_ref_is_not_used_until_it_names_the_claim() {
    // Upstream's getPVSpecFromCache: a PV with no `claimRef` is not yet bound to the claim
    // that names it (the binder sets `claimRef` first, then the claim's `volumeName`).
    let mut s = InformerState::new();
    let mut unclaimed = rwo("pv-1");
    unclaimed.spec.as_mut().unwrap().claim_ref = None;
    s.volumes(Event::Apply(unclaimed));
    s.claims(Event::Apply(pvc("c1", Some("pv-1"))));
    assert_eq!(
        s.pods(Event::Apply(pod("p", Some("n1"), &["c1"]))),
        vec![scheduled("p", "n1", &[])]
    );
    assert_eq!(
        s.volumes(Event::Apply(rwo("pv-1"))),
        vec![
            Input::SetVolume {
                volume: volume("pv-1"),
                spec: spec("pv-1", Access::SingleNode)
            },
            scheduled("p", "n1", &[volume("pv-1")]),
        ]
    );
}

/// A pod of `with_volume` being deleted, whose one container stopped, and with `extra` for
/// its other statuses.
fn deleting_with(s: &mut InformerState, extra: impl FnOnce(&mut PodStatus)) -> Vec<Input<Kube>> {
    s.pods(Event::Apply(pod("p", Some("n1"), &["c1"])));
    let stopped = ContainerStatus {
        name: "c".into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    let mut deleting = pod("p", Some("n1"), &["c1"]);
    deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
    let status = deleting.status.as_mut().unwrap();
    status.container_statuses = Some(vec![stopped]);
    extra(status);
    s.pods(Event::Apply(deleting))
}

#[test]
fn a_running_ephemeral_container_keeps_a_deleted_pods_volumes() {
    let mut s = with_volume();
    let debugging = ContainerStatus {
        name: "debugger".into(),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    assert!(
        deleting_with(&mut s, |status| {
            status.ephemeral_container_statuses = Some(vec![debugging]);
        })
        .is_empty(),
        "an ephemeral container still runs: the pod still needs its volumes"
    );
}

#[test]
fn a_container_without_a_state_is_not_terminated() {
    // Upstream's notRunning: only a container that is terminated or waiting has stopped.
    for state in [None, Some(ContainerState::default())] {
        let mut s = with_volume();
        let unknown = ContainerStatus {
            name: "sidecar".into(),
            state: state.clone(),
            ..ContainerStatus::default()
        };
        assert!(
            deleting_with(&mut s, |status| {
                status.container_statuses.as_mut().unwrap().push(unknown);
            })
            .is_empty(),
            "a container with state {state:?} may run: the pod still needs its volumes"
        );
    }
    // Waiting counts as stopped.
    let mut s = with_volume();
    let waiting = ContainerStatus {
        name: "sidecar".into(),
        state: Some(ContainerState {
            waiting: Some(Default::default()),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    };
    assert_eq!(
        deleting_with(&mut s, |status| {
            status.container_statuses.as_mut().unwrap().push(waiting);
        }),
        vec![removed("p")]
    );
}

/// The CSINode of `node` with each driver's `allocatable.count` (`None`: not set).
fn csi_node_with_counts(node: &str, drivers: &[(&str, Option<i32>)]) -> CSINode {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": node},
        "spec": {"drivers": drivers.iter().map(|(name, count)| {
            let mut d = serde_json::json!({"name": name, "nodeID": node});
            if let Some(count) = count {
                d["allocatable"] = serde_json::json!({"count": count});
            }
            d
        }).collect::<Vec<_>>()},
    }))
    .unwrap()
}

/// A node's facts as the core gets them with these per-driver limits.
fn limited_facts(limits: &[(&str, u32)]) -> Input<Kube> {
    Input::NodeUpdated {
        node: "n1".into(),
        facts: NodeFacts {
            healthy: true,
            fenced: false,
            in_use: Some(Vec::new()),
            attach_limit: None,
            driver_limits: {
                let mut l: Vec<_> = limits.iter().map(|(d, n)| (driver_id(d), *n)).collect();
                l.sort();
                l
            },
        },
    }
}

#[test]
fn a_csinodes_allocatable_counts_become_the_nodes_driver_limits() {
    let mut s = InformerState::new();
    // Known before the node: the limits go out with the node's first facts.
    assert!(
        s.csi_nodes(Event::Apply(csi_node_with_counts(
            "n1",
            &[("ebs.csi.aws.com", Some(25)), ("efs.csi.aws.com", None)],
        )))
        .is_empty()
    );
    assert_eq!(
        s.nodes(Event::Apply(node("n1", Some("True"), &[], &[]))),
        vec![limited_facts(&[("ebs.csi.aws.com", 25)])],
        "a driver without a count has no limit"
    );
    // A changed count goes out at once; the same again sends nothing.
    let changed = csi_node_with_counts("n1", &[("ebs.csi.aws.com", Some(16))]);
    assert_eq!(
        s.csi_nodes(Event::Apply(changed.clone())),
        vec![limited_facts(&[("ebs.csi.aws.com", 16)])]
    );
    assert!(s.csi_nodes(Event::Apply(changed.clone())).is_empty());
    // The node's own update keeps them.
    assert_eq!(
        s.nodes(Event::Apply(node("n1", Some("True"), &["x"], &[]))),
        vec![Input::NodeUpdated {
            node: "n1".into(),
            facts: NodeFacts {
                in_use: Some(vec!["x".into()]),
                ..match limited_facts(&[("ebs.csi.aws.com", 16)]) {
                    Input::NodeUpdated { facts, .. } => facts,
                    _ => unreachable!(),
                }
            },
        }]
    );
    // The CSINode deleted: no limit.
    assert_eq!(
        s.csi_nodes(Event::Delete(changed)),
        vec![Input::NodeUpdated {
            node: "n1".into(),
            facts: NodeFacts {
                in_use: Some(vec!["x".into()]),
                ..NodeFacts::default()
            },
        }]
    );
}
