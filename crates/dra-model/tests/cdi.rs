//! Our CDI spec types against the reference library
//! (`container-device-interface`, a test-only dependency): for specs with
//! every field the driver writes, in every combination, the library accepts
//! what [`Spec::finish`] writes and computes the same minimum version; and
//! specs our checks refuse, the library refuses too.

use std::path::PathBuf;

use container_device_interface as reference;
use dra_model::cdi::{ContainerEdits, Device, DeviceNode, Mount, NetDevice, Spec};

/// A spec with the features selected by the bits of `mask`.
fn spec(mask: u32) -> Spec {
    let bit = |n: u32| mask & (1 << n) != 0;
    let name = if bit(0) {
        "7a1e-pf-0000-0c-00-0"
    } else {
        "classic-pf-0000-0c-00-0"
    };
    let mut edits = ContainerEdits {
        env: vec!["NCCL_IB_HCA==ionic_0".into()],
        ..ContainerEdits::default()
    };
    edits.device_nodes.push(DeviceNode {
        path: "/dev/infiniband/uverbs0".into(),
        host_path: bit(1).then(|| "/dev/infiniband/uverbs0".into()),
        kind: Some("c".into()),
        major: Some(231),
        minor: Some(192),
        permissions: Some("rw".into()),
    });
    if bit(2) {
        edits.mounts.push(Mount {
            host_path: "/var/run/ainic/metadata.json".into(),
            container_path: "/var/run/dra/metadata.json".into(),
            options: vec!["ro".into(), "bind".into()],
            kind: bit(3).then(|| "bind".into()),
        });
    }
    if bit(4) {
        edits.net_devices.push(NetDevice {
            host_interface_name: "enp12s0".into(),
            name: "net1".into(),
        });
    }
    let mut spec = Spec {
        kind: if bit(5) {
            "amd.com/ainic.v2".into()
        } else {
            "amd.com/ainic".into()
        },
        devices: vec![Device {
            name: name.into(),
            container_edits: edits,
            ..Device::default()
        }],
        ..Spec::default()
    };
    if bit(6) {
        spec.annotations
            .insert("ainic.amd.com/claim".into(), "a".into());
    }
    if bit(7) {
        spec.container_edits = Some(ContainerEdits {
            env: vec!["AINIC_DEVICES=pf-0000-0c-00-0".into()],
            ..ContainerEdits::default()
        });
    }
    spec
}

fn reference_spec(text: &str) -> reference::specs::config::Spec {
    serde_json::from_str(text).expect("the reference types read our JSON")
}

#[test]
fn the_reference_library_accepts_every_spec_at_the_version_we_compute() {
    for mask in 0..256 {
        let ours = spec(mask);
        let text = ours
            .clone()
            .finish()
            .unwrap_or_else(|e| panic!("mask {mask}: {e}"));
        let theirs = reference_spec(&text);
        let version = reference::version::minimum_required_version(&theirs).unwrap();
        assert_eq!(
            version.to_string(),
            ours.minimum_version(),
            "mask {mask}: {text}"
        );
        reference::spec::new_spec(&theirs, &PathBuf::from("ainic.json"), 0)
            .unwrap_or_else(|e| panic!("mask {mask}: the reference refuses {text}: {e:#}"));
    }
}

/// A named way to break a spec.
type Breakage = (&'static str, Box<dyn Fn(&mut Spec)>);

#[test]
fn what_our_checks_refuse_the_reference_refuses() {
    let broken: Vec<Breakage> = vec![
        ("no devices", Box::new(|s| s.devices.clear())),
        ("bad vendor", Box::new(|s| s.kind = "-amd.com/ainic".into())),
        (
            "bad device name",
            Box::new(|s| s.devices[0].name = "a b".into()),
        ),
        (
            "empty edits",
            Box::new(|s| s.devices[0].container_edits = ContainerEdits::default()),
        ),
        (
            "bad env",
            Box::new(|s| s.devices[0].container_edits.env = vec!["NOEQUALS".into()]),
        ),
        (
            "bad permissions",
            Box::new(|s| {
                s.devices[0].container_edits.device_nodes[0].permissions = Some("x".into())
            }),
        ),
        (
            "duplicate device",
            Box::new(|s| s.devices.push(s.devices[0].clone())),
        ),
    ];
    for (what, breakage) in broken {
        let mut ours = spec(0);
        breakage(&mut ours);
        assert!(ours.clone().finish().is_err(), "{what}: we accept it");
        ours.cdi_version = ours.minimum_version().into();
        let theirs = reference_spec(&serde_json::to_string(&ours).unwrap());
        assert!(
            reference::spec::new_spec(&theirs, &PathBuf::from("ainic.json"), 0).is_err(),
            "{what}: the reference accepts it"
        );
    }
}
