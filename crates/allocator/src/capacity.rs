//! Consumable capacity (`DRAConsumableCapacity`): what a request consumes
//! from each capacity of a device (its request rounded up by the request
//! policy, the policy default, or the whole capacity), whether that obeys
//! the policy, and whether it fits next to what is already consumed.

use std::collections::BTreeMap;

use crate::model::{Capacity, DeviceInfo, RequestPolicy, ValidRange};
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

/// How a release does capacity arithmetic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arithmetic {
    /// A value rounded up to a step is written in the step's format
    /// (1.37), else in binary SI.
    pub step_format: bool,
    /// `DRAFractionalCapacityRange`: a range with a fractional bound
    /// rounds in milli-units.
    pub fractional: bool,
    /// A request that cannot be represented, or a negative amount, aborts
    /// the allocation (1.37); before, the arithmetic just runs.
    pub aborts: bool,
}

impl Arithmetic {
    /// The arithmetic of `features`' release and gates.
    pub(crate) fn of(features: &crate::Features) -> Arithmetic {
        Arithmetic {
            step_format: features.rules().rounding_keeps_step_format,
            fractional: features.fractional_ranges(),
            aborts: features.release >= crate::Release::V1_37,
        }
    }
}

/// Upstream's words for a request its range arithmetic cannot hold.
const UNREPRESENTABLE: &str =
    "capacity request cannot be represented in the device's range arithmetic";

/// What the request consumes from every capacity of the device: `Ok(None)`
/// when it requests a capacity the device does not have, `Err` when
/// upstream aborts the allocation over it (see [`Arithmetic::aborts`]).
pub(crate) fn consumption(
    device: &DeviceInfo,
    requests: &BTreeMap<String, Quantity>,
    arithmetic: Arithmetic,
) -> Result<Option<Consumption>, String> {
    let mut requested: BTreeMap<&str, Quantity> = BTreeMap::new();
    for (name, amount) in requests {
        let Some(capacity) = find(device, name) else {
            return Ok(None);
        };
        requested.insert(capacity.name.as_str(), *amount);
    }
    let mut consumed = Consumption::new();
    for c in &device.capacities {
        let amount = match requested.get(c.name.as_str()) {
            Some(r) => round_up(r, c.policy.as_ref(), arithmetic)
                .map_err(|e| format!("capacity {:?}: {e}", c.name))?,
            None => c.policy.as_ref().and_then(|p| p.default).unwrap_or(c.value),
        };
        if arithmetic.aborts && amount.sign() < 0 {
            return Err(format!("capacity {:?}: capacity value is negative", c.name));
        }
        consumed.insert(c.name.clone(), amount);
    }
    Ok(Some(consumed))
}

/// Whether a range rounds in milli-units (upstream's `useMilli`): with the
/// gate, every bound exact in milli-units within `int64`, and a step of at
/// least 1m. Integer ranges qualify too; they round the same either way,
/// but a request that is not exact in milli-units aborts then.
fn use_milli(range: &ValidRange, fractional: bool) -> bool {
    let bounds = [Some(&range.min), range.max.as_ref(), range.step.as_ref()];
    fractional
        && bounds.into_iter().flatten().all(|q| milli(q).is_some())
        && range.step.as_ref().and_then(milli).is_none_or(|m| m >= 1)
}

/// `q` in milli-units, when that is exact and fits an `int64`
/// (upstream's `safeMilliValue`).
fn milli(q: &Quantity) -> Option<i128> {
    let m = q.ceil_milli_i128()?;
    let exact = Quantity::from_milli(m).is_some_and(|back| back == *q);
    (exact && i64::try_from(m).is_ok()).then_some(m)
}

/// `q` in whole units, rounded up (`Quantity.Value()`).
fn whole(q: &Quantity) -> i128 {
    q.ceil_i128().unwrap_or(i128::MAX)
}

/// `min + step × n` for the smallest `n` not below `value`, in the
/// units the values are in; `Err` past `int64` when the release aborts.
fn to_step(value: i128, min: i128, step: i128, aborts: bool) -> Result<i128, &'static str> {
    if step <= 0 {
        return Ok(value);
    }
    let added = value - min;
    let n = added / step + i128::from(added % step != 0);
    let result = min + step * n;
    if aborts && min >= 0 && result > i128::from(i64::MAX) {
        return Err("rounding passes the int64 range");
    }
    Ok(result)
}

