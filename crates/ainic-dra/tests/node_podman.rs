//! A real container runtime consumes a CDI spec written by the agent: the
//! container sees the NIC's device nodes and the RDMA environment.
//!
//! Needs root and podman with runc (`apt-get install podman runc
//! busybox-static`, done by `.ci/run`). Without them this test FAILS: it
//! does not skip. Podman 4.3 reads specs only from `/etc/cdi` and
//! `/var/run/cdi`, so the spec is copied there for the run and removed after.

mod node_support;

use std::path::Path;
use std::process::Command;

use serde_json::json;

use node_support::{DRIVER, Installed, NODE, World, nic_config, rootfs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_container_sees_the_devices_and_env_of_a_prepared_claim() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim(
        "podman",
        &[("nic", DRIVER, NODE, "pf-0000-04-00-0")],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    );
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let result = &answer.claims[&claim.uid];
    assert_eq!(result.error, "");
    let cdi_id = result.devices[0].cdi_device_ids[0].clone();

    let file = format!("ainic.amd.com-{}.json", claim.uid);
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    let installed = Installed(Path::new("/var/run/cdi").join(&file));
    std::fs::copy(world.dirs().cdi.join(&file), &installed.0).unwrap();

    let root = rootfs(world.tmp.path());
    let output = Command::new("podman")
        .args(["--runtime", "runc", "run", "--rm", "--network=none"])
        .args([
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
        ])
        .args(["--device", &cdi_id, "--rootfs"])
        .arg(&root)
        .args(["/bin/sh", "-c", "env; ls -l /dev/infiniband"])
        .output()
        .expect("podman is required for this test (apt-get install podman runc busybox-static)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "podman failed: {stderr}\n{stdout}");
    for line in [
        "NCCL_IB_HCA==ionic_0",
        "AINIC_RDMA_DEVICES=ionic_0",
        "AINIC_NETDEVS=enp4s0",
        "AINIC_PCI_ADDRESSES=0000:04:00.0",
        "AINIC_DEVICES=pf-0000-04-00-0",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in:\n{stdout}"
        );
    }
    // Character devices with the numbers sysfs gave: uverbs0 231:192,
    // umad0 231:0 (asked for), rdma_cm 10:58; no issm0 (not asked for).
    let ls: Vec<&str> = stdout.lines().filter(|l| l.starts_with('c')).collect();
    let has = |major_minor: &str, name: &str| {
        ls.iter()
            .any(|l| l.contains(major_minor) && l.ends_with(name))
    };
    assert!(has("231, 192", "uverbs0"), "{ls:?}");
    assert!(has("231,   0", "umad0") || has("231, 0", "umad0"), "{ls:?}");
    assert!(
        has("10,  58", "rdma_cm") || has("10, 58", "rdma_cm"),
        "{ls:?}"
    );
    assert!(!stdout.contains("issm0"), "{stdout}");

    drop(installed);
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty());
}
