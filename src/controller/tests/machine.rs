//! Fencing without a human through the driver: the machine check is a backend call like the
//! others, with its deadline, its panic contained, its metrics and events.

use super::*;
use crate::config::MachineFencing;
use crate::core::calls::backend::MachineState;

fn fencing() -> Config {
    Config {
        machine_fencing: Some(MachineFencing::default()),
        ..Config::default()
    }
}

/// node-a's agent is gone (unhealthy), still reporting vol-1 in use, in the store as in the
/// watch: the fresh read before a detach finds it so.
fn dead_a_in_store(store: &mut MockNodeStatusStore<D>) {
    store.expect_read().returning(|_| {
        Ok(NodeStatus {
            in_use: Some(vec![V1]),
            healthy: Some(false),
            ..empty_status(0)
        })
    });
}

/// After vol-1 is attached to node-a: node-a turns unhealthy with vol-1 in use, w1 is force
/// deleted and w2 on node-b wants vol-1.
async fn kill_a_and_move(h: &Harness) {
    sleep(secs(1)).await;
    h.handle
        .send(Input::NodeUpdated {
            node: A,
            facts: NodeFacts {
                healthy: false,
                fenced: false,
                in_use: Some(vec![V1]),
                attach_limit: None,
                driver_limits: Vec::new(),
            },
        })
        .await
        .unwrap();
    h.handle.workload_removed("w1").await.unwrap();
    h.handle
        .send(Input::WorkloadScheduled {
            workload: "w2",
            node: B,
            volumes: vec![V1],
        })
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_off_answers_detach_forced_powered_off_and_the_volume_moves() {
    let epoch = Instant::now();
    let mut backend = backend();
    verify_all(&mut backend);
    let attaches = accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    let checks = Log::default();
    let c = checks.clone();
    backend.expect_machine_state().returning(move |n| {
        c.push(epoch, *n);
        Ok(MachineState::Off)
    });
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    dead_a_in_store(&mut store);
    let h = Harness::start(fencing(), backend, store, world());

    kill_a_and_move(&h).await;
    sleep(secs(4)).await;
    assert!(detaches.items().is_empty(), "one answer fences nothing");
    sleep(secs(3)).await;
    assert_eq!(detaches.items(), vec![(V1, A)]);
    assert_eq!(attaches.items(), vec![(V1, A), (V1, B)]);
    let times = checks.times();
    assert!(
        times.len() >= 2 && times[1] - times[0] >= secs(5),
        "{times:?}"
    );
    let reasons = h.events.reasons();
    assert!(reasons.contains(&"NodePoweredOff"), "{reasons:?}");
    assert!(reasons.contains(&"ForcedDetachVolume"), "{reasons:?}");
    let m = h.handle.metrics();
    assert_eq!(m.forced_detaches(ForceReason::PoweredOff), 1);
    assert!(m.check_machine.succeeded >= 2);
    assert_eq!(m.check_machine.failed, 0);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_machine_check_times_out_and_fences_nothing() {
    let epoch = Instant::now();
    let mut inner = backend();
    verify_all(&mut inner);
    let attaches = accept_attaches(&mut inner, epoch);
    let detaches = accept_detaches(&mut inner, epoch);
    let backend = HangingBackend::new(inner, &[CallKind::MachineState]);
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    dead_a_in_store(&mut store);
    let h = Harness::start(fencing(), backend, store, world());

    kill_a_and_move(&h).await;
    sleep(secs(29)).await;
    assert_eq!(h.handle.metrics().timeouts.machine_state, 0);
    sleep(secs(2)).await;
    let m = h.handle.metrics();
    assert_eq!(m.timeouts.machine_state, 1);
    assert_eq!(m.check_machine.failed, 1);
    let events = h.events.events();
    assert!(
        events.contains(&timed_out(CallKind::MachineState, Some(A), None, secs(30))),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::MachineCheckFailed { node: A, message } if message.contains("no answer within 30s")
        )),
        "{events:?}"
    );
    assert!(detaches.items().is_empty());
    assert_eq!(attaches.items(), vec![(V1, A)]);
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_machine_check_is_contained_and_fences_nothing() {
    let epoch = Instant::now();
    let mut backend = backend();
    verify_all(&mut backend);
    accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    backend
        .expect_machine_state()
        .returning(|_| panic!("provider client bug"));
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    dead_a_in_store(&mut store);
    let h = Harness::start(fencing(), backend, store, world());

    kill_a_and_move(&h).await;
    sleep(secs(20)).await;
    let m = h.handle.metrics();
    assert!(m.check_machine.failed >= 3, "{m:?}");
    assert_eq!(m.check_machine.succeeded, 0);
    let events = h.events.events();
    let failed: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::MachineCheckFailed { .. }))
        .collect();
    assert_eq!(failed.len(), 1, "once per run of failures: {events:?}");
    assert!(failed[0].to_string().contains("panicked"), "{failed:?}");
    assert!(detaches.items().is_empty());
    h.finish().await;
}

#[tokio::test(start_paused = true)]
async fn off_by_default_the_backend_is_never_asked() {
    let epoch = Instant::now();
    let mut backend = backend();
    verify_all(&mut backend);
    accept_attaches(&mut backend, epoch);
    let detaches = accept_detaches(&mut backend, epoch);
    backend.expect_machine_state().never();
    let mut store = store(&[A, B]);
    accept_writes(&mut store, epoch);
    dead_a_in_store(&mut store);
    let h = Harness::start(Config::default(), backend, store, world());

    kill_a_and_move(&h).await;
    sleep(secs(60)).await;
    assert!(detaches.items().is_empty());
    assert_eq!(h.handle.metrics().check_machine.total(), 0);
    h.finish().await;
}
