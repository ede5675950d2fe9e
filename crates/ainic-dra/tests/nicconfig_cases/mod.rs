//! The table of NicConfig cases that admission and prepare must judge
//! alike (issue 33 item 1), and prepare's side: the real allocator
//! allocates a case's claim on a node of the demo topology, copying class
//! and claim config into the allocation as the scheduler does, and the
//! agent's prepare planning (`node::plugin::resolve`) resolves it for
//! that node, as NodePrepareResources does. Shared by
//! `tests/admission_verdicts.rs` (the webhook's code in process) and the
//! testbed's `nicconfig` test (the real API server and controller).

#![allow(dead_code)]

use ainic_dra_node::plugin::resolve::{self, Scope};
use allocator::{Allocator, Features, NodeFacts, Release};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

/// The driver.
pub const D: &str = "ainic.amd.com";
/// The node prepared on.
pub const NODE: &str = "n1";

/// A NicConfig object with `fields`.
pub fn nic(fields: Value) -> Value {
    let mut v = json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig"});
    v.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    v
}

/// One row: the class's config entries, the claim's requests (class
/// `case` unless a subrequest names another) and config entries.
pub struct Case {
    /// What it tries.
    pub name: &'static str,
    /// The class's config parameters.
    pub class: Vec<Value>,
    /// The claim's requests, naming classes `case` and `case-mad`.
    pub requests: Value,
    /// The claim's config entries.
    pub claim: Value,
}

/// A case with one request of class `case`.
pub fn one(name: &'static str, class: Vec<Value>, claim: Vec<Value>) -> Case {
    let entries = claim
        .into_iter()
        .map(|p| json!({"opaque": {"driver": D, "parameters": p}}))
        .collect();
    Case {
        name,
        class,
        requests: json!([{"name": "nic", "exactly": {"deviceClassName": "case"}}]),
        claim: Value::Array(entries),
    }
}

