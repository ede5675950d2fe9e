//! The Helm chart under deploy/helm/ainic-dra, rendered by the real helm
//! (`testbed/build helm`): every object is the Kubernetes type it claims,
//! the agent's flags are ones `ainic-dra node` accepts, the mounts match the
//! paths the agent uses, RBAC is least privilege, the DeviceClasses equal
//! deploy/deviceclasses, and the admission policy is bound and names the
//! agent's service account. What the policy admits is judged by the real
//! API server in `tests/testbed/admission.rs`.

mod objects;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use testkit::testbed::helm::{self, Rendered};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/ainic-dra")
}

/// The release every test renders: name and namespace.
struct Release {
    name: &'static str,
    namespace: &'static str,
}

const RELEASE: Release = Release {
    name: "ainic-dra",
    namespace: "ainic-system",
};

/// The newest Kubernetes the chart is rendered for.
const KUBE_VERSION: &str = "1.37.0";

fn render(overrides: Value) -> Vec<Rendered> {
    helm::template(
        &chart_dir(),
        RELEASE.name,
        RELEASE.namespace,
        &overrides,
        KUBE_VERSION,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn find<'a>(objects: &'a [Rendered], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .map(|r| &r.object)
        .filter(|o| o["kind"] == kind)
        .collect()
}

fn daemonset(objects: &[Rendered]) -> &Value {
    let sets = find(objects, "DaemonSet");
    assert_eq!(sets.len(), 1);
    sets[0]
}

fn container(objects: &[Rendered]) -> &Value {
    &daemonset(objects)["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Rendered]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn kinds(objects: &[Rendered]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|r| r.object["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds
}

/// Every object typed strictly, namespaced ones in the release namespace.
fn check_all_typed(objects: &[Rendered]) {
    for r in objects {
        objects::check_typed(&r.object)
            .unwrap_or_else(|e| panic!("{} ({}): {e}", r.file, r.object["kind"]));
        let namespaced = matches!(
            r.object["kind"].as_str(),
            Some(
                "ServiceAccount"
                    | "ConfigMap"
                    | "Service"
                    | "DaemonSet"
                    | "Deployment"
                    | "Job"
                    | "Role"
                    | "RoleBinding"
            )
        );
        let ns = r.object["metadata"]["namespace"].as_str();
        assert_eq!(ns.is_some(), namespaced, "{}: namespace {ns:?}", r.file);
        if namespaced {
            assert_eq!(ns, Some(RELEASE.namespace));
        }
    }
}

/// Runs the real binary with the DaemonSet's arguments and `--help` last:
/// clap rejects an unknown flag or a bad value before it reaches `--help`.
/// `$(HOST_IP)` is expanded as the kubelet expands it (from the pod's
/// `status.hostIP`), here to an IPv4 address.
fn assert_binary_accepts(args: &[String]) {
    assert_binary_accepts_on(args, "10.0.0.5");
}

/// The controller Deployment's arguments, given to `ainic-dra controller`
/// with `--help` last: the image's `ainic-dra-controller` takes the same
/// flags (both parse `ainic_dra_controller::cli::ControllerArgs`).
fn assert_controller_accepts(args: &[String]) {
    let mut args = args.to_vec();
    args.insert(0, "controller".into());
    assert_binary_accepts(&args);
}

/// `args` with `$(HOST_IP)` expanded to `host_ip`, as the kubelet does.
fn expanded(args: &[String], host_ip: &str) -> Vec<String> {
    args.iter()
        .map(|a| a.replace("$(HOST_IP)", host_ip))
        .collect()
}

/// [`assert_binary_accepts`] on a node whose IP is `host_ip`.
fn assert_binary_accepts_on(args: &[String], host_ip: &str) {
    let args = expanded(args, host_ip);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ainic-dra rejects the chart's arguments {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn default_values_render_every_object_as_its_kubernetes_type() {
    let objects = render(json!({}));
    check_all_typed(&objects);
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "DaemonSet",
            "Deployment",
            "DeviceClass",
            "DeviceClass",
            "DeviceClass",
            "DeviceClass",
            "Job",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceAccount",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
    );
    let args = args(&objects);
    assert_binary_accepts(&args);
    let cleanup = named(&objects, "Job", "-cleanup");
    let cleanup_args: Vec<String> = serde_json::from_value(
        cleanup["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    assert_binary_accepts(&cleanup_args);
    assert_eq!(
        cleanup["metadata"]["annotations"]["helm.sh/hook"], "post-delete",
        "the cleanup runs after helm uninstall deleted the agents"
    );
    assert_controller_accepts(&controller_args(&objects));
    assert!(!args.iter().any(|a| a.starts_with("--device-plugin")));
    assert!(!args.iter().any(|a| a.starts_with("--feature-gates")));
    let image = container(&objects)["image"].as_str().unwrap();
    assert_eq!(
        image, "ghcr.io/amd/ainic-dra:0.1.0",
        "tag defaults to appVersion"
    );
}

#[test]
fn classic_path_and_options_render_and_are_accepted_by_the_agent() {
    let objects = render(json!({
        "featureGates": {"DRADeviceTaints": true, "DRAConsumableCapacity": true},
        "model": {
            "gpuPairingAttribute": "gpu.amd.com/pciAddr",
            "sharedPfs": ["0000:0c:00.0", "enp140s0"],
            "pfQueuePairs": 16384,
        },
        "fabric": {"config": {
            "defaults": {"fabric": "pod-a"},
            "nodes": {"node-a": {"leafSwitch": "leaf-07", "nics": {"0000:0c:00.0": {"rail": 0}}}},
        }},
        "classic": {
            "enabled": true,
            "cdi": true,
            "config": {"resources": [{"name": "amd.com/nic", "selectors": {"pciIds": ["1dd8:1002"]}}]},
        },
    }));
    check_all_typed(&objects);
    let args = args(&objects);
    assert_binary_accepts(&args);
    for wanted in [
        "--feature-gates=DRAConsumableCapacity=true,DRADeviceTaints=true",
        "--gpu-pairing-attribute=gpu.amd.com/pciAddr",
        "--shared-pfs=0000:0c:00.0,enp140s0",
        "--pf-queue-pairs=16384",
        "--fabric-config=/etc/ainic-dra/fabric.yaml",
        "--device-plugin",
        "--device-plugin-dir=/var/lib/kubelet/device-plugins",
        "--device-plugin-config=/etc/ainic-dra/device-plugin.yaml",
        "--cdi-enabled",
    ] {
        assert!(
            args.iter().any(|a| a == wanted),
            "{wanted} missing from {args:?}"
        );
    }
    // The ConfigMap holds files the agent's own parsers accept.
    let maps = find(&objects, "ConfigMap");
    assert_eq!(maps.len(), 1);
    let fabric = maps[0]["data"]["fabric.yaml"].as_str().unwrap();
    let parsed = dra_model::fabric::FabricFile::parse(fabric, "fabric.yaml").unwrap();
    assert_eq!(parsed.defaults.fabric.as_deref(), Some("pod-a"));
    assert_eq!(parsed.nodes["node-a"].nics["0000:0c:00.0"].rail, Some(0));
    let classic = maps[0]["data"]["device-plugin.yaml"].as_str().unwrap();
    dra_model::classic::ClassicConfig::from_yaml(classic, Path::new("device-plugin.yaml"))
        .unwrap_or_else(|e| panic!("device plugin config rejected: {e}\n{classic}"));
    let mounts = mounts(&objects);
    assert!(mounts.contains(&("/var/lib/kubelet/device-plugins".into(), false)));
    assert!(mounts.contains(&("/etc/ainic-dra".into(), true)));
}

#[test]
fn health_values_render_as_counter_health_flags_the_agent_accepts() {
    let defaults = args(&render(json!({})));
    for wanted in [
        "--health-counters=true",
        "--health-window=60",
        "--health-quiet-period=300",
    ] {
        assert!(
            defaults.iter().any(|a| a == wanted),
            "{wanted} missing from {defaults:?}"
        );
    }
    assert!(!defaults.iter().any(|a| a.starts_with("--health-threshold")));
    let objects = render(json!({"health": {
        "counters": true,
        "window": 30,
        "quietPeriod": 120,
        // `off` as YAML writes it unquoted: false.
        "thresholds": {"symbol_error": "5,100", "hw_counters/out_of_buffer": "-,1000", "link_downed": false},
    }}));
    let args = args(&objects);
    assert_binary_accepts(&args);
    let thresholds: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--health-threshold"))
        .collect();
    assert_eq!(
        thresholds,
        [
            "--health-threshold=hw_counters/out_of_buffer=-,1000",
            "--health-threshold=link_downed=off",
            "--health-threshold=symbol_error=5,100",
        ]
    );
    for wanted in ["--health-window=30", "--health-quiet-period=120"] {
        assert!(
            args.iter().any(|a| a == wanted),
            "{wanted} missing from {args:?}"
        );
    }
    let off = args_of(json!({"health": {"counters": false}}));
    assert!(off.contains(&"--health-counters=false".to_string()));
    assert_binary_accepts(&off);
}

fn args_of(values: Value) -> Vec<String> {
    args(&render(values))
}

/// (mountPath, readOnly) of the agent, after checking each mount names a
/// volume of the pod.
fn mounts(objects: &[Rendered]) -> Vec<(String, bool)> {
    let pod = &daemonset(objects)["spec"]["template"]["spec"];
    let volumes: Vec<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let mut out = Vec::new();
    for m in container(objects)["volumeMounts"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        assert!(volumes.contains(&name), "mount {name} has no volume");
        let read_only = m["readOnly"].as_bool().unwrap_or(false);
        out.push((m["mountPath"].as_str().unwrap().to_string(), read_only));
    }
    assert_eq!(out.len(), volumes.len(), "every volume is mounted");
    out
}

#[test]
fn agent_mounts_the_host_paths_its_flags_name() {
    let objects = render(json!({}));
    let mounts = mounts(&objects);
    let mounted = |path: &str, read_only: bool| {
        assert!(
            mounts
                .iter()
                .any(|(m, ro)| path.starts_with(m.as_str()) && *ro == read_only),
            "{path} (read-only {read_only}) is not under a mount: {mounts:?}"
        );
    };
    for arg in args(&objects) {
        let Some((flag, path)) = arg.split_once('=') else {
            continue;
        };
        match flag {
            "--plugin-dir" | "--registry-dir" | "--cdi-dir" | "--metadata-dir" | "--state-dir" => {
                mounted(path, false)
            }
            "--sysfs-root" => mounted(path, true),
            // The agent looks only for RDMA char devices.
            "--dev-root" => mounted(&format!("{path}/infiniband"), true),
            _ => {}
        }
    }
    // Specs name the host's own paths; nothing more of the host than needed.
    assert!(args(&objects).contains(&"--host-dev-root=/dev".to_string()));
    for too_wide in ["/dev", "/var/lib/kubelet/plugins", "/var/lib/kubelet"] {
        assert!(
            !mounts.iter().any(|(m, _)| m == too_wide),
            "{too_wide} is mounted whole: {mounts:?}"
        );
    }
    assert!(mounts.contains(&("/var/lib/kubelet/plugins/ainic.amd.com".into(), false)));
    // Link events come from netlink in the host's network namespace.
    assert_eq!(
        daemonset(&objects)["spec"]["template"]["spec"]["hostNetwork"],
        true
    );
    // The kubelet registers the socket by its host path: mount at the same path.
    let pod = &daemonset(&objects)["spec"]["template"]["spec"];
    for v in pod["volumes"].as_array().unwrap() {
        let host = v["hostPath"]["path"].as_str();
        if let Some(host) = host.filter(|h| h.starts_with("/var/")) {
            assert!(
                mounts.iter().any(|(m, _)| m == host),
                "{host} mounted elsewhere"
            );
        }
    }
    assert!(!mounts.iter().any(|(m, _)| m.ends_with("device-plugins")));
    let env = container(&objects)["env"].as_array().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "NODE_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName")
    );
}

#[test]
fn netdev_mode_adds_the_nri_socket_netns_mounts_and_capabilities() {
    let off = render(json!({}));
    assert!(!args(&off).iter().any(|a| a.starts_with("--nri")));
    assert_eq!(
        container(&off)["securityContext"]["capabilities"],
        json!({"drop": ["ALL"]})
    );
    let objects = render(json!({"netdevMode": {"enabled": true, "pluginIndex": "42"}}));
    check_all_typed(&objects);
    let args = args(&objects);
    assert_binary_accepts(&args);
    for wanted in [
        "--nri-socket=/var/run/nri/nri.sock",
        "--nri-plugin-index=42",
    ] {
        assert!(
            args.iter().any(|a| a == wanted),
            "{wanted} missing from {args:?}"
        );
    }
    let mounts = mounts(&objects);
    assert!(
        mounts.contains(&("/var/run/nri".into(), false)),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&("/var/run/netns".into(), true)),
        "{mounts:?}"
    );
    let netns = (container(&objects)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter())
    .find(|m| m["name"] == "netns")
    .unwrap();
    assert_eq!(netns["mountPropagation"], "HostToContainer");
    let security = &container(&objects)["securityContext"];
    assert_eq!(
        security["capabilities"],
        json!({"drop": ["ALL"], "add": ["NET_ADMIN", "SYS_ADMIN"]})
    );
    assert_eq!(security["privileged"], false);
    // A bad index stops the agent at start with the reason, rather than
    // being refused by the runtime at every registration.
    let bad = render(json!({"netdevMode": {"enabled": true, "pluginIndex": "7"}}));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(expanded(&self::args(&bad), "10.0.0.5"))
        .arg("--help")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("exactly two digits"),
        "{stderr}"
    );
}

