//! RDMA devices and network namespaces, through the kernel's RDMA netlink
//! (`NETLINK_RDMA`, client `NLDEV`): the host's RDMA netns mode, and
//! moving an RDMA device into a pod's namespace and back.
//!
//! In `shared` mode (the kernel's default) every namespace sees every RDMA
//! device and the char devices alone give a pod its NIC's RDMA device. In
//! `exclusive` mode an RDMA device lives in one namespace, so exclusive
//! netdev mode moves it with the netdev.
//!
//! The messages are built here: no crate speaks RDMA netlink (the
//! `netlink-packet-*` family covers route, generic, audit and others, not
//! RDMA), and the few needed are small. The numbers are the kernel UAPI's
//! (`include/uapi/rdma/rdma_netlink.h`): message type
//! `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd)` = `(5 << 10) + cmd`, attributes
//! directly after the netlink header, no family header.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

/// `NETLINK_RDMA`.
const NETLINK_RDMA: isize = 20;
/// `RDMA_NL_NLDEV`: the client whose messages these are.
const NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET` (dumps devices).
const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_SET`.
const CMD_SET: u16 = 2;
/// `RDMA_NLDEV_CMD_SYS_GET`.
const CMD_SYS_GET: u16 = 6;
/// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32).
const ATTR_DEV_INDEX: u16 = 1;
/// `RDMA_NLDEV_ATTR_DEV_NAME` (string).
const ATTR_DEV_NAME: u16 = 2;
/// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE` (u8: 1 shared, 0 exclusive).
const ATTR_NETNS_MODE: u16 = 66;
/// `RDMA_NLDEV_NET_NS_FD` (u32).
const ATTR_NET_NS_FD: u16 = 68;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const HEADER: usize = 16;

/// The host's RDMA network-namespace mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetnsMode {
    /// Every namespace sees every RDMA device (the kernel's default).
    Shared,
    /// An RDMA device lives in one namespace.
    Exclusive,
}

/// Why an RDMA netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// The kernel has no RDMA netlink (no RDMA subsystem loaded).
    #[error("the kernel has no RDMA netlink (is ib_core loaded?): {0}")]
    Unavailable(#[source] std::io::Error),
    /// A socket or namespace operation failed.
    #[error("RDMA netlink: {action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused the request.
    #[error("RDMA netlink: {action}: the kernel answered {errno} ({})", std::io::Error::from_raw_os_error(*.errno))]
    Refused {
        /// What was asked.
        action: String,
        /// The errno.
        errno: i32,
    },
    /// The device is not in the namespace it was looked for in.
    #[error("RDMA device {0} is not in that network namespace")]
    NotFound(String),
    /// An answer that cannot be read.
    #[error("RDMA netlink: unreadable answer: {0}")]
    Malformed(String),
}

/// What moves RDMA devices; the kernel, or a fake in tests.
pub trait RdmaNetns: Send + Sync {
    /// The host's mode.
    fn mode(&self) -> Result<NetnsMode, RdmaError>;
    /// Moves RDMA device `name`, found in the namespace at `from` (`None`:
    /// the agent's own), into the namespace at `to` (`None`: the agent's).
    fn move_device(
        &self,
        name: &str,
        from: Option<&Path>,
        to: Option<&Path>,
    ) -> Result<(), RdmaError>;
}

