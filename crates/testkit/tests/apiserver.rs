//! The API server stand-in, driven by the real `kube` client over HTTP.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    Device, DeviceTaint, ResourceClaim, ResourceClaimStatus, ResourcePool, ResourceSlice,
    ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use testkit::apiserver::{ApiServer, Fault, Verb};

fn slice(name: &str, generate: bool, node: &str, driver: &str) -> ResourceSlice {
    let metadata = if generate {
        ObjectMeta {
            generate_name: Some(format!("{name}-")),
            ..Default::default()
        }
    } else {
        ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }
    };
    ResourceSlice {
        metadata,
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node.into()),
            pool: ResourcePool {
                name: node.into(),
                generation: 1,
                resource_slice_count: 1,
            },
            devices: Some(vec![Device {
                name: "nic0".into(),
                ..Default::default()
            }]),
            ..Default::default()
        },
    }
}

fn api_code(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_assigns_server_fields_and_generate_name() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ResourceSlice> = Api::all(server.client());
    let created = api
        .create(
            &PostParams::default(),
            &slice("n1-ainic", true, "n1", "ainic.amd.com"),
        )
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("n1-ainic-") && name.len() == "n1-ainic-".len() + 5,
        "{name}"
    );
    assert!(
        created
            .metadata
            .uid
            .as_deref()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(created.metadata.resource_version.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let fetched = api.get(&name).await.unwrap();
    assert_eq!(fetched, created);
    let again = api
        .create(
            &PostParams::default(),
            &slice(&name, false, "n1", "ainic.amd.com"),
        )
        .await;
    assert_eq!(api_code(again), (409, "AlreadyExists".into()));
    assert_eq!(api_code(api.get("missing").await), (404, "NotFound".into()));
}

#[tokio::test]
async fn update_with_stale_resource_version_conflicts() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ResourceSlice> = Api::all(server.client());
    let v1 = api
        .create(&PostParams::default(), &slice("s", false, "n1", "d"))
        .await
        .unwrap();
    let mut changed = v1.clone();
    changed.spec.pool.generation = 2;
    let v2 = api
        .replace("s", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(v2.metadata.resource_version, v1.metadata.resource_version);
    assert_eq!(v2.spec.pool.generation, 2);
    // Writing from the old copy must fail, with a proper Status body.
    let mut stale = v1.clone();
    stale.spec.pool.generation = 3;
    let err = api
        .replace("s", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
    assert_eq!(api.get("s").await.unwrap().spec.pool.generation, 2);
    // A no-op update keeps the resourceVersion.
    let same = api.replace("s", &PostParams::default(), &v2).await.unwrap();
    assert_eq!(same.metadata.resource_version, v2.metadata.resource_version);
}

#[tokio::test]
async fn immutable_slice_fields_are_rejected() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ResourceSlice> = Api::all(server.client());
    let mut s = api
        .create(&PostParams::default(), &slice("s", false, "n1", "d"))
        .await
        .unwrap();
    s.spec.node_name = Some("n2".into());
    assert_eq!(
        api_code(api.replace("s", &PostParams::default(), &s).await),
        (422, "Invalid".into())
    );
}

#[tokio::test]
async fn list_filters_by_field_and_label_selectors() {
    let server = ApiServer::start().await.unwrap();
    let mut labelled = slice("a", false, "n1", "ainic.amd.com");
    labelled.metadata.labels = Some([("tier".to_string(), "x".to_string())].into());
    server.seed(&labelled);
    server.seed(&slice("b", false, "n2", "ainic.amd.com"));
    server.seed(&slice("c", false, "n1", "gpu.amd.com"));
    let api: Api<ResourceSlice> = Api::all(server.client());
    let names = |list: kube::core::ObjectList<ResourceSlice>| {
        list.items
            .into_iter()
            .map(|s| s.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let by_node = ListParams::default().fields("spec.nodeName=n1,spec.driver=ainic.amd.com");
    assert_eq!(names(api.list(&by_node).await.unwrap()), ["a"]);
    let not_n1 = ListParams::default().fields("spec.nodeName!=n1");
    assert_eq!(names(api.list(&not_n1).await.unwrap()), ["b"]);
    let by_label = ListParams::default().labels("tier in (x,y)");
    assert_eq!(names(api.list(&by_label).await.unwrap()), ["a"]);
    assert_eq!(
        names(api.list(&ListParams::default()).await.unwrap()),
        ["a", "b", "c"]
    );
    let bad = ListParams::default().fields("spec.devices=x");
    assert_eq!(api_code(api.list(&bad).await).0, 400);
}

#[tokio::test]
async fn delete_honours_preconditions() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ResourceSlice> = Api::all(server.client());
    let s = api
        .create(&PostParams::default(), &slice("s", false, "n1", "d"))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("other".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(
        api_code(api.delete("s", &wrong).await),
        (409, "Conflict".into())
    );
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: s.metadata.uid.clone(),
            resource_version: s.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    api.delete("s", &right).await.unwrap();
    assert!(server.get::<ResourceSlice>(None, "s").is_none());
    assert_eq!(
        api_code(api.delete("s", &DeleteParams::default()).await).0,
        404
    );
}

#[tokio::test]
async fn injected_faults_fail_matching_requests_then_clear() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ResourceSlice> = Api::all(server.client());
    server.inject(
        Fault::status(503)
            .on(Verb::Create)
            .resource("resourceslices")
            .times(2),
    );
    for _ in 0..2 {
        let result = api
            .create(&PostParams::default(), &slice("s", false, "n1", "d"))
            .await;
        assert_eq!(api_code(result), (503, "ServiceUnavailable".into()));
    }
    api.create(&PostParams::default(), &slice("s", false, "n1", "d"))
        .await
        .unwrap();
    let log = server.requests();
    assert_eq!(log.iter().filter(|r| r.injected).count(), 2);
    assert_eq!(
        log.last().map(|r| (r.code, r.name.as_deref())),
        Some((201, Some("s")))
    );
    assert_eq!(server.writes(), 3);
    server.clear_requests();
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(server.writes(), 0);
}

#[tokio::test]
async fn patches_and_status_subresource() {
    let server = ApiServer::start().await.unwrap();
    let node = server.seed(&Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        ..Default::default()
    });
    let nodes: Api<Node> = Api::all(server.client());
    let patch = Patch::Merge(serde_json::json!({"metadata": {"labels": {"rail": "3"}}}));
    let patched = nodes
        .patch("n1", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["rail"], "3");
    assert_eq!(patched.metadata.uid, node.metadata.uid);
    let removal = Patch::Merge(serde_json::json!({"metadata": {"labels": {"rail": null}}}));
    let patched = nodes
        .patch("n1", &PatchParams::default(), &removal)
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels, Some(Default::default()));

    let claims: Api<ResourceClaim> = Api::namespaced(server.client(), "ns");
    let claim = ResourceClaim {
        metadata: ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut created = claims.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("ns"));
    created.status = Some(ResourceClaimStatus {
        reserved_for: Some(vec![]),
        ..Default::default()
    });
    let with_status = claims
        .replace_status("c", &PostParams::default(), &created)
        .await
        .unwrap();
    assert!(with_status.status.is_some());
    // A main-resource update cannot change status.
    let mut cleared = with_status.clone();
    cleared.status = None;
    let after = claims
        .replace("c", &PostParams::default(), &cleared)
        .await
        .unwrap();
    assert_eq!(after.status, with_status.status);
    assert!(server.get::<ResourceClaim>(Some("ns"), "c").is_some());
    assert!(server.get::<ResourceClaim>(Some("other"), "c").is_none());
}

