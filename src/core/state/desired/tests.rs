use super::few::Few;
use super::*;
use crate::core::calls::volume::VolumeSpec;
use crate::domain::Ids;

type T = Ids<&'static str, &'static str, &'static str>;

fn dsw() -> DesiredState<T> {
    let mut d = DesiredState::default();
    d.add_node("n1");
    d.add_node("n2");
    d.set_volume("v1", VolumeSpec::single_node(()));
    d.set_volume("v2", VolumeSpec::multi_node(()));
    d
}

fn missing(d: &DesiredState<T>, w: &'static str) -> Option<Vec<Missing<T>>> {
    d.pending(&w).map(|p| p.missing)
}

#[test]
fn a_workload_naming_what_is_not_known_waits_for_it() {
    let mut d = dsw();
    assert_eq!(d.add_workload("p", "n9", &["v1"]), Ok(vec![]));
    assert_eq!(d.add_workload("q", "n1", &["v1", "v9"]), Ok(vec![]));
    assert!(d.is_empty(), "a waiting workload desires nothing");
    assert!(d.placement(&"p").is_none());
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n9")]));
    assert_eq!(missing(&d, "q"), Some(vec![Missing::Volume("v9")]));
    assert_eq!(d.pending_len(), 2);
    // The last missing name placed it; volumes change as they do for a placement.
    assert_eq!(d.add_node("n9"), vec!["v1"]);
    assert_eq!(d.placement(&"p"), Some((&"n9", &["v1"][..])));
    assert_eq!(
        d.set_volume("v9", VolumeSpec::single_node(())),
        vec!["v1", "v9"]
    );
    assert_eq!(d.placement(&"q"), Some((&"n1", &["v1", "v9"][..])));
    assert_eq!(d.pending_len(), 0);
    assert_eq!(d.len(), 3);
    // A known node again is no arrival: nothing changes.
    assert!(d.add_node("n9").is_empty());
}

#[test]
fn a_workload_waiting_for_several_names_is_placed_by_the_last() {
    let mut d = dsw();
    d.add_workload("p", "n7", &["v7", "v8", "v1"]).unwrap();
    assert_eq!(
        missing(&d, "p"),
        Some(vec![
            Missing::Node("n7"),
            Missing::Volume("v7"),
            Missing::Volume("v8")
        ])
    );
    assert!(d.set_volume("v8", VolumeSpec::single_node(())).len() == 1);
    assert!(d.add_node("n7").is_empty());
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v7")]));
    // One it needed and had is removed meanwhile: it waits for that again.
    d.unregister_volume(&"v8");
    assert_eq!(d.set_volume("v7", VolumeSpec::single_node(())), vec!["v7"]);
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v8")]));
    assert_eq!(
        d.set_volume("v8", VolumeSpec::single_node(())),
        vec!["v1", "v7", "v8"]
    );
    assert!(d.is_desired(&"v1", &"n7"));
    assert_eq!(d.pending_len(), 0);
}

