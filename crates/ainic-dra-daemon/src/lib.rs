//! What every long-running ainic-dra process (the node agent and the
//! fabric controller) needs around the API server and the process itself:
//! the API client with its request limit ([`client`]), watches that resume
//! where they stopped ([`follow`]), retry backoff ([`backoff`]), giving
//! freed heap back to the kernel ([`memory`]) and the stop signal
//! ([`shutdown`]). Nothing here knows about NICs or DRA.

pub mod backoff;
pub mod client;
pub mod follow;
pub mod memory;
pub mod shutdown;

pub use backoff::{Backoff, Sleeper, TokioSleeper};
pub use shutdown::shutdown_signal;
