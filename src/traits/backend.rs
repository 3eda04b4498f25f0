//! [`AttachBackend`]: the storage system the controller drives (a cloud disk API, a CSI
//! controller, a SAN), as the driver calls it.

use async_trait::async_trait;

use crate::core::calls::backend::{AttachInfo, BackendAttachment, BackendError, MachineState};
use crate::domain::Domain;

/// The storage system that really attaches volumes to nodes.
///
/// Every call may be slow and may fail; implementations report failures through
/// [`BackendError`] so the controller knows whether the call may have taken effect. Calls must
/// be idempotent: attaching an attached volume or detaching a detached one succeeds.
///
/// Calls must not block the thread: the controller runs the calls a pass plans a few dozen to
/// a task, so a call that blocks holds up the others of its task, and no deadline can fire
/// while it blocks. Wrap a blocking client in `tokio::task::spawn_blocking`.
///
/// Implement it with `#[async_trait]`; the trait is dyn-compatible, so a controller can hold an
/// `Arc<dyn AttachBackend<D>>`:
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use attach_detach::Ids;
/// use attach_detach::traits::{AttachBackend, AttachInfo, BackendAttachment, BackendError};
/// type D = Ids<String, String, String, ()>;
///
/// /// A backend whose storage is always down.
/// struct Down;
///
/// #[async_trait]
/// impl AttachBackend<D> for Down {
///     async fn attach(&self, _: &String, _: &String, _: &()) -> Result<AttachInfo, BackendError<String>> {
///         Err(BackendError::transient("unavailable"))
///     }
///     async fn detach(&self, _: &String, _: &String, _: &()) -> Result<(), BackendError<String>> {
///         Err(BackendError::transient("unavailable"))
///     }
///     async fn verify(&self, _: &String, _: &[(String, ())]) -> Result<Vec<String>, BackendError<String>> {
///         Err(BackendError::transient("unavailable"))
///     }
///     async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<String>> {
///         Err(BackendError::transient("unavailable"))
///     }
/// }
///
/// let backend: Arc<dyn AttachBackend<D>> = Arc::new(Down);
/// # let _ = backend;
/// ```
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait AttachBackend<D: Domain>: Send + Sync {
    /// Attaches `volume` to `node`, returning what the node needs to find it.
    ///
    /// While a detach of the same volume from the same node is still under way (one a
    /// restarted controller lost, say), it must not report success: refuse with
    /// [`BackendError::Transient`] (CSI: `ABORTED`), or wait for the detach to end and attach
    /// again. Otherwise the detach lands after a "successful" attach, under a new mount.
    async fn attach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<AttachInfo, BackendError<D::Node>>;

    /// Detaches `volume` from `node`.
    ///
    /// While an attach of the same volume to the same node is still under way (for instance
    /// one started by a controller that restarted since), it must not report success without
    /// detaching: refuse with [`BackendError::Transient`] (CSI: `ABORTED`), or wait for the
    /// attach to end and then detach. Otherwise the attach lands after a "successful" detach
    /// and leaves an attachment nobody knows of.
    async fn detach(
        &self,
        volume: &D::Volume,
        node: &D::Node,
        payload: &D::Payload,
    ) -> Result<(), BackendError<D::Node>>;

    /// Returns the subset of `volumes` that are still attached to `node`, or are being
    /// attached, so the controller can notice attachments that vanished behind its back. A
    /// volume left out settles an Uncertain attachment as gone, so one whose attach is still
    /// under way must count as attached. One listed does not settle it (a detach that timed
    /// out may still land): an attach confirms it, or a detach ends it.
    async fn verify(
        &self,
        node: &D::Node,
        volumes: &[(D::Volume, D::Payload)],
    ) -> Result<Vec<D::Volume>, BackendError<D::Node>>;

    /// Every attachment the backend knows, including attaches still under way, for recovery
    /// after a controller restart and for the periodic listing (`Config::resync_period`). An
    /// attach a previous controller started and lost must show up here, or it would land
    /// unknown to the new one.
    async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<D::Node>>;

    /// Whether `node`'s machine is powered off, for fencing without a human
    /// ([`Config::machine_fencing`](crate::config::Config::machine_fencing)); asked only about
    /// unhealthy nodes whose volumes wait to be detached, and only when that is on.
    ///
    /// Optional: the default answers [`MachineState::Unknown`], which never fences. Answer
    /// [`MachineState::Off`] only when the provider guarantees the machine cannot write to
    /// any volume (a stopped or terminated instance, a machine deleted at the provider), never
    /// because the machine does not answer: a node cut off from the network still writes.
    /// Two `Off` answers some seconds apart detach its volumes, forced, while it may still
    /// report them in use. An error fences nothing either.
    async fn machine_state(&self, node: &D::Node) -> Result<MachineState, BackendError<D::Node>> {
        let _ = node;
        Ok(MachineState::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Ids;

    type D = Ids<String, String, String, u32>;

    #[tokio::test]
    async fn mock_works_through_dyn() {
        let mut mock = MockAttachBackend::<D>::new();
        mock.expect_attach()
            .withf(|v, n, p| v == "vol-1" && n == "node-a" && *p == 7)
            .times(1)
            .returning(|_, _, _| {
                Ok(AttachInfo {
                    device: Some("/dev/sdb".into()),
                })
            });
        mock.expect_detach()
            .times(1)
            .returning(|_, _, _| Err(BackendError::uncertain("timeout")));
        mock.expect_verify()
            .returning(|_, vols| Ok(vols.iter().map(|(v, _)| v.clone()).collect()));
        mock.expect_list().returning(|| Ok(Vec::new()));

        let backend: Arc<dyn AttachBackend<D>> = Arc::new(mock);
        let (v, n) = ("vol-1".to_string(), "node-a".to_string());
        let info = backend.attach(&v, &n, &7).await.unwrap();
        assert_eq!(info.device.as_deref(), Some("/dev/sdb"));
        let err = backend.detach(&v, &n, &7).await.unwrap_err();
        assert!(err.may_have_taken_effect());
        assert_eq!(
            backend.verify(&n, &[(v.clone(), 7)]).await.unwrap(),
            vec![v]
        );
        assert!(backend.list().await.unwrap().is_empty());
    }
}
