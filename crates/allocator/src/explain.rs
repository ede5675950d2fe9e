//! Explaining a failed allocation: find the first claim, and in it the
//! first request, that cannot be added to an otherwise successful
//! allocation, and count the devices that pass each filter for it (class,
//! selectors, free, taints, each constraint against the devices already
//! chosen).

use crate::constraint::show;
use crate::context::NodeContext;
use crate::error::{AllocationFailure, PoolIssue, PoolProblem};
use crate::request::{ClaimPlan, Mode, RequestSpec};
use crate::search::{STEP_LIMIT, Search, Stop};
use crate::taints::all_tolerated;

/// Builds the failure for `plans`, whose joint allocation failed.
pub(crate) fn explain(
    ctx: &NodeContext<'_>,
    plans: &[ClaimPlan],
    stop: Option<Stop>,
) -> AllocationFailure {
    let pools = pool_issues(ctx);
    match stop {
        Some(Stop::Fatal(message)) => {
            return failure(None, None, message, pools);
        }
        Some(Stop::InvalidPool(p)) => {
            let pool = &ctx.pools[p];
            let reason = pool.invalid.as_deref().unwrap_or_default();
            return failure(
                None,
                None,
                format!("pool {} is invalid: {reason}", pool.key.1),
                pools,
            );
        }
        Some(Stop::InvalidPools) => {
            // Upstream's words, then which pools.
            let invalid: Vec<String> = pools
                .iter()
                .filter(|p| matches!(p.problem, PoolProblem::Invalid(_)))
                .map(ToString::to_string)
                .collect();
            let message = format!(
                "invalid resource pools were encountered: {}",
                invalid.join("; ")
            );
            return failure(None, None, message, pools);
        }
        Some(Stop::ResultLimit) => {
            return failure(None, None, "allocation max size exceeded".into(), pools);
        }
        Some(Stop::Budget) => {
            return failure(
                None,
                None,
                format!("no allocation found within {STEP_LIMIT} search steps"),
                pools,
            );
        }
        None => {}
    }
    for k in 0..plans.len() {
        let mut prefix = plans[..=k].to_vec();
        for r in 0..plans[k].requests.len() {
            prefix[k].requests = plans[k].requests[..=r].to_vec();
            let mut search = Search::new(ctx, &prefix);
            match search.run() {
                Ok(true) => continue,
                Ok(false) => return describe(ctx, &prefix, k, r),
                Err(stop) => return explain(ctx, plans, Some(stop)),
            }
        }
    }
    failure(
        None,
        None,
        "the claims cannot be allocated together on this node".into(),
        pools,
    )
}

/// The node's pools that are incomplete or invalid, in search order.
fn pool_issues(ctx: &NodeContext<'_>) -> Vec<PoolIssue> {
    ctx.pools
        .iter()
        .filter_map(|p| {
            let problem = match (&p.invalid, p.incomplete) {
                (Some(reason), _) => PoolProblem::Invalid(reason.clone()),
                (None, true) => PoolProblem::Incomplete,
                (None, false) => return None,
            };
            Some(PoolIssue {
                driver: p.key.0.clone(),
                pool: p.key.1.clone(),
                problem,
            })
        })
        .collect()
}

fn failure(
    claim: Option<String>,
    request: Option<String>,
    explanation: String,
    pools: Vec<PoolIssue>,
) -> AllocationFailure {
    AllocationFailure {
        claim,
        request,
        explanation,
        pools,
    }
}

