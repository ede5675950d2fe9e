//! The CEL environment of DRA device selectors: compiling an expression
//! once (syntax, known variables, a static cost bound) and evaluating it
//! against one device.

mod cost;
mod library;
mod values;

use std::sync::{Arc, OnceLock};

use cel::common::types::CelBool;
use cel::{Context, Env, Program};

use crate::model::{AttributeValue, DeviceInfo};
use values::DeviceVar;

/// Longest selector expression accepted, as the API's limit (10 Ki).
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;
/// Largest estimated cost accepted, as the API's `CELSelectorExpressionMaxCost`.
pub const MAX_COST: u64 = 1_000_000;

/// Why an expression cannot be used as a selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The expression is not valid CEL, or uses unknown variables.
    #[error("CEL expression {expression:?} does not compile: {reason}")]
    Invalid {
        /// The expression.
        expression: String,
        /// The parser's or checker's message.
        reason: String,
    },
    /// The expression is too long, too deep or too costly to evaluate.
    #[error("CEL expression {expression:?} exceeds the cost bound: {reason}")]
    TooExpensive {
        /// The expression.
        expression: String,
        /// Which bound it exceeds.
        reason: String,
    },
}

/// A compiled device selector.
#[derive(Debug)]
pub struct Selector {
    expression: String,
    program: Program,
    /// Compiled where `includes()` is declared (1.36+).
    lists: bool,
}

/// The environment; `lists`: with `includes()` (1.36+).
fn environment(lists: bool) -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    static WITH_LISTS: OnceLock<Arc<Env>> = OnceLock::new();
    let build = || {
        let mut env = Env::stdlib();
        library::register(&mut env).expect("DRA CEL library declarations are consistent");
        if lists {
            library::register_includes(&mut env).expect("includes() is declared once");
        }
        Arc::new(env)
    };
    if lists {
        WITH_LISTS.get_or_init(build)
    } else {
        ENV.get_or_init(build)
    }
}

/// Whether the environment declares `name` (a function or namespaced
/// function), as upstream's type checker requires at compile time.
fn is_declared(lists: bool, name: &str) -> bool {
    // Adding a function to a context is refused exactly when the
    // environment already declares one of that name.
    let mut probe = Context::with_env(Arc::clone(environment(lists)));
    probe.add_function(name, || true).is_err()
}

impl Selector {
    /// Compiles `expression` for the DRA environment without
    /// `DRAListTypeAttributes`.
    pub fn compile(expression: &str) -> Result<Selector, CompileError> {
        Selector::compile_for(expression, false)
    }

    /// Compiles `expression` for the DRA environment; `lists`: the
    /// release's environment declares `includes()` (1.36+). Upstream's
    /// allocator compiles for stored expressions, which ignore feature
    /// gates, so `includes()` is there whether `DRAListTypeAttributes` is
    /// on or not.
    pub fn compile_for(expression: &str, lists: bool) -> Result<Selector, CompileError> {
        let too_expensive = |reason: String| CompileError::TooExpensive {
            expression: expression.to_owned(),
            reason,
        };
        if expression.len() > MAX_EXPRESSION_LENGTH {
            return Err(too_expensive(format!(
                "longer than {MAX_EXPRESSION_LENGTH} bytes"
            )));
        }
        cost::check_nesting(expression).map_err(too_expensive)?;
        let invalid = |reason: String| CompileError::Invalid {
            expression: expression.to_owned(),
            reason,
        };
        let program = environment(lists)
            .compile(expression)
            .map_err(|e| invalid(e.to_string().replace('\n', "; ")))?;
        cost::check_identifiers(program.expression(), &|name| is_declared(lists, name))
            .map_err(invalid)?;
        let estimate = cost::estimate(program.expression());
        if estimate > MAX_COST {
            return Err(too_expensive(format!(
                "estimated cost {estimate} is above {MAX_COST}"
            )));
        }
        Ok(Selector {
            expression: expression.to_owned(),
            program,
            lists,
        })
    }

    /// The source text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Evaluates the selector for `device`. A runtime error (a missing
    /// attribute, a result that is not a bool) is returned as `Err`, and so
    /// is a device with an attribute that has no value, whatever the
    /// expression reads: upstream converts every attribute first.
    /// `multi_allocations_passed`: the allocator passes the device's
    /// `allowMultipleAllocations` (an implementation that knows consumable
    /// capacity, whatever its gate); otherwise CEL reads it as false.
    pub fn matches(
        &self,
        device: &DeviceInfo,
        multi_allocations_passed: bool,
    ) -> Result<bool, String> {
        let unset = device.attributes.iter().find_map(|(domain, names)| {
            let (name, _) = names.iter().find(|(_, v)| **v == AttributeValue::Unset)?;
            Some(format!("{domain}/{name}"))
        });
        if let Some(name) = unset {
            return Err(format!("attribute {name}: unsupported attribute value"));
        }
        let mut context = Context::with_env(Arc::clone(environment(self.lists)));
        context.add_variable_as_val(
            "device",
            Box::new(DeviceVar {
                device,
                multi_allocations_passed,
            }),
        );
        let value = cel::Value::resolve_val(self.program.expression(), &context)
            .map_err(|e| e.to_string())?;
        match value.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            None => Err(format!(
                "expression returned {}, not bool",
                value.get_type().name()
            )),
        }
    }
}

#[cfg(test)]
mod tests;