#[tokio::test]
async fn taints_get_time_added_by_the_server() {
    let server = ApiServer::start().await.unwrap();
    let mut s = slice("s", false, "n1", "d");
    let taint = DeviceTaint {
        key: "ainic.amd.com/unhealthy".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    s.spec.devices.as_mut().unwrap()[0].taints = Some(vec![taint]);
    let api: Api<ResourceSlice> = Api::all(server.client());
    let created = api.create(&PostParams::default(), &s).await.unwrap();
    let taints = created.spec.devices.unwrap()[0].taints.clone().unwrap();
    assert!(taints[0].time_added.is_some());
}

#[tokio::test]
async fn watch_streams_current_objects_then_changes() {
    let server = ApiServer::start().await.unwrap();
    server.seed(&slice("a", false, "n1", "d"));
    server.seed(&slice("other-node", false, "n2", "d"));
    let api: Api<ResourceSlice> = Api::all(server.client());
    let params = WatchParams::default()
        .fields("spec.nodeName=n1")
        .timeout(30);
    let mut events = api.watch(&params, "0").await.unwrap().boxed();
    let first = events.try_next().await.unwrap().unwrap();
    assert!(
        matches!(first, WatchEvent::Added(ref s) if s.metadata.name.as_deref() == Some("a")),
        "{first:?}"
    );
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let next = events.try_next().await.unwrap().unwrap();
    assert!(
        matches!(next, WatchEvent::Deleted(ref s) if s.metadata.name.as_deref() == Some("a")),
        "{next:?}"
    );
}

#[tokio::test]
async fn dropped_device_fields_are_removed_on_write() {
    let server = ApiServer::start().await.unwrap();
    server.drop_device_field("allowMultipleAllocations");
    let mut s = slice("s", false, "n1", "d");
    s.spec.devices.as_mut().unwrap()[0].allow_multiple_allocations = Some(true);
    let api: Api<ResourceSlice> = Api::all(server.client());
    let created = api.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(
        created.spec.devices.unwrap()[0].allow_multiple_allocations,
        None
    );
}
