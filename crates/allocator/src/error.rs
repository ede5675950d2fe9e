//! Errors of the allocator: invalid input (a bad object, an unknown class,
//! a selector that does not compile) versus claims that cannot be
//! allocated, with the explanation of why.

use crate::cel::CompileError;

/// Input the allocator rejects before searching.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A ResourceSlice holds a value that cannot be parsed.
    #[error("resource slice {slice}: {reason}")]
    Slice {
        /// Slice name.
        slice: String,
        /// What is wrong.
        reason: String,
    },
    /// A request names a DeviceClass that does not exist (upstream's words).
    #[error("claim {claim}, request {request}: could not retrieve device class {class}: not found")]
    UnknownClass {
        /// Claim (namespace/name).
        claim: String,
        /// Request name.
        request: String,
        /// The missing class.
        class: String,
    },
    /// A selector of a class or a claim does not compile.
    #[error("{owner}, selector #{index}: {source}")]
    Selector {
        /// `class NAME` or `claim NS/NAME, request R`.
        owner: String,
        /// Position of the selector.
        index: usize,
        /// The compile error.
        source: CompileError,
    },
    /// A selector has no CEL expression (upstream's words).
    #[error("{owner}, selector #{index}: CEL expression empty (unsupported selector type?)")]
    EmptySelector {
        /// `class NAME` or `claim NS/NAME, request R`.
        owner: String,
        /// Position of the selector.
        index: usize,
    },
    /// A part of a claim (`request R`, `subrequest S`, `constraint #I`) is
    /// malformed or uses a feature whose gate is off; upstream's form.
    #[error("claim {claim}, {part}: {reason}")]
    ClaimPart {
        /// Claim (namespace/name).
        claim: String,
        /// The part: `request R`, `subrequest S` or `constraint #I`.
        part: String,
        /// What is wrong.
        reason: String,
    },
    /// A claim is malformed or uses a feature whose gate is off.
    #[error("claim {claim}: {reason}")]
    Claim {
        /// Claim (namespace/name).
        claim: String,
        /// What is wrong.
        reason: String,
    },
    /// The search met something upstream aborts the allocation for: a CEL
    /// runtime error, `All` over a pool being updated, a constraint that
    /// rules out a device `All` must take.
    #[error("{reason}")]
    Aborted {
        /// What upstream would report.
        reason: String,
    },
    /// The search met a pool that is invalid (Kubernetes 1.34: this aborts
    /// the allocation; from 1.35 such a pool is passed over instead, see
    /// [`AllocationFailure::pools`]). Upstream's words, which name the pool
    /// without its driver.
    #[error("pool {pool} is invalid: {reason}")]
    InvalidPool {
        /// The pool's driver.
        driver: String,
        /// The pool's name.
        pool: String,
        /// Why, in upstream's words (`duplicate device name D`).
        reason: String,
    },
    /// A node selector in a slice or device is malformed.
    #[error("node selector: {reason}")]
    NodeSelector {
        /// What is wrong.
        reason: String,
    },
}

/// What is wrong with a pool the node sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolProblem {
    /// Not every slice of the pool's newest generation is there (its
    /// driver is publishing it): 1.34 searches the slices that are there,
    /// later releases pass over the pool; `allocationMode: All` refuses it.
    Incomplete,
    /// Its slices contradict each other (upstream's reason: `duplicate
    /// device name D`, and from 1.35 with partitionable devices `duplicate
    /// counter set name S`, `counter set S not found`, ...): 1.34 aborts
    /// when the search meets it, later releases pass over it and fail the
    /// node when nothing else fits.
    Invalid(String),
}

/// A pool the node sees that cannot be used as published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource pool {driver}/{pool} is {}", match problem {
    PoolProblem::Incomplete => "currently being updated".to_owned(),
    PoolProblem::Invalid(reason) => format!("invalid: {reason}"),
})]
pub struct PoolIssue {
    /// The pool's driver.
    pub driver: String,
    /// The pool's name.
    pub pool: String,
    /// What is wrong.
    pub problem: PoolProblem,
}

/// The claims cannot be allocated on the node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{explanation}")]
pub struct AllocationFailure {
    /// Claim (namespace/name) whose request failed, when one could be singled out.
    pub claim: Option<String>,
    /// The failed request (`req` or `req/sub`), when one could be singled out.
    pub request: Option<String>,
    /// Why, for people: names the request and the counts of devices that
    /// match the class, the selectors, are free, and satisfy the constraints;
    /// or, from 1.35 when invalid pools were passed over, upstream's
    /// `invalid resource pools were encountered` and which ones.
    pub explanation: String,
    /// The node's pools that are incomplete or invalid, by driver and name.
    pub pools: Vec<PoolIssue>,
}

/// Why `allocate` returned no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// Invalid input.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Valid input, but no allocation exists.
    #[error(transparent)]
    Unsatisfiable(#[from] AllocationFailure),
}