/// `group/resource verb` of every rule of `role`, sorted.
fn grants_of(role: &Value) -> Vec<String> {
    let mut grants: Vec<String> = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    grants.push(format!(
                        "{}/{} {}",
                        group.as_str().unwrap(),
                        resource.as_str().unwrap(),
                        verb.as_str().unwrap()
                    ));
                }
            }
        }
    }
    grants.sort();
    grants
}

/// The object of `kind` whose name ends with `suffix`.
fn named<'a>(objects: &'a [Rendered], kind: &str, suffix: &str) -> &'a Value {
    let all = find(objects, kind);
    let found = all
        .into_iter()
        .find(|o| (o["metadata"]["name"].as_str()).is_some_and(|n| n.ends_with(suffix)));
    found.unwrap_or_else(|| panic!("no {kind} named *{suffix}"))
}

#[test]
fn controller_rbac_is_least_privilege_and_off_when_disabled() {
    let objects = render(json!({}));
    let role = named(&objects, "ClusterRole", "-controller");
    let wanted: Vec<String> = ["create", "delete", "list", "update", "watch"]
        .iter()
        .map(|v| format!("resource.k8s.io/resourceslices {v}"))
        .chain(
            ["list", "patch", "watch"]
                .iter()
                .map(|v| format!("/nodes {v}")),
        )
        .chain(
            ["get", "list", "watch"]
                .iter()
                .map(|v| format!("resource.k8s.io/resourceclaims {v}")),
        )
        .chain(["events.k8s.io/events create".to_string()])
        // The NicConfig webhook: the classes a claim names, its own caBundle.
        .chain([
            "resource.k8s.io/deviceclasses get".to_string(),
            "admissionregistration.k8s.io/validatingwebhookconfigurations get".to_string(),
            "admissionregistration.k8s.io/validatingwebhookconfigurations update".to_string(),
        ])
        .collect();
    let mut wanted = wanted;
    wanted.sort();
    assert_eq!(grants_of(role), wanted);
    let lease = named(&objects, "Role", "-controller");
    assert_eq!(
        grants_of(lease),
        [
            "/secrets create",
            "/secrets get",
            "/secrets update",
            "coordination.k8s.io/leases create",
            "coordination.k8s.io/leases get",
            "coordination.k8s.io/leases update"
        ]
    );
    // Reading and rewriting: only its own Secret and configuration.
    for (kind, suffix, resource, name) in [
        (
            "ClusterRole",
            "-controller",
            "validatingwebhookconfigurations",
            "ainic-dra-nicconfig",
        ),
        ("Role", "-controller", "secrets", "ainic-dra-webhook-tls"),
    ] {
        let rules = named(&objects, kind, suffix)["rules"]
            .as_array()
            .unwrap()
            .clone();
        for rule in rules.iter().filter(|r| r["resources"][0] == resource) {
            let verbs = rule["verbs"].as_array().unwrap();
            if verbs.iter().any(|v| v == "get" || v == "update") {
                assert_eq!(rule["resourceNames"], json!([name]), "{rule}");
            }
        }
    }
    let deployment = named(&objects, "Deployment", "-controller");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["serviceAccountName"],
        named(&objects, "ServiceAccount", "-controller")["metadata"]["name"]
    );
    // The image's controller binary (the agent's leaves the controller out),
    // with flags only: no `controller` subcommand word.
    assert_eq!(
        pod["containers"][0]["command"],
        json!(["/usr/bin/ainic-dra-controller"])
    );
    assert!(
        (pod["containers"][0]["args"].as_array().unwrap().iter())
            .all(|a| a.as_str().unwrap().starts_with("--")),
        "{}",
        pod["containers"][0]["args"]
    );
    let off = render(json!({"controller": {"enabled": false}}));
    assert!(find(&off, "Deployment").is_empty());

    // Sticky tenants add exactly what answering binding conditions needs.
    let sticky = render(json!({"tenants": {"sticky": true, "namespaceLabel": "example.com/team"}}));
    let mut more = grants_of(named(&sticky, "ClusterRole", "-controller"));
    more.retain(|g| !wanted.contains(g));
    assert_eq!(
        more,
        [
            "/namespaces list",
            "resource.k8s.io/resourceclaims/driver arbitrary-node:patch",
            "resource.k8s.io/resourceclaims/status patch"
        ]
    );
    let role = named(&sticky, "ClusterRole", "-controller");
    let driver_rule = (role["rules"].as_array().unwrap().iter())
        .find(|r| r["resources"][0] == "resourceclaims/driver")
        .unwrap();
    assert_eq!(driver_rule["resourceNames"], json!(["ainic.amd.com"]));
    let pod = &named(&sticky, "Deployment", "-controller")["spec"]["template"]["spec"];
    let controller_args: Vec<&str> = (pod["containers"][0]["args"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        controller_args.contains(&"--tenant-label=example.com/team"),
        "{controller_args:?}"
    );
    let agent_args = args(&sticky);
    assert!(
        agent_args.iter().any(|a| a == "--sticky-tenants"),
        "{agent_args:?}"
    );
    assert_binary_accepts(&agent_args);
}