/// One netlink message of client NLDEV.
pub fn message(cmd: u16, flags: u16, seq: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER];
    for (kind, payload) in attrs {
        let len = 4 + payload.len();
        out.extend_from_slice(&(len as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        out.resize(out.len().next_multiple_of(4), 0);
    }
    let total = out.len() as u32;
    out[0..4].copy_from_slice(&total.to_ne_bytes());
    out[4..6].copy_from_slice(&((NLDEV << 10) + cmd).to_ne_bytes());
    out[6..8].copy_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    out
}

/// The request for the host's netns mode.
pub fn sys_get(seq: u32) -> Vec<u8> {
    message(CMD_SYS_GET, NLM_F_ACK, seq, &[])
}

/// The request that lists the RDMA devices of the socket's namespace.
pub fn dump_devices(seq: u32) -> Vec<u8> {
    message(CMD_GET, NLM_F_DUMP, seq, &[])
}

/// The request that moves device `index` into the namespace of `netns_fd`.
pub fn set_netns(seq: u32, index: u32, netns_fd: u32) -> Vec<u8> {
    message(
        CMD_SET,
        NLM_F_ACK,
        seq,
        &[
            (ATTR_DEV_INDEX, &index.to_ne_bytes()),
            (ATTR_NET_NS_FD, &netns_fd.to_ne_bytes()),
        ],
    )
}

/// One message of an answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// A data message's attributes, `(type, payload)`.
    Data(Vec<(u16, Vec<u8>)>),
    /// An acknowledgement (0) or an error (a negative errno).
    Ack(i32),
    /// The end of a dump.
    Done,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// The messages of one datagram.
pub fn parse(mut bytes: &[u8]) -> Result<Vec<Reply>, RdmaError> {
    let mut out = Vec::new();
    while bytes.len() >= HEADER {
        let len = u32::from_ne_bytes(bytes[0..4].try_into().unwrap()) as usize;
        if len < HEADER || len > bytes.len() {
            return Err(RdmaError::Malformed(format!("message length {len}")));
        }
        let body = &bytes[HEADER..len];
        out.push(match u16_at(bytes, 4) {
            NLMSG_ERROR if body.len() >= 4 => {
                Reply::Ack(i32::from_ne_bytes(body[0..4].try_into().unwrap()))
            }
            NLMSG_ERROR => return Err(RdmaError::Malformed("short error message".into())),
            NLMSG_DONE => Reply::Done,
            _ => Reply::Data(attributes(body)?),
        });
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    Ok(out)
}

fn attributes(mut body: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, RdmaError> {
    let mut out = Vec::new();
    while body.len() >= 4 {
        let len = u16_at(body, 0) as usize;
        if len < 4 || len > body.len() {
            return Err(RdmaError::Malformed(format!("attribute length {len}")));
        }
        out.push((u16_at(body, 2) & 0x3fff, body[4..len].to_vec()));
        body = &body[len.next_multiple_of(4).min(body.len())..];
    }
    Ok(out)
}

/// The mode in a SYS_GET answer.
pub fn mode_of(replies: &[Reply]) -> Result<NetnsMode, RdmaError> {
    for reply in replies {
        match reply {
            Reply::Data(attrs) => {
                if let Some((_, v)) = attrs.iter().find(|(k, _)| *k == ATTR_NETNS_MODE) {
                    return Ok(match v.first() {
                        Some(0) => NetnsMode::Exclusive,
                        _ => NetnsMode::Shared,
                    });
                }
            }
            Reply::Ack(e) if *e < 0 => {
                return Err(RdmaError::Refused {
                    action: "read the netns mode".into(),
                    errno: -e,
                });
            }
            _ => {}
        }
    }
    // Kernels before netns support have no such attribute: shared.
    Ok(NetnsMode::Shared)
}

/// The index of device `name` in a device dump.
pub fn index_of(replies: &[Reply], name: &str) -> Option<u32> {
    replies.iter().find_map(|r| {
        let Reply::Data(attrs) = r else { return None };
        let named = attrs.iter().any(|(k, v)| {
            *k == ATTR_DEV_NAME && v.split(|b| *b == 0).next() == Some(name.as_bytes())
        });
        let index = attrs.iter().find(|(k, _)| *k == ATTR_DEV_INDEX)?;
        let index = u32::from_ne_bytes(index.1.get(..4)?.try_into().ok()?);
        named.then_some(index)
    })
}

/// The kernel's RDMA netlink.
pub struct Kernel;

fn io(action: &str) -> impl FnOnce(std::io::Error) -> RdmaError {
    let action = action.to_string();
    move |source| RdmaError::Io { action, source }
}

fn open_socket() -> Result<netlink_sys::Socket, RdmaError> {
    let mut socket = netlink_sys::Socket::new(NETLINK_RDMA).map_err(RdmaError::Unavailable)?;
    socket
        .bind_auto()
        .map_err(io("bind a NETLINK_RDMA socket"))?;
    Ok(socket)
}

/// Sends `request` and reads answers until an ack, an error or a dump's end.
fn exchange(socket: &netlink_sys::Socket, request: &[u8]) -> Result<Vec<Reply>, RdmaError> {
    socket.send(request, 0).map_err(io("send a request"))?;
    let mut all = Vec::new();
    loop {
        let (bytes, _) = socket.recv_from_full().map_err(io("read an answer"))?;
        let replies = parse(&bytes)?;
        let end = replies
            .iter()
            .any(|r| matches!(r, Reply::Ack(_) | Reply::Done));
        all.extend(replies);
        if end || bytes.is_empty() {
            return Ok(all);
        }
    }
}

fn open_ns(path: &Path) -> Result<OwnedFd, RdmaError> {
    let file = std::fs::File::open(path)
        .map_err(io(&format!("open network namespace {}", path.display())))?;
    Ok(file.into())
}

impl Kernel {
    fn move_here(name: &str, to: &OwnedFd) -> Result<(), RdmaError> {
        let socket = open_socket()?;
        let index = index_of(&exchange(&socket, &dump_devices(1))?, name)
            .ok_or_else(|| RdmaError::NotFound(name.to_string()))?;
        let replies = exchange(&socket, &set_netns(2, index, to.as_raw_fd() as u32))?;
        match replies.iter().find_map(|r| match r {
            Reply::Ack(e) => Some(*e),
            _ => None,
        }) {
            Some(0) | None => Ok(()),
            Some(e) => Err(RdmaError::Refused {
                action: format!("move {name} to another network namespace"),
                errno: -e,
            }),
        }
    }
}

impl RdmaNetns for Kernel {
    fn mode(&self) -> Result<NetnsMode, RdmaError> {
        mode_of(&exchange(&open_socket()?, &sys_get(1))?)
    }

    fn move_device(
        &self,
        name: &str,
        from: Option<&Path>,
        to: Option<&Path>,
    ) -> Result<(), RdmaError> {
        let to = match to {
            Some(path) => open_ns(path)?,
            None => open_ns(Path::new("/proc/thread-self/ns/net"))?,
        };
        let Some(from) = from else {
            return Kernel::move_here(name, &to);
        };
        let from = open_ns(from)?;
        // The request goes out of a socket in the source namespace, from a
        // thread of its own that enters it (and ends right after).
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
                    move_into_link_name_space(from.as_fd(), Some(LinkNameSpaceType::Network))
                        .map_err(|e| io("enter the pod's network namespace")(e.into()))?;
                    Kernel::move_here(name, &to)
                })
                .join()
                .unwrap_or_else(|_| Err(RdmaError::Malformed("netns thread panicked".into())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_uapi_numbers() {
        let set = set_netns(7, 3, 42);
        assert_eq!(set.len(), 16 + 8 + 8);
        assert_eq!(u32::from_ne_bytes(set[0..4].try_into().unwrap()), 32);
        // RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SET) = 5122.
        assert_eq!(u16_at(&set, 4), 5122);
        assert_eq!(u16_at(&set, 6), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(u32::from_ne_bytes(set[8..12].try_into().unwrap()), 7);
        assert_eq!(
            parse(&set).unwrap(),
            [Reply::Data(vec![
                (1, 3u32.to_ne_bytes().to_vec()),
                (68, 42u32.to_ne_bytes().to_vec())
            ])]
        );
        // SYS_GET = 5126; a dump of devices (GET = 5121) asks for a dump.
        assert_eq!(u16_at(&sys_get(1), 4), 5126);
        let dump = dump_devices(1);
        assert_eq!((u16_at(&dump, 4), u16_at(&dump, 6)), (5121, 0x301));
    }

    fn answer(attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut bytes = message(CMD_GET, 0, 1, attrs);
        let mut ack = vec![0u8; 20];
        ack[0..4].copy_from_slice(&20u32.to_ne_bytes());
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        bytes.extend(ack);
        bytes
    }

    #[test]
    fn the_mode_and_a_devices_index_are_read_from_answers() {
        let exclusive = parse(&answer(&[(ATTR_NETNS_MODE, &[0])])).unwrap();
        assert_eq!(mode_of(&exclusive).unwrap(), NetnsMode::Exclusive);
        let shared = parse(&answer(&[(ATTR_NETNS_MODE, &[1])])).unwrap();
        assert_eq!(mode_of(&shared).unwrap(), NetnsMode::Shared);
        assert_eq!(exclusive.last(), Some(&Reply::Ack(0)));

        let mut dump = message(
            CMD_GET,
            0,
            1,
            &[
                (ATTR_DEV_INDEX, &4u32.to_ne_bytes()),
                (ATTR_DEV_NAME, b"rocep12s0\0"),
            ],
        );
        dump.extend(message(
            CMD_GET,
            0,
            1,
            &[
                (ATTR_DEV_INDEX, &9u32.to_ne_bytes()),
                (ATTR_DEV_NAME, b"ionic_1\0"),
            ],
        ));
        let replies = parse(&dump).unwrap();
        assert_eq!(index_of(&replies, "ionic_1"), Some(9));
        assert_eq!(index_of(&replies, "rocep12s0"), Some(4));
        assert_eq!(index_of(&replies, "ionic_2"), None);
    }

    /// On a kernel with RDMA the mode is read; on one without (this
    /// sandbox's) the socket cannot be opened and that is told apart from
    /// other failures, which the hooks treat as "no RDMA device to move".
    #[test]
    fn the_kernel_answers_the_mode_or_says_it_has_no_rdma() {
        match Kernel.mode() {
            Ok(mode) => eprintln!("RDMA netns mode here: {mode:?}"),
            Err(RdmaError::Unavailable(e)) => eprintln!("no RDMA netlink here: {e}"),
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn a_refusal_and_a_truncated_answer_are_errors() {
        let mut refused = vec![0u8; 20];
        refused[0..4].copy_from_slice(&20u32.to_ne_bytes());
        refused[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        refused[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        let err = mode_of(&parse(&refused).unwrap()).unwrap_err().to_string();
        assert!(err.contains("netns mode"), "{err}");
        let mut cut = sys_get(1);
        cut[0..4].copy_from_slice(&64u32.to_ne_bytes());
        assert!(matches!(parse(&cut), Err(RdmaError::Malformed(_))));
    }
}
