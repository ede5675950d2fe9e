//! Exclusive netdev mode's move (issue 14): a NIC's netdev into a pod's
//! network namespace with the planned name, MTU, addresses and routes,
//! and back under its host name, with its host addresses, at sandbox stop.
//!
//! What the pod-sandbox hook calls; every value was checked at prepare
//! ([`dra_model::netdev`]). Everything goes through rtnetlink: a request
//! for a namespace is sent on a netlink socket opened inside it (by a
//! short-lived thread that enters the namespace, so no runtime thread ever
//! leaves the host's). The rename and the move are one request, as the
//! kernel needs the new name free only in the target namespace.
//!
//! Moving a link to another namespace drops its addresses, so the host's
//! are read first: the pod gets them when the plan keeps them, and the
//! host gets them back at [`detach`]. When the pod's namespace is already
//! gone the kernel has returned a physical device to the host's under its
//! pod name; [`detach`] then finds it by PCI address in sysfs.
//!
//! Called by the pod sandbox hooks ([`crate::sandbox`]), which
//! record [`survey`]'s answer in the checkpoint before [`attach`] changes
//! anything.

use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use dra_model::netdev::{Cidr, NetdevPlan};
use futures::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressScope};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};
use serde::{Deserialize, Serialize};

/// What [`attach`] did, to undo it (kept in the checkpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The netdev's name on the host.
    pub host_name: String,
    /// Its name in the pod.
    pub pod_name: String,
    /// Its MTU on the host.
    pub host_mtu: u32,
    /// Its global addresses on the host.
    pub host_addresses: Vec<Cidr>,
    /// Its PCI address, when it has one (how a device the kernel returned
    /// from a dead namespace is recognised).
    pub pci_address: Option<String>,
    /// Its MAC, when sysfs shows one (the pod sees the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// Why a move failed; names the netdev and the namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    /// A netlink request failed.
    #[error("netdev {netdev}: failed to {action}: {source}")]
    Netlink {
        /// The netdev.
        netdev: String,
        /// What was being done.
        action: String,
        /// rtnetlink's error.
        #[source]
        source: rtnetlink::Error,
    },
    /// The namespace or a netlink socket could not be opened.
    #[error("netdev {netdev}: {action}: {source}")]
    Io {
        /// The netdev.
        netdev: String,
        /// What was being done.
        action: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The pod has a link of the planned name already: nothing moved.
    #[error(
        "netdev {netdev}: cannot move into {netns} as {name}: a link of that name is there already"
    )]
    Clash {
        /// The netdev.
        netdev: String,
        /// The pod's namespace.
        netns: String,
        /// The planned name.
        name: String,
    },
    /// The netdev is not where it should be.
    #[error("netdev {netdev}: {message}")]
    Missing {
        /// The netdev.
        netdev: String,
        /// Where it was looked for.
        message: String,
    },
}

fn netlink(netdev: &str, action: &str) -> impl FnOnce(rtnetlink::Error) -> NetdevError {
    let (netdev, action) = (netdev.to_string(), action.to_string());
    move |source| NetdevError::Netlink {
        netdev,
        action,
        source,
    }
}

fn io(netdev: &str, action: &str) -> impl FnOnce(std::io::Error) -> NetdevError {
    let (netdev, action) = (netdev.to_string(), action.to_string());
    move |source| NetdevError::Io {
        netdev,
        action,
        source,
    }
}

/// A netlink handle whose socket lives in the namespace of `ns` (`None`:
/// this process's).
fn handle_in(ns: Option<&OwnedFd>) -> std::io::Result<Handle> {
    let runtime = tokio::runtime::Handle::current();
    let opened = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                // This thread only, and it ends right after.
                if let Some(fd) = ns {
                    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
                    move_into_link_name_space(fd.as_fd(), Some(LinkNameSpaceType::Network))?;
                }
                let _entered = runtime.enter();
                rtnetlink::new_connection()
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("netns thread panicked")))
    })?;
    let (connection, handle, _) = opened;
    tokio::spawn(connection);
    Ok(handle)
}

fn open_ns(path: &Path, netdev: &str) -> Result<OwnedFd, NetdevError> {
    let file = std::fs::File::open(path).map_err(io(
        netdev,
        &format!("cannot open network namespace {}", path.display()),
    ))?;
    Ok(file.into())
}

/// The index and MTU of link `name`, if it is there.
async fn find(handle: &Handle, name: &str) -> Result<Option<(u32, u32)>, NetdevError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(link)) => {
            let mtu = (link.attributes.iter())
                .find_map(|a| match a {
                    LinkAttribute::Mtu(m) => Some(*m),
                    _ => None,
                })
                .unwrap_or(0);
            Ok(Some((link.header.index, mtu)))
        }
        Ok(None) => Ok(None),
        // ENODEV: no such link.
        Err(rtnetlink::Error::NetlinkError(e))
            if e.raw_code() == -rustix::io::Errno::NODEV.raw_os_error() =>
        {
            Ok(None)
        }
        Err(e) => Err(netlink(name, "look the link up")(e)),
    }
}

