//! Upstream's NRI runtime side (`testbed/nri-runtime`, around
//! `github.com/containerd/nri/pkg/adaptation`) as a test peer: it listens
//! on an NRI socket in a temporary directory and runs pod sandbox events
//! on the plugins connected to it, one JSON command per line.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::testbed::binaries;

/// A running `nri-runtime`; stopped when dropped.
pub struct NriRuntime {
    /// The NRI socket plugins connect to.
    pub socket: PathBuf,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    _dir: tempfile::TempDir,
}

/// A pod as the runtime's commands take it: sandbox ID, pod UID and the
/// network namespace path (none when empty).
pub fn pod(id: &str, uid: &str, netns: &str) -> Value {
    json!({"id": id, "name": id, "uid": uid, "namespace": "default", "netns": netns})
}

impl NriRuntime {
    /// Builds (once) and starts the runtime; `sync_pods` are the pods it
    /// reports to each plugin's `Synchronize`.
    pub async fn start(sync_pods: &[Value]) -> NriRuntime {
        let bin = binaries("nri-runtime").join("nri-runtime");
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("nri.sock");
        let pods = dir.path().join("pods.json");
        std::fs::write(&pods, serde_json::to_vec(sync_pods).unwrap()).unwrap();
        let mut child = Command::new(&bin)
            .arg("--socket")
            .arg(&socket)
            .arg("--sync-pods")
            .arg(&pods)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..500 {
            if socket.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            socket.exists(),
            "nri-runtime made no socket at {}",
            socket.display()
        );
        NriRuntime {
            socket,
            child,
            stdin,
            stdout,
            _dir: dir,
        }
    }

    /// Sends one command and returns its result line.
    pub async fn send(&mut self, command: Value) -> Value {
        let mut line = serde_json::to_vec(&command).unwrap();
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .await
            .expect("nri-runtime stdin");
        let mut answer = String::new();
        self.stdout
            .read_line(&mut answer)
            .await
            .expect("nri-runtime stdout");
        assert!(!answer.is_empty(), "nri-runtime exited on {command}");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer}: {e}"))
    }

    /// Waits until `count` plugins are registered, configured and
    /// synchronized.
    pub async fn wait_plugins(&mut self, count: usize) -> Value {
        self.send(json!({"op": "wait-plugins", "count": count, "timeoutMs": 10000}))
            .await
    }

    /// Runs a pod sandbox event (`run-pod`, `stop-pod`, `remove-pod`).
    pub async fn pod_event(&mut self, op: &str, pod: &Value) -> Value {
        self.send(json!({"op": op, "pod": pod})).await
    }

    /// Stops the runtime (EOF on its stdin) and waits for it.
    pub async fn stop(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
    }
}
