//! The loop the cluster caches share: a reflector's watch driven in the background, and what it
//! mirrors published again after every change (changes closer together than a settle time once),
//! and, for caches that must also follow the clock, every refresh period.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use tokio::sync::Notify;

/// How often a cache publishes, besides after its changes.
pub struct Timing {
    /// Changes closer together than this are published once.
    pub settle: Duration,
    /// Published again this often without a change (`None`: only on changes).
    pub refresh: Option<Duration>,
}

/// A watch of every object of `resource` (a custom resource, read as JSON), with backoff,
/// reflected into the store it returns; `trim` drops what the cache does not read before an
/// object is stored. For [`mirror`].
pub fn watch_dynamic(
    client: Client,
    resource: ApiResource,
    trim: impl FnMut(&mut DynamicObject) + Send + 'static,
) -> (
    Store<DynamicObject>,
    impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let writer = Writer::new(resource);
    let store = writer.as_reader();
    let stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim)
        .reflect(writer);
    (store, stream)
}

/// Drives `stream` (a watch reflected into `store`) in the background; once `store` has its
/// first listing calls `publish(store, true)`, then `publish(store, false)` after changes and
/// refreshes as `timing` says. A failed watch is logged with `failed` (what keeps serving
/// meanwhile) and retried by the stream's own backoff.
pub fn mirror<K, S>(
    stream: S,
    store: Store<K>,
    timing: Timing,
    failed: &'static str,
    mut publish: impl FnMut(&Store<K>, bool) + Send + 'static,
) where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let changed = Arc::new(Notify::new());
    let notify = changed.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(e) => tracing::warn!(error = %e, "{failed}"),
            }
        }
    });
    tokio::spawn(async move {
        if store.wait_until_ready().await.is_err() {
            return;
        }
        publish(&store, true);
        loop {
            match timing.refresh {
                Some(period) => {
                    tokio::select! {
                        _ = changed.notified() => {}
                        _ = tokio::time::sleep(period) => {}
                    }
                }
                None => changed.notified().await,
            }
            tokio::time::sleep(timing.settle).await;
            publish(&store, false);
        }
    });
}
