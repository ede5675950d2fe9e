//! Link events from the kernel: the rtnetlink multicast group of links
//! (what `ip monitor link` shows), turned into [`LinkEvent`]s for the run
//! loop. Behind [`LinkSource`] so hosts without netlink, and tests, can feed
//! events another way.

use futures::StreamExt;
use rtnetlink::MulticastGroup;
use rtnetlink::packet_core::NetlinkPayload;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage, State};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use super::LinkEvent;

/// Something that reports network link changes.
pub trait LinkSource {
    /// Starts watching (on the current tokio runtime); events arrive on the
    /// returned channel until it is dropped.
    fn subscribe(&self) -> std::io::Result<mpsc::Receiver<LinkEvent>>;
}

/// Link changes from rtnetlink (`RTNLGRP_LINK`) in the caller's network namespace.
#[derive(Debug, Default, Clone, Copy)]
pub struct NetlinkLinks;

/// The event a link message stands for; `None` for messages without a name.
fn link_event(message: &LinkMessage, deleted: bool) -> Option<LinkEvent> {
    let mut ifname = None;
    let mut up = false;
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => ifname = Some(name.clone()),
            LinkAttribute::OperState(state) => up = *state == State::Up,
            _ => {}
        }
    }
    ifname.map(|ifname| LinkEvent {
        ifname,
        up: up && !deleted,
    })
}

/// The event a netlink payload stands for, if it is a link message.
pub(super) fn payload_event(payload: &NetlinkPayload<RouteNetlinkMessage>) -> Option<LinkEvent> {
    match payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m)) => link_event(m, false),
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(m)) => link_event(m, true),
        _ => None,
    }
}

impl LinkSource for NetlinkLinks {
    fn subscribe(&self) -> std::io::Result<mpsc::Receiver<LinkEvent>> {
        let (connection, _handle, mut messages) =
            rtnetlink::new_multicast_connection(&[MulticastGroup::Link])?;
        let connection = tokio::spawn(connection);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            while let Some((message, _)) = messages.next().await {
                let Some(event) = payload_event(&message.payload) else {
                    continue;
                };
                tracing::debug!(ifname = %event.ifname, up = event.up, "netlink link event");
                match tx.try_send(event) {
                    // A full channel already holds a pending trigger.
                    Ok(()) | Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Closed(_)) => break,
                }
            }
            connection.abort();
        });
        Ok(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(attributes: Vec<LinkAttribute>) -> NetlinkPayload<RouteNetlinkMessage> {
        let mut m = LinkMessage::default();
        m.attributes = attributes;
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(m))
    }

    #[test]
    fn new_link_messages_become_events_with_operational_state() {
        let up = message(vec![
            LinkAttribute::IfName("ens1".into()),
            LinkAttribute::OperState(State::Up),
        ]);
        assert_eq!(
            payload_event(&up),
            Some(LinkEvent {
                ifname: "ens1".into(),
                up: true
            })
        );
        let down = message(vec![
            LinkAttribute::OperState(State::LowerLayerDown),
            LinkAttribute::IfName("ens1".into()),
        ]);
        assert_eq!(
            payload_event(&down),
            Some(LinkEvent {
                ifname: "ens1".into(),
                up: false
            })
        );
        assert_eq!(
            payload_event(&message(vec![LinkAttribute::OperState(State::Up)])),
            None
        );
    }

    #[test]
    fn deleted_links_are_down() {
        let mut m = LinkMessage::default();
        m.attributes = vec![
            LinkAttribute::IfName("v0".into()),
            LinkAttribute::OperState(State::Up),
        ];
        let payload = NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(m));
        assert_eq!(
            payload_event(&payload),
            Some(LinkEvent {
                ifname: "v0".into(),
                up: false
            })
        );
    }
}
