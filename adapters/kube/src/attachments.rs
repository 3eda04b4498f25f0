//! The [`VolumeAttachmentBackend`](crate::VolumeAttachmentBackend)'s one watch of every
//! VolumeAttachment: a cache kept by a reflector (a paged LIST, then a WATCH from the list's
//! resourceVersion, a new LIST when the server answers 410 Gone), which attach and detach
//! waits read instead of watching their own object, and which a verify trusts only where a
//! stale answer cannot cost anything (see [`AttachmentCache::present`]).
//!
//! It is hand-written rather than kube-runtime's `watcher`, because the waits need to know how
//! fresh the cache is, and `watcher` keeps the list's and the bookmarks' resourceVersions to
//! itself: here the cache knows the server's revision it reflects, and a wait judges only a
//! cache that has caught up with the revision of its own write or read. Revisions are
//! compared as numbers, as the API server's own watch cache compares them (etcd's revisions);
//! a resourceVersion that is not a number catches up with nothing, so a wait on it ends by its
//! deadline, as uncertain.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::DefaultBackoff;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;
use tracing::{debug, warn};

/// How long each WATCH asks the server to keep it open, as kube-runtime's watcher asks; the
/// reflector watches again from where it was when it ends.
const WATCH_SECONDS: u32 = 290;

/// How long to wait before watching again after a watch that ended without telling anything,
/// so that a server closing every watch at once is not hammered.
const REWATCH_PAUSE: Duration = Duration::from_millis(500);

