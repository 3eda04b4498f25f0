//! `KubeStatusStore` against kube's mock service: each request asserted exactly (scripted),
//! and the conformance kit against a stateful fake API server, with a mutant fake that ignores
//! JSON-patch `test` ops to show that the compare-and-set is what the kit's race checks see.

mod common;

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use attach_detach::conformance::{self, HarnessError, StoreHarness, Supported};
use attach_detach::traits::{
    NodeStatusStore, ReportedVolume, ReportedVolumes, Revision, StoreError,
};
use attach_detach_kube::{Kube, KubeStatusStore, OUT_OF_SERVICE_TAINT, unique_name};
use serde_json::{Value, json};

use common::fake_api::{FakeApi, ready_node};
use common::script::{Answer, Exchange, scripted};
use common::status_body;

const JSON_PATCH: &str = "application/json-patch+json";
const GET_A: &str = "/api/v1/nodes/node-a";
const PATCH_A: &str = "/api/v1/nodes/node-a/status?";

fn v(n: u32) -> String {
    unique_name("ebs.csi.aws.com", &format!("vol-{n}"))
}

fn node_a() -> String {
    "node-a".to_owned()
}

/// A node as the API server returns it, with `status` as given.
fn node(name: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name, "resourceVersion": "4711", "uid": "8f2c",
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": spec,
        "status": status,
    })
}

fn ready() -> Value {
    json!([
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
    ])
}

/// The status patch the store must send: `test` the list read, `add` the new one.
fn status_patch(expected: Value, list: Value) -> Value {
    json!([
        {"op": "test", "path": "/status/volumesAttached", "value": expected},
        {"op": "add", "path": "/status/volumesAttached", "value": list},
    ])
}

fn reported(volume: String, device: Option<&str>) -> ReportedVolume<Kube> {
    ReportedVolume {
        volume,
        device: device.map(Arc::from),
    }
}

/// Waits for the script's end once every client is gone.
async fn finish(store: KubeStatusStore, script: tokio::task::JoinHandle<()>) {
    drop(store);
    script.await.expect("the script ran to its end");
}

#[tokio::test]
async fn read_of_a_ready_node() {
    let attached = json!([
        {"name": v(1), "devicePath": "/dev/xvdba"},
        {"name": v(2), "devicePath": ""},
    ]);
    let answer = node(
        "node-a",
        json!({"taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": OUT_OF_SERVICE_TAINT, "value": "shutdown", "effect": "NoExecute"},
        ]}),
        json!({
            "conditions": ready(),
            "volumesAttached": attached,
            "volumesInUse": [v(1)],
            "nodeInfo": {"kubeletVersion": "v1.34.0"},
        }),
    );
    let (client, script) = scripted(vec![Exchange::get(GET_A).answer(200, answer)]);
    let store = KubeStatusStore::new(client);
    let status = store.read(&node_a()).await.unwrap();
    assert_eq!(
        status.attached,
        [reported(v(1), Some("/dev/xvdba")), reported(v(2), None)]
    );
    assert_eq!(status.in_use, Some(vec![v(1)]));
    assert_eq!(status.fenced, Some(true));
    assert_eq!(status.healthy, Some(true));
    // The revision is the list's canonical JSON: keys sorted, no spaces.
    let text = format!(
        r#"[{{"devicePath":"/dev/xvdba","name":"{}"}},{{"devicePath":"","name":"{}"}}]"#,
        v(1),
        v(2)
    );
    assert_eq!(status.revision, Revision::from(text));
    finish(store, script).await;
}

