//! The conformance kit run against this crate's in-memory doubles, against a second, unrelated
//! store written here (etcd-like: the agents' facts do not move the revision), and against
//! deliberately broken stores and backends, to show that each suite passes what keeps the
//! contract and names the check that a broken implementation fails.

#![cfg(feature = "conformance")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;

use attach_detach::Ids;
use attach_detach::conformance::{
    self, BackendHarness, ConformanceFailures, HarnessError, StoreHarness, Supported,
    backend_checks, store_checks,
};
use attach_detach::core::{Access, VolumeSpec};
use attach_detach::memory::{MemoryBackend, MemoryStore};
use attach_detach::traits::{
    AttachBackend, AttachInfo, BackendAttachment, BackendError, NodeStatus, NodeStatusStore,
    ReportedVolume, ReportedVolumes, Revision, StatusFacts, StoreError, WriteReceipt,
};

/// String ids, and a string payload (a CSI handle) so that a wrong payload shows.
type D = Ids<String, String, String, String>;

/// The names of every check of the store suite.
fn all_store_checks() -> Vec<&'static str> {
    store_checks::<D, MemoryStoreHarness>()
        .iter()
        .map(|c| c.name)
        .collect()
}

/// The names of every check of the backend suite.
fn all_backend_checks() -> Vec<&'static str> {
    backend_checks::<D, MemoryBackendHarness<MemoryBackend<D>>>()
        .iter()
        .map(|c| c.name)
        .collect()
}

/// The checks a run failed, or none.
fn failed(result: Result<(), ConformanceFailures>) -> Vec<&'static str> {
    match result {
        Ok(()) => Vec::new(),
        Err(failures) => {
            // Every failure reads as a sentence naming its check.
            let text = failures.to_string();
            for f in &failures.failures {
                assert!(text.contains(f.check), "{text}");
            }
            failures.failed_checks()
        }
    }
}

// ---- the in-memory store ------------------------------------------------------------------

struct MemoryStoreHarness {
    store: MemoryStore<D>,
    /// A second handle on the same store: the in-memory store keeps nothing in a handle.
    second: MemoryStore<D>,
    tag: &'static str,
}

impl MemoryStoreHarness {
    fn new(store: MemoryStore<D>, tag: &'static str) -> Self {
        MemoryStoreHarness {
            second: store.clone(),
            store,
            tag,
        }
    }
}

#[async_trait]
impl StoreHarness<D> for MemoryStoreHarness {
    fn store(&self) -> &dyn NodeStatusStore<D> {
        &self.store
    }
    fn second_store(&self) -> &dyn NodeStatusStore<D> {
        &self.second
    }
    fn node(&self, n: usize) -> String {
        format!("{}-node-{n}", self.tag)
    }
    fn volume(&self, n: usize) -> String {
        format!("{}-vol-{n}", self.tag)
    }
    async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
        self.store.add_node(node.clone());
        Ok(())
    }
    async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
        self.store.remove_node(node);
        Ok(())
    }
    async fn set_in_use(
        &self,
        node: &String,
        in_use: Vec<String>,
    ) -> Result<Supported, HarnessError> {
        self.store.set_in_use(node, in_use);
        Ok(Supported::Yes)
    }
    async fn set_fenced(&self, node: &String, fenced: bool) -> Result<Supported, HarnessError> {
        self.store.set_fenced(node, fenced);
        Ok(Supported::Yes)
    }
    async fn set_healthy(&self, node: &String, healthy: bool) -> Result<Supported, HarnessError> {
        self.store.set_healthy(node, healthy);
        Ok(Supported::Yes)
    }
}

#[tokio::test]
async fn memory_store_conforms() {
    let harness = MemoryStoreHarness::new(MemoryStore::new(), "memory");
    if let Err(failures) = conformance::check_store(&harness).await {
        panic!("{failures}");
    }
    // The suite cleans up after itself.
    assert_eq!(harness.store.list().await.unwrap(), vec![]);
}

#[tokio::test]
async fn each_store_check_runs_alone() {
    let harness = MemoryStoreHarness::new(MemoryStore::new(), "alone");
    for check in store_checks::<D, MemoryStoreHarness>() {
        assert_eq!(check.run(&harness).await, Ok(()), "{check:?}");
        // Twice with the same harness: the second run uses fresh nodes.
        assert_eq!(check.run(&harness).await, Ok(()), "{check:?}, again");
    }
}

