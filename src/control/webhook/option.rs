//! The options of `k8s.webhook(...)`, named once for the parser, `kite check` and
//! inference.

use crate::control::option::keyword_enum;

keyword_enum! {
    /// A keyword of `k8s.webhook(...)`: upstream's, then kite's (`timeout`,
    /// `failure_policy`).
    pub enum WebhookOption {
        /// The URL path the webhook serves (also the first positional argument).
        Path = "path",
        Validate = "validate",
        Mutate = "mutate",
        Port = "port",
        TlsCert = "tls_cert",
        TlsKey = "tls_key",
        /// The time both handlers of one review may take together.
        Timeout = "timeout",
        FailurePolicy = "failure_policy",
    }
}

#[cfg(test)]
mod tests {
    use super::WebhookOption;

    #[test]
    fn the_keywords_are_the_ones_error_messages_have_always_listed() {
        let names: Vec<&str> = WebhookOption::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(
            names.join(", "),
            "path, validate, mutate, port, tls_cert, tls_key, timeout, failure_policy"
        );
        for option in WebhookOption::ALL {
            assert_eq!(WebhookOption::parse(option.name()), Some(*option));
        }
        assert_eq!(WebhookOption::parse("prot"), None);
    }
}
