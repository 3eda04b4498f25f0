//! Where the controller sends the events it has for humans (Kubernetes: the event recorder).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::core::event::Event;
use crate::domain::Domain;

/// Receives every [`Event`] the core emits, in order, from the controller's loop.
///
/// It is called synchronously from the loop, so it must not block: an implementation that talks
/// to an API server should queue the event and send it from its own task. Every event is also
/// logged through `tracing`, so a recorder is optional.
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::controller::EventRecorder;
/// use attach_detach::core::Event;
/// type D = Ids<String, String, String, ()>;
///
/// /// Prints warnings only.
/// struct Warnings;
/// impl EventRecorder<D> for Warnings {
///     fn record(&self, event: &Event<D>) {
///         if event.is_warning() {
///             eprintln!("{}: {event}", event.reason());
///         }
///     }
/// }
/// let recorder: std::sync::Arc<dyn EventRecorder<D>> = std::sync::Arc::new(Warnings);
/// # let _ = recorder;
/// ```
pub trait EventRecorder<D: Domain>: Send + Sync {
    /// Records one event.
    fn record(&self, event: &Event<D>);
}

/// An [`EventRecorder`] that keeps every event in memory, for tests and examples.
///
/// Cloning gives another handle onto the same list, so a test keeps one clone and gives the
/// controller another.
///
/// ```
/// use attach_detach::Ids;
/// use attach_detach::controller::{EventRecorder, MemoryRecorder};
/// use attach_detach::core::Event;
/// type D = Ids<&'static str, &'static str, &'static str, ()>;
/// let recorder = MemoryRecorder::<D>::new();
/// recorder.record(&Event::AttachSucceeded { volume: "vol-1", node: "node-a" });
/// assert_eq!(recorder.reasons(), vec!["SuccessfulAttachVolume"]);
/// assert_eq!(recorder.take().len(), 1);
/// assert!(recorder.events().is_empty());
/// ```
pub struct MemoryRecorder<D: Domain> {
    events: Arc<Mutex<Vec<Event<D>>>>,
}

impl<D: Domain> MemoryRecorder<D> {
    /// An empty recorder.
    pub fn new() -> Self {
        MemoryRecorder {
            events: Arc::default(),
        }
    }

    /// A copy of the events recorded so far, oldest first.
    pub fn events(&self) -> Vec<Event<D>> {
        self.events.lock().clone()
    }

    /// The events recorded so far, oldest first, leaving the recorder empty.
    pub fn take(&self) -> Vec<Event<D>> {
        std::mem::take(&mut *self.events.lock())
    }

    /// The [reasons](Event::reason) of the events recorded so far, oldest first.
    pub fn reasons(&self) -> Vec<&'static str> {
        self.events.lock().iter().map(Event::reason).collect()
    }
}

impl<D: Domain> Default for MemoryRecorder<D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<D: Domain> Clone for MemoryRecorder<D> {
    fn clone(&self) -> Self {
        MemoryRecorder {
            events: Arc::clone(&self.events),
        }
    }
}

impl<D: Domain> std::fmt::Debug for MemoryRecorder<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRecorder")
            .field("events", &self.events.lock().len())
            .finish()
    }
}

impl<D: Domain> EventRecorder<D> for MemoryRecorder<D> {
    fn record(&self, event: &Event<D>) {
        self.events.lock().push(event.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Ids;

    type D = Ids<&'static str, &'static str, &'static str, ()>;

    #[test]
    fn a_memory_recorder_keeps_takes_and_counts_its_events() {
        let recorder = MemoryRecorder::<D>::default();
        let clone = recorder.clone();
        let event = Event::AttachSucceeded {
            volume: "v",
            node: "n",
        };
        clone.record(&event);
        assert_eq!(format!("{recorder:?}"), "MemoryRecorder { events: 1 }");
        assert_eq!(recorder.reasons(), vec!["SuccessfulAttachVolume"]);
        assert_eq!(recorder.events(), vec![event.clone()]);
        assert_eq!(recorder.take(), vec![event]);
        assert!(clone.events().is_empty());
        assert_eq!(format!("{clone:?}"), "MemoryRecorder { events: 0 }");
    }
}
