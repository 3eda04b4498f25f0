//! Per-driver attach limits (Kubernetes: each CSI driver's `allocatable.count` on the node's
//! CSINode): a volume counts against its driver's limit on a node as against the node's own,
//! attached, maybe attached (Uncertain, a detach under way included) and being attached; other
//! drivers' volumes and volumes with no driver do not count.

use super::*;
use crate::core::DriverId;

const EBS: DriverId = DriverId::new(1).unwrap();
const EFS: DriverId = DriverId::new(2).unwrap();

impl H {
    /// A healthy node reporting nothing in use, with these per-driver limits.
    fn driver_limited(&mut self, node: &'static str, limits: &[(DriverId, u32)]) {
        let facts = NodeFacts {
            in_use: Some(Vec::new()),
            driver_limits: limits.to_vec(),
            ..NodeFacts::default()
        };
        self.world
            .store
            .entry(node)
            .or_insert((facts.clone(), Vec::new(), 1))
            .0 = facts.clone();
        self.input(Input::NodeUpdated { node, facts });
    }

    fn rwo_of(&mut self, volume: &'static str, driver: Option<DriverId>) {
        let spec = VolumeSpec::single_node(());
        let spec = match driver {
            Some(driver) => spec.with_driver(driver),
            None => spec,
        };
        self.input(Input::SetVolume { volume, spec });
    }
}

#[test]
fn a_driver_limit_counts_only_that_drivers_volumes() {
    let mut h = H::new(Config::default());
    h.driver_limited("n1", &[(EBS, 2)]);
    for (pod, volume, driver) in [
        ("p1", "ebs-1", Some(EBS)),
        ("p2", "ebs-2", Some(EBS)),
        ("p3", "ebs-3", Some(EBS)),
        ("p4", "efs-1", Some(EFS)),
        ("p5", "plain", None),
    ] {
        h.rwo_of(volume, driver);
        h.pod(pod, "n1", &[volume]);
    }
    let ops = h.tick();
    assert_eq!(
        H::attaches(&ops),
        vec![
            "attach ebs-1 n1",
            "attach ebs-2 n1",
            "attach efs-1 n1",
            "attach plain n1"
        ],
        "two of the driver's, and every other volume"
    );
    assert_eq!(
        h.node_full_events(),
        vec![("ebs-3".to_string(), vec!["p3"])]
    );
    // An attach that may have taken effect keeps its room; one that did nothing frees it.
    let (ebs, others): (Vec<_>, Vec<_>) = ops.into_iter().partition(
        |op| matches!(op, Operation::Attach { volume, .. } if volume.starts_with("ebs")),
    );
    for op in others {
        h.ok(op);
    }
    let mut ebs = ebs.into_iter();
    let (a1, a2) = (ebs.next().unwrap(), ebs.next().unwrap());
    h.fail(a1, uncertain());
    let ops = h.tick();
    assert!(H::attaches(&ops).is_empty());
    for op in ops {
        h.ok(op);
    }
    h.fail(a2, transient());
    let ops = h.tick();
    assert_eq!(H::attaches(&ops), vec!["attach ebs-3 n1"]);
    for op in ops {
        h.ok(op);
    }
    h.run_ok(secs(5));
    assert_eq!(
        h.count("attach ebs-2 n1"),
        1,
        "no attach past the driver's limit"
    );
    // A pod leaves: its volume's detach frees the driver's room, and the waiting one goes.
    h.unpod("p3");
    let planned = h.run_ok(secs(5));
    assert!(
        planned.contains(&"attach ebs-2 n1".to_string()),
        "{planned:?}"
    );
    assert_eq!(h.core.waiting_for_room(), 0);
}

#[test]
fn a_driver_limit_and_the_node_limit_both_hold() {
    let mut h = H::new(Config::default());
    let facts = NodeFacts {
        in_use: Some(Vec::new()),
        attach_limit: Some(2),
        driver_limits: vec![(EBS, 5)],
        ..NodeFacts::default()
    };
    h.world
        .store
        .entry("n1")
        .or_insert((facts.clone(), Vec::new(), 1))
        .0 = facts.clone();
    h.input(Input::NodeUpdated { node: "n1", facts });
    for (pod, volume) in [("p1", "v1"), ("p2", "v2"), ("p3", "v3")] {
        h.rwo_of(volume, Some(EBS));
        h.pod(pod, "n1", &[volume]);
    }
    assert_eq!(
        H::attaches(&h.tick()),
        vec!["attach v1 n1", "attach v2 n1"],
        "the node's own limit is the lower"
    );
}

#[test]
fn a_raised_driver_limit_lets_the_waiting_attach_go() {
    let mut h = H::new(Config::default());
    h.driver_limited("n1", &[(EBS, 1)]);
    for (pod, volume) in [("p1", "v1"), ("p2", "v2")] {
        h.rwo_of(volume, Some(EBS));
        h.pod(pod, "n1", &[volume]);
    }
    assert_eq!(h.run_ok(secs(2)), vec!["attach v1 n1", "write n1 [v1]"]);
    h.driver_limited("n1", &[(EBS, 2)]);
    assert_eq!(h.run_ok(secs(1)), vec!["attach v2 n1", "write n1 [v1,v2]"]);
}
