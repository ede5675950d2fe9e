//! The IP addresses of the node's netdevs, for the device metadata and the
//! claims' status: asked of rtnetlink once per interface, then kept until
//! the kernel says that an address or a link changed (rtnetlink's multicast
//! groups of links and of IPv4 and IPv6 addresses, what `ip monitor` shows).
//!
//! Why: a question is a netlink connection and two requests, 120 µs for an
//! interface that is not there and 340 µs for one that is (debug build),
//! and every prepare asks, then the status writer again: on a node's
//! netdevs, 100 concurrent prepares took 41 ms with a question each and
//! 38 ms with the cache (docs/benchmarks.md, 2026-12-05).
//!
//! Fail-safe: any message on the event socket forgets everything, an
//! overrun (the kernel dropped events: `ENOBUFS`) included; a lookup that
//! an event overtook is answered but not kept; an entry is trusted for
//! [`MAX_AGE`] at most; and without the events (no netlink, or their
//! socket closed) nothing is kept and every call asks the kernel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

/// How long an entry is trusted without hearing from the kernel: a safety
/// net for an event missed in a way the socket does not report.
pub const MAX_AGE: Duration = Duration::from_secs(60);

/// The API takes at most this many addresses per device.
pub const MAX_IPS: usize = 16;

/// Asks the kernel for the addresses of an interface.
pub type Lookup = Arc<dyn Fn(String) -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// The addresses of interfaces by name, in CIDR form, as the kernel last
/// said. Clones share the cache.
#[derive(Clone)]
pub struct Addresses {
    state: Arc<Mutex<State>>,
    lookup: Lookup,
}

impl std::fmt::Debug for Addresses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Addresses").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// Events arrive: entries may be kept.
    watching: bool,
    /// Counts the changes heard, so that a lookup overtaken by one is not kept.
    changes: u64,
    entries: HashMap<String, (Instant, Vec<String>)>,
}

impl Addresses {
    /// Asks rtnetlink, and keeps the answers while its events arrive
    /// (followed on the current tokio runtime, which it needs). Without
    /// them, a cache that keeps nothing, and a warning saying why.
    pub fn watched() -> Self {
        let cache = Self::uncached(kernel_lookup());
        match kernel_changes() {
            Ok(changes) => cache.follow(changes),
            Err(error) => {
                tracing::warn!(%error, "no netlink address events: every prepare asks the kernel for its interfaces' addresses")
            }
        }
        cache
    }

    /// A cache that keeps nothing until [`Self::follow`]: every call asks `lookup`.
    pub fn uncached(lookup: Lookup) -> Self {
        Self {
            state: Arc::default(),
            lookup,
        }
    }

    /// Keeps answers while `changes` lasts; each item forgets them all.
    /// Needs a tokio runtime.
    pub fn follow(&self, changes: impl Stream<Item = ()> + Send + 'static) {
        // As a change: a lookup that began before the events did is not kept.
        self.forget(true);
        let cache = self.clone();
        tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            while changes.next().await.is_some() {
                cache.forget(true);
            }
            tracing::warn!(
                "netlink address events stopped: every prepare asks the kernel from now on"
            );
            cache.forget(false);
        });
    }

    /// The addresses of `ifname`; none when it is not here.
    pub async fn of(&self, ifname: &str) -> Vec<String> {
        let changes = {
            let state = self.state();
            match state.entries.get(ifname) {
                Some((at, ips)) if at.elapsed() < MAX_AGE => return ips.clone(),
                _ => state.changes,
            }
        };
        let ips = (self.lookup)(ifname.to_string()).await;
        let mut state = self.state();
        if state.watching && state.changes == changes {
            let entry = (Instant::now(), ips.clone());
            state.entries.insert(ifname.to_string(), entry);
        }
        ips
    }

    fn forget(&self, watching: bool) {
        let mut state = self.state();
        state.watching = watching;
        state.changes += 1;
        state.entries.clear();
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is whole after any panic: each change is one assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Asks rtnetlink, on a connection of its own for each call.
pub fn kernel_lookup() -> Lookup {
    Arc::new(|ifname| Box::pin(ask_kernel(ifname)))
}

/// One item per message of rtnetlink's link and address groups.
fn kernel_changes() -> std::io::Result<impl Stream<Item = ()> + Send + 'static> {
    use rtnetlink::MulticastGroup;
    let groups = [
        MulticastGroup::Link,
        MulticastGroup::Ipv4Ifaddr,
        MulticastGroup::Ipv6Ifaddr,
    ];
    let (connection, _handle, messages) = rtnetlink::new_multicast_connection(&groups)?;
    let connection = tokio::spawn(connection);
    // The connection lives as long as the stream: aborted when it is dropped.
    let guard = AbortOnDrop(connection);
    Ok(messages.map(move |_| {
        let _ = &guard;
    }))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The addresses of interface `ifname` in this network namespace, in CIDR
/// form, from rtnetlink; none when it is not here (another namespace, a
/// test's sysfs tree) or netlink cannot be asked.
async fn ask_kernel(ifname: String) -> Vec<String> {
    use futures::TryStreamExt;
    use rtnetlink::packet_route::address::AddressAttribute;
    let Ok((connection, handle, _)) = rtnetlink::new_connection() else {
        return Vec::new();
    };
    let connection = tokio::spawn(connection);
    let mut out = Vec::new();
    let mut links = handle.link().get().match_name(ifname).execute();
    if let Ok(Some(link)) = links.try_next().await {
        let mut addresses = handle
            .address()
            .get()
            .set_link_index_filter(link.header.index)
            .execute();
        while let Ok(Some(message)) = addresses.try_next().await {
            let prefix = message.header.prefix_len;
            for attribute in &message.attributes {
                if let AddressAttribute::Address(ip) = attribute {
                    out.push(format!("{ip}/{prefix}"));
                }
            }
        }
    }
    connection.abort();
    out.dedup();
    out.truncate(MAX_IPS);
    out
}

#[cfg(test)]
mod tests;
