//! Issue 33 item 1 on the real API server: the chart (installed by the
//! real helm) registers the NicConfig webhook, the real controller binary
//! serves it with a certificate it made itself and injects the caBundle,
//! and the API server refuses every bad NicConfig of the verdict table
//! (`nicconfig_cases`) in a ResourceClaim, a ResourceClaimTemplate and a
//! DeviceClass — through v1, v1beta2 and v1beta1 — with exactly the
//! message prepare gives, and admits every good one. With no controller
//! answering, failurePolicy Ignore lets writes through; a restarted
//! controller reuses the certificate in its Secret.
//!
//! Runs on a control plane of its own, the webhook called by URL on
//! loopback (the controller runs as a process, not a pod).

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{UpOptions, Version, cluster, wait};

use crate::nicconfig_cases::{Case, cases, claim_spec, classes, prepare, world};
use crate::support::{NAMESPACE as SYSTEM, own_bed_with, start_controller_with};

const NAMESPACE: &str = "nicconfig";
const SECRET: &str = "ainic-dra-webhook-tls";
const CONFIGURATION: &str = "ainic-dra-nicconfig";

/// The API server's words for a webhook's refusal.
fn denied(webhook: &str, message: &str) -> String {
    format!("admission webhook \"{webhook}.nicconfig.ainic.amd.com\" denied the request: {message}")
}

/// `Ok` when created (and deleted again), else the API server's message.
async fn create<K>(api: &Api<K>, object: &K) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(created) => {
            let name = created.meta().name.clone().unwrap_or_default();
            let _ = api.delete(&name, &DeleteParams::default()).await;
            Ok(())
        }
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("cannot reach the API server: {e}"),
    }
}

fn claim(name: &str, spec: Value) -> ResourceClaim {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The case of a claim granting itself `umad`, and its index.
fn widening() -> (usize, Case) {
    let i = (cases().iter())
        .position(|c| c.name == "claim grants itself umad")
        .unwrap();
    (i, cases().remove(i))
}

/// Waits until the webhook answers: a claim granting itself `umad` is
/// refused by it (before that, Ignore admits it).
async fn in_force(claims: &Api<ResourceClaim>, log: &std::path::Path) {
    let (i, probe) = widening();
    let object = claim("probe", claim_spec(&probe, &format!("case-{i}")));
    wait::until("the NicConfig webhook in force", wait::DEADLINE, || async {
        match create(claims, &object).await {
            Err(message) if message.contains("nicconfig.ainic.amd.com") => Ok(()),
            other => Err(format!(
                "{other:?}; controller log:\n{}",
                crate::support::tail(&std::fs::read_to_string(log).unwrap_or_default(), 8)
            )),
        }
    })
    .await;
}

#[tokio::test]
async fn bad_nicconfig_is_refused_when_written_with_the_agents_message() {
    // The webhook's port, held until the controller is to take it (as
    // another process on a host-network node might): a port only picked
    // and let go could be anyone's by then.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let bed = own_bed_with(
        UpOptions {
            version: Some(Version::V1_37),
            runtime_config: Some(
                "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true".into(),
            ),
            no_scheduler: true,
            ..UpOptions::default()
        },
        json!({"admission": {"webhook": {"url": format!("https://127.0.0.1:{port}/validate")}}}),
    )
    .await;
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let rows = cases();
    let world = world();
    // Every case's classes, before any controller answers (Ignore).
    let class_api: Api<DeviceClass> = Api::all(client.clone());
    for (i, case) in rows.iter().enumerate() {
        for class in classes(case, &format!("case-{i}")) {
            class_api
                .create(&PostParams::default(), &class)
                .await
                .unwrap();
        }
    }
    let log = bed.dir().join("controller-nicconfig.log");
    let addr = format!("127.0.0.1:{port}");
    let flags = ["--webhook-addr", &addr, "--webhook-hosts", "127.0.0.1"];
    // The port taken at first: the controller keeps running and serves
    // once the port is free.
    let mut controller = start_controller_with(bed, &log, "nicconfig-1", &flags).await;
    wait::until(
        "the controller's word on the taken port",
        wait::DEADLINE,
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("cannot listen for the admission webhook") {
                Ok(())
            } else {
                Err(crate::support::tail(&text, 8))
            }
        },
    )
    .await;
    assert!(
        controller.running(),
        "the controller exited on a taken port"
    );
    drop(holder);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    in_force(&claims, &log).await;

    // The controller made its certificate and the API server trusts it.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SYSTEM);
    let secret = secrets.get(SECRET).await.unwrap();
    let annotations = secret.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["ainic.amd.com/webhook-hosts"], "127.0.0.1");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = configs.get(CONFIGURATION).await.unwrap();
    let ca = &secret.data.as_ref().unwrap()["ca.crt"];
    for webhook in config.webhooks.unwrap() {
        assert_eq!(
            webhook.client_config.ca_bundle.as_ref(),
            Some(ca),
            "{}",
            webhook.name
        );
    }

    kubectl_transcript(bed);
    let (admitted, refused) = judge_every_case(&client, &rows, &world).await;
    eprintln!(
        "{} cases on the real API server: {admitted} admitted, {refused} refused, each as prepare judges it",
        rows.len()
    );
    older_versions_are_judged_alike(&client, &world).await;

    // No controller: Ignore lets a bad claim through (prepare still refuses it).
    controller.terminate();
    let (i, widening) = widening();
    let bad = claim("unjudged", claim_spec(&widening, &format!("case-{i}")));
    assert_eq!(create(&claims, &bad).await, Ok(()), "failurePolicy Ignore");
    // A new controller reuses the Secret's certificate.
    let version = secret.metadata.resource_version.clone();
    let _controller = start_controller_with(bed, &log, "nicconfig-2", &flags).await;
    in_force(&claims, &log).await;
    let again = secrets.get(SECRET).await.unwrap();
    assert_eq!(
        again.metadata.resource_version, version,
        "certificate remade"
    );
}

