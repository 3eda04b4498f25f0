//! The events on the wire: what [`KubeEventRecorder`] sends the API server, recorded by a
//! mock that accepts everything.
//!
//! Two promises: every distinct message reaches the API server (a repeat of the same message
//! is a PATCH of its event's count, a new message is an event of its own), and per object no
//! more goes out than client-go's event correlator allows: a burst of 25, then one every 5
//! minutes, and from the tenth distinct message of one reason on one object within 10
//! minutes, one aggregate event `(combined from similar events): <latest message>`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use attach_detach::controller::EventRecorder;
use attach_detach::core::Event;
use attach_detach_kube::{InformerState, Kube, KubeEventRecorder, REPORTING_CONTROLLER};
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::watcher::Event as Watch;
use serde_json::{Value, json};

/// One request the API server got.
#[derive(Clone, Debug)]
struct Sent {
    method: Method,
    path: String,
    body: Value,
}

/// A client whose every request is answered with its own body (201 to a POST, 200 to
/// anything else), and the log of what it sent.
fn recording() -> (Client, Arc<Mutex<Vec<Sent>>>) {
    recording_patches(200)
}

/// [`recording`], answering every PATCH with `patch_code` (404: the event expired).
fn recording_patches(patch_code: u16) -> (Client, Arc<Mutex<Vec<Sent>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("a body");
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let code = match parts.method {
                Method::POST => 201,
                Method::PATCH => patch_code,
                _ => 200,
            };
            let answer = if code == 404 {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404, "message": "not found"})
            } else {
                body.clone()
            };
            sink.lock().unwrap().push(Sent {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                body: body.clone(),
            });
            respond.send_response(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(service, "default"), log)
}

/// An index that knows node `n1`, PVs `vol-A` and `vol-B`, and pod `ns/p` using `vol-A` on
/// `n1`.
fn index() -> attach_detach_kube::ObjectIndex {
    let mut state = InformerState::new();
    let index = state.index();
    for (pv, claim) in [("vol-A", "claim-a"), ("vol-B", "claim-b")] {
        state.volumes(Watch::Apply(
            serde_json::from_value(json!({
                "metadata": {"name": pv},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "csi": {"driver": "d", "volumeHandle": pv},
                         "claimRef": {"namespace": "ns", "name": claim, "uid": format!("uid-{claim}")}}
            }))
            .unwrap(),
        ));
        state.claims(Watch::Apply(
            serde_json::from_value(json!({
                "metadata": {"name": claim, "namespace": "ns", "uid": format!("uid-{claim}")},
                "spec": {"volumeName": pv},
                "status": {"phase": "Bound"}
            }))
            .unwrap(),
        ));
    }
    state.nodes(Watch::Apply(
        serde_json::from_value(json!({"metadata": {
            "name": "n1", "uid": "uid-n1",
            "annotations": {attach_detach_kube::CONTROLLER_MANAGED_ANNOTATION: "true"},
        }}))
        .unwrap(),
    ));
    state.pods(Watch::Apply(
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
            "spec": {"nodeName": "n1", "containers": [],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "claim-a"}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap(),
    ));
    index
}

fn unique(pv: &str) -> String {
    format!("kubernetes.io/csi/d^{pv}")
}

fn waiting(pv: &str) -> Event<Kube> {
    Event::WaitingForUnmount {
        volume: unique(pv),
        node: "n1".into(),
        reason: "the node reports it in use".into(),
    }
}

fn attach_failed(error: &str) -> Event<Kube> {
    Event::AttachFailed {
        volume: unique("vol-A"),
        node: "n1".into(),
        message: error.into(),
    }
}