fn round_up(
    requested: &Quantity,
    policy: Option<&RequestPolicy>,
    arithmetic: Arithmetic,
) -> Result<Quantity, String> {
    let Some(policy) = policy else {
        return Ok(*requested);
    };
    let Some(range) = &policy.valid_range else {
        let value = policy.valid_values.iter().find(|v| requested <= *v);
        return Ok(value.copied().unwrap_or(*requested));
    };
    if *requested < range.min {
        return Ok(range.min);
    }
    let Some(step) = &range.step else {
        return Ok(*requested);
    };
    let unrepresentable = |why: &str| format!("{UNREPRESENTABLE}: request {requested}: {why}");
    if use_milli(range, arithmetic.fractional) {
        let value = milli(requested).ok_or_else(|| unrepresentable("not a milli value"))?;
        let (min, step_m) = (milli(&range.min), milli(step));
        let (Some(min), Some(step_m)) = (min, step_m) else {
            return Ok(*requested);
        };
        let result = to_step(value, min, step_m, true).map_err(unrepresentable)?;
        let result = Quantity::from_milli(result).ok_or_else(|| unrepresentable("too large"))?;
        return Ok(result.with_format(step.format()));
    }
    if arithmetic.aborts && *requested > Quantity::from_int(i64::MAX) {
        return Err(unrepresentable("exceeds MaxInt64"));
    }
    let result = to_step(
        whole(requested),
        whole(&range.min),
        whole(step),
        arithmetic.aborts,
    )
    .map_err(unrepresentable)?;
    let format = if arithmetic.step_format {
        step.format()
    } else {
        Format::BinarySi
    };
    let result = Quantity::from_i128(result).ok_or_else(|| unrepresentable("too large"))?;
    Ok(result.with_format(format))
}

fn violates(amount: &Quantity, policy: Option<&RequestPolicy>, fractional: bool) -> bool {
    let Some(policy) = policy else { return false };
    if policy.default.as_ref() == Some(amount) {
        return false;
    }
    let Some(range) = &policy.valid_range else {
        return !policy.valid_values.is_empty() && !policy.valid_values.contains(amount);
    };
    if range.max.as_ref().is_some_and(|max| amount > max) {
        return true;
    }
    let Some(step) = &range.step else {
        return false;
    };
    let (value, min, step) = if use_milli(range, fractional) {
        let Some(value) = milli(amount) else {
            return true;
        };
        (
            value,
            milli(&range.min).unwrap_or(0),
            milli(step).unwrap_or(1),
        )
    } else {
        (whole(amount), whole(&range.min), whole(step))
    };
    step != 0 && (value - min) % step != 0
}

