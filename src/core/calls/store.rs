//! Where each node's attached volumes are published for the node agents to read (Kubernetes:
//! `node.status.volumesAttached`), written with optimistic concurrency.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::core::calls::error::{ErrorSource, as_source, same_source, write_detail};
use crate::core::calls::reported_volumes::ReportedVolume;
use crate::domain::Domain;

/// A version of one node's status, for compare-and-set writes: an opaque token the store hands
/// out with a read and takes back with a write.
///
/// Revisions are compared for equality only. A writer holding a revision that is no longer the
/// node's current one learns it lost a race instead of silently overwriting a newer status; no
/// order is assumed, because the stores this crate targets promise none that a client may use:
/// Kubernetes requires clients to treat `resourceVersion` as an opaque string, and although
/// etcd's `mod_revision` grows, nothing here needs it to.
///
/// A revision holds either form without parsing it. Its identity is its text: a number is
/// equal to the text of its decimal digits, so `Revision::from(7)` equals `Revision::from("7")`
/// (but not `Revision::from("07")`), and they hash alike.
///
/// ```
/// use attach_detach::traits::Revision;
/// // An etcd mod_revision, a Kubernetes resourceVersion.
/// let etcd = Revision::from(1234_i64);
/// let kube = Revision::from("1234".to_string());
/// assert_eq!(etcd, kube);
/// assert_eq!(kube.text(), "1234");
/// assert_eq!(Revision::from("a1b2").to_string(), "a1b2");
/// ```
// Why two forms instead of always `Arc<str>`: integer stores (etcd, the in-memory store, the
// simulator) mint a revision per write, and keeping the number avoids an allocation for each
// one; text is shared, so a clone is a reference-count increment, never a copy.
#[derive(Clone)]
pub struct Revision(Repr);

#[derive(Clone)]
enum Repr {
    /// A non-negative number, kept as is (etcd's `mod_revision`, the in-memory counter).
    Number(u64),
    /// Anything else (Kubernetes' `resourceVersion`), shared between clones.
    Text(Arc<str>),
}

/// The longest decimal `u64`.
const DIGITS: usize = 20;

/// Writes `n` in decimal at the end of `buf` and returns the digits.
fn decimal(mut n: u64, buf: &mut [u8; DIGITS]) -> &str {
    let mut start = DIGITS;
    loop {
        start -= 1;
        // `n % 10` is a single digit: the cast cannot truncate.
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[start..]).expect("ASCII digits are UTF-8")
}

impl Revision {
    /// Calls `f` with the revision's text, without allocating.
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match &self.0 {
            Repr::Number(n) => f(decimal(*n, &mut [0; DIGITS])),
            Repr::Text(text) => f(text),
        }
    }

    /// The revision's text, as a store would send it back (Kubernetes: the `resourceVersion`
    /// of an update's precondition). Borrowed when the revision was made from text.
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Number(n) => Cow::Owned(n.to_string()),
            Repr::Text(text) => Cow::Borrowed(text),
        }
    }
}

#[cfg(all(test, feature = "driver"))]
impl Revision {
    /// For test doubles that mint numbered revisions: this one's number plus `n`.
    pub(crate) fn plus(&self, n: u64) -> Revision {
        let number: u64 = self.text().parse().expect("a numbered revision");
        Revision::from(number + n)
    }
}

impl PartialEq for Revision {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Number(a), Repr::Number(b)) => a == b,
            (Repr::Text(a), Repr::Text(b)) => a == b,
            _ => self.with_text(|a| other.with_text(|b| a == b)),
        }
    }
}

impl Eq for Revision {}

