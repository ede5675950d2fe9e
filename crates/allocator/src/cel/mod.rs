//! The CEL environment of DRA device selectors: compiling an expression
//! once (syntax, known variables, a static cost bound) and evaluating it
//! against one device.

mod cost;
mod library;
mod values;

use std::sync::{Arc, OnceLock};

use cel::common::types::CelBool;
use cel::{Context, Env, Program};

use crate::model::DeviceInfo;
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
}

fn environment() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        library::register(&mut env).expect("DRA CEL library declarations are consistent");
        Arc::new(env)
    })
}

/// Whether the environment declares `name` (a function or namespaced
/// function), as upstream's type checker requires at compile time.
fn is_declared(name: &str) -> bool {
    // Adding a function to a context is refused exactly when the
    // environment already declares one of that name.
    let mut probe = Context::with_env(Arc::clone(environment()));
    probe.add_function(name, || true).is_err()
}

impl Selector {
    /// Compiles `expression` for the DRA environment.
    pub fn compile(expression: &str) -> Result<Selector, CompileError> {
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
        let program = environment()
            .compile(expression)
            .map_err(|e| invalid(e.to_string().replace('\n', "; ")))?;
        cost::check_identifiers(program.expression(), &is_declared).map_err(invalid)?;
        let estimate = cost::estimate(program.expression());
        if estimate > MAX_COST {
            return Err(too_expensive(format!(
                "estimated cost {estimate} is above {MAX_COST}"
            )));
        }
        Ok(Selector {
            expression: expression.to_owned(),
            program,
        })
    }

    /// The source text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Evaluates the selector for `device`. A runtime error (a missing
    /// attribute, a result that is not a bool) is returned as `Err`.
    pub fn matches(&self, device: &DeviceInfo, consumable_capacity: bool) -> Result<bool, String> {
        let mut context = Context::with_env(Arc::clone(environment()));
        context.add_variable_as_val(
            "device",
            Box::new(DeviceVar {
                device,
                consumable_capacity,
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
