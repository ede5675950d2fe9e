//! Rules for one device of a slice: name, attributes, capacities and their
//! request policies, taints, counter consumption, per-device node fields.

use std::collections::BTreeSet;

use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, Device, DeviceAttribute};
use k8s_quantity::Quantity;

use super::{Report, format};
use crate::gates::Release;

/// Longest attribute/capacity key: domain (63) + `/` + identifier (32).
const MAX_KEY_LENGTH: usize = 63 + 1 + 32;

pub(super) fn check_device(
    r: &mut Report,
    path: &str,
    d: &Device,
    per_device: bool,
    release: Release,
) {
    r.check(
        format::is_dns_label(&d.name),
        format!("{path}.name"),
        format!("{:?} is not a DNS label", d.name),
    );
    let attrs = d.attributes.as_ref().map_or(0, |a| a.len());
    let caps = d.capacity.as_ref().map_or(0, |c| c.len());
    r.check(
        attrs + caps <= super::MAX_ATTRIBUTES_AND_CAPACITIES,
        path,
        format!(
            "{} attributes and capacities, at most {} allowed",
            attrs + caps,
            super::MAX_ATTRIBUTES_AND_CAPACITIES
        ),
    );
    for (key, value) in d.attributes.iter().flatten() {
        let at = format!("{path}.attributes[{key}]");
        check_key(r, &at, key);
        check_attribute(r, &at, value);
    }
    check_capacities(r, path, d);
    check_taints(r, path, d, release);
    check_consumption(r, path, d);
    let node_fields = usize::from(d.node_name.is_some())
        + usize::from(d.node_selector.is_some())
        + usize::from(d.all_nodes.is_some());
    if per_device {
        r.check(
            node_fields == 1,
            path,
            "exactly one of nodeName, nodeSelector, allNodes is required with perDeviceNodeSelection",
        );
    } else {
        r.check(
            node_fields == 0,
            path,
            "nodeName, nodeSelector and allNodes need perDeviceNodeSelection on the slice",
        );
    }
}

fn check_key(r: &mut Report, at: &str, key: &str) {
    r.check(
        key.len() <= MAX_KEY_LENGTH && format::is_qualified_name(key),
        at,
        "name is not <C identifier ≤32> or <DNS subdomain ≤63>/<C identifier ≤32>",
    );
}

fn check_attribute(r: &mut Report, at: &str, a: &DeviceAttribute) {
    let set = usize::from(a.bool.is_some())
        + usize::from(a.int.is_some())
        + usize::from(a.string.is_some())
        + usize::from(a.version.is_some());
    r.check(
        set == 1,
        at,
        format!("exactly one value must be set ({set} are)"),
    );
    if let Some(s) = &a.string {
        r.check(
            s.len() <= super::MAX_VALUE_LENGTH,
            at,
            format!(
                "string of {} bytes, at most {} allowed",
                s.len(),
                super::MAX_VALUE_LENGTH
            ),
        );
    }
    if let Some(v) = &a.version {
        r.check(
            format::is_semver(v),
            at,
            format!("{v:?} is not a semantic version"),
        );
        r.check(
            v.len() <= super::MAX_VALUE_LENGTH,
            at,
            "version longer than 64 bytes",
        );
    }
}

fn check_capacities(r: &mut Report, path: &str, d: &Device) {
    let multi = d.allow_multiple_allocations == Some(true);
    for (key, cap) in d.capacity.iter().flatten() {
        let at = format!("{path}.capacity[{key}]");
        check_key(r, &at, key);
        let Ok(value) = Quantity::parse(&cap.value.0) else {
            r.fail(&at, format!("{:?} is not a quantity", cap.value.0));
            continue;
        };
        match (&cap.request_policy, multi) {
            (Some(_), false) => r.fail(
                format!("{at}.requestPolicy"),
                "only allowed when allowMultipleAllocations is true",
            ),
            (Some(policy), true) => check_policy(r, &format!("{at}.requestPolicy"), value, policy),
            (None, _) => {}
        }
    }
}

