//! An NRI plugin that follows pod sandboxes: it registers with the
//! runtime, subscribes to pod sandbox run, stop and remove, and hands
//! each to [`PodHooks`].
//!
//! Lifecycle on one socket connection: serve the `Plugin` service on
//! connection 1 first (the runtime may call `Configure` before it answers
//! the registration), then call `Runtime.RegisterPlugin` on connection 2;
//! the runtime then calls `Configure`, `Synchronize` (possibly in chunks,
//! each answered with its own `more` flag), and the subscribed events
//! until it closes the socket. Both the pod-sandbox RPCs of NRI v0.12 and
//! the `StateChange` events older runtimes send are served, by the same
//! hooks.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use crate::api::{self, Event, PodSandbox};
use crate::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::ttrpc::{self, Client, Status, TtrpcError, code};

/// The runtime's service, as ttrpc names it.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The plugin's service, as ttrpc names it.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// How long registration may take (the runtime's own limit).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// What the plugin does at pod sandbox events.
pub trait PodHooks: Send + Sync + 'static {
    /// The runtime's pods when the plugin (re)connects: state to rebuild.
    fn synchronize(&self, pods: Vec<PodSandbox>) -> impl Future<Output = ()> + Send;
    /// A pod sandbox starts (its network namespace exists); an error
    /// fails the sandbox with that message.
    fn run_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = Result<(), String>> + Send;
    /// A pod sandbox stops; never fails (the pod is going either way).
    fn stop_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = ()> + Send;
    /// A pod sandbox is removed.
    fn remove_pod_sandbox(&self, pod: PodSandbox) -> impl Future<Output = ()> + Send;
}

/// The plugin's name and index (its place among the runtime's plugins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `[A-Za-z0-9_.+-]+`.
    pub name: String,
    /// Exactly two digits.
    pub index: String,
}

/// Why the plugin could not run.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// Name or index the runtime would refuse.
    #[error("NRI plugin {what} {value:?} is invalid: {rule}")]
    Identity {
        /// "name" or "index".
        what: &'static str,
        /// The value given.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// The runtime's socket could not be reached.
    #[error("cannot connect to the NRI socket {path}: {source}")]
    Connect {
        /// The socket.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The runtime refused or did not answer the registration.
    #[error("NRI registration failed: {0}")]
    Register(#[source] TtrpcError),
    /// The connection failed while serving.
    #[error("NRI connection failed: {0}")]
    Serve(#[source] TtrpcError),
}

impl Identity {
    /// Checks `name` and `index` as the runtime will.
    pub fn new(name: &str, index: &str) -> Result<Identity, PluginError> {
        let name_ok = !name.is_empty()
            && (name.chars()).all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        if !name_ok {
            return Err(PluginError::Identity {
                what: "name",
                value: name.into(),
                rule: "one or more of A-Z a-z 0-9 _ . + -",
            });
        }
        if index.len() != 2 || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(PluginError::Identity {
                what: "index",
                value: index.into(),
                rule: "exactly two digits",
            });
        }
        Ok(Identity {
            name: name.into(),
            index: index.into(),
        })
    }
}

/// The events the plugin subscribes to, as `Configure` answers them.
pub fn event_mask() -> i32 {
    [
        Event::RunPodSandbox,
        Event::StopPodSandbox,
        Event::RemovePodSandbox,
    ]
    .iter()
    .fold(0, |mask, e| mask | 1 << (*e as i32 - 1))
}

/// Connects to the runtime at `socket`, registers, and serves `hooks`
/// until the runtime closes the connection (`Ok`) or it fails. The caller
/// reconnects: a runtime restart closes every plugin's connection.
pub async fn run<H: PodHooks>(
    socket: &Path,
    identity: &Identity,
    hooks: Arc<H>,
) -> Result<(), PluginError> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| PluginError::Connect {
            path: socket.display().to_string(),
            source,
        })?;
    let mut conns = mux::split(stream, &[PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN]);
    let runtime = Client::new(conns.pop().expect("runtime connection"));
    let plugin = conns.pop().expect("plugin connection");
    let service = Arc::new(Dispatch {
        hooks,
        synced: Mutex::default(),
    });
    let serving = tokio::spawn(ttrpc::serve(plugin, service));
    let request = api::RegisterPluginRequest {
        plugin_name: identity.name.clone(),
        plugin_idx: identity.index.clone(),
        nri_version: String::new(),
    };
    let registered = runtime
        .call::<_, api::Empty>(
            RUNTIME_SERVICE,
            "RegisterPlugin",
            &request,
            REGISTRATION_TIMEOUT,
        )
        .await;
    if let Err(e) = registered {
        serving.abort();
        return Err(PluginError::Register(e));
    }
    tracing::info!(plugin = %identity.name, index = %identity.index, "registered with the container runtime (NRI)");
    match serving.await {
        Ok(result) => result.map_err(PluginError::Serve),
        Err(join) => Err(PluginError::Serve(TtrpcError::Protocol(join.to_string()))),
    }
}