#[tokio::test]
async fn a_node_kubelet_never_reported_has_no_in_use_list() {
    let never = node("node-a", json!({}), json!({}));
    let not_ready = node(
        "node-a",
        json!({"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}),
        json!({"conditions": [{"type": "Ready", "status": "Unknown"}]}),
    );
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(200, never),
        Exchange::get(GET_A).answer(200, not_ready),
    ]);
    let store = KubeStatusStore::new(client);
    let status = store.read(&node_a()).await.unwrap();
    assert!(status.attached.is_empty());
    assert_eq!(status.in_use, None, "no Ready condition: in use unknown");
    assert_eq!(status.fenced, Some(false));
    assert_eq!(status.healthy, Some(false));
    assert_eq!(status.revision, Revision::from("null"));
    // Once kubelet has posted, an absent list means nothing in use.
    let status = store.read(&node_a()).await.unwrap();
    assert_eq!(status.in_use, Some(vec![]));
    assert_eq!(status.healthy, Some(false), "Ready Unknown is not healthy");
    assert_eq!(status.fenced, Some(false), "only out-of-service fences");
    finish(store, script).await;
}

#[tokio::test]
async fn absent_and_empty_lists_are_different_revisions() {
    let absent = node("node-a", json!({}), json!({"conditions": ready()}));
    let empty = node(
        "node-a",
        json!({}),
        json!({"conditions": ready(), "volumesAttached": []}),
    );
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(200, absent),
        Exchange::get(GET_A).answer(200, empty),
    ]);
    let store = KubeStatusStore::new(client);
    let absent = store.read(&node_a()).await.unwrap();
    let empty = store.read(&node_a()).await.unwrap();
    assert_eq!(absent.revision, Revision::from("null"));
    assert_eq!(empty.revision, Revision::from("[]"));
    assert_eq!(absent.attached, empty.attached);
    assert_ne!(absent.revision, empty.revision);
    finish(store, script).await;
}

#[tokio::test]
async fn first_write_tests_null_and_adds_the_list() {
    let list = json!([
        {"name": v(1), "devicePath": "/dev/xvdba"},
        {"name": v(2), "devicePath": ""},
    ]);
    let answer = node(
        "node-a",
        json!({}),
        json!({"conditions": ready(), "volumesAttached": list}),
    );
    let (client, script) = scripted(vec![
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(Value::Null, list.clone()))
            .answer(200, answer),
    ]);
    let store = KubeStatusStore::new(client);
    let attached = [reported(v(1), Some("/dev/xvdba")), reported(v(2), None)];
    let new = store
        .write(&node_a(), &attached.clone().into(), Revision::from("null"))
        .await
        .unwrap();
    assert_eq!(new, Revision::from(list.to_string()));
    assert_eq!(store.stats().writes(), 1);
    let body = status_patch(Value::Null, list).to_string();
    assert_eq!(store.stats().bytes(), body.len() as u64);
    finish(store, script).await;
}

#[tokio::test]
async fn write_tests_the_list_it_read() {
    let old = json!([{"name": v(1), "devicePath": "/dev/xvdba"}]);
    let new = json!([
        {"name": v(1), "devicePath": "/dev/xvdba"},
        {"name": v(3), "devicePath": "/dev/xvdbc"},
    ]);
    let status = |list: &Value| {
        node(
            "node-a",
            json!({}),
            json!({"conditions": ready(), "volumesAttached": list, "volumesInUse": [v(1)]}),
        )
    };
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(200, status(&old)),
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(old.clone(), new.clone()))
            .answer(200, status(&new)),
        // Clearing the list: the API server drops an empty list from its answer.
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(new.clone(), json!([]))).answer(
            200,
            node("node-a", json!({}), json!({"conditions": ready()})),
        ),
    ]);
    let store = KubeStatusStore::new(client);
    let read = store.read(&node_a()).await.unwrap();
    let attached = [
        reported(v(1), Some("/dev/xvdba")),
        reported(v(3), Some("/dev/xvdbc")),
    ];
    let rev = store
        .write(&node_a(), &attached.clone().into(), read.revision)
        .await
        .unwrap();
    assert_eq!(rev, Revision::from(new.to_string()));
    let rev = store.write(&node_a(), &[].into(), rev).await.unwrap();
    assert_eq!(rev, Revision::from("null"));
    finish(store, script).await;
}

