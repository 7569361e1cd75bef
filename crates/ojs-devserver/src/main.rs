//! `ojs-devserver`: runs the in-memory OJS backend until SIGTERM or SIGINT.
//!
//! Prints exactly one line, `ojs-devserver listening on http://HOST:PORT`, once it accepts
//! connections, so scripts can wait for it and read the port (with `--port 0`).

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use ojs_devserver::{DevServer, DevServerConfig};

#[derive(Parser, Debug)]
#[command(
    name = "ojs-devserver",
    version,
    about = "In-memory Open Job Spec backend for development and tests"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Start with batch enqueue disabled (manifest says so, the batch endpoint answers 404).
    #[arg(long)]
    no_batch: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let addr = match resolve(&args.host, args.port).await {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("ojs-devserver: cannot resolve --host {}: {e}", args.host);
            return ExitCode::FAILURE;
        }
    };
    let server = match DevServer::start_with(DevServerConfig {
        addr,
        batch_enqueue: !args.no_batch,
    })
    .await
    {
        Ok(server) => server,
        Err(e) => {
            eprintln!("ojs-devserver: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "ojs-devserver listening on {}", server.url());
        let _ = stdout.flush();
    }
    wait_for_signal().await;
    server.shutdown().await;
    ExitCode::SUCCESS
}

async fn resolve(host: &str, port: u16) -> std::io::Result<SocketAddr> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address"))
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
