//! The ResourceSlice publisher against the API stand-in, over HTTP with the
//! real `kube` client.

use ainic_dra_node::publisher;
mod publisher_cases;
