//! One history driven through cores whose ids are of different kinds, and compared line by line.
//!
//! The core is generic over its ids, and some of its paths are taken for one kind only: a list
//! of [`Name`]s is searched by pointer equality and a node's next status list of them is edited
//! from its older one, picked by type. The core also keeps ids in hash tables; had it ever
//! planned or said anything in a table's iteration order, two runs of one history would differ
//! whenever the hash did (with `Name`s, hashed by address, from run to run). So the same
//! history is driven with five kinds of ids that name the same things, sort the same way and
//! hash differently: `String`s (hashed by text), `Name`s interned in two different orders
//! (hashed by address), and integers under two different hashes. Every operation planned,
//! every answer to an input and every event raised, as text, must be the same in all five.
//!
//! A history schedules and removes workloads, has node agents report what they mount and
//! nodes fenced, polls the core, hands back results (a fifth of them failures) in any order,
//! and restarts the controller, whose new core recovers from the store's and the backend's
//! listings. The choices it makes come from a [`Choices`]: a seeded generator for the tests
//! ([`Seeded`]), or the fuzzer's bytes ([`FromBytes`]), so that coverage steers it toward the
//! paths one kind alone takes (a node holding more names than the pointer walk covers, say).
//!
//! ```
//! use attach_detach::sim::id_kinds::{Seeded, Shape, compare_kinds, history_config};
//! let planned = compare_kinds(|| Seeded::new(7), Shape::default(), &history_config()).unwrap();
//! assert!(planned.attaches > 0);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::config::Config;
use crate::core::{Input, NodeFacts, Operation, Outcome, Reconciler, VolumeSpec};
use crate::testkit::{FakeStore, Harness, Held, node_status};
use crate::traits::{
    AttachInfo, BackendAttachment, BackendError, MachineState, NodeStatus, StoreError,
};
use crate::{Domain, Ids, Name};

/// How large a history's world is, and how many steps it takes at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Nodes `n-000` and on; at least one is used.
    pub nodes: u32,
    /// Volumes `v-000` and on, every third one multi-node; at least one is used.
    pub volumes: u32,
    /// Workloads `w-000` and on; at least one is used.
    pub workloads: u32,
    /// The most volumes one workload uses (at least one).
    pub volumes_per_workload: u32,
    /// Steps taken, unless the choices run out first.
    pub steps: usize,
}

impl Default for Shape {
    /// Four nodes, eight volumes, ten workloads of one or two volumes, 400 steps: small enough
    /// that the history keeps meeting itself (moves, Multi-Attach, fencing).
    fn default() -> Self {
        Shape {
            nodes: 4,
            volumes: 8,
            workloads: 10,
            volumes_per_workload: 2,
            steps: 400,
        }
    }
}

impl Shape {
    /// Every count at least one, so that a choice among them always has something to pick.
    fn at_least_one(self) -> Self {
        Shape {
            nodes: self.nodes.max(1),
            volumes: self.volumes.max(1),
            workloads: self.workloads.max(1),
            volumes_per_workload: self.volumes_per_workload.max(1),
            steps: self.steps,
        }
    }
}

/// Where a history's choices come from. `None` ends the history where it is.
pub trait Choices {
    /// A number below `n` (`n` is at least one).
    fn below(&mut self, n: u32) -> Option<u32>;

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u32) -> Option<bool> {
        Some(self.below(100)? < percent)
    }
}

/// Choices from a seed (splitmix64): a history of any length that replays from its seed.
#[derive(Debug, Clone)]
pub struct Seeded(u64);

