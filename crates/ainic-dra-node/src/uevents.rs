//! Kernel uevents (`NETLINK_KOBJECT_UEVENT`): a PCI function, netdev or
//! RDMA device added, removed, bound, unbound or changed (SR-IOV VFs
//! created, a driver reloaded, udev renaming). They tell the refresh loop
//! to rediscover at once, so that it need not re-read sysfs on a short
//! timer: with these and the netlink link events, an idle node costs a
//! heartbeat, not a discovery, every refresh interval.
//!
//! Read by a thread of its own on a blocking socket (a uevent burst is
//! rare and short); each relevant one is a unit message on a channel of
//! one, so a burst is one wake-up.

use std::io;

use tokio::sync::mpsc;

/// `NETLINK_KOBJECT_UEVENT`.
const NETLINK_KOBJECT_UEVENT: isize = 15;
/// The kernel's uevent multicast group (udev's is 2).
const KERNEL_GROUP: u32 = 1;

/// Subsystems whose devices the inventory is made of.
const SUBSYSTEMS: [&str; 5] = [
    "pci",
    "net",
    "infiniband",
    "infiniband_verbs",
    "infiniband_mad",
];

/// Whether a uevent (`ACTION@DEVPATH\0KEY=VALUE\0…`) concerns a device
/// the inventory holds.
pub(crate) fn relevant(message: &[u8]) -> bool {
    let mut fields = message.split(|b| *b == 0);
    let Some(header) = fields.next() else {
        return false;
    };
    // libudev re-broadcasts start with "libudev"; only the kernel's count.
    if !header.contains(&b'@') {
        return false;
    }
    fields.any(|f| {
        f.strip_prefix(b"SUBSYSTEM=")
            .is_some_and(|s| SUBSYSTEMS.iter().any(|wanted| wanted.as_bytes() == s))
    })
}

/// Whether a receive error says the kernel dropped uevents for want of
/// buffer space (`ENOBUFS`), after which the socket works on.
fn lost_some(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ENOBUFS)
}

/// Listens to the kernel's uevents; the receiver gets a message after
/// each relevant one (coalesced while unread). The thread ends when the
/// receiver is dropped and the next uevent comes.
pub(crate) fn subscribe() -> io::Result<mpsc::Receiver<()>> {
    let mut socket = netlink_sys::Socket::new(NETLINK_KOBJECT_UEVENT)?;
    socket.bind(&netlink_sys::SocketAddr::new(0, KERNEL_GROUP))?;
    let (tx, rx) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("uevents".into())
        .spawn(move || {
            loop {
                let wanted = match socket.recv_from_full() {
                    Ok((message, _)) => relevant(&message),
                    // The socket's buffer overflowed during a burst: what
                    // was lost is unknown, so rediscover, and go on.
                    Err(error) if lost_some(&error) => {
                        tracing::warn!("uevents were lost (receive buffer full); rediscovering");
                        true
                    }
                    Err(error) => {
                        tracing::warn!(%error, "reading uevents failed; rediscovering on the interval only");
                        return;
                    }
                };
                if wanted && let Err(mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
                    return;
                }
            }
        })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_net_and_rdma_uevents_count_and_others_do_not() {
        let vf = b"add@/devices/pci0000:00/0000:00:01.1/0000:05:00.2\0ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:01.1/0000:05:00.2\0SUBSYSTEM=pci\0PCI_ID=1DD8:1003\0SEQNUM=4242\0";
        assert!(relevant(vf));
        let rename =
            b"move@/devices/virtual/net/enp5s0\0ACTION=move\0SUBSYSTEM=net\0INTERFACE=enp5s0\0";
        assert!(relevant(rename));
        let verbs = b"add@/devices/x/infiniband_verbs/uverbs3\0SUBSYSTEM=infiniband_verbs\0";
        assert!(relevant(verbs));
        let usb = b"add@/devices/usb1/1-1\0ACTION=add\0SUBSYSTEM=usb\0";
        assert!(!relevant(usb));
        // A subsystem whose name only starts like ours.
        assert!(!relevant(b"add@/devices/x\0SUBSYSTEM=network_thing\0"));
        // udev's re-broadcast, not the kernel's.
        assert!(!relevant(b"libudev\0\xfe\xed\xca\xfeSUBSYSTEM=pci\0"));
        assert!(!relevant(b""));
    }

    #[test]
    fn an_overflow_is_lost_uevents_and_other_errors_are_not() {
        assert!(lost_some(&io::Error::from_raw_os_error(libc::ENOBUFS)));
        assert!(!lost_some(&io::Error::from_raw_os_error(libc::EBADF)));
        assert!(!lost_some(&io::Error::other("closed")));
    }
}
