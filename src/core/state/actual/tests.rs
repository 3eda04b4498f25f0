use std::collections::BTreeMap;
use std::time::Duration;

use super::node::OUT_OF_RING;
use super::sorted::MAX_SPARE_REQUESTS;
use super::*;
use crate::core::calls::reported_volumes::{ReportedVolume, ReportedVolumes};
use crate::domain::Ids;

type T = Ids<&'static str, &'static str, &'static str>;

type U = Ids<u32, u32, u32>;

/// Everything `recover_reported` may change, in an order no hash decides (report and
/// record generations left out: only their change is meant, and it is checked apart).
fn snapshot(a: &ActualState<U>) -> String {
    let mut volumes: Vec<_> = a.volumes.iter().collect();
    volumes.sort_by_key(|v| v.volume);
    let mut nodes: Vec<_> = a.nodes.iter().map(|n| (&n.node, n)).collect();
    nodes.sort_by_key(|(node, _)| **node);
    let mut out = format!("len {}\n", a.len);
    for v in volumes {
        let mut list: Vec<_> = v.list.iter().collect();
        list.sort_by_key(|a| a.node);
        out += &format!("{} {list:?}\n", v.volume);
    }
    for (node, n) in nodes {
        let attached: Vec<_> = n.attached.iter().map(|(v, s)| (v, s.reported())).collect();
        out += &format!(
            "{node}: {attached:?} {:?} {:?} ring {}\n",
            n.devices.iter().collect::<Vec<_>>(),
            n.detach_requested.as_slice(),
            n.ring_pos
        );
    }
    out
}

/// Taking a node's listing in at once leaves exactly what setting each listed volume
/// Attached, one by one, leaves: over random states (records Attached, Uncertain and
/// withheld, detach requests, device paths) and random listings (volumes listed twice,
/// unsorted, with and without paths), onto a node with and without records.
/// The generations of every standing record, by (node, volume).
fn generations_of(a: &ActualState<T>) -> BTreeMap<(&'static str, &'static str), (u32, bool)> {
    a.nodes
        .iter()
        .flat_map(|on| {
            let n = &on.node;
            on.attached
                .iter()
                .map(|(v, s)| ((*n, *v), (s.generation(), s.reported())))
        })
        .collect()
}

#[test]
fn a_node_out_of_generations_renumbers_its_own_records_and_takes_a_new_epoch() {
    let mut a = ActualState::<T>::default();
    for (v, n) in [("v1", "n1"), ("v2", "n1"), ("v3", "n1"), ("v4", "n2")] {
        a.set_attached(&v, &n, None);
    }
    a.set_withheld(&"v2", &"n1", true);
    let max = ActualNode::<T>::MAX_GENERATION;
    a.set_generations(&"n1", max - 1);
    let epochs = (a.epoch_of(&"n1"), a.epoch_of(&"n2"));
    let reports = (a.report_generation(&"n1"), a.report_generation(&"n2"));
    // The last generation of 31 bits is still n1's to hand out.
    a.set_attached(&"v5", &"n1", None);
    let before = generations_of(&a);
    assert_eq!(before[&("n1", "v5")].0, max);
    assert_eq!(a.epoch_of(&"n1"), epochs.0, "not renumbered yet");
    // The next is not: n1's records are renumbered, 1 up, and n1 takes a new epoch.
    a.set_attached(&"v6", &"n1", None);
    let after = generations_of(&a);
    assert_eq!(after.len(), 6);
    let n1: Vec<u32> = ["v1", "v2", "v3", "v5", "v6"]
        .iter()
        .map(|v| after[&("n1", *v)].0)
        .collect();
    assert_eq!(n1, [1, 2, 3, 4, 5], "{after:?}");
    for (key, (_, reported)) in &before {
        assert_eq!(after[key].1, *reported, "{key:?} keeps its flag");
    }
    assert_ne!(a.epoch_of(&"n1"), epochs.0);
    // n2 is not touched: its generation, its epoch.
    assert_eq!(after[&("n2", "v4")], before[&("n2", "v4")]);
    assert_eq!(a.epoch_of(&"n2"), epochs.1);
    // Report generations are the status book's, and never come round again.
    assert!(a.report_generation(&"n1") > reports.0);
    assert_eq!(a.report_generation(&"n2"), reports.1);
    // The next record's generation is new too.
    a.set_attached(&"v7", &"n1", None);
    assert_eq!(generations_of(&a)[&("n1", "v7")].0, 6);
    assert_generations_fit(&a);
}

