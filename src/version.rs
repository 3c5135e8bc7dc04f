//! Build and version information printed by `kite version`.

/// The crate version, as `kite version` prints it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The line `kite version` prints.
pub fn version_line() -> String {
    format!(
        "kite {VERSION} ({} {})",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_names_the_crate_version() {
        assert!(version_line().starts_with(&format!("kite {VERSION} (")));
    }
}
