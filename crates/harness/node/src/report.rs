//! `node.report`: the node's own figures, sent to the Gateway over the link.
//!
//! The node host listens on no port, so nothing can scrape it; the Gateway exports what the
//! node reports instead. A session sends the report when it starts, whenever a figure changes,
//! and every [`NODE_REPORT_INTERVAL_MS`] in between.

use std::time::Duration;

use gatehouse_protocol::frame::EventFrame;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::report::NODE_REPORT_INTERVAL_MS;
use gatehouse_protocol::report::NodeReport;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::invoke::Outbound;
use crate::invoke::SendError;

/// Owns the report task of one session and aborts it when dropped.
#[derive(Debug)]
pub(crate) struct Reporter {
    task: JoinHandle<()>,
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts sending `figures` on `outbound`: at once, on every change and every
/// [`NODE_REPORT_INTERVAL_MS`], until the link closes or the returned [`Reporter`] is dropped.
/// A `figures` whose sender is gone (a node without workers) is sent as it is, periodically.
pub(crate) fn start(outbound: Outbound, mut figures: watch::Receiver<NodeReport>) -> Reporter {
    let task = tokio::spawn(async move {
        let interval = Duration::from_millis(NODE_REPORT_INTERVAL_MS);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watching = true;
        loop {
            let report = *figures.borrow_and_update();
            let frame = Frame::Event(EventFrame {
                event: names::NODE_REPORT.to_owned(),
                payload: serde_json::to_value(report).ok(),
                seq: None,
            });
            match outbound.send_frame(&frame).await {
                Ok(()) | Err(SendError::TooLarge { .. }) => {}
                Err(SendError::Closed) => return,
            }
            tokio::select! {
                _ = ticks.tick() => {}
                changed = figures.changed(), if watching => watching = changed.is_ok(),
            }
        }
    });
    Reporter { task }
}
