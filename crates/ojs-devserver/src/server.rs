//! The listener: one task accepting connections, one task per connection running hyper's
//! HTTP/1.1 server (keep-alive on). Each connection task can be told to drop its connection
//! mid-request, which is how `drop_after_accept` closes a socket without a response byte.

use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinSet;

use crate::app::App;
use crate::http::handle;

/// Accepts connections until `stop` fires (or its sender is dropped), then closes every
/// connection and returns.
pub(crate) async fn serve(listener: TcpListener, app: Arc<App>, mut stop: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve_connection(stream, app.clone()));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn serve_connection(stream: TcpStream, app: Arc<App>) {
    // Small JSON responses on keep-alive connections: never wait for Nagle.
    let _ = stream.set_nodelay(true);
    let kill = Arc::new(Notify::new());
    let service = {
        let kill = kill.clone();
        service_fn(move |request| handle(app.clone(), kill.clone(), request))
    };
    let mut builder = http1::Builder::new();
    builder.keep_alive(true).header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = connection => {}
        // Dropping the connection future drops the socket and the in-flight handler with it.
        _ = kill.notified() => {}
    }
}
