//! Exclusive netdev mode's move with real kernel objects: network
//! namespaces and a veth pair stand in for a pod sandbox and a NIC's
//! netdev (the peer sits in a namespace of its own, so the "NIC" has a
//! carrier). `ainic_dra_node::netdev` moves it into the "pod" under the
//! planned name, MTU, addresses and routes, and back under its host name
//! with its host address; a netdev the kernel returned from a dead
//! namespace is found by PCI address. Set up and checked with iproute2
//! (`ip`); needs root (CAP_NET_ADMIN), which the test says when missing.

mod netns_support;

use std::path::Path;

use ainic_dra_node::netdev::{self, Attached};
use dra_model::netdev::NetdevSettings;
use netns_support::{Net, ip};

fn plan(yaml: &str, host: &str) -> dra_model::netdev::NetdevPlan {
    serde_yaml_ng::from_str::<NetdevSettings>(yaml)
        .unwrap()
        .plan(host)
        .unwrap()
}

/// What the hooks do: survey the host's netdev, then move it.
async fn survey_and_attach(
    nic: &str,
    netns: &Path,
    plan: &dra_model::netdev::NetdevPlan,
    sysfs: &Path,
) -> Result<Attached, netdev::NetdevError> {
    let attached = netdev::survey(nic, plan, sysfs).await?;
    netdev::attach(&attached, netns, plan, sysfs).await?;
    Ok(attached)
}

#[tokio::test]
async fn the_netdev_moves_in_configured_and_back_under_its_host_name() {
    let net = Net::new("a");
    let sysfs = tempfile::tempdir().unwrap();
    let plan = plan(
        "interfaceName: net1\nmtu: 9000\naddresses: [10.88.0.2/24, 'fd00:88::2/64']\nroutes:\n- {destination: 10.99.0.0/16, gateway: 10.88.0.1}\n- {destination: 10.66.0.0/16}\n",
        &net.nic,
    );
    let started = std::time::Instant::now();
    let attached = survey_and_attach(&net.nic, &net.pod_path(), &plan, sysfs.path())
        .await
        .unwrap();
    let attach_time = started.elapsed();
    assert!(
        !net.has_link(None, &net.nic),
        "the host still has {}",
        net.nic
    );
    let pod = Some(net.pod.as_str());
    assert_eq!(
        net.addresses(pod, "net1"),
        ["10.88.0.2/24", "fd00:88::2/64"]
    );
    let link = &net.json(pod, &["link", "show", "net1"])[0];
    assert_eq!(link["mtu"], 9000);
    assert!(
        link["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
        "{link}"
    );
    let routes: Vec<(String, String)> = (net.json(pod, &["route", "show", "dev", "net1"]).iter())
        .map(|r| {
            (
                r["dst"].as_str().unwrap().to_string(),
                r["gateway"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        routes.contains(&("10.99.0.0/16".into(), "10.88.0.1".into())),
        "{routes:?}"
    );
    assert!(
        routes.contains(&("10.66.0.0/16".into(), String::new())),
        "{routes:?}"
    );
    assert_eq!(attached.host_addresses.len(), 1, "{attached:?}");

    let started = std::time::Instant::now();
    netdev::detach(&attached, Some(&net.pod_path()), sysfs.path())
        .await
        .unwrap();
    let detach_time = started.elapsed();
    eprintln!("attach {attach_time:?}, detach {detach_time:?}");
    assert!(!net.has_link(pod, "net1"));
    assert_eq!(net.addresses(None, &net.nic), ["10.77.0.5/24"]);
    assert_eq!(net.json(None, &["link", "show", &net.nic])[0]["mtu"], 1500);
}

#[tokio::test]
async fn unset_addresses_keep_the_hosts_and_a_clash_moves_nothing() {
    let net = Net::new("b");
    let sysfs = tempfile::tempdir().unwrap();
    // A link of the planned name already in the pod: the move is refused
    // and the netdev stays on the host, addresses and all.
    ip(&[
        "-n", &net.pod, "link", "add", "net1", "type", "veth", "peer", "name", "other1",
    ]);
    let clash = survey_and_attach(
        &net.nic,
        &net.pod_path(),
        &plan("interfaceName: net1", &net.nic),
        sysfs.path(),
    )
    .await;
    let err = clash.unwrap_err().to_string();
    assert!(
        err.contains(&net.nic) && err.contains("there already"),
        "{err}"
    );
    assert!(net.has_link(None, &net.nic));
    assert_eq!(net.addresses(None, &net.nic), ["10.77.0.5/24"]);

    let attached = survey_and_attach(
        &net.nic,
        &net.pod_path(),
        &plan("interfaceName: net2", &net.nic),
        sysfs.path(),
    )
    .await
    .unwrap();
    assert_eq!(net.addresses(Some(&net.pod), "net2"), ["10.77.0.5/24"]);
    netdev::detach(&attached, Some(&net.pod_path()), sysfs.path())
        .await
        .unwrap();
    assert_eq!(net.addresses(None, &net.nic), ["10.77.0.5/24"]);
}

#[tokio::test]
async fn a_netdev_returned_from_a_dead_namespace_is_found_by_pci_address() {
    // The kernel hands a physical device back to the host under its pod
    // name (or another) when the pod's namespace goes; a veth cannot show
    // that, so the host link is renamed here as the kernel would leave it
    // and the sysfs tree names its PCI function.
    let net = Net::new("c");
    let sysfs = tempfile::tempdir().unwrap();
    let returned_as = format!("ret{}", std::process::id() % 100_000);
    ip(&["link", "set", &net.nic, "down"]);
    ip(&["link", "set", &net.nic, "name", &returned_as]);
    let class = sysfs.path().join("class/net").join(&returned_as);
    std::fs::create_dir_all(&class).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:02.0/0000:2a:00.0",
        class.join("device"),
    )
    .unwrap();
    let attached = Attached {
        host_name: net.nic.clone(),
        pod_name: "gone0".into(),
        host_mtu: 1500,
        host_addresses: vec![dra_model::netdev::parse_cidr("10.77.0.9/24").unwrap()],
        pci_address: Some("0000:2a:00.0".into()),
        mac: None,
    };
    let dead = Path::new("/run/netns/ainic-no-such-namespace");
    netdev::detach(&attached, Some(dead), sysfs.path())
        .await
        .unwrap();
    assert!(
        net.has_link(None, &net.nic),
        "renamed back to its host name"
    );
    assert!(!net.has_link(None, &returned_as));
    assert!(
        net.addresses(None, &net.nic)
            .contains(&"10.77.0.9/24".to_string())
    );

    // Found nowhere: the error says where it looked.
    let lost = Attached {
        host_name: "ainicnone0".into(),
        pod_name: "gone1".into(),
        pci_address: Some("0000:ff:00.0".into()),
        ..attached
    };
    let err = netdev::detach(&lost, None, sysfs.path())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ainicnone0") && err.contains("0000:ff:00.0"),
        "{err}"
    );
}