/// Records `events` and waits until the publisher sent what it will.
async fn record(recorder: &KubeEventRecorder, events: &[Event<Kube>]) {
    for event in events {
        recorder.record(event);
        // The publisher is a task: on paused time, a sleep returns once every task is idle,
        // so it has sent this one before the next is recorded.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The message of a request's body, as a POST or a PATCH carries it.
fn message(sent: &Sent) -> &str {
    sent.body["message"].as_str().unwrap_or("<none>")
}

fn lines(log: &[Sent]) -> Vec<String> {
    log.iter()
        .map(|s| format!("{} {} {}", s.method, s.path, message(s)))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_second_message_of_the_same_reason_is_an_event_of_its_own() {
    let (client, log) = recording();
    let (recorder, _task) =
        KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), index(), 64);
    record(
        &recorder,
        &[waiting("vol-A"), waiting("vol-B"), waiting("vol-B")],
    )
    .await;
    let log = log.lock().unwrap().clone();
    let text = |pv: &str| {
        format!(
            "DetachVolume.Detach waits for volume \"{pv}\" to be unmounted: the node reports it in use"
        )
    };
    assert_eq!(
        lines(&log)[..2],
        [
            format!("POST /api/v1/namespaces/default/events {}", text("vol-A")),
            format!("POST /api/v1/namespaces/default/events {}", text("vol-B")),
        ],
        "{log:#?}"
    );
    // Each create is a whole core/v1 Event about the node, as upstream's recorder posts it.
    for (sent, pv) in log.iter().zip(["vol-A", "vol-B"]) {
        let body = &sent.body;
        assert_eq!(body["reason"], "WaitingForUnmount");
        assert_eq!(body["type"], "Normal");
        assert_eq!(body["count"], 1);
        assert_eq!(body["source"]["component"], REPORTING_CONTROLLER);
        assert_eq!(body["involvedObject"]["kind"], "Node");
        assert_eq!(body["involvedObject"]["name"], "n1");
        assert_eq!(body["involvedObject"]["uid"], "uid-n1");
        assert_eq!(body["metadata"]["namespace"], "default");
        assert!(message(sent).contains(pv));
    }
    // The same message again: a PATCH of vol-B's event, counting 2.
    assert_eq!(log.len(), 3, "{log:#?}");
    let vol_b = log[1].body["metadata"]["name"].as_str().unwrap();
    assert_eq!(log[2].method, Method::PATCH);
    assert_eq!(
        log[2].path,
        format!("/api/v1/namespaces/default/events/{vol_b}")
    );
    assert_eq!(log[2].body["count"], 2);
    assert_eq!(message(&log[2]), text("vol-B"));
}

#[tokio::test(start_paused = true)]
async fn a_new_attach_error_is_told_with_its_own_text() {
    let (client, log) = recording();
    let (recorder, _task) =
        KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), index(), 64);
    record(
        &recorder,
        &[
            attach_failed("rpc error: timeout"),
            attach_failed("rpc error: quota exceeded"),
        ],
    )
    .await;
    let log = log.lock().unwrap().clone();
    let text = |e: &str| format!("AttachVolume.Attach failed for volume \"vol-A\" : {e}");
    assert_eq!(
        lines(&log),
        [
            format!(
                "POST /api/v1/namespaces/ns/events {}",
                text("rpc error: timeout")
            ),
            format!(
                "POST /api/v1/namespaces/ns/events {}",
                text("rpc error: quota exceeded")
            ),
        ],
        "{log:#?}"
    );
    assert_eq!(log[1].body["involvedObject"]["name"], "p");
    assert_eq!(log[1].body["reason"], "FailedAttachVolume");
    assert_eq!(log[1].body["type"], "Warning");
}

#[tokio::test(start_paused = true)]
async fn per_object_a_burst_of_25_then_one_every_5_minutes_similar_messages_aggregated() {
    let (client, log) = recording();
    let (recorder, _task) =
        KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), index(), 256);
    let errors: Vec<Event<Kube>> = (1..=40)
        .map(|i| attach_failed(&format!("error {i}")))
        .collect();
    record(&recorder, &errors).await;
    let sent = log.lock().unwrap().clone();
    assert_eq!(sent.len(), 25, "{:#?}", lines(&sent));
    let text = |i: u32| format!("AttachVolume.Attach failed for volume \"vol-A\" : error {i}");
    // Nine distinct messages go out as they are.
    for (i, s) in sent[..9].iter().enumerate() {
        assert_eq!(s.method, Method::POST);
        assert_eq!(message(s), text(i as u32 + 1));
    }
    // The tenth starts the aggregate, and the next fifteen update it with their text.
    assert_eq!(sent[9].method, Method::POST);
    assert_eq!(
        message(&sent[9]),
        format!("(combined from similar events): {}", text(10))
    );
    let combined = sent[9].body["metadata"]["name"].as_str().unwrap();
    for (i, s) in sent[10..].iter().enumerate() {
        assert_eq!(s.method, Method::PATCH);
        assert_eq!(s.path, format!("/api/v1/namespaces/ns/events/{combined}"));
        assert_eq!(s.body["count"], i + 2);
        assert_eq!(
            message(s),
            format!("(combined from similar events): {}", text(i as u32 + 11))
        );
    }
    // Another object has its own budget.
    record(&recorder, &[waiting("vol-A")]).await;
    assert_eq!(log.lock().unwrap().len(), 26);
    // One more for the pod only after 5 minutes, and it counts every one in between.
    tokio::time::advance(Duration::from_secs(299)).await;
    record(&recorder, &[attach_failed("error 41")]).await;
    assert_eq!(log.lock().unwrap().len(), 26);
    tokio::time::advance(Duration::from_secs(1)).await;
    record(
        &recorder,
        &[attach_failed("error 42"), attach_failed("error 43")],
    )
    .await;
    let sent = log.lock().unwrap().clone();
    assert_eq!(sent.len(), 27, "{:#?}", lines(&sent));
    assert_eq!(sent[26].method, Method::PATCH);
    assert_eq!(
        sent[26].body["count"], 33,
        "the 10th to the 42nd in the aggregate"
    );
    assert_eq!(
        message(&sent[26]),
        format!("(combined from similar events): {}", text(42))
    );
    assert_eq!(
        recorder.dropped(),
        0,
        "throttled events are not queue drops"
    );
}

#[tokio::test(start_paused = true)]
async fn a_repeat_of_an_expired_event_creates_it_again_with_its_count() {
    let (client, log) = recording_patches(404);
    let (recorder, _task) =
        KubeEventRecorder::spawn(client, REPORTING_CONTROLLER.into(), index(), 64);
    record(&recorder, &[waiting("vol-A"), waiting("vol-A")]).await;
    let log = log.lock().unwrap().clone();
    let methods: Vec<&Method> = log.iter().map(|s| &s.method).collect();
    assert_eq!(methods, [&Method::POST, &Method::PATCH, &Method::POST]);
    assert_eq!(
        log[2].body["metadata"]["name"],
        log[0].body["metadata"]["name"]
    );
    assert_eq!(log[2].body["count"], 2);
}