impl Seeded {
    /// The choices of `seed`.
    pub fn new(seed: u64) -> Self {
        Seeded(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

impl Choices for Seeded {
    fn below(&mut self, n: u32) -> Option<u32> {
        Some((self.next() % u64::from(n.max(1))) as u32)
    }
}

/// Choices read from bytes, one a choice below 256 and two above; the history ends with them.
#[derive(Debug, Clone)]
pub struct FromBytes<'a>(&'a [u8]);

impl<'a> FromBytes<'a> {
    /// The choices `bytes` make.
    pub fn new(bytes: &'a [u8]) -> Self {
        FromBytes(bytes)
    }

    fn byte(&mut self) -> Option<u32> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(u32::from(first))
    }
}

impl Choices for FromBytes<'_> {
    fn below(&mut self, n: u32) -> Option<u32> {
        let n = n.max(1);
        let raw = if n <= 256 {
            self.byte()?
        } else {
            self.byte()? << 8 | self.byte()?
        };
        Some(raw % n)
    }
}

/// Choices from `first` while it lasts, then at most `more` from `then`. The fuzzer's bytes
/// begin a history and a seed carries it on: bytes alone rarely take a node past the 64 names
/// the core's pointer walk of a list of [`Name`]s covers, since every report a node makes
/// spends a byte on each volume attached there.
///
/// ```
/// use attach_detach::sim::id_kinds::{Choices, FromBytes, Seeded, Then};
/// let mut c = Then::new(FromBytes::new(&[3]), Seeded::new(1), 2);
/// assert_eq!(c.below(10), Some(3));
/// assert!(c.below(10).is_some() && c.below(10).is_some());
/// assert_eq!(c.below(10), None, "both spent");
/// ```
#[derive(Debug, Clone)]
pub struct Then<A, B> {
    first: Option<A>,
    then: B,
    more: u32,
}

impl<A, B> Then<A, B> {
    /// `first`'s choices, then `more` of `then`'s.
    pub fn new(first: A, then: B, more: u32) -> Self {
        Then {
            first: Some(first),
            then,
            more,
        }
    }
}

impl<A: Choices, B: Choices> Choices for Then<A, B> {
    fn below(&mut self, n: u32) -> Option<u32> {
        if let Some(first) = &mut self.first {
            match first.below(n) {
                Some(choice) => return Some(choice),
                // Spent: never asked again, even for a smaller choice it could still make.
                None => self.first = None,
            }
        }
        self.more = self.more.checked_sub(1)?;
        self.then.below(n)
    }
}

/// The three ids of one kind, made from numbers. Texts are zero-padded, so that every kind
/// sorts the same way.
pub trait Kind: Domain<Payload = ()> {
    /// What the kind is, for a divergence's message.
    const KIND: &'static str;
    /// Node `n`.
    fn node(n: u32) -> Self::Node;
    /// Volume `v`.
    fn volume(v: u32) -> Self::Volume;
    /// Workload `w`.
    fn workload(w: u32) -> Self::Workload;
}

fn text(prefix: char, n: u32) -> String {
    format!("{prefix}-{n:03}")
}

/// Ids as `String`s, hashed by their text.
pub type Strings = Ids<String, String, String, ()>;

impl Kind for Strings {
    const KIND: &'static str = "strings";
    fn node(n: u32) -> String {
        text('n', n)
    }
    fn volume(v: u32) -> String {
        text('v', v)
    }
    fn workload(w: u32) -> String {
        text('w', w)
    }
}

/// Ids as interned [`Name`]s, hashed by address.
pub type Names = Ids<Name, Name, Name, ()>;

impl Kind for Names {
    const KIND: &'static str = "names";
    fn node(n: u32) -> Name {
        Name::from(text('n', n))
    }
    fn volume(v: u32) -> Name {
        Name::from(text('v', v))
    }
    fn workload(w: u32) -> Name {
        Name::from(text('w', w))
    }
}

/// An integer id printed and ordered as the texts are, and hashed through a bijection `M`
/// picks: with `M` = 1 nearby ids hash nearby, with the other they are scattered.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Salted<const M: u64>(char, u32);

impl<const M: u64> Hash for Salted<M> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from(self.1).wrapping_mul(M) ^ u64::from(self.0));
    }
}

impl<const M: u64> fmt::Debug for Salted<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&text(self.0, self.1), f)
    }
}

