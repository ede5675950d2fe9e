//! Random allocation questions that upstream's API validation would
//! accept (or that a gate turned off after the objects were written
//! leaves behind), covering every feature the allocator has: ExactCount
//! and All, firstAvailable, selectors over every attribute type and
//! capacity, matchAttribute and distinctAttribute, held claims (dedicated
//! and shared), every node-selection kind, incomplete and invalid pools,
//! admin access, consumable capacity with request policies, partitionable
//! counters, taints and tolerations, binding conditions, list-typed
//! attributes (from 1.36), the per-claim result limit.
//!
//! Gates: every gate the allocator's `Features` reads that the release
//! has ([`gates_of`]) is drawn on or off independently, one coin each,
//! and the inputs those gates act on are drawn independently of them
//! ([`Uses`]), so that a gate that is off meets the objects it would
//! change (a slice with counters, a device with binding conditions, a
//! claim with a capacity request, a list value, ...).
//!
//! A case is a [`Case`]: the objects `simulate` reads, the node and the
//! gates. Deterministic for a seed (splitmix64).

use serde_json::{Value, json};

use allocator::Release;

/// splitmix64: small, fast, and the same sequence everywhere.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`%.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One question, as the oracle reads it.
#[derive(Debug, Clone)]
pub struct Case {
    /// `<release>-<seed>`.
    pub name: String,
    /// The release profile.
    pub release: Release,
    /// Gates set over the release's defaults.
    pub gates: Vec<(String, bool)>,
    /// The objects.
    pub objects: Vec<Value>,
}

/// The node every case allocates on.
pub const NODE: &str = "node-a";
const DRIVERS: [&str; 2] = ["a.example.com", "b.example.com"];

/// The gates the allocator reads that `release` has (by upstream name):
/// all of `Features::GATE_NAMES`, less `DRAListTypeAttributes` before 1.36
/// and `DRAFractionalCapacityRange` before 1.37.
pub fn gates_of(release: Release) -> Vec<&'static str> {
    allocator::Features::GATE_NAMES
        .into_iter()
        .filter(|gate| match *gate {
            "DRAListTypeAttributes" => release.has_list_type_attributes(),
            "DRAFractionalCapacityRange" => release >= Release::V1_37,
            _ => true,
        })
        .collect()
}

/// What a case's objects use, drawn independently of its gates, and what
/// its release decides about their form.
#[derive(Debug, Clone, Copy)]
struct Uses {
    /// Shared devices, capacity requests and `distinctAttribute`.
    consumable: bool,
    /// Counter sets and devices that draw on them.
    counters: bool,
    /// Slices with per-device node selection.
    per_device: bool,
    /// Device taints and request tolerations.
    taints: bool,
    /// Devices with binding conditions.
    binding: bool,
    /// `firstAvailable` requests.
    prioritized: bool,
    /// Requests with admin access.
    admin: bool,
    /// List-typed attribute values (and selectors and constraints over
    /// them); only releases that have them (1.36+).
    lists: bool,
    /// Pools whose slices contradict each other.
    invalid_pools: bool,
    /// The release knows taint effect `None` (1.35+).
    none_effect: bool,
    /// Counter sets live in slices of their own (1.35+).
    counters_apart: bool,
    /// The release knows compatibility groups (1.37; their gate is off).
    groups: bool,
}

impl Uses {
    fn draw(rng: &mut Rng, release: Release) -> Uses {
        Uses {
            consumable: rng.chance(50),
            counters: rng.chance(50),
            per_device: rng.chance(30),
            taints: rng.chance(50),
            binding: rng.chance(40),
            prioritized: rng.chance(50),
            admin: rng.chance(40),
            lists: release.has_list_type_attributes() && rng.chance(40),
            invalid_pools: rng.chance(15),
            none_effect: release.taint_effect_none(),
            counters_apart: release.counters_in_own_slices(),
            groups: release >= Release::V1_37,
        }
    }
}