/// Every node's generations are distinct, and every one was handed out in its epoch (none
/// is above the counter, which would hand it out again).
fn assert_generations_fit(a: &ActualState<T>) {
    for n in a.nodes.iter() {
        let node = &n.node;
        let mut seen: Vec<u32> = n.attached.iter().map(|(_, s)| s.generation()).collect();
        assert!(
            seen.iter().all(|g| (1..=n.generations).contains(g)),
            "{node}: {seen:?} against the counter's {}",
            n.generations
        );
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), n.attached.len(), "{node}: a generation twice");
    }
}

#[test]
fn a_listing_taken_in_on_a_node_out_of_generations_is_numbered_in_one_epoch() {
    let mut a = ActualState::<T>::default();
    a.set_node("n1", NodeFacts::default());
    a.set_generations(&"n1", ActualNode::<T>::MAX_GENERATION - 1);
    let listed: Vec<ReportedVolume<T>> = ["v2", "v1", "v3", "v1"]
        .into_iter()
        .map(|volume| ReportedVolume {
            volume,
            device: None,
        })
        .collect();
    let epoch = a.epoch_of(&"n1");
    a.recover_reported(&"n1", &listed);
    assert_generations_fit(&a);
    assert_ne!(a.epoch_of(&"n1"), epoch, "renumbered before the listing");
}

#[test]
fn a_node_record_made_again_takes_a_new_epoch() {
    let mut a = ActualState::<T>::default();
    a.set_attached(&"v1", &"n1", None);
    let first = a.epoch_of(&"n1");
    assert_ne!(first, 0);
    a.set_detached(&"v1", &"n1", false);
    assert_eq!(a.epoch_of(&"n1"), 0, "no record, no epoch");
    a.set_attached(&"v1", &"n1", None);
    assert_ne!(a.epoch_of(&"n1"), first);
    assert_ne!(a.epoch_of(&"n1"), 0);
}

#[test]
fn recovering_a_listing_is_setting_each_listed_volume_attached() {
    let mut seed = 11u64;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for case in 0..2_000 {
        // The earlier state, drawn once as steps and built twice (`ActualState` is not
        // `Clone`).
        let steps: Vec<(u64, u32, u32, u64)> = (0..next(12))
            .map(|_| (next(4), next(8) as u32, next(3) as u32, next(5)))
            .collect();
        let build = || {
            let mut a: ActualState<U> = ActualState::default();
            for &(kind, v, n, x) in &steps {
                match kind {
                    0 => a.set_attached(&v, &n, (x % 2 == 0).then_some("/dev/x")),
                    1 => a.set_uncertain(&v, &n),
                    2 => a.set_withheld(&v, &n, true),
                    _ => {
                        a.request_detach(&v, &n, Duration::from_secs(x));
                    }
                }
            }
            a.take_report_changed();
            a
        };
        let node = next(3) as u32;
        let listed: Vec<ReportedVolume<U>> = (0..next(10))
            .map(|_| ReportedVolume {
                volume: next(8) as u32,
                device: match next(3) {
                    0 => Some("/dev/y".into()),
                    1 => Some("/dev/z".into()),
                    _ => None,
                },
            })
            .collect();
        let (mut one_by_one, mut at_once) = (build(), build());
        let generation = |a: &ActualState<U>| a.report_generation(&node);
        let before = generation(&at_once);
        let records = |a: &ActualState<U>| -> BTreeMap<u32, u32> {
            let n = a.nodes.get(&node);
            n.into_iter()
                .flat_map(|n| n.attached.iter().map(|(v, s)| (*v, s.generation())))
                .collect()
        };
        let (earlier_one, earlier_once) = (records(&one_by_one), records(&at_once));
        for r in &listed {
            one_by_one.set_attached(&r.volume, &node, r.device.as_deref());
        }
        at_once.recover_reported(&node, &listed);
        let context = format!("case {case}: {steps:?}, then {listed:?} on {node}");
        assert_eq!(snapshot(&at_once), snapshot(&one_by_one), "{context}");
        // The same records changed (or are new), each with a generation of its own.
        let changed = |earlier: &BTreeMap<u32, u32>, a: &ActualState<U>| -> Vec<u32> {
            let now = records(a);
            now.iter()
                .filter(|(v, g)| earlier.get(v) != Some(g))
                .map(|(v, _)| *v)
                .collect()
        };
        assert_eq!(
            changed(&earlier_once, &at_once),
            changed(&earlier_one, &one_by_one),
            "{context}"
        );
        assert_eq!(
            at_once.take_report_changed(),
            one_by_one.take_report_changed(),
            "{context}"
        );
        assert_eq!(
            generation(&at_once) != before,
            generation(&one_by_one) != before,
            "the report generation moves exactly when it did: {context}"
        );
    }
}

