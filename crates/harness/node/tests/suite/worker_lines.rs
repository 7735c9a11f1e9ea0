//! The pipe between a node host and its worker is bounded: a worker that writes a line without
//! end (here a real script process) fails its turn with `WORKER_LINE_TOO_LONG` once the line
//! passes `MAX_WORKER_EVENT_LINE_BYTES`, instead of growing the node host's memory, and the next
//! turn of the session runs on a new worker.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use pretty_assertions::assert_eq;

use crate::suite::hostile_checkpoint::start_with_worker;

/// Writes a worker that answers its first turn with an endless line of `a` and, once that
/// worker is gone, answers turns normally; `flooded` marks that the first turn ran.
fn flooding_worker(dir: &Path) -> PathBuf {
    let flooded = dir.join("flooded");
    let script = format!(
        "#!/bin/sh\nread -r launch\nwhile read -r line; do\n  case \"$line\" in\n    *'\"type\":\"stopBackground\"'*) echo '{{\"type\":\"backgroundStopped\",\"stopped\":0}}' ;;\n    *'\"type\":\"turn\"'*)\n      if [ -e '{flooded}' ]; then echo '{{\"type\":\"done\",\"reply\":\"recovered\"}}'\n      else : > '{flooded}'; tr '\\000' a < /dev/zero; fi ;;\n  esac\ndone\n",
        flooded = flooded.display()
    );
    let path = dir.join("flooding-worker");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_line_without_end_fails_the_turn_and_the_next_turn_gets_a_new_worker() {
    let hostile = start_with_worker(flooding_worker).await;

    let flooded = hostile.turn("s").await;
    assert_eq!(
        (
            flooded["status"].as_str(),
            flooded["error"]["code"].as_str()
        ),
        (Some("failed"), Some("WORKER_LINE_TOO_LONG")),
        "{flooded}"
    );

    let recovered = hostile.turn("s").await;
    assert_eq!(
        (
            recovered["status"].as_str(),
            recovered["error"]["code"].as_str()
        ),
        (Some("completed"), None),
        "{recovered}"
    );
    hostile.stop().await;
}
