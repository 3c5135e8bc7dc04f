//! How an `ssh` call waits: its work runs on the host's runtime while the script's
//! thread waits, within the call's time budget, and answers the commands a test server
//! of this run passes to the script's `handle_exec` function meanwhile (Starlark
//! values live on this thread only, so the handler cannot run anywhere else).

use std::future::Future;

use starlark::eval::Evaluator;

use super::server::Call;
use super::test_server::{Registry, answer};
use crate::script::budget;
use crate::script::host::Host;

/// Stops the work if the wait ends early, and gives the handler queue back.
struct Cleanup<'a> {
    abort: tokio::task::AbortHandle,
    registry: &'a Registry,
    calls: Option<tokio::sync::mpsc::Receiver<Call>>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.abort.abort();
        if let Some(rx) = self.calls.take() {
            self.registry.put_calls(rx);
        }
    }
}

enum Step<T> {
    Done(Result<T, tokio::task::JoinError>),
    Call(Call),
}

/// Runs `work` to its end, or fails (stopping it) when the call's budget runs out.
///
/// # Errors
/// The budget ran out or the controller is stopping; `name` says which call.
pub fn wait<T: Send + 'static>(
    eval: &mut Evaluator<'_, '_, '_>,
    name: &str,
    work: impl Future<Output = T> + Send + 'static,
) -> anyhow::Result<T> {
    let host = Host::of(eval)?;
    let registry = host.ext::<Registry>();
    let mut task = host.runtime.spawn(work);
    let mut cleanup = Cleanup {
        abort: task.abort_handle(),
        registry: &registry,
        calls: registry.take_calls(),
    };
    loop {
        let calls = &mut cleanup.calls;
        let step = budget::block_on(&host.runtime, async {
            let next_call = async {
                match calls.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = &mut task => Step::Done(done),
                Some(call) = next_call => Step::Call(call),
            }
        })
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        match step {
            Step::Done(Ok(out)) => return Ok(out),
            Step::Done(Err(e)) => anyhow::bail!("{name}: internal error: {e}"),
            Step::Call(call) => {
                let reply = answer(eval, &call);
                let _ = call.reply.send(reply);
            }
        }
    }
}
