//! `kite run` with a webhook: serve it until SIGTERM or SIGINT, next to the script's
//! controller when it asked for one as well.

use std::collections::HashMap;
use std::sync::Arc;

use starlark::environment::FrozenModule;

use super::WebhookRequest;
use super::frozen::Frozen;
use super::server::{self, Webhook};
use crate::control::handlers::Handlers;
use crate::control::request::ControlRequest;
use crate::control::standalone;
use crate::script::host::{Handoff, Host};

/// Why the webhook (or its controller) could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The script's hand-off was not what it should be (rendered like a script error).
    #[error("{0}")]
    Script(String),
    #[error(transparent)]
    Serve(#[from] server::Error),
    #[error(transparent)]
    Control(#[from] standalone::Error),
    #[error("k8s.webhook: installing signal handlers: {0}")]
    Signals(std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Serves the webhook the script handed over (and runs its controller, if any) until
/// a signal arrives. Blocks the calling thread, which must not be a runtime worker.
///
/// # Errors
/// Bad TLS files, a busy port, or the controller's own start-up errors.
#[expect(
    clippy::implicit_hasher,
    reason = "the positions `script::run` returns"
)]
pub fn run(
    host: Arc<Host>,
    mut handoff: Handoff,
    module: FrozenModule,
    positions: HashMap<String, String>,
    opts: standalone::Options,
) -> Result<()> {
    let Some(WebhookRequest { spec }) = handoff.take::<WebhookRequest>() else {
        return Err(Error::Script(
            "error: internal error: no webhook was handed over".to_owned(),
        ));
    };
    let control = match handoff.take::<ControlRequest>() {
        None => None,
        Some(request) => Some((
            request,
            Handlers::of_script(module.clone(), positions.clone()).map_err(Error::Script)?,
        )),
    };
    let frozen = Frozen::of_script(spec, module, positions, host.clone()).map_err(Error::Script)?;
    let tls = server::acceptor(&frozen.spec)?;
    let webhook = Arc::new(Webhook::new(Arc::new(frozen)));
    let runtime = host.runtime.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (bound, serve) = runtime.block_on(server::bind(
        opts.health_bind,
        webhook.clone(),
        tls,
        async {
            let _ = stop_rx.await;
        },
    ))?;
    println!(
        "k8s.webhook: serving https://{bound}{}",
        webhook.frozen.spec.path
    );
    let serving = runtime.spawn(serve);
    let result = match control {
        // The controller's own loop waits for the signal and shuts down gracefully.
        Some((request, handlers)) => {
            standalone::run(host, request, handlers, opts.clone()).map_err(Error::from)
        }
        None => runtime.block_on(async {
            crate::signal::shutdown_signal()
                .map_err(Error::Signals)?
                .await;
            Ok(())
        }),
    };
    webhook.stop();
    let _ = stop_tx.send(());
    let _ = runtime.block_on(async move { tokio::time::timeout(opts.grace, serving).await });
    result
}