/// What a person sees: the real kubectl creating a claim that grants
/// itself `umad`, refused with prepare's words.
fn kubectl_transcript(bed: &testkit::testbed::Testbed) {
    let (i, case) = widening();
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "nic-0", "namespace": NAMESPACE},
        "spec": claim_spec(&case, &format!("case-{i}"))});
    let file = bed.dir().join("nic-0.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&claim).unwrap()).unwrap();
    let out = std::process::Command::new(testkit::testbed::binaries("kube-1.37").join("kubectl"))
        .arg("--kubeconfig")
        .arg(bed.kubeconfig())
        .args(["create", "-f"])
        .arg(&file)
        .output()
        .expect("run kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kubectl created it: {stderr}");
    let expected = prepare(&case, &format!("case-{i}"), NAMESPACE, "nic-0", &world()).unwrap_err();
    assert!(
        stderr.contains(&denied("claims", &expected)),
        "kubectl says: {stderr}"
    );
    eprintln!("$ kubectl create -f nic-0.json\n{stderr}");
}

/// Each case as a claim, a template and a fresh class: the API server's
/// verdict is prepare's, message for message. Returns (admitted, refused).
async fn judge_every_case(
    client: &kube::Client,
    rows: &[Case],
    world: &crate::nicconfig_cases::World,
) -> (usize, usize) {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    let class_api: Api<DeviceClass> = Api::all(client.clone());
    let (mut admitted, mut refused, mut unsent_bad) = (0, 0, 0);
    for (i, case) in rows.iter().enumerate() {
        let base = format!("case-{i}");
        let name = format!("case-{i}");
        let expected = prepare(case, &base, NAMESPACE, &name, world);
        let spec = claim_spec(case, &base);
        // The chart's matchConditions send only claims and templates that
        // carry a config of ours: one without is admitted unjudged (its
        // class was judged when written; here it was written while no
        // controller answered).
        let sent = (spec["devices"]["config"].as_array().into_iter().flatten())
            .any(|c| c["opaque"]["driver"] == crate::support::DRIVER);
        let expected_here = if sent { expected.clone() } else { Ok(()) };
        let got = create(&claims, &claim(&name, spec.clone())).await;
        same_verdict(
            &got,
            &expected_here.clone().map_err(|m| denied("claims", &m)),
            case.name,
        );
        let template: ResourceClaimTemplate =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"spec": spec}}))
                .unwrap();
        let as_template = create(&templates, &template).await;
        let core = expected_here.map_err(|m| {
            let rest = m
                .strip_prefix(&format!("claim {NAMESPACE}/{name}: "))
                .unwrap();
            let what = format!("ResourceClaimTemplate {NAMESPACE}/{name}: {rest}");
            denied("templates", &what)
        });
        same_verdict(&as_template, &core, case.name);
        // The class alone: refused only when its own config is bad, and
        // then prepare refuses too.
        let mut class = classes(case, &format!("{base}-again")).remove(0);
        class.metadata.resource_version = None;
        let class_verdict = create(&class_api, &class).await;
        let alone =
            dra_model::admission::check_class(class.spec.as_ref().unwrap(), crate::support::DRIVER);
        assert_eq!(
            class_verdict.is_ok(),
            alone.is_ok(),
            "{}: class {class_verdict:?}",
            case.name
        );
        if let Err(message) = class_verdict {
            assert!(
                expected.is_err(),
                "{}: class refused ({message}), prepare admits",
                case.name
            );
            let what = format!("DeviceClass {base}-again: {}", alone.as_ref().unwrap_err());
            assert_eq!(message, denied("classes", &what));
        }
        if !sent && expected.is_err() {
            assert!(
                alone.is_err(),
                "{}: a claim without config of ours is not sent, yet prepare refuses it and its class alone passes",
                case.name
            );
            unsent_bad += 1;
        }
        match expected {
            Ok(()) => admitted += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(
        admitted >= 15 && refused >= 25,
        "{admitted} admitted, {refused} refused"
    );
    eprintln!("{unsent_bad} bad cases carry no config of ours in the claim: refused as classes");
    (admitted, refused)
}

