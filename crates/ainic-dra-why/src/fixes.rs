//! What would make a node take the pod's claims, found the way a person
//! would: try the allocation again with one thing relaxed (other claims'
//! allocations, device taints, the claims' constraints, their selectors,
//! their counts) and name the first that is enough; and the driver's own
//! knowledge: how full each fabric partition is, which tenant a class
//! belongs to.

use allocator::{Allocator, Features, NodeFacts};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde::Serialize;
use serde_json::Value;

use super::nodes::selector_matches;

/// The one change that makes the claims fit on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Cause {
    /// Other claims hold the devices that would do.
    Held {
        /// Claims (`namespace/name`) holding devices of the node.
        claims: Vec<String>,
    },
    /// The devices that would do are tainted and the request does not
    /// tolerate it.
    Tainted {
        /// The taints on the node's devices (`key=value:Effect`).
        taints: Vec<String>,
    },
    /// A `matchAttribute`/`distinctAttribute` constraint has no solution.
    Constraint {
        /// The constraints (`matchAttribute NAME`).
        constraints: Vec<String>,
    },
    /// The requests' CEL selectors exclude every device of the class.
    Selectors {
        /// The selectors.
        expressions: Vec<String>,
    },
    /// The node has devices of the class, but fewer than asked (or less
    /// capacity).
    TooMany,
    /// No one of the above is enough on its own, these together are (e.g.
    /// a selector no device meets on a node whose devices are all held).
    Several {
        /// The causes, in the order tried.
        causes: Vec<Cause>,
    },
    /// Nothing relaxed is enough: the node publishes no device of the class.
    NoDevice,
}

/// A change to a claim's `spec.devices`, as JSON.
type Edit = fn(&mut Value);

/// The inputs of one node's trials.
pub(crate) struct Trial<'a> {
    /// The release's gates.
    pub features: Features,
    /// Every class.
    pub classes: &'a [DeviceClass],
    /// Slices as the scheduler sees them (DeviceTaintRules applied).
    pub slices: &'a [ResourceSlice],
    /// Every allocated claim of the cluster.
    pub held: &'a [ResourceClaim],
    /// The pod's own allocated claims.
    pub own: &'a [ResourceClaim],
    /// The pod's claims to allocate.
    pub pending: &'a [ResourceClaim],
    /// The node.
    pub node: &'a Node,
}