#[test]
fn report_follows_attached_and_withheld() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v1", &"n1", Some("/dev/a"));
    a.set_attached(&"v0", &"n1", None);
    assert_eq!(
        a.take_report_changed().into_iter().collect::<Vec<_>>(),
        vec!["n1"]
    );
    let names = a.report(&"n1").volumes().to_vec();
    assert_eq!(names, vec!["v0", "v1"]);
    a.set_withheld(&"v1", &"n1", true);
    assert_eq!(a.take_report_changed().len(), 1);
    assert_eq!(a.report(&"n1").len(), 1);
    a.set_withheld(&"v1", &"n1", true);
    assert!(a.take_report_changed().is_empty(), "no change, no write");
    a.set_uncertain(&"v0", &"n1");
    assert!(a.report(&"n1").is_empty());
    a.set_detached(&"v0", &"n1", false);
    a.set_detached(&"v1", &"n1", false);
    assert!(a.is_empty());
    assert_eq!(
        a.nodes().count(),
        0,
        "an unknown node with nothing attached is forgotten"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: proptest::test_runner::RngSeed::Fixed(23),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The report copies the node's reported attachments in runs between the ones it
    /// leaves out: whichever are left out (none, the first, the last, several in a row,
    /// every one), it lists exactly the others, in order, with their paths.
    #[test]
    fn a_report_lists_exactly_what_is_not_withheld_or_uncertain(
        left_out in proptest::collection::vec(0u8..3, 0..12)
    ) {
        let mut a: ActualState<U> = ActualState::default();
        let mut expected = Vec::new();
        for (volume, how) in (0u32..).zip(&left_out) {
            let path = format!("/dev/p{volume}");
            a.set_attached(&volume, &7, (volume % 2 == 0).then_some(path.as_str()));
            match how {
                0 => expected.push((volume, (volume % 2 == 0).then_some(path))),
                1 => a.set_withheld(&volume, &7, true),
                _ => a.set_uncertain(&volume, &7),
            }
        }
        let report = a.report(&7);
        let listed: Vec<(u32, Option<String>)> = report
            .iter()
            .map(|(volume, path)| (*volume, path.map(str::to_string)))
            .collect();
        proptest::prop_assert_eq!(listed, expected);
    }
}

#[test]
fn node_facts_report_only_affected_volumes() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v1", &"n1", None);
    a.set_attached(&"v2", &"n1", None);
    let first = a.set_node(
        "n1",
        NodeFacts {
            in_use: Some(vec!["v1"]),
            ..NodeFacts::default()
        },
    );
    assert_eq!(first, vec!["v1", "v2"], "first report touches all");
    let second = a.set_node(
        "n1",
        NodeFacts {
            in_use: Some(vec!["v2", "v1"]),
            ..NodeFacts::default()
        },
    );
    assert_eq!(second, vec!["v2"]);
    let fenced = a.set_node(
        "n1",
        NodeFacts {
            fenced: true,
            in_use: Some(vec!["v1", "v2"]),
            attach_limit: None,
            driver_limits: Vec::new(),
            healthy: false,
        },
    );
    assert_eq!(fenced, vec!["v1", "v2"]);
    assert_eq!(a.node(&"n1").unwrap().reports_in_use(&"v1"), Some(true));
    assert_eq!(a.remove_node(&"n1"), vec!["v1", "v2"]);
    assert!(!a.node_present(&"n1"));
    assert_eq!(a.node(&"n1").unwrap().reports_in_use(&"v1"), None);
}