/// Integer ids hashed in their order.
pub type Plain = Ids<Salted<1>, Salted<1>, Salted<1>, ()>;

/// Integer ids hashed all over.
pub type Scattered = Ids<
    Salted<0x9e37_79b9_7f4a_7c15>,
    Salted<0x9e37_79b9_7f4a_7c15>,
    Salted<0x9e37_79b9_7f4a_7c15>,
    (),
>;

impl<const M: u64> Kind for Ids<Salted<M>, Salted<M>, Salted<M>, ()> {
    const KIND: &'static str = if M == 1 {
        "integers hashed in order"
    } else {
        "integers hashed scattered"
    };
    fn node(n: u32) -> Salted<M> {
        Salted('n', n)
    }
    fn volume(v: u32) -> Salted<M> {
        Salted('v', v)
    }
    fn workload(w: u32) -> Salted<M> {
        Salted('w', w)
    }
}

/// What the backend and the store hold, in ordered maps (the harness must not bring a hash
/// order of its own).
struct World<D: Domain> {
    attached: BTreeSet<(D::Volume, D::Node)>,
    /// The lists and revisions; the agents' facts are the maps below.
    stored: FakeStore<D>,
    in_use: BTreeMap<D::Node, Vec<D::Volume>>,
    fenced: BTreeSet<D::Node>,
    /// The workloads the core took, by number: what an orchestrator's informers list again
    /// to a restarted core.
    scheduled: BTreeMap<u32, (u32, Vec<u32>)>,
}

impl<D: Domain> World<D> {
    fn status(&self, node: &D::Node) -> NodeStatus<D> {
        let attached = (self.stored.nodes.get(node)).map_or_else(Vec::new, |n| n.attached.clone());
        node_status(attached, &self.facts(node), self.stored.revision(node))
    }

    fn facts(&self, node: &D::Node) -> NodeFacts<D::Volume> {
        NodeFacts {
            healthy: !self.fenced.contains(node),
            fenced: self.fenced.contains(node),
            in_use: Some(self.in_use.get(node).cloned().unwrap_or_default()),
            attach_limit: None,
            driver_limits: Vec::new(),
        }
    }
}

/// The configuration of the histories the tests compare: the defaults, with detaches named
/// stuck after 30 s so that the histories reach that report too.
pub fn history_config() -> Config {
    Config {
        stuck_after: Duration::from_secs(30),
        ..Config::default()
    }
}

fn spec(v: u32) -> VolumeSpec<()> {
    if v % 3 == 2 {
        VolumeSpec::multi_node(())
    } else {
        VolumeSpec::single_node(())
    }
}

/// Drives one history, its choices taken from `choices`, through a core with ids of kind `D`
/// configured by `config`, and returns as text every operation it planned, every answer to an
/// input or a result and every event it raised, in order.
pub fn history<D: Kind>(choices: &mut impl Choices, shape: Shape, config: &Config) -> Vec<String> {
    let shape = shape.at_least_one();
    let mut trace = Vec::new();
    let world = World::<D> {
        attached: BTreeSet::new(),
        // A status is created by its first write, as an annotation is.
        stored: FakeStore::new(true),
        in_use: BTreeMap::new(),
        fenced: BTreeSet::new(),
        scheduled: BTreeMap::new(),
    };
    let mut h = Harness::with_world(Reconciler::new(config.clone()), world);
    tell_everything(&mut h, shape, &mut trace);
    // The calls under way, answered in the order the choices pick.
    let mut running: Held<D> = Held::default();
    for _ in 0..shape.steps {
        let step = step(&mut h, &mut running, choices, (shape, config));
        let Some(line) = step else {
            break;
        };
        trace.extend(line);
        trace.extend(h.core.take_events().iter().map(|e| format!("{e:?}")));
        trace.push(format!("stuck: {:?}", h.core.stuck_detaches(h.now)));
    }
    trace
}

