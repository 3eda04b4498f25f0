//! What `/healthz` and `/readyz` ask.

/// The answers of `/healthz` and `/readyz`, from the embedder's own state.
///
/// Both are called on every probe, from the server's tasks: they must be quick and must not
/// block (read a flag, a timestamp, a counter). The `Err` string is the reason, served as the
/// body so that `kubectl describe pod` shows it.
pub trait Probes: Send + Sync + 'static {
    /// Whether the process works: `Err` makes `/healthz` answer 500, and a liveness probe
    /// restart it. Fail only for what a restart mends (a loop that died, a lease held but no
    /// longer renewed), never for a dependency that is down: restarting every replica does not
    /// bring an API server back.
    fn health(&self) -> Result<(), String>;

    /// Whether the process should count as available: `Err` makes `/readyz` answer 503. A
    /// rolling update waits for it, so a healthy standby should be ready too, or a rollout of
    /// replicas of which only one leads never finishes.
    fn readiness(&self) -> Result<(), String>;
}

/// Probes that always pass: what the server answers when given none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Healthy;

impl Probes for Healthy {
    fn health(&self) -> Result<(), String> {
        Ok(())
    }

    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }
}