#[test]
fn in_use_unrecorded_is_what_the_report_adds_to_the_records() {
    let mut a: ActualState<T> = ActualState::default();
    let unrecorded = |a: &ActualState<T>| -> Vec<&str> {
        a.node(&"n1")
            .unwrap()
            .in_use_unrecorded()
            .copied()
            .collect()
    };
    a.set_node("n1", NodeFacts::default());
    assert!(unrecorded(&a).is_empty(), "no report, nothing");
    for v in ["a", "c", "e"] {
        a.set_attached(&v, &"n1", None);
    }
    a.set_uncertain(&"g", &"n1");
    a.set_node(
        "n1",
        NodeFacts {
            in_use: Some(vec!["f", "b", "a", "g", "d", "c", "h"]),
            ..NodeFacts::default()
        },
    );
    assert_eq!(unrecorded(&a), vec!["b", "d", "f", "h"]);
    a.set_node(
        "n1",
        NodeFacts {
            in_use: Some(vec!["e", "a"]),
            ..NodeFacts::default()
        },
    );
    assert!(unrecorded(&a).is_empty());
}

/// The usual detach withholds the volume, writes the node's status, and then detaches: the
/// detach leaves the report as written, so its generation stays and the status book
/// compares nothing again. Any other detach changes the report, and its generation.
#[test]
fn a_withheld_volumes_detach_keeps_the_report_and_its_generation() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v1", &"n1", Some("/dev/a"));
    a.set_attached(&"v2", &"n1", Some("/dev/b"));
    a.set_withheld(&"v1", &"n1", true);
    let (report, generation) = (a.report(&"n1"), a.report_generation(&"n1"));
    assert!(a.report_matches(&"n1", &report));
    a.set_detached(&"v1", &"n1", false);
    assert_eq!(a.report(&"n1"), report);
    assert_eq!(a.report_generation(&"n1"), generation);
    a.set_detached(&"v2", &"n1", false);
    assert_ne!(a.report_generation(&"n1"), generation);
    assert!(!a.report_matches(&"n1", &report));
    assert!(a.report_matches(&"n1", &a.report(&"n1")));
}

/// A list is the node's report only with the same volumes and the same paths.
#[test]
fn a_report_matches_only_with_its_volumes_and_paths() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v1", &"n1", Some("/dev/a"));
    a.set_attached(&"v2", &"n1", None);
    let entry = |volume, device: Option<&str>| ReportedVolume {
        volume,
        device: device.map(Into::into),
    };
    let listed = |entries: Vec<ReportedVolume<T>>| ReportedVolumes::from(entries);
    assert!(a.report_matches(
        &"n1",
        &listed(vec![entry("v1", Some("/dev/a")), entry("v2", None)])
    ));
    for other in [
        vec![entry("v1", Some("/dev/x")), entry("v2", None)],
        vec![entry("v1", None), entry("v2", None)],
        vec![entry("v1", Some("/dev/a"))],
        vec![entry("v1", Some("/dev/a")), entry("v3", None)],
        vec![
            entry("v1", Some("/dev/a")),
            entry("v2", None),
            entry("v3", None),
        ],
    ] {
        assert!(
            !a.report_matches(&"n1", &listed(other.clone())),
            "{other:?}"
        );
    }
    assert!(!a.report_matches(&"n2", &listed(vec![entry("v1", None)])));
    assert!(a.report_matches(&"n2", &ReportedVolumes::default()));
}

#[test]
fn report_reads_the_node_index_with_devices() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v1", &"n1", Some("/dev/b"));
    a.set_attached(&"v0", &"n1", None);
    a.set_uncertain(&"v2", &"n1");
    a.set_attached(&"v3", &"n1", Some("/dev/d"));
    let report = |a: &ActualState<T>| -> Vec<(&str, Option<String>)> {
        a.report(&"n1")
            .iter()
            .map(|(v, d)| (*v, d.map(str::to_string)))
            .collect()
    };
    assert_eq!(
        report(&a),
        vec![
            ("v0", None),
            ("v1", Some("/dev/b".into())),
            ("v3", Some("/dev/d".into()))
        ]
    );
    a.set_withheld(&"v1", &"n1", true);
    assert_eq!(
        report(&a),
        vec![("v0", None), ("v3", Some("/dev/d".into()))]
    );
    a.set_attached(&"v1", &"n1", Some("/dev/e"));
    assert_eq!(
        a.report(&"n1").to_vec()[1].device.as_deref(),
        Some("/dev/e")
    );
    a.set_attached(&"v2", &"n1", None);
    assert_eq!(a.report(&"n1").len(), 4, "confirmed: reported");
    a.set_detached(&"v3", &"n1", false);
    assert_eq!(
        a.device(&"v3", &"n1"),
        None,
        "the device goes with the record"
    );
    assert_eq!(a.device(&"v1", &"n1"), Some("/dev/e"));
    a.set_uncertain(&"v1", &"n1");
    assert_eq!(report(&a), vec![("v0", None), ("v2", None)]);
}