/// What the orchestrator tells a core as it starts: every volume, every node with what its
/// agent last reported, and every workload the core took before (none, at the first start).
fn tell_everything<D: Kind>(h: &mut Harness<D, World<D>>, shape: Shape, trace: &mut Vec<String>) {
    let (core, world) = (&mut h.core, &h.world);
    for v in 0..shape.volumes {
        let taken = core.handle(Input::SetVolume {
            volume: D::volume(v),
            spec: spec(v),
        });
        trace.push(format!("volume: {taken:?}"));
    }
    for n in 0..shape.nodes {
        let node = D::node(n);
        let taken = core.handle(Input::NodeUpdated {
            facts: world.facts(&node),
            node,
        });
        trace.push(format!("node: {taken:?}"));
    }
    for (w, (n, volumes)) in &world.scheduled {
        let taken = core.handle(schedule::<D>(*w, *n, volumes));
        trace.push(format!("scheduled again: {taken:?}"));
    }
}

fn schedule<D: Kind>(workload: u32, node: u32, volumes: &[u32]) -> Input<D> {
    Input::WorkloadScheduled {
        workload: D::workload(workload),
        node: D::node(node),
        volumes: volumes.iter().map(|v| D::volume(*v)).collect(),
    }
}

/// One step of a history: an input, a poll, a result or a restart. `None` when the choices
/// ran out.
fn step<D: Kind>(
    h: &mut Harness<D, World<D>>,
    running: &mut Held<D>,
    choices: &mut impl Choices,
    (shape, config): (Shape, &Config),
) -> Option<Vec<String>> {
    Some(match choices.below(100)? {
        0..=14 => {
            let count = 1 + choices.below(shape.volumes_per_workload)?;
            let mut volumes = Vec::new();
            for _ in 0..count {
                volumes.push(choices.below(shape.volumes)?);
            }
            let workload = choices.below(shape.workloads)?;
            let node = choices.below(shape.nodes)?;
            let taken = h.handle(schedule::<D>(workload, node, &volumes));
            if taken.is_ok() {
                h.world.scheduled.insert(workload, (node, volumes));
            }
            vec![format!("scheduled: {taken:?}")]
        }
        15..=24 => {
            let workload = choices.below(shape.workloads)?;
            let taken = h.handle(Input::WorkloadRemoved {
                workload: D::workload(workload),
            });
            if taken.is_ok() {
                h.world.scheduled.remove(&workload);
            }
            vec![format!("removed: {taken:?}")]
        }
        25 => {
            // The controller restarts: the calls it awaited are lost before they reach the
            // backend or the store, and a new core recovers from their listings, told again
            // what the orchestrator holds.
            running.take_all();
            h.core = Reconciler::new(config.clone());
            let mut lines = vec!["restart".to_string()];
            tell_everything(h, shape, &mut lines);
            lines
        }
        26..=32 => {
            // A node agent's report: what it has mounted, sometimes fenced.
            let node = D::node(choices.below(shape.nodes)?);
            let world = &mut h.world;
            let mut mounted: Vec<D::Volume> = Vec::new();
            for (v, n) in &world.attached {
                if *n == node && choices.chance(50)? {
                    mounted.push(v.clone());
                }
            }
            world.in_use.insert(node.clone(), mounted);
            if choices.chance(10)? {
                world.fenced.insert(node.clone());
            } else if choices.chance(30)? {
                world.fenced.remove(&node);
            }
            let facts = world.facts(&node);
            let taken = h.handle(Input::NodeUpdated { facts, node });
            vec![format!("node: {taken:?}")]
        }
        33..=59 => {
            let at = h.now + Duration::from_millis(u64::from(choices.below(3_000)?));
            let mut lines = Vec::new();
            for op in h.poll_at(at) {
                lines.push(format!("{op:?}"));
                running.hold(at, op);
            }
            lines
        }
        _ => {
            if running.is_empty() {
                return Some(Vec::new());
            }
            let at = choices.below(running.len() as u32)? as usize;
            let ok = choices.chance(80)?;
            let op = running.take(at);
            vec![format!("finished: {}", finish(h, op, ok))]
        }
    })
}

