//! The options of `k8s.control(...)`, named once for the parser, `kite check`, inference and the operator.

/// Defines a keyword enum from its variants and their keywords, so that the list of
/// variants, its `ALL` and the spellings cannot drift apart: `ALL` (in the order error
/// messages list them), `name` (the keyword as a script writes it) and `parse` (the
/// option a keyword names, if any). `k8s.webhook`'s options use it too.
macro_rules! keyword_enum {
    (
        $(#[$meta:meta])*
        pub enum $enum:ident {
            $($(#[$doc:meta])* $variant:ident = $name:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $enum {
            $($(#[$doc])* $variant,)*
        }

        impl $enum {
            /// Every option, in the order error messages list them.
            pub const ALL: &[$enum] = &[$($enum::$variant,)*];

            /// The keyword, as a script writes it.
            pub const fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => $name,)*
                }
            }

            /// The option `keyword` names, if any.
            pub fn parse(keyword: &str) -> Option<Self> {
                match keyword {
                    $($name => Some($enum::$variant),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $enum {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

pub(crate) use keyword_enum;

keyword_enum! {
    /// A keyword of `k8s.control(...)`.
    pub enum ControlOption {
        /// The kind to watch (also the first positional argument).
        Kind = "kind",
        Reconcile = "reconcile",
        OnCreate = "on_create",
        OnUpdate = "on_update",
        OnDelete = "on_delete",
        /// The handler run before the object goes, while the finalizer holds it.
        Finalize = "finalize",
        /// The finalizer's name.
        Finalizer = "finalizer",
        Namespace = "namespace",
        /// A label selector on the watch.
        Labels = "labels",
        FieldSelector = "field_selector",
        Poll = "poll",
        Resync = "resync",
        HealthPort = "health_port",
        GenerationChanged = "generation_changed",
        WatchOwned = "watch_owned",
        WatchRelated = "watch_related",
        Workers = "workers",
        MaxRetries = "max_retries",
        Backoff = "backoff",
        Predicate = "predicate",
        LeaderElection = "leader_election",
        LeaderElectionId = "leader_election_id",
        LeaderElectionNamespace = "leader_election_namespace",
        /// The holder's name in the leader-election lease.
        Identity = "identity",
    }
}

#[cfg(test)]
mod tests {
    use super::ControlOption;

    #[test]
    fn every_option_has_its_own_keyword_and_is_parsed_back() {
        let mut names: Vec<&str> = ControlOption::ALL.iter().map(|o| o.name()).collect();
        for (option, name) in ControlOption::ALL.iter().zip(&names) {
            assert_eq!(ControlOption::parse(name), Some(*option));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            ControlOption::ALL.len(),
            "a keyword is repeated"
        );
        assert_eq!(ControlOption::parse("Kind"), None);
        assert_eq!(ControlOption::parse("port"), None);
    }

    #[test]
    fn the_order_is_the_one_error_messages_have_always_listed() {
        let names: Vec<&str> = ControlOption::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(
            names.join(", "),
            "kind, reconcile, on_create, on_update, on_delete, finalize, finalizer, namespace, \
             labels, field_selector, poll, resync, health_port, generation_changed, watch_owned, \
             watch_related, workers, max_retries, backoff, predicate, leader_election, \
             leader_election_id, leader_election_namespace, identity"
        );
    }
}