#[test]
fn a_detach_request_lives_as_long_as_the_attachment() {
    let mut a: ActualState<T> = ActualState::default();
    let (t1, t2) = (Duration::from_secs(1), Duration::from_secs(2));
    assert_eq!(a.request_detach(&"v", &"n", t1), t1);
    assert_eq!(
        a.detach_requested_at(&"v", &"n"),
        None,
        "no record, nothing kept"
    );
    a.set_attached(&"v", &"n", None);
    assert_eq!(a.request_detach(&"v", &"n", t1), t1);
    assert_eq!(
        a.request_detach(&"v", &"n", t2),
        t1,
        "the first request counts"
    );
    assert_eq!(a.detach_requested_at(&"v", &"n"), Some(t1));
    a.cancel_detach_request(&"v", &"n");
    assert_eq!(a.request_detach(&"v", &"n", t2), t2);
    a.remove_node(&"n");
    assert_eq!(
        a.detach_requested_at(&"v", &"n"),
        Some(t2),
        "kept until detached"
    );
    a.set_detached(&"v", &"n", false);
    a.set_attached(&"v", &"n", None);
    assert_eq!(a.detach_requested_at(&"v", &"n"), None);
}

#[test]
fn an_emptied_list_of_detach_requests_serves_the_next_node() {
    let mut a: ActualState<T> = ActualState::default();
    let (t1, t2) = (Duration::from_secs(1), Duration::from_secs(2));
    for (v, n) in [("v1", "n1"), ("v2", "n1"), ("v3", "n2")] {
        a.set_attached(&v, &n, None);
    }
    a.request_detach(&"v1", &"n1", t1);
    a.request_detach(&"v2", &"n1", t1);
    a.cancel_detach_request(&"v1", &"n1");
    assert_eq!(a.request_spares.len(), 0, "a list still in use is kept");
    a.set_detached(&"v2", &"n1", false);
    assert_eq!(a.request_spares.len(), 1, "the emptied list is kept");
    a.request_detach(&"v3", &"n2", t2);
    assert_eq!(a.request_spares.len(), 0, "and serves the next node");
    let requests: Vec<_> = a.detach_requests().collect();
    assert_eq!(requests, vec![(&"v3", &"n2", t2)], "starting empty");
    assert_eq!(a.detach_requested_at(&"v1", &"n1"), None);
    // A list grown past MAX_SPARE_REQUESTS is not kept.
    let many: Vec<&'static str> = (0..=MAX_SPARE_REQUESTS)
        .map(|i| &*Box::leak(format!("w{i}").into_boxed_str()))
        .collect();
    for v in &many {
        a.set_attached(v, &"n3", None);
        a.request_detach(v, &"n3", t1);
    }
    for v in &many {
        a.set_detached(v, &"n3", false);
    }
    assert_eq!(a.request_spares.len(), 0, "a large emptied list is dropped");
}

#[test]
fn an_attachment_record_stays_small() {
    // One per attachment in the cluster: 150,000 of them at Kubernetes' limits.
    // Eight bytes with `u32` ids, and four for its detach's progress.
    type Small = Ids<u32, u32, u32>;
    assert!(std::mem::size_of::<Attachment<Small>>() <= 12);
}

#[test]
fn multi_node_volume_has_one_record_per_node() {
    let mut a: ActualState<T> = ActualState::default();
    a.set_attached(&"v", &"n1", None);
    a.set_uncertain(&"v", &"n2");
    assert_eq!(a.attachments(&"v").len(), 2);
    assert_eq!(a.len(), 2);
    a.set_attached(&"v", &"n2", None);
    assert_eq!(a.state(&"v", &"n2"), AttachState::Attached);
    assert_eq!(a.len(), 2);
}

