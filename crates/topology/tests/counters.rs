//! Counter reads over rendered sysfs trees: only the PFs' ports and
//! netdevs are planned, values follow what is written, and garbage,
//! missing and unreadable files each read as what they are.

mod common;

use testkit::fixture::{PORT_COUNTERS, Topology, netdev_counter, port_counter};
use topology::{CounterName, CounterPlan, CounterReading, read_counters};

fn names(list: &[&str]) -> Vec<CounterName> {
    list.iter().map(|n| n.parse().unwrap()).collect()
}

#[test]
fn rendered_trees_carry_every_standard_port_counter_of_a_pf_and_carrier_changes() {
    let (dir, inv) = common::discover_bundled("sriov-vfs");
    let all: Vec<String> = PORT_COUNTERS.iter().map(|c| c.to_string()).collect();
    let mut list: Vec<&str> = all.iter().map(String::as_str).collect();
    list.push("carrier_changes");
    let plan = CounterPlan::new(&inv, &names(&list));
    let pfs = inv.nics.iter().filter(|n| n.is_pf()).count();
    assert_eq!(pfs, 3);
    assert_eq!(plan.functions.len(), pfs);
    // One port and one netdev per PF; the VFs' are never planned.
    assert_eq!(plan.counters.len(), pfs * (PORT_COUNTERS.len() + 1));
    assert!(
        plan.counters
            .iter()
            .all(|c| inv.nic(c.function).unwrap().is_pf())
    );
    let readings = read_counters(dir.path(), &plan);
    let carrier = readings
        .iter()
        .zip(&plan.counters)
        .filter(|(_, c)| c.counter == list.len() - 1);
    for (reading, c) in carrier {
        assert_eq!(*reading, CounterReading::Value(2), "{}", c.source);
    }
    assert_eq!(
        readings
            .iter()
            .filter(|r| **r == CounterReading::Value(0))
            .count(),
        pfs * PORT_COUNTERS.len()
    );
}

#[test]
fn reads_follow_the_files_and_bad_files_read_as_what_they_are() {
    let yaml = r#"
name: counters
hostBridges:
  - root: pci0000:00
    ports:
      - bdf: "0000:00:01.0"
        devices:
          - bdf: "0000:04:00.0"
            model: pollara400
            netdev: {name: enp4s0, carrierChanges: 7}
            rdma:
              name: rocep4s0
              ports: 2
              counters: {symbol_error: 5, "hw_counters/out_of_buffer": 9}
            vfs: 2
"#;
    let dir = tempfile::tempdir().unwrap();
    Topology::from_yaml(yaml)
        .unwrap()
        .render(dir.path())
        .unwrap();
    let inv = topology::discover(dir.path(), &Default::default()).unwrap();
    let list = names(&[
        "symbol_error",
        "hw_counters/out_of_buffer",
        "link_downed",
        "carrier_changes",
    ]);
    let plan = CounterPlan::new(&inv, &list);
    let at = |source: &str, counter: usize| {
        plan.counters
            .iter()
            .position(|c| c.source == source && c.counter == counter)
            .unwrap_or_else(|| panic!("{source} {counter} not planned"))
    };
    assert_eq!(plan.counters.len(), 2 * 3 + 1, "two ports, one netdev");
    let read = || read_counters(dir.path(), &plan);
    let first = read();
    assert_eq!(first[at("rocep4s0/1", 0)], CounterReading::Value(5));
    assert_eq!(first[at("rocep4s0/2", 1)], CounterReading::Value(9));
    assert_eq!(first[at("enp4s0", 3)], CounterReading::Value(7));

    let root = dir.path();
    std::fs::write(
        port_counter(root, "rocep4s0", 1, "counters/symbol_error"),
        "1234\n",
    )
    .unwrap();
    std::fs::write(
        port_counter(root, "rocep4s0", 2, "counters/link_downed"),
        "lots\n",
    )
    .unwrap();
    std::fs::remove_file(port_counter(
        root,
        "rocep4s0",
        1,
        "hw_counters/out_of_buffer",
    ))
    .unwrap();
    std::fs::write(netdev_counter(root, "enp4s0", "carrier_changes"), "8\n").unwrap();
    let later = read();
    assert_eq!(later[at("rocep4s0/1", 0)], CounterReading::Value(1234));
    assert_eq!(
        later[at("rocep4s0/2", 2)],
        CounterReading::Invalid("lots".into())
    );
    assert_eq!(later[at("rocep4s0/1", 1)], CounterReading::Missing);
    assert_eq!(later[at("enp4s0", 3)], CounterReading::Value(8));
    // A directory where the file should be: unreadable, not a panic.
    let odd = port_counter(root, "rocep4s0", 2, "counters/symbol_error");
    std::fs::remove_file(&odd).unwrap();
    std::fs::create_dir(&odd).unwrap();
    assert!(matches!(
        read()[at("rocep4s0/2", 0)],
        CounterReading::Unreadable(_)
    ));
}

#[test]
fn counter_names_are_checked_by_the_fixture_too() {
    let yaml = r#"
name: bad
hostBridges:
  - root: pci0000:00
    devices:
      - bdf: "0000:04:00.0"
        model: pollara400
        rdma: {name: ionic_0, counters: {"../../escape": 1}}
"#;
    let err = Topology::from_yaml(yaml).unwrap_err().to_string();
    assert!(err.contains("../../escape"), "{err}");
}
