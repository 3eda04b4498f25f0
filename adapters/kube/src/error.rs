//! How kube's failures map to the store trait's kinds: shared by every part of the adapter
//! that calls the API server (the node status store, the VolumeAttachment backend).
//!
//! The question each caller asks of a failed call is the same: did the API server refuse it
//! (nothing happened, retry), or may it have been applied (read again before trusting
//! anything)? An HTTP status the server answered with says which; a call that got no answer
//! (a broken connection, a timeout) may have been applied.

use attach_detach::traits::StoreError;

/// The HTTP status code the API server answered a failed call with, if it answered one.
///
/// kube turns every 4xx and 5xx answer into [`kube::Error::Api`], with the server's `Status`
/// object when the body is one and a reconstructed one (carrying the HTTP code) when it is not
/// (a proxy's HTML page, say). A `Status` body without a `code` (0) says nothing: `None`.
pub(crate) fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) if status.code != 0 => Some(status.code),
        _ => None,
    }
}

/// Whether the API server answered `code`: a shorthand for matching [`status_code`].
pub(crate) fn is_status(error: &kube::Error, code: u16) -> bool {
    status_code(error) == Some(code)
}

/// Whether a failed call that would have changed something may nevertheless have been
/// applied.
///
/// - A 4xx answer is the API server refusing the request before storing anything (400 bad
///   request, 401/403 not allowed, 404 no such object, 409 conflict, 422 invalid or a failed
///   JSON-patch `test`, 429 throttled), so nothing happened. The exception is 408 (request
///   timeout), which says nothing about the request's fate.
/// - A 5xx answer may come after the write reached etcd: 500 "the server was unable to return
///   a response in the time allotted, but may still be processing the request", 504 timeouts,
///   a 502/503 from a proxy in front of an API server that did apply it. Perhaps applied.
/// - No answer at all (a broken connection, the client's own timeout, an answer that could not
///   be read) may hide an applied request. Perhaps applied.
/// - A request that could not be built or authenticated never left: not applied.
pub(crate) fn may_have_been_applied(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(_) => match status_code(error) {
            Some(408) | None => true,
            Some(code) => !(400..500).contains(&code),
        },
        kube::Error::BuildRequest(_)
        | kube::Error::HttpError(_)
        | kube::Error::Auth(_)
        | kube::Error::TlsRequired
        | kube::Error::RustlsTls(_)
        | kube::Error::ProxyProtocolUnsupported { .. }
        | kube::Error::ProxyProtocolDisabled { .. }
        | kube::Error::InferConfig(_)
        | kube::Error::InferKubeconfig(_)
        | kube::Error::Discovery(_) => false,
        _ => true,
    }
}

/// Whether a store call wrote or only read: a write whose answer was lost may have landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// A GET or a LIST.
    Read,
    /// A PATCH, a POST, a DELETE.
    Write,
}

/// Sorts a kube error into the store trait's kinds, keeping it as the source.
///
/// 404 is [`StoreError::NotFound`]; 409 (a `resourceVersion` conflict) and 422 (a JSON-patch
/// `test` that failed: the API server answers a patch it cannot apply with 422, not 409) are
/// [`StoreError::Conflict`], without a current revision since Kubernetes names none. Anything
/// else failed a read with nothing done ([`StoreError::Transient`]); a write is
/// [`StoreError::Uncertain`] when it [`may_have_been_applied`], else transient. `context` says
/// what the store was doing ("writing node n1").
pub(crate) fn store_error(error: kube::Error, call: CallKind, context: &str) -> StoreError {
    let kind = match status_code(&error) {
        Some(404) => StoreError::not_found(),
        Some(409 | 422) => StoreError::conflict(None),
        _ if call == CallKind::Write && may_have_been_applied(&error) => {
            StoreError::uncertain(context.to_owned())
        }
        _ => StoreError::transient(context.to_owned()),
    };
    kind.with_source(error)
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn answered(code: u16) -> kube::Error {
        kube::Error::Api(Status::failure("no", "Reason").with_code(code).boxed())
    }

    #[test]
    fn answers_sort_by_what_they_say_about_the_request() {
        for code in [400, 401, 403, 404, 409, 422, 429] {
            assert!(!may_have_been_applied(&answered(code)), "{code}");
        }
        for code in [408, 500, 502, 503, 504] {
            assert!(may_have_been_applied(&answered(code)), "{code}");
        }
        // A Status body without a code says nothing.
        let codeless = kube::Error::Api(Status::failure("?", "").boxed());
        assert_eq!(status_code(&codeless), None);
        assert!(may_have_been_applied(&codeless));
        assert!(is_status(&answered(410), 410));
        let lost = kube::Error::Service("connection reset".into());
        assert!(may_have_been_applied(&lost));
    }

    #[test]
    fn store_errors_keep_the_kube_error() {
        let e = store_error(answered(500), CallKind::Write, "writing node n1");
        assert!(e.may_have_taken_effect());
        assert_eq!(
            e.to_string(),
            "store call may have taken effect: writing node n1"
        );
        let source = std::error::Error::source(&e).expect("kept");
        assert!(source.downcast_ref::<kube::Error>().is_some(), "{source}");
        let e = store_error(answered(500), CallKind::Read, "reading node n1");
        assert!(matches!(e, StoreError::Transient { .. }), "{e:?}");
        for code in [409, 422] {
            let e = store_error(answered(code), CallKind::Write, "w");
            assert!(
                matches!(e, StoreError::Conflict { current: None, .. }),
                "{e:?}"
            );
        }
        let e = store_error(answered(404), CallKind::Read, "r");
        assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
        let e = store_error(answered(429), CallKind::Write, "w");
        assert!(matches!(e, StoreError::Transient { .. }), "{e:?}");
    }
}