impl Hash for Revision {
    /// Hashes the text, so that equal revisions hash alike whatever form they were made from.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.with_text(|text| text.hash(state));
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Number(n) => write!(f, "{n}"),
            Repr::Text(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for Revision {
    /// `Revision("7")` whatever the form, as equal revisions should look alike.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|text| f.debug_tuple("Revision").field(&text).finish())
    }
}

impl From<u64> for Revision {
    fn from(n: u64) -> Self {
        Revision(Repr::Number(n))
    }
}

impl From<u32> for Revision {
    fn from(n: u32) -> Self {
        Revision(Repr::Number(n.into()))
    }
}

impl From<i64> for Revision {
    /// A negative number (no store is known to use one) is kept as its text.
    fn from(n: i64) -> Self {
        match u64::try_from(n) {
            Ok(n) => Revision(Repr::Number(n)),
            Err(_) => Revision(Repr::Text(n.to_string().into())),
        }
    }
}

impl From<i32> for Revision {
    /// Lets an untyped literal through (`Revision::from(7)`); a negative number is kept as its
    /// text.
    fn from(n: i32) -> Self {
        i64::from(n).into()
    }
}

impl From<String> for Revision {
    fn from(text: String) -> Self {
        Revision(Repr::Text(text.into()))
    }
}

impl From<&str> for Revision {
    fn from(text: &str) -> Self {
        Revision(Repr::Text(text.into()))
    }
}

impl From<Arc<str>> for Revision {
    /// Shares `text` without copying it.
    fn from(text: Arc<str>) -> Self {
        Revision(Repr::Text(text))
    }
}

/// A node's published attached volumes, with the revision to write against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus<D: Domain> {
    /// The volumes the node is told are attached.
    pub attached: Vec<ReportedVolume<D>>,
    /// What the node agent reports in use (Kubernetes `volumesInUse`, which lives in the same
    /// node status), when the store holds it: read fresh just before a detach, it closes the
    /// window in which the controller's own view of the node is older than a new mount.
    /// `None` when this store does not know.
    pub in_use: Option<Vec<D::Volume>>,
    /// Whether the node is fenced: known powered off or isolated, so that it can no longer
    /// write to its disks. Read fresh right before a forced detach, whose only justification it
    /// is: a fence lifted since the controller's view of the node was taken must stop the
    /// detach. `None` when this store does not know, in which case no forced detach goes ahead
    /// unless the in-use list shows the volume unused.
    ///
    /// A Kubernetes store derives it from the `node.kubernetes.io/out-of-service` taint on the
    /// Node object (present: `Some(true)`); an etcd store from a fence key that the fencing
    /// agent or the operator writes next to the node's status (adapters/etcd/README.md: the
    /// `cluster/fence/{node}` key).
    pub fenced: Option<bool>,
    /// Whether the node answers (Kubernetes: the Ready condition; etcd: the node agent's lease
    /// is alive). Read fresh before a detach forced by the unmount timeout, which is only
    /// allowed on an unhealthy node. `None` when this store does not know.
    pub healthy: Option<bool>,
    /// The revision this status was read at; pass it to
    /// [`NodeStatusStore::write`](crate::traits::NodeStatusStore::write).
    pub revision: Revision,
}

/// What a node's agent and its fencing say about it, read by the store in the same step as a
/// status write: the facts a fresh read would give a detach, without the read.
///
/// The fields mean what they mean in [`NodeStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusFacts<D: Domain> {
    /// As [`NodeStatus::in_use`].
    pub in_use: Option<Vec<D::Volume>>,
    /// As [`NodeStatus::fenced`].
    pub fenced: Option<bool>,
    /// As [`NodeStatus::healthy`].
    pub healthy: Option<bool>,
}

impl<D: Domain> NodeStatus<D> {
    /// The agent's and fencing's facts of this status, without its list and revision.
    pub fn facts(&self) -> StatusFacts<D> {
        StatusFacts {
            in_use: self.in_use.clone(),
            fenced: self.fenced,
            healthy: self.healthy,
        }
    }
}

