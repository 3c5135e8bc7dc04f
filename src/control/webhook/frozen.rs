//! The webhook's handler functions, frozen with the script's module, and one review's
//! calls of them: on the calling (blocking) thread, both sharing the webhook's budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value as Json;
use starlark::environment::{FrozenModule, Module};
use starlark::values::{Heap, OwnedFrozenValue};

use super::review::{self, Verdict, decode_object, decode_verdict};
use super::spec::{HandlerValues, WebhookSpec};
use crate::control::handlers::{self, Arg, Error};
use crate::script::budget::Cancel;
use crate::script::host::Host;

const VALIDATE: &str = "webhook_validate";
const MUTATE: &str = "webhook_mutate";

/// Keeps the handlers in the module's extra value (beside a controller's), so freezing
/// the module keeps them alive for the server's threads.
pub fn stash<'v>(module: &Module<'v>, heap: Heap<'v>, h: &HandlerValues<'v>) {
    let entries = [(VALIDATE, h.validate), (MUTATE, h.mutate)]
        .into_iter()
        .filter_map(|(name, f)| Some((heap.alloc(name), f?)))
        .collect();
    handlers::stash_entries(module, heap, entries);
}

/// The frozen handlers of one webhook, and the host they run in.
pub struct Frozen {
    pub spec: WebhookSpec,
    validate: Option<OwnedFrozenValue>,
    mutate: Option<OwnedFrozenValue>,
    host: Arc<Host>,
    /// Where each function of the script is defined, for errors about return values.
    positions: HashMap<String, String>,
    /// Keeps the script's frozen heap alive.
    _module: FrozenModule,
}

impl Frozen {
    /// Takes the handlers back out of the module `stash` prepared.
    ///
    /// # Errors
    /// The module holds none of the handlers the spec names (a bug in the composition).
    pub fn of_script(
        spec: WebhookSpec,
        module: FrozenModule,
        positions: HashMap<String, String>,
        host: Arc<Host>,
    ) -> Result<Self, String> {
        let extra = module.owned_extra_value();
        let field = |name: &str| {
            extra
                .as_ref()
                .and_then(|extra| handlers::stashed(extra, name))
        };
        let (validate, mutate) = (field(VALIDATE), field(MUTATE));
        if spec.validates != validate.is_some() || spec.mutates != mutate.is_some() {
            return Err("error: internal error: the webhook's handlers were not kept".to_owned());
        }
        Ok(Self {
            spec,
            validate,
            mutate,
            host,
            positions,
            _module: module,
        })
    }

    /// The handlers for one review: both calls share `budget` from now.
    pub fn review<'a>(&'a self, stop: &'a Cancel) -> Review<'a> {
        Review {
            frozen: self,
            deadline: Instant::now() + self.spec.timeout,
            stop,
        }
    }

    /// Points an error about a return value or a budget at the handler's definition.
    fn locate(&self, f: &OwnedFrozenValue, e: Error) -> Error {
        let shown = f.value().to_str();
        let name = shown
            .split('(')
            .next()
            .unwrap_or_default()
            .rsplit('.')
            .next()
            .unwrap_or_default();
        let Some(at) = self.positions.get(name) else {
            return e;
        };
        match e {
            Error::BadReturn(m) => Error::BadReturn(format!("{at}: in {name}: {m}")),
            Error::OverBudget { budget, at: None } => Error::OverBudget {
                budget,
                at: Some(format!("{at}: in {name}")),
            },
            other => other,
        }
    }
}

/// One review's calls of the handlers.
pub struct Review<'a> {
    frozen: &'a Frozen,
    deadline: Instant,
    stop: &'a Cancel,
}

impl Review<'_> {
    fn call<T>(
        &self,
        f: &OwnedFrozenValue,
        with_request: bool,
        obj: &Json,
        req: &Json,
        decode: impl for<'v> FnOnce(starlark::values::Value<'v>) -> handlers::Result<T>,
    ) -> handlers::Result<T> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::OverBudget {
                budget: crate::duration::format(self.frozen.spec.timeout),
                at: None,
            });
        }
        let args = [Arg::Obj(obj), Arg::Obj(req)];
        let args = if with_request { &args[..] } else { &args[..1] };
        let budget = crate::duration::format(self.frozen.spec.timeout);
        handlers::call(&self.frozen.host, f, args, left, self.stop, decode).map_err(|e| match e {
            // Name the webhook's whole budget, not what was left of it for this call.
            Error::OverBudget { at, .. } => self.frozen.locate(f, Error::OverBudget { budget, at }),
            e => self.frozen.locate(f, e),
        })
    }
}

impl review::Handlers for Review<'_> {
    fn validate(&self, obj: &Json, req: &Json) -> handlers::Result<Verdict> {
        let Some(f) = &self.frozen.validate else {
            return Ok(Verdict {
                allowed: true,
                message: None,
            });
        };
        let wants = self.frozen.spec.validate_wants_request;
        self.call(f, wants, obj, req, decode_verdict)
    }

    fn mutate(&self, obj: &Json, req: &Json) -> handlers::Result<Option<Json>> {
        let Some(f) = &self.frozen.mutate else {
            return Ok(None);
        };
        let wants = self.frozen.spec.mutate_wants_request;
        self.call(f, wants, obj, req, decode_object)
    }
}
