//! Claims turned into allocation plans: each request (or each
//! `firstAvailable` subrequest) with its class, compiled selectors, count,
//! admin access, tolerations and capacity requests; each constraint typed.
//! Validation and feature-gate checks happen here, before any search.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceConstraint, DeviceRequest, DeviceSelector, DeviceSubRequest,
    DeviceToleration, ExactDeviceRequest, ResourceClaim,
};

use crate::cel::Selector;
use crate::error::InputError;
use crate::features::Features;
use crate::model::parse_quantity;
use crate::quantity::Quantity;

/// Most devices one claim's allocation may hold (`AllocationResultsMaxSize`).
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// How many devices a request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    ExactCount(usize),
    All,
}

/// One request or subrequest, ready for the search.
#[derive(Debug, Clone)]
pub(crate) struct RequestSpec {
    pub name: String,
    pub parent: Option<String>,
    pub class: Arc<DeviceClass>,
    pub class_selectors: Vec<Arc<Selector>>,
    pub selectors: Vec<Arc<Selector>>,
    pub mode: Mode,
    pub admin_access: bool,
    pub tolerations: Vec<DeviceToleration>,
    pub capacity: BTreeMap<String, Quantity>,
}

impl RequestSpec {
    /// `req` or `req/sub`, as allocation results name it.
    pub(crate) fn full_name(&self) -> String {
        match &self.parent {
            Some(parent) => format!("{parent}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The name constraints are matched on: the parent request's.
    pub(crate) fn base_name(&self) -> &str {
        self.parent.as_deref().unwrap_or(&self.name)
    }
}

/// A request: exact, or alternatives tried in order.
#[derive(Debug, Clone)]
pub(crate) enum RequestPlan {
    Exact(RequestSpec),
    FirstAvailable(Vec<RequestSpec>),
}

impl RequestPlan {
    /// A `firstAvailable` list of subrequests.
    pub(crate) fn is_prioritized(&self) -> bool {
        matches!(self, RequestPlan::FirstAvailable(_))
    }

    pub(crate) fn alternatives(&self) -> &[RequestSpec] {
        match self {
            RequestPlan::Exact(spec) => std::slice::from_ref(spec),
            RequestPlan::FirstAvailable(subs) => subs,
        }
    }
}

/// A claim-level constraint.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConstraintSpec {
    pub attribute: String,
    pub distinct: bool,
    pub requests: Vec<String>,
}

/// A claim, ready for the search.
#[derive(Debug, Clone)]
pub(crate) struct ClaimPlan {
    pub label: String,
    pub requests: Vec<RequestPlan>,
    pub constraints: Vec<ConstraintSpec>,
}

/// Compiles selectors once per distinct expression.
#[derive(Debug, Default)]
pub(crate) struct SelectorCache {
    compiled: HashMap<String, Arc<Selector>>,
    /// Compiled where `includes()` is declared (1.36+).
    lists: bool,
}

impl SelectorCache {
    /// A cache for a release with (`lists`) or without `includes()`.
    pub(crate) fn new(lists: bool) -> SelectorCache {
        SelectorCache {
            compiled: HashMap::new(),
            lists,
        }
    }

    pub(crate) fn compile_all(
        &mut self,
        selectors: &[DeviceSelector],
        owner: &str,
    ) -> Result<Vec<Arc<Selector>>, InputError> {
        let lists = self.lists;
        selectors
            .iter()
            .enumerate()
            .map(|(index, s)| {
                let Some(cel) = &s.cel else {
                    return Err(InputError::EmptySelector {
                        owner: owner.to_owned(),
                        index,
                    });
                };
                if let Some(found) = self.compiled.get(&cel.expression) {
                    return Ok(Arc::clone(found));
                }
                let compiled = Selector::compile_for(&cel.expression, lists).map_err(|source| {
                    InputError::Selector {
                        owner: owner.to_owned(),
                        index,
                        source,
                    }
                })?;
                let compiled = Arc::new(compiled);
                self.compiled
                    .insert(cel.expression.clone(), Arc::clone(&compiled));
                Ok(compiled)
            })
            .collect()
    }
}

/// `namespace/name` of a claim.
pub(crate) fn claim_label(claim: &ResourceClaim) -> String {
    let name = claim.metadata.name.as_deref().unwrap_or("<unnamed>");
    match claim.metadata.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Builds the plan of `claim`.
pub(crate) fn plan_claim(
    claim: &ResourceClaim,
    classes: &HashMap<String, (Arc<DeviceClass>, Vec<Arc<Selector>>)>,
    cache: &mut SelectorCache,
    features: &Features,
) -> Result<ClaimPlan, InputError> {
    let label = claim_label(claim);
    let devices = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
    let builder = Builder {
        label: &label,
        classes,
        features,
    };
    let requests = (devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten())
    .map(|request| builder.request(request, cache))
    .collect::<Result<Vec<_>, _>>()?;
    if let Some(dup) = duplicate_name(&requests) {
        return Err(InputError::Claim {
            claim: label.clone(),
            reason: format!("request name {dup} is used twice"),
        });
    }
    let constraints = (devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten())
    .enumerate()
    .map(|(i, c)| plan_constraint(&label, features, &requests, i, c))
    .collect::<Result<Vec<_>, _>>()?;
    Ok(ClaimPlan {
        label,
        requests,
        constraints,
    })
}

/// Constraint `i` of the claim `label` over its `requests`.
fn plan_constraint(
    label: &str,
    features: &Features,
    requests: &[RequestPlan],
    i: usize,
    c: &DeviceConstraint,
) -> Result<ConstraintSpec, InputError> {
    let fail = |reason: String| InputError::Claim {
        claim: label.to_owned(),
        reason,
    };
    // distinctAttribute is unknown (an empty constraint) to an
    // implementation that does not know consumable capacity.
    let distinct_known = features.rules().consumable_capacity_known;
    let (attribute, distinct) = match (&c.match_attribute, &c.distinct_attribute) {
        (Some(a), None) => (a.clone(), false),
        (None, Some(a)) if distinct_known => (a.clone(), true),
        (None, None) | (None, Some(_)) => {
            return Err(InputError::ClaimPart {
                claim: label.to_owned(),
                part: format!("constraint #{i}"),
                reason: "empty constraint (unsupported constraint type?)".into(),
            });
        }
        _ => {
            return Err(fail(format!(
                "constraint #{i}: needs exactly one of matchAttribute or distinctAttribute"
            )));
        }
    };
    if !attribute.contains('/') {
        return Err(fail(format!(
            "constraint #{i}: attribute {attribute} must be fully qualified (domain/name)"
        )));
    }
    let named = c.requests.clone().unwrap_or_default();
    if let Some(unknown) = named.iter().find(|r| !known_request_name(requests, r)) {
        return Err(fail(format!("constraint #{i}: unknown request {unknown}")));
    }
    Ok(ConstraintSpec {
        attribute,
        distinct,
        requests: named,
    })
}

/// A request or subrequest name used twice in one claim (or one parent).
fn duplicate_name(requests: &[RequestPlan]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    for plan in requests {
        let spec = &plan.alternatives()[0];
        if !seen.insert(spec.base_name().to_owned()) {
            return Some(spec.base_name().to_owned());
        }
        let mut subs = std::collections::HashSet::new();
        if let RequestPlan::FirstAvailable(alternatives) = plan
            && let Some(dup) = alternatives.iter().find(|s| !subs.insert(s.name.as_str()))
        {
            return Some(dup.full_name());
        }
    }
    None
}

/// Whether `name` is a request (`req`) or subrequest (`req/sub`) of the claim.
fn known_request_name(requests: &[RequestPlan], name: &str) -> bool {
    requests.iter().any(|plan| {
        plan.alternatives()
            .iter()
            .any(|s| s.base_name() == name || s.full_name() == name)
    })
}

struct Builder<'a> {
    label: &'a str,
    classes: &'a HashMap<String, (Arc<DeviceClass>, Vec<Arc<Selector>>)>,
    features: &'a Features,
}

/// The fields shared by exact requests and subrequests.
struct Fields<'a> {
    name: String,
    parent: Option<String>,
    class: &'a str,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin_access: Option<bool>,
    selectors: &'a [DeviceSelector],
    tolerations: &'a [DeviceToleration],
    capacity: Option<&'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
}

impl Builder<'_> {
    /// The plan of one request: exact, or its subrequests in order.
    fn request(
        &self,
        request: &DeviceRequest,
        cache: &mut SelectorCache,
    ) -> Result<RequestPlan, InputError> {
        match (&request.exactly, &request.first_available) {
            (Some(exact), None) => Ok(RequestPlan::Exact(self.exact(
                &request.name,
                exact,
                cache,
            )?)),
            (None, Some(subs)) if !subs.is_empty() => {
                if !self.features.prioritized_list {
                    return Err(InputError::ClaimPart {
                        claim: self.label.to_owned(),
                        part: format!("request {}", request.name),
                        reason: "has subrequests, but the DRAPrioritizedList feature is disabled"
                            .into(),
                    });
                }
                let specs = subs
                    .iter()
                    .map(|s| self.sub(&request.name, s, cache))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(RequestPlan::FirstAvailable(specs))
            }
            _ => Err(InputError::Claim {
                claim: self.label.to_owned(),
                reason: format!(
                    "request {}: needs exactly one of exactly or firstAvailable",
                    request.name
                ),
            }),
        }
    }

