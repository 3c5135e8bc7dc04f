//! One admission review: what the handlers are given, what their answers mean, and the
//! AdmissionResponse sent back (a verdict, an RFC 6902 patch, or the failure policy's
//! answer when a handler fails).

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::Value as Json;
use starlark::values::Value;
use starlark::values::dict::DictRef;

use super::spec::{FailurePolicy, WebhookSpec};
use crate::control::handlers::{Error, Result};
use crate::script::json::from_starlark;

/// What a validate handler decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub message: Option<String>,
}

/// Runs a review's handlers: implemented over the script's frozen functions by the
/// server, and over plain closures by tests.
pub trait Handlers {
    /// `validate(obj)` or `validate(obj, req)`.
    ///
    /// # Errors
    /// The handler raised, ran over budget or returned a bad shape.
    fn validate(&self, obj: &Json, req: &Json) -> Result<Verdict>;
    /// `mutate(obj)` or `mutate(obj, req)`: the object to store; None keeps it as it is.
    ///
    /// # Errors
    /// The handler raised, ran over budget or returned a bad shape.
    fn mutate(&self, obj: &Json, req: &Json) -> Result<Option<Json>>;
}

/// How a review ended, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Allowed,
    Patched,
    Refused(String),
    /// A handler failed; the failure policy answered. The message is one line.
    Failed(String),
}

/// Decodes what validate returned: `{"allowed": bool, "message": str}` (a dict or an
/// AttrDict; a missing `allowed` means allowed), a bare bool, or None (allowed).
///
/// # Errors
/// Any other value, or fields of the wrong type.
pub fn decode_verdict(v: Value) -> Result<Verdict> {
    if v.is_none() {
        return Ok(Verdict {
            allowed: true,
            message: None,
        });
    }
    if let Some(allowed) = v.unpack_bool() {
        return Ok(Verdict {
            allowed,
            message: None,
        });
    }
    let dict = crate::script::attrdict::AttrDict::dict_of(v)
        .or(Some(v))
        .and_then(DictRef::from_value)
        .ok_or_else(|| {
            Error::BadReturn(format!(
                "validate returned a {}; expected {{\"allowed\": bool, \"message\": str}}, a bool or None",
                v.get_type()
            ))
        })?;
    let allowed = match dict.get_str("allowed") {
        None => true,
        Some(a) => a.unpack_bool().ok_or_else(|| {
            Error::BadReturn(format!(
                "validate returned \"allowed\": {a} ({}); expected True or False",
                a.get_type()
            ))
        })?,
    };
    let message = match dict.get_str("message") {
        None => None,
        Some(m) if m.is_none() => None,
        Some(m) => Some(
            m.unpack_str()
                .ok_or_else(|| {
                    Error::BadReturn(format!(
                        "validate returned \"message\": {m} ({}); expected a string",
                        m.get_type()
                    ))
                })?
                .to_owned(),
        ),
    };
    Ok(Verdict { allowed, message })
}

/// Decodes what mutate returned: the object to store, or None for no change.
///
/// # Errors
/// Anything that is not an object.
pub fn decode_object(v: Value) -> Result<Option<Json>> {
    if v.is_none() {
        return Ok(None);
    }
    match from_starlark(v) {
        Ok(obj @ Json::Object(_)) => Ok(Some(obj)),
        Ok(_) => Err(Error::BadReturn(format!(
            "mutate returned a {}; expected the object (a dict) or None",
            v.get_type()
        ))),
        Err(e) => Err(Error::BadReturn(format!("mutate returned {e}"))),
    }
}

