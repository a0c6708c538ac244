//! placeholder, filled below
fn main() {}
