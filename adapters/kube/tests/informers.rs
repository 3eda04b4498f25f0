//! Every rule of [`InformerState`], with k8s-openapi objects built by hand: no API server.

use attach_detach::core::{Access, Input, Kind, NodeFacts, VolumeSpec};
use attach_detach_kube::{CsiVolume, DriverChange, InformerState, Kube, unique_name};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStatus, EphemeralVolumeSource, Node, NodeCondition, NodeSpec, NodeStatus,
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource, PersistentVolumeSpec, Pod,
    PodSpec, PodStatus, Taint, Volume,
};
use k8s_openapi::api::storage::v1::CSIDriver;
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
        payload: CsiVolume {
            pv: pv.into(),
            driver: DRIVER.into(),
            handle: format!("h-{pv}"),
        },
        attach_required: true,
    }
}

fn node(name: &str, ready: Option<&str>, in_use: &[&str], taints: &[&str]) -> Node {
    Node {
        metadata: meta(None, name),
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
    payload.payload.pv = "pv-1-twin".into();
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
    let driver = |name: &str| CSIDriver {
        metadata: meta(None, name),
        spec: Default::default(),
    };
    assert_eq!(
        s.drivers(Event::Apply(driver("a"))),
        vec![DriverChange::Applied(Box::new(driver("a")))]
    );
    s.drivers(Event::Apply(driver("b")));
    assert_eq!(
        s.drivers(Event::Delete(driver("b"))),
        vec![DriverChange::Removed("b".into())]
    );
    s.drivers(Event::Apply(driver("c")));
    assert!(s.drivers(Event::Init).is_empty());
    assert_eq!(
        s.drivers(Event::InitApply(driver("c"))),
        vec![DriverChange::Applied(Box::new(driver("c")))]
    );
    assert_eq!(
        s.drivers(Event::InitDone),
        vec![DriverChange::Removed("a".into())]
    );
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
