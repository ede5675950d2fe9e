//! Issue 30: the driver on real nodes. Each test runs pods on the testbed's
//! real nodes (a real kubelet and containerd per node, `scripts/testbed up
//! --nodes`), with the chart installed by the real helm from the locally
//! built agent image (`scripts/image build`), and checks what the pods'
//! containers see. Clusters are shared by the tests that fit them
//! ([`support`]); each test keeps to its own namespace.

mod support;

mod classic;
mod counters;
mod day2;
mod extended;
mod fabric;
mod health;
mod metadata;
mod netdev;
mod pairing;
mod registration;
mod sharing;
