//! The tests that stop or restart the shared API server. Their own binary, because
//! cargo runs test binaries one at a time: nothing else runs while the API server is
//! down. `stall` is `#[ignore]`d and run one test at a time by `make chaos`.

#[path = "../it/support/mod.rs"]
mod support;

mod restart;
mod stall;