/// A burst of placed workloads, mostly removed again, gives its slots back at the next
/// trim; the nodes' lists are renumbered with them, so the rest stay listed on their nodes
/// and leave with them. A node's removal moves the last node's entry into its place, and
/// that node's workloads are renumbered too.
#[test]
fn a_trim_after_a_burst_gives_back_its_slots_and_keeps_what_stays_placed() {
    let mut d: DesiredState<Ids<u32, u32, u32>> = DesiredState::default();
    for node in 0..3 {
        d.add_node(node);
    }
    for w in 0..4_000 {
        d.set_volume(w, VolumeSpec::single_node(()));
        d.add_workload(w, w % 3, &[w]).unwrap();
    }
    for w in (0..4_000).filter(|w| w % 10 != 0) {
        d.remove_workload(&w);
    }
    assert_eq!(d.workloads.holes(), 3_600);
    d.trim();
    assert_eq!(d.workloads.holes(), 0, "the slots were given back");
    let placed_on = |d: &DesiredState<Ids<u32, u32, u32>>, node: u32| {
        let mut on: Vec<u32> = d.volumes_placed_on(&node).copied().collect();
        on.sort_unstable();
        on
    };
    for node in 0..3 {
        let expected: Vec<u32> = (0..4_000)
            .filter(|w| w % 10 == 0 && w % 3 == node)
            .collect();
        assert_eq!(placed_on(&d, node), expected);
    }
    // A workload removed after the renumbering leaves its own node's list, no other.
    d.remove_workload(&0);
    assert_eq!(placed_on(&d, 0).len(), 133);
    assert!(!placed_on(&d, 0).contains(&0));
    assert_eq!(placed_on(&d, 2).len(), 133);
    // A node's removal sends exactly its workloads back to waiting.
    d.remove_node(&1);
    assert_eq!(d.pending_len(), 133);
    assert_eq!(d.len(), 266);
    // The last node's entry took the removed one's place: its workloads still say where
    // they run, and leave its list, not another's.
    assert_eq!(d.placement(&20), Some((&2, &[20][..])));
    assert_eq!(d.placement(&30), Some((&0, &[30][..])));
    d.remove_workload(&20);
    assert_eq!(placed_on(&d, 2).len(), 132);
    assert_eq!(placed_on(&d, 0).len(), 133);
    assert_eq!(d.add_workload(30, 2, &[30]), Ok(vec![30]));
    assert_eq!(placed_on(&d, 2).len(), 133);
    assert_eq!(placed_on(&d, 0).len(), 132);
    assert!(d.is_desired(&30, &2) && !d.is_desired(&30, &0));
}

#[test]
fn adding_twice_is_idempotent_and_last_workload_drops_the_volume() {
    let mut d = dsw();
    assert_eq!(d.add_workload("p1", "n1", &["v1"]).unwrap(), vec!["v1"]);
    assert!(d.add_workload("p1", "n1", &["v1"]).unwrap().is_empty());
    d.add_workload("p2", "n1", &["v1"]).unwrap();
    assert_eq!(d.len(), 1);
    d.remove_workload(&"p1");
    assert!(d.is_desired(&"v1", &"n1"), "p2 still needs it");
    assert_eq!(d.remove_workload(&"p2"), vec!["v1"]);
    assert!(!d.is_desired(&"v1", &"n1"));
    assert_eq!(d.len(), 0);
    // A replayed removal is a no-op.
    assert!(d.remove_workload(&"p2").is_empty());
}

#[test]
fn moving_a_workload_changes_old_and_new_node() {
    let mut d = dsw();
    d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
    let changed = d.add_workload("p", "n2", &["v2"]).unwrap();
    assert_eq!(changed, vec!["v1", "v2"]);
    assert!(!d.is_desired(&"v1", &"n1"));
    assert!(!d.is_desired(&"v2", &"n1"));
    assert!(d.is_desired(&"v2", &"n2"));
    assert_eq!(d.placement(&"p"), Some((&"n2", &["v2"][..])));
    // Moved to a node not known yet: its old volumes go, and it waits.
    assert_eq!(d.add_workload("p", "n9", &["v2"]).unwrap(), vec!["v2"]);
    assert!(d.is_empty());
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n9")]));
    // And back to a known one: placed again, no longer waiting.
    assert_eq!(d.add_workload("p", "n1", &["v2"]).unwrap(), vec!["v2"]);
    assert_eq!(d.pending_len(), 0);
    assert!(d.is_desired(&"v2", &"n1"));
}

#[test]
fn a_spec_outlives_the_desire_and_counts_follow_the_pairs() {
    let mut d = dsw();
    d.add_workload("a", "n1", &["v2"]).unwrap();
    d.add_workload("b", "n2", &["v2", "v1"]).unwrap();
    assert_eq!((d.len(), d.is_empty()), (3, false));
    d.remove_workload(&"b");
    d.remove_workload(&"a");
    assert_eq!((d.len(), d.is_empty()), (0, true));
    assert_eq!(d.volumes_to_attach().count(), 0);
    assert_eq!(d.wanted(&"v2").count(), 0);
    assert!(
        d.set_volume("v1", VolumeSpec::single_node(())).is_empty(),
        "still registered, unchanged"
    );
    assert_eq!(
        d.set_volume("v1", VolumeSpec::multi_node(())),
        vec!["v1"],
        "changed"
    );
    d.add_workload("c", "n1", &["v1"]).unwrap();
    assert!(d.is_desired(&"v1", &"n1"));
}

