//! [`Server`]: one running instance (HTTP API + order pipeline) with
//! graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::state::{AppState, BoxError};
use crate::{pipeline, routes};

/// A running instance. Dropping it without [`Server::shutdown`] aborts it,
/// like a killed process.
#[derive(Debug)]
pub struct Server {
    /// Where the API listens.
    addr: SocketAddr,
    /// The instance's shared handles, for tests that look inside.
    state: AppState,
    /// Fires graceful shutdown of the API and the pipeline.
    shutdown: CancellationToken,
    /// The HTTP server task.
    http: Option<JoinHandle<std::io::Result<()>>>,
    /// The pipeline task.
    pipeline: Option<JoinHandle<()>>,
}

impl Server {
    /// Connects, migrates and starts serving on `listener`.
    ///
    /// # Errors
    /// When Redis or the database cannot be reached.
    pub async fn start(config: Config, listener: TcpListener) -> Result<Server, BoxError> {
        let addr = listener.local_addr()?;
        let state = AppState::connect(config).await?;
        let shutdown = CancellationToken::new();
        let pipeline = tokio::spawn(pipeline::run(state.clone(), shutdown.clone()));
        let app = routes::app(state.clone());
        let stop = shutdown.clone();
        let http = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
        tracing::info!(%addr, strategy = %state.config().strategy, consumer = %state.config().consumer_name, "seckill listening");
        Ok(Server {
            addr,
            state,
            shutdown,
            http: Some(http),
            pipeline: Some(pipeline),
        })
    }

    /// Binds `addr` and starts; see [`Server::start`].
    ///
    /// # Errors
    /// When the address is taken, or as [`Server::start`].
    pub async fn bind(config: Config, addr: SocketAddr) -> Result<Server, BoxError> {
        let listener = TcpListener::bind(addr).await?;
        Server::start(config, listener).await
    }

    /// Where the API listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The instance's state.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Stops accepting requests, lets running ones finish, waits for the
    /// purchases still running in their own tasks (a purchase between its
    /// stock step and its order write must complete), stops the pipeline
    /// after its current batch, and closes the database pool. Bounded: the
    /// request timeout plus 10 s, then whatever still runs is aborted.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        let http = self.http.take();
        let pipeline = self.pipeline.take();
        let purchases = self.state.purchases().clone();
        purchases.close();
        let wait = async {
            if let Some(h) = http {
                let _ = h.await;
            }
            purchases.wait().await;
            if let Some(p) = pipeline {
                let _ = p.await;
            }
        };
        let bound = self.state.config().request_timeout + Duration::from_secs(10);
        if tokio::time::timeout(bound, wait).await.is_err() {
            tracing::warn!("shutdown took longer than {bound:?}; aborting");
        }
        self.state.db().close().await;
    }

    /// Runs until `signal` completes, then shuts down gracefully.
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        tracing::info!("shutting down");
        self.shutdown().await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(h) = self.http.take() {
            h.abort();
        }
        if let Some(p) = self.pipeline.take() {
            p.abort();
        }
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