/// Counts for request `r` of claim `k`, after the devices chosen for what
/// comes before it.
fn describe(ctx: &NodeContext<'_>, prefix: &[ClaimPlan], k: usize, r: usize) -> AllocationFailure {
    let mut before = prefix.to_vec();
    before[k].requests.truncate(r);
    let mut search = Search::new(ctx, &before);
    let earlier_ok = matches!(search.run(), Ok(true));
    let plan = &prefix[k].requests[r];
    let parts: Vec<String> = plan
        .alternatives()
        .iter()
        .map(|spec| describe_spec(ctx, &mut search, &prefix[k], k, spec, earlier_ok))
        .collect();
    let mut explanation = format!("claim {}: {}", prefix[k].label, parts.join("; "));
    if ctx.candidates.is_empty() {
        explanation.push_str(&format!(
            "; no ResourceSlice offers devices to node {}",
            ctx.node.name
        ));
    }
    // 1.34 searches what it has of an incomplete pool and aborts at an
    // invalid one; later releases pass over both (silently when something
    // else fits).
    let passed_over = ctx.features.rules().skip_unusable_pools;
    let pools = pool_issues(ctx);
    for issue in &pools {
        let what = match (&issue.problem, passed_over) {
            (PoolProblem::Incomplete, true) => "passed over",
            (PoolProblem::Incomplete, false) => "only its slices that are there were searched",
            (PoolProblem::Invalid(_), true) => "passed over",
            (PoolProblem::Invalid(_), false) => "not reached",
        };
        explanation.push_str(&format!("; {issue} ({what})"));
    }
    let request = plan
        .alternatives()
        .first()
        .map(|s| s.base_name().to_owned());
    failure(Some(prefix[k].label.clone()), request, explanation, pools)
}

fn describe_spec(
    ctx: &NodeContext<'_>,
    search: &mut Search<'_, '_>,
    claim: &ClaimPlan,
    k: usize,
    spec: &RequestSpec,
    earlier_ok: bool,
) -> String {
    let all: Vec<usize> = (0..ctx.candidates.len()).collect();
    let class: Vec<usize> = all
        .into_iter()
        .filter(|&i| search.class_matches(k, spec, i).unwrap_or(false))
        .collect();
    let selected: Vec<usize> = class
        .iter()
        .copied()
        .filter(|&i| search.request_matches(k, spec, i).unwrap_or(false))
        .collect();
    let free: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| {
            (spec.admin_access || !search.in_use(i)) && search.capacity_ok(spec, i).unwrap_or(false)
        })
        .collect();
    let class_name = spec.class.metadata.name.as_deref().unwrap_or("");
    let mut text = format!(
        "request {}: {} devices match class {class_name}, {} also match the request's selectors, {} of those are free",
        spec.full_name(),
        class.len(),
        selected.len(),
        free.len()
    );
    let mut usable = free;
    if ctx.features.device_taints {
        let none = ctx.features.release.taint_effect_none();
        usable.retain(|&i| {
            all_tolerated(&ctx.candidates[i].device().taints, &spec.tolerations, none)
        });
        text.push_str(&format!(", {} tolerate their taints", usable.len()));
    }
    if earlier_ok {
        for (c, constraint) in search.constraints[k].iter().enumerate() {
            let sub = spec.parent.as_ref().map(|_| spec.name.as_str());
            if !constraint.applies_to(spec.base_name(), sub) {
                continue;
            }
            let passing = usable
                .iter()
                .filter(|&&i| constraint.check(i, ctx.candidates[i].device()).is_ok())
                .count();
            let kind = if constraint.spec.distinct {
                "distinctAttribute"
            } else {
                "matchAttribute"
            };
            text.push_str(&format!(
                ", {passing} satisfy {kind} {}",
                constraint.spec.attribute
            ));
            if let Some(anchor) = anchor(ctx, search, claim, k, c) {
                text.push_str(&anchor);
            }
        }
    }
    let needed = match spec.mode {
        Mode::ExactCount(n) => n.to_string(),
        Mode::All => "all of them".to_owned(),
    };
    text.push_str(&format!("; needs {needed}"));
    text
}

/// " with request gpu's device 'gpu-3' (\"pci0000:00\")": the earlier device
/// a matchAttribute constraint is pinned to.
fn anchor(
    ctx: &NodeContext<'_>,
    search: &Search<'_, '_>,
    claim: &ClaimPlan,
    k: usize,
    c: usize,
) -> Option<String> {
    let constraint = &search.constraints[k][c];
    for picked in &search.picked[k] {
        let spec = &claim.requests[picked.request].alternatives()[picked.sub];
        let sub = spec.parent.as_ref().map(|_| spec.name.as_str());
        if !constraint.applies_to(spec.base_name(), sub) {
            continue;
        }
        let device = ctx.candidates[picked.candidate].device();
        let value = device.attribute(&constraint.spec.attribute)?;
        let verb = if constraint.spec.distinct {
            "unlike"
        } else {
            "with"
        };
        return Some(format!(
            " {verb} request {}'s device '{}' ({})",
            spec.full_name(),
            device.name,
            show(value)
        ));
    }
    None
}
