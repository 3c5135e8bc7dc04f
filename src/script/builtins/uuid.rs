//! `uuid.v4()`: a random UUID, as upstream Starkite's.

use ring::rand::{SecureRandom, SystemRandom};
use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;

/// A random (version 4, RFC 9562) UUID in its hyphenated form.
///
/// # Errors
/// The system's random source failed.
pub fn v4() -> anyhow::Result<String> {
    let mut b = [0u8; 16];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| anyhow::anyhow!("uuid.v4: the system's random source failed"))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[starlark_module]
pub fn uuid_namespace(builder: &mut GlobalsBuilder) {
    /// A random UUID (version 4), e.g. "f47ac10b-58cc-4372-a567-0e02b2c3d479".
    fn v4(eval: &mut starlark::eval::Evaluator) -> anyhow::Result<String> {
        // Random: a top level that drew one is its own controller's.
        crate::script::host::Host::mark_reached_by(eval);
        self::v4()
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn random_version_four() {
        let a = super::v4().unwrap();
        let b = super::v4().unwrap();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        assert_eq!(eval("len(uuid.v4())").unwrap(), "36");
    }
}
