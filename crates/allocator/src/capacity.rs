//! Consumable capacity (`DRAConsumableCapacity`): what a request consumes
//! from each capacity of a device (its request rounded up by the request
//! policy, the policy default, or the whole capacity), whether that obeys
//! the policy, and whether it fits next to what is already consumed.

use std::collections::BTreeMap;

use crate::model::{Capacity, DeviceInfo, RequestPolicy};
use crate::quantity::{Format, Quantity};

/// Consumed amounts by capacity name as the device publishes it.
pub(crate) type Consumption = BTreeMap<String, Quantity>;

/// The capacity of `device` a request names, accepting the driver-qualified
/// and unqualified spellings for the device's own driver.
fn find<'a>(device: &'a DeviceInfo, requested: &str) -> Option<&'a Capacity> {
    let driver_prefix = format!("{}/", device.driver);
    device
        .capacities
        .iter()
        .find(|c| c.name == requested)
        .or_else(|| {
            let unqualified = requested.strip_prefix(&driver_prefix);
            device.capacities.iter().find(|c| match unqualified {
                Some(id) => c.name == id,
                None => {
                    !requested.contains('/')
                        && c.name.strip_prefix(&driver_prefix) == Some(requested)
                }
            })
        })
}

/// What the request consumes from every capacity of the device; `None` when
/// it requests a capacity the device does not have. `step_format`: a value
/// rounded up to a step is written in the step's format (1.37), else in
/// binary SI (before).
pub(crate) fn consumption(
    device: &DeviceInfo,
    requests: &BTreeMap<String, Quantity>,
    step_format: bool,
) -> Option<Consumption> {
    let mut requested: BTreeMap<&str, Quantity> = BTreeMap::new();
    for (name, amount) in requests {
        requested.insert(find(device, name)?.name.as_str(), *amount);
    }
    let consumed = device
        .capacities
        .iter()
        .map(|c| {
            let amount = match requested.get(c.name.as_str()) {
                Some(r) => round_up(r, c.policy.as_ref(), step_format),
                None => c.policy.as_ref().and_then(|p| p.default).unwrap_or(c.value),
            };
            (c.name.clone(), amount)
        })
        .collect();
    Some(consumed)
}

fn round_up(requested: &Quantity, policy: Option<&RequestPolicy>, step_format: bool) -> Quantity {
    let Some(policy) = policy else {
        return *requested;
    };
    if let Some(range) = &policy.valid_range {
        if *requested < range.min {
            return range.min;
        }
        return match &range.step {
            Some(step) => requested
                .round_up_to_step(&range.min, step)
                .map(|q| {
                    q.with_format(if step_format {
                        step.format()
                    } else {
                        Format::BinarySi
                    })
                })
                .unwrap_or(*requested),
            None => *requested,
        };
    }
    policy
        .valid_values
        .iter()
        .find(|v| requested <= *v)
        .copied()
        .unwrap_or(*requested)
}

fn violates(amount: &Quantity, policy: Option<&RequestPolicy>) -> bool {
    let Some(policy) = policy else { return false };
    if policy.default.as_ref() == Some(amount) {
        return false;
    }
    if let Some(range) = &policy.valid_range {
        if range.max.as_ref().is_some_and(|max| amount > max) {
            return true;
        }
        return range
            .step
            .as_ref()
            .is_some_and(|step| !amount.is_step_of(&range.min, step));
    }
    !policy.valid_values.is_empty() && !policy.valid_values.contains(amount)
}

