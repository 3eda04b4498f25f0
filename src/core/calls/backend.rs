//! The storage system the controller drives: a cloud disk API, a CSI controller, a SAN.

use std::error::Error;
use std::fmt;

use crate::core::calls::error::{ErrorSource, as_source, same_source, write_detail};
use crate::core::calls::volume::VolumeSpec;
use crate::domain::Domain;

/// What a successful attach hands back for the node: how to find the volume there.
///
/// Kept deliberately small: the node agent needs the device path to mount; everything else the
/// backend knows stays inside the backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttachInfo {
    /// Where the volume shows up on the node (`/dev/disk/by-id/...`), if the backend knows.
    pub device: Option<String>,
}

/// One attachment as the backend reports it, so a restarted controller can rebuild its view of
/// the world from the source of truth instead of trusting a stale cache.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendAttachment<D: Domain> {
    /// The attached volume.
    pub volume: D::Volume,
    /// The node it is attached to.
    pub node: D::Node,
    /// The volume's access mode and payload, as the backend knows them.
    pub spec: VolumeSpec<D::Payload>,
}

/// Why a backend call failed, sorted by what the caller may assume about its effect.
///
/// The distinction matters: after a [`Transient`](BackendError::Transient) error the world is
/// unchanged and the call is simply retried, but after an [`Uncertain`](BackendError::Uncertain)
/// one the volume may be attached (or detached) and must be treated as such until verified.
///
/// Each variant may carry the error the backend's client failed with (the cloud SDK's, the gRPC
/// status), returned by [`source`](std::error::Error::source) and not repeated in the message.
/// Build them with the constructors; the variants have named fields so that a `match` can still
/// sort them (`BackendError::AttachedElsewhere { node, .. }`).
///
/// Two errors are equal when they are of the same kind with the same message (and node) and
/// their sources are both absent or both display the same text (the sources' own sources are
/// not compared).
///
/// ```
/// use attach_detach::traits::BackendError;
/// let e: BackendError<String> = BackendError::uncertain("timeout");
/// assert!(e.may_have_taken_effect());
/// assert_eq!(e.to_string(), "backend call may have taken effect: timeout");
///
/// // Keep the client's error as the source.
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let e: BackendError<String> = BackendError::transient("attach vol-1").with_source(refused);
/// assert_eq!(e.to_string(), "backend call failed and did nothing: attach vol-1");
/// let source = std::error::Error::source(&e).unwrap();
/// assert_eq!(source.to_string(), "connection refused");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendError<N> {
    /// The call certainly did nothing; retry with backoff.
    #[non_exhaustive]
    Transient {
        /// The backend's explanation.
        message: String,
        /// The backend client's error.
        source: Option<ErrorSource>,
    },
    /// The call may have taken effect (a timeout, a lost response): assume it did until verified.
    #[non_exhaustive]
    Uncertain {
        /// The backend's explanation.
        message: String,
        /// The backend client's error.
        source: Option<ErrorSource>,
    },
    /// The volume is attached to another node and cannot be attached here until detached there
    /// (Kubernetes' dangling-attach error). The controller should record that attachment.
    #[non_exhaustive]
    AttachedElsewhere {
        /// The node that holds the volume.
        node: N,
        /// The backend's explanation.
        message: String,
        /// The backend client's error.
        source: Option<ErrorSource>,
    },
    /// The node can hold no more volumes (a CSI `RESOURCE_EXHAUSTED` on attach, a cloud's
    /// "maximum number of disks attached"); nothing was attached. The core backs off attaches
    /// to that node, not the volume, and names the waiting workloads in an
    /// [`Event::NodeFull`](crate::core::Event::NodeFull).
    #[non_exhaustive]
    NodeFull {
        /// The backend's explanation.
        message: String,
        /// The backend client's error.
        source: Option<ErrorSource>,
    },
}