/// The `Plugin` service: decodes each call and routes it to the hooks.
struct Dispatch<H> {
    hooks: Arc<H>,
    /// Pods of a `Synchronize` sent in chunks, until its last one.
    synced: Mutex<Vec<PodSandbox>>,
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, Status> {
    M::decode(payload).map_err(|e| {
        Status::new(
            code::INVALID_ARGUMENT,
            format!("{method}: cannot decode the request: {e}"),
        )
    })
}

impl<H: PodHooks> ttrpc::Service for Dispatch<H> {
    async fn call(&self, service: &str, method: &str, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        if service != PLUGIN_SERVICE {
            return Err(Status::new(
                code::UNIMPLEMENTED,
                format!("service {service}"),
            ));
        }
        let p = &payload[..];
        let reply = match method {
            "Configure" => {
                let request: api::ConfigureRequest = decode(method, p)?;
                tracing::info!(runtime = %request.runtime_name, version = %request.runtime_version, "NRI configure");
                api::ConfigureResponse {
                    events: event_mask(),
                }
                .encode_to_vec()
            }
            "Synchronize" => self.synchronize(decode(method, p)?).await.encode_to_vec(),
            "RunPodSandbox" => {
                let request: api::RunPodSandboxRequest = decode(method, p)?;
                self.run(request.pod).await?;
                Vec::new()
            }
            "StopPodSandbox" => {
                let request: api::StopPodSandboxRequest = decode(method, p)?;
                self.hooks
                    .stop_pod_sandbox(request.pod.unwrap_or_default())
                    .await;
                Vec::new()
            }
            "RemovePodSandbox" => {
                let request: api::RemovePodSandboxRequest = decode(method, p)?;
                (self.hooks)
                    .remove_pod_sandbox(request.pod.unwrap_or_default())
                    .await;
                Vec::new()
            }
            "StateChange" => {
                self.state_change(decode(method, p)?).await?;
                Vec::new()
            }
            // Not subscribed, but answered harmlessly should a runtime send
            // them anyway: no adjustment, no update.
            "CreateContainer" | "UpdateContainer" | "StopContainer" | "UpdatePodSandbox"
            | "Shutdown" => Vec::new(),
            _ => {
                return Err(Status::new(code::UNIMPLEMENTED, format!("method {method}")));
            }
        };
        Ok(reply)
    }
}

impl<H: PodHooks> Dispatch<H> {
    async fn synchronize(&self, request: api::SynchronizeRequest) -> api::SynchronizeResponse {
        let mut synced = self.synced.lock().await;
        synced.extend(request.pods);
        if !request.more {
            let pods = std::mem::take(&mut *synced);
            drop(synced);
            self.hooks.synchronize(pods).await;
        }
        api::SynchronizeResponse {
            update: Vec::new(),
            more: request.more,
        }
    }

    async fn run(&self, pod: Option<PodSandbox>) -> Result<(), Status> {
        (self.hooks.run_pod_sandbox(pod.unwrap_or_default()).await)
            .map_err(|message| Status::new(code::UNKNOWN, message))
    }

