//! `k8s.obj`: builders that return plain Kubernetes manifests as AttrDicts.
//!
//! Every builder takes keyword arguments only (most also take `name` as the first
//! positional one), maps snake_case keywords to the API's camelCase fields, and fills
//! in `apiVersion` and `kind`. An unknown keyword is an error that lists the accepted
//! ones, so a typo never silently drops a field; `None` means "not given". Inputs may be
//! dicts, AttrDicts, lists or other builders' results.

mod admission;
mod args;
mod container_parts;
mod containers;
mod core;
mod crd;
mod dra;
mod extra;
mod gateway;
mod policy;
mod quota;
mod rbac;
mod storage;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_builders;
#[cfg(test)]
pub(crate) mod tests_keywords;
mod workloads;

use std::sync::OnceLock;

use starlark::collections::SmallMap;
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::starlark_module;
use starlark::values::tuple::UnpackTuple;
use starlark::values::{FrozenValue, Heap, Value};

use self::args::{Args, Builder};
use crate::script::json::to_starlark;

/// Every builder: for `kite check` to validate calls, and for the tests to sweep.
const ALL: &[&Builder] = &[
    &workloads::DEPLOYMENT,
    &workloads::STATEFUL_SET,
    &workloads::DAEMON_SET,
    &workloads::JOB,
    &workloads::CRON_JOB,
    &workloads::POD,
    &containers::CONTAINER,
    &containers::CONTAINER_PORT,
    &containers::ENV_VAR,
    &containers::VOLUME,
    &containers::VOLUME_MOUNT,
    &container_parts::ENV_FROM,
    &container_parts::RESOURCE_REQUIREMENTS,
    &container_parts::PROBE,
    &container_parts::SECURITY_CONTEXT,
    &core::SERVICE,
    &core::SERVICE_PORT,
    &core::CONFIG_MAP,
    &core::SECRET,
    &core::NAMESPACE,
    &core::SERVICE_ACCOUNT,
    &rbac::ROLE,
    &rbac::CLUSTER_ROLE,
    &rbac::POLICY_RULE,
    &rbac::ROLE_BINDING,
    &rbac::CLUSTER_ROLE_BINDING,
    &rbac::SUBJECT,
    &extra::INGRESS,
    &extra::INGRESS_RULE,
    &extra::INGRESS_PATH,
    &extra::LEASE,
    &quota::LIMIT_RANGE,
    &quota::LIMIT_RANGE_ITEM,
    &quota::RESOURCE_QUOTA,
    &crd::CRD,
    &policy::POD_DISRUPTION_BUDGET,
    &policy::PDB,
    &storage::PERSISTENT_VOLUME,
    &storage::PERSISTENT_VOLUME_CLAIM,
    &storage::STORAGE_CLASS,
    &dra::DEVICE_CLASS,
    &dra::RESOURCE_CLAIM,
    &dra::RESOURCE_CLAIM_TEMPLATE,
    &dra::RESOURCE_SLICE,
    &gateway::GATEWAY_CLASS,
    &gateway::GATEWAY_BUILDER,
    &gateway::HTTP_ROUTE,
    &gateway::GRPC_ROUTE,
    &gateway::REFERENCE_GRANT,
    &admission::VALIDATING_ADMISSION_POLICY,
    &admission::VAP,
    &admission::VALIDATING_ADMISSION_POLICY_BINDING,
    &admission::MUTATING_ADMISSION_POLICY,
    &admission::MAP,
    &admission::MUTATING_ADMISSION_POLICY_BINDING,
];

/// Each builder's name, the keyword its one positional argument stands for, and its
/// accepted keywords: what `kite check` needs to validate `k8s.obj.*` calls statically.
pub fn signatures()
-> impl Iterator<Item = (&'static str, Option<&'static str>, &'static [&'static str])> {
    ALL.iter().map(|b| (b.name, b.positional, b.keywords))
}