/// Two runs sharing one store at once, beside nodes of someone else's: each run looks only at
/// its own nodes, as on a shared etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_share_a_store_with_foreign_nodes() {
    let store = MemoryStore::<D>::new();
    store.add_node("foreign-node".to_string());
    let foreign = store.read(&"foreign-node".to_string()).await.unwrap();
    let a = MemoryStoreHarness::new(store.clone(), "run-a");
    let b = MemoryStoreHarness::new(store.clone(), "run-b");
    let (ran_a, ran_b) = tokio::join!(conformance::check_store(&a), conformance::check_store(&b));
    assert_eq!(ran_a, Ok(()));
    assert_eq!(ran_b, Ok(()));
    assert_eq!(
        store.list().await.unwrap(),
        vec![("foreign-node".to_string(), foreign)]
    );
}

// ---- a second store, and its mutants -------------------------------------------------------

/// How a [`ToyStore`] breaks the contract, if it does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flaw {
    /// None: a correct store.
    None,
    /// A write lands whatever revision it expects (a blind put instead of a compare-and-set).
    IgnoresRevision,
    /// A write replaces the whole status, and so resets the agent's in-use list.
    ErasesInUse,
    /// A read of a node it does not hold answers an empty status instead of NotFound.
    InventsMissingNodes,
    /// A write that reads facts answers those of the node's previous write (a cache).
    StaleFacts,
    /// The client compares the expected revision with the one it last saw of the node (read,
    /// listed or written) and then puts the list blindly: the compare-and-set happens on the
    /// client. Through one client that cannot be told from the real thing; a second writer's
    /// change goes unseen and is overwritten.
    ComparesOnClient,
    /// A write at a revision this client once read is sent to the backing at the newest
    /// revision the client read of the node, as if the caller had merely not caught up: a
    /// revision from before the client's last read is accepted.
    WritesAtNewestRead,
    /// A read of a node this client wrote answers the list and revision of that write (a
    /// write-through cache of its own writes; the agents' facts are read fresh), so another
    /// client's later write does not show.
    CachesOwnWrites,
}

impl Flaw {
    /// Every flaw, so that a new one cannot be left out of [`every_toy_mutant_is_caught`].
    const ALL: [Flaw; 8] = {
        // Names every variant: a new one does not compile until it is listed.
        match Flaw::None {
            Flaw::None
            | Flaw::IgnoresRevision
            | Flaw::ErasesInUse
            | Flaw::InventsMissingNodes
            | Flaw::StaleFacts
            | Flaw::ComparesOnClient
            | Flaw::WritesAtNewestRead
            | Flaw::CachesOwnWrites => {}
        }
        [
            Flaw::None,
            Flaw::IgnoresRevision,
            Flaw::ErasesInUse,
            Flaw::InventsMissingNodes,
            Flaw::StaleFacts,
            Flaw::ComparesOnClient,
            Flaw::WritesAtNewestRead,
            Flaw::CachesOwnWrites,
        ]
    };
}

struct ToyNode {
    attached: Vec<ReportedVolume<D>>,
    in_use: Vec<String>,
    fenced: bool,
    healthy: bool,
    revision: u64,
    /// The facts as of the last write ([`Flaw::StaleFacts`] answers them).
    facts_at_last_write: Option<StatusFacts<D>>,
}

/// What a toy store's clients share: its nodes and its revision counter (a server's state).
#[derive(Default)]
struct ToyBacking {
    nodes: Mutex<BTreeMap<String, ToyNode>>,
    last: Mutex<u64>,
}

impl ToyBacking {
    fn next(&self) -> u64 {
        let mut last = self.last.lock();
        *last += 1;
        *last
    }
}

/// What one client of a toy store remembers of a node (only the flawed clients use it).
#[derive(Default)]
struct Seen {
    /// Every revision this client's reads returned, oldest first.
    read: Vec<Revision>,
    /// The revision this client last saw: read, listed or written.
    last: Option<Revision>,
    /// The list and revision of this client's last write.
    written: Option<(Vec<ReportedVolume<D>>, Revision)>,
}

