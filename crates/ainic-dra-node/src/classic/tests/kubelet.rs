//! Registration, re-registration after a kubelet restart, and the
//! `ListAndWatch` stream.

use dra_model::classic::ClassicConfig;
use kubelet_api::deviceplugin::v1beta1 as dp;

use super::{NIC, VNIC, WAIT, first_list, fixture, node, numa, plain_node};

#[tokio::test]
async fn registers_each_resource_and_lists_devices_with_numa_and_health() {
    let node = node(
        fixture("mi300x-8gpu-8nic", 2),
        ClassicConfig::default(),
        false,
    )
    .await
    .unwrap();
    for resource in [NIC, VNIC] {
        let r = node
            .kubelet
            .wait_for_registration(resource, 1, WAIT)
            .await
            .unwrap();
        assert_eq!(r.version, "v1beta1");
        assert!(node.plugins().join(&r.endpoint).exists());
        assert!(r.options.unwrap().get_preferred_allocation_available);
    }
    let mut nic = node.client(NIC, 1).await;
    let options = nic
        .get_device_plugin_options(dp::Empty {})
        .await
        .unwrap()
        .into_inner();
    assert!(options.get_preferred_allocation_available && !options.pre_start_required);
    let (_, devices) = first_list(&mut nic).await;
    let ids: Vec<&str> = devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "0000:04:00.0",
            "0000:24:00.0",
            "0000:44:00.0",
            "0000:64:00.0",
            "0000:84:00.0",
            "0000:a4:00.0",
            "0000:c4:00.0",
            "0000:e4:00.0"
        ]
    );
    assert!(devices.iter().all(|d| d.health == "Healthy"));
    assert_eq!(numa(&devices[0]), [0]);
    assert_eq!(numa(&devices[7]), [1]);
    let (_, vfs) = first_list(&mut node.client(VNIC, 1).await).await;
    assert_eq!(vfs.len(), 16);
    assert!(
        vfs.iter().all(|d| !d.id.ends_with(".0")),
        "PFs offered as VFs"
    );
    node.stop().await;
}

#[tokio::test]
async fn registers_again_after_the_kubelet_restarts() {
    let mut node = plain_node().await;
    let before = node
        .kubelet
        .wait_for_registration(NIC, 1, WAIT)
        .await
        .unwrap();
    node.kubelet.restart().await.unwrap();
    let after = node
        .kubelet
        .wait_for_registration(NIC, 2, WAIT)
        .await
        .unwrap();
    assert_eq!(after.endpoint, before.endpoint);
    // The new kubelet reaches a freshly bound socket.
    let (_, devices) = first_list(&mut node.client(NIC, 2).await).await;
    assert_eq!(devices.len(), 8);
    node.kubelet
        .wait_for_registration(VNIC, 2, WAIT)
        .await
        .unwrap();
    node.stop().await;
}

#[tokio::test]
async fn list_and_watch_reports_a_link_going_down_and_up() {
    let node = node(
        fixture("mi300x-8gpu-8nic", 1),
        ClassicConfig::default(),
        false,
    )
    .await
    .unwrap();
    let (mut nics, first) = first_list(&mut node.client(NIC, 1).await).await;
    assert!(first.iter().all(|d| d.health == "Healthy"));
    let (mut vfs, _) = first_list(&mut node.client(VNIC, 1).await).await;
    let operstate = node
        .sysfs()
        .join("bus/pci/devices/0000:24:00.0/net/enp36s0/operstate");
    std::fs::write(&operstate, "down\n").unwrap();
    let update = nics.message().await.unwrap().unwrap().devices;
    let health =
        |list: &[dp::Device], id: &str| list.iter().find(|d| d.id == id).unwrap().health.clone();
    assert_eq!(health(&update, "0000:24:00.0"), "Unhealthy");
    assert_eq!(update.iter().filter(|d| d.health == "Healthy").count(), 7);
    // The PF's VF follows it.
    let vf_update = vfs.message().await.unwrap().unwrap().devices;
    assert_eq!(health(&vf_update, "0000:24:00.1"), "Unhealthy");
    std::fs::write(&operstate, "up\n").unwrap();
    let healed = nics.message().await.unwrap().unwrap().devices;
    assert!(healed.iter().all(|d| d.health == "Healthy"));
    node.stop().await;
}

#[tokio::test]
async fn a_plugin_dropped_without_its_stop_removes_its_socket() {
    // As when the agent fails to start after the classic path served: its
    // tasks are aborted, or dropped with the runtime.
    let node = plain_node().await;
    let r = node
        .kubelet
        .wait_for_registration(NIC, 1, WAIT)
        .await
        .unwrap();
    let socket = node.plugins().join(&r.endpoint);
    assert!(socket.exists());
    let _dir = node.abort().await;
    assert!(!socket.exists(), "{} left behind", socket.display());
}
