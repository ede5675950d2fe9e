//! A real container runtime resolves the CDI names the classic path answers
//! `Allocate` with (`--cdi-enabled`): the container gets the NIC's verbs
//! device and `rdma_cm` from the agent's node-wide classic spec.
//!
//! Needs root and podman with runc (`apt-get install podman runc
//! busybox-static`, done by `.ci/run`); without them it fails, it does not
//! skip. Podman 4.3 reads specs only from `/etc/cdi` and `/var/run/cdi`, so
//! the spec is copied there for the run and removed after.

mod node_support;

use std::path::Path;
use std::time::Duration;

use kubelet_api::deviceplugin::v1beta1 as dp;
use testkit::fake_kubelet_dp::FakeKubelet;

use node_support::{Agent, Installed, World, podman_run};

fn start_agent(world: &World, plugins: &Path) -> Agent {
    world.start_agent_with(
        None,
        &[
            "--device-plugin",
            "--cdi-enabled",
            "--device-plugin-dir",
            plugins.to_str().unwrap(),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_resolves_the_classic_cdi_names() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = start_agent(&world, &plugins);
    let wait = Duration::from_secs(30);
    let r = kubelet
        .wait_for_registration("amd.com/nic", 1, wait)
        .await
        .unwrap();
    let mut client = kubelet.dial(&r.endpoint).await.unwrap();
    let request = dp::AllocateRequest {
        container_requests: vec![dp::ContainerAllocateRequest {
            devices_ids: vec!["0000:04:00.0".into()],
        }],
    };
    let mut answer = client.allocate(request).await.unwrap().into_inner();
    let container = answer.container_responses.remove(0);
    assert!(
        container.devices.is_empty(),
        "CDI mode gives no device specs"
    );
    let names: Vec<String> = container.cdi_devices.into_iter().map(|c| c.name).collect();

    let spec = world.dirs().cdi.join("ainic-dra-classic.json");
    let installed = Installed(Path::new("/var/run/cdi").join(format!(
        "ainic-dra-classic-test-{}.json",
        std::process::id()
    )));
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    std::fs::copy(&spec, &installed.0).unwrap();

    let env: Vec<(String, String)> = container.envs.clone().into_iter().collect();
    let stdout = podman_run(&world, &names, &env);
    assert!(
        stdout
            .lines()
            .any(|l| l == "PCIDEVICE_AMD_COM_NIC=0000:04:00.0"),
        "{stdout}"
    );
    let ls: Vec<&str> = stdout.lines().filter(|l| l.starts_with('c')).collect();
    let has = |numbers: [&str; 2], name: &str| {
        ls.iter()
            .any(|l| numbers.iter().any(|n| l.contains(n)) && l.ends_with(name))
    };
    assert!(has(["231, 192", "231,192"], "uverbs0"), "{ls:?}");
    assert!(has(["10,  58", "10, 58"], "rdma_cm"), "{ls:?}");
    assert_eq!(ls.len(), 2, "only the allocated NIC's devices: {ls:?}");
}