/// Whether `consumed` obeys the policies and fits beside `allocated`
/// (claims already allocated) and `allocating` (this search's choices).
pub(crate) fn fits(
    device: &DeviceInfo,
    consumed: &Consumption,
    allocated: Option<&Consumption>,
    allocating: Option<&Consumption>,
    arithmetic: Arithmetic,
) -> bool {
    device.capacities.iter().all(|c| {
        let amount = consumed.get(&c.name).copied().unwrap_or(Quantity::ZERO);
        if violates(&amount, c.policy.as_ref(), arithmetic.fractional) {
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

    const NEW: Arithmetic = Arithmetic {
        step_format: true,
        fractional: true,
        aborts: true,
    };

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
            consumption(&d, &BTreeMap::new(), NEW).unwrap().unwrap()["bandwidth"],
            q("400G")
        );
        let d = nic(Some(range("10G", None, None)));
        assert_eq!(
            consumption(&d, &BTreeMap::new(), NEW).unwrap().unwrap()["bandwidth"],
            q("10G")
        );
    }

    #[test]
    fn requests_round_up_to_the_policy() {
        let d = nic(Some(range("10G", Some("400G"), Some("10G"))));
        let req = BTreeMap::from([("ainic.amd.com/bandwidth".to_owned(), q("25G"))]);
        assert_eq!(
            consumption(&d, &req, NEW).unwrap().unwrap()["bandwidth"],
            q("30G")
        );
        let small = BTreeMap::from([("bandwidth".to_owned(), q("1G"))]);
        assert_eq!(
            consumption(&d, &small, NEW).unwrap().unwrap()["bandwidth"],
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
                NEW
            )
            .unwrap()
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
                NEW
            )
            .unwrap()
            .is_none()
        );
        let big = consumption(
            &d,
            &BTreeMap::from([("bandwidth".to_owned(), q("500G"))]),
            NEW,
        )
        .unwrap()
        .unwrap();
        assert!(!fits(&d, &big, None, None, NEW), "above validRange.max");
        let part = consumption(
            &d,
            &BTreeMap::from([("bandwidth".to_owned(), q("300G"))]),
            NEW,
        )
        .unwrap()
        .unwrap();
        assert!(fits(&d, &part, None, None, NEW));
        assert!(!fits(&d, &part, Some(&part), None, NEW), "600G of 400G");
    }

    fn bandwidth(amount: &str) -> BTreeMap<String, Quantity> {
        BTreeMap::from([("bandwidth".to_owned(), q(amount))])
    }

    /// A fractional range rounds in milli-units with
    /// `DRAFractionalCapacityRange`, in whole units without it (and before
    /// 1.37), as `Quantity.Value()` rounds 200m and 100m up to 1.
    #[test]
    fn fractional_ranges_round_in_milli_units_only_with_the_gate() {
        let d = nic(Some(range("200m", Some("1"), Some("100m"))));
        let with = consumption(&d, &bandwidth("250m"), NEW).unwrap().unwrap();
        assert_eq!(with["bandwidth"], q("300m"));
        assert!(fits(&d, &with, None, None, NEW));
        let without = Arithmetic {
            fractional: false,
            ..NEW
        };
        let whole = consumption(&d, &bandwidth("250m"), without)
            .unwrap()
            .unwrap();
        assert_eq!(whole["bandwidth"], q("1"));
        assert_eq!(whole["bandwidth"].format(), Format::DecimalSi, "the step's");
    }

    /// With the gate every range whose bounds are exact in milli-units
    /// rounds in them, integer ones too, so a request that is not exact in
    /// milli-units (or past their int64 range) aborts, as upstream's
    /// `useMilli` and `safeMilliValue` (found by review).
    #[test]
    fn with_the_gate_a_request_not_exact_in_milli_units_aborts() {
        let d = nic(Some(range("0", None, Some("1"))));
        let error = consumption(&d, &bandwidth("1500u"), NEW).unwrap_err();
        assert!(error.contains("not a milli value"), "{error}");
        let d = nic(Some(range("10G", Some("400G"), Some("10G"))));
        assert!(consumption(&d, &bandwidth("10P"), NEW).is_err());
        let whole = Arithmetic {
            fractional: false,
            ..NEW
        };
        assert!(consumption(&d, &bandwidth("10P"), whole).unwrap().is_some());
        // A step finer than 1m, or not exact in milli-units: whole units.
        let d = nic(Some(range("0", None, Some("1500u"))));
        assert_eq!(
            consumption(&d, &bandwidth("3m"), NEW).unwrap().unwrap()["bandwidth"],
            q("1")
        );
    }

    /// 1.37 aborts over a request past int64 or a negative amount; before,
    /// the device just does not fit.
    #[test]
    fn from_1_37_unrepresentable_and_negative_requests_abort() {
        let d = nic(Some(range("2", Some("4"), Some("2"))));
        let error = consumption(&d, &bandwidth("18446744073709551616"), NEW).unwrap_err();
        assert!(error.contains("cannot be represented"), "{error}");
        let error = consumption(&nic(None), &bandwidth("-5"), NEW).unwrap_err();
        assert!(error.contains("negative"), "{error}");
        let old = Arithmetic {
            aborts: false,
            fractional: false,
            step_format: false,
        };
        let big = consumption(&d, &bandwidth("18446744073709551616"), old)
            .unwrap()
            .unwrap();
        assert!(!fits(&d, &big, None, None, old));
    }
}