#[test]
fn rbac_is_least_privilege() {
    let objects = render(json!({}));
    let role = named(&objects, "ClusterRole", "-node-agent");
    let grants = grants_of(role);
    let mut wanted: Vec<String> = ["list", "watch", "create", "update", "delete"]
        .iter()
        .map(|v| format!("resource.k8s.io/resourceslices {v}"))
        .chain([
            "resource.k8s.io/resourceclaims get".to_string(),
            "resource.k8s.io/resourceclaims/status patch".to_string(),
            "resource.k8s.io/resourceclaims/driver associated-node:patch".to_string(),
        ])
        .chain(["/nodes get".to_string(), "/nodes watch".to_string()])
        // Events on its own Node when it publishes less than configured.
        .chain(["events.k8s.io/events create".to_string()])
        .collect();
    wanted.sort();
    assert_eq!(grants, wanted);
    let binding = named(&objects, "ClusterRoleBinding", "-node-agent");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = named(&objects, "ServiceAccount", "ainic-dra");
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        daemonset(&objects)["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
}

/// Each rendered DeviceClass's name and spec, by name.
fn class_specs(objects: &[Rendered]) -> Vec<(String, Value)> {
    let mut specs: Vec<(String, Value)> = find(objects, "DeviceClass")
        .into_iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                c["spec"].clone(),
            )
        })
        .collect();
    specs.sort_by(|a, b| a.0.cmp(&b.0));
    specs
}

