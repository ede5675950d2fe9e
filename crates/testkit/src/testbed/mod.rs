//! The testbed from the tests' side: real upstream Kubernetes components
//! (built from their Go modules by `testbed/build`, run by
//! `scripts/testbed`), and the pieces a test needs around them: clients
//! per identity, fake Nodes kept Ready, node-bound service-account tokens
//! for the node agents, and the real `helm`.
//!
//! A [`Testbed`] is a control plane of its own on loopback. Tests of one
//! binary usually share one (`Testbed::shared`), keeping apart by names;
//! it is taken down when the test process exits (`--watch-pid`), since a
//! `static` is never dropped. Missing binaries are built, never skipped:
//! the first build of a set takes minutes (see docs/testing.md).
//!
//! ```no_run
//! # async fn demo() {
//! use testkit::testbed::{Testbed, Version};
//! let bed = Testbed::shared(Version::V1_37);
//! let client = bed.client().await;
//! # let _ = client;
//! # }
//! ```

pub mod cluster;
pub mod helm;
pub mod node;
pub mod wait;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The Kubernetes releases the testbed pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// The oldest supported release.
    V1_34,
    /// The current release (every component).
    V1_37,
}

impl Version {
    /// `1.34` or `1.37`, as `scripts/testbed --version` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_34 => "1.34",
            Version::V1_37 => "1.37",
        }
    }

    /// The testbed set holding this release's binaries.
    pub fn set(self) -> String {
        format!("kube-{}", self.as_str())
    }
}

/// How to start a testbed.
#[derive(Clone, Debug, Default)]
pub struct UpOptions {
    /// Release; default 1.37.
    pub version: Option<Version>,
    /// `--feature-gates`, given to every component.
    pub feature_gates: Option<String>,
    /// `--runtime-config` of the API server (alpha and beta API versions).
    pub runtime_config: Option<String>,
    /// Start no kube-scheduler.
    pub no_scheduler: bool,
    /// Real nodes to add (`--nodes`): node-1 … node-N, each a real kubelet
    /// and containerd; the agent image must have been built (see
    /// [`node::agent_image`]).
    pub nodes: usize,
    /// Each node's hardware (`--sysfs`): a sysfs tree or a bundled
    /// topology's name, node K taking the K-th; default the demo topology.
    pub sysfs: Vec<String>,
    /// Run the stand-in GPU DRA driver on each node (`--gpus`).
    pub gpus: bool,
}

/// A running control plane; taken down when dropped.
#[derive(Debug)]
pub struct Testbed {
    dir: PathBuf,
    env: BTreeMap<String, String>,
    version: Version,
    _parent: tempfile::TempDir,
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The directory of a testbed set's binaries, building them first when the
/// cache lacks them (minutes, once). Panics with the build's output when
/// the build fails: a test must not run without what it needs.
pub fn binaries(set: &str) -> PathBuf {
    let out = Command::new(repo_root().join("testbed/build"))
        .arg(set)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run testbed/build {set}: {e}"));
    assert!(
        out.status.success(),
        "testbed/build {set} failed ({}); see its output above",
        out.status
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Testbed {
    /// Starts a control plane; panics (with the script's output) if it cannot.
    pub fn up(options: &UpOptions) -> Testbed {
        let version = options.version.unwrap_or(Version::V1_37);
        let parent = tempfile::Builder::new()
            .prefix("ainic-testbed-")
            .tempdir()
            .expect("temporary directory");
        let dir = parent.path().join("bed");
        let mut cmd = Command::new(repo_root().join("scripts/testbed"));
        cmd.arg("up")
            .arg("--dir")
            .arg(&dir)
            .args(["--version", version.as_str()])
            .args(["--watch-pid", &std::process::id().to_string()]);
        if let Some(gates) = &options.feature_gates {
            cmd.args(["--feature-gates", gates]);
        }
        if let Some(rc) = &options.runtime_config {
            cmd.args(["--runtime-config", rc]);
        }
        if options.no_scheduler {
            cmd.arg("--no-scheduler");
        }
        if options.nodes > 0 {
            cmd.args(["--nodes", &options.nodes.to_string()])
                .arg("--agent-image")
                .arg(node::agent_image());
            for tree in &options.sysfs {
                cmd.args(["--sysfs", tree]);
            }
            if options.gpus {
                cmd.arg("--gpus");
            }
        }
        let status = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status()
            .expect("run scripts/testbed up");
        assert!(status.success(), "scripts/testbed up failed ({status})");
        let env = read_env(&dir.join("testbed.env"));
        Testbed {
            dir,
            env,
            version,
            _parent: parent,
        }
    }

    /// One control plane per test process and release, started on first use
    /// with the release's default gates.
    pub fn shared(version: Version) -> &'static Testbed {
        static V134: OnceLock<Testbed> = OnceLock::new();
        static V137: OnceLock<Testbed> = OnceLock::new();
        let cell = match version {
            Version::V1_34 => &V134,
            Version::V1_37 => &V137,
        };
        cell.get_or_init(|| {
            Testbed::up(&UpOptions {
                version: Some(version),
                ..UpOptions::default()
            })
        })
    }

    /// The release it runs.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The exact version the API server reports (`v1.37.2`).
    pub fn git_version(&self) -> &str {
        &self.env["TESTBED_VERSION"]
    }

    /// The API server's URL.
    pub fn api_url(&self) -> &str {
        &self.env["TESTBED_API"]
    }

    /// The directory with the kubeconfigs and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's serving certificate (its own CA), for kubeconfigs.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki/apiserver.crt")
    }

    /// The cluster admin's kubeconfig.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Writes a kubeconfig for a bearer token into the testbed's directory.
    pub fn write_kubeconfig(&self, name: &str, user: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("kubeconfig-{name}"));
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testbed\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: testbed\n  context:\n    cluster: testbed\n    user: {user}\ncurrent-context: testbed\n",
            self.api_url(),
            self.ca_file().display()
        );
        std::fs::write(&path, yaml).expect("write kubeconfig");
        path
    }

    /// A client with the admin's identity.
    pub async fn client(&self) -> kube::Client {
        client_from(&self.kubeconfig()).await
    }

    /// The last lines of a component's log (for assertion messages).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("logs").join(format!("{component}.log")))
            .unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/testbed"))
            .arg("down")
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
    }
}

/// Makes ring the TLS provider of the test process: test builds link
/// several, and rustls will not pick one itself when a client is built.
pub fn choose_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    choose_crypto_provider();
    let file = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .expect("valid kubeconfig");
    kube::Client::try_from(config).expect("client")
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
