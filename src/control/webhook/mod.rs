//! `k8s.webhook(...)`: an admission webhook served by the script's own handlers.
//!
//! The builtin only records the request (it does not block as upstream's does), so a
//! script may also call `k8s.control(...)` afterwards: `kite run` then serves the
//! webhook and runs the controller in one process. Once the top level is over, the
//! HTTPS server (`server`) answers each review (`review`) by calling the frozen
//! handlers (`frozen`) on blocking threads under the webhook's time budget.

pub mod frozen;
mod later;
mod metrics;
pub mod option;
pub mod review;
pub mod run;
pub mod server;
pub mod spec;

pub use later::called_after;

use starlark::collections::SmallMap;
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneType;
use starlark::values::tuple::UnpackTuple;

use crate::script::host::{Handoff, Host};
use crate::script::permissions::Access;
pub use spec::WebhookSpec;

/// A webhook requested by `k8s.webhook(...)`, handed to whoever runs the script.
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    pub spec: WebhookSpec,
}

impl WebhookRequest {
    /// True when the script asked for a webhook.
    pub fn in_handoff(handoff: &Handoff) -> bool {
        handoff.holds::<WebhookRequest>()
    }
}

/// Adds `webhook` to the k8s client values (`crate::k8s::module::extend_methods`).
#[starlark_module]
pub fn webhook_method(builder: &mut MethodsBuilder) {
    /// Registers an admission webhook: records the path, options and handlers; kite
    /// serves it once the script's top level is over.
    fn webhook<'v>(
        #[starlark(this)] _this: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let host = Host::of(eval)?;
        host.allow("k8s.webhook", Access::Net)?;
        let (spec, handlers) = spec::parse(&args.items, &kwargs)?;
        if !host.accepts_handoff() {
            anyhow::bail!(
                "k8s.webhook: must be called from the top level of the script that `kite run` runs"
            );
        }
        frozen::stash(eval.module(), eval.heap(), &handlers);
        if !host.hand_off(Box::new(WebhookRequest { spec })) {
            anyhow::bail!("k8s.webhook: a script can serve only one webhook");
        }
        Ok(NoneType)
    }
}

/// Adds the signature of `k8s.webhook`, for `kite check`: it takes `**kwargs` to give
/// its own messages, so calls are checked against its keyword list.
pub fn signatures(known: &mut std::collections::BTreeMap<String, crate::script::lint::Signature>) {
    known.insert(
        "k8s.webhook".to_owned(),
        crate::script::lint::Signature {
            positional: vec![(option::WebhookOption::Path.name().to_owned(), false)],
            kwargs: true,
            kwarg_names: Some(
                option::WebhookOption::ALL
                    .iter()
                    .map(|o| o.name().to_owned())
                    .collect(),
            ),
            ..Default::default()
        },
    );
}