#[test]
fn a_node_whose_report_changed_has_a_new_generation_and_the_ring_holds_attached_nodes() {
    // Every kind of change, in a fixed pseudo-random order over two nodes and three
    // volumes; after each, a node whose report differs must have a new generation, or the
    // status book would skip a write it needs (122413 again).
    let mut a: ActualState<T> = ActualState::default();
    let (nodes, volumes) = (["n1", "n2"], ["v1", "v2", "v3"]);
    let devices = [None, Some("/dev/a"), Some("/dev/b")];
    let seen = |a: &ActualState<T>| nodes.map(|n| (a.report(&n), a.report_generation(&n)));
    let mut before = seen(&a);
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut changes = 0;
    for _ in 0..5_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let (v, n) = (
            volumes[(state % 3) as usize],
            nodes[((state >> 8) % 2) as usize],
        );
        match (state >> 16) % 8 {
            0 | 1 => a.set_attached(&v, &n, devices[((state >> 24) % 3) as usize]),
            7 => {
                // The store's listing at a restart: a volume or two, maybe one twice.
                let listed: Vec<ReportedVolume<T>> = (0..(state >> 24) % 3 + 1)
                    .map(|i| ReportedVolume {
                        volume: volumes[((state >> (28 + i)) % 3) as usize],
                        device: None,
                    })
                    .collect();
                a.recover_reported(&n, &listed);
            }
            2 => a.set_uncertain(&v, &n),
            3 => {
                a.set_detached(&v, &n, (state >> 24) % 2 == 0);
            }
            4 => a.set_withheld(&v, &n, (state >> 24) % 2 == 0),
            5 => {
                a.remove_node(&n);
            }
            _ => {
                a.set_node(
                    n,
                    NodeFacts {
                        healthy: true,
                        fenced: false,
                        in_use: None,
                        attach_limit: None,
                        driver_limits: Vec::new(),
                    },
                );
            }
        }
        let after = seen(&a);
        for ((b, now), n) in before.iter().zip(&after).zip(nodes) {
            if b.0 != now.0 {
                changes += 1;
                assert_ne!(b.1, now.1, "report changed from {:?} to {:?}", b.0, now.0);
            }
            // The compare a status write rests on: it says "the same" exactly when the
            // lists are (its count of reported volumes kept in line by every change).
            assert_eq!(a.report_matches(&n, &b.0), b.0 == now.0, "{n}: {:?}", now.0);
            assert!(a.report_matches(&n, &now.0));
        }
        before = after;
        // The verify ring holds exactly the nodes with attachments, at their positions.
        let attached: Vec<_> = nodes
            .iter()
            .filter(|n| a.volumes_on(n).next().is_some())
            .collect();
        assert_eq!(a.ring.len(), attached.len(), "ring {:?}", a.ring);
        for n in attached {
            let pos = a.nodes.get(n).expect("a node of the ring").ring_pos;
            assert_ne!(pos, OUT_OF_RING, "in the ring");
            let pos = pos as usize;
            assert_eq!(a.ring.at(pos), Some(n));
        }
    }
    assert!(changes > 1_000, "the walk changed reports {changes} times");
}

#[test]
fn a_report_of_what_the_node_holds_is_merged_without_ordering_a_volume() {
    use crate::core::tables::counted::{Counted, orderings};
    type C = Ids<&'static str, Counted, &'static str>;
    let mut a: ActualState<C> = ActualState::default();
    for v in [1, 3, 5, 7] {
        a.set_attached(&Counted(v), &"n1", None);
    }
    let report = |a: &mut ActualState<C>, in_use: &[u32]| {
        let in_use = in_use.iter().copied().map(Counted).collect();
        a.set_node(
            "n1",
            NodeFacts {
                in_use: Some(in_use),
                ..NodeFacts::default()
            },
        );
        orderings();
        let unrecorded: Vec<u32> = a
            .node(&"n1")
            .unwrap()
            .in_use_unrecorded()
            .map(|v| v.0)
            .collect();
        (unrecorded, orderings())
    };
    assert_eq!(
        report(&mut a, &[1, 3, 5, 7]),
        (vec![], 0),
        "equal lists: equality alone"
    );
    let (unrecorded, _) = report(&mut a, &[0, 1, 2, 5, 8]);
    assert_eq!(unrecorded, vec![0, 2, 8]);
    assert_eq!(report(&mut a, &[3, 7]).0, Vec::<u32>::new());
}
