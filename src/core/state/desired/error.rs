//! What goes wrong with the desired state: misuse ([`DesiredError`]), and the names a waiting
//! workload lacks ([`Missing`]), listed for a message ([`Names`]).

use std::fmt;

use thiserror::Error;

use crate::domain::Domain;

/// Misuse of the desired state, reported instead of being silently absorbed.
///
/// Inputs in any order are not misuse: a workload naming a node or volume not known yet waits,
/// and removing something unknown is a no-op. What is left is what would grow without bound.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DesiredError<D: Domain> {
    /// The workload names something not known yet, so it would wait, but
    /// [`Config::max_pending_workloads`] workloads wait already. Nothing changed: an earlier
    /// placement of the workload stands.
    ///
    /// [`Config::max_pending_workloads`]: crate::config::Config::max_pending_workloads
    #[error(
        "workload {workload:?} would wait for {}, but {limit} workloads wait already (Config::max_pending_workloads); send the nodes and volumes they wait for, or remove those that will never run",
        Names(missing)
    )]
    TooManyPending {
        /// The workload refused.
        workload: D::Workload,
        /// What it would have waited for.
        missing: Vec<Missing<D>>,
        /// The limit.
        limit: usize,
    },
}

/// Something a waiting workload names that the core does not know: never seen, or removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Missing<D: Domain> {
    /// A node the orchestrator has not announced ([`Input::NodeUpdated`](crate::core::Input)).
    Node(D::Node),
    /// A volume the orchestrator has not registered ([`Input::SetVolume`](crate::core::Input)).
    Volume(D::Volume),
}

impl<D: Domain> fmt::Display for Missing<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Node(node) => write!(f, "node {node:?}"),
            Missing::Volume(volume) => write!(f, "volume {volume:?}"),
        }
    }
}

/// A list of [`Missing`] names for a message: `node "a", volume "b"`.
pub(crate) struct Names<'a, D: Domain>(pub(crate) &'a [Missing<D>]);

impl<D: Domain> fmt::Display for Names<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}")?;
        }
        Ok(())
    }
}