/// Hands `op`'s result to the core, as the backend and the store would (a failure when not
/// `ok`), and says how the core took it.
fn finish<D: Kind>(h: &mut Harness<D, World<D>>, op: Operation<D>, ok: bool) -> String {
    let world = &mut h.world;
    let id = op.id();
    let failed = || BackendError::transient("harness");
    let outcome = match op {
        Operation::Attach { volume, node, .. } => {
            if ok {
                world.attached.insert((volume, node));
            }
            Outcome::Attach(ok.then(AttachInfo::default).ok_or_else(failed))
        }
        Operation::Detach { volume, node, .. } => {
            if ok {
                world.attached.remove(&(volume, node));
            }
            Outcome::Detach(ok.then_some(()).ok_or_else(failed))
        }
        Operation::Verify { node, volumes, .. } => {
            let still = volumes
                .into_iter()
                .map(|(v, _)| v)
                .filter(|v| world.attached.contains(&(v.clone(), node.clone())))
                .collect();
            Outcome::Verify(Ok(still))
        }
        Operation::CheckMachine { node, .. } => {
            let state = if world.fenced.contains(&node) {
                MachineState::Off
            } else {
                MachineState::Running
            };
            Outcome::CheckMachine(Ok(state))
        }
        Operation::WriteStatus {
            node,
            attached,
            expected,
            ..
        } => {
            let current = world.status(&node).revision;
            let result = if expected != current {
                Err(StoreError::conflict(current))
            } else if ok {
                world.stored.write(&node, &attached, &expected)
            } else {
                Err(StoreError::transient("harness"))
            };
            Outcome::WriteStatus(result.map(Into::into))
        }
        Operation::ReadStatus { node, .. } => Outcome::ReadStatus(Ok(world.status(&node))),
        Operation::ListStatuses { .. } => {
            let statuses = world
                .stored
                .nodes
                .keys()
                .map(|n| (n.clone(), world.status(n)))
                .collect();
            Outcome::ListStatuses(Ok(statuses))
        }
        Operation::ListAttachments { .. } => {
            let list = world
                .attached
                .iter()
                .map(|(v, n)| BackendAttachment {
                    volume: v.clone(),
                    node: n.clone(),
                    spec: VolumeSpec::single_node(()),
                })
                .collect();
            Outcome::List(Ok(list))
        }
    };
    let taken = h.finish(id, outcome);
    format!("{taken:?}")
}

/// Interns every name of `shape` in reverse, with other names made and kept between them, so
/// that the `Name`s' addresses (and their hash order) differ from a run that interns them as
/// the history first names them. The names live as long as what is returned.
fn names_interned_in_another_order(shape: Shape) -> Vec<Name> {
    let mut kept = Vec::new();
    for i in (0..shape.workloads.max(shape.volumes).max(shape.nodes)).rev() {
        kept.push(Name::from(format!("padding-{i}")));
        kept.push(Names::workload(i));
        kept.push(Names::volume(i));
        kept.push(Names::node(i));
    }
    kept
}

/// The first line at which a history with ids of one kind differs from the same history with
/// `String`s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "with {kind}, line {line} differs from the run with strings:\nstrings: {strings:?}\n{kind}: {other:?}"
)]
pub struct Divergence {
    /// The other kind of ids.
    pub kind: &'static str,
    /// The line's number, from zero.
    pub line: usize,
    /// The line with `String` ids; `None` past the end of that trace.
    pub strings: Option<String>,
    /// The line with the other ids; `None` past the end of that trace.
    pub other: Option<String>,
}

/// What the histories compared did, so that a caller can tell they did something.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planned {
    /// Lines in the `String` run's trace.
    pub lines: usize,
    /// Attaches planned in it.
    pub attaches: usize,
}