#[test]
fn a_spec_found_at_a_position_is_found_again_after_entries_move() {
    let mut d = dsw();
    d.set_volume("v3", VolumeSpec::multi_node(()));
    let (at, (spec, _)) = d.spec_and_wanted(&"v3").unwrap();
    assert_eq!(spec.access, crate::core::calls::volume::Access::MultiNode);
    assert_eq!(
        d.spec_at(at, &"v3").map(|s| s.access),
        Some(crate::core::calls::volume::Access::MultiNode)
    );
    // v1 goes: the last entry (v3) moves into its place.
    d.unregister_volume(&"v1");
    d.forget_volume(&"v1");
    assert!(d.spec(&"v1").is_none());
    let (moved, _) = d.spec_and_wanted(&"v3").unwrap();
    assert_ne!(moved, at, "the entry moved");
    assert_eq!(
        d.spec_at(at, &"v3").map(|s| s.access),
        Some(crate::core::calls::volume::Access::MultiNode)
    );
    assert_eq!(
        d.spec_at(moved, &"v3").map(|s| s.access),
        Some(crate::core::calls::volume::Access::MultiNode)
    );
    assert!(
        d.spec_at(at, &"v9").is_none(),
        "an unknown volume has no spec anywhere"
    );
}

#[test]
fn few_reads_as_a_slice_through_inserts_and_removes() {
    let mut few = Few::One(2);
    few.insert(0, 1);
    few.insert(2, 3);
    assert_eq!(&*few, &[1, 2, 3]);
    assert_eq!(few.remove(1), 2);
    assert_eq!(few.remove(0), 1);
    assert!(matches!(few, Few::One(3)), "back to one item, no box");
    assert!(Few::<u8>::from_vec(vec![]).is_empty());
    // The sizes the memory budget counts on, with u32 ids.
    type Small = Ids<u32, u32, u32>;
    assert_eq!(std::mem::size_of::<Few<u32>>(), 16);
    assert!(std::mem::size_of::<Option<Few<WantedOn<Small>>>>() <= 24);
    // An entry carries its key in what would be padding (src/dense_table.rs).
    assert_eq!(std::mem::size_of::<VolumeEntry<Small>>(), 32);
    assert_eq!(std::mem::size_of::<Placed<Small>>(), 24);
}

#[test]
fn many_workloads_and_nodes_share_a_volume() {
    let mut d = dsw();
    for (w, n) in [("a", "n1"), ("b", "n1"), ("c", "n2"), ("d", "n1")] {
        d.add_workload(w, n, &["v2"]).unwrap();
    }
    let wanted = |d: &DesiredState<T>| -> Vec<(&str, Vec<&str>)> {
        d.wanted(&"v2").map(|(n, w)| (*n, w.to_vec())).collect()
    };
    assert_eq!(
        wanted(&d),
        vec![("n1", vec!["a", "b", "d"]), ("n2", vec!["c"])]
    );
    d.remove_workload(&"b");
    d.remove_workload(&"c");
    assert_eq!(wanted(&d), vec![("n1", vec!["a", "d"])]);
    assert_eq!(d.len(), 1);
    d.add_workload("a", "n2", &["v2", "v1", "v2"]).unwrap();
    assert_eq!(d.placement(&"a"), Some((&"n2", &["v1", "v2"][..])));
    assert_eq!(wanted(&d), vec![("n1", vec!["d"]), ("n2", vec!["a"])]);
    assert_eq!(d.len(), 3);
}

#[test]
fn a_removed_node_sends_its_workloads_back_to_waiting() {
    let mut d = dsw();
    d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
    d.add_workload("q", "n1", &[]).unwrap();
    d.add_workload("r", "n2", &["v2"]).unwrap();
    assert_eq!(d.remove_node(&"n1"), vec!["v1", "v2"]);
    assert!(!d.has_node(&"n1"));
    assert!(!d.is_desired(&"v1", &"n1") && !d.is_desired(&"v2", &"n1"));
    assert!(d.is_desired(&"v2", &"n2"), "other nodes keep theirs");
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Node("n1")]));
    assert_eq!(missing(&d, "q"), Some(vec![Missing::Node("n1")]));
    assert_eq!(d.len(), 1);
    // Removing it again, or a node never seen, is a no-op.
    assert!(d.remove_node(&"n1").is_empty());
    assert!(d.remove_node(&"n9").is_empty());
    // It comes back: its workloads are placed again.
    assert_eq!(d.add_node("n1"), vec!["v1", "v2"]);
    assert_eq!(d.placement(&"p"), Some((&"n1", &["v1", "v2"][..])));
    assert_eq!(d.placement(&"q"), Some((&"n1", &[][..])));
    assert_eq!((d.len(), d.pending_len()), (3, 0));
}

