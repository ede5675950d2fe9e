//! Network namespaces and a veth pair standing in for a pod sandbox and a
//! NIC's netdev, set up and checked with iproute2 (`ip`); needs root
//! (CAP_NET_ADMIN), which [`ip`] says when refused. The peer sits in a
//! namespace of its own so the "NIC" has a carrier.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Runs `ip` with `args`; its output, or a panic naming the command.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root: CAP_NET_ADMIN)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Namespaces and links of one test, removed when dropped.
pub struct Net {
    /// The "pod" namespace.
    pub pod: String,
    /// The namespace of the veth peer (the "switch").
    pub peer: String,
    /// The "NIC" netdev on the host.
    pub nic: String,
}

impl Net {
    pub fn new(tag: &str) -> Net {
        let id = std::process::id() % 100_000;
        let net = Net {
            pod: format!("ainic-pod-{tag}-{id}"),
            peer: format!("ainic-peer-{tag}-{id}"),
            nic: format!("ain{tag}{id}"),
        };
        ip(&["netns", "add", &net.pod]);
        ip(&["netns", "add", &net.peer]);
        let peer_end = format!("{}p", net.nic);
        ip(&[
            "link", "add", &net.nic, "type", "veth", "peer", "name", &peer_end, "netns", &net.peer,
        ]);
        ip(&["-n", &net.peer, "link", "set", &peer_end, "up"]);
        ip(&["addr", "add", "10.77.0.5/24", "dev", &net.nic]);
        ip(&["link", "set", &net.nic, "up"]);
        net
    }

    pub fn pod_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.pod)
    }

    /// `ip -j` output about `link` in `ns` (`None`: the host); empty when
    /// `ip` fails, e.g. for a link that is not there (or not yet, or no
    /// longer: tests poll while the agent moves it).
    pub fn json(&self, ns: Option<&str>, what: &[&str]) -> Vec<Value> {
        let mut args = vec!["-j"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        args.extend(what);
        let out = Command::new("ip")
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run ip (iproute2): {e}"));
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    pub fn addresses(&self, ns: Option<&str>, link: &str) -> Vec<String> {
        let info = self.json(ns, &["addr", "show", "dev", link]);
        (info.iter())
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["scope"] == "global")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect()
    }

    /// The names of the links in `ns` (`None`: the host).
    pub fn links(ns: Option<&str>) -> Vec<String> {
        let mut args = vec!["-j"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        args.extend(["link", "show"]);
        let all: Vec<Value> = serde_json::from_str(&ip(&args)).unwrap_or_default();
        all.iter()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    pub fn has_link(&self, ns: Option<&str>, link: &str) -> bool {
        let all = self.json(ns, &["link", "show"]);
        all.iter().any(|l| l["ifname"] == link)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting the peer's namespace deletes the veth pair with it.
        for ns in [&self.pod, &self.peer] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip").args(["link", "del", &self.nic]).output();
    }
}