impl<N> BackendError<N> {
    /// The call certainly did nothing.
    pub fn transient(message: impl Into<String>) -> Self {
        BackendError::Transient {
            message: message.into(),
            source: None,
        }
    }

    /// The call may have taken effect.
    pub fn uncertain(message: impl Into<String>) -> Self {
        BackendError::Uncertain {
            message: message.into(),
            source: None,
        }
    }

    /// The volume is attached to `node`, so it was not attached here.
    pub fn attached_elsewhere(node: N, message: impl Into<String>) -> Self {
        BackendError::AttachedElsewhere {
            node,
            message: message.into(),
            source: None,
        }
    }

    /// The node can hold no more volumes; nothing was attached.
    pub fn node_full(message: impl Into<String>) -> Self {
        BackendError::NodeFull {
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
        *self.source_mut() = Some(crate::core::calls::error::share(source));
        self
    }

    /// The backend's explanation.
    pub fn message(&self) -> &str {
        match self {
            BackendError::Transient { message, .. }
            | BackendError::Uncertain { message, .. }
            | BackendError::AttachedElsewhere { message, .. }
            | BackendError::NodeFull { message, .. } => message,
        }
    }

    /// Whether the failed call may nevertheless have changed the backend's state.
    ///
    /// Only [`Uncertain`](BackendError::Uncertain) may have; a transient failure did nothing and
    /// an attached-elsewhere or node-full refusal attached nothing.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self, BackendError::Uncertain { .. })
    }

    fn source_field(&self) -> &Option<ErrorSource> {
        match self {
            BackendError::Transient { source, .. }
            | BackendError::Uncertain { source, .. }
            | BackendError::AttachedElsewhere { source, .. }
            | BackendError::NodeFull { source, .. } => source,
        }
    }

    fn source_mut(&mut self) -> &mut Option<ErrorSource> {
        match self {
            BackendError::Transient { source, .. }
            | BackendError::Uncertain { source, .. }
            | BackendError::AttachedElsewhere { source, .. }
            | BackendError::NodeFull { source, .. } => source,
        }
    }
}

impl<N: fmt::Debug> fmt::Display for BackendError<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Transient { .. } => f.write_str("backend call failed and did nothing")?,
            BackendError::Uncertain { .. } => f.write_str("backend call may have taken effect")?,
            BackendError::AttachedElsewhere { node, .. } => {
                write!(f, "volume is attached to another node {node:?}")?;
            }
            BackendError::NodeFull { .. } => {
                f.write_str("the node can hold no more volumes; nothing was attached")?;
            }
        }
        write_detail(f, self.message(), self.source_field())
    }
}

impl<N: fmt::Debug> Error for BackendError<N> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        as_source(self.source_field())
    }
}

impl<N: PartialEq> PartialEq for BackendError<N> {
    fn eq(&self, other: &Self) -> bool {
        let same_kind = match (self, other) {
            (BackendError::Transient { .. }, BackendError::Transient { .. })
            | (BackendError::Uncertain { .. }, BackendError::Uncertain { .. })
            | (BackendError::NodeFull { .. }, BackendError::NodeFull { .. }) => true,
            (
                BackendError::AttachedElsewhere { node: a, .. },
                BackendError::AttachedElsewhere { node: b, .. },
            ) => a == b,
            _ => false,
        };
        same_kind
            && self.message() == other.message()
            && same_source(self.source_field(), other.source_field())
    }
}

impl<N: Eq> Eq for BackendError<N> {}