#[test]
fn an_unregistered_volume_keeps_its_spec_and_its_workloads_wait() {
    let mut d = dsw();
    d.add_workload("p", "n1", &["v1", "v2"]).unwrap();
    d.add_workload("q", "n2", &["v1"]).unwrap();
    assert_eq!(d.unregister_volume(&"v1"), vec!["v1", "v2"]);
    assert!(!d.is_registered(&"v1"));
    assert!(d.spec(&"v1").is_some(), "kept for the detach");
    assert!(d.is_empty());
    assert_eq!(missing(&d, "p"), Some(vec![Missing::Volume("v1")]));
    assert_eq!(missing(&d, "q"), Some(vec![Missing::Volume("v1")]));
    // A new workload naming it waits too, and a second removal is a no-op.
    d.add_workload("s", "n1", &["v1"]).unwrap();
    assert!(d.unregister_volume(&"v1").is_empty());
    assert!(d.unregister_volume(&"v9").is_empty());
    // Registered again, everything waiting for it is placed.
    d.set_volume("v1", VolumeSpec::single_node(()));
    assert_eq!(d.pending_len(), 0);
    assert_eq!(d.len(), 3);
    // Forgetting works only for an unregistered volume.
    d.forget_volume(&"v1");
    assert!(d.spec(&"v1").is_some());
    assert!(d.keep_spec("v8", VolumeSpec::single_node(())));
    assert!(
        !d.keep_spec("v1", VolumeSpec::multi_node(())),
        "known already"
    );
    assert!(!d.is_registered(&"v8"));
    d.add_workload("t", "n1", &["v8"]).unwrap();
    assert_eq!(missing(&d, "t"), Some(vec![Missing::Volume("v8")]));
    d.forget_volume(&"v8");
    assert!(d.spec(&"v8").is_none());
}

#[test]
fn waiting_is_bounded_for_new_waits_only() {
    let mut d = DesiredState::<T>::new(&Config {
        max_pending_workloads: 2,
        ..Config::default()
    });
    d.add_node("n1");
    d.set_volume("v1", VolumeSpec::single_node(()));
    d.add_workload("a", "n9", &[]).unwrap();
    d.add_workload("b", "n1", &["v1"]).unwrap();
    d.add_workload("c", "n1", &["v1"]).unwrap();
    d.add_workload("b2", "n8", &[]).unwrap();
    assert_eq!(
        d.add_workload("x", "n9", &["v9"]),
        Err(DesiredError::TooManyPending {
            workload: "x",
            missing: vec![Missing::Node("n9"), Missing::Volume("v9")],
            limit: 2
        })
    );
    // A placed workload that would start to wait is refused too, and keeps its place.
    assert!(d.add_workload("b", "n9", &["v1"]).is_err());
    assert_eq!(d.placement(&"b"), Some((&"n1", &["v1"][..])));
    // One that waits already may change what it waits for; one that needs no wait goes.
    d.add_workload("a", "n7", &["v7"]).unwrap();
    assert_eq!(
        missing(&d, "a"),
        Some(vec![Missing::Node("n7"), Missing::Volume("v7")])
    );
    d.add_workload("y", "n1", &[]).unwrap();
    // A removal is never refused: its workloads wait beyond the bound.
    d.unregister_volume(&"v1");
    assert_eq!(d.pending_len(), 4);
    assert!(d.add_workload("z", "n9", &[]).is_err());
    d.remove_workload(&"a");
    d.remove_workload(&"b2");
    d.remove_workload(&"b");
    assert_eq!(d.pending_len(), 1);
    d.add_workload("z", "n9", &[]).unwrap();
}