/// Answers one request.
pub fn review(
    spec: &WebhookSpec,
    handlers: &dyn Handlers,
    request: &AdmissionRequest<DynamicObject>,
) -> (AdmissionResponse, Ending) {
    let response = AdmissionResponse::from(request);
    // A deletion carries only the old object; a connect carries neither.
    let object = request.object.as_ref().or(request.old_object.as_ref());
    let (Some(object), Ok(req)) = (object, serde_json::to_value(request)) else {
        return (response, Ending::Allowed);
    };
    let Ok(obj) = serde_json::to_value(object) else {
        return (response, Ending::Allowed);
    };
    let fail = |what: &str, e: &Error| {
        let line = crate::script::run::summary(&e.to_string());
        let message = format!("{}: {what}: {line}", spec.path);
        let answer = AdmissionResponse::from(request);
        match spec.failure_policy {
            FailurePolicy::Fail => (answer.deny(&message), Ending::Failed(message)),
            FailurePolicy::Ignore => {
                let mut answer = answer;
                answer.warnings = Some(vec![format!("{message} (failure_policy=Ignore)")]);
                (answer, Ending::Failed(message))
            }
        }
    };
    if spec.validates {
        match handlers.validate(&obj, &req) {
            Ok(v) if !v.allowed => {
                let message = v
                    .message
                    .unwrap_or_else(|| format!("refused by {}", spec.path));
                return (response.deny(&message), Ending::Refused(message));
            }
            Ok(_) => {}
            Err(e) => return fail("validate", &e),
        }
    }
    let patchable = matches!(request.operation, Operation::Create | Operation::Update);
    if !spec.mutates || !patchable {
        return (response, Ending::Allowed);
    }
    match handlers.mutate(&obj, &req) {
        Ok(None) => (response, Ending::Allowed),
        Ok(Some(changed)) => {
            let patch = json_patch::diff(&obj, &changed);
            if patch.0.is_empty() {
                return (response, Ending::Allowed);
            }
            match response.with_patch(patch) {
                Ok(r) => (r, Ending::Patched),
                Err(e) => fail("mutate", &Error::BadReturn(e.to_string())),
            }
        }
        Err(e) => fail("mutate", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Fake {
        verdict: Result<Verdict>,
        changed: Option<Json>,
    }

    impl Handlers for Fake {
        fn validate(&self, _: &Json, req: &Json) -> Result<Verdict> {
            assert_eq!(req["operation"], "CREATE");
            match &self.verdict {
                Ok(v) => Ok(v.clone()),
                Err(e) => Err(Error::Raised(e.to_string())),
            }
        }
        fn mutate(&self, _: &Json, _: &Json) -> Result<Option<Json>> {
            Ok(self.changed.clone())
        }
    }

    fn spec(policy: FailurePolicy) -> WebhookSpec {
        WebhookSpec {
            path: "/hook".into(),
            port: 9443,
            tls: None,
            timeout: Duration::from_secs(5),
            failure_policy: policy,
            validates: true,
            mutates: true,
            validate_wants_request: true,
            mutate_wants_request: false,
        }
    }

    fn request() -> AdmissionRequest<DynamicObject> {
        let review = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "name": "web", "namespace": "ns", "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "web", "labels": {"a": "1"}}},
                "dryRun": false
            }
        });
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(review).unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn verdicts_and_objects_decode_from_what_upstream_documents() {
        use starlark::environment::{Globals, Module};
        use starlark::eval::Evaluator;
        use starlark::syntax::{AstModule, Dialect};
        use starlark::values::list::ListRef;
        Module::with_temp_heap(|module| {
            let code = "[{'allowed': False, 'message': 'no'}, True, None, {'message': 'x'}, 3, {'allowed': 'yes'}]";
            let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            let v = eval.eval_module(ast, &Globals::standard()).unwrap();
            let items = ListRef::from_value(v).unwrap();
            let verdict = |i: usize| decode_verdict(items[i]).map_err(|e| e.to_string());
            let allowed = |message: Option<&str>| Verdict {
                allowed: true,
                message: message.map(str::to_owned),
            };
            assert_eq!(
                verdict(0),
                Ok(Verdict {
                    allowed: false,
                    message: Some("no".into())
                })
            );
            assert_eq!(verdict(1), Ok(allowed(None)));
            assert_eq!(verdict(2), Ok(allowed(None)));
            assert_eq!(verdict(3), Ok(allowed(Some("x"))));
            assert!(verdict(4).unwrap_err().contains("validate returned a int"));
            assert!(verdict(5).unwrap_err().contains("expected True or False"));
            assert_eq!(decode_object(items[2]).unwrap(), None);
            assert!(decode_object(items[0]).unwrap().is_some());
            let e = decode_object(items[4]).unwrap_err().to_string();
            assert!(e.contains("mutate returned a int"), "{e}");
        });
    }

    #[test]
    fn a_refusal_carries_the_message_and_skips_mutation() {
        let fake = Fake {
            verdict: Ok(Verdict {
                allowed: false,
                message: Some("max 10 replicas".into()),
            }),
            changed: Some(serde_json::json!({})),
        };
        let (r, end) = review(&spec(FailurePolicy::Fail), &fake, &request());
        assert!(!r.allowed);
        assert_eq!(r.result.message, "max 10 replicas");
        assert_eq!(r.uid, "u1");
        assert!(r.patch.is_none());
        assert_eq!(end, Ending::Refused("max 10 replicas".into()));
    }

    #[test]
    fn a_mutation_becomes_a_json_patch() {
        let mut changed = serde_json::to_value(request().object.unwrap()).unwrap();
        changed["metadata"]["labels"]["managed-by"] = "kite".into();
        let fake = Fake {
            verdict: Ok(Verdict {
                allowed: true,
                message: None,
            }),
            changed: Some(changed),
        };
        let (r, end) = review(&spec(FailurePolicy::Fail), &fake, &request());
        assert!(r.allowed);
        assert_eq!(end, Ending::Patched);
        let patch: Json = serde_json::from_slice(&r.patch.unwrap()).unwrap();
        assert_eq!(
            patch,
            serde_json::json!([{"op": "add", "path": "/metadata/labels/managed-by", "value": "kite"}])
        );
    }

    #[test]
    fn a_failing_handler_answers_per_policy() {
        let raise = || Fake {
            verdict: Err(Error::Raised("error: boom\n --> w.star:3:5\n".into())),
            changed: None,
        };
        let (r, end) = review(&spec(FailurePolicy::Fail), &raise(), &request());
        assert!(!r.allowed);
        assert_eq!(r.result.message, "/hook: validate: w.star:3:5: boom");
        assert!(matches!(end, Ending::Failed(_)));
        let (r, _) = review(&spec(FailurePolicy::Ignore), &raise(), &request());
        assert!(r.allowed);
        assert!(r.warnings.unwrap()[0].contains("boom"));
    }
}
