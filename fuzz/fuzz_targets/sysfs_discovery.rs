//! Discovery over a sysfs tree whose files say anything: a GPU and an
//! AINIC PF with a VF, netdev and RDMA device (the skeleton below), with
//! every `path=value` line of the input replacing or adding a file and
//! every `path->target` line a symlink. Discovery may fail or warn; it must
//! not panic, loop or read outside the tree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topology::sysfs::{MemBackend, Sysfs};
use topology::{DiscoveryConfig, discover_in};

const SW: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0";
const PF: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.0";
const VF: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.1";

fn skeleton() -> Vec<(String, String, bool)> {
    let mut entries = Vec::new();
    let mut file = |path: String, value: &str| entries.push((path, value.to_string(), false));
    let gpu = format!("{SW}/0000:03:00.0");
    for (dir, ids) in [
        (gpu.as_str(), ["0x1002", "0x74a1", "0x120000"]),
        (PF, ["0x1dd8", "0x1002", "0x020000"]),
        (VF, ["0x1dd8", "0x1003", "0x020000"]),
    ] {
        file(format!("{dir}/vendor"), ids[0]);
        file(format!("{dir}/device"), ids[1]);
        file(format!("{dir}/class"), ids[2]);
        file(format!("{dir}/subsystem_vendor"), "0x1dd8\n");
        file(format!("{dir}/subsystem_device"), "0x5201\n");
        file(format!("{dir}/numa_node"), "0\n");
        file(format!("{dir}/local_cpulist"), "0-15\n");
        file(format!("{dir}/current_link_speed"), "32.0 GT/s PCIe\n");
        file(format!("{dir}/current_link_width"), "16\n");
    }
    file(format!("{PF}/sriov_totalvfs"), "8\n");
    file(format!("{PF}/net/enp4s0/address"), "02:00:00:04:00:00\n");
    file(format!("{PF}/net/enp4s0/mtu"), "9000\n");
    file(format!("{PF}/net/enp4s0/speed"), "400000\n");
    file(format!("{PF}/net/enp4s0/operstate"), "up\n");
    file(format!("{PF}/infiniband/ionic_0/fw_ver"), "1.2.3\n");
    file(
        format!("{PF}/infiniband/ionic_0/ports/1/state"),
        "4: ACTIVE\n",
    );
    file(
        format!("{PF}/infiniband/ionic_0/ports/1/phys_state"),
        "5: LinkUp\n",
    );
    file(
        format!("{PF}/infiniband/ionic_0/ports/1/rate"),
        "400 Gb/sec (4X NDR)\n",
    );
    file(
        format!("{PF}/infiniband/ionic_0/ports/1/link_layer"),
        "Ethernet\n",
    );
    file("class/infiniband_verbs/abi_version".into(), "6\n");
    file("class/infiniband_verbs/uverbs0/ibdev".into(), "ionic_0\n");
    file("class/infiniband_verbs/uverbs0/dev".into(), "231:192\n");
    file("class/infiniband_mad/umad0/ibdev".into(), "ionic_0\n");
    file("class/infiniband_mad/umad0/port".into(), "1\n");
    file("class/infiniband_mad/umad0/dev".into(), "231:0\n");
    file("class/misc/rdma_cm/dev".into(), "10:58\n");
    let mut link = |path: String, target: &str| entries.push((path, target.to_string(), true));
    for dir in [gpu.as_str(), PF, VF] {
        let bdf = dir.rsplit('/').next().unwrap();
        link(format!("bus/pci/devices/{bdf}"), &format!("../../../{dir}"));
    }
    link(format!("{PF}/virtfn0"), "../0000:04:00.1");
    link(format!("{VF}/physfn"), "../0000:04:00.0");
    link(
        format!("{PF}/driver"),
        "../../../../../../bus/pci/drivers/ionic",
    );
    entries
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut entries = skeleton();
    for line in text.lines() {
        let (path, value, is_link) = match line.split_once("->") {
            Some((path, target)) => (path, target.to_string(), true),
            None => match line.split_once('=') {
                Some((path, value)) => (path, value.replace("\\n", "\n"), false),
                None => continue,
            },
        };
        entries.retain(|(p, _, _)| p != path);
        entries.push((path.to_string(), value, is_link));
    }
    let mut tree = MemBackend::new();
    for (path, value, is_link) in &entries {
        tree = if *is_link {
            tree.link(path, value)
        } else {
            tree.file(path, value)
        };
    }
    let _ = discover_in(&Sysfs::new(tree), &DiscoveryConfig::default());
});
