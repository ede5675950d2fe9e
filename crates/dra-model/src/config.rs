//! What the model is built with: raw [`ModelOptions`] (flags, config file)
//! validated once into a [`ModelConfig`].

use topology::{NicFunction, PciAddress};

use crate::fabric::FabricSources;
use crate::gates::{FeatureGate, FeatureGates};
use crate::health::Verdicts;
use crate::names::DEFAULT_DRIVER;
use crate::validate::format;

/// How a PF whose VFs are enabled is published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PfWithVfs {
    /// With `DRAPartitionableDevices`: the PF and its VFs, made mutually
    /// exclusive by a shared counter set. Without it: the VFs only.
    #[default]
    Auto,
    /// The VFs only; the PF is not published.
    VfsOnly,
    /// The PF only; its VFs are not published.
    PfOnly,
}

/// Raw, unvalidated options, as flags and files give them.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOptions {
    /// `spec.driver`; default `ainic.amd.com`.
    pub driver: String,
    /// The node whose pool is built; also the pool name.
    pub node_name: String,
    /// Feature gates (`--feature-gates`).
    pub gates: FeatureGates,
    /// Policy for PFs with VFs enabled.
    pub pf_with_vfs: PfWithVfs,
    /// PFs published in shared mode (consumable capacity): PCI addresses or
    /// interface names, or `*` for every PF.
    pub shared_pfs: Vec<String>,
    /// `--gpu-pairing-attribute`: a qualified attribute name (e.g.
    /// `gpu.amd.com/pciAddr`) under which the nearest GPU's address is published.
    pub gpu_pairing_attribute: Option<String>,
    /// Queue pairs of a PF, when known (published as capacity `queuePairs`).
    pub pf_queue_pairs: Option<u64>,
    /// Queue pairs of a VF, when known.
    pub vf_queue_pairs: Option<u64>,
    /// Smallest bandwidth share (bits/s) a claim may take of a shared PF;
    /// also the default share. Default 1 Gb/s.
    pub shared_min_bandwidth: u64,
    /// Smallest queue-pair share of a shared PF; also the default. Default 1.
    pub shared_min_queue_pairs: u64,
    /// Fabric facts: config file, node labels, LLDP.
    pub fabric: FabricSources,
    /// The node serves the extended resources `amd.com/nic` (PFs) and
    /// `amd.com/vnic` (VFs) through DRA (node label
    /// `<driver>/extended-resources=dra`): their devices carry the
    /// `extendedResource` attribute the chart's extended-resource classes select.
    pub extended_resources: bool,
    /// Shared PFs without a configured tenant are bound to the first
    /// tenant that takes a share (`--sticky-tenants`): they carry the
    /// binding conditions the controller answers, when
    /// `DRADeviceBindingConditions` is on.
    pub sticky_tenants: bool,
}

impl ModelOptions {
    /// Defaults for `node_name`.
    pub fn new(node_name: impl Into<String>) -> Self {
        ModelOptions {
            driver: DEFAULT_DRIVER.to_string(),
            node_name: node_name.into(),
            gates: FeatureGates::new(),
            pf_with_vfs: PfWithVfs::Auto,
            shared_pfs: Vec::new(),
            gpu_pairing_attribute: None,
            pf_queue_pairs: None,
            vf_queue_pairs: None,
            shared_min_bandwidth: 1_000_000_000,
            shared_min_queue_pairs: 1,
            fabric: FabricSources::default(),
            extended_resources: false,
            sticky_tenants: false,
        }
    }
}

/// Why options are not a usable configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The node name is not a DNS subdomain.
    #[error(
        "invalid node name {0:?}: must be a DNS subdomain (lowercase letters, digits, '-', '.')"
    )]
    NodeName(String),
    /// The driver name is not a DNS subdomain of at most 63 characters.
    #[error("invalid driver name {0:?}: must be a DNS subdomain of at most 63 characters")]
    Driver(String),
    /// The pairing attribute is not `<domain>/<C identifier>`.
    #[error(
        "invalid gpu pairing attribute {0:?}: expected <domain>/<identifier>, e.g. gpu.amd.com/pciAddr"
    )]
    PairingAttribute(String),
    /// The pairing attribute would overwrite one the driver publishes itself.
    #[error("gpu pairing attribute {0:?} collides with an attribute the driver publishes")]
    PairingCollision(String),
    /// A shared-PF entry is neither a PCI address, an interface name nor `*`.
    #[error("invalid shared pf {0:?}: expected a PCI address, an interface name or *")]
    SharedPf(String),
    /// A share minimum of zero.
    #[error("invalid {0}: must be greater than zero")]
    ZeroMinimum(&'static str),
}

/// Validated configuration of the device model, and the devices' counter
/// health it is published with.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    options: ModelOptions,
    health: Verdicts,
}

