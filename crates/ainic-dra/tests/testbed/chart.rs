//! The chart, judged by the real helm and the real API server: it lints,
//! `helm install` creates every object it renders, and with every option
//! turned on each rendered object passes the API server's validation
//! (server-side dry run).

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Api, Client};
use serde_json::{Value, json};
use testkit::testbed::helm::{self, Rendered};
use testkit::testbed::{Testbed, Version};

use crate::support::{NAMESPACE, RELEASE, chart_dir, install_chart, s};

fn render(bed: &Testbed, values: &Value) -> Vec<Rendered> {
    helm::template(&chart_dir(), RELEASE, NAMESPACE, values, bed.git_version())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The API for a rendered object's kind, found by discovery.
async fn api_for(client: &Client, object: &Value) -> (Api<DynamicObject>, String) {
    let api_version = object["apiVersion"].as_str().unwrap();
    let kind = object["kind"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("the API server does not serve {api_version} {kind}: {e}"));
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let api = match caps.scope {
        kube::discovery::Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or(NAMESPACE),
            &resource,
        ),
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    (api, name)
}

fn every_option() -> Value {
    json!({
        "featureGates": {"DRAConsumableCapacity": true, "DRADeviceTaints": true},
        "model": {"gpuPairingAttribute": "gpu.amd.com/pciAddr", "sharedPfs": ["*"],
                  "pfQueuePairs": 8192, "vfQueuePairs": 512, "pfWithVfs": "vfs-only"},
        "fabric": {"config": {"defaults": {"fabric": "pod-a"},
                              "nodes": {"node-a": {"leafSwitch": "leaf-07"}}},
                   "lldpCommand": "lldpcli -f json0 show neighbors"},
        "classic": {"enabled": true, "cdi": true,
                    "config": {"resources": [{"name": "amd.com/nic",
                                              "selectors": {"pciIds": ["1dd8:1002"]}}]}},
        "extendedResources": {"enabled": true},
        "tenants": {"names": ["team-a", "team-c"], "namespaceLabel": "example.com/team"},
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "podAnnotations": {"example.com/a": "b"},
        "imagePullSecrets": [{"name": "registry"}],
        "serviceAccount": {"annotations": {"example.com/c": "d"}},
    })
}

#[test]
fn helm_lint_passes_with_default_and_every_option() {
    let bed = Testbed::shared(Version::V1_37);
    let chart = chart_dir();
    for values in [json!({}), every_option()] {
        let file = helm::values_file(&values);
        let out = helm::run(&[
            "lint",
            "--strict",
            s(&chart),
            "--kube-version",
            bed.git_version(),
            "-f",
            s(file.path()),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[tokio::test]
async fn helm_install_creates_every_rendered_object() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    let rendered = render(bed, &crate::support::chart_values());
    assert!(rendered.len() >= 8, "{} objects rendered", rendered.len());
    // Hooks (the post-delete cleanup Job and its grants) exist only while
    // `helm uninstall` runs them.
    let installed = rendered
        .iter()
        .filter(|r| r.object["metadata"]["annotations"]["helm.sh/hook"].is_null());
    for r in installed {
        let (api, name) = api_for(&client, &r.object).await;
        let found = api.get_opt(&name).await.unwrap();
        assert!(
            found.is_some(),
            "{} {name} ({}) was rendered but is not in the API server",
            r.object["kind"],
            r.file
        );
    }
}

#[tokio::test]
async fn every_option_renders_objects_the_api_server_accepts() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    let params = PatchParams::apply("ainic-chart-test").dry_run().force();
    for r in render(bed, &every_option()) {
        let (api, name) = api_for(&client, &r.object).await;
        api.patch(&name, &params, &Patch::Apply(&r.object))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the API server refuses {} {name} from {}: {e}",
                    r.object["kind"], r.file
                )
            });
    }
}
