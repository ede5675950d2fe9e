//! Allocation behaviour tests.
