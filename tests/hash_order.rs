//! The core's decisions, and the order of what it plans and says, do not depend on how its ids
//! hash.
//!
//! The core keeps ids in hash tables. If it ever planned operations or raised events in a
//! table's iteration order, two runs of one history could differ: with [`Name`] ids (hashed by
//! address) from run to run, and with any id type whenever its hash changes. A failure would then
//! not replay. So the same seeded histories are driven with ids of five kinds that name the same
//! things, sort the same way and hash differently: `String`s (hashed by text), [`Name`]s interned
//! in two different orders (hashed by address), and integers under two different hashes. Every
//! operation planned and every event raised, as text, must be the same in all five.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use attach_detach::config::Config;
use attach_detach::core::{Input, NodeFacts, Operation, Reconciler, VolumeSpec};
use attach_detach::traits::{
    AttachInfo, BackendAttachment, BackendError, MachineState, NodeStatus, ReportedVolume,
    Revision, StoreError,
};
use attach_detach::{Domain, Ids, Name};

const NODES: u32 = 4;
const VOLUMES: u32 = 8;
const WORKLOADS: u32 = 10;

/// The three ids of one kind, made from numbers. Names are zero-padded, so that every kind
/// sorts the same way.
trait Kind: Domain<Payload = ()> {
    fn node(n: u32) -> Self::Node;
    fn volume(v: u32) -> Self::Volume;
    fn workload(w: u32) -> Self::Workload;
}

fn text(prefix: char, n: u32) -> String {
    format!("{prefix}-{n:03}")
}

type Strings = Ids<String, String, String, ()>;
impl Kind for Strings {
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

type Names = Ids<Name, Name, Name, ()>;
impl Kind for Names {
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

/// An integer id printed and ordered as the names are, and hashed through a bijection `M`
/// picks: with `M` = 1 nearby ids hash nearby, with the other they are scattered.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Salted<const M: u64>(char, u32);

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

type Plain = Ids<Salted<1>, Salted<1>, Salted<1>, ()>;
type Scattered = Ids<
    Salted<0x9e37_79b9_7f4a_7c15>,
    Salted<0x9e37_79b9_7f4a_7c15>,
    Salted<0x9e37_79b9_7f4a_7c15>,
    (),
>;
impl<const M: u64> Kind for Ids<Salted<M>, Salted<M>, Salted<M>, ()> {
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

/// splitmix64: the history's only source of choice.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }

    fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent
    }
}

/// What the backend and the store hold, in ordered maps (the harness must not bring a hash
/// order of its own).
struct World<D: Domain> {
    attached: BTreeSet<(D::Volume, D::Node)>,
    stored: BTreeMap<D::Node, (Vec<ReportedVolume<D>>, u64)>,
    in_use: BTreeMap<D::Node, Vec<D::Volume>>,
    fenced: BTreeSet<D::Node>,
}

impl<D: Domain> World<D> {
    fn status(&self, node: &D::Node) -> NodeStatus<D> {
        let (attached, revision) = self.stored.get(node).cloned().unwrap_or_default();
        NodeStatus {
            attached,
            in_use: Some(self.in_use.get(node).cloned().unwrap_or_default()),
            fenced: Some(self.fenced.contains(node)),
            healthy: Some(!self.fenced.contains(node)),
            revision: Revision::from(revision),
        }
    }
}

fn spec(v: u32) -> VolumeSpec<()> {
    if v % 3 == 2 {
        VolumeSpec::multi_node(())
    } else {
        VolumeSpec::single_node(())
    }
}

/// Drives one seeded history through a core with ids of kind `D` and returns, as text, every
/// operation it planned and every event it raised, in order.
fn history<D: Kind>(seed: u64, steps: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut trace = Vec::new();
    let config = Config {
        stuck_after: Duration::from_secs(30),
        ..Config::default()
    };
    let mut core: Reconciler<D> = Reconciler::new(config);
    let mut world = World::<D> {
        attached: BTreeSet::new(),
        stored: BTreeMap::new(),
        in_use: BTreeMap::new(),
        fenced: BTreeSet::new(),
    };
    let mut running: Vec<Operation<D>> = Vec::new();
    let mut now = Duration::ZERO;
    let facts = |world: &World<D>, n: &D::Node| NodeFacts {
        healthy: !world.fenced.contains(n),
        fenced: world.fenced.contains(n),
        in_use: Some(world.in_use.get(n).cloned().unwrap_or_default()),
        attach_limit: None,
    };
    for v in 0..VOLUMES {
        core.handle(Input::SetVolume {
            volume: D::volume(v),
            spec: spec(v),
        })
        .unwrap();
    }
    for n in 0..NODES {
        let node = D::node(n);
        core.handle(Input::NodeUpdated {
            facts: facts(&world, &node),
            node,
        })
        .unwrap();
    }
    for _ in 0..steps {
        match rng.below(100) {
            0..=14 => {
                let count = 1 + rng.below(2);
                let volumes = (0..count).map(|_| D::volume(rng.below(VOLUMES))).collect();
                let taken = core.handle(Input::WorkloadScheduled {
                    workload: D::workload(rng.below(WORKLOADS)),
                    node: D::node(rng.below(NODES)),
                    volumes,
                });
                trace.push(format!("scheduled: {taken:?}"));
            }
            15..=24 => {
                let taken = core.handle(Input::WorkloadRemoved {
                    workload: D::workload(rng.below(WORKLOADS)),
                });
                trace.push(format!("removed: {taken:?}"));
            }
            25..=32 => {
                // A node agent's report: what it has mounted, sometimes fenced.
                let node = D::node(rng.below(NODES));
                let mounted: Vec<D::Volume> = world
                    .attached
                    .iter()
                    .filter(|(_, n)| *n == node)
                    .filter(|_| rng.chance(50))
                    .map(|(v, _)| v.clone())
                    .collect();
                world.in_use.insert(node.clone(), mounted);
                if rng.chance(10) {
                    world.fenced.insert(node.clone());
                } else if rng.chance(30) {
                    world.fenced.remove(&node);
                }
                let taken = core.handle(Input::NodeUpdated {
                    facts: facts(&world, &node),
                    node,
                });
                trace.push(format!("node: {taken:?}"));
            }
            33..=59 => {
                now += Duration::from_millis(u64::from(rng.below(3_000)));
                for op in core.poll(now) {
                    trace.push(format!("{op:?}"));
                    running.push(op);
                }
            }
            _ => {
                if running.is_empty() {
                    continue;
                }
                let op = running.remove(rng.below(running.len() as u32) as usize);
                let ok = rng.chance(80);
                let taken = finish(&mut core, &mut world, now, op, ok);
                trace.push(format!("finished: {taken}"));
            }
        }
        trace.extend(core.take_events().iter().map(|e| format!("{e:?}")));
        trace.push(format!("stuck: {:?}", core.stuck_detaches(now)));
    }
    trace
}

/// Hands `op`'s result to the core, as the backend and the store would (a failure when not
/// `ok`), and says how the core took it.
fn finish<D: Kind>(
    core: &mut Reconciler<D>,
    world: &mut World<D>,
    now: Duration,
    op: Operation<D>,
    ok: bool,
) -> String {
    let id = op.id();
    let failed = || BackendError::transient("harness");
    let taken = match op {
        Operation::Attach { volume, node, .. } => {
            if ok {
                world.attached.insert((volume, node));
            }
            core.attach_finished(now, id, ok.then(AttachInfo::default).ok_or_else(failed))
        }
        Operation::Detach { volume, node, .. } => {
            if ok {
                world.attached.remove(&(volume, node));
            }
            core.detach_finished(now, id, ok.then_some(()).ok_or_else(failed))
        }
        Operation::Verify { node, volumes, .. } => {
            let still = volumes
                .into_iter()
                .map(|(v, _)| v)
                .filter(|v| world.attached.contains(&(v.clone(), node.clone())))
                .collect();
            core.verify_finished(now, id, Ok(still))
        }
        Operation::CheckMachine { node, .. } => {
            let state = if world.fenced.contains(&node) {
                MachineState::Off
            } else {
                MachineState::Running
            };
            core.machine_checked(now, id, Ok(state))
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
                let entry = world.stored.entry(node).or_default();
                entry.0 = attached.to_vec();
                entry.1 += 1;
                Ok(Revision::from(entry.1))
            } else {
                Err(StoreError::transient("harness"))
            };
            core.status_written(now, id, result)
        }
        Operation::ReadStatus { node, .. } => core.status_read(now, id, Ok(world.status(&node))),
        Operation::ListStatuses { .. } => {
            let statuses = world
                .stored
                .keys()
                .map(|n| (n.clone(), world.status(n)))
                .collect();
            core.statuses_listed(now, id, Ok(statuses))
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
            core.list_finished(now, id, Ok(list))
        }
    };
    format!("{taken:?}")
}

/// Interns every name of the history in reverse, with other names made and kept between them,
/// so that the `Name`s' addresses (and their hash order) differ from a run that interns them as
/// the history first names them.
fn names_interned_in_another_order() -> Vec<Name> {
    let mut kept = Vec::new();
    for i in (0..WORKLOADS.max(VOLUMES).max(NODES)).rev() {
        kept.push(Name::from(format!("padding-{i}")));
        kept.push(Names::workload(i));
        kept.push(Names::volume(i));
        kept.push(Names::node(i));
    }
    kept
}

#[test]
fn the_same_history_plans_the_same_whatever_the_ids_hash_order() {
    let mut planned = 0;
    for seed in 0..60u64 {
        let strings = history::<Strings>(seed, 400);
        planned += strings.iter().filter(|l| l.starts_with("Attach")).count();
        let kinds = [
            ("names, as first named", history::<Names>(seed, 400)),
            ("names, interned in reverse", {
                let _kept = names_interned_in_another_order();
                history::<Names>(seed, 400)
            }),
            ("integers hashed in order", history::<Plain>(seed, 400)),
            ("integers hashed scattered", history::<Scattered>(seed, 400)),
        ];
        for (kind, trace) in kinds {
            if let Some(at) =
                (0..strings.len().max(trace.len())).find(|&i| strings.get(i) != trace.get(i))
            {
                panic!(
                    "seed {seed}: with {kind}, line {at} differs from the run with strings:\n\
                     strings: {:?}\n{kind}: {:?}",
                    strings.get(at),
                    trace.get(at)
                );
            }
        }
    }
    // The histories do something: attaches are planned, and more than a few.
    assert!(planned > 300, "{planned} attaches planned in 60 histories");
}
