//! `k8s.port_forward`: a listener on 127.0.0.1 whose every connection is carried to a
//! pod port over the API server's `portforward` subresource, until `stop()` or the end
//! of the run. The script gets a handle (`local_port`, `stop()`), as upstream returns.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::none::NoneType;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::exec::describe;
use super::pods::{self, PodRef};

/// Connections carried at once; more wait for a free slot.
const MAX_CONNECTIONS: usize = 64;
/// How long opening the tunnel for one accepted connection may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a forward could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pod(#[from] pods::Error),
    #[error("port-forward to pod {pod}: the pod is not running (phase {phase:?})")]
    NotRunning { pod: String, phase: String },
    #[error("port-forward to pod {pod} port {port}: {message}")]
    Open {
        pod: String,
        port: u16,
        message: String,
    },
    #[error("listening on 127.0.0.1:{port}: {source}")]
    Listen {
        port: u16,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The stop switches of a run's forwards, flipped when the run ends (the host drops its
/// extensions), so no listener outlives the script.
#[derive(Default)]
pub struct Forwards(Mutex<Vec<Arc<watch::Sender<bool>>>>);

impl Drop for Forwards {
    fn drop(&mut self) {
        if let Ok(all) = self.0.lock() {
            for stop in all.iter() {
                stop.send_replace(true);
            }
        }
    }
}

/// Opens a tunnel to check the API server and kubelet accept it, then listens on
/// 127.0.0.1:`local_port` (0 picks a free port) and carries each connection.
///
/// # Errors
/// A pod that is not running, a tunnel the API server or kubelet refuses, or a local
/// port that cannot be bound.
pub async fn start(pod: PodRef, port: u16, local_port: u16, forwards: &Forwards) -> Result<Handle> {
    if pod.phase != "Running" {
        return Err(Error::NotRunning {
            pod: format!("{}/{}", pod.namespace, pod.name),
            phase: pod.phase.clone(),
        });
    }
    // Upstream waits for the tunnel to be ready before returning; so does this.
    open(&pod, port).await?;
    let listener = TcpListener::bind(("127.0.0.1", local_port))
        .await
        .map_err(|source| Error::Listen {
            port: local_port,
            source,
        })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Listen {
            port: local_port,
            source,
        })?
        .port();
    let (stop, stopped) = watch::channel(false);
    let stop = Arc::new(stop);
    if let Ok(mut all) = forwards.0.lock() {
        all.push(stop.clone());
    }
    tokio::spawn(serve(listener, Arc::new(pod), port, stopped));
    Ok(Handle {
        local_port: bound,
        stop,
    })
}

async fn open(pod: &PodRef, port: u16) -> Result<tokio::io::DuplexStream> {
    let fail = |message: String| Error::Open {
        pod: format!("{}/{}", pod.namespace, pod.name),
        port,
        message,
    };
    let mut pf = tokio::time::timeout(OPEN_TIMEOUT, pod.streaming.portforward(&pod.name, &[port]))
        .await
        .map_err(|_| fail(format!("no answer within {OPEN_TIMEOUT:?}")))?
        .map_err(|e| fail(describe(&e)))?;
    pf.take_stream(port)
        .ok_or_else(|| fail("the tunnel has no stream for the port".into()))
}

async fn serve(
    listener: TcpListener,
    pod: Arc<PodRef>,
    port: u16,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            // A stop, or the switch gone with the run.
            _ = stopped.wait_for(|s| *s) => return,
        };
        let Ok((conn, _)) = accepted else { continue };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (pod, stopped) = (pod.clone(), stopped.clone());
        tokio::spawn(async move {
            let _slot = slot;
            carry(conn, &pod, port, stopped).await;
        });
    }
}

async fn carry(mut conn: TcpStream, pod: &PodRef, port: u16, mut stopped: watch::Receiver<bool>) {
    let mut tunnel = match open(pod, port).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "k8s.port_forward: a connection could not be carried");
            return;
        }
    };
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut conn, &mut tunnel) => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "k8s.port_forward: a connection ended with an error");
            }
        }
        _ = stopped.wait_for(|s| *s) => {}
    }
}

/// What `k8s.port_forward` returns: `h.local_port`, `h["local_port"]`, `h.stop()`.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Handle {
    local_port: u16,
    #[allocative(skip)]
    stop: Arc<watch::Sender<bool>>,
}

starlark::starlark_simple_value!(Handle);

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<port_forward 127.0.0.1:{}>", self.local_port)
    }
}

#[starlark_module]
fn handle_methods(builder: &mut MethodsBuilder) {
    /// Closes the listener and the connections it carries; calling it again does nothing.
    fn stop(#[starlark(this)] this: Value) -> anyhow::Result<NoneType> {
        let h = this
            .downcast_ref::<Handle>()
            .ok_or_else(|| anyhow::anyhow!("stop: not a port_forward handle"))?;
        h.stop.send_replace(true);
        Ok(NoneType)
    }
}

starlark::methods_static!(HANDLE_METHODS = handle_methods);

#[starlark_value(type = "port_forward")]
impl<'v> StarlarkValue<'v> for Handle {
    fn get_methods() -> Option<&'static Methods> {
        Some(HANDLE_METHODS.methods())
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        (attribute == "local_port").then(|| heap.alloc(i32::from(self.local_port)))
    }

    fn dir_attr(&self) -> Vec<String> {
        vec!["local_port".into(), "stop".into()]
    }

    // Upstream documents a dict; `h["local_port"]` works too.
    fn at(&self, index: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        match index.unpack_str() {
            Some(key @ "local_port") => Ok(self.get_attr(key, heap).unwrap_or_default()),
            _ => Err(starlark::Error::new_other(anyhow::anyhow!(
                "port_forward handle has no key {index}"
            ))),
        }
    }
}