/// What the backend says about the machine behind a node, for
/// [`AttachBackend::machine_state`](crate::traits::AttachBackend::machine_state).
///
/// Say [`Off`](MachineState::Off) only when the provider guarantees the machine cannot write
/// to any volume: a stopped, terminated or deleted instance, a powered-off server. Never for a
/// machine the provider merely cannot reach, nor one that is stopping: such a machine may still
/// be writing, and two answers of `Off` detach its volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MachineState {
    /// Powered off, terminated or gone at the provider: it cannot write.
    Off,
    /// Running (or starting, stopping, rebooting: anything that may write).
    Running,
    /// The backend cannot tell, or does not support the question.
    Unknown,
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[test]
    fn only_uncertain_may_have_taken_effect() {
        let transient = BackendError::<String>::transient("503");
        let uncertain = BackendError::<String>::uncertain("timeout");
        let elsewhere = BackendError::attached_elsewhere("node-b".to_string(), "in use");
        assert!(!transient.may_have_taken_effect());
        assert!(uncertain.may_have_taken_effect());
        assert!(!elsewhere.may_have_taken_effect());
        assert_eq!(
            transient.to_string(),
            "backend call failed and did nothing: 503"
        );
        assert_eq!(
            elsewhere.to_string(),
            "volume is attached to another node \"node-b\": in use"
        );
        assert_eq!(elsewhere.message(), "in use");
        assert!(matches!(
            &elsewhere,
            BackendError::AttachedElsewhere { node, .. } if node == "node-b"
        ));
    }

    #[test]
    fn backend_errors_keep_their_source() {
        let io = || io::Error::new(io::ErrorKind::TimedOut, "deadline exceeded");
        let errors = [
            BackendError::transient("attach").with_source(io()),
            BackendError::uncertain("attach").with_source(io()),
            BackendError::attached_elsewhere("node-b".to_string(), "attach").with_source(io()),
        ];
        for e in &errors {
            // Display says what failed, the source says why, once.
            assert!(e.to_string().ends_with(": attach"), "{e}");
            let source = e.source().expect("source kept");
            assert_eq!(source.to_string(), "deadline exceeded");
            let io = source.downcast_ref::<io::Error>().expect("an io::Error");
            assert_eq!(io.kind(), io::ErrorKind::TimedOut);
            assert!(e.clone().source().is_some());
        }
        assert!(BackendError::<String>::transient("x").source().is_none());

        // A chain: the source's own source is reachable too.
        let inner = BackendError::<String>::uncertain("grpc").with_source(io());
        let outer = BackendError::<String>::uncertain("attach vol-1").with_source(inner);
        let chain: Vec<String> =
            std::iter::successors(Some(&outer as &(dyn Error + 'static)), |e| (*e).source())
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            chain,
            [
                "backend call may have taken effect: attach vol-1",
                "backend call may have taken effect: grpc",
                "deadline exceeded",
            ]
        );

        // Without a message, the source's text stands in.
        let e = BackendError::<String>::transient("").with_source(io());
        assert_eq!(
            e.to_string(),
            "backend call failed and did nothing: deadline exceeded"
        );
        assert_eq!(
            BackendError::<String>::transient("").to_string(),
            "backend call failed and did nothing"
        );
    }

    #[test]
    fn backend_error_equality_is_kind_message_node_and_source_text() {
        type E = BackendError<String>;
        let io = |m: &str| io::Error::other(m.to_string());
        assert_eq!(E::transient("x"), E::transient("x"));
        assert_ne!(E::transient("x"), E::uncertain("x"));
        assert_ne!(E::transient("x"), E::transient("y"));
        assert_eq!(
            E::attached_elsewhere("b".into(), "x"),
            E::attached_elsewhere("b".into(), "x")
        );
        assert_ne!(
            E::attached_elsewhere("b".into(), "x"),
            E::attached_elsewhere("c".into(), "x")
        );
        assert_eq!(
            E::uncertain("x").with_source(io("a")),
            E::uncertain("x").with_source(io("a"))
        );
        assert_ne!(
            E::uncertain("x").with_source(io("a")),
            E::uncertain("x").with_source(io("b"))
        );
        assert_ne!(E::uncertain("x").with_source(io("a")), E::uncertain("x"));
        let e = E::transient("x").with_source(io("a"));
        assert_eq!(e.clone(), e);
    }
}