/// One client of a store written apart from [`MemoryStore`], etcd-like: the attached list is
/// one key whose `mod_revision` is the node's revision, and the agents' facts are keys of
/// their own, so an agent's change does not move the revision. Its revisions are text.
/// Optionally it holds no agent facts at all, and optionally it has a [`Flaw`].
struct ToyStore {
    backing: Arc<ToyBacking>,
    /// This client's memory of each node.
    seen: Mutex<BTreeMap<String, Seen>>,
    knows_facts: bool,
    flaw: Flaw,
}

impl ToyStore {
    /// A client of `backing`, with nothing seen yet.
    fn client(backing: &Arc<ToyBacking>, knows_facts: bool, flaw: Flaw) -> Self {
        ToyStore {
            backing: Arc::clone(backing),
            seen: Mutex::new(BTreeMap::new()),
            knows_facts,
            flaw,
        }
    }

    fn revision(n: u64) -> Revision {
        Revision::from(format!("r{n}"))
    }

    fn status(&self, node: &ToyNode) -> NodeStatus<D> {
        let fact = |x| if self.knows_facts { Some(x) } else { None };
        NodeStatus {
            attached: node.attached.clone(),
            in_use: self.knows_facts.then(|| node.in_use.clone()),
            fenced: fact(node.fenced),
            healthy: fact(node.healthy),
            revision: Self::revision(node.revision),
        }
    }

    /// Remembers what this client saw of `node`.
    fn saw(&self, node: &str, change: impl FnOnce(&mut Seen)) {
        change(self.seen.lock().entry(node.to_owned()).or_default());
    }

    /// What the harness does as an agent: set a fact, without moving the revision.
    fn agent(&self, node: &str, change: impl FnOnce(&mut ToyNode)) -> Supported {
        if !self.knows_facts {
            return Supported::No;
        }
        if let Some(n) = self.backing.nodes.lock().get_mut(node) {
            change(n);
        }
        Supported::Yes
    }
}

#[async_trait]
impl NodeStatusStore<D> for ToyStore {
    async fn read(&self, node: &String) -> Result<NodeStatus<D>, StoreError> {
        let mut status = match self.backing.nodes.lock().get(node) {
            Some(n) => self.status(n),
            None if self.flaw == Flaw::InventsMissingNodes => {
                return Ok(NodeStatus {
                    attached: Vec::new(),
                    in_use: None,
                    fenced: None,
                    healthy: None,
                    revision: Self::revision(0),
                });
            }
            None => return Err(StoreError::not_found()),
        };
        if self.flaw == Flaw::CachesOwnWrites
            && let Some((attached, revision)) = self
                .seen
                .lock()
                .get(node)
                .and_then(|seen| seen.written.clone())
        {
            status.attached = attached;
            status.revision = revision;
        }
        self.saw(node, |seen| {
            seen.read.push(status.revision.clone());
            seen.last = Some(status.revision.clone());
        });
        Ok(status)
    }

