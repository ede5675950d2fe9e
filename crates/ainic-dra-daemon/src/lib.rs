//! What every long-running ainic-dra process (the node agent and the
//! fabric controller) needs around the API server and the process itself:
//! the API client with its request limit ([`client`]), watches that resume
//! where they stopped ([`follow`]), retry backoff ([`backoff`]), giving
//! freed heap back to the kernel ([`memory`]), the API server's release
//! ([`server_version`]), the stop signal
//! (`shutdown`) and the supervisor of their long-lived tasks
//! ([`supervise`]), and what each binary does at its edge: logging, one-line
//! errors, exit status ([`edge`]). Nothing here knows about NICs.

pub mod backoff;
pub mod client;
pub mod edge;
pub mod follow;
pub mod memory;
pub mod server_version;
mod shutdown;
pub mod supervise;

pub use backoff::{Backoff, Sleeper, TokioSleeper};
pub use shutdown::shutdown_signal;
pub use supervise::{Stopped, Supervisor, TaskFailed, Tasks};
