//! `ainic-dra`: the node agent and command-line tools.
fn main() {}