    async fn write(
        &self,
        node: &String,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<Revision, StoreError> {
        self.write_reading_facts(node, attached, expected)
            .await
            .map(|receipt| receipt.revision)
    }

    /// Reads the facts under the same lock as the write, when the store holds them.
    async fn write_reading_facts(
        &self,
        node: &String,
        attached: &ReportedVolumes<D>,
        expected: Revision,
    ) -> Result<WriteReceipt<D>, StoreError> {
        let expected = {
            let seen = self.seen.lock();
            let seen = seen.get(node);
            match (self.flaw, seen) {
                (Flaw::WritesAtNewestRead, Some(seen)) if seen.read.contains(&expected) => {
                    seen.read.last().cloned().unwrap_or(expected)
                }
                (
                    Flaw::ComparesOnClient,
                    Some(Seen {
                        last: Some(last), ..
                    }),
                ) if *last != expected => {
                    return Err(StoreError::conflict(last.clone()));
                }
                _ => expected,
            }
        };
        let next = self.backing.next();
        let mut nodes = self.backing.nodes.lock();
        let n = nodes.get_mut(node).ok_or_else(StoreError::not_found)?;
        let current = Self::revision(n.revision);
        let compares = !matches!(self.flaw, Flaw::IgnoresRevision | Flaw::ComparesOnClient);
        if compares && current != expected {
            return Err(StoreError::conflict(current));
        }
        n.attached = attached.to_vec();
        n.revision = next;
        if self.flaw == Flaw::ErasesInUse {
            n.in_use.clear();
        }
        let now = self.status(n).facts();
        let previous = n.facts_at_last_write.replace(now.clone());
        drop(nodes);
        let facts = match self.flaw {
            Flaw::StaleFacts => previous.or(Some(now)),
            _ => Some(now),
        };
        let revision = Self::revision(next);
        self.saw(node, |seen| {
            seen.last = Some(revision.clone());
            seen.written = Some((attached.to_vec(), revision.clone()));
        });
        Ok(WriteReceipt {
            revision,
            facts: facts.filter(|_| self.knows_facts),
        })
    }

    async fn list(&self) -> Result<Vec<(String, NodeStatus<D>)>, StoreError> {
        let listed: Vec<(String, NodeStatus<D>)> = self
            .backing
            .nodes
            .lock()
            .iter()
            .map(|(name, n)| (name.clone(), self.status(n)))
            .collect();
        for (name, status) in &listed {
            self.saw(name, |seen| seen.last = Some(status.revision.clone()));
        }
        Ok(listed)
    }
}

/// Two clients of one toy backing; the agents write the backing directly.
struct ToyHarness {
    first: ToyStore,
    second: ToyStore,
}

impl ToyHarness {
    fn new(knows_facts: bool, flaw: Flaw) -> Self {
        let backing = Arc::new(ToyBacking::default());
        ToyHarness {
            first: ToyStore::client(&backing, knows_facts, flaw),
            second: ToyStore::client(&backing, knows_facts, flaw),
        }
    }
}

#[async_trait]
impl StoreHarness<D> for ToyHarness {
    fn store(&self) -> &dyn NodeStatusStore<D> {
        &self.first
    }
    fn second_store(&self) -> &dyn NodeStatusStore<D> {
        &self.second
    }
    fn node(&self, n: usize) -> String {
        format!("toy-node-{n}")
    }
    fn volume(&self, n: usize) -> String {
        format!("toy-vol-{n}")
    }
    async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
        let backing = &self.first.backing;
        let revision = backing.next();
        backing.nodes.lock().entry(node.clone()).or_insert(ToyNode {
            attached: Vec::new(),
            in_use: Vec::new(),
            fenced: false,
            healthy: true,
            revision,
            facts_at_last_write: None,
        });
        Ok(())
    }
    async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
        self.first.backing.nodes.lock().remove(node);
        Ok(())
    }
    async fn set_in_use(
        &self,
        node: &String,
        in_use: Vec<String>,
    ) -> Result<Supported, HarnessError> {
        Ok(self.first.agent(node, |n| n.in_use = in_use))
    }
    async fn set_fenced(&self, node: &String, fenced: bool) -> Result<Supported, HarnessError> {
        Ok(self.first.agent(node, |n| n.fenced = fenced))
    }
    async fn set_healthy(&self, node: &String, healthy: bool) -> Result<Supported, HarnessError> {
        Ok(self.first.agent(node, |n| n.healthy = healthy))
    }
}

async fn run_toy(knows_facts: bool, flaw: Flaw) -> Vec<&'static str> {
    failed(conformance::check_store(&ToyHarness::new(knows_facts, flaw)).await)
}

#[tokio::test]
async fn a_second_correct_store_conforms_with_or_without_agent_facts() {
    assert_eq!(run_toy(true, Flaw::None).await, Vec::<&str>::new());
    assert_eq!(run_toy(false, Flaw::None).await, Vec::<&str>::new());
}

#[tokio::test]
async fn catches_a_write_that_ignores_the_expected_revision() {
    assert_eq!(
        run_toy(true, Flaw::IgnoresRevision).await,
        [
            "stale_write_conflicts_and_changes_nothing",
            "conflict_names_the_current_revision",
            "concurrent_writers_one_wins",
            "write_after_another_clients_write_conflicts",
            "two_clients_racing_one_wins",
            "write_at_a_revision_older_than_the_last_read_conflicts",
        ]
    );
}

#[tokio::test]
async fn catches_a_write_that_erases_in_use() {
    assert_eq!(
        run_toy(true, Flaw::ErasesInUse).await,
        [
            "write_keeps_agent_facts",
            "agent_change_between_read_and_write",
            "facts_read_with_a_write_are_current",
        ]
    );
    // A store that holds no in-use list has none to erase.
    assert_eq!(run_toy(false, Flaw::ErasesInUse).await, Vec::<&str>::new());
}

