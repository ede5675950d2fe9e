//! Cases of the publisher tests, by theme, over shared fixtures.

mod faults;
mod fixtures;
mod netlink;
mod publish;