/// What the backend needs of a VolumeAttachment: who it is, how new, and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Known {
    /// `metadata.uid`: which incarnation of the name.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`, as a number (`None`: not one).
    pub version: Option<u64>,
    /// `spec.nodeName`.
    pub node: String,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.attached`.
    pub attached: bool,
    /// `status.attachError`'s message, if there is one.
    pub attach_error: Option<String>,
    /// `status.detachError`'s message, if there is one.
    pub detach_error: Option<String>,
}

impl Known {
    /// The parts of `va` the backend reads.
    pub(crate) fn of(va: &VolumeAttachment) -> Known {
        let message = |error: &k8s_openapi::api::storage::v1::VolumeError| {
            error
                .message
                .clone()
                .unwrap_or_else(|| "no message".to_owned())
        };
        let status = va.status.as_ref();
        Known {
            uid: va.metadata.uid.clone(),
            version: revision(va.metadata.resource_version.as_deref()),
            node: va.spec.node_name.clone(),
            deleting: va.metadata.deletion_timestamp.is_some(),
            attached: status.is_some_and(|s| s.attached),
            attach_error: status.and_then(|s| s.attach_error.as_ref()).map(message),
            detach_error: status.and_then(|s| s.detach_error.as_ref()).map(message),
        }
    }
}

/// A resourceVersion as a revision number.
pub(crate) fn revision(version: Option<&str>) -> Option<u64> {
    version?.parse().ok()
}

/// The cache, and the reflector task that keeps it, started by the first call that needs it
/// and stopped when the last clone of the backend is dropped.
#[derive(Debug)]
pub(crate) struct AttachmentCache {
    shared: Arc<Shared>,
    task: OnceLock<AbortHandle>,
}

#[derive(Debug)]
struct Shared {
    api: Api<VolumeAttachment>,
    page_size: u32,
    state: Mutex<State>,
    /// The revision the cache reflects, sent at every advance (0 until the first LIST).
    revision: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// Every VolumeAttachment, by name.
    objects: HashMap<String, Known>,
    /// The server's revision the cache reflects: the list's, then each event's or bookmark's.
    /// 0 until the first LIST answered.
    revision: u64,
    /// Whether the cache follows the server now: listed, and no LIST or WATCH failed since
    /// the last one that succeeded (a watch that ends normally is opened again at once).
    live: bool,
    /// Why the cache does not follow the server, while it does not.
    trouble: Option<String>,
    /// The waits, by the name they wait on: told at each change of their object, and at
    /// each LIST.
    waiters: HashMap<String, Arc<Notify>>,
}

impl Drop for AttachmentCache {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

impl AttachmentCache {
    /// A cache of `api`'s objects, listed `page_size` at a time; nothing runs until
    /// [`AttachmentCache::start`].
    pub(crate) fn new(api: Api<VolumeAttachment>, page_size: u32) -> AttachmentCache {
        AttachmentCache {
            shared: Arc::new(Shared {
                api,
                page_size,
                state: Mutex::default(),
                revision: watch::Sender::new(0),
            }),
            task: OnceLock::new(),
        }
    }

    /// Starts the reflector, unless it runs already. Needs a tokio runtime.
    pub(crate) fn start(&self) {
        self.task
            .get_or_init(|| tokio::spawn(reflect(Arc::clone(&self.shared))).abort_handle());
    }

    /// Which of `names` the cache holds, if it follows the server now (`None` if it does
    /// not: not listed yet, or its last LIST or WATCH failed).
    ///
    /// Only presence may be trusted without a fresh read: a cache is behind the server by
    /// however long its events take, so an object created just now may be missing from it,
    /// while an object it holds existed a moment ago and is at worst being deleted; reporting
    /// it attached a little longer never makes the core forget anything.
    pub(crate) fn present<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Option<Vec<bool>> {
        self.start();
        let state = self.shared.lock();
        state.live.then(|| {
            names
                .into_iter()
                .map(|name| state.objects.contains_key(name))
                .collect()
        })
    }

    /// Why the cache does not follow the server, if it does not.
    pub(crate) fn trouble(&self) -> Option<String> {
        self.shared.lock().trouble.clone()
    }

    /// Waits until `judge` decides on the VolumeAttachment `name` (`None`: absent) as a cache
    /// caught up with revision `since` holds it: judged once the cache reflects `since` or a
    /// later revision, then at each change of the object and each LIST. `since` is the
    /// revision of the caller's own write or read of the object (`None`: not a number, never
    /// caught up with), so that the cache's view is at least as new as what the caller knows:
    /// an absent object is then really gone, not yet to be delivered. No deadline: the caller
    /// sets one.
    pub(crate) async fn wait<T>(
        &self,
        name: &str,
        since: Option<u64>,
        mut judge: impl FnMut(Option<&Known>) -> Option<T>,
    ) -> T {
        self.start();
        let Some(since) = since else {
            return std::future::pending().await;
        };
        let mut revision = self.shared.revision.subscribe();
        // A closed channel cannot be: the cache holds its sender.
        let _ = revision.wait_for(|revision| *revision >= since).await;
        let _registered = Registered {
            shared: &self.shared,
            name,
        };
        loop {
            let notify = {
                let mut state = self.shared.lock();
                Arc::clone(state.waiters.entry(name.to_owned()).or_default())
            };
            // Created before the look, so that a change after the look wakes it.
            let told = notify.notified();
            {
                let state = self.shared.lock();
                if state.revision >= since
                    && let Some(done) = judge(state.objects.get(name))
                {
                    return done;
                }
            }
            told.await;
        }
    }
}

/// A wait's registration, removed with the last wait on its name.
struct Registered<'a> {
    shared: &'a Shared,
    name: &'a str,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if state
            .waiters
            .get(self.name)
            .is_some_and(|notify| Arc::strong_count(notify) == 1)
        {
            state.waiters.remove(self.name);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every write to the state is a few assignments that cannot panic halfway.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A LIST's answer replaces the cache, at its revision.
    fn replace(&self, items: Vec<VolumeAttachment>, revision: u64) {
        let mut state = self.lock();
        state.objects = items
            .iter()
            .filter_map(|va| Some((va.metadata.name.clone()?, Known::of(va))))
            .collect();
        state.revision = state.revision.max(revision);
        for notify in state.waiters.values() {
            notify.notify_waiters();
        }
        let revision = state.revision;
        drop(state);
        self.revision.send_replace(revision);
    }

    /// An event of the watch: the object as it is now (`None`: deleted), at the event's
    /// revision.
    fn apply(&self, va: &VolumeAttachment, deleted: bool) {
        let Some(name) = va.metadata.name.clone() else {
            return;
        };
        let mut state = self.lock();
        if deleted {
            state.objects.remove(&name);
        } else {
            state.objects.insert(name.clone(), Known::of(va));
        }
        if let Some(revision) = revision(va.metadata.resource_version.as_deref()) {
            state.revision = state.revision.max(revision);
        }
        if let Some(notify) = state.waiters.get(&name) {
            notify.notify_waiters();
        }
        let revision = state.revision;
        drop(state);
        self.revision.send_if_modified(|current| {
            let advanced = *current < revision;
            *current = revision.max(*current);
            advanced
        });
    }

    /// A bookmark: the cache reflects the server at `revision`.
    fn advance(&self, revision: u64) {
        let mut state = self.lock();
        state.revision = state.revision.max(revision);
        let revision = state.revision;
        drop(state);
        self.revision.send_if_modified(|current| {
            let advanced = *current < revision;
            *current = revision.max(*current);
            advanced
        });
    }

    /// Whether the cache follows the server, and why not.
    fn follow(&self, trouble: Option<String>) {
        let mut state = self.lock();
        if let Some(why) = &trouble
            && state.trouble.as_ref() != Some(why)
        {
            warn!(why, "the VolumeAttachment cache does not follow the server");
        }
        state.live = trouble.is_none();
        state.trouble = trouble;
    }
}

/// How one WATCH ended.
enum Ended {
    /// The server closed it (its timeout); whether it brought any event.
    Closed { news: bool },
    /// 410 Gone: the revision is older than the server's history; list again.
    Expired,
    /// It broke, for this reason.
    Failed(String),
}

/// The reflector: LIST, then WATCH from the list's revision, again and again, until aborted.
async fn reflect(shared: Arc<Shared>) {
    let mut backoff = DefaultBackoff::default();
    loop {
        let (items, mut version) = match list(&shared.api, shared.page_size).await {
            Ok(listed) => listed,
            Err(error) => {
                shared.follow(Some(format!("listing VolumeAttachments failed: {error}")));
                pause(&mut backoff).await;
                continue;
            }
        };
        debug!(
            objects = items.len(),
            version, "listed every VolumeAttachment"
        );
        shared.replace(items, revision(Some(&version)).unwrap_or(0));
        shared.follow(None);
        loop {
            let params = WatchParams::default().timeout(WATCH_SECONDS);
            let stream = match shared.api.watch(&params, &version).await {
                Ok(stream) => stream,
                Err(kube::Error::Api(status)) if status.code == 410 => break,
                Err(error) => {
                    shared.follow(Some(format!("watching VolumeAttachments failed: {error}")));
                    pause(&mut backoff).await;
                    continue;
                }
            };
            shared.follow(None);
            let mut stream = std::pin::pin!(stream);
            let mut news = false;
            let ended = loop {
                let Some(event) = stream.next().await else {
                    break Ended::Closed { news };
                };
                match event {
                    Ok(WatchEvent::Added(va) | WatchEvent::Modified(va)) => {
                        remember(&mut version, va.metadata.resource_version.as_deref());
                        shared.apply(&va, false);
                        news = true;
                    }
                    Ok(WatchEvent::Deleted(va)) => {
                        remember(&mut version, va.metadata.resource_version.as_deref());
                        shared.apply(&va, true);
                        news = true;
                    }
                    Ok(WatchEvent::Bookmark(bookmark)) => {
                        let at = bookmark.metadata.resource_version;
                        remember(&mut version, Some(&at));
                        if let Some(revision) = revision(Some(&at)) {
                            shared.advance(revision);
                        }
                    }
                    Ok(WatchEvent::Error(status)) if status.code == 410 => break Ended::Expired,
                    Ok(WatchEvent::Error(status)) => break Ended::Failed(status.message),
                    Err(error) => break Ended::Failed(error.to_string()),
                }
            };
            match ended {
                Ended::Expired => {
                    debug!("the VolumeAttachment watch expired; listing again");
                    break;
                }
                Ended::Failed(why) => {
                    shared.follow(Some(format!("the VolumeAttachment watch broke: {why}")));
                    pause(&mut backoff).await;
                }
                Ended::Closed { news } => {
                    backoff.reset();
                    if !news {
                        tokio::time::sleep(REWATCH_PAUSE).await;
                    }
                }
            }
        }
    }
}

/// Sleeps for the backoff's next pause.
async fn pause(backoff: &mut DefaultBackoff) {
    tokio::time::sleep(backoff.next().unwrap_or(Duration::from_secs(30))).await;
}

/// Keeps `version`, the resourceVersion to watch from, at the newest one seen.
fn remember(version: &mut String, seen: Option<&str>) {
    if let Some(seen) = seen.filter(|s| !s.is_empty()) {
        *version = seen.to_owned();
    }
}

/// Every object, `page_size` at a time, with the list's resourceVersion (every page of a
/// paged LIST is read at the first page's).
async fn list(
    api: &Api<VolumeAttachment>,
    page_size: u32,
) -> Result<(Vec<VolumeAttachment>, String), kube::Error> {
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(page_size);
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        let version = page.metadata.resource_version.unwrap_or_default();
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => params = params.continue_token(token),
            _ => return Ok((items, version)),
        }
    }
}
