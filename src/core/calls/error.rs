//! What the crate's error types share: the underlying error a backend or a store call failed
//! with, kept as the error's [`source`](std::error::Error::source).

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The underlying error of a [`BackendError`](crate::traits::BackendError) or a
/// [`StoreError`](crate::traits::StoreError): the cloud SDK's, the gRPC status, the HTTP client's.
///
/// Shared rather than boxed so that the errors stay `Clone`: the core and the tests copy
/// results around.
pub type ErrorSource = Arc<dyn Error + Send + Sync + 'static>;

/// Turns what a `with_source` method was given into a shared source.
pub(crate) fn share(source: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> ErrorSource {
    Arc::from(source.into())
}

/// The source as [`Error::source`] returns it.
pub(crate) fn as_source(source: &Option<ErrorSource>) -> Option<&(dyn Error + 'static)> {
    source.as_deref().map(|e| e as &(dyn Error + 'static))
}

/// Whether two sources count as the same for the errors' `PartialEq`: both absent, or both
/// present and displayed alike (only the sources themselves, not their own sources).
pub(crate) fn same_source(a: &Option<ErrorSource>, b: &Option<ErrorSource>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.to_string() == b.to_string(),
        _ => false,
    }
}

/// Writes `: {message}` after an error's summary; with no message, `: {source}` instead, so
/// that the Display of an error built from a source alone still says what went wrong; with
/// neither, nothing.
pub(crate) fn write_detail(
    f: &mut fmt::Formatter<'_>,
    message: &str,
    source: &Option<ErrorSource>,
) -> fmt::Result {
    match source {
        _ if !message.is_empty() => write!(f, ": {message}"),
        Some(source) => write!(f, ": {source}"),
        None => Ok(()),
    }
}