/// A status write's answer from
/// [`NodeStatusStore::write_reading_facts`](crate::traits::NodeStatusStore::write_reading_facts):
/// the node's new revision and, when the store read them no earlier than the write, the node's
/// facts.
///
/// ```
/// use attach_detach::traits::{Revision, StatusFacts, WriteReceipt};
/// use attach_detach::Ids;
/// type D = Ids<String, String, String, ()>;
/// let plain = WriteReceipt::<D>::from(Revision::from(8));
/// assert_eq!(plain.facts, None);
/// let full = WriteReceipt::<D> {
///     revision: Revision::from(8),
///     facts: Some(StatusFacts { in_use: Some(vec![]), fenced: Some(false), healthy: Some(true) }),
/// };
/// assert_eq!(full.revision, plain.revision);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteReceipt<D: Domain> {
    /// The revision the write created, as
    /// [`NodeStatusStore::write`](crate::traits::NodeStatusStore::write) returns it.
    pub revision: Revision,
    /// The node's facts as of that revision or later; `None` when the store did not read them
    /// (the core then reads the node itself before any detach).
    pub facts: Option<StatusFacts<D>>,
}

impl<D: Domain> From<Revision> for WriteReceipt<D> {
    /// A receipt with no facts.
    fn from(revision: Revision) -> Self {
        WriteReceipt {
            revision,
            facts: None,
        }
    }
}

/// Why a store call failed, sorted by what the caller may assume about its effect.
///
/// A [`Conflict`](StoreError::Conflict), a [`NotFound`](StoreError::NotFound) or a
/// [`Transient`](StoreError::Transient) error changed nothing; after an
/// [`Uncertain`](StoreError::Uncertain) one (a write that timed out) the write may have landed,
/// so what the store holds is unknown until read again.
///
/// Each variant may carry the error the store's client failed with, returned by
/// [`source`](std::error::Error::source) and not repeated in the message. Build them with the
/// constructors; the variants have named fields so that a `match` can still sort them
/// (`StoreError::Conflict { current, .. }`).
///
/// Two errors are equal when they are of the same kind with the same fields and their sources
/// are both absent or both display the same text (the sources' own sources are not compared).
///
/// ```
/// use attach_detach::traits::{Revision, StoreError};
/// let e = StoreError::conflict(Revision::from(7));
/// assert_eq!(e.to_string(), "node status changed concurrently, current revision is 7");
///
/// let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 5s");
/// let e = StoreError::uncertain("writing node-a").with_source(timeout);
/// assert!(e.may_have_taken_effect());
/// assert_eq!(e.to_string(), "store call may have taken effect: writing node-a");
/// let source = std::error::Error::source(&e).unwrap();
/// assert_eq!(source.to_string(), "no answer in 5s");
/// assert!(matches!(e, StoreError::Uncertain { .. }));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// Someone else wrote first: re-read, recompute, retry. Nothing was written.
    #[non_exhaustive]
    Conflict {
        /// The revision the store holds now, when the store says (etcd can; Kubernetes
        /// answers a conflict without one).
        current: Option<Revision>,
        /// The store client's error.
        source: Option<ErrorSource>,
    },
    /// The node does not exist (any more). Nothing was written.
    #[non_exhaustive]
    NotFound {
        /// The store client's error.
        source: Option<ErrorSource>,
    },
    /// The call failed and did nothing; retry with backoff.
    #[non_exhaustive]
    Transient {
        /// The store's explanation.
        message: String,
        /// The store client's error.
        source: Option<ErrorSource>,
    },
    /// The call may have taken effect (a write that timed out, a lost response): the store may
    /// hold the new list or the old one, and only a fresh read tells.
    #[non_exhaustive]
    Uncertain {
        /// The store's explanation.
        message: String,
        /// The store client's error.
        source: Option<ErrorSource>,
    },
}

impl StoreError {
    /// Someone else wrote first; `current` is the revision the store holds now, if it said.
    pub fn conflict(current: impl Into<Option<Revision>>) -> Self {
        StoreError::Conflict {
            current: current.into(),
            source: None,
        }
    }