#[tokio::test]
async fn a_write_reads_the_nodes_facts_from_the_patched_node() {
    let old = json!([{"name": v(1), "devicePath": "/dev/xvdba"}]);
    // kubelet still reports vol-1 in use, and the node is tainted out of service and not
    // ready: the answer to the patch says so, and the facts are read from it.
    let answer = node(
        "node-a",
        json!({"taints": [{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}]}),
        json!({
            "conditions": [{"type": "Ready", "status": "Unknown"}],
            "volumesInUse": [v(1)],
        }),
    );
    let (client, script) = scripted(vec![
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(old.clone(), json!([])))
            .answer(200, answer),
    ]);
    let store = KubeStatusStore::new(client);
    let receipt = store
        .write_reading_facts(&node_a(), &[].into(), Revision::from(old.to_string()))
        .await
        .unwrap();
    assert_eq!(receipt.revision, Revision::from("null"));
    let facts = receipt.facts.expect("the patched node carries the facts");
    assert_eq!(facts.in_use, Some(vec![v(1)]));
    assert_eq!((facts.fenced, facts.healthy), (Some(true), Some(false)));
    finish(store, script).await;
}

#[tokio::test]
async fn conflicts_409_and_422_are_conflicts() {
    let list = json!([{"name": v(1), "devicePath": ""}]);
    let patch = || status_patch(Value::Null, list.clone());
    let (client, script) = scripted(vec![
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).answer(
            422,
            status_body(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            ),
        ),
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).answer(
            409,
            status_body(409, "Conflict", "the object has been modified"),
        ),
    ]);
    let store = KubeStatusStore::new(client);
    for code in [422, 409] {
        let e = store
            .write(
                &node_a(),
                &[reported(v(1), None)].into(),
                Revision::from("null"),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, StoreError::Conflict { current: None, .. }),
            "{code}: {e:?}"
        );
        let source = e.source().expect("kube's error kept");
        let kube = source.downcast_ref::<kube::Error>().expect("a kube::Error");
        assert!(
            matches!(kube, kube::Error::Api(s) if s.code == code),
            "{kube:?}"
        );
    }
    finish(store, script).await;
}

#[tokio::test]
async fn a_missing_node_is_not_found() {
    let gone = || status_body(404, "NotFound", "nodes \"node-a\" not found");
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(404, gone()),
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(Value::Null, json!([])))
            .answer(404, gone()),
    ]);
    let store = KubeStatusStore::new(client);
    let read = store.read(&node_a()).await.unwrap_err();
    assert!(matches!(read, StoreError::NotFound { .. }), "{read:?}");
    assert!(read.source().is_some());
    let write = store
        .write(&node_a(), &[].into(), Revision::from("null"))
        .await
        .unwrap_err();
    assert!(matches!(write, StoreError::NotFound { .. }), "{write:?}");
    finish(store, script).await;
}

#[tokio::test]
async fn failures_say_whether_a_write_may_have_landed() {
    let patch = || status_patch(Value::Null, json!([]));
    let internal = || status_body(500, "InternalError", "etcdserver: request timed out");
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(500, internal()),
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).answer(500, internal()),
        Exchange::patch(PATCH_A, JSON_PATCH, patch())
            .answer(504, status_body(504, "Timeout", "the request timed out")),
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).answer(
            429,
            status_body(429, "TooManyRequests", "too many requests"),
        ),
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).answer(
            403,
            status_body(403, "Forbidden", "nodes \"node-a\" is forbidden"),
        ),
        Exchange::patch(PATCH_A, JSON_PATCH, patch()).then(Answer::Broken("connection reset")),
        Exchange::get(GET_A).then(Answer::Broken("connection reset")),
    ]);
    let store = KubeStatusStore::new(client);
    let a = node_a();
    let empty = ReportedVolumes::default();
    let write = || store.write(&a, &empty, Revision::from("null"));
    let read = store.read(&node_a()).await.unwrap_err();
    assert_eq!(
        read.to_string(),
        "store call failed and did nothing: reading node node-a"
    );
    for (answer, may_have_landed) in [
        ("500", true),
        ("504", true),
        ("429", false),
        ("403", false),
        ("a broken connection", true),
    ] {
        let e = write().await.unwrap_err();
        if may_have_landed {
            assert!(matches!(e, StoreError::Uncertain { .. }), "{answer}: {e:?}");
            assert_eq!(
                e.to_string(),
                "store call may have taken effect: writing node node-a"
            );
        } else {
            assert!(matches!(e, StoreError::Transient { .. }), "{answer}: {e:?}");
        }
        assert!(e.source().is_some(), "{answer}: kube's error kept");
    }
    let read = store.read(&node_a()).await.unwrap_err();
    assert!(matches!(read, StoreError::Transient { .. }), "{read:?}");
    finish(store, script).await;
}

