//! The meta-operator: `StarlarkController` resources run as in-process controllers.
//!
//! [`manager::run`] puts its [`assembly`] together, serves its [`probe`], and runs a
//! controller of each of its [`kinds`]: StarlarkControllers and ClusterStarlarkControllers
//! (both a [`tenant`]; how its watches feed it is [`trigger`]); [`reconciler`] decides on each
//! one in steps, from its [`inputs`]: it validates each script, keeps a StarlarkController within
//! its namespace ([`confinement`]), generates its ServiceAccount and RBAC ([`grants`],
//! written only where its watches, [`seen`], show them otherwise)
//! within the administrator's [`ceiling`], and runs it ([`hosted`]) with a client that
//! impersonates that account ([`identity`], [`startup`]); a [`decision`] records the outcome
//! (and its [`events`]).
//! [`registry`] holds the running controllers, [`status`] what is reported, [`quota`]
//! what each namespace's controllers keep in memory, [`turns`] how many scripts each
//! namespace analyses, evaluates and reconciles at once (taken or queued, never waited
//! for in a reconcile). Hosted
//! controllers share informers run as the operator, entered through the [`gate`] (their
//! own account must be allowed to read what they watch); with `--shards auto` the
//! replicas split the controllers between them ([`shard`]).
//!
//! No author gets more than they hold: the admission [`webhook`] (TLS from [`certs`],
//! kept registered by [`registration`]) runs the same [`assessment`] as the reconciler,
//! asks the API server whether the requesting user holds every permission it implies
//! ([`authority`]; a start reuses answers allowed a moment ago, [`reviews`]), and stamps what passes with a signed [`approval`]
//! ([`admission`]); the reconciler runs only approved specs. `kite crd`
//! prints the [`resource`] definitions, kept in `crds/starlarkcontroller.yaml`.

pub mod admission;
pub mod approval;
pub mod assembly;
pub mod assessment;
pub mod authority;
pub mod caches;
pub mod ceiling;
pub mod certs;
pub mod confinement;
pub mod decision;
pub mod events;
pub mod fanout;
pub mod fingerprint;
pub mod gate;
pub mod grants;
pub mod hosted;
pub mod identity;
pub mod inputs;
pub mod kinds;
pub mod logs;
pub mod manager;
pub mod metrics_access;
pub mod modules;
pub mod overrides;
pub mod probe;
pub mod quota;
pub mod reconciler;
pub mod registration;
pub mod registry;
pub mod resource;
pub mod reviews;
pub mod seen;
pub mod shard;
pub mod startup;
pub mod status;
pub mod tenant;
pub mod trigger;
pub mod turns;
pub mod webhook;

pub(crate) use ceiling::DEFAULT_CEILING;
pub use resource::crd_yaml;
