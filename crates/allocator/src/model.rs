//! The allocator's validated view of ResourceSlice devices: attributes,
//! capacities and counters parsed once, when the allocator is built, so
//! that the search and CEL evaluation never re-parse strings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceTaint, ResourceSlice};

use crate::error::InputError;
use crate::quantity::Quantity;
use crate::semver::Semver;

/// A typed device attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(String),
    /// `version` (semver).
    Version(Semver),
    /// `ints` (`DRAListTypeAttributes`, from 1.36).
    Ints(Vec<i64>),
    /// `bools`.
    Bools(Vec<bool>),
    /// `strings`.
    Strings(Vec<String>),
    /// `versions`.
    Versions(Vec<Semver>),
    /// No value the release knows: upstream keeps such an attribute, a
    /// constraint finds it unusable and a CEL selector evaluated on its
    /// device fails ("unsupported attribute value").
    Unset,
}

impl AttributeValue {
    /// Whether the value is one of the four scalars.
    pub fn is_scalar(&self) -> bool {
        matches!(
            self,
            AttributeValue::Int(_)
                | AttributeValue::Bool(_)
                | AttributeValue::String(_)
                | AttributeValue::Version(_)
        )
    }
}

/// A capacity request policy, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RequestPolicy {
    pub default: Option<Quantity>,
    pub valid_values: Vec<Quantity>,
    pub valid_range: Option<ValidRange>,
}

/// `validRange` of a request policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValidRange {
    pub min: Quantity,
    pub max: Option<Quantity>,
    pub step: Option<Quantity>,
}

/// One published capacity of a device, under its name as published.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Capacity {
    pub name: String,
    pub value: Quantity,
    pub policy: Option<RequestPolicy>,
}

/// Counters a device draws from one counter set.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CounterConsumption {
    pub counter_set: String,
    pub counters: BTreeMap<String, Quantity>,
}

/// Where a device may be used, for slices with per-device node selection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NodeSelection {
    NodeName(String),
    AllNodes,
    Selector(NodeSelector),
    /// Per-device selection on the slice (only on slices).
    PerDevice,
    /// Nothing the allocator understands.
    Unknown,
}

/// A device of a ResourceSlice, as the allocator sees it.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Driver that publishes the device.
    pub driver: String,
    /// Device name, unique in its pool.
    pub name: String,
    /// Attributes by domain, then name; unqualified names are under the driver's domain.
    pub attributes: BTreeMap<String, BTreeMap<String, AttributeValue>>,
    /// Capacities by domain, then name, as CEL sees them.
    pub capacity: BTreeMap<String, BTreeMap<String, Quantity>>,
    /// Whether several claims may share the device (consumable capacity).
    pub allow_multiple_allocations: bool,
    pub(crate) capacities: Vec<Capacity>,
    pub(crate) consumes_counters: Vec<CounterConsumption>,
    pub(crate) taints: Vec<DeviceTaint>,
    pub(crate) node: NodeSelection,
    pub(crate) has_binding_conditions: bool,
    /// `bindingConditions` and `bindingFailureConditions`, copied into results.
    pub(crate) binding: (Vec<String>, Vec<String>),
    /// `bindsToNode`: an allocation of it is pinned to the node.
    pub(crate) binds_to_node: bool,
}

/// Splits a qualified name into domain and identifier, the driver being the
/// domain of unqualified names.
pub(crate) fn split_qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