    /// The node does not exist.
    pub fn not_found() -> Self {
        StoreError::NotFound { source: None }
    }

    /// The call failed and did nothing.
    pub fn transient(message: impl Into<String>) -> Self {
        StoreError::Transient {
            message: message.into(),
            source: None,
        }
    }

    /// The call may have taken effect.
    pub fn uncertain(message: impl Into<String>) -> Self {
        StoreError::Uncertain {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source` (returned by
    /// [`source`](std::error::Error::source)). Anything that converts into a boxed error will
    /// do: an error value, a `Box<dyn Error + Send + Sync>`, a string.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn Error + Send + Sync + 'static>>,
    ) -> Self {
        let shared = Some(crate::core::calls::error::share(source));
        match &mut self {
            StoreError::Conflict { source, .. }
            | StoreError::NotFound { source }
            | StoreError::Transient { source, .. }
            | StoreError::Uncertain { source, .. } => *source = shared,
        }
        self
    }

    /// Whether the failed call may nevertheless have changed what the store holds: only an
    /// [`Uncertain`](StoreError::Uncertain) one may have.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self, StoreError::Uncertain { .. })
    }

    fn source_field(&self) -> &Option<ErrorSource> {
        match self {
            StoreError::Conflict { source, .. }
            | StoreError::NotFound { source }
            | StoreError::Transient { source, .. }
            | StoreError::Uncertain { source, .. } => source,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Conflict { current, .. } => {
                f.write_str("node status changed concurrently")?;
                match current {
                    Some(current) => write!(f, ", current revision is {current}"),
                    None => Ok(()),
                }
            }
            StoreError::NotFound { .. } => f.write_str("node not found"),
            StoreError::Transient { message, source } => {
                f.write_str("store call failed and did nothing")?;
                write_detail(f, message, source)
            }
            StoreError::Uncertain { message, source } => {
                f.write_str("store call may have taken effect")?;
                write_detail(f, message, source)
            }
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        as_source(self.source_field())
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        let same = match (self, other) {
            (StoreError::Conflict { current: a, .. }, StoreError::Conflict { current: b, .. }) => {
                a == b
            }
            (StoreError::NotFound { .. }, StoreError::NotFound { .. }) => true,
            (
                StoreError::Transient { message: a, .. },
                StoreError::Transient { message: b, .. },
            )
            | (
                StoreError::Uncertain { message: a, .. },
                StoreError::Uncertain { message: b, .. },
            ) => a == b,
            _ => false,
        };
        same && same_source(self.source_field(), other.source_field())
    }
}

impl Eq for StoreError {}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::io;
    use std::sync::Arc;

    use super::*;

    fn hash_of(r: &Revision) -> u64 {
        let mut h = DefaultHasher::new();
        r.hash(&mut h);
        h.finish()
    }

    #[test]
    fn revisions_equal_across_forms_by_their_text() {
        let forms = [
            Revision::from(42_u64),
            Revision::from(42_u32),
            Revision::from(42_i64),
            Revision::from(42),
            Revision::from("42"),
            Revision::from("42".to_string()),
            Revision::from(Arc::<str>::from("42")),
        ];
        for a in &forms {
            for b in &forms {
                assert_eq!(a, b);
                assert_eq!(hash_of(a), hash_of(b));
            }
            assert_eq!(a.to_string(), "42");
            assert_eq!(a.text(), "42");
            assert_eq!(format!("{a:?}"), "Revision(\"42\")");
        }
        // Opaque: no parsing, so other spellings of the number are other revisions.
        assert_ne!(Revision::from(42), Revision::from("042"));
        assert_ne!(Revision::from(42), Revision::from("42 "));
        assert_ne!(Revision::from(42), Revision::from(43));
        assert_ne!(Revision::from("a"), Revision::from("b"));
        assert_eq!(Revision::from(0_u64), Revision::from("0"));
        assert_eq!(
            Revision::from(u64::MAX),
            Revision::from(u64::MAX.to_string())
        );
        assert_eq!(
            hash_of(&Revision::from(u64::MAX)),
            hash_of(&Revision::from(u64::MAX.to_string()))
        );
        // A negative number is kept as text, and still equals its text.
        assert_eq!(Revision::from(-5_i64), Revision::from("-5"));
        assert_eq!(Revision::from(-5), Revision::from(-5_i64));
        assert_eq!(Revision::from(-5_i64).text(), "-5");
        // A clone of text shares it.
        let text = Revision::from("abc");
        assert!(matches!(text.text(), Cow::Borrowed("abc")));
        assert_eq!(text.clone(), text);
    }

    #[test]
    fn store_errors_display() {
        assert_eq!(StoreError::not_found().to_string(), "node not found");
        assert_eq!(
            StoreError::conflict(None).to_string(),
            "node status changed concurrently"
        );
        assert_eq!(
            StoreError::conflict(Revision::from("x7")).to_string(),
            "node status changed concurrently, current revision is x7"
        );
        assert_eq!(
            StoreError::transient("503").to_string(),
            "store call failed and did nothing: 503"
        );
        // The source is not repeated after a message...
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(
            StoreError::transient("503")
                .with_source(refused)
                .to_string(),
            "store call failed and did nothing: 503"
        );
        // ...but stands in for a missing one.
        assert_eq!(
            StoreError::uncertain("").with_source("lost").to_string(),
            "store call may have taken effect: lost"
        );
        assert_eq!(
            StoreError::uncertain("").to_string(),
            "store call may have taken effect"
        );
    }

    #[test]
    fn store_errors_keep_their_kind_and_source() {
        let io = || io::Error::new(io::ErrorKind::TimedOut, "deadline exceeded");
        let errors = [
            StoreError::conflict(Revision::from(3)).with_source(io()),
            StoreError::not_found().with_source(io()),
            StoreError::transient("read").with_source(io()),
            StoreError::uncertain("write").with_source(io()),
        ];
        for e in &errors {
            let source = e.source().expect("source kept");
            assert_eq!(source.to_string(), "deadline exceeded");
            // The concrete type survives, for a caller that wants to look closer.
            let io = source.downcast_ref::<io::Error>().expect("an io::Error");
            assert_eq!(io.kind(), io::ErrorKind::TimedOut);
            // Clones share it.
            assert!(e.clone().source().is_some());
        }
        assert!(matches!(
            &errors[0],
            StoreError::Conflict { current: Some(r), .. } if *r == Revision::from(3)
        ));
        assert!(matches!(errors[1], StoreError::NotFound { .. }));
        let effect: Vec<bool> = errors
            .iter()
            .map(StoreError::may_have_taken_effect)
            .collect();
        assert_eq!(effect, [false, false, false, true]);
        assert!(StoreError::not_found().source().is_none());
    }

    #[test]
    fn store_error_equality_is_kind_fields_and_source_text() {
        let io = |m: &str| io::Error::other(m.to_string());
        assert_eq!(StoreError::not_found(), StoreError::not_found());
        assert_eq!(StoreError::conflict(None), StoreError::conflict(None));
        assert_ne!(
            StoreError::conflict(None),
            StoreError::conflict(Revision::from(1))
        );
        assert_ne!(StoreError::transient("x"), StoreError::uncertain("x"));
        assert_ne!(StoreError::transient("x"), StoreError::transient("y"));
        // Sources: equal when both absent or both display alike, even if built separately.
        assert_eq!(
            StoreError::transient("x").with_source(io("a")),
            StoreError::transient("x").with_source(io("a"))
        );
        assert_ne!(
            StoreError::transient("x").with_source(io("a")),
            StoreError::transient("x").with_source(io("b"))
        );
        assert_ne!(
            StoreError::transient("x").with_source(io("a")),
            StoreError::transient("x")
        );
        let e = StoreError::not_found().with_source(io("gone"));
        assert_eq!(e.clone(), e);
    }
}