impl Trial<'_> {
    fn fits(
        &self,
        slices: &[ResourceSlice],
        held: &[ResourceClaim],
        pending: &[ResourceClaim],
    ) -> bool {
        let Ok(allocator) = Allocator::new(self.features, slices, self.classes, held) else {
            return false;
        };
        allocator
            .allocate(&NodeFacts::from_node(self.node), pending)
            .is_ok()
    }

    /// The first single relaxation that lets the claims fit; else the
    /// relaxations that do together, tried one more at a time in the same
    /// order; else [`Cause::NoDevice`].
    pub(crate) fn cause(&self) -> Cause {
        if self.fits(self.slices, self.own, self.pending) {
            return self.held_cause();
        }
        let untainted = untaint(self.slices);
        if self.fits(&untainted, self.held, self.pending) {
            return self.tainted_cause();
        }
        let free = edit(self.pending, strip_constraints);
        if self.fits(self.slices, self.held, &free) {
            return Cause::Constraint {
                constraints: collect(self.pending, constraints),
            };
        }
        if self.fits(self.slices, self.held, &edit(self.pending, strip_selectors)) {
            return self.selectors_cause();
        }
        if self.fits(self.slices, self.held, &edit(self.pending, ask_one)) {
            return Cause::TooMany;
        }
        self.several()
    }

    fn held_cause(&self) -> Cause {
        Cause::Held {
            claims: self.holders(),
        }
    }

    fn tainted_cause(&self) -> Cause {
        Cause::Tainted {
            taints: self.taints(),
        }
    }

    fn selectors_cause(&self) -> Cause {
        Cause::Selectors {
            expressions: collect(self.pending, selectors),
        }
    }

    /// Relaxes one more thing at a time (only those that change anything)
    /// until the claims fit: [`Cause::Several`] with what it took.
    fn several(&self) -> Cause {
        let untainted = untaint(self.slices);
        let mut slices = self.slices;
        let mut held = self.held;
        let mut pending = self.pending.to_vec();
        let mut causes = Vec::new();
        if !self.holders().is_empty() {
            held = self.own;
            causes.push(self.held_cause());
        }
        if !self.taints().is_empty() {
            slices = &untainted;
            causes.push(self.tainted_cause());
        }
        if causes.len() > 1 && self.fits(slices, held, &pending) {
            return Cause::Several { causes };
        }
        let steps: [(Edit, Cause); 3] = [
            (
                strip_constraints,
                Cause::Constraint {
                    constraints: collect(self.pending, constraints),
                },
            ),
            (strip_selectors, self.selectors_cause()),
            (ask_one, Cause::TooMany),
        ];
        for (change, cause) in steps {
            let relaxed = edit(&pending, change);
            if relaxed == pending {
                continue;
            }
            pending = relaxed;
            causes.push(cause);
            if self.fits(slices, held, &pending) {
                return match causes.len() {
                    1 => causes.remove(0),
                    _ => Cause::Several { causes },
                };
            }
        }
        Cause::NoDevice
    }

    /// Other claims allocated devices of this node (by pool or by node selector).
    fn holders(&self) -> Vec<String> {
        let name = self.node.metadata.name.as_deref().unwrap_or_default();
        let own: Vec<_> = self.own.iter().map(|c| &c.metadata.uid).collect();
        let mut out: Vec<String> = (self.held.iter())
            .filter(|c| !own.contains(&&c.metadata.uid))
            .filter(|c| {
                let allocation = c.status.as_ref().and_then(|s| s.allocation.as_ref());
                let Some(allocation) = allocation else {
                    return false;
                };
                let results = (allocation.devices.as_ref()).and_then(|d| d.results.as_deref());
                let in_pool = results.unwrap_or_default().iter().any(|r| r.pool == name);
                let selected = (allocation.node_selector.as_ref())
                    .is_some_and(|s| selector_matches(s, self.node));
                in_pool || selected
            })
            .map(|c| label(&c.metadata))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The taints on devices offered to this node.
    fn taints(&self) -> Vec<String> {
        let name = self.node.metadata.name.as_deref().unwrap_or_default();
        let mut out: Vec<String> = (self.slices.iter())
            .filter(|s| s.spec.node_name.as_deref() == Some(name) || s.spec.pool.name == name)
            .flat_map(|s| s.spec.devices.iter().flatten())
            .flat_map(|d| d.taints.iter().flatten())
            .map(|t| {
                format!(
                    "{}={}:{}",
                    t.key,
                    t.value.as_deref().unwrap_or(""),
                    t.effect
                )
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// What to do about `cause`, in words.
pub(crate) fn advice(cause: &Cause, node_count: usize) -> String {
    let nodes = if node_count == 1 {
        "this node"
    } else {
        "these nodes"
    };
    match cause {
        Cause::Held { claims } => format!(
            "the devices that would do are allocated to other claims ({}); wait for them to be released or delete them",
            shorten(claims)
        ),
        Cause::Tainted { taints } => format!(
            "the devices that would do are tainted ({}); fix the device (the agent taints a NIC whose link or RDMA port is down, or whose error counters climb past their thresholds, ainic.amd.com/unhealthy=COUNTER, lifted by itself once they stop) or add a toleration to the request",
            shorten(taints)
        ),
        Cause::Constraint { constraints } => format!(
            "no set of devices satisfies {}: the devices that match differ in that attribute on {nodes}; relax the constraint or pick another node",
            shorten(constraints)
        ),
        Cause::Selectors { expressions } => format!(
            "no device of the class on {nodes} passes the request's selectors ({}); compare them with the devices' attributes (kubectl get resourceslices -o yaml)",
            shorten(expressions)
        ),
        Cause::TooMany => format!(
            "{nodes} have devices of the class, but fewer (or less capacity) than the request asks for; ask for fewer"
        ),
        Cause::Several { causes } => {
            let each: Vec<String> = causes.iter().map(|c| advice(c, node_count)).collect();
            format!(
                "more than one thing stands in the way, each to fix: {}",
                each.join("; and ")
            )
        }
        Cause::NoDevice => format!(
            "{nodes} publish no device of the requested class: check that the node agent runs there (kubectl get resourceslices --field-selector spec.nodeName=NODE) and the class name"
        ),
    }
}

fn shorten(items: &[String]) -> String {
    const MAX: usize = 4;
    let mut text = items
        .iter()
        .take(MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX {
        text.push_str(&format!(" and {} more", items.len() - MAX));
    }
    text
}

fn label(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

fn untaint(slices: &[ResourceSlice]) -> Vec<ResourceSlice> {
    let mut out = slices.to_vec();
    for device in out
        .iter_mut()
        .flat_map(|s| s.spec.devices.iter_mut().flatten())
    {
        device.taints = None;
    }
    out
}

/// `claims` with `change` applied to each one's `spec.devices` as JSON.
fn edit(claims: &[ResourceClaim], change: fn(&mut Value)) -> Vec<ResourceClaim> {
    (claims.iter())
        .map(|c| {
            let mut value = serde_json::to_value(c).expect("claims serialize");
            if let Some(devices) = value.pointer_mut("/spec/devices") {
                change(devices);
            }
            serde_json::from_value(value).unwrap_or_else(|_| c.clone())
        })
        .collect()
}

/// Each request and subrequest of `devices`, as JSON.
fn each_request(devices: &mut Value, mut f: impl FnMut(&mut serde_json::Map<String, Value>)) {
    for request in devices["requests"].as_array_mut().into_iter().flatten() {
        if let Some(exact) = request.get_mut("exactly").and_then(Value::as_object_mut) {
            f(exact);
        }
        for sub in request["firstAvailable"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if let Some(sub) = sub.as_object_mut() {
                f(sub);
            }
        }
    }
}

fn strip_constraints(devices: &mut Value) {
    if let Some(devices) = devices.as_object_mut() {
        devices.remove("constraints");
    }
}

fn strip_selectors(devices: &mut Value) {
    each_request(devices, |r| {
        r.remove("selectors");
    });
}

fn ask_one(devices: &mut Value) {
    each_request(devices, |r| {
        r.remove("capacity");
        r.insert("allocationMode".into(), "ExactCount".into());
        r.insert("count".into(), 1.into());
    });
}

fn collect(claims: &[ResourceClaim], f: fn(&Value) -> Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = (claims.iter())
        .filter_map(|c| serde_json::to_value(c).ok())
        .flat_map(|v| f(&v["spec"]["devices"]))
        .collect();
    out.dedup();
    out
}

fn constraints(devices: &Value) -> Vec<String> {
    (devices["constraints"].as_array().into_iter().flatten())
        .filter_map(|c| {
            let (kind, attr) = match (c.get("matchAttribute"), c.get("distinctAttribute")) {
                (Some(a), _) => ("matchAttribute", a),
                (None, Some(a)) => ("distinctAttribute", a),
                _ => return None,
            };
            Some(format!("{kind} {}", attr.as_str()?))
        })
        .collect()
}

fn selectors(devices: &Value) -> Vec<String> {
    let mut devices = devices.clone();
    let mut out = Vec::new();
    each_request(&mut devices, |r| {
        for s in r
            .get("selectors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(e) = s.pointer("/cel/expression").and_then(Value::as_str) {
                out.push(e.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    });
    out
}

/// "no fabric partition has room for 3 nodes: …" when a pending claim asks
/// `fabric_class` for more nodes than any partition has free.
pub(crate) fn partition_hint(
    slices: &[ResourceSlice],
    claims: &[ResourceClaim],
    pending: &[ResourceClaim],
    driver: &str,
    fabric_class: &str,
) -> Option<String> {
    let mut partitions = dra_model::partitions::partitions(slices, driver);
    dra_model::partitions::count_allocated(&mut partitions, claims, driver);
    (pending.iter())
        .find_map(|c| dra_model::partitions::why_no_partition_fits(&partitions, c, fabric_class))
}

/// "tenant class X is not allowed in namespace N …" for each request of
/// `specs` naming another tenant's class than the namespace's.
pub(crate) fn tenant_hints(
    specs: &[k8s_openapi::api::resource::v1::ResourceClaimSpec],
    classes: &[DeviceClass],
    namespace: &Namespace,
    tenant_label: &str,
    driver: &str,
) -> Vec<String> {
    let name = namespace.metadata.name.as_deref().unwrap_or_default();
    let labels = namespace.metadata.labels.clone().unwrap_or_default();
    let own = labels.get(tenant_label);
    let mut out = Vec::new();
    for target in specs.iter().flat_map(dra_model::admission::targets) {
        let class = classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(&target.class));
        let Some(tenant) = class.and_then(|c| dra_model::deviceclass::class_tenant(c, driver))
        else {
            continue;
        };
        if own == Some(&tenant) {
            continue;
        }
        let whose = match own {
            Some(t) => format!("tenant {t} (label {tenant_label})"),
            None => format!("no tenant (no label {tenant_label})"),
        };
        out.push(format!(
            "request {}: tenant class {} is not allowed in namespace {name}, which is {whose}: use {}'s namespaces, or a class of this namespace's tenant",
            target.request, target.class, tenant
        ));
    }
    out
}
