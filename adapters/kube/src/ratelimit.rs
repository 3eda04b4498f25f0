//! A client-side rate limit for kube's client, as client-go's QPS and burst.
//!
//! kube-rs sends every request at once; client-go holds each behind a token bucket (QPS 20,
//! burst 30 in kube-controller-manager), so that a controller's burst after a zone failure
//! does not meet the API server's priority-and-fairness as 429s. [`ClientRateLimit`] is that
//! bucket as a tower layer, over `governor`'s.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use attach_detach::config::BackendLoad;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tower::{Layer, Service};

/// A token bucket in front of every request a kube client sends (watches included, as
/// client-go's): `qps` tokens a second, at most `burst` at once. Requests wait for a token;
/// none is refused.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use attach_detach_kube::ClientRateLimit;
/// let config = kube::Config::infer().await?;
/// let client = kube::client::ClientBuilder::try_from(config)?
///     .with_layer(&ClientRateLimit::new(20.0, 30).expect("a positive rate"))
///     .build();
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ClientRateLimit {
    limiter: Arc<DefaultDirectRateLimiter>,
    qps: f64,
    burst: u32,
}

impl fmt::Debug for ClientRateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRateLimit")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish()
    }
}

impl ClientRateLimit {
    /// `qps` requests a second on average, `burst` at most at once; `None` unless both are
    /// positive (and `qps` finite).
    pub fn new(qps: f64, burst: u32) -> Option<Self> {
        if !(qps.is_finite() && qps > 0.0) {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / qps).ok()?;
        let quota = Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst)?);
        Some(ClientRateLimit {
            limiter: Arc::new(RateLimiter::direct(quota)),
            qps,
            burst,
        })
    }

    /// The average rate, in requests a second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// The most requests sent at once.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The core's attach and detach calls bounded to what this bucket can serve, for
    /// `Config::backend_load`.
    ///
    /// A call costs about [`REQUESTS_PER_CALL`] requests (the VolumeAttachment's create or
    /// delete, the node's status patch, the fresh read before a detach, an event). Without a
    /// bound the core starts every call a zone's failure asks for at once; their requests
    /// queue in the bucket, and those that wait past the call's deadline (2 minutes) end
    /// uncertain and are verified and sent again, which costs more requests than the calls
    /// themselves. So each class runs at most half the burst's worth of calls at once: their
    /// requests wait in the bucket for seconds, not minutes. Calls that finish together free
    /// slots together, so a node's queued detaches go in one pass and share one fresh read.
    /// Overdue calls keep the core's default.
    pub fn backend_load(&self) -> BackendLoad {
        let calls = (self.burst / 2).max(1) as usize;
        BackendLoad {
            max_attaches: Some(calls),
            max_detaches: Some(calls),
            ..BackendLoad::UNBOUNDED
        }
    }
}

/// About how many requests one attach or detach call of the core costs against the API
/// server (see [`ClientRateLimit::backend_load`]).
pub const REQUESTS_PER_CALL: u32 = 4;

impl<S> Layer<S> for ClientRateLimit {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimited {
            inner,
            limiter: Arc::clone(&self.limiter),
            waiting: None,
            ready: false,
        }
    }
}

/// The service of [`ClientRateLimit`]: ready once it holds a token and the inner service is.
pub struct RateLimited<S> {
    inner: S,
    limiter: Arc<DefaultDirectRateLimiter>,
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// A token is held for the next call.
    ready: bool,
}

impl<S> fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimited")
            .field("ready", &self.ready)
            .finish_non_exhaustive()
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.ready {
            let limiter = Arc::clone(&self.limiter);
            let waiting = self
                .waiting
                .get_or_insert_with(|| Box::pin(async move { limiter.until_ready().await }));
            match waiting.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.waiting = None;
                    self.ready = true;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        // The token taken in `poll_ready` is spent; the next call waits for its own.
        self.ready = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_and_a_burst_must_be_positive() {
        assert!(ClientRateLimit::new(0.0, 30).is_none());
        assert!(ClientRateLimit::new(f64::NAN, 30).is_none());
        assert!(ClientRateLimit::new(20.0, 0).is_none());
        let limit = ClientRateLimit::new(20.0, 30).expect("a limit");
        assert_eq!((limit.qps(), limit.burst()), (20.0, 30));
    }

    #[test]
    fn the_burst_goes_at_once_then_the_rate_holds() {
        let limit = ClientRateLimit::new(1.0, 3).expect("a limit");
        let admitted = (0..10).filter(|_| limit.limiter.check().is_ok()).count();
        assert_eq!(admitted, 3);
    }

    #[test]
    fn calls_are_bounded_to_a_share_of_the_bucket_the_core_accepts() {
        let load = ClientRateLimit::new(20.0, 30)
            .expect("a limit")
            .backend_load();
        assert_eq!(
            (load.max_attaches, load.max_detaches, load.rate),
            (Some(15), Some(15), None)
        );
        assert_eq!(load.overdue, BackendLoad::UNBOUNDED.overdue);
        let config = attach_detach::config::Config {
            backend_load: load,
            ..Default::default()
        };
        config.validate().expect("valid");
        // A tiny burst still lets one call go.
        let small = ClientRateLimit::new(0.5, 1)
            .expect("a limit")
            .backend_load();
        assert_eq!(small.max_detaches, Some(1));
    }
}