    fn exact(
        &self,
        name: &str,
        r: &ExactDeviceRequest,
        cache: &mut SelectorCache,
    ) -> Result<RequestSpec, InputError> {
        self.build(
            Fields {
                name: name.to_owned(),
                parent: None,
                class: &r.device_class_name,
                mode: r.allocation_mode.as_deref(),
                count: r.count,
                admin_access: r.admin_access,
                selectors: r.selectors.as_deref().unwrap_or_default(),
                tolerations: r.tolerations.as_deref().unwrap_or_default(),
                capacity: r.capacity.as_ref().and_then(|c| c.requests.as_ref()),
            },
            cache,
        )
    }

    fn sub(
        &self,
        parent: &str,
        r: &DeviceSubRequest,
        cache: &mut SelectorCache,
    ) -> Result<RequestSpec, InputError> {
        self.build(
            Fields {
                name: r.name.clone(),
                parent: Some(parent.to_owned()),
                class: &r.device_class_name,
                mode: r.allocation_mode.as_deref(),
                count: r.count,
                admin_access: None,
                selectors: r.selectors.as_deref().unwrap_or_default(),
                tolerations: r.tolerations.as_deref().unwrap_or_default(),
                capacity: r.capacity.as_ref().and_then(|c| c.requests.as_ref()),
            },
            cache,
        )
    }