fn quantity(
    r: &mut Report,
    at: &str,
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Option<Quantity> {
    let parsed = Quantity::parse(&q.0);
    if parsed.is_err() {
        r.fail(at, format!("{:?} is not a quantity", q.0));
    }
    parsed.ok()
}

fn check_policy(r: &mut Report, at: &str, capacity: Quantity, p: &CapacityRequestPolicy) {
    let values = p.valid_values.as_deref().unwrap_or(&[]);
    if !values.is_empty() && p.valid_range.is_some() {
        r.fail(at, "validValues and validRange are mutually exclusive");
        return;
    }
    let default = p
        .default
        .as_ref()
        .and_then(|q| quantity(r, &format!("{at}.default"), q));
    if (!values.is_empty() || p.valid_range.is_some()) && p.default.is_none() {
        r.fail(
            format!("{at}.default"),
            "required with validValues or validRange",
        );
    }
    if !values.is_empty() {
        let parsed: Vec<Quantity> = values
            .iter()
            .filter_map(|q| quantity(r, &format!("{at}.validValues"), q))
            .collect();
        r.check(
            parsed.windows(2).all(|w| w[0] < w[1]),
            format!("{at}.validValues"),
            "must be sorted ascending without duplicates",
        );
        r.check(
            parsed.iter().all(|v| *v <= capacity),
            format!("{at}.validValues"),
            "an option exceeds the capacity",
        );
        r.check(
            default.is_none_or(|d| parsed.contains(&d)),
            format!("{at}.default"),
            "not one of validValues",
        );
    }
    if let Some(range) = &p.valid_range {
        check_range(r, at, capacity, default, range);
    }
}

fn check_range(
    r: &mut Report,
    at: &str,
    capacity: Quantity,
    default: Option<Quantity>,
    range: &k8s_openapi::api::resource::v1::CapacityRequestPolicyRange,
) {
    let policy_at = at;
    let at = format!("{at}.validRange");
    let Some(min) = quantity(r, &format!("{at}.min"), &range.min) else {
        return;
    };
    let max = range
        .max
        .as_ref()
        .and_then(|q| quantity(r, &format!("{at}.max"), q));
    let step = range
        .step
        .as_ref()
        .and_then(|q| quantity(r, &format!("{at}.step"), q));
    r.check(
        min <= capacity,
        format!("{at}.min"),
        "larger than the capacity",
    );
    r.check(
        default.is_none_or(|d| d >= min),
        format!("{policy_at}.default"),
        "less than min",
    );
    if let Some(max) = max {
        r.check(min <= max, format!("{at}.max"), "less than min");
        r.check(
            max <= capacity,
            format!("{at}.max"),
            "larger than the capacity",
        );
        r.check(
            default.is_none_or(|d| d <= max),
            format!("{policy_at}.default"),
            "more than max",
        );
    }
    if let Some(step) = step {
        if step.sign() <= 0 {
            r.fail(format!("{at}.step"), "must be greater than zero");
            return;
        }
        r.check(
            min.checked_add(&step).is_ok_and(|above| above <= capacity),
            format!("{at}.step"),
            "one step above min exceeds the capacity",
        );
        let on_step = |v: Quantity| v.is_step_of(&min, &step);
        r.check(
            default.is_none_or(on_step),
            format!("{policy_at}.default"),
            "not a whole number of steps above min",
        );
        r.check(
            max.is_none_or(on_step),
            format!("{at}.max"),
            "not a whole number of steps above min",
        );
    }
}

/// Taints: ≤4, qualified keys, label values, and an effect the release
/// knows (`NoSchedule`, `NoExecute`, and from 1.35 `None`).
fn check_taints(r: &mut Report, path: &str, d: &Device, release: Release) {
    let taints = d.taints.as_deref().unwrap_or(&[]);
    r.check(
        taints.len() <= super::MAX_TAINTS,
        format!("{path}.taints"),
        format!(
            "{} taints, at most {} allowed",
            taints.len(),
            super::MAX_TAINTS
        ),
    );
    for (i, t) in taints.iter().enumerate() {
        let at = format!("{path}.taints[{i}]");
        r.check(
            format::is_label_key(&t.key),
            format!("{at}.key"),
            format!("{:?} is not a qualified key", t.key),
        );
        r.check(
            t.value.as_deref().is_none_or(format::is_label_value),
            format!("{at}.value"),
            "not a label value (≤63 of [A-Za-z0-9_.-])",
        );
        let known = match t.effect.as_str() {
            "NoSchedule" | "NoExecute" => true,
            "None" => release.taint_effect_none(),
            _ => false,
        };
        let allowed = if release.taint_effect_none() {
            "NoSchedule, NoExecute or None"
        } else {
            "NoSchedule or NoExecute (None from 1.35)"
        };
        r.check(
            known,
            format!("{at}.effect"),
            format!("{:?} is not {allowed}", t.effect),
        );
    }
}

fn check_consumption(r: &mut Report, path: &str, d: &Device) {
    let entries = d.consumes_counters.as_deref().unwrap_or(&[]);
    r.check(
        entries.len() <= super::MAX_CONSUMPTIONS_PER_DEVICE,
        format!("{path}.consumesCounters"),
        format!(
            "{} entries, at most {} allowed",
            entries.len(),
            super::MAX_CONSUMPTIONS_PER_DEVICE
        ),
    );
    let mut sets = BTreeSet::new();
    for (i, c) in entries.iter().enumerate() {
        let at = format!("{path}.consumesCounters[{i}]");
        r.check(
            format::is_dns_label(&c.counter_set),
            format!("{at}.counterSet"),
            "not a DNS label",
        );
        r.check(
            sets.insert(c.counter_set.as_str()),
            format!("{at}.counterSet"),
            "duplicate counter set",
        );
        super::check_counters(r, &at, &c.counters);
    }
}
