//! The tests that stop or restart the shared API server. Their own binary, because
//! cargo runs test binaries one at a time: nothing else runs while the API server is
//! down. `stall` is `#[ignore]`d and run one test at a time by `make chaos`.

#![allow(
    clippy::pedantic,
    reason = "the integration tests are scripts of kubectl calls and assertions; pedantic does not make them easier to read (docs/design/lints.md)"
)]

#[path = "../it/support/mod.rs"]
mod support;

mod restart;
mod stall;