    async fn state_change(&self, event: api::StateChangeEvent) -> Result<(), Status> {
        let pod = event.pod.unwrap_or_default();
        match Event::try_from(event.event) {
            Ok(Event::RunPodSandbox) => self.run(Some(pod)).await?,
            Ok(Event::StopPodSandbox) => self.hooks.stop_pod_sandbox(pod).await,
            Ok(Event::RemovePodSandbox) => self.hooks.remove_pod_sandbox(pod).await,
            _ => {}
        }
        Ok(())
    }
}

/// The path of the pod's network namespace, if the runtime gave one.
pub fn network_namespace(pod: &PodSandbox) -> Option<&str> {
    let linux = pod.linux.as_ref()?;
    (linux.namespaces.iter())
        .find(|ns| ns.r#type == "network" && !ns.path.is_empty())
        .map(|ns| ns.path.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_subscribes_to_pod_run_stop_and_remove_only() {
        assert_eq!(event_mask(), 0b111);
    }

    #[test]
    fn names_and_indexes_the_runtime_refuses_are_refused_here() {
        assert!(Identity::new("ainic-dra", "10").is_ok());
        for (name, index) in [("", "10"), ("ainic dra", "10"), ("a/b", "10")] {
            let err = Identity::new(name, index).unwrap_err().to_string();
            assert!(err.contains("name"), "{err}");
        }
        for index in ["1", "100", "a1"] {
            let err = Identity::new("ainic-dra", index).unwrap_err().to_string();
            assert!(err.contains("two digits"), "{err}");
        }
    }

    /// Records hook calls as `hook uid`.
    #[derive(Default)]
    struct Seen(std::sync::Mutex<Vec<String>>);

    impl Seen {
        fn note(&self, what: String) {
            self.0.lock().unwrap().push(what);
        }
    }

    impl PodHooks for Seen {
        async fn synchronize(&self, pods: Vec<PodSandbox>) {
            let uids: Vec<_> = pods.iter().map(|p| p.uid.as_str()).collect();
            self.note(format!("sync {}", uids.join(",")));
        }
        async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
            self.note(format!("run {}", pod.uid));
            Ok(())
        }
        async fn stop_pod_sandbox(&self, pod: PodSandbox) {
            self.note(format!("stop {}", pod.uid));
        }
        async fn remove_pod_sandbox(&self, pod: PodSandbox) {
            self.note(format!("remove {}", pod.uid));
        }
    }

    fn dispatch() -> Dispatch<Seen> {
        Dispatch {
            hooks: Arc::new(Seen::default()),
            synced: Mutex::default(),
        }
    }

    fn pod(uid: &str) -> Option<PodSandbox> {
        Some(PodSandbox {
            uid: uid.into(),
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn state_change_events_reach_the_same_hooks() {
        use ttrpc::Service;
        let d = dispatch();
        for (event, uid) in [
            (Event::RunPodSandbox, "a"),
            (Event::StopPodSandbox, "a"),
            (Event::RemovePodSandbox, "a"),
            (Event::StartContainer, "b"),
        ] {
            let change = api::StateChangeEvent {
                event: event as i32,
                pod: pod(uid),
                container: None,
            };
            let reply = d.call(PLUGIN_SERVICE, "StateChange", change.encode_to_vec());
            assert_eq!(reply.await.unwrap(), Vec::<u8>::new());
        }
        assert_eq!(*d.hooks.0.lock().unwrap(), ["run a", "stop a", "remove a"]);
    }

    #[tokio::test]
    async fn a_synchronize_in_chunks_echoes_more_and_syncs_once_at_the_end() {
        use ttrpc::Service;
        let d = dispatch();
        for (uids, more) in [(["a", "b"], true), (["c", "d"], false)] {
            let request = api::SynchronizeRequest {
                pods: uids.iter().map(|u| pod(u).unwrap()).collect(),
                containers: Vec::new(),
                more,
            };
            let reply = d.call(PLUGIN_SERVICE, "Synchronize", request.encode_to_vec());
            let reply = api::SynchronizeResponse::decode(&reply.await.unwrap()[..]).unwrap();
            assert_eq!(reply.more, more);
            assert!(reply.update.is_empty());
        }
        assert_eq!(*d.hooks.0.lock().unwrap(), ["sync a,b,c,d"]);
    }

    #[tokio::test]
    async fn unknown_methods_and_services_are_unimplemented() {
        use ttrpc::Service;
        let d = dispatch();
        for (service, method) in [
            (PLUGIN_SERVICE, "PostStartContainer"),
            ("other.Service", "Configure"),
        ] {
            let err = d.call(service, method, Vec::new()).await.unwrap_err();
            assert_eq!(err.code, code::UNIMPLEMENTED, "{service} {method}");
        }
        let bad = d
            .call(PLUGIN_SERVICE, "RunPodSandbox", vec![0xff, 0xff])
            .await;
        assert_eq!(bad.unwrap_err().code, code::INVALID_ARGUMENT);
    }

    #[test]
    fn the_network_namespace_is_the_network_entry() {
        let pod = PodSandbox {
            linux: Some(api::LinuxPodSandbox {
                namespaces: vec![
                    api::LinuxNamespace {
                        r#type: "ipc".into(),
                        path: "/proc/1/ns/ipc".into(),
                    },
                    api::LinuxNamespace {
                        r#type: "network".into(),
                        path: "/run/netns/cni-1".into(),
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(network_namespace(&pod), Some("/run/netns/cni-1"));
        assert_eq!(network_namespace(&PodSandbox::default()), None);
    }
}
