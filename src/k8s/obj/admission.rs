//! Admission policy builders: validating_admission_policy (alias vap),
//! validating_admission_policy_binding, mutating_admission_policy (alias map) and
//! mutating_admission_policy_binding. All are cluster-scoped.
//!
//! Nested dicts (match constraints, validations, mutations) may be written with
//! snake_case keys; they are turned to the API's camelCase. CEL expressions are passed
//! through untouched.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, manifest};

const VALIDATING: &str = "admissionregistration.k8s.io/v1";
/// Upstream documents the mutating kinds at v1alpha1.
const MUTATING: &str = "admissionregistration.k8s.io/v1alpha1";

const VAP_KEYWORDS: &[&str] = &[
    "name",
    "failure_policy",
    "match_constraints",
    "match_conditions",
    "validations",
    "audit_annotations",
    "variables",
    "param_kind",
    "labels",
    "annotations",
];

const MAP_KEYWORDS: &[&str] = &[
    "name",
    "failure_policy",
    "match_constraints",
    "match_conditions",
    "mutations",
    "reinvocation_policy",
    "variables",
    "param_kind",
    "labels",
    "annotations",
];

pub(super) const VALIDATING_ADMISSION_POLICY: Builder = Builder {
    name: "validating_admission_policy",
    keywords: VAP_KEYWORDS,
    positional: Some("name"),
    build: validating_policy,
};

pub(super) const VAP: Builder = Builder {
    name: "vap",
    ..VALIDATING_ADMISSION_POLICY
};

pub(super) const VALIDATING_ADMISSION_POLICY_BINDING: Builder = Builder {
    name: "validating_admission_policy_binding",
    keywords: &[
        "name",
        "policy_name",
        "param_ref",
        "match_resources",
        "validation_actions",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: validating_binding,
};

pub(super) const MUTATING_ADMISSION_POLICY: Builder = Builder {
    name: "mutating_admission_policy",
    keywords: MAP_KEYWORDS,
    positional: Some("name"),
    build: mutating_policy,
};

pub(super) const MAP: Builder = Builder {
    name: "map",
    ..MUTATING_ADMISSION_POLICY
};

pub(super) const MUTATING_ADMISSION_POLICY_BINDING: Builder = Builder {
    name: "mutating_admission_policy_binding",
    keywords: &[
        "name",
        "policy_name",
        "param_ref",
        "match_resources",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: mutating_binding,
};

/// The fields both policy kinds share.
fn policy_spec(a: &Args) -> Result<Obj> {
    let mut s = Obj::new();
    let failure = a.str("failure_policy")?;
    if let Some(f) = &failure
        && f != "Fail"
        && f != "Ignore"
    {
        return Err(a.err("failure_policy", "must be \"Fail\" or \"Ignore\""));
    }
    s.put("failurePolicy", failure);
    s.put("matchConstraints", a.api_obj("match_constraints")?);
    s.put("matchConditions", a.api_objs("match_conditions")?);
    s.put("variables", a.api_objs("variables")?);
    s.put("paramKind", a.api_obj("param_kind")?);
    Ok(s)
}

fn validating_policy(a: &Args) -> Result<Json> {
    let mut s = policy_spec(a)?;
    s.put("validations", a.api_objs("validations")?);
    s.put("auditAnnotations", a.api_objs("audit_annotations")?);
    let mut m = manifest(VALIDATING, "ValidatingAdmissionPolicy", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

fn mutating_policy(a: &Args) -> Result<Json> {
    let mut s = policy_spec(a)?;
    s.put("mutations", a.api_objs("mutations")?);
    s.put("reinvocationPolicy", a.str("reinvocation_policy")?);
    let mut m = manifest(MUTATING, "MutatingAdmissionPolicy", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// The fields both binding kinds share; `policy_name` is a name or a policy builder's
/// result.
fn binding_spec(a: &Args) -> Result<Obj> {
    let mut s = Obj::new();
    let policy = a.req("policy_name", a.name_ref("policy_name"))?;
    s.insert("policyName".into(), policy.into());
    s.put("paramRef", a.api_obj("param_ref")?);
    s.put("matchResources", a.api_obj("match_resources")?);
    Ok(s)
}

fn validating_binding(a: &Args) -> Result<Json> {
    let mut s = binding_spec(a)?;
    // The API requires at least one action; upstream's default is to deny.
    let actions = match a.strs("validation_actions")? {
        Some(v) if !v.is_empty() => Json::from(v),
        Some(_) => return Err(a.err("validation_actions", "must not be empty")),
        None => json!(["Deny"]),
    };
    s.insert("validationActions".into(), actions);
    let kind = "ValidatingAdmissionPolicyBinding";
    let mut m = manifest(VALIDATING, kind, a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

fn mutating_binding(a: &Args) -> Result<Json> {
    let s = binding_spec(a)?;
    let kind = "MutatingAdmissionPolicyBinding";
    let mut m = manifest(MUTATING, kind, a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}