impl DeviceInfo {
    /// Parses one device of a slice of `driver`.
    /// `lists_known`: the release has list-typed attributes (1.36+);
    /// before, their fields are unknown and the attribute has no value.
    pub(crate) fn parse(
        slice: &str,
        driver: &str,
        device: &Device,
        lists_known: bool,
    ) -> Result<DeviceInfo, InputError> {
        let bad = |what: String| InputError::Slice {
            slice: slice.to_owned(),
            reason: format!("device {}: {what}", device.name),
        };
        let mut attributes: BTreeMap<String, BTreeMap<String, AttributeValue>> = BTreeMap::new();
        // Unqualified names first, so that a name qualified with the driver wins.
        let mut raw: Vec<_> = device.attributes.iter().flatten().collect();
        raw.sort_by_key(|(name, _)| name.contains('/'));
        for (name, attribute) in raw {
            let value = attribute_value(attribute, lists_known)
                .map_err(|e| bad(format!("attribute {name}: {e}")))?;
            let (domain, id) = split_qualified(name, driver);
            attributes
                .entry(domain.to_owned())
                .or_default()
                .insert(id.to_owned(), value);
        }
        let mut capacity: BTreeMap<String, BTreeMap<String, Quantity>> = BTreeMap::new();
        let mut capacities = Vec::new();
        for (name, cap) in device.capacity.iter().flatten() {
            let value = parse_quantity(&cap.value.0).map_err(bad)?;
            let policy = cap
                .request_policy
                .as_ref()
                .map(|p| parse_policy(p).map_err(bad))
                .transpose()?;
            let (domain, id) = split_qualified(name, driver);
            capacity
                .entry(domain.to_owned())
                .or_default()
                .insert(id.to_owned(), value);
            capacities.push(Capacity {
                name: name.clone(),
                value,
                policy,
            });
        }
        let consumes_counters = device
            .consumes_counters
            .iter()
            .flatten()
            .map(|c| {
                let counters = parse_counters(&c.counters).map_err(&bad)?;
                Ok(CounterConsumption {
                    counter_set: c.counter_set.clone(),
                    counters,
                })
            })
            .collect::<Result<_, InputError>>()?;
        Ok(DeviceInfo {
            driver: driver.to_owned(),
            name: device.name.clone(),
            attributes,
            capacity,
            allow_multiple_allocations: device.allow_multiple_allocations.unwrap_or(false),
            capacities,
            consumes_counters,
            taints: device.taints.clone().unwrap_or_default(),
            node: node_selection(
                device.node_name.as_deref(),
                device.all_nodes,
                device.node_selector.as_ref(),
                false,
            ),
            has_binding_conditions: device
                .binding_conditions
                .as_ref()
                .is_some_and(|c| !c.is_empty()),
            binding: (
                device.binding_conditions.clone().unwrap_or_default(),
                device
                    .binding_failure_conditions
                    .clone()
                    .unwrap_or_default(),
            ),
            binds_to_node: device.binds_to_node == Some(true),
        })
    }

    /// Looks up a fully-qualified attribute, as constraints do.
    pub(crate) fn attribute(&self, qualified: &str) -> Option<&AttributeValue> {
        let (domain, id) = qualified.split_once('/')?;
        self.attributes.get(domain)?.get(id)
    }
}

