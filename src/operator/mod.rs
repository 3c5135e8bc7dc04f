//! The meta-operator: `StarlarkController` resources run as in-process controllers.
//!
//! [`manager::run`] watches StarlarkControllers and ClusterStarlarkControllers (both a
//! [`tenant`]); [`reconciler`] validates each script, keeps a StarlarkController within
//! its namespace ([`confinement`]), generates its ServiceAccount and RBAC ([`grants`])
//! within the administrator's [`ceiling`], and runs it ([`hosted`]) with a client that
//! impersonates that account ([`identity`]); a [`decision`] records the outcome.
//! [`registry`] holds the running controllers, [`status`] what is reported. `kite crd`
//! prints the [`resource`] definitions, kept in `crds/starlarkcontroller.yaml`.

pub mod approval;
pub mod authority;
pub mod ceiling;
pub mod confinement;
pub mod decision;
pub mod grants;
pub mod hosted;
pub mod identity;
pub mod manager;
pub mod reconciler;
pub mod registry;
pub mod resource;
pub mod status;
pub mod tenant;

pub use resource::{
    ClusterStarlarkController, ClusterStarlarkControllerSpec, ControlOverrides, Phase,
    ScriptSource, StarlarkController, StarlarkControllerSpec, StarlarkControllerStatus, crd_yaml,
};
