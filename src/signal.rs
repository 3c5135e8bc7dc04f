//! Process signals: the first SIGTERM or SIGINT asks for a graceful shutdown, a second
//! one exits at once.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Installs the handlers now (so a signal during start-up is not lost) and returns a
/// future that completes on the first SIGTERM or SIGINT. After that, a second signal
/// exits the process with status 130 without waiting for the grace period.
///
/// # Errors
/// The SIGTERM handler cannot be installed. Must be called within a tokio runtime.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
            tracing::warn!("second signal: exiting at once");
            std::process::exit(130);
        });
    })
}