#[test]
fn chart_device_classes_equal_the_shipped_ones() {
    let objects = render(json!({}));
    let from_chart = class_specs(&objects);
    let dir = repo_root().join("deploy/deviceclasses");
    let mut shipped = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let class: Value = serde_yaml_ng::from_str(&text).unwrap();
        shipped.push((
            class["metadata"]["name"].as_str().unwrap().to_string(),
            class["spec"].clone(),
        ));
    }
    shipped.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(from_chart, shipped);
    assert!(
        find(
            &render(json!({"deviceClasses": {"create": false}})),
            "DeviceClass"
        )
        .is_empty()
    );
}

#[test]
fn metrics_service_selects_the_agent_pods() {
    let objects = render(json!({}));
    let service = named(&objects, "Service", "-metrics");
    let pod_labels = &daemonset(&objects)["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "selector {k}");
    }
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    // On the host network a container port is a host port: the surge pod
    // of a rolling update could not be scheduled beside the old one.
    assert!(
        container(&objects)["ports"].is_null(),
        "the agent declares no container port"
    );
    let off = render(json!({"metrics": {"enabled": false}}));
    assert!(metrics_services(&off).is_empty());
    let args = args(&off);
    assert!(args.contains(&"--http-addr=".to_string()));
    assert_binary_accepts(&args);
}