impl ModelConfig {
    /// Validates `options`.
    pub fn new(options: ModelOptions) -> Result<Self, ConfigError> {
        if !format::is_dns_subdomain(&options.node_name) {
            return Err(ConfigError::NodeName(options.node_name));
        }
        if !format::is_driver_name(&options.driver) {
            return Err(ConfigError::Driver(options.driver));
        }
        if let Some(attr) = &options.gpu_pairing_attribute {
            check_pairing_attribute(attr, &options.driver)?;
        }
        for entry in &options.shared_pfs {
            let ok = entry == "*"
                || entry.parse::<PciAddress>().is_ok()
                || (!entry.is_empty() && entry.len() <= 15 && !entry.contains(['/', ' ']));
            if !ok {
                return Err(ConfigError::SharedPf(entry.clone()));
            }
        }
        if options.shared_min_bandwidth == 0 {
            return Err(ConfigError::ZeroMinimum("shared minimum bandwidth"));
        }
        if options.shared_min_queue_pairs == 0 {
            return Err(ConfigError::ZeroMinimum("shared minimum queue pairs"));
        }
        Ok(ModelConfig {
            options,
            health: Verdicts::new(),
        })
    }

    /// Defaults for `node_name`, validated.
    pub fn for_node(node_name: &str) -> Result<Self, ConfigError> {
        Self::new(ModelOptions::new(node_name))
    }

    /// The options this configuration was validated from.
    pub fn options(&self) -> &ModelOptions {
        &self.options
    }

    /// `spec.driver`.
    pub fn driver(&self) -> &str {
        &self.options.driver
    }

    /// The node, also the pool name.
    pub fn node_name(&self) -> &str {
        &self.options.node_name
    }

    /// The feature gates.
    pub fn gates(&self) -> &FeatureGates {
        &self.options.gates
    }

    /// This configuration with other feature gates (gates are not part of
    /// what [`ModelConfig::new`] validates).
    pub fn with_gates(mut self, gates: FeatureGates) -> ModelConfig {
        self.options.gates = gates;
        self
    }

    /// This configuration publishing the counter health `health` (taints
    /// of degraded and unhealthy PFs and their VFs, see [`crate::health`]).
    pub fn with_health(mut self, health: Verdicts) -> ModelConfig {
        self.health = health;
        self
    }

    /// The counter health published: PFs below healthy.
    pub fn health(&self) -> &Verdicts {
        &self.health
    }

    /// Whether `gate` is on.
    pub fn gate(&self, gate: FeatureGate) -> bool {
        self.options.gates.enabled(gate)
    }

    /// Whether `nic` (a PF) is configured for shared mode. Takes effect only
    /// with `DRAConsumableCapacity`.
    pub fn wants_shared(&self, nic: &NicFunction) -> bool {
        nic.is_pf()
            && self.options.shared_pfs.iter().any(|e| {
                e == "*"
                    || e.parse::<PciAddress>().is_ok_and(|a| a == nic.address)
                    || nic.netdevs.iter().any(|n| &n.name == e)
            })
    }
}

fn check_pairing_attribute(attr: &str, driver: &str) -> Result<(), ConfigError> {
    let bad = || ConfigError::PairingAttribute(attr.to_string());
    let (domain, id) = attr.split_once('/').ok_or_else(bad)?;
    if !format::is_qualified_name(attr) || domain.is_empty() {
        return Err(bad());
    }
    let own = domain == driver && crate::names::attr::ALL.contains(&id);
    let standard = attr == crate::names::ATTR_PCIE_ROOT
        || attr == crate::names::ATTR_PCI_BUS_ID
        || attr == crate::names::ATTR_NUMA_NODE_STD;
    if own || standard {
        return Err(ConfigError::PairingCollision(attr.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        let c = ModelConfig::for_node("node-a").unwrap();
        assert_eq!(c.driver(), "ainic.amd.com");
        assert_eq!(c.node_name(), "node-a");
    }

    #[test]
    fn rejects_bad_names() {
        assert!(matches!(
            ModelConfig::for_node("Node_A"),
            Err(ConfigError::NodeName(_))
        ));
        let mut o = ModelOptions::new("n");
        o.driver = "AINIC".into();
        assert!(matches!(ModelConfig::new(o), Err(ConfigError::Driver(_))));
    }

    #[test]
    fn pairing_attribute_must_be_qualified_and_foreign() {
        let with = |a: &str| {
            let mut o = ModelOptions::new("n");
            o.gpu_pairing_attribute = Some(a.into());
            ModelConfig::new(o)
        };
        assert!(with("gpu.amd.com/pciAddr").is_ok());
        assert!(matches!(
            with("pciAddr"),
            Err(ConfigError::PairingAttribute(_))
        ));
        assert!(matches!(
            with("gpu.amd.com/pci-addr"),
            Err(ConfigError::PairingAttribute(_))
        ));
        assert!(matches!(
            with("ainic.amd.com/rail"),
            Err(ConfigError::PairingCollision(_))
        ));
        assert!(matches!(
            with("resource.kubernetes.io/pciBusID"),
            Err(ConfigError::PairingCollision(_))
        ));
    }

    #[test]
    fn shared_pf_entries_are_checked() {
        let mut o = ModelOptions::new("n");
        o.shared_pfs = vec!["0000:0c:00.0".into(), "enp12s0".into(), "*".into()];
        assert!(ModelConfig::new(o.clone()).is_ok());
        o.shared_pfs = vec!["not an interface".into()];
        assert!(matches!(ModelConfig::new(o), Err(ConfigError::SharedPf(_))));
    }
}