/// Every case, admitted ones first.
pub fn cases() -> Vec<Case> {
    let v6 = json!(["fd00::2/64"]);
    let pins = nic(
        json!({"mode": "netdev", "netdev": {"interfaceName": "stor0", "mtu": 9000,
        "addresses": ["10.10.0.2/24"], "routes": [{"destination": "10.20.0.0/16", "gateway": "10.10.0.1"}]}}),
    );
    let mut rows = vec![
        // Admitted.
        one("no config", vec![], vec![]),
        one(
            "claim turns umad off",
            vec![],
            vec![nic(json!({"umad": false}))],
        ),
        one(
            "claim repeats the class's umad",
            vec![nic(json!({"umad": true}))],
            vec![nic(json!({"umad": true}))],
        ),
        one(
            "claim narrows the class's umad",
            vec![nic(json!({"umad": true}))],
            vec![nic(json!({"umad": false}))],
        ),
        one(
            "claim repeats the class's issm",
            vec![nic(json!({"issm": true}))],
            vec![nic(json!({"issm": true}))],
        ),
        one("rdma mode", vec![], vec![nic(json!({"mode": "rdma"}))]),
        one(
            "netdev mode, host settings",
            vec![],
            vec![nic(json!({"mode": "netdev"}))],
        ),
        one(
            "netdev mtu",
            vec![],
            vec![nic(json!({"mode": "netdev", "netdev": {"mtu": 9000}}))],
        ),
        one(
            "netdev full",
            vec![],
            vec![nic(
                json!({"mode": "netdev", "netdev": {"interfaceName": "net1",
            "mtu": 9000, "addresses": ["10.0.0.2/24", "fd00::2/64"]}}),
            )],
        ),
        one(
            "netdev route",
            vec![],
            vec![nic(
                json!({"mode": "netdev", "netdev": {"addresses": ["10.0.0.2/24"],
            "routes": [{"destination": "10.20.0.0/16", "gateway": "10.0.0.1"}, {"destination": "0.0.0.0/0"}]}}),
            )],
        ),
        one(
            "IPv6 with MTU 1500",
            vec![],
            vec![nic(
                json!({"mode": "netdev", "netdev": {"mtu": 1500, "addresses": v6}}),
            )],
        ),
        one(
            "class pins name, claim sets mtu",
            vec![nic(
                json!({"mode": "netdev", "netdev": {"interfaceName": "stor0"}}),
            )],
            vec![nic(json!({"netdev": {"mtu": 9000}}))],
        ),
        one(
            "claim repeats every pin",
            vec![pins.clone()],
            vec![pins.clone()],
        ),
        one(
            "class pins mode, claim repeats it",
            vec![nic(json!({"mode": "netdev"}))],
            vec![nic(json!({"mode": "netdev"}))],
        ),
        one(
            "class pins no routes, claim repeats",
            vec![nic(json!({"netdev": {"routes": []}}))],
            vec![nic(json!({"netdev": {"routes": []}}))],
        ),
        one(
            "two claim entries combine",
            vec![],
            vec![
                nic(json!({"mode": "netdev", "netdev": {"mtu": 9000}})),
                nic(json!({"netdev": {"interfaceName": "net1"}})),
            ],
        ),
        one("class settings alone", vec![pins.clone()], vec![]),
        one(
            "rdma mode ignores odd-but-valid netdev",
            vec![],
            vec![
                nic(json!({"netdev": {"mtu": 1200}})),
                nic(json!({"netdev": {"addresses": v6}})),
            ],
        ),
        one(
            "class entries combine",
            vec![nic(json!({"umad": true})), nic(json!({"issm": true}))],
            vec![nic(json!({"umad": true, "issm": true}))],
        ),
        one(
            "later class entry overrides",
            vec![nic(json!({"mode": "netdev"})), nic(json!({"mode": "rdma"}))],
            vec![nic(json!({"mode": "rdma"}))],
        ),
        // Refused.
        one("unknown field", vec![], vec![nic(json!({"umadd": true}))]),
        one(
            "unknown netdev field",
            vec![],
            vec![nic(json!({"netdev": {"mtuu": 9000}}))],
        ),
        one(
            "unknown route field",
            vec![],
            vec![nic(
                json!({"netdev": {"routes": [{"destination": "0.0.0.0/0", "gw": "10.0.0.1"}]}}),
            )],
        ),
        one(
            "wrong apiVersion",
            vec![],
            vec![json!({"apiVersion": "ainic.amd.com/v1", "kind": "NicConfig"})],
        ),
        one(
            "wrong kind",
            vec![],
            vec![json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicSettings"})],
        ),
        one(
            "no apiVersion",
            vec![],
            vec![json!({"kind": "NicConfig", "umad": false})],
        ),
        one("unknown mode", vec![], vec![nic(json!({"mode": "sriov"}))]),
        one("umad not a bool", vec![], vec![nic(json!({"umad": "yes"}))]),
        one(
            "mtu a string",
            vec![],
            vec![nic(json!({"netdev": {"mtu": "9000"}}))],
        ),
        one(
            "parameters not an object",
            vec![],
            vec![json!(["NicConfig"])],
        ),
        one(
            "mtu too small",
            vec![],
            vec![nic(json!({"netdev": {"mtu": 20}}))],
        ),
        one(
            "mtu too large",
            vec![],
            vec![nic(json!({"netdev": {"mtu": 70000}}))],
        ),
        one(
            "IPv6 with MTU 1200, one entry",
            vec![],
            vec![nic(json!({"netdev": {"mtu": 1200, "addresses": v6}}))],
        ),
        one(
            "IPv6 with MTU 1200, class and claim",
            vec![nic(json!({"mode": "netdev", "netdev": {"mtu": 1200}}))],
            vec![nic(json!({"netdev": {"addresses": v6}}))],
        ),
        one(
            "address without prefix",
            vec![],
            vec![nic(json!({"netdev": {"addresses": ["10.0.0.1"]}}))],
        ),
        one(
            "address outside its prefix range",
            vec![],
            vec![nic(json!({"netdev": {"addresses": ["10.0.0.1/40"]}}))],
        ),
        one(
            "IPv6 address outside its prefix range",
            vec![],
            vec![nic(json!({"netdev": {"addresses": ["fd00::1/129"]}}))],
        ),
        one(
            "not an address",
            vec![],
            vec![nic(json!({"netdev": {"addresses": ["10.0.0.300/24"]}}))],
        ),
        one(
            "route to nowhere",
            vec![],
            vec![nic(
                json!({"netdev": {"routes": [{"destination": "nowhere"}]}}),
            )],
        ),
        one(
            "gateway of the other family",
            vec![],
            vec![nic(
                json!({"netdev": {"routes": [{"destination": "10.1.0.0/16", "gateway": "fd00::1"}]}}),
            )],
        ),
        one(
            "interface name too long",
            vec![],
            vec![nic(
                json!({"netdev": {"interfaceName": "a-name-longer-than-15"}}),
            )],
        ),
        one(
            "interface name with a colon",
            vec![],
            vec![nic(json!({"netdev": {"interfaceName": "eth:0"}}))],
        ),
        one(
            "claim grants itself umad",
            vec![],
            vec![nic(json!({"umad": true}))],
        ),
        one(
            "claim grants itself issm",
            vec![nic(json!({"umad": true}))],
            vec![nic(json!({"issm": true}))],
        ),
        one(
            "claim changes the pinned mode",
            vec![nic(json!({"mode": "netdev"}))],
            vec![nic(json!({"mode": "rdma"}))],
        ),
        one(
            "claim changes the pinned name",
            vec![pins.clone()],
            vec![nic(json!({"netdev": {"interfaceName": "eth9"}}))],
        ),
        one(
            "claim changes the pinned mtu",
            vec![pins.clone()],
            vec![nic(json!({"netdev": {"mtu": 1500}}))],
        ),
        one(
            "claim changes the pinned addresses",
            vec![pins.clone()],
            vec![nic(json!({"netdev": {"addresses": ["10.10.0.66/24"]}}))],
        ),
        one(
            "claim adds routes against a pinned none",
            vec![nic(json!({"netdev": {"routes": []}}))],
            vec![nic(
                json!({"netdev": {"routes": [{"destination": "0.0.0.0/0"}]}}),
            )],
        ),
        one(
            "bad class config",
            vec![nic(json!({"issmm": true}))],
            vec![],
        ),
        one(
            "bad class netdev",
            vec![nic(json!({"netdev": {"mtu": 1}}))],
            vec![nic(json!({"umad": false}))],
        ),
    ];
    // Entries naming requests, and a second request of a plain class.
    rows.push(Case {
        name: "entry for the other request grants nothing here",
        class: vec![],
        requests: json!([{"name": "nic", "exactly": {"deviceClassName": "case"}},
                         {"name": "mad", "exactly": {"deviceClassName": "case-mad"}}]),
        claim: json!([{"requests": ["mad"], "opaque": {"driver": D, "parameters": nic(json!({"umad": true}))}},
                      {"requests": ["nic"], "opaque": {"driver": D, "parameters": nic(json!({"umad": true}))}}]),
    });
    rows.push(Case {
        name: "entry for the request its class grants",
        class: vec![],
        requests: json!([{"name": "nic", "exactly": {"deviceClassName": "case"}},
                         {"name": "mad", "exactly": {"deviceClassName": "case-mad"}}]),
        claim: json!([{"requests": ["mad"], "opaque": {"driver": D, "parameters": nic(json!({"umad": true}))}}]),
    });
    rows.push(Case {
        name: "another driver's config is not ours",
        class: vec![],
        requests: json!([{"name": "nic", "exactly": {"deviceClassName": "case"}}]),
        claim: json!([{"opaque": {"driver": "gpu.amd.com", "parameters": {"anything": true}}}]),
    });
    rows
}

/// The classes of a case, named `base` (with the case's config) and
/// `base-mad` (granting umad), both selecting this driver's PFs.
pub fn classes(case: &Case, base: &str) -> Vec<DeviceClass> {
    let class = |name: &str, config: &[Value]| -> DeviceClass {
        let config: Vec<Value> = (config.iter())
            .map(|p| json!({"opaque": {"driver": D, "parameters": p}}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "selectors": [{"cel": {"expression": format!(
                "device.driver == \"{D}\" && device.attributes[\"{D}\"].type == \"pf\"")}}],
            "config": config}}))
        .unwrap()
    };
    vec![
        class(base, &case.class),
        class(&format!("{base}-mad"), &[nic(json!({"umad": true}))]),
    ]
}

