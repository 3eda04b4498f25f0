//! Errors of the adapter, and how etcd's failures map to the store trait's kinds.

use crate::client::Error as ClientError;
use attach_detach::traits::StoreError;
use tonic_code::classify;

/// A value in etcd that this adapter cannot read: written by something that does not follow
/// the layout (see [`KeyLayout`](crate::KeyLayout)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The value is not the JSON the layout says.
    #[error("not the JSON the layout expects: {0}")]
    Json(#[from] serde_json::Error),
    /// An id (in a key or a value) that the domain's id type does not parse.
    #[error("{text:?} is not a valid {what} id")]
    Id {
        /// Which id: `node`, `volume`, `workload`.
        what: &'static str,
        /// The text found.
        text: String,
    },
}

/// This replica is no longer the leader: a write carried its leadership's fence and etcd
/// refused it, because the leader key it was elected with is gone (its lease expired) or
/// belongs to another replica. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this replica is no longer the leader (its leader key {key:?} created at revision {revision} is gone): write refused"
)]
pub struct Deposed {
    /// The leader key the replica was elected with.
    pub key: String,
    /// Its create revision.
    pub revision: i64,
}

/// Why an adapter call other than a store call failed (watches, leadership, the cluster
/// writers).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdError {
    /// etcd's client failed (connection, gRPC status).
    #[error("etcd call failed while {context}")]
    Client {
        /// What the adapter was doing.
        context: String,
        /// The client's error.
        #[source]
        source: ClientError,
    },
    /// A value could not be read.
    #[error("cannot read {key:?}")]
    Decode {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// The watch was compacted past the revision it needed: the caller must relist.
    #[error("the watch needs revision {wanted}, but etcd compacted up to {compacted}: relist")]
    Compacted {
        /// The revision the watch started from.
        wanted: i64,
        /// etcd's compaction revision.
        compacted: i64,
    },
    /// The replica lost its leadership.
    #[error(transparent)]
    Deposed(#[from] Deposed),
}

impl EtcdError {
    pub(crate) fn client(context: impl Into<String>) -> impl FnOnce(ClientError) -> EtcdError {
        let context = context.into();
        move |source| EtcdError::Client { context, source }
    }
}

/// Whether a store call wrote or only read: a write whose answer was lost may have landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallKind {
    Read,
    Write,
}

/// Sorts an etcd client error into the store trait's kinds.
///
/// A read that failed did nothing ([`StoreError::Transient`]). A write whose request was
/// rejected before etcd applied it (bad argument, permission, a request too large) did
/// nothing either; any other failure of a write (the connection broke, the deadline passed,
/// etcd answered `Unavailable` because its leader changed) may have been applied and is
/// [`StoreError::Uncertain`]: the core reads the node again before trusting its list.
pub(crate) fn store_error(error: ClientError, call: CallKind, context: &str) -> StoreError {
    let base = match (call, classify(&error)) {
        (CallKind::Read, _) | (CallKind::Write, tonic_code::Effect::None) => {
            StoreError::transient(context.to_owned())
        }
        (CallKind::Write, tonic_code::Effect::Maybe) => StoreError::uncertain(context.to_owned()),
    };
    base.with_source(error)
}

/// A value the store could not read: a transient error naming the key, so that the core
/// backs off and the operator sees what to fix.
pub(crate) fn undecodable(key: &[u8], error: DecodeError) -> StoreError {
    StoreError::transient(format!("cannot read {}", String::from_utf8_lossy(key)))
        .with_source(error)
}

/// Which gRPC failures may hide an applied request.
mod tonic_code {
    use crate::client::Error as ClientError;

    /// What a failed call may have done.
    pub(super) enum Effect {
        /// Certainly nothing: the request was refused before being applied.
        None,
        /// Perhaps applied.
        Maybe,
    }

    pub(super) fn classify(error: &ClientError) -> Effect {
        use tonic::Code;
        match error {
            ClientError::Status(status) => match status.code() {
                Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::ResourceExhausted
                | Code::OutOfRange
                | Code::Unimplemented
                | Code::NotFound
                | Code::AlreadyExists => Effect::None,
                _ => Effect::Maybe,
            },
            ClientError::InvalidEndpoint { .. } | ClientError::NoRuntime => Effect::None,
            _ => Effect::Maybe,
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::{Code, Status};

    use super::*;

    #[test]
    fn only_a_write_that_may_have_been_applied_is_uncertain() {
        let status = |code| ClientError::Status(Status::new(code, "etcd says no"));
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Cancelled,
            Code::Unknown,
            Code::Internal,
        ] {
            let write = store_error(status(code), CallKind::Write, "writing node n1");
            assert!(write.may_have_taken_effect(), "{code:?}: {write:?}");
            assert_eq!(
                write.to_string(),
                "store call may have taken effect: writing node n1"
            );
            let read = store_error(status(code), CallKind::Read, "reading node n1");
            assert!(
                matches!(read, StoreError::Transient { .. }),
                "{code:?}: {read:?}"
            );
        }
        for code in [
            Code::InvalidArgument,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
        ] {
            let write = store_error(status(code), CallKind::Write, "writing node n1");
            assert!(
                matches!(write, StoreError::Transient { .. }),
                "{code:?}: {write:?}"
            );
        }
        // The client's error is kept as the source.
        let e = store_error(status(Code::Unavailable), CallKind::Write, "w");
        let source = std::error::Error::source(&e).unwrap();
        assert!(source.to_string().contains("etcd says no"), "{source}");
        let bad = undecodable(
            b"/p/attached/n1",
            DecodeError::Id {
                what: "volume",
                text: "x".into(),
            },
        );
        assert_eq!(
            bad.to_string(),
            "store call failed and did nothing: cannot read /p/attached/n1"
        );
    }
}
