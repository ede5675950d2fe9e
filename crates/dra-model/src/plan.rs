//! Which NIC functions are published, and how: the decisions that depend
//! on feature gates and policy, made before any Kubernetes object is built.

use topology::{FunctionKind, Inventory, NicFunction};

use crate::config::{ModelConfig, PfWithVfs};
use crate::gates::FeatureGate;
use crate::index::InventoryIndex;
use crate::names;

/// How one function is published.
#[derive(Clone, Debug, PartialEq)]
pub struct Published<'a> {
    /// The function.
    pub nic: &'a NicFunction,
    /// Shared mode: `allowMultipleAllocations` and request policies.
    pub shared: bool,
    /// Counter set it consumes from and how much (`functions` counter).
    pub consumes: Option<(String, u64)>,
}

/// A counter set to publish: one per PF published together with its VFs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterPlan {
    /// Counter set name (the PF's device name).
    pub name: String,
    /// Value of the `functions` counter: the number of VFs.
    pub functions: u64,
}

/// The publication plan of a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan<'a> {
    /// Functions to publish, in inventory (PCI address) order.
    pub devices: Vec<Published<'a>>,
    /// Counter sets, by PF address.
    pub counters: Vec<CounterPlan>,
    /// Decisions worth telling the operator.
    pub warnings: Vec<String>,
}

/// Decides what to publish.
pub fn plan<'a>(inventory: &'a Inventory, config: &ModelConfig) -> Plan<'a> {
    plan_indexed(inventory, &InventoryIndex::new(inventory), config)
}

pub(crate) fn plan_indexed<'a>(
    inventory: &'a Inventory,
    index: &InventoryIndex<'a>,
    config: &ModelConfig,
) -> Plan<'a> {
    let consumable = config.gate(FeatureGate::DraConsumableCapacity);
    let partitionable = config.gate(FeatureGate::DraPartitionableDevices);
    let mut out = Plan::default();
    for nic in &inventory.nics {
        match &nic.kind {
            FunctionKind::Pf { .. } => {
                plan_pf(index, config, nic, consumable, partitionable, &mut out)
            }
            FunctionKind::Vf { physfn, .. } => {
                if index.nic(*physfn).is_none() {
                    out.devices.push(Published {
                        nic,
                        shared: false,
                        consumes: None,
                    });
                }
            }
        }
    }
    out.devices.sort_by_key(|p| p.nic.address);
    out
}

/// Whether a PF and `vfs` VFs may be published together: always from 1.35
/// (counter sets in slices of their own), in 1.34 only within one slice.
fn fits_one_slice(config: &ModelConfig, vfs: usize) -> bool {
    let release = config.gates().release();
    release.counters_in_own_slices() || vfs < release.max_devices_with_taints_or_counters()
}

fn plan_pf<'a>(
    index: &InventoryIndex<'a>,
    config: &ModelConfig,
    pf: &'a NicFunction,
    consumable: bool,
    partitionable: bool,
    out: &mut Plan<'a>,
) {
    let vfs = index.vfs_of(pf.address).to_vec();
    let wants_shared = config.wants_shared(pf);
    if wants_shared && !consumable {
        out.warnings.push(format!(
            "{}: shared mode needs feature gate DRAConsumableCapacity; published for exclusive use",
            pf.address
        ));
    }
    if wants_shared && consumable {
        if !vfs.is_empty() {
            out.warnings.push(format!(
                "{}: shared PF: its {} VFs are not published",
                pf.address,
                vfs.len()
            ));
        }
        out.devices.push(Published {
            nic: pf,
            shared: true,
            consumes: None,
        });
        return;
    }
    let exclusive = |nic| Published {
        nic,
        shared: false,
        consumes: None,
    };
    if vfs.is_empty() {
        out.devices.push(exclusive(pf));
        return;
    }
    match config.options().pf_with_vfs {
        PfWithVfs::PfOnly => out.devices.push(exclusive(pf)),
        PfWithVfs::VfsOnly => out.devices.extend(vfs.into_iter().map(exclusive)),
        PfWithVfs::Auto if !partitionable => out.devices.extend(vfs.into_iter().map(exclusive)),
        PfWithVfs::Auto if !fits_one_slice(config, vfs.len()) => {
            out.warnings.push(format!(
                "{}: Kubernetes {} keeps a PF, its {} VFs and their counter set in one slice of at most {} devices; published as its VFs",
                pf.address,
                config.gates().release(),
                vfs.len(),
                config.gates().release().max_devices_with_taints_or_counters()
            ));
            out.devices.extend(vfs.into_iter().map(exclusive))
        }
        PfWithVfs::Auto => {
            let set = names::device_name(pf);
            let n = vfs.len() as u64;
            out.counters.push(CounterPlan {
                name: set.clone(),
                functions: n,
            });
            out.devices.push(Published {
                nic: pf,
                shared: false,
                consumes: Some((set.clone(), n)),
            });
            out.devices.extend(vfs.into_iter().map(|vf| Published {
                nic: vf,
                shared: false,
                consumes: Some((set.clone(), 1)),
            }));
        }
    }
}