/// The API server's answer is `expected`: the webhook's words, or the
/// API server's own validation (a parameters value that is not a JSON
/// object never reaches a webhook) where prepare refuses too.
fn same_verdict(got: &Result<(), String>, expected: &Result<(), String>, case: &str) {
    if let Err(message) = got
        && message.contains(" is invalid: ")
    {
        assert!(
            expected.is_err(),
            "{case}: the API server refuses ({message}), prepare admits"
        );
        return;
    }
    assert_eq!(
        got, expected,
        "{case}: the API server (left) and prepare (right) differ"
    );
}

/// A claim written through v1beta2 and v1beta1 is converted to v1 and
/// refused with the same message.
async fn older_versions_are_judged_alike(
    client: &kube::Client,
    world: &crate::nicconfig_cases::World,
) {
    let (i, case) = widening();
    let base = format!("case-{i}");
    let spec = claim_spec(&case, &base);
    for version in ["v1beta2", "v1beta1"] {
        let name = format!("old-{version}");
        let mut old = spec.clone();
        if version == "v1beta1" {
            // v1beta1 requests name their class themselves.
            for r in old["devices"]["requests"].as_array_mut().unwrap() {
                let class = r["exactly"]["deviceClassName"].clone();
                *r = json!({"name": r["name"], "deviceClassName": class});
            }
        }
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("resource.k8s.io/{version}"), "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": old}))
        .unwrap();
        let gvk = GroupVersionKind::gvk("resource.k8s.io", version, "ResourceClaim");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&gvk));
        let expected = prepare(&case, &base, NAMESPACE, &name, world).unwrap_err();
        let got = api.create(&PostParams::default(), &object).await;
        let Err(kube::Error::Api(e)) = got else {
            panic!("{version}: not refused: {got:?}");
        };
        assert_eq!(e.message, denied("claims", &expected), "{version}");
    }
}