/// The claim spec of a case, its classes named after `base`.
pub fn claim_spec(case: &Case, base: &str) -> Value {
    let mut requests = case.requests.clone();
    for request in requests.as_array_mut().unwrap() {
        if let Some(class) = request.pointer_mut("/exactly/deviceClassName") {
            *class = json!(class.as_str().unwrap().replacen("case", base, 1));
        }
    }
    json!({"devices": {"requests": requests, "config": case.claim}})
}

/// What prepare says about claim `namespace/name` of `case` (classes
/// named after `base`): allocated as the scheduler would, planned as the
/// agent does.
pub fn prepare(
    case: &Case,
    base: &str,
    namespace: &str,
    name: &str,
    world: &World,
) -> Result<(), String> {
    let classes = classes(case, base);
    let mut claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "uid": "claim-uid"},
        "spec": claim_spec(case, base)}))
    .unwrap();
    let allocator = Allocator::new(
        Features::for_release(Release::V1_37),
        &world.slices,
        &classes,
        &[],
    )
    .expect("valid allocator input");
    let allocation = allocator
        .allocate(&NodeFacts::named(NODE), std::slice::from_ref(&claim))
        .unwrap_or_else(|e| panic!("{}: cannot allocate: {e}", case.name))
        .remove(0);
    claim.status = Some(
        serde_json::from_value(json!({
        "allocation": allocation,
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}))
        .unwrap(),
    );
    let scope = Scope {
        driver: D.into(),
        pool: NODE.into(),
    };
    resolve::plan(&claim, "claim-uid", &scope, &world.inventory)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A node of the demo topology: its inventory and slices.
pub struct World {
    inventory: topology::Inventory,
    slices: Vec<ResourceSlice>,
    _tmp: tempfile::TempDir,
}

/// Lays out the demo topology and builds its slices.
pub fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = testkit::fixture::bundled_by_name("mi300x-8gpu-8nic").unwrap();
    let topology = testkit::fixture::Topology::from_yaml(yaml).unwrap();
    topology.render(tmp.path()).unwrap();
    let inventory = topology::discover(tmp.path(), &topology::DiscoveryConfig::default()).unwrap();
    let config = dra_model::ModelConfig::for_node(NODE).unwrap();
    let slices = dra_model::build_slices(&inventory, &config).slices;
    World {
        inventory,
        slices,
        _tmp: tmp,
    }
}