#[tokio::test(start_paused = true)]
async fn a_write_without_answer_is_uncertain() {
    let (client, script) = scripted(vec![
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(Value::Null, json!([])))
            .then(Answer::Hold(Duration::from_secs(3600))),
        Exchange::get(GET_A).then(Answer::Hold(Duration::from_secs(3600))),
    ]);
    let store = KubeStatusStore::new(client).with_timeout(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let e = store
        .write(&node_a(), &[].into(), Revision::from("null"))
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Uncertain { .. }), "{e:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(
        e.source()
            .unwrap()
            .to_string()
            .contains("no answer within 5s")
    );
    let e = store.read(&node_a()).await.unwrap_err();
    assert!(matches!(e, StoreError::Transient { .. }), "{e:?}");
    finish(store, script).await;
}

#[tokio::test]
async fn unexpected_answers_are_errors_not_guesses() {
    let odd = node(
        "node-a",
        json!({}),
        json!({"conditions": ready(), "volumesAttached": "kubernetes.io/csi/x^y"}),
    );
    let (client, script) = scripted(vec![
        Exchange::get(GET_A).answer(200, odd.clone()),
        Exchange::patch(PATCH_A, JSON_PATCH, status_patch(Value::Null, json!([]))).answer(200, odd),
    ]);
    let store = KubeStatusStore::new(client);
    let read = store.read(&node_a()).await.unwrap_err();
    assert!(matches!(read, StoreError::Transient { .. }), "{read:?}");
    assert!(
        read.source()
            .unwrap()
            .to_string()
            .contains("not a list of {name, devicePath}"),
        "{read}"
    );
    // The patch was applied, but what the node holds now is unknown.
    let write = store
        .write(&node_a(), &[].into(), Revision::from("null"))
        .await
        .unwrap_err();
    assert!(matches!(write, StoreError::Uncertain { .. }), "{write:?}");
    // A revision this store never gave out is not sent at all.
    let bad = store
        .write(&node_a(), &[].into(), Revision::from("{not JSON"))
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::Conflict { .. }), "{bad:?}");
    finish(store, script).await;
}

/// A node listing page: `names` as fresh ready nodes, and a continue token.
fn page(names: &[&str], next: Option<&str>) -> Value {
    let items: Vec<Value> = names
        .iter()
        .map(|name| node(name, json!({}), json!({"conditions": ready()})))
        .collect();
    let mut metadata = json!({"resourceVersion": "100"});
    if let Some(next) = next {
        metadata["continue"] = json!(next);
    }
    json!({"apiVersion": "v1", "kind": "NodeList", "metadata": metadata, "items": items})
}

// kube's query builder starts the query with `&`; the API server ignores the empty pair.
const LIST: &str = "/api/v1/nodes?&limit=500";

fn list_from(token: &str) -> String {
    format!("{LIST}&continue={token}")
}

#[tokio::test]
async fn list_reads_every_page() {
    let (client, script) = scripted(vec![
        Exchange::get(LIST).answer(200, page(&["n1", "n2"], Some("tok1"))),
        Exchange::get(&list_from("tok1")).answer(200, page(&["n3"], None)),
    ]);
    let store = KubeStatusStore::new(client);
    let listed = store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    for (_, status) in &listed {
        assert_eq!(status.healthy, Some(true));
        assert_eq!(status.in_use, Some(vec![]));
        assert_eq!(status.revision, Revision::from("null"));
    }
    finish(store, script).await;
}