/// Generates case number `seed` for `release`.
pub fn case(release: Release, seed: u64) -> Case {
    // The release's index (0 for 1.34), as when Release was an enum.
    let index = u64::from(release.minor() - Release::V1_34.minor());
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0x1000_0000_0001));
    let gates = gates_of(release)
        .into_iter()
        .map(|gate| (gate.to_string(), rng.chance(50)))
        .collect();
    let on = Uses::draw(&mut rng, release);
    let mut objects = vec![node(&mut rng)];
    objects.extend(classes(&mut rng));
    let drivers = 1 + rng.below(2);
    let mut devices = Vec::new();
    for driver in &DRIVERS[..drivers] {
        objects.extend(pools(&mut rng, on, driver, &mut devices));
    }
    objects.extend(held(&mut rng, on, &devices));
    let claims = if rng.chance(70) { 1 } else { 2 + rng.below(2) };
    for c in 0..claims {
        objects.push(claim(&mut rng, on, c));
    }
    Case {
        name: format!("{release}-{seed}"),
        release,
        gates,
        objects,
    }
}

fn node(rng: &mut Rng) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "labels": {"example.com/zone": rng.pick(&["z1", "z2"])}}})
}

fn classes(rng: &mut Rng) -> Vec<Value> {
    let mut out = Vec::new();
    for driver in DRIVERS {
        let short = &driver[..1];
        out.push(class(
            &format!("c-{short}"),
            &format!("device.driver == \"{driver}\""),
            None,
        ));
        let fast = format!(
            "device.driver == \"{driver}\" && has(device.attributes[\"{driver}\"].fast) && device.attributes[\"{driver}\"].fast"
        );
        let config = rng.chance(30).then(|| driver.to_string());
        out.push(class(&format!("c-{short}-fast"), &fast, config));
    }
    out.push(class(
        "c-any",
        "device.driver.endsWith(\".example.com\")",
        None,
    ));
    out
}