/// The one value of an attribute. Versions must parse; two values are
/// an error (the API server refuses both, upstream would pick one).
fn attribute_value(
    attribute: &DeviceAttribute,
    lists_known: bool,
) -> Result<AttributeValue, String> {
    let versions = |v: &[String]| {
        v.iter()
            .map(|v| Semver::parse(v).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()
    };
    let mut values = Vec::new();
    if let Some(i) = attribute.int {
        values.push(AttributeValue::Int(i));
    }
    if let Some(b) = attribute.bool {
        values.push(AttributeValue::Bool(b));
    }
    if let Some(s) = &attribute.string {
        values.push(AttributeValue::String(s.clone()));
    }
    if let Some(v) = &attribute.version {
        values.push(AttributeValue::Version(
            Semver::parse(v).map_err(|e| e.to_string())?,
        ));
    }
    if lists_known {
        if let Some(i) = &attribute.ints {
            values.push(AttributeValue::Ints(i.clone()));
        }
        if let Some(b) = &attribute.bools {
            values.push(AttributeValue::Bools(b.clone()));
        }
        if let Some(s) = &attribute.strings {
            values.push(AttributeValue::Strings(s.clone()));
        }
        if let Some(v) = &attribute.versions {
            values.push(AttributeValue::Versions(versions(v)?));
        }
    }
    match values.len() {
        0 => Ok(AttributeValue::Unset),
        1 => Ok(values.remove(0)),
        _ => Err("must have exactly one value".to_owned()),
    }
}

pub(crate) fn node_selection(
    node_name: Option<&str>,
    all_nodes: Option<bool>,
    selector: Option<&NodeSelector>,
    per_device: bool,
) -> NodeSelection {
    match (
        node_name.filter(|n| !n.is_empty()),
        all_nodes.unwrap_or(false),
        selector,
    ) {
        (Some(name), _, _) => NodeSelection::NodeName(name.to_owned()),
        (None, true, _) => NodeSelection::AllNodes,
        (None, false, Some(s)) => NodeSelection::Selector(s.clone()),
        (None, false, None) if per_device => NodeSelection::PerDevice,
        _ => NodeSelection::Unknown,
    }
}

pub(crate) fn parse_quantity(text: &str) -> Result<Quantity, String> {
    Quantity::parse(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_counters(
    counters: &BTreeMap<String, k8s_openapi::api::resource::v1::Counter>,
) -> Result<BTreeMap<String, Quantity>, String> {
    counters
        .iter()
        .map(|(name, c)| Ok((name.clone(), parse_quantity(&c.value.0)?)))
        .collect()
}

fn parse_policy(
    policy: &k8s_openapi::api::resource::v1::CapacityRequestPolicy,
) -> Result<RequestPolicy, String> {
    let valid_range = match &policy.valid_range {
        Some(r) => Some(ValidRange {
            min: parse_quantity(&r.min.0)?,
            max: r.max.as_ref().map(|q| parse_quantity(&q.0)).transpose()?,
            step: r.step.as_ref().map(|q| parse_quantity(&q.0)).transpose()?,
        }),
        None => None,
    };
    Ok(RequestPolicy {
        default: policy
            .default
            .as_ref()
            .map(|q| parse_quantity(&q.0))
            .transpose()?,
        valid_values: policy
            .valid_values
            .iter()
            .flatten()
            .map(|q| parse_quantity(&q.0))
            .collect::<Result<_, _>>()?,
        valid_range,
    })
}

/// A ResourceSlice, parsed.
#[derive(Debug, Clone)]
pub(crate) struct SliceInfo {
    pub name: String,
    pub driver: String,
    pub pool: String,
    pub generation: i64,
    pub slice_count: i64,
    pub node: NodeSelection,
    pub per_device: bool,
    pub devices: Vec<DeviceInfo>,
    pub shared_counters: Vec<(String, BTreeMap<String, Quantity>)>,
    /// Node restriction for allocation results: nodeName / nodeSelector of the slice.
    pub api_node_name: Option<String>,
    pub api_node_selector: Option<NodeSelector>,
    /// Per-device node name / selector, for allocation results.
    pub device_node: Vec<(Option<String>, Option<NodeSelector>)>,
}

impl SliceInfo {
    /// `lists_known` as for [`DeviceInfo::parse`].
    pub(crate) fn parse(slice: &ResourceSlice, lists_known: bool) -> Result<SliceInfo, InputError> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let spec = &slice.spec;
        let bad = |reason: &str| InputError::Slice {
            slice: name.clone(),
            reason: reason.to_owned(),
        };
        if spec.driver.is_empty() {
            return Err(bad("spec.driver is empty"));
        }
        if spec.pool.name.is_empty() {
            return Err(bad("spec.pool.name is empty"));
        }
        if spec.pool.resource_slice_count < 1 || spec.pool.generation < 0 {
            return Err(bad(
                "spec.pool needs resourceSliceCount >= 1 and generation >= 0",
            ));
        }
        if spec.devices.iter().flatten().any(|d| d.name.is_empty()) {
            return Err(bad("a device has no name"));
        }
        let api_devices = spec.devices.as_deref().unwrap_or_default();
        let devices = api_devices
            .iter()
            .map(|d| DeviceInfo::parse(&name, &spec.driver, d, lists_known))
            .collect::<Result<Vec<_>, _>>()?;
        let shared_counters = spec
            .shared_counters
            .iter()
            .flatten()
            .map(|set| Ok((set.name.clone(), parse_counters(&set.counters)?)))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|reason| InputError::Slice {
                slice: name.clone(),
                reason,
            })?;
        let per_device = spec.per_device_node_selection.unwrap_or(false);
        Ok(SliceInfo {
            driver: spec.driver.clone(),
            pool: spec.pool.name.clone(),
            generation: spec.pool.generation,
            slice_count: spec.pool.resource_slice_count,
            node: node_selection(
                spec.node_name.as_deref(),
                spec.all_nodes,
                spec.node_selector.as_ref(),
                per_device,
            ),
            per_device,
            devices,
            shared_counters,
            api_node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
            api_node_selector: spec.node_selector.clone(),
            device_node: api_devices
                .iter()
                .map(|d| (d.node_name.clone(), d.node_selector.clone()))
                .collect(),
            name,
        })
    }
}

/// A bare device for unit tests.
#[cfg(test)]
pub(crate) fn test_device(name: &str) -> DeviceInfo {
    DeviceInfo {
        driver: "example.com".into(),
        name: name.into(),
        attributes: BTreeMap::new(),
        capacity: BTreeMap::new(),
        allow_multiple_allocations: false,
        capacities: vec![],
        consumes_counters: vec![],
        taints: vec![],
        node: NodeSelection::Unknown,
        has_binding_conditions: false,
        binding: (vec![], vec![]),
        binds_to_node: false,
    }
}

#[cfg(test)]
mod attribute_tests {
    use super::*;

    fn attribute(json: serde_json::Value) -> DeviceAttribute {
        serde_json::from_value(json).unwrap()
    }

    /// Before 1.36 the list fields are unknown, so such an attribute has
    /// no value; two values are an error either way.
    #[test]
    fn list_values_exist_from_1_36() {
        let ints = attribute(serde_json::json!({"ints": [1, 2]}));
        assert_eq!(
            attribute_value(&ints, true),
            Ok(AttributeValue::Ints(vec![1, 2]))
        );
        assert_eq!(attribute_value(&ints, false), Ok(AttributeValue::Unset));
        let versions = attribute(serde_json::json!({"versions": ["1.0.0", "01.0"]}));
        assert!(attribute_value(&versions, true).is_err());
        let two = attribute(serde_json::json!({"int": 1, "strings": ["a"]}));
        assert!(attribute_value(&two, true).is_err());
        assert_eq!(attribute_value(&two, false), Ok(AttributeValue::Int(1)));
    }
}