/// The agents' metrics Services (the webhook has one of its own).
fn metrics_services(objects: &[Rendered]) -> Vec<&Value> {
    (find(objects, "Service").into_iter())
        .filter(|s| {
            s["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-metrics"))
        })
        .collect()
}

/// The probes' and the scraper's view of the agent's port, per
/// `metrics.bind`: by default the node's own IP, never every interface.
fn http_view(objects: &[Rendered]) -> (String, Vec<Value>, Vec<Value>) {
    let c = container(objects);
    let addr = args(objects)
        .into_iter()
        .find_map(|a| a.strip_prefix("--http-addr=").map(str::to_string))
        .expect("an --http-addr");
    let host_ip: Vec<Value> = (c["env"].as_array().unwrap().iter())
        .filter(|e| e["name"] == "HOST_IP")
        .cloned()
        .collect();
    let probe_hosts = ["livenessProbe", "readinessProbe"]
        .iter()
        .map(|p| c[p]["httpGet"]["host"].clone())
        .collect();
    (addr, host_ip, probe_hosts)
}

#[test]
fn the_http_endpoint_binds_the_node_ip_by_default_not_every_interface() {
    // Issue 29 item 4: it was 0.0.0.0 on the host network.
    let objects = render(json!({}));
    let (addr, host_ip, probe_hosts) = http_view(&objects);
    assert_eq!(addr, "[$(HOST_IP)]:8080");
    assert_eq!(
        host_ip,
        [json!({"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})]
    );
    // The kubelet probes a hostNetwork pod on the node's IP: no host needed.
    assert_eq!(probe_hosts, [Value::Null, Value::Null]);
    assert_eq!(metrics_services(&objects).len(), 1);
    for ip in ["10.0.0.5", "fd00::5"] {
        assert_binary_accepts_on(&args(&objects), ip);
    }

    let loopback = render(json!({"metrics": {"bind": "loopback"}}));
    let (addr, host_ip, probe_hosts) = http_view(&loopback);
    assert_eq!(addr, "127.0.0.1:8080");
    assert_eq!(host_ip.len(), 1, "set, unused");
    assert_eq!(probe_hosts, [json!("127.0.0.1"), json!("127.0.0.1")]);
    assert!(
        metrics_services(&loopback).is_empty(),
        "nothing to scrape off the node"
    );
    assert_binary_accepts(&args(&loopback));

    let all = render(json!({"metrics": {"bind": "all", "port": 9100}}));
    assert_eq!(http_view(&all).0, "0.0.0.0:9100");

    let wrong = helm::template(
        &chart_dir(),
        RELEASE.name,
        RELEASE.namespace,
        &json!({"metrics": {"bind": "everywhere"}}),
        KUBE_VERSION,
    );
    let Err(error) = wrong else {
        panic!("an unknown bind is refused")
    };
    let error = error.to_string();
    assert!(error.contains("metrics.bind \"everywhere\""), "{error}");
}

#[test]
fn default_node_selection_follows_nfd_and_network_operator_labels() {
    let objects = render(json!({}));
    let terms = &daemonset(&objects)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let keys: Vec<&str> = terms
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["matchExpressions"][0]["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "feature.node.kubernetes.io/amd-nic",
            "feature.node.kubernetes.io/pci-1dd8.present",
            "feature.node.kubernetes.io/pci-0200_1dd8.present",
        ]
    );
    let custom = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "example.com/rdma", "operator": "Exists"}]}]}});
    let objects = render(json!({"nodeAffinity": custom}));
    check_all_typed(&objects);
    assert_eq!(
        daemonset(&objects)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"],
        custom
    );
}