fn class(name: &str, expression: &str, config_driver: Option<String>) -> Value {
    let mut spec = json!({"selectors": [{"cel": {"expression": expression}}]});
    if let Some(driver) = config_driver {
        spec["config"] = json!([{"opaque": {"driver": driver, "parameters": {"class": name}}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
           "metadata": {"name": name}, "spec": spec})
}

/// A device a held claim may take: (driver, pool, device, multi-allocatable).
type Known = (String, String, String, bool);

fn pools(rng: &mut Rng, on: Uses, driver: &str, known: &mut Vec<Known>) -> Vec<Value> {
    let mut out = Vec::new();
    let count = if rng.chance(30) { 2 } else { 1 };
    for p in 0..count {
        let pool = format!("{}-p{p}", &driver[..1]);
        let slices = 1 + rng.below(2);
        let counters = on.counters && rng.chance(60);
        let apart = counters && on.counters_apart;
        let incomplete = rng.chance(5);
        let total = slices + usize::from(apart) + usize::from(incomplete);
        // Invalid pools: a device name in two slices (the API server checks
        // names per slice only), or, with counters apart (1.35+), devices
        // that draw on a counter set the pool does not have.
        let duplicate = on.invalid_pools && slices == 2 && rng.chance(40);
        let dangling = apart && on.invalid_pools && rng.chance(30);
        let selection = selection(rng, on);
        for s in 0..slices {
            let mut spec = json!({"driver": driver,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": total}});
            for (k, v) in selection.as_object().unwrap() {
                spec[k] = v.clone();
            }
            let per_device = selection.get("perDeviceNodeSelection").is_some();
            let n = 1 + rng.below(5);
            let devices: Vec<Value> = (0..n)
                .map(|d| {
                    let name = if duplicate && s == 1 && d == 0 {
                        "s0-d0".to_string()
                    } else {
                        format!("s{s}-d{d}")
                    };
                    let dev = device(rng, on, &name, counters, per_device);
                    let multi = dev.get("allowMultipleAllocations").is_some();
                    known.push((driver.to_string(), pool.clone(), name, multi));
                    dev
                })
                .collect();
            spec["devices"] = json!(devices);
            // 1.34: the counter sets a device draws on are in its own slice.
            if counters && !apart {
                spec["sharedCounters"] = counter_sets();
            }
            out.push(slice(&format!("{pool}-{s}"), spec));
        }
        if apart {
            let mut spec = json!({"driver": driver,
                "pool": {"name": pool, "generation": 1, "resourceSliceCount": total},
                "sharedCounters": counter_sets()});
            if dangling {
                spec["sharedCounters"][0]["name"] = json!("cs-other");
            }
            spec["nodeName"] = json!(NODE);
            out.push(slice(&format!("{pool}-counters"), spec));
        }
    }
    out
}

fn slice(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": name}, "spec": spec})
}

fn counter_sets() -> Value {
    json!([{"name": "cs", "counters": {"mem": {"value": "8Gi"}}}])
}

/// The node-selection fields of a pool's slices.
fn selection(rng: &mut Rng, on: Uses) -> Value {
    match rng.below(100) {
        0..60 => json!({"nodeName": NODE}),
        60..75 => json!({"allNodes": true}),
        75..85 => json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/zone", "operator": "In", "values": [rng.pick(&["z1", "z2"])]}]}]}}),
        85..92 => json!({"nodeName": "node-b"}),
        _ if on.per_device => json!({"perDeviceNodeSelection": true}),
        _ => json!({"nodeName": NODE}),
    }
}

/// `numa` (a list of ints, or one int) and `zones` (a list of strings).
fn list_attributes(rng: &mut Rng, attributes: &mut serde_json::Map<String, Value>) {
    if rng.chance(60) {
        let value = if rng.chance(70) {
            let numa: Vec<usize> = (0..4).filter(|_| rng.chance(40)).collect();
            if numa.is_empty() {
                json!({"int": rng.below(4)})
            } else {
                json!({"ints": numa})
            }
        } else {
            json!({"int": rng.below(4)})
        };
        attributes.insert("numa".into(), value);
    }
    if rng.chance(40) {
        let zones: Vec<&str> = ["z1", "z2", "z3"]
            .into_iter()
            .filter(|_| rng.chance(50))
            .collect();
        if !zones.is_empty() {
            attributes.insert("zones".into(), json!({"strings": zones}));
        }
    }
}

fn device(rng: &mut Rng, on: Uses, name: &str, counters: bool, per_device: bool) -> Value {
    let mut attributes = serde_json::Map::new();
    if rng.chance(70) {
        attributes.insert("model".into(), json!({"string": rng.pick(&["m1", "m2"])}));
    }
    if rng.chance(60) {
        attributes.insert("index".into(), json!({"int": rng.below(4)}));
    }
    if rng.chance(50) {
        attributes.insert("fast".into(), json!({"bool": rng.chance(50)}));
    }
    if rng.chance(40) {
        attributes.insert(
            "ver".into(),
            json!({"version": rng.pick(&["1.0.0", "1.2.0", "2.0.0"])}),
        );
    }
    if rng.chance(50) {
        attributes.insert(
            "resource.kubernetes.io/pcieRoot".into(),
            json!({"string": rng.pick(&["pci0", "pci1"])}),
        );
    }
    if on.lists {
        list_attributes(rng, &mut attributes);
    }
    let mut dev = json!({"name": name, "attributes": attributes});
    let mut capacity = serde_json::Map::new();
    if rng.chance(60) {
        capacity.insert(
            "mem".into(),
            json!({"value": rng.pick(&["1Gi", "2Gi", "4Gi"])}),
        );
    }
    if on.consumable && rng.chance(35) {
        dev["allowMultipleAllocations"] = json!(true);
        let policy = if rng.chance(40) {
            json!({"default": "10G", "validRange": {"min": "10G", "max": "100G", "step": "10G"}})
        } else if rng.chance(30) {
            // Fractional bounds: milli-unit rounding under
            // DRAFractionalCapacityRange (1.37), whole units otherwise.
            json!({"default": "200m", "validRange": {"min": "200m", "max": "100", "step": "300m"}})
        } else {
            json!({"default": "50G", "validValues": ["10G", "50G", "100G"]})
        };
        capacity.insert(
            "bw".into(),
            json!({"value": "100G", "requestPolicy": policy}),
        );
    }
    if !capacity.is_empty() {
        dev["capacity"] = json!(capacity);
    }
    if counters && rng.chance(80) {
        dev["consumesCounters"] = json!([{"counterSet": "cs",
            "counters": {"mem": {"value": rng.pick(&["2Gi", "4Gi", "8Gi"])}}}]);
        if on.groups && rng.chance(10) {
            dev["consumesCounters"][0]["compatibilityGroups"] = json!(["g1"]);
        }
    }
    if per_device {
        dev["nodeName"] = json!(if rng.chance(80) { NODE } else { "node-b" });
    }
    if on.taints && rng.chance(20) {
        let mut effects = vec!["NoSchedule", "NoExecute"];
        if on.none_effect {
            effects.push("None");
        }
        dev["taints"] = json!([{"key": rng.pick(&["k1", "k2"]), "value": "v",
            "effect": rng.pick(&effects)}]);
    }
    if on.binding && rng.chance(15) {
        dev["bindingConditions"] = json!(["ready"]);
        dev["bindingFailureConditions"] = json!(["failed"]);
        if rng.chance(50) {
            dev["bindsToNode"] = json!(true);
        }
    }
    dev
}

fn held(rng: &mut Rng, on: Uses, known: &[Known]) -> Vec<Value> {
    let mut out = Vec::new();
    if known.is_empty() {
        return out;
    }
    for h in 0..rng.below(3) {
        let (driver, pool, device, multi) = rng.pick(known).clone();
        let mut result = json!({"request": "r0", "driver": driver, "pool": pool, "device": device});
        if multi && on.consumable {
            result["shareID"] = json!(format!("00000000-0000-4000-8000-00000000000{h}"));
            result["consumedCapacity"] = json!({"bw": rng.pick(&["10G", "50G"])});
        }
        out.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": format!("held-{h}"), "namespace": "default", "uid": format!("uid-held-{h}")},
            "spec": {"devices": {"requests": [{"name": "r0",
                "exactly": {"deviceClassName": "c-any"}}]}},
            "status": {"allocation": {"devices": {"results": [result]}}}}));
    }
    out
}

fn claim(rng: &mut Rng, on: Uses, c: usize) -> Value {
    let n = if rng.chance(60) { 1 } else { 2 + rng.below(2) };
    let requests: Vec<Value> = (0..n).map(|r| request(rng, on, &format!("r{r}"))).collect();
    let mut devices = json!({"requests": requests});
    if rng.chance(25) {
        let names: Vec<String> = (0..n).map(|r| format!("r{r}")).collect();
        let subset: Vec<&String> = names.iter().filter(|_| rng.chance(70)).collect();
        let mut attributes = vec![
            "a.example.com/model",
            "a.example.com/index",
            "resource.kubernetes.io/pcieRoot",
        ];
        if on.lists {
            attributes.extend(["a.example.com/numa", "a.example.com/zones"]);
        }
        let attribute = rng.pick(&attributes);
        let mut constraint = if on.consumable && rng.chance(30) {
            json!({"distinctAttribute": attribute})
        } else {
            json!({"matchAttribute": attribute})
        };
        if !subset.is_empty() && subset.len() < n {
            constraint["requests"] = json!(subset);
        }
        devices["constraints"] = json!([constraint]);
    }
    if rng.chance(15) {
        devices["config"] = json!([{"requests": ["r0"],
            "opaque": {"driver": "a.example.com", "parameters": {"claim": c}}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": format!("claim-{c}"), "namespace": "default", "uid": format!("uid-{c}")},
        "spec": {"devices": devices}})
}

fn request(rng: &mut Rng, on: Uses, name: &str) -> Value {
    if on.prioritized && rng.chance(20) {
        let subs: Vec<Value> = (0..1 + rng.below(3))
            .map(|s| {
                let mut sub = exactly(rng, on, false);
                sub["name"] = json!(format!("s{s}"));
                sub
            })
            .collect();
        return json!({"name": name, "firstAvailable": subs});
    }
    json!({"name": name, "exactly": exactly(rng, on, true)})
}

fn exactly(rng: &mut Rng, on: Uses, admin_allowed: bool) -> Value {
    let class = *rng.pick(&["c-a", "c-b", "c-a-fast", "c-any", "c-a", "c-b"]);
    let domain = if class.starts_with("c-b") {
        "b.example.com"
    } else {
        "a.example.com"
    };
    let mut e = json!({"deviceClassName": class});
    let wanted = if rng.chance(50) { 0 } else { 1 + rng.below(2) };
    let selectors: Vec<Value> = (0..wanted)
        .map(|_| json!({"cel": {"expression": selector(rng, on, domain)}}))
        .collect();
    if !selectors.is_empty() {
        e["selectors"] = json!(selectors);
    }
    // As the API server stores them: allocationMode defaulted.
    match rng.below(100) {
        0..10 => e["allocationMode"] = json!("All"),
        10..13 => e = with_count(e, 33),
        13..70 => e = with_count(e, 1),
        _ => e = with_count(e, 2 + rng.below(2)),
    }
    if admin_allowed && on.admin && rng.chance(5) {
        e["adminAccess"] = json!(true);
    }
    if on.taints && rng.chance(25) {
        e["tolerations"] = json!([{"key": rng.pick(&["k1", "k2"]), "operator": "Exists",
            "effect": rng.pick(&["NoSchedule", "NoExecute"])}]);
    }
    if on.consumable && rng.chance(25) {
        e["capacity"] =
            json!({"requests": {"bw": rng.pick(&["20G", "35G", "60G", "250m", "1400m"])}});
    }
    e
}

fn with_count(mut e: Value, count: usize) -> Value {
    e["allocationMode"] = json!("ExactCount");
    e["count"] = json!(count);
    e
}

fn selector(rng: &mut Rng, on: Uses, d: &str) -> String {
    let guarded =
        |attr: &str, test: String| format!("has(device.attributes[\"{d}\"].{attr}) && {test}");
    // Unguarded lookups (0, 8) fail at run time on devices that lack the
    // attribute, which aborts the allocation: rare, so most cases allocate.
    let mut safe = vec![1, 2, 3, 4, 5, 6, 7];
    if on.consumable {
        safe.push(9);
    }
    if on.lists {
        safe.extend([10, 11, 12]);
    }
    let pick = if rng.chance(8) {
        *rng.pick(&[0, 8])
    } else {
        *rng.pick(&safe)
    };
    match pick {
        0 => format!("device.attributes[\"{d}\"].model == \"m1\""),
        1 => guarded("model", format!("device.attributes[\"{d}\"].model == \"m2\"")),
        2 => guarded("index", format!("device.attributes[\"{d}\"].index >= 1")),
        3 => format!(
            "has(device.capacity[\"{d}\"].mem) && device.capacity[\"{d}\"].mem.compareTo(quantity(\"2Gi\")) >= 0"
        ),
        4 => guarded("ver", format!("device.attributes[\"{d}\"].ver.isGreaterThan(semver(\"1.1.0\"))")),
        5 => "has(device.attributes[\"resource.kubernetes.io\"].pcieRoot) && device.attributes[\"resource.kubernetes.io\"].pcieRoot == \"pci0\"".into(),
        6 => format!("\"fast\" in device.attributes[\"{d}\"]"),
        7 => format!("device.driver == \"{d}\""),
        8 => format!("device.attributes[\"{d}\"].index > 0"),
        9 => "device.allowMultipleAllocations == true".into(),
        10 => guarded("numa", format!("device.attributes[\"{d}\"].numa.includes({})", rng.below(4))),
        11 => guarded("model", format!("device.attributes[\"{d}\"].model.includes(\"m1\")")),
        _ => guarded("zones", format!("\"z2\" in device.attributes[\"{d}\"].zones || device.attributes[\"{d}\"].zones.exists(z, z == \"z3\")")),
    }
}