#[tokio::test]
async fn list_skips_nodes_whose_kubelet_attaches_by_itself() {
    // kubelet annotates its node when it leaves attach and detach to the controller
    // (`--enable-controller-attach-detach`, the default); without it, the node's attachments
    // and status are kubelet's own, and recovery must not adopt them.
    let mut listing = page(&["n1", "n2", "n3"], None);
    listing["items"][1]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let (client, script) = scripted(vec![Exchange::get(LIST).answer(200, listing)]);
    let store = KubeStatusStore::new(client);
    let listed = store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["n1", "n3"]);
    finish(store, script).await;
}

#[tokio::test]
async fn an_expired_continue_token_restarts_the_listing_once() {
    let gone = || status_body(410, "Expired", "The provided continue parameter is too old");
    let (client, script) = scripted(vec![
        Exchange::get(LIST).answer(200, page(&["n1"], Some("tok1"))),
        Exchange::get(&list_from("tok1")).answer(410, gone()),
        // Started over, from a fresh snapshot.
        Exchange::get(LIST).answer(200, page(&["n1"], Some("tok2"))),
        Exchange::get(&list_from("tok2")).answer(200, page(&["n2"], None)),
        // A second listing whose token expires twice gives up.
        Exchange::get(LIST).answer(200, page(&["n1"], Some("tok3"))),
        Exchange::get(&list_from("tok3")).answer(410, gone()),
        Exchange::get(LIST).answer(200, page(&["n1"], Some("tok4"))),
        Exchange::get(&list_from("tok4")).answer(410, gone()),
    ]);
    let store = KubeStatusStore::new(client);
    let listed = store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["n1", "n2"],
        "each node once, from the second listing"
    );
    let e = store.list().await.unwrap_err();
    assert!(matches!(e, StoreError::Transient { .. }), "{e:?}");
    assert!(
        e.to_string().contains("continue token expired twice"),
        "{e}"
    );
    finish(store, script).await;
}

// ---- the conformance kit, against the fake API server --------------------------------------

/// The kit's harness: the store over a client of the fake, a second store over a client of
/// its own (another replica), and the fake's nodes, which the harness edits as kubelet
/// (volumesInUse, the Ready condition) and an operator (the out-of-service taint) would.
struct Harness {
    fake: Arc<FakeApi>,
    store: KubeStatusStore,
    second: KubeStatusStore,
}

impl Harness {
    fn new() -> Self {
        let fake = FakeApi::new();
        let store = KubeStatusStore::new(fake.client());
        let second = KubeStatusStore::new(fake.client());
        Harness {
            fake,
            store,
            second,
        }
    }

    fn edit(&self, node: &str, edit: impl FnOnce(&mut Value)) -> Result<Supported, HarnessError> {
        if self.fake.edit_node(node, edit) {
            Ok(Supported::Yes)
        } else {
            Err(format!("no node {node:?} in the fake").into())
        }
    }
}

#[async_trait]
impl StoreHarness<Kube> for Harness {
    fn store(&self) -> &dyn NodeStatusStore<Kube> {
        &self.store
    }

    fn second_store(&self) -> &dyn NodeStatusStore<Kube> {
        &self.second
    }

    fn node(&self, n: usize) -> String {
        format!("node-{n}")
    }

    fn volume(&self, n: usize) -> String {
        unique_name("csi.example.com", &format!("vol-{n}"))
    }