#[test]
fn standalone_admission_policy_equals_the_chart_one() {
    let objects = render(json!({}));
    let text = std::fs::read_to_string(repo_root().join("deploy/validating-admission-policy.yaml"))
        .unwrap();
    let standalone: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let kinds = [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    for (kind, suffix) in kinds
        .iter()
        .flat_map(|k| ["-own-node-slices", "-claim-status"].map(|s| (*k, s)))
    {
        let chart = named(&objects, kind, suffix);
        let file = standalone
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == chart["metadata"]["name"])
            .unwrap_or_else(|| panic!("no {kind} *{suffix} in the standalone file"));
        objects::check_typed(file).unwrap();
        assert_eq!(
            file["metadata"]["name"], chart["metadata"]["name"],
            "{kind}"
        );
        assert_eq!(
            file["spec"], chart["spec"],
            "{kind}: regenerate the standalone file"
        );
    }
}

#[test]
fn the_admission_policy_is_bound_and_follows_the_service_account_name() {
    let objects = render(json!({}));
    let policy = named(&objects, "ValidatingAdmissionPolicy", "-own-node-slices");
    let binding = named(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "-own-node-slices",
    );
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let condition = |objects: &[Rendered]| {
        named(objects, "ValidatingAdmissionPolicy", "-own-node-slices")["spec"]["matchConditions"]
            [0]["expression"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        condition(&objects).contains("\"system:serviceaccount:ainic-system:ainic-dra\""),
        "{}",
        condition(&objects)
    );
    let renamed = render(json!({"serviceAccount": {"name": "nic-agent"}}));
    assert!(condition(&renamed).contains("\"system:serviceaccount:ainic-system:nic-agent\""));
    // The claim status policy judges the agent and the controller.
    let status = named(&renamed, "ValidatingAdmissionPolicy", "-claim-status");
    let users = status["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        users.contains("\"system:serviceaccount:ainic-system:nic-agent\"")
            && users.contains("\"system:serviceaccount:ainic-system:ainic-dra-controller\""),
        "{users}"
    );
    let binding = named(
        &renamed,
        "ValidatingAdmissionPolicyBinding",
        "-claim-status",
    );
    assert_eq!(binding["spec"]["policyName"], status["metadata"]["name"]);
    assert!(
        find(
            &render(json!({"admissionPolicy": {"enabled": false}})),
            "ValidatingAdmissionPolicy"
        )
        .is_empty()
    );
}