/// The link's global (universe-scope) addresses.
async fn addresses(handle: &Handle, index: u32, name: &str) -> Result<Vec<Cidr>, NetdevError> {
    let mut stream = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute();
    let mut out = Vec::new();
    while let Some(message) = stream
        .try_next()
        .await
        .map_err(netlink(name, "read its addresses"))?
    {
        if message.header.scope != AddressScope::Universe {
            continue;
        }
        let address = message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        });
        if let Some(address) = address {
            out.push(Cidr {
                address,
                prefix: message.header.prefix_len,
            });
        }
    }
    Ok(out)
}

/// Gives `index` (called `name`) `addresses`, brings it up, adds `routes`.
async fn configure(
    handle: &Handle,
    index: u32,
    name: &str,
    addresses: &[Cidr],
    routes: &[dra_model::netdev::Route],
) -> Result<(), NetdevError> {
    for a in addresses {
        (handle
            .address()
            .add(index, a.address, a.prefix)
            .replace()
            .execute()
            .await)
            .map_err(netlink(name, &format!("add address {a}")))?;
    }
    (handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await)
        .map_err(netlink(name, "bring the link up"))?;
    for r in routes {
        let what = format!("add route {}", r.destination);
        let bad = |e| invalid_route(name, r, e);
        let mut builder = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(r.destination.address, r.destination.prefix)
            .map_err(bad)?
            .output_interface(index);
        if let Some(gateway) = r.gateway {
            builder = builder.gateway(gateway).map_err(bad)?;
        }
        (handle
            .route()
            .add(builder.build())
            .replace()
            .execute()
            .await)
            .map_err(netlink(name, &what))?;
    }
    Ok(())
}

fn invalid_route(name: &str, r: &dra_model::netdev::Route, e: impl std::fmt::Debug) -> NetdevError {
    NetdevError::Missing {
        netdev: name.to_string(),
        message: format!("route {}: {e:?}", r.destination),
    }
}

/// A netlink handle in the host's namespace, with the index and MTU of
/// its netdev `host_name`; an error when the host has no such link.
async fn on_host(host_name: &str) -> Result<(Handle, u32, u32), NetdevError> {
    let host = handle_in(None).map_err(io(host_name, "cannot open a netlink socket"))?;
    let (index, mtu) = find(&host, host_name)
        .await?
        .ok_or_else(|| NetdevError::Missing {
            netdev: host_name.to_string(),
            message: "is not in the host's network namespace".into(),
        })?;
    Ok((host, index, mtu))
}

/// What the host has of netdev `host_name` (MTU, global addresses, PCI
/// address) before it moves to become `plan.name`: read only, so it can
/// be recorded before anything changes.
pub async fn survey(
    host_name: &str,
    plan: &NetdevPlan,
    sysfs: &Path,
) -> Result<Attached, NetdevError> {
    let (host, index, host_mtu) = on_host(host_name).await?;
    Ok(Attached {
        host_name: host_name.to_string(),
        pod_name: plan.name.clone(),
        host_mtu,
        host_addresses: addresses(&host, index, host_name).await?,
        pci_address: pci_address(sysfs, host_name),
        mac: std::fs::read_to_string(sysfs.join("class/net").join(host_name).join("address"))
            .ok()
            .map(|m| m.trim().to_string()),
    })
}

/// Moves the netdev [`survey`] saw into the namespace at `netns` as `plan`
/// says. On failure after the move, moves it back.
pub async fn attach(
    attached: &Attached,
    netns: &Path,
    plan: &NetdevPlan,
    sysfs: &Path,
) -> Result<(), NetdevError> {
    let host_name = attached.host_name.as_str();
    let (host, index, _) = on_host(host_name).await?;
    let host_addresses = &attached.host_addresses;
    let ns = open_ns(netns, host_name)?;
    let pod = handle_in(Some(&ns)).map_err(io(
        host_name,
        "cannot open a netlink socket in the pod's namespace",
    ))?;
    if find(&pod, &plan.name).await?.is_some() {
        return Err(NetdevError::Clash {
            netdev: host_name.to_string(),
            netns: netns.display().to_string(),
            name: plan.name.clone(),
        });
    }
    (host
        .link()
        .set(LinkUnspec::new_with_index(index).down().build())
        .execute()
        .await)
        .map_err(netlink(host_name, "take the link down"))?;
    let mut moved = LinkUnspec::new_with_index(index)
        .name(plan.name.clone())
        .setns_by_fd(ns.as_raw_fd());
    if let Some(mtu) = plan.mtu {
        moved = moved.mtu(mtu);
    }
    if let Err(error) = host.link().set(moved.build()).execute().await {
        // The kernel moves the link before it renames it: a refused rename
        // can leave it in the pod under its host name. Bring it home.
        let partial = Attached {
            pod_name: host_name.to_string(),
            ..attached.clone()
        };
        if let Err(undo) = detach(&partial, Some(netns), sysfs).await {
            tracing::error!(netdev = host_name, error = %undo, "cannot move the netdev back");
        }
        let action = format!("move into {} as {}", netns.display(), plan.name);
        return Err(netlink(host_name, &action)(error));
    }
    let inside = async {
        let (pod_index, _) = find(&pod, &plan.name)
            .await?
            .ok_or_else(|| NetdevError::Missing {
                netdev: plan.name.clone(),
                message: format!("is not in {} after the move", netns.display()),
            })?;
        let wanted = plan.addresses.as_deref().unwrap_or(host_addresses);
        configure(&pod, pod_index, &plan.name, wanted, &plan.routes).await
    };
    if let Err(error) = inside.await {
        tracing::warn!(netdev = host_name, %error, "configuring the moved netdev failed; moving it back");
        if let Err(undo) = detach(attached, Some(netns), sysfs).await {
            tracing::error!(netdev = host_name, error = %undo, "cannot move the netdev back");
        }
        return Err(error);
    }
    Ok(())
}

