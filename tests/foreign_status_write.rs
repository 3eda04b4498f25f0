//! A writer other than this core changes a node's list between the core's fresh read and its
//! detach: a previous controller instance's status write that lands after the new one
//! recovered (any other writer, a second instance in a leader hand-over or an operator, does
//! the same). Found by review of the fuzz campaign for issue 10 (neither fuzz harness can make
//! a foreign write); with the clearance of a read kept for a second regardless of later reads,
//! the detach below went through while the node's agent had the volume mounted (I2).

use std::time::Duration;

use attach_detach::Ids;
use attach_detach::config::Config;
use attach_detach::core::{Event, Input, NodeFacts, Operation, Outcome, VolumeSpec};
use attach_detach::testkit::{Harness, listed, node_status};
use attach_detach::traits::{BackendAttachment, NodeStatus, Revision, StoreError};

type D = Ids<&'static str, &'static str, &'static str, ()>;

/// Node `n`'s record in the store.
struct Store {
    attached: Vec<&'static str>,
    in_use: Vec<&'static str>,
    revision: u64,
}

impl Store {
    /// What a read finds: the list, the agent's report of a healthy, unfenced node.
    fn status(&self) -> NodeStatus<D> {
        let facts = NodeFacts {
            healthy: true,
            fenced: false,
            in_use: Some(self.in_use.clone()),
            attach_limit: None,
            driver_limits: Vec::new(),
        };
        node_status(listed(self.attached.iter().copied()), &facts, self.revision)
    }
}

/// 1. A new core recovers: the store lists nothing for `n` at revision 5, the backend lists
///    `v` on `n` (the previous instance's attach); nothing needs `v`, so the core wants it
///    detached and reads `n` first.
/// 2. The previous instance's write, expecting revision 5, lands: the store lists `v`.
/// 3. The read answers: `v` listed, nothing in use.
/// 4. The core writes the list without `v`; meanwhile a pod needing `v` reaches `n` before
///    the controller hears of it: the agent reports `v` in use and mounts it (it is listed
///    and attached). The write conflicts, the core reads and writes again.
/// 5. No detach may follow while the agent reports `v` in use.
#[test]
fn a_foreign_write_between_the_read_and_the_detach_stops_the_detach() {
    let mut h = Harness::<D>::new(Config::default());
    h.handle(Input::SetVolume {
        volume: "v",
        spec: VolumeSpec::single_node(()),
    })
    .unwrap();
    h.handle(Input::NodeUpdated {
        node: "n",
        facts: NodeFacts {
            healthy: true,
            fenced: false,
            in_use: Some(vec![]),
            attach_limit: None,
            driver_limits: Vec::new(),
        },
    })
    .unwrap();
    let mut store = Store {
        attached: vec![],
        in_use: vec![],
        revision: 5,
    };
    let (mut reads, mut writes) = (0, 0);
    // Every deadline up to 30 s included.
    let until = Duration::from_secs(30) + Duration::from_nanos(1);
    h.run_until_quiet(until, |now, _, op| {
        Some(match op {
            Operation::ListStatuses { .. } => {
                Outcome::ListStatuses(Ok(vec![("n", store.status())]))
            }
            Operation::ListAttachments { .. } => Outcome::List(Ok(vec![BackendAttachment {
                volume: "v",
                node: "n",
                spec: VolumeSpec::single_node(()),
            }])),
            Operation::ReadStatus { .. } => {
                reads += 1;
                if reads == 1 {
                    store.attached = vec!["v"];
                    store.revision = 6;
                }
                Outcome::ReadStatus(Ok(store.status()))
            }
            Operation::WriteStatus {
                attached, expected, ..
            } => {
                writes += 1;
                if writes == 1 {
                    store.in_use = vec!["v"];
                    store.revision += 1;
                }
                let result = if *expected != Revision::from(store.revision) {
                    Err(StoreError::conflict(Revision::from(store.revision)))
                } else {
                    store.attached = attached.volumes().to_vec();
                    store.revision += 1;
                    Ok(Revision::from(store.revision))
                };
                Outcome::WriteStatus(result.map(Into::into))
            }
            Operation::Detach { .. } => panic!(
                "I2: detach of v at {now:?} while n's agent reports it in use (revision {})",
                store.revision
            ),
            other => panic!("unexpected {other:?}"),
        })
    });
    let held_back = h
        .core
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::WaitingForUnmount { .. }));
    assert!(held_back, "a WaitingForUnmount event says why");
    assert!(reads >= 3, "re-read on the re-check timer: {reads} reads");
    assert_eq!(
        store.attached,
        Vec::<&str>::new(),
        "the removal was written"
    );
}