/// Whether `consumed` obeys the policies and fits beside `allocated`
/// (claims already allocated) and `allocating` (this search's choices).
pub(crate) fn fits(
    device: &DeviceInfo,
    consumed: &Consumption,
    allocated: Option<&Consumption>,
    allocating: Option<&Consumption>,
) -> bool {
    device.capacities.iter().all(|c| {
        let amount = consumed.get(&c.name).copied().unwrap_or(Quantity::ZERO);
        if violates(&amount, c.policy.as_ref()) {
            return false;
        }
        let mut total = amount;
        for earlier in [allocated, allocating].into_iter().flatten() {
            if let Some(more) = earlier.get(&c.name) {
                total = match total.checked_add(more) {
                    Ok(t) => t,
                    Err(_) => return false,
                };
            }
        }
        total <= c.value
    })
}

/// Adds `b` into `a`.
pub(crate) fn add_into(a: &mut Consumption, b: &Consumption) {
    for (name, amount) in b {
        let slot = a.entry(name.clone()).or_insert(Quantity::ZERO);
        *slot = slot.checked_add(amount).unwrap_or(*slot);
    }
}

/// Subtracts `b` from `a`.
pub(crate) fn sub_from(a: &mut Consumption, b: &Consumption) {
    for (name, amount) in b {
        if let Some(slot) = a.get_mut(name) {
            *slot = slot.checked_sub(amount).unwrap_or(*slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ValidRange;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn nic(policy: Option<RequestPolicy>) -> DeviceInfo {
        let mut d = crate::model::test_device("nic");
        d.driver = "ainic.amd.com".into();
        d.capacities = vec![Capacity {
            name: "bandwidth".into(),
            value: q("400G"),
            policy,
        }];
        d
    }

    fn range(min: &str, max: Option<&str>, step: Option<&str>) -> RequestPolicy {
        RequestPolicy {
            default: Some(q(min)),
            valid_values: vec![],
            valid_range: Some(ValidRange {
                min: q(min),
                max: max.map(q),
                step: step.map(q),
            }),
        }
    }

    #[test]
    fn unrequested_capacity_consumes_default_or_everything() {
        let d = nic(None);
        assert_eq!(
            consumption(&d, &BTreeMap::new(), true).unwrap()["bandwidth"],
            q("400G")
        );
        let d = nic(Some(range("10G", None, None)));
        assert_eq!(
            consumption(&d, &BTreeMap::new(), true).unwrap()["bandwidth"],
            q("10G")
        );
    }

    #[test]
    fn requests_round_up_to_the_policy() {
        let d = nic(Some(range("10G", Some("400G"), Some("10G"))));
        let req = BTreeMap::from([("ainic.amd.com/bandwidth".to_owned(), q("25G"))]);
        assert_eq!(consumption(&d, &req, true).unwrap()["bandwidth"], q("30G"));
        let small = BTreeMap::from([("bandwidth".to_owned(), q("1G"))]);
        assert_eq!(
            consumption(&d, &small, true).unwrap()["bandwidth"],
            q("10G")
        );
        let values = RequestPolicy {
            default: None,
            valid_values: vec![q("100G"), q("200G")],
            valid_range: None,
        };
        let d = nic(Some(values));
        assert_eq!(
            consumption(
                &d,
                &BTreeMap::from([("bandwidth".to_owned(), q("150G"))]),
                true
            )
            .unwrap()["bandwidth"],
            q("200G")
        );
    }

    #[test]
    fn unknown_capacity_and_overflowing_requests_do_not_fit() {
        let d = nic(Some(range("10G", Some("400G"), Some("10G"))));
        assert!(
            consumption(
                &d,
                &BTreeMap::from([("queuePairs".to_owned(), q("1"))]),
                true
            )
            .is_none()
        );
        let big = consumption(
            &d,
            &BTreeMap::from([("bandwidth".to_owned(), q("500G"))]),
            true,
        )
        .unwrap();
        assert!(!fits(&d, &big, None, None), "above validRange.max");
        let part = consumption(
            &d,
            &BTreeMap::from([("bandwidth".to_owned(), q("300G"))]),
            true,
        )
        .unwrap();
        assert!(fits(&d, &part, None, None));
        assert!(!fits(&d, &part, Some(&part), None), "600G of 400G");
    }
}