#[test]
fn extended_resource_classes_only_when_enabled() {
    let names = |objects: &[Rendered]| -> Vec<(String, String)> {
        find(objects, "DeviceClass")
            .into_iter()
            .filter_map(|c| {
                let resource = c["spec"]["extendedResourceName"].as_str()?;
                Some((
                    c["metadata"]["name"].as_str()?.to_string(),
                    resource.to_string(),
                ))
            })
            .collect()
    };
    assert!(names(&render(json!({}))).is_empty(), "off by default");
    let on = render(json!({"extendedResources": {"enabled": true}}));
    assert_eq!(
        names(&on),
        [
            ("ainic-nic-extended".to_string(), "amd.com/nic".to_string()),
            (
                "ainic-vnic-extended".to_string(),
                "amd.com/vnic".to_string()
            ),
        ]
    );
    let selector = find(&on, "DeviceClass")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "ainic-nic-extended")
        .unwrap()["spec"]["selectors"][0]["cel"]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        selector.contains(r#"extendedResource == "amd.com/nic""#),
        "{selector}"
    );
}

#[test]
fn tenant_classes_and_their_policy_follow_the_tenant_names() {
    let tenants = ["team-a".to_string(), "team-b".to_string()];
    let objects = render(json!({"tenants": {"names": tenants}}));
    let from_chart = class_specs(&objects);
    let mut generated: Vec<(String, Value)> =
        dra_model::deviceclass::device_classes("ainic.amd.com", &tenants)
            .into_iter()
            .map(|c| {
                (
                    c.metadata.name.unwrap(),
                    serde_json::to_value(c.spec).unwrap(),
                )
            })
            .collect();
    generated.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(from_chart, generated);

    let policy = find(&objects, "ValidatingAdmissionPolicy")
        .into_iter()
        .find(|p| p["metadata"]["name"] == "ainic-dra-tenant-classes")
        .expect("the tenant policy is rendered with tenant names");
    assert!(
        find(&objects, "ValidatingAdmissionPolicyBinding")
            .iter()
            .any(|b| b["spec"]["policyName"] == "ainic-dra-tenant-classes")
    );
    let class_tenant = policy["spec"]["variables"][0]["expression"]
        .as_str()
        .unwrap();
    for (name, _) in generated.iter().filter(|(n, _)| n.ends_with("-team-b")) {
        assert!(
            class_tenant.contains(&format!("'{name}': 'team-b'")),
            "{class_tenant}"
        );
    }
    assert_eq!(class_tenant.matches(':').count(), 6, "{class_tenant}");
    let relabelled =
        render(json!({"tenants": {"names": ["t1"], "namespaceLabel": "example.com/team"}}));
    let policy = find(&relabelled, "ValidatingAdmissionPolicy")
        .into_iter()
        .find(|p| p["metadata"]["name"] == "ainic-dra-tenant-classes")
        .unwrap();
    assert!(
        policy["spec"]["variables"][1]["expression"]
            .as_str()
            .unwrap()
            .contains("'example.com/team' in namespaceObject.metadata.labels")
    );
    assert!(
        !render(json!({}))
            .iter()
            .any(|r| r.object["metadata"]["name"] == "ainic-dra-tenant-classes"),
        "no tenant policy without tenants"
    );
    // The policy judges creation only, and stays when the classes are
    // made by hand (`ainic-dra deviceclasses --tenant`).
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(rules["operations"], json!(["CREATE"]));
    let by_hand = render(json!({"tenants": {"names": ["t1"]}, "deviceClasses": {"create": false}}));
    assert!(
        find(&by_hand, "ValidatingAdmissionPolicy")
            .iter()
            .any(|p| p["metadata"]["name"] == "ainic-dra-tenant-classes")
    );
}