/// Moves the netdev back to the host under its host name, with its host
/// MTU and addresses. `netns` is the pod's namespace if still known; when
/// it is gone (or the netdev is no longer in it) the netdev is looked for
/// in the host's namespace, by host name, pod name, then PCI address.
pub async fn detach(
    attached: &Attached,
    netns: Option<&Path>,
    sysfs: &Path,
) -> Result<(), NetdevError> {
    let name = &attached.host_name;
    let host_ns: OwnedFd = std::fs::File::open("/proc/self/ns/net")
        .map_err(io(name, "cannot open the host's network namespace"))?
        .into();
    let host = handle_in(None).map_err(io(name, "cannot open a netlink socket"))?;
    if let Some(path) = netns
        && let Ok(ns) = open_ns(path, name)
    {
        let pod = handle_in(Some(&ns)).map_err(io(
            name,
            "cannot open a netlink socket in the pod's namespace",
        ))?;
        if let Some((index, _)) = find(&pod, &attached.pod_name).await? {
            (pod.link()
                .set(LinkUnspec::new_with_index(index).down().build())
                .execute()
                .await)
                .map_err(netlink(&attached.pod_name, "take the link down"))?;
            let back = LinkUnspec::new_with_index(index)
                .name(name.clone())
                .mtu(attached.host_mtu)
                .setns_by_fd(host_ns.as_raw_fd())
                .build();
            (pod.link().set(back).execute().await)
                .map_err(netlink(&attached.pod_name, "move back to the host"))?;
        }
    }
    let index = match find(&host, name).await? {
        Some((index, _)) => index,
        None => returned(&host, attached, sysfs).await?,
    };
    configure(&host, index, name, &attached.host_addresses, &[]).await
}

/// A netdev the kernel returned from a dead namespace: by its PCI address
/// (under any name), else under its pod name; renamed to its host name.
/// With a PCI address known, a link of the pod name that is another
/// device (the host's own `eth1`, say) is never taken.
async fn returned(host: &Handle, attached: &Attached, sysfs: &Path) -> Result<u32, NetdevError> {
    let pci = attached.pci_address.as_deref();
    let by_pci = pci.and_then(|pci| host_netdev(sysfs, pci));
    let by_name = Some(attached.pod_name.clone())
        .filter(|name| pci.is_none() || pci_address(sysfs, name).as_deref() == pci);
    for candidate in [by_pci, by_name].into_iter().flatten() {
        if let Some((index, _)) = find(host, &candidate).await? {
            let renamed = LinkUnspec::new_with_index(index)
                .down()
                .name(attached.host_name.clone())
                .mtu(attached.host_mtu)
                .build();
            (host.link().set(renamed).execute().await)
                .map_err(netlink(&candidate, "rename it to its host name"))?;
            return Ok(index);
        }
    }
    Err(NetdevError::Missing {
        netdev: attached.host_name.clone(),
        message: format!(
            "is in neither the pod's namespace nor the host's (looked for {}, {} and PCI address {})",
            attached.host_name,
            attached.pod_name,
            attached.pci_address.as_deref().unwrap_or("unknown")
        ),
    })
}

/// The PCI address of host netdev `name`, from `<sysfs>/class/net/<name>/device`.
fn pci_address(sysfs: &Path, name: &str) -> Option<String> {
    let target = std::fs::read_link(sysfs.join("class/net").join(name).join("device")).ok()?;
    let last = target.file_name()?.to_str()?.to_string();
    last.parse::<topology::PciAddress>().ok().map(|_| last)
}

/// The host netdev of PCI function `pci` today, if it is in the host's
/// network namespace (names change; the PCI address does not).
pub fn host_netdev(sysfs: &Path, pci: &str) -> Option<String> {
    let dir: PathBuf = sysfs.join("class/net");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .find(|name| pci_address(sysfs, name).as_deref() == Some(pci))
}
