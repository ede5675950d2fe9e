//! What the classic plugins serve at one moment: the inventory and its split
//! between resources, kept in a `watch` channel that every resource's
//! `ListAndWatch` stream follows.

use std::sync::Arc;

use dra_model::ModelConfig;
use dra_model::classic::{Assignment, ClassicConfig, ResourceDevices, assign};
use dra_model::fabric;
use tokio::sync::watch;
use topology::Inventory;

/// One inventory and its split.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    /// The inventory the split was made from.
    pub inventory: Arc<Inventory>,
    /// Who gets which device.
    pub assignment: Assignment,
}

impl Snapshot {
    /// Splits `inventory` by `config`; with `model`, the devices take the
    /// rails its fabric facts give (else each PF's ordinal).
    pub fn new(
        config: &ClassicConfig,
        model: Option<&ModelConfig>,
        inventory: Arc<Inventory>,
    ) -> Self {
        let mut assignment = assign(config, &inventory);
        if let Some(m) = model {
            let facts = fabric::resolve(&inventory, &m.options().fabric, m.node_name(), m.driver());
            let rails = facts.facts.iter().map(|(a, f)| (*a, f.rail)).collect();
            assignment.set_rails(&rails);
        }
        Snapshot {
            inventory,
            assignment,
        }
    }

    /// The devices of resource `name` (empty when the config lacks it).
    pub fn resource(&self, name: &str) -> Option<&ResourceDevices> {
        self.assignment.resource(name)
    }
}

/// Follows `inventories` and publishes a new snapshot whenever the split or
/// the inventory changes; runs until the inventory sender goes away.
pub async fn follow(
    config: Arc<ClassicConfig>,
    model: Option<ModelConfig>,
    mut inventories: watch::Receiver<Arc<Inventory>>,
    snapshots: watch::Sender<Arc<Snapshot>>,
) {
    loop {
        if inventories.changed().await.is_err() {
            return;
        }
        let inventory = Arc::clone(&inventories.borrow_and_update());
        let next = Snapshot::new(&config, model.as_ref(), inventory);
        for overlap in &next.assignment.overlaps {
            tracing::error!(
                device = %overlap.device,
                owners = %overlap.owners.join(", "),
                "device matched by more than one path; offered by none"
            );
        }
        snapshots.send_if_modified(|current| {
            if **current == next {
                false
            } else {
                *current = Arc::new(next);
                true
            }
        });
    }
}
