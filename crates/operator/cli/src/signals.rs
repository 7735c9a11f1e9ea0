//! Waiting for SIGINT or SIGTERM, or for the Gateway to stop by itself.

/// Returns when the process receives SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(error = %error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Returns when the process receives SIGINT or SIGTERM, or when the Gateway stops by itself
/// (it lost its store to another Gateway; [`gatehouse_gateway::RunningGateway::wait`] says so).
pub(crate) async fn until_shutdown(running: &gatehouse_gateway::RunningGateway) {
    tokio::select! {
        () = shutdown_signal() => {}
        () = running.shutdown.cancelled() => {}
    }
}

/// Returns a multi-threaded runtime for a long-running command.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Returns a single-threaded runtime for a command that makes a few requests to a Gateway and
/// exits.
pub(crate) fn client_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