#[tokio::test]
async fn catches_a_write_that_answers_facts_older_than_it() {
    assert_eq!(
        run_toy(true, Flaw::StaleFacts).await,
        ["facts_read_with_a_write_are_current"]
    );
}

#[tokio::test]
async fn catches_a_read_that_invents_missing_nodes() {
    assert_eq!(
        run_toy(true, Flaw::InventsMissingNodes).await,
        [
            "read_of_missing_node_is_not_found",
            "write_to_missing_node_is_not_found",
        ]
    );
}

/// A store whose compare-and-set is done by the client, against the revision it last saw:
/// through one client it keeps every promise; a second client's write goes unseen, and is
/// overwritten.
#[tokio::test]
async fn catches_a_compare_and_set_done_on_the_client() {
    assert_eq!(
        run_toy(true, Flaw::ComparesOnClient).await,
        [
            "write_after_another_clients_write_conflicts",
            "two_clients_racing_one_wins",
        ]
    );
}

/// A store that takes a revision from before its client's last read for the newest one.
#[tokio::test]
async fn catches_a_write_at_a_revision_older_than_the_last_read() {
    assert_eq!(
        run_toy(true, Flaw::WritesAtNewestRead).await,
        ["write_at_a_revision_older_than_the_last_read_conflicts"]
    );
}

/// A store that reads its own writes back from a cache, blind to another client's.
#[tokio::test]
async fn catches_a_read_of_a_cached_own_write() {
    assert_eq!(
        run_toy(true, Flaw::CachesOwnWrites).await,
        [
            "clients_read_each_others_writes",
            "write_after_another_clients_write_conflicts",
            "write_at_a_revision_older_than_the_last_read_conflicts",
        ]
    );
}

/// Every flawed toy store fails at least one check, with or without agent facts where the
/// flaw does not need them: a flaw that slips through every check fails this test.
#[tokio::test]
async fn every_toy_mutant_is_caught() {
    for flaw in Flaw::ALL {
        for knows_facts in [true, false] {
            let failed = run_toy(knows_facts, flaw).await;
            match (flaw, knows_facts) {
                (Flaw::None, _) => assert_eq!(failed, Vec::<&str>::new()),
                // Without facts there is no in-use list to erase, and no fact to answer stale.
                (Flaw::ErasesInUse | Flaw::StaleFacts, false) => {
                    assert_eq!(failed, Vec::<&str>::new(), "{flaw:?} without facts")
                }
                _ => assert!(
                    !failed.is_empty(),
                    "{flaw:?} (agent facts held: {knows_facts}) passed every store check"
                ),
            }
        }
    }
}

/// A harness that claims a fact the store does not show: the suite says which, and what it saw.
#[tokio::test]
async fn catches_a_fact_read_back_as_a_guess() {
    struct Claims(ToyHarness);
    #[async_trait]
    impl StoreHarness<D> for Claims {
        fn store(&self) -> &dyn NodeStatusStore<D> {
            self.0.store()
        }
        fn second_store(&self) -> &dyn NodeStatusStore<D> {
            self.0.second_store()
        }
        fn node(&self, n: usize) -> String {
            self.0.node(n)
        }
        fn volume(&self, n: usize) -> String {
            self.0.volume(n)
        }
        async fn add_node(&self, node: &String) -> Result<(), HarnessError> {
            self.0.add_node(node).await
        }
        async fn remove_node(&self, node: &String) -> Result<(), HarnessError> {
            self.0.remove_node(node).await
        }
        async fn set_in_use(
            &self,
            node: &String,
            v: Vec<String>,
        ) -> Result<Supported, HarnessError> {
            self.0.set_in_use(node, v).await
        }
        async fn set_fenced(&self, node: &String, f: bool) -> Result<Supported, HarnessError> {
            self.0.set_fenced(node, f).await
        }
        /// The harness says the store holds no health, yet the store shows one: a guess.
        async fn set_healthy(&self, _: &String, _: bool) -> Result<Supported, HarnessError> {
            Ok(Supported::No)
        }
    }
    let harness = Claims(ToyHarness::new(true, Flaw::None));
    let failures = conformance::check_store(&harness).await.unwrap_err();
    assert_eq!(
        failures.failed_checks(),
        [
            "agent_facts_read_back",
            "write_keeps_agent_facts",
            "facts_read_with_a_write_are_current"
        ]
    );
    let first = &failures.failures[0];
    assert!(first.expected.contains("healthy None"), "{first}");
    assert!(first.seen.contains("healthy Some(true)"), "{first}");
}