/// Drives the history of the choices `choices` makes (called once for each kind, each time
/// with the same choices) with every kind of ids, each core configured by `config`, and
/// compares each trace with the `String` run's, line by line.
pub fn compare_kinds<C: Choices>(
    choices: impl Fn() -> C,
    shape: Shape,
    config: &Config,
) -> Result<Planned, Divergence> {
    let strings = history::<Strings>(&mut choices(), shape, config);
    let planned = Planned {
        lines: strings.len(),
        attaches: strings.iter().filter(|l| l.starts_with("Attach")).count(),
    };
    let kinds = [
        (Names::KIND, history::<Names>(&mut choices(), shape, config)),
        ("names, interned in reverse", {
            let _kept = names_interned_in_another_order(shape.at_least_one());
            history::<Names>(&mut choices(), shape, config)
        }),
        (Plain::KIND, history::<Plain>(&mut choices(), shape, config)),
        (
            Scattered::KIND,
            history::<Scattered>(&mut choices(), shape, config),
        ),
    ];
    for (kind, trace) in kinds {
        if let Some(line) =
            (0..strings.len().max(trace.len())).find(|&i| strings.get(i) != trace.get(i))
        {
            return Err(Divergence {
                kind,
                line,
                strings: strings.get(line).cloned(),
                other: trace.get(line).cloned(),
            });
        }
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_make_choices_in_range_and_end_the_history_when_spent() {
        let mut c = FromBytes::new(&[7, 255, 1, 2, 3]);
        assert_eq!(c.below(5), Some(2));
        assert_eq!(c.below(256), Some(255));
        assert_eq!(c.below(1_000), Some(258), "bytes 1 and 2, high first");
        assert_eq!(c.below(1_000), None, "one byte left, two needed");
        let trace = history::<Strings>(
            &mut FromBytes::new(&[]),
            Shape::default(),
            &history_config(),
        );
        let setup = Shape::default().volumes + Shape::default().nodes;
        assert_eq!(
            trace.len(),
            setup as usize,
            "only the set-up: no choice to make"
        );
    }

    #[test]
    fn chained_choices_take_the_first_until_spent_then_as_many_more_as_allowed() {
        let mut c = Then::new(FromBytes::new(&[7, 9]), Seeded::new(5), 3);
        assert_eq!(c.below(10), Some(7));
        // One byte is left and two are needed: the bytes are spent, and stay so.
        let mut seeded = Seeded::new(5);
        assert_eq!(c.below(1_000), seeded.below(1_000));
        assert_eq!(c.below(10), seeded.below(10), "not the byte left over");
        assert_eq!(c.below(10), seeded.below(10));
        assert_eq!(c.below(10), None);
        // A history carried on by a seed is longer than its bytes alone make, and the same
        // on every run.
        let shape = Shape {
            steps: usize::MAX,
            ..Shape::default()
        };
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8];
        let config = history_config();
        let short = history::<Strings>(&mut FromBytes::new(&bytes), shape, &config);
        let carried = || Then::new(FromBytes::new(&bytes), Seeded::new(11), 2_000);
        let long = history::<Strings>(&mut carried(), shape, &config);
        assert!(
            long.len() > short.len() + 100,
            "{} against {}",
            long.len(),
            short.len()
        );
        assert_eq!(long, history::<Strings>(&mut carried(), shape, &config));
    }

    #[test]
    fn a_shape_of_zeros_still_has_one_of_each() {
        let shape = Shape {
            nodes: 0,
            volumes: 0,
            workloads: 0,
            volumes_per_workload: 0,
            steps: 50,
        };
        let trace = history::<Strings>(&mut Seeded::new(3), shape, &history_config());
        assert_eq!(trace[0], "volume: Ok(())", "volume v-000 is set up");
        assert_eq!(trace[1], "node: Ok(())", "node n-000 is set up");
        assert!(
            trace
                .iter()
                .any(|l| l.starts_with("Attach {")
                    && l.contains("volume: \"v-000\", node: \"n-000\"")),
            "a workload had v-000 attached to n-000: {trace:#?}"
        );
        compare_kinds(|| Seeded::new(3), shape, &history_config()).unwrap();
    }
}
