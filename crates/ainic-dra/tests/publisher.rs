//! The ResourceSlice publisher against the API stand-in, over HTTP with the
//! real `kube` client. The publisher module is compiled in from the binary's
//! source tree (the binary has no library target).

#[allow(dead_code, unused_imports)]
#[path = "../src/node/publisher/mod.rs"]
mod publisher;
mod publisher_cases;