// ---- stores and backends that do not answer ------------------------------------------------

/// A store whose every call fails, or never answers.
struct Broken {
    hangs: bool,
}

impl Broken {
    async fn fail<T>(&self) -> Result<T, StoreError> {
        if self.hangs {
            std::future::pending().await
        } else {
            Err(StoreError::transient("connection refused"))
        }
    }
}

#[async_trait]
impl NodeStatusStore<D> for Broken {
    async fn read(&self, _: &String) -> Result<NodeStatus<D>, StoreError> {
        self.fail().await
    }
    async fn write(
        &self,
        _: &String,
        _: &ReportedVolumes<D>,
        _: Revision,
    ) -> Result<Revision, StoreError> {
        self.fail().await
    }
    async fn list(&self) -> Result<Vec<(String, NodeStatus<D>)>, StoreError> {
        self.fail().await
    }
}

#[async_trait]
impl StoreHarness<D> for Broken {
    fn store(&self) -> &dyn NodeStatusStore<D> {
        self
    }
    fn second_store(&self) -> &dyn NodeStatusStore<D> {
        self
    }
    fn node(&self, n: usize) -> String {
        format!("broken-node-{n}")
    }
    fn volume(&self, n: usize) -> String {
        format!("broken-vol-{n}")
    }
    async fn add_node(&self, _: &String) -> Result<(), HarnessError> {
        Ok(())
    }
    async fn remove_node(&self, _: &String) -> Result<(), HarnessError> {
        Ok(())
    }
    /// Fails when the store fails (the agents' keys are in it), but says it does not hold the
    /// fact when the store hangs, so that every check gets to a store call.
    async fn set_in_use(&self, _: &String, _: Vec<String>) -> Result<Supported, HarnessError> {
        if self.hangs {
            return Ok(Supported::No);
        }
        Err("the agent's key could not be written".into())
    }
    async fn set_fenced(&self, _: &String, _: bool) -> Result<Supported, HarnessError> {
        Ok(Supported::No)
    }
    async fn set_healthy(&self, _: &String, _: bool) -> Result<Supported, HarnessError> {
        Ok(Supported::No)
    }
    fn call_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
}

