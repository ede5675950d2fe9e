//! The NRI side of the sandbox hooks: the plugin's connection to the
//! container runtime, kept up for the agent's life, and the pod sandbox
//! events routed to [`Sandboxes`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri::api::PodSandbox;

use super::{Sandbox, SandboxError, Sandboxes};
use crate::NriConfig;

/// The hooks as the NRI plugin calls them.
struct Hooks(Arc<Sandboxes>);

/// Keeps the NRI plugin connected to the runtime: registers, serves the
/// hooks until the runtime closes the connection (a runtime restart), and
/// connects again, waiting 1 s after a failure and doubling up to 30 s.
pub async fn follow_runtime(config: NriConfig, sandboxes: Arc<Sandboxes>) {
    let identity = match nri::Identity::new("ainic-dra", &config.index) {
        Ok(identity) => identity,
        Err(error) => {
            tracing::error!(%error, "no NRI plugin: exclusive netdev mode cannot work");
            return;
        }
    };
    let hooks = Arc::new(Hooks(sandboxes.clone()));
    let mut wait = Duration::from_secs(1);
    loop {
        match nri::run(&config.socket, &identity, hooks.clone()).await {
            Ok(()) => {
                tracing::warn!(socket = %config.socket.display(), "the container runtime closed the NRI connection; reconnecting");
                wait = Duration::from_secs(1);
            }
            Err(error) => {
                tracing::warn!(%error, retry_in_s = wait.as_secs(), "NRI plugin not connected");
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
        sandboxes
            .synced
            .store(false, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(wait).await;
    }
}

impl nri::PodHooks for Hooks {
    /// Answers at once and converges in the background (the runtime gives
    /// `Synchronize` 2 s, and moving several netdevs may take longer),
    /// with the hooks that follow held until it is done.
    async fn synchronize(&self, pods: Vec<PodSandbox>) {
        drop(self.0.begin_synchronize(pods).await);
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.0.run(&pod).await.map_err(|e| e.to_string())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) {
        let started = Instant::now();
        self.0.detach_sandbox(&pod.id, &pod.uid).await;
        tracing::debug!(pod = %pod.name, sandbox = %pod.id, elapsed_us = started.elapsed().as_micros(), "pod sandbox stop: netdevs home");
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) {
        self.0.detach_sandbox(&pod.id, &pod.uid).await;
    }
}

impl Sandboxes {
    /// The run hook: the pod's netdevs into its sandbox.
    pub async fn run(&self, pod: &PodSandbox) -> Result<(), SandboxError> {
        if self.wanted(&pod.uid).is_empty() {
            return Ok(());
        }
        let Some(sandbox) = Sandbox::of(pod) else {
            return Err(SandboxError::NoNetns {
                pod: format!("{}/{}", pod.namespace, pod.name),
            });
        };
        let started = Instant::now();
        let result = self.attach_sandbox(&sandbox).await;
        tracing::info!(pod = %pod.name, pod_uid = %pod.uid, elapsed_us = started.elapsed().as_micros(), ok = result.is_ok(), "pod sandbox start: netdevs moved in");
        result
    }
}