/// The frozen `obj` namespace, to be placed under `k8s`.
///
/// # Panics
/// Never: the namespace is built just above, from a fixed definition.
pub fn obj_namespace() -> FrozenValue {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    let globals = GLOBALS.get_or_init(|| {
        GlobalsBuilder::new()
            .with_namespace("obj", builders)
            .build()
    });
    // Living in a static, the value's heap outlives every module that refers to it.
    globals
        .iter()
        .find(|(name, _)| *name == "obj")
        .map(|(_, v)| v)
        .expect("the obj namespace is defined just above")
}

/// Runs one builder: checks and converts its arguments, then allocates the manifest.
fn call<'v>(
    heap: Heap<'v>,
    b: &Builder,
    args: UnpackTuple<Value<'v>>,
    kwargs: SmallMap<String, Value<'v>>,
) -> anyhow::Result<Value<'v>> {
    let args = Args::parse(b, &args.items, kwargs)?;
    let json = (b.build)(&args)?;
    Ok(to_starlark(heap, &json))
}

/// Declares the Starlark functions; each only forwards to its [`Builder`].
macro_rules! builtins {
    ($($(#[doc = $doc:literal])* $name:ident => $builder:expr;)*) => {
        #[starlark_module]
        fn builders(globals: &mut GlobalsBuilder) {
            $(
                $(#[doc = $doc])*
                fn $name<'v>(
                    #[starlark(args)] args: UnpackTuple<Value<'v>>,
                    #[starlark(kwargs)] kwargs: SmallMap<String, Value<'v>>,
                    heap: Heap<'v>,
                ) -> anyhow::Result<Value<'v>> {
                    call(heap, &$builder, args, kwargs)
                }
            )*
        }
    };
}

builtins! {
    /// An apps/v1 Deployment; `labels` (default `{"app": name}`) select its pods.
    deployment => workloads::DEPLOYMENT;
    /// An apps/v1 StatefulSet; `service_name` defaults to `name`.
    stateful_set => workloads::STATEFUL_SET;
    /// An apps/v1 DaemonSet.
    daemon_set => workloads::DAEMON_SET;
    /// A batch/v1 Job; its pods' `restart_policy` defaults to "Never".
    job => workloads::JOB;
    /// A batch/v1 CronJob running a Job on `schedule`.
    cron_job => workloads::CRON_JOB;
    /// A v1 Pod.
    pod => workloads::POD;
    /// A container for the `containers` of a workload.
    container => containers::CONTAINER;
    /// A container port for `container(ports = [...])`.
    container_port => containers::CONTAINER_PORT;
    /// An environment variable for `container(env = [...])`.
    env_var => containers::ENV_VAR;
    /// A pod volume; without a source it is an emptyDir.
    volume => containers::VOLUME;
    /// A volume mount for `container(volume_mounts = [...])`.
    volume_mount => containers::VOLUME_MOUNT;
    /// An envFrom source for `container(env_from = [...])`: a ConfigMap or a Secret.
    env_from => container_parts::ENV_FROM;
    /// Requests, limits and claims for `container(resources = ...)`.
    resource_requirements => container_parts::RESOURCE_REQUIREMENTS;
    /// A liveness, readiness or startup probe for a container.
    probe => container_parts::PROBE;
    /// A pod or container security context.
    security_context => container_parts::SECURITY_CONTEXT;
    /// A v1 Service; `selector` defaults to `{"app": name}`.
    service => core::SERVICE;
    /// A service port for `service(ports = [...])`.
    service_port => core::SERVICE_PORT;
    /// A v1 ConfigMap.
    config_map => core::CONFIG_MAP;
    /// A v1 Secret; `data` is base64, `string_data` plain text.
    secret => core::SECRET;
    /// A v1 Namespace.
    namespace => core::NAMESPACE;
    /// A v1 ServiceAccount.
    service_account => core::SERVICE_ACCOUNT;
    /// An RBAC Role.
    role => rbac::ROLE;
    /// An RBAC ClusterRole.
    cluster_role => rbac::CLUSTER_ROLE;
    /// A rule for `role(rules = [...])`; `api_groups` defaults to the core group.
    policy_rule => rbac::POLICY_RULE;
    /// An RBAC RoleBinding of `role` (a Role, or a ClusterRole with `role_kind`).
    role_binding => rbac::ROLE_BINDING;
    /// An RBAC ClusterRoleBinding of the ClusterRole `role` (or `role_ref`).
    cluster_role_binding => rbac::CLUSTER_ROLE_BINDING;
    /// A binding subject: a ServiceAccount (the default kind), User or Group.
    subject => rbac::SUBJECT;
    /// A networking.k8s.io/v1 Ingress.
    ingress => extra::INGRESS;
    /// A rule for `ingress(rules = [...])`: a host and its paths.
    ingress_rule => extra::INGRESS_RULE;
    /// A path for `ingress_rule(paths = [...])`, routed to a `backend`.
    ingress_path => extra::INGRESS_PATH;
    /// A coordination.k8s.io/v1 Lease.
    lease => extra::LEASE;
    /// A v1 LimitRange of `limit_range_item`s.
    limit_range => quota::LIMIT_RANGE;
    /// One entry for `limit_range(limits = [...])`: bounds and defaults for a `type`.
    limit_range_item => quota::LIMIT_RANGE_ITEM;
    /// A v1 ResourceQuota of `hard` limits.
    resource_quota => quota::RESOURCE_QUOTA;
    /// An apiextensions.k8s.io/v1 CustomResourceDefinition named `<plural>.<group>`.
    crd => crd::CRD;
    /// A policy/v1 PodDisruptionBudget.
    pod_disruption_budget => policy::POD_DISRUPTION_BUDGET;
    /// Alias of `pod_disruption_budget`.
    pdb => policy::PDB;
    /// A v1 PersistentVolume (cluster-scoped).
    persistent_volume => storage::PERSISTENT_VOLUME;
    /// A v1 PersistentVolumeClaim; `storage` is the requested size.
    persistent_volume_claim => storage::PERSISTENT_VOLUME_CLAIM;
    /// A storage.k8s.io/v1 StorageClass.
    storage_class => storage::STORAGE_CLASS;
    /// A resource.k8s.io/v1 DeviceClass.
    device_class => dra::DEVICE_CLASS;
    /// A resource.k8s.io/v1 ResourceClaim.
    resource_claim => dra::RESOURCE_CLAIM;
    /// A resource.k8s.io/v1 ResourceClaimTemplate.
    resource_claim_template => dra::RESOURCE_CLAIM_TEMPLATE;
    /// A resource.k8s.io/v1 ResourceSlice.
    resource_slice => dra::RESOURCE_SLICE;
    /// A gateway.networking.k8s.io/v1 GatewayClass.
    gateway_class => gateway::GATEWAY_CLASS;
    /// A gateway.networking.k8s.io/v1 Gateway.
    gateway => gateway::GATEWAY_BUILDER;
    /// A gateway.networking.k8s.io/v1 HTTPRoute.
    http_route => gateway::HTTP_ROUTE;
    /// A gateway.networking.k8s.io/v1 GRPCRoute.
    grpc_route => gateway::GRPC_ROUTE;
    /// A gateway.networking.k8s.io/v1 ReferenceGrant.
    reference_grant => gateway::REFERENCE_GRANT;
    /// An admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy.
    validating_admission_policy => admission::VALIDATING_ADMISSION_POLICY;
    /// Alias of `validating_admission_policy`.
    vap => admission::VAP;
    /// An admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding.
    validating_admission_policy_binding => admission::VALIDATING_ADMISSION_POLICY_BINDING;
    /// An admissionregistration.k8s.io/v1alpha1 MutatingAdmissionPolicy.
    mutating_admission_policy => admission::MUTATING_ADMISSION_POLICY;
    /// Alias of `mutating_admission_policy`.
    map => admission::MAP;
    /// An admissionregistration.k8s.io/v1alpha1 MutatingAdmissionPolicyBinding.
    mutating_admission_policy_binding => admission::MUTATING_ADMISSION_POLICY_BINDING;
}