    async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
        self.fake.add_ready_node(node);
        Ok(())
    }

    async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
        self.fake.remove_node(node);
        Ok(())
    }

    async fn set_in_use(
        &self,
        node: &String,
        in_use: Vec<String>,
    ) -> Result<Supported, HarnessError> {
        self.edit(node, |n| n["status"]["volumesInUse"] = json!(in_use))
    }

    async fn set_fenced(&self, node: &String, fenced: bool) -> Result<Supported, HarnessError> {
        self.edit(node, |n| {
            let mut taints: Vec<Value> = n["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t["key"] != OUT_OF_SERVICE_TAINT)
                .collect();
            if fenced {
                taints.push(json!({"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}));
            }
            n["spec"]["taints"] = json!(taints);
        })
    }

    async fn set_healthy(&self, node: &String, healthy: bool) -> Result<Supported, HarnessError> {
        self.edit(node, |n| {
            let status = if healthy { "True" } else { "Unknown" };
            n["status"]["conditions"] = json!([{"type": "Ready", "status": status}]);
        })
    }
}

#[tokio::test]
async fn the_store_conforms_over_the_fake_api_server() {
    let harness = Harness::new();
    if let Err(failures) = conformance::check_store(&harness).await {
        panic!("{failures}");
    }
    // It went through the API, writes to the status subresource only.
    let requests = harness.fake.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PATCH /api/v1/nodes/") && r.contains("/status"))
    );
    assert!(
        requests
            .iter()
            .all(|r| !r.starts_with("PATCH") || r.contains("/status"))
    );
}

#[tokio::test]
async fn without_test_ops_the_races_are_lost() {
    let harness = Harness::new();
    harness.fake.ignore_test_ops(true);
    let failures = conformance::check_store(&harness).await.unwrap_err();
    assert_eq!(
        failures.failed_checks(),
        [
            "stale_write_conflicts_and_changes_nothing",
            "conflict_names_the_current_revision",
            "concurrent_writers_one_wins",
            "write_after_another_clients_write_conflicts",
            "two_clients_racing_one_wins",
            "write_at_a_revision_older_than_the_last_read_conflicts",
        ],
        "{failures}"
    );
}

#[tokio::test]
async fn the_fake_lists_in_pages_and_expires_tokens() {
    let fake = FakeApi::new();
    let store = KubeStatusStore::new(fake.client());
    for n in 0..5 {
        fake.put_node(ready_node(&format!("n{n}")));
    }
    fake.set_page_size(2);
    fake.expire_continue_tokens(1);
    let listed = store.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["n0", "n1", "n2", "n3", "n4"]);
    let lists = fake
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/nodes?"))
        .count();
    // Page 1, an expired page 2, then pages 1 to 3 again.
    assert_eq!(lists, 5, "{:?}", fake.requests());
}

/// The fake's JSON-patch `test` is Kubernetes' (evanphx/json-patch v4's `TestAllTest` cases):
/// `null` matches an absent member but not an empty list, and the parent must exist.
#[tokio::test]
async fn the_fake_tests_like_the_api_server() {
    let fake = FakeApi::new();
    fake.add_ready_node("n1");
    fake.put_node(json!({"metadata": {"name": "bare"}}));
    let patch = |expected: Value| {
        serde_json::to_vec(&status_patch(
            expected,
            json!([{"name": v(1), "devicePath": ""}]),
        ))
        .unwrap()
    };
    let send = |node: &str, body: &[u8]| {
        fake.answer(
            &http::Method::PATCH,
            &format!("/api/v1/nodes/{node}/status"),
            "",
            Some(JSON_PATCH),
            body,
        )
        .0
    };
    // Absent: null matches, a list does not.
    assert_eq!(send("n1", &patch(json!([]))), 422);
    assert_eq!(send("n1", &patch(Value::Null)), 200);
    // Present: null no longer matches; the list does.
    assert_eq!(send("n1", &patch(Value::Null)), 422);
    let list = fake.node("n1").unwrap()["status"]["volumesAttached"].clone();
    assert_eq!(send("n1", &patch(list)), 200);
    // No status at all: the test's parent is missing.
    assert_eq!(send("bare", &patch(Value::Null)), 422);
    // Another patch type is refused.
    let merge = fake.answer(
        &http::Method::PATCH,
        "/api/v1/nodes/n1/status",
        "",
        Some("application/merge-patch+json"),
        b"{}",
    );
    assert_eq!(merge.0, 415);
}
