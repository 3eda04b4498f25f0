//! Where everything lives in etcd: one prefix, one key per fact, each written by its owner.
//!
//! ```text
//! {prefix}/cluster/node/{node}        the orchestrator: the node exists (any value)
//! {prefix}/cluster/volume/{volume}    the orchestrator: {"access":"single-node"|"multi-node","payload":...}
//! {prefix}/cluster/workload/{w}       the orchestrator: {"node":"n1","volumes":["v1",...]}
//! {prefix}/cluster/in-use/{node}      the node agent: ["v1",...], what it mounts (absent: never reported)
//! {prefix}/cluster/alive/{node}       the node agent, bound to its lease: present while it answers
//! {prefix}/cluster/fence/{node}       the fencing agent or an operator: present once the node is fenced
//! {prefix}/attached/{node}            the controller: [{"volume":"v1","device":"/dev/..."}]
//! {prefix}/leader/...                 the election of controller replicas
//! {prefix}/cloud/{volume}             SimulatedCloud (examples, tests): where the volume is attached
//! {prefix}/violations/{id}            SimulatedCloud: an invariant it saw broken, as text
//! ```
//!
//! Everything the controller takes as input is under `{prefix}/cluster/`, so one prefix watch
//! sees every change and none of the controller's own writes. The id is the rest of the key
//! after its kind's prefix, so an id may contain any character, `/` included.
//!
//! A node's status (what [`NodeStatusStore::read`](attach_detach::traits::NodeStatusStore::read)
//! returns) is its `attached`, `in-use`, `fence` and `alive` keys read in one transaction; its
//! revision is the `attached` key's `mod_revision` (0 while the controller never wrote it).

/// The kinds of key under the layout's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// `cluster/node/{node}`: the node exists.
    Node,
    /// `cluster/volume/{volume}`: a volume's access mode and payload.
    Volume,
    /// `cluster/workload/{workload}`: where a workload runs and what it uses.
    Workload,
    /// `cluster/in-use/{node}`: what the node agent mounts.
    InUse,
    /// `cluster/alive/{node}`: the node agent's liveness key.
    Alive,
    /// `cluster/fence/{node}`: the node is fenced.
    Fence,
    /// `attached/{node}`: the controller's attached list.
    Attached,
    /// `cloud/{volume}`: the attachment record of [`SimulatedCloud`](crate::SimulatedCloud), a
    /// stand-in for a cloud in examples and tests. Outside `cluster/`: not a controller input.
    Cloud,
    /// `violations/{id}`: an invariant [`SimulatedCloud`](crate::SimulatedCloud) saw broken.
    Violation,
}

impl KeyKind {
    /// Every kind, in a fixed order.
    pub const ALL: [KeyKind; 9] = [
        KeyKind::Node,
        KeyKind::Volume,
        KeyKind::Workload,
        KeyKind::InUse,
        KeyKind::Alive,
        KeyKind::Fence,
        KeyKind::Attached,
        KeyKind::Cloud,
        KeyKind::Violation,
    ];

    fn segment(self) -> &'static str {
        match self {
            KeyKind::Node => "cluster/node/",
            KeyKind::Volume => "cluster/volume/",
            KeyKind::Workload => "cluster/workload/",
            KeyKind::InUse => "cluster/in-use/",
            KeyKind::Alive => "cluster/alive/",
            KeyKind::Fence => "cluster/fence/",
            KeyKind::Attached => "attached/",
            KeyKind::Cloud => "cloud/",
            KeyKind::Violation => "violations/",
        }
    }
}

/// The key layout under one prefix. Several controllers (or test runs) share an etcd by
/// using different prefixes.
///
/// ```
/// use attach_detach_etcd::{KeyKind, KeyLayout};
/// let layout = KeyLayout::new("/ad");
/// assert_eq!(layout.key(KeyKind::Attached, "node-a"), b"/ad/attached/node-a");
/// assert_eq!(layout.parse(b"/ad/cluster/in-use/rack1/node-a"), Some((KeyKind::InUse, "rack1/node-a")));
/// assert_eq!(layout.parse(b"/other/attached/node-a"), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    /// Ends with `/`.
    prefix: String,
}

impl KeyLayout {
    /// The layout under `prefix` (a trailing `/` is added if missing).
    pub fn new(prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        KeyLayout { prefix }
    }

    /// The prefix, ending with `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of `id` of `kind`.
    pub fn key(&self, kind: KeyKind, id: &str) -> Vec<u8> {
        let mut key = self.range(kind);
        key.extend_from_slice(id.as_bytes());
        key
    }

    /// The prefix of every key of `kind` (for a range read or a watch with a prefix).
    pub fn range(&self, kind: KeyKind) -> Vec<u8> {
        let segment = kind.segment();
        let mut key = Vec::with_capacity(self.prefix.len() + segment.len() + 16);
        key.extend_from_slice(self.prefix.as_bytes());
        key.extend_from_slice(segment.as_bytes());
        key
    }

    /// The prefix of every key the controller takes as input (`{prefix}/cluster/`).
    pub fn cluster(&self) -> Vec<u8> {
        format!("{}cluster/", self.prefix).into_bytes()
    }

    /// The election's name (`{prefix}/leader`): replicas campaign under it.
    pub fn election(&self) -> Vec<u8> {
        format!("{}leader", self.prefix).into_bytes()
    }

    /// The kind and id of `key`, or `None` for a key outside the layout (or not UTF-8).
    pub fn parse<'k>(&self, key: &'k [u8]) -> Option<(KeyKind, &'k str)> {
        let rest = key.strip_prefix(self.prefix.as_bytes())?;
        KeyKind::ALL.into_iter().find_map(|kind| {
            let id = rest.strip_prefix(kind.segment().as_bytes())?;
            Some((kind, std::str::from_utf8(id).ok()?))
        })
    }
}

impl Default for KeyLayout {
    /// The layout under `/attach-detach/`.
    fn default() -> Self {
        KeyLayout::new("/attach-detach")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_no_kind_shadows_another() {
        let layout = KeyLayout::new("/p/");
        for kind in KeyKind::ALL {
            for id in ["n1", "a/b", "", "volume/x"] {
                assert_eq!(
                    layout.parse(&layout.key(kind, id)),
                    Some((kind, id)),
                    "{kind:?} {id}"
                );
            }
        }
        assert_eq!(layout.parse(b"/p/cluster/unknown/x"), None);
        assert_eq!(layout.parse(b"/p/leader/abc"), None);
        assert_eq!(layout.parse(&[b'/', b'p', b'/', b'a', b't', 0xff]), None);
        assert!(
            layout
                .key(KeyKind::Node, "x")
                .starts_with(&layout.cluster())
        );
        for kind in [KeyKind::Attached, KeyKind::Cloud, KeyKind::Violation] {
            assert!(
                !layout.key(kind, "x").starts_with(&layout.cluster()),
                "{kind:?}"
            );
        }
        assert_eq!(KeyLayout::new("/p"), layout);
    }
}
