//! `k8s.control(...)`: the request a script makes to become a controller, and the
//! builtin that records it and hands it to whoever runs the script.

use starlark::collections::SmallMap;
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneType;
use starlark::values::tuple::UnpackTuple;

use super::option::ControlOption;
use super::spec::{self, ControlSpec};
use crate::k8s::session::SessionKey;
use crate::script::host::{Host, Limits};
use crate::script::permissions::Access;

/// The message that unwinds a script after `k8s.control(...)`; never shown to users
/// unless control() was called where it cannot start a controller.
pub const CONTROL_STARTED: &str =
    "k8s.control() must be called from the script that `kite run` runs";

/// A controller requested by `k8s.control(...)`, and the client it was called on.
#[derive(Debug, Clone)]
pub struct ControlRequest {
    pub spec: ControlSpec,
    pub session: SessionKey,
}

impl ControlRequest {
    /// The request a script handed over (`script::run::Finished::HandedOff`).
    ///
    /// # Errors
    /// Something else was handed over (a bug in the composition), said as such.
    pub fn from_handoff(mut handoff: crate::script::host::Handoff) -> Result<Self, String> {
        handoff.take::<ControlRequest>().ok_or_else(|| {
            "internal error: the script handed over something other than a controller".to_owned()
        })
    }
}

/// Adds `control` to the k8s client values (`crate::k8s::module::extend_methods`).
#[starlark_module]
pub fn control_method(builder: &mut MethodsBuilder) {
    /// Turns the script into a controller: records the options and handlers, then stops
    /// the script; kite runs the reconcile loop once the module is frozen.
    fn control<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let host = Host::of(eval)?;
        host.allow_handoff("k8s.control", Access::K8s)?;
        let (spec, handlers) = spec::parse(&args.items, &kwargs)?;
        within_limits(&spec, &host.limits).map_err(|e| anyhow::anyhow!("k8s.control: {e}"))?;
        let session = crate::k8s::module::session_key(this);
        super::handlers::stash(eval.module(), eval.heap(), &handlers);
        if !host.accepts_handoff() {
            // Called from a handler: the top level is over.
            anyhow::bail!(CONTROL_STARTED);
        }
        if !host.hand_off(Box::new(ControlRequest { spec, session })) {
            anyhow::bail!("k8s.control: a script can start only one controller");
        }
        if super::webhook::called_after(eval) {
            // The top level goes on to register its webhook; both start after it.
            return Ok(NoneType);
        }
        // Unwinds the script; the host sees the request and starts the controller.
        Err(anyhow::anyhow!(CONTROL_STARTED))
    }
}

/// Adds the signature of `k8s.control`, for `kite check`: it takes `**kwargs` to give
/// its own messages, so calls are checked against its keyword list.
pub fn signatures(known: &mut std::collections::BTreeMap<String, crate::script::lint::Signature>) {
    known.insert(
        "k8s.control".to_owned(),
        crate::script::lint::Signature {
            positional: vec![(ControlOption::Kind.name().to_owned(), false)],
            kwargs: true,
            kwarg_names: Some(
                ControlOption::ALL
                    .iter()
                    .map(|o| o.name().to_owned())
                    .collect(),
            ),
            ..Default::default()
        },
    );
}

/// Refuses options beyond the host's limits (the operator's floors for hosted scripts).
fn within_limits(spec: &ControlSpec, limits: &Limits) -> anyhow::Result<()> {
    if spec.workers > limits.max_workers {
        anyhow::bail!(
            "workers = {} is more than {} limit of {}",
            spec.workers,
            limits.source,
            limits.max_workers
        );
    }
    for (option, period) in [
        (ControlOption::Poll, spec.poll),
        (ControlOption::Resync, spec.resync),
        (ControlOption::Backoff, Some(spec.backoff)),
    ] {
        if let Some(p) = period {
            limits.check_period(option.name(), p)?;
        }
    }
    Ok(())
}
