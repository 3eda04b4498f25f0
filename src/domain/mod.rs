//! The identifiers an orchestrator brings: nodes, volumes, workloads and a per-volume payload,
//! and [`Name`](name::Name), interned names to use as ids.
//!
//! The ground floor: everything else is generic over [`Domain`], and this imports nothing
//! from the rest of the crate.

use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;

pub(crate) mod name;

/// An identifier the crate can store, compare, hash, order and send between tasks.
///
/// Ordering is required so that every plan the core makes comes out in the same order for the
/// same input: a failure then replays exactly. Kubernetes names (`String`), UUIDs and integers
/// all qualify without conversion.
pub trait Id: Clone + Eq + Hash + Ord + Debug + Send + Sync + 'static {}

impl<T: Clone + Eq + Hash + Ord + Debug + Send + Sync + 'static> Id for T {}

/// The vocabulary of one orchestrator: what a node, a volume and a workload are called, and the
/// per-volume data the attach backend needs (a CSI volume handle, a PV spec, a SAN LUN).
///
/// Bundling the four types in one trait keeps signatures short: every structure is generic over a
/// single `D: Domain`. Most users never implement it and write [`Ids`] instead. The supertraits
/// only let generic structures derive `Debug`, `Hash` and friends; the marker carries no data.
///
/// ```
/// use attach_detach::{Domain, Ids};
/// // Kubernetes-style names, with a CSI handle as payload.
/// type K8s = Ids<String, String, String, String>;
/// fn node_of(n: &<K8s as Domain>::Node) -> &str { n.as_str() }
/// assert_eq!(node_of(&"node-a".to_string()), "node-a");
/// ```
pub trait Domain:
    Clone + Debug + Default + PartialEq + Eq + Hash + PartialOrd + Ord + Send + Sync + 'static
{
    /// A node (machine) name or id.
    type Node: Id;
    /// A volume name or id, unique across the cluster.
    type Volume: Id;
    /// A workload (pod, allocation, task) name or id.
    type Workload: Id;
    /// Data the backend needs to attach or detach a volume; handed to it untouched. The core
    /// keeps one per volume and copies it only into the calls it plans (an attach or a
    /// detach, and a verify for each volume it names); for a large payload, an `Arc` makes
    /// those copies cheap.
    type Payload: Clone + Debug + PartialEq + Send + Sync + 'static;
}

/// A ready-made [`Domain`] from four types: `Ids<Node, Volume, Workload, Payload>`.
///
/// ```
/// use attach_detach::Ids;
/// type Nomad = Ids<u128, u128, u128, ()>; // UUIDs as integers, no payload
/// type Small = Ids<u32, u32, u32, ()>;    // compact ids for huge clusters
/// # let _ = (std::marker::PhantomData::<Nomad>, std::marker::PhantomData::<Small>);
/// ```
// A `fn() -> (..)` phantom keeps `Ids` Send, Sync and covariant whatever the four types are.
#[allow(clippy::type_complexity)]
pub struct Ids<N, V, W, P = ()>(PhantomData<fn() -> (N, V, W, P)>);

impl<N, V, W, P> Clone for Ids<N, V, W, P> {
    fn clone(&self) -> Self {
        Ids(PhantomData)
    }
}

impl<N, V, W, P> Debug for Ids<N, V, W, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ids")
    }
}

impl<N, V, W, P> PartialEq for Ids<N, V, W, P> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<N, V, W, P> Eq for Ids<N, V, W, P> {}

impl<N, V, W, P> Default for Ids<N, V, W, P> {
    fn default() -> Self {
        Ids(PhantomData)
    }
}

impl<N, V, W, P> Hash for Ids<N, V, W, P> {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl<N, V, W, P> PartialOrd for Ids<N, V, W, P> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<N, V, W, P> Ord for Ids<N, V, W, P> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<N, V, W, P> Domain for Ids<N, V, W, P>
where
    N: Id,
    V: Id,
    W: Id,
    P: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    type Node = N;
    type Volume = V;
    type Workload = W;
    type Payload = P;
}
