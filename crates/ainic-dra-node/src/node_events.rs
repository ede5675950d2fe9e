//! Events about this node's agent, posted on its Node object, where
//! `kubectl describe node` shows them: why the agent publishes less than
//! its configuration asks for, and when that is over; a NIC whose hardware
//! error counters cross a threshold, and its recovery.
//!
//! `events.k8s.io/v1` Events in the `default` namespace (where the kubelet
//! and client-go put Events about cluster-scoped objects). Posting is best
//! effort: a failure is logged and retried a few times, never blocks the
//! caller, and the log line and metric say the same thing anyway.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// Namespace of the Events about the (cluster-scoped) Node.
pub(crate) const NAMESPACE: &str = "default";

/// The API limit on an Event's note, in bytes.
const NOTE_LIMIT: usize = 1024;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Things are as configured again.
    Normal,
    /// Something the operator must fix.
    Warning,
}

/// Where the agent's Events about its Node go. Tests use a recorder.
pub(crate) trait NodeEvents: Send + Sync {
    /// Posts one Event; `reason` is UpperCamelCase, `note` a sentence.
    fn post(
        &self,
        kind: EventType,
        reason: &str,
        note: &str,
    ) -> Pin<Box<dyn Future<Output = Result<(), kube::Error>> + Send + '_>>;
}

/// Posts through the API server.
pub(crate) struct KubeNodeEvents {
    api: Api<Event>,
    regarding: ObjectReference,
    controller: String,
    instance: String,
    action: &'static str,
}

impl KubeNodeEvents {
    /// Events about `node`, reported by `driver`'s node agent.
    pub(crate) fn new(client: &kube::Client, node: &ObjectMeta, driver: &str) -> Self {
        let name = node.name.clone().unwrap_or_default();
        KubeNodeEvents {
            api: Api::namespaced(client.clone(), NAMESPACE),
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                uid: node.uid.clone(),
                ..ObjectReference::default()
            },
            controller: format!("{driver}/node-agent"),
            instance: name,
            action: "PublishResourceSlices",
        }
    }

    /// The same, for Events of another action (default
    /// `PublishResourceSlices`), e.g. `AssessNicHealth`.
    pub(crate) fn with_action(mut self, action: &'static str) -> Self {
        self.action = action;
        self
    }

    fn event(&self, kind: EventType, reason: &str, note: &str) -> Event {
        let node = self.regarding.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{node}-")),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            action: Some(self.action.into()),
            reason: Some(reason.into()),
            note: Some(truncated(note)),
            type_: Some(format!("{kind:?}")),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(self.regarding.clone()),
            ..Event::default()
        }
    }
}

impl NodeEvents for KubeNodeEvents {
    fn post(
        &self,
        kind: EventType,
        reason: &str,
        note: &str,
    ) -> Pin<Box<dyn Future<Output = Result<(), kube::Error>> + Send + '_>> {
        let event = self.event(kind, reason, note);
        Box::pin(async move {
            self.api.create(&PostParams::default(), &event).await?;
            Ok(())
        })
    }
}

/// `note` cut to the API's limit, on a character boundary.
fn truncated(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_string();
    }
    let mut end = NOTE_LIMIT - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

/// Posts on a task of its own, trying a few times with backoff.
pub(crate) fn post_soon(
    events: std::sync::Arc<dyn NodeEvents>,
    kind: EventType,
    reason: &'static str,
    note: String,
) {
    tokio::spawn(async move {
        let backoff = ainic_dra_daemon::Backoff::default();
        for attempt in 1..=backoff.attempts {
            match events.post(kind, reason, &note).await {
                Ok(()) => return,
                Err(error) if attempt == backoff.attempts => {
                    tracing::warn!(reason, %error, "cannot post the event on the node; giving up (the log and metrics say the same)");
                }
                Err(error) => {
                    tracing::debug!(reason, %error, attempt, "cannot post the event on the node; trying again");
                    tokio::time::sleep(backoff.delay(attempt).min(Duration::from_secs(10))).await;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_fit_the_api_limit() {
        assert_eq!(truncated("short"), "short");
        let long = "é".repeat(NOTE_LIMIT);
        let cut = truncated(&long);
        assert!(
            cut.len() <= NOTE_LIMIT && cut.ends_with("..."),
            "{}",
            cut.len()
        );
    }
}
