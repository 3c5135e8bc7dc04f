//! `base64.encode` and `base64.decode` (standard alphabet), for Secret data.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;

#[starlark_module]
pub fn base64_namespace(builder: &mut GlobalsBuilder) {
    /// Encodes a string's UTF-8 bytes.
    fn encode(#[starlark(require = pos)] text: &str) -> anyhow::Result<String> {
        Ok(STANDARD.encode(text.as_bytes()))
    }

    /// Decodes to a string; fails when the bytes are not valid UTF-8.
    fn decode(#[starlark(require = pos)] text: &str) -> anyhow::Result<String> {
        let bytes = STANDARD
            .decode(text.trim().as_bytes())
            .map_err(|e| anyhow::anyhow!("base64.decode: {e}"))?;
        String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("base64.decode: the decoded bytes are not UTF-8 text"))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    #[test]
    fn round_trip() {
        assert_eq!(eval("base64.encode('héllo')").unwrap(), "\"aMOpbGxv\"");
        assert_eq!(
            eval("base64.decode(base64.encode('héllo')) == 'héllo'").unwrap(),
            "True"
        );
        assert!(
            eval("base64.decode('!!')")
                .unwrap_err()
                .contains("base64.decode")
        );
        assert!(eval("base64.decode('/w==')").unwrap_err().contains("UTF-8"));
    }
}
