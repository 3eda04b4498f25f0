//! The storage system the controller drives: a cloud disk API, a CSI controller, a SAN.

use async_trait::async_trait;

use crate::domain::Domain;
use crate::volume::VolumeSpec;

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
/// ```
/// use attach_detach::BackendError;
/// let e: BackendError<String> = BackendError::Uncertain { message: "timeout".into() };
/// assert!(e.may_have_taken_effect());
/// assert_eq!(e.to_string(), "backend call may have taken effect: timeout");
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackendError<N> {
    /// The call certainly did nothing; retry with backoff.
    #[error("backend call failed and did nothing: {message}")]
    Transient {
        /// The backend's explanation.
        message: String,
    },
    /// The call may have taken effect (a timeout, a lost response): assume it did until verified.
    #[error("backend call may have taken effect: {message}")]
    Uncertain {
        /// The backend's explanation.
        message: String,
    },
    /// The volume is attached to another node and cannot be attached here until detached there
    /// (Kubernetes' dangling-attach error). The controller should record that attachment.
    #[error("volume is attached to another node {node:?}: {message}")]
    AttachedElsewhere {
        /// The node that holds the volume.
        node: N,
        /// The backend's explanation.
        message: String,
    },
}

impl<N> BackendError<N> {
    /// Whether the failed call may nevertheless have changed the backend's state.
    ///
    /// Only [`Uncertain`](BackendError::Uncertain) may have; a transient failure did nothing and
    /// an attached-elsewhere refusal attached nothing.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self, BackendError::Uncertain { .. })
    }
}

/// The storage system that really attaches volumes to nodes.
///
/// Every call may be slow and may fail; implementations report failures through
/// [`BackendError`] so the controller knows whether the call may have taken effect. Calls must
/// be idempotent: attaching an attached volume or detaching a detached one succeeds.
///
/// Implement it with `#[async_trait]`; the trait is dyn-compatible, so a controller can hold an
/// `Arc<dyn AttachBackend<D>>`:
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use attach_detach::{AttachBackend, AttachInfo, BackendAttachment, BackendError, Ids};
/// type D = Ids<String, String, String, ()>;
///
/// /// A backend whose storage is always down.
/// struct Down;
///
/// #[async_trait]
/// impl AttachBackend<D> for Down {
///     async fn attach(&self, _: &String, _: &String, _: &()) -> Result<AttachInfo, BackendError<String>> {
///         Err(BackendError::Transient { message: "unavailable".into() })
///     }
///     async fn detach(&self, _: &String, _: &String, _: &()) -> Result<(), BackendError<String>> {
///         Err(BackendError::Transient { message: "unavailable".into() })
///     }
///     async fn verify(&self, _: &String, _: &[(String, ())]) -> Result<Vec<String>, BackendError<String>> {
///         Err(BackendError::Transient { message: "unavailable".into() })
///     }
///     async fn list(&self) -> Result<Vec<BackendAttachment<D>>, BackendError<String>> {
///         Err(BackendError::Transient { message: "unavailable".into() })
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
    /// attached, so the controller can notice attachments that vanished behind its back. Its
    /// answer settles an Uncertain attachment both ways, so a volume whose attach is still under
    /// way must count as attached.
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
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::Ids;

    type D = Ids<String, String, String, u32>;

    #[test]
    fn only_uncertain_may_have_taken_effect() {
        let transient = BackendError::<String>::Transient {
            message: "503".into(),
        };
        let uncertain = BackendError::<String>::Uncertain {
            message: "timeout".into(),
        };
        let elsewhere = BackendError::AttachedElsewhere {
            node: "node-b".to_string(),
            message: "in use".into(),
        };
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
    }

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
        mock.expect_detach().times(1).returning(|_, _, _| {
            Err(BackendError::Uncertain {
                message: "timeout".into(),
            })
        });
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