#[test]
fn bad_tenant_values_fail_the_render_with_the_reason() {
    let refused = |values: Value| {
        helm::template(
            &chart_dir(),
            RELEASE.name,
            RELEASE.namespace,
            &values,
            KUBE_VERSION,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let quote = refused(json!({"tenants": {"names": ["team-a", "o'brien"]}}));
    assert!(quote.contains("\"o'brien\" is not a DNS label"), "{quote}");
    let twice = refused(json!({"tenants": {"names": ["team-a", "team-a"]}}));
    assert!(twice.contains("named twice"), "{twice}");
    let alone = refused(json!({"tenants": {"sticky": true}, "controller": {"enabled": false}}));
    assert!(
        alone.contains("tenants.sticky needs controller.enabled"),
        "{alone}"
    );
}

/// The controller's container arguments.
fn controller_args(objects: &[Rendered]) -> Vec<String> {
    let deployment = named(objects, "Deployment", "-controller");
    (deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array())
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Issue 33 item 1: the NicConfig webhook, served by the controller.
#[test]
fn the_nicconfig_webhook_is_the_controllers_and_judges_only_nicconfigs() {
    let objects = render(json!({"driverName": "nic.example.com"}));
    let config = named(&objects, "ValidatingWebhookConfiguration", "-nicconfig");
    let webhooks = config["webhooks"].as_array().unwrap();
    let resources: Vec<&Value> = webhooks
        .iter()
        .map(|w| &w["rules"][0]["resources"][0])
        .collect();
    assert_eq!(
        resources,
        [
            &json!("resourceclaims"),
            &json!("resourceclaimtemplates"),
            &json!("deviceclasses")
        ]
    );
    for w in webhooks {
        // Ignore by default: the agent checks again at prepare.
        assert_eq!(w["failurePolicy"], "Ignore", "{w}");
        assert_eq!(w["matchPolicy"], "Equivalent", "{w}");
        assert_eq!(w["rules"][0]["apiVersions"], json!(["v1"]), "{w}");
        assert_eq!(w["sideEffects"], "None", "{w}");
        let condition = w["matchConditions"][0]["expression"].as_str().unwrap();
        assert!(
            condition.contains("c.opaque.driver == 'nic.example.com'"),
            "{condition}"
        );
        let service = &w["clientConfig"]["service"];
        assert_eq!(service["name"], "ainic-dra-webhook", "{w}");
        assert_eq!(service["path"], "/validate", "{w}");
        // No caBundle in a fresh render: the controller injects it.
        assert!(w["clientConfig"].get("caBundle").is_none(), "{w}");
    }
    assert_eq!(
        webhooks[2]["rules"][0]["operations"],
        json!(["CREATE", "UPDATE"])
    );
    let service = named(&objects, "Service", "-webhook");
    assert_eq!(
        service["spec"]["selector"]["app.kubernetes.io/component"],
        "controller"
    );
    let args = controller_args(&objects);
    for wanted in [
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-secret=ainic-dra-webhook-tls",
        "--webhook-configuration=ainic-dra-nicconfig",
        "--webhook-hosts=ainic-dra-webhook.ainic-system.svc",
    ] {
        assert!(args.iter().any(|a| a == wanted), "{wanted} not in {args:?}");
    }
    assert_controller_accepts(&args);
    let pod = &named(&objects, "Deployment", "-controller")["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"],
        "HTTPS"
    );

    // A controller the API server calls by URL: no Service, the
    // certificate for the URL's host.
    let by_url = render(json!({"admission": {"webhook": {
        "url": "https://127.0.0.1:9443/validate", "failurePolicy": "Fail"}}}));
    let config = named(&by_url, "ValidatingWebhookConfiguration", "-nicconfig");
    assert_eq!(
        config["webhooks"][0]["clientConfig"]["url"],
        "https://127.0.0.1:9443/validate"
    );
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail");
    assert!(
        find(&by_url, "Service")
            .iter()
            .all(|s| s["metadata"]["name"] != "ainic-dra-webhook")
    );
    assert!(
        controller_args(&by_url)
            .iter()
            .any(|a| a == "--webhook-hosts=127.0.0.1")
    );
    let v6 = render(json!({"admission": {"webhook": {"url": "https://[::1]:9443/validate"}}}));
    assert!(
        controller_args(&v6)
            .iter()
            .any(|a| a == "--webhook-hosts=::1")
    );

    // Off: no configuration, no flags, no grants.
    let off = render(json!({"admission": {"webhook": {"enabled": false}}}));
    assert!(find(&off, "ValidatingWebhookConfiguration").is_empty());
    assert!(
        !controller_args(&off)
            .iter()
            .any(|a| a.starts_with("--webhook"))
    );
    assert!(
        !grants_of(named(&off, "Role", "-controller"))
            .iter()
            .any(|g| g.contains("secrets"))
    );
    let bad = helm::template(
        &chart_dir(),
        RELEASE.name,
        RELEASE.namespace,
        &json!({"admission": {"webhook": {"failurePolicy": "Sometimes"}}}),
        KUBE_VERSION,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(bad.contains("\"Sometimes\" is not Ignore or Fail"), "{bad}");
}