    fn build(&self, f: Fields<'_>, cache: &mut SelectorCache) -> Result<RequestSpec, InputError> {
        let full = f
            .parent
            .as_ref()
            .map_or(f.name.clone(), |p| format!("{p}/{}", f.name));
        // Upstream's words, with the request's full name.
        let fail = |reason: String| InputError::ClaimPart {
            claim: self.label.to_owned(),
            part: format!("request {full}"),
            reason,
        };
        if f.admin_access.is_some() && !self.features.admin_access {
            return Err(fail(
                "admin access is requested, but the feature is disabled".into(),
            ));
        }
        // Only an implementation that knows consumable capacity looks at
        // capacity requests (and refuses them with the gate off).
        let known = self.features.rules().consumable_capacity_known;
        if f.capacity.is_some() && known && !self.features.consumable_capacity {
            // Upstream names a subrequest by its own name here.
            let part = match f.parent {
                Some(_) => format!("subrequest {}", f.name),
                None => format!("request {full}"),
            };
            return Err(InputError::ClaimPart {
                claim: self.label.to_owned(),
                part,
                reason: "has capacity requests, but the DRAConsumableCapacity feature is disabled"
                    .into(),
            });
        }
        if f.class.is_empty() {
            return Err(fail(
                "missing device class name (unsupported request type?)".into(),
            ));
        }
        let (class, class_selectors) =
            self.classes
                .get(f.class)
                .ok_or_else(|| InputError::UnknownClass {
                    claim: self.label.to_owned(),
                    request: full.clone(),
                    class: f.class.to_owned(),
                })?;
        // Any positive count is valid API input; more than a claim can hold
        // fails the claim-limit check of the search, as upstream's does.
        let mode = match (f.mode.unwrap_or("ExactCount"), f.count.unwrap_or(1)) {
            ("ExactCount", n) if n >= 1 => {
                Mode::ExactCount(usize::try_from(n).unwrap_or(usize::MAX))
            }
            ("ExactCount", n) => {
                return Err(fail(format!("count {n} is not positive")));
            }
            ("All", _) => Mode::All,
            (other, _) => return Err(fail(format!("unsupported count mode {other}"))),
        };
        let capacity = f
            .capacity
            .into_iter()
            .flatten()
            .map(|(name, q)| Ok((name.clone(), parse_quantity(&q.0)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()
            .map_err(&fail)?;
        let owner = format!("claim {}, request {full}", self.label);
        Ok(RequestSpec {
            selectors: cache.compile_all(f.selectors, &owner)?,
            name: f.name,
            parent: f.parent,
            class: Arc::clone(class),
            class_selectors: class_selectors.clone(),
            mode,
            admin_access: f.admin_access.unwrap_or(false),
            tolerations: f.tolerations.to_vec(),
            capacity,
        })
    }
}