#[tokio::test]
async fn a_failing_store_fails_every_check_without_a_panic() {
    let failures = conformance::check_store(&Broken { hangs: false })
        .await
        .unwrap_err();
    assert_eq!(failures.checks_run, all_store_checks().len());
    assert_eq!(failures.failed_checks(), all_store_checks());
    let first = failures.failures[0].to_string();
    assert!(
        first.starts_with(
            "read_of_missing_node_is_not_found: expected a read of node \"broken-node-"
        ),
        "{first}"
    );
    assert!(
        first.ends_with(
            "never added, to fail with NotFound; saw the error \"store call failed and did \
             nothing: connection refused\""
        ),
        "{first}"
    );
    let harness_failure = failures
        .failures
        .iter()
        .find(|f| f.check == "agent_facts_read_back")
        .unwrap();
    assert!(
        harness_failure.seen.contains("harness error"),
        "{harness_failure}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_fails_every_check_in_time() {
    let failures = conformance::check_store(&Broken { hangs: true })
        .await
        .unwrap_err();
    assert_eq!(failures.failed_checks(), all_store_checks());
    for f in &failures.failures {
        assert_eq!(f.seen, "no answer", "{f}");
        assert!(f.expected.ends_with("to answer within 1s"), "{f}");
    }
}

// ---- the in-memory backend, and mutants ----------------------------------------------------

/// A backend harness over `B`, which is the in-memory backend or a flawed wrapper of it.
struct MemoryBackendHarness<B> {
    backend: B,
    memory: MemoryBackend<D>,
}

fn memory_backend() -> MemoryBackendHarness<MemoryBackend<D>> {
    let memory = MemoryBackend::new();
    MemoryBackendHarness {
        backend: memory.clone(),
        memory,
    }
}

#[async_trait]
impl<B: AttachBackend<D>> BackendHarness<D> for MemoryBackendHarness<B> {
    fn backend(&self) -> &dyn AttachBackend<D> {
        &self.backend
    }
    fn node(&self, n: usize) -> String {
        format!("node-{n}")
    }
    async fn volume(&self, n: usize, access: Access) -> Result<(String, String), HarnessError> {
        let (volume, handle) = (format!("vol-{n}"), format!("handle-{n}"));
        self.memory.set_spec(
            volume.clone(),
            VolumeSpec {
                access,
                payload: handle.clone(),
                attach_required: true,
                driver: None,
            },
        );
        Ok((volume, handle))
    }
}

#[tokio::test]
async fn memory_backend_conforms() {
    let harness = memory_backend();
    if let Err(failures) = conformance::check_backend(&harness).await {
        panic!("{failures}");
    }
    // Everything the suite attached, it detached.
    assert_eq!(harness.memory.attachments(), vec![]);
    for check in backend_checks::<D, MemoryBackendHarness<MemoryBackend<D>>>() {
        assert_eq!(check.run(&harness).await, Ok(()), "{check:?}");
    }
}

/// The in-memory backend with one call changed.
struct Flawed {
    memory: MemoryBackend<D>,
    /// Detaching a pair that is not attached is an error (not idempotent).
    detach_requires_attached: bool,
    /// Verify answers every volume it was asked about.
    verify_echoes: bool,
}

#[async_trait]
impl AttachBackend<D> for Flawed {
    async fn attach(
        &self,
        volume: &String,
        node: &String,
        payload: &String,
    ) -> Result<AttachInfo, BackendError<String>> {
        self.memory.attach(volume, node, payload).await
    }
    async fn detach(
        &self,
        volume: &String,
        node: &String,
        payload: &String,
    ) -> Result<(), BackendError<String>> {
        if self.detach_requires_attached && !self.memory.is_attached(volume, node) {
            return Err(BackendError::transient(
                "volume is not attached to this node",
            ));
        }
        self.memory.detach(volume, node, payload).await
    }
    async fn verify(
        &self,
        node: &String,
        volumes: &[(String, String)],
    ) -> Result<Vec<String>, BackendError<String>> {
        if self.verify_echoes {
            return Ok(volumes.iter().map(|(v, _)| v.clone()).collect());
        }
        self.memory.verify(node, volumes).await
    }
    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<String>> {
        self.memory.list().await
    }
}

async fn run_flawed(detach_requires_attached: bool, verify_echoes: bool) -> Vec<&'static str> {
    let memory = MemoryBackend::new();
    let harness = MemoryBackendHarness {
        backend: Flawed {
            memory: memory.clone(),
            detach_requires_attached,
            verify_echoes,
        },
        memory,
    };
    failed(conformance::check_backend(&harness).await)
}

#[tokio::test]
async fn catches_a_detach_of_an_unattached_pair_that_errors() {
    assert_eq!(
        run_flawed(true, false).await,
        ["detach_of_unattached_pair_succeeds"]
    );
}

#[tokio::test]
async fn catches_a_verify_that_answers_everything_asked() {
    assert_eq!(
        run_flawed(false, true).await,
        [
            "detach_removes_from_verify_and_list",
            "verify_answers_a_subset_of_what_was_asked",
        ]
    );
}

#[tokio::test]
async fn a_failing_backend_fails_every_check_without_a_panic() {
    struct Down;
    #[async_trait]
    impl AttachBackend<D> for Down {
        async fn attach(
            &self,
            _: &String,
            _: &String,
            _: &String,
        ) -> Result<AttachInfo, BackendError<String>> {
            Err(BackendError::uncertain("timeout"))
        }
        async fn detach(
            &self,
            _: &String,
            _: &String,
            _: &String,
        ) -> Result<(), BackendError<String>> {
            Err(BackendError::transient("unavailable"))
        }
        async fn verify(
            &self,
            _: &String,
            _: &[(String, String)],
        ) -> Result<Vec<String>, BackendError<String>> {
            Err(BackendError::transient("unavailable"))
        }
        async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<String>> {
            Err(BackendError::transient("unavailable"))
        }
    }
    let harness = MemoryBackendHarness {
        backend: Down,
        memory: MemoryBackend::new(),
    };
    let failures = conformance::check_backend(&harness).await.unwrap_err();
    assert_eq!(failures.failed_checks(), all_backend_checks());
    assert!(
        failures.to_string().starts_with(&format!(
            "{n} of {n} conformance checks failed\n  - attach_shows_in_verify_and_list: \
             expected attach of ",
            n = all_backend_checks().len()
        )),
        "{failures}"
    );
}