#[test]
fn a_wait_is_stamped_by_the_next_poll_and_reported_once() {
    let warn = Duration::from_secs(120);
    let mut d = dsw();
    let secs = Duration::from_secs;
    assert_eq!(d.next_pending_wake(), None);
    d.add_workload("p", "n9", &["v1"]).unwrap();
    assert_eq!(d.pending(&"p").unwrap().since, None);
    assert_eq!(d.next_pending_wake(), Some(Duration::ZERO), "to stamp it");
    assert!(d.poll_pending(secs(10)).is_empty());
    assert_eq!(d.pending(&"p").unwrap().since, Some(secs(10)));
    assert_eq!(d.next_pending_wake(), Some(secs(10) + warn));
    // Updated while it waits: the same wait.
    d.add_workload("p", "n9", &["v2"]).unwrap();
    assert!(d.poll_pending(secs(20)).is_empty());
    assert_eq!(d.pending(&"p").unwrap().since, Some(secs(10)));
    let due = d.poll_pending(secs(130));
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].workload, due[0].node, &due[0].missing, due[0].since),
        ("p", "n9", &vec![Missing::Node("n9")], Some(secs(10)))
    );
    assert_eq!(due[0].volumes, vec!["v2"]);
    assert_eq!(d.next_pending_wake(), None, "once per wait");
    assert!(d.poll_pending(secs(1000)).is_empty());
    // Placed, then waiting again: a new wait, reported on its own time.
    d.add_node("n9");
    d.remove_node(&"n9");
    assert_eq!(d.pending(&"p").unwrap().since, None);
    assert!(d.poll_pending(secs(2000)).is_empty());
    // A wait that ends before its warning is not reported.
    d.add_workload("q", "n8", &[]).unwrap();
    assert!(d.poll_pending(secs(2001)).is_empty());
    d.remove_workload(&"q");
    let due = d.poll_pending(secs(2000) + warn);
    assert_eq!(
        due.iter().map(|p| p.workload).collect::<Vec<_>>(),
        vec!["p"]
    );
    assert!(d.poll_pending(secs(5000)).is_empty());
    assert_eq!(d.next_pending_wake(), None);
}

#[test]
fn multi_attach_flag_lives_as_long_as_the_desire() {
    let mut d = dsw();
    d.add_workload("p", "n2", &["v1"]).unwrap();
    d.set_multi_attach_reported(&"v1", &"n2", true);
    assert!(d.wanted_on(&"v1")[0].multi_attach_reported);
    d.remove_workload(&"p");
    d.add_workload("p", "n2", &["v1"]).unwrap();
    assert!(
        !d.wanted_on(&"v1")[0].multi_attach_reported,
        "a new episode"
    );
}

#[test]
fn volumes_to_attach_lists_every_pair() {
    let mut d = dsw();
    d.add_workload("a", "n1", &["v2"]).unwrap();
    d.add_workload("b", "n2", &["v2", "v1"]).unwrap();
    let mut pairs: Vec<_> = d.volumes_to_attach().map(|(v, n)| (*v, *n)).collect();
    pairs.sort();
    assert_eq!(pairs, vec![("v1", "n2"), ("v2", "n1"), ("v2", "n2")]);
    let wanted: Vec<_> = d.wanted(&"v2").map(|(n, w)| (*n, w.to_vec())).collect();
    assert_eq!(wanted, vec![("n1", vec!["a"]), ("n2", vec!["b"])]);
}

#[test]
fn listings_name_what_is_known() {
    let mut d = dsw();
    d.keep_spec("v8", VolumeSpec::single_node(()));
    d.add_workload("a", "n1", &[]).unwrap();
    d.add_workload("b", "n9", &[]).unwrap();
    let sorted = |it: &mut dyn Iterator<Item = &&'static str>| {
        let mut v: Vec<&str> = it.copied().collect();
        v.sort();
        v
    };
    assert_eq!(sorted(&mut d.nodes()), vec!["n1", "n2"]);
    assert_eq!(sorted(&mut d.registered_volumes()), vec!["v1", "v2"]);
    assert_eq!(sorted(&mut d.workloads()), vec!["a", "b"]);
    assert_eq!(d.pending_workloads().count(), 1);
}
