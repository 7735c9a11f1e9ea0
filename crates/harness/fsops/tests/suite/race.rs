//! A directory swapped for a symlink between check and use, raced in a loop: no escape.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use gatehouse_fsops::commands::file_fetch;
use gatehouse_fsops::commands::file_write;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::suite::support::Fixture;
use crate::suite::support::OUTSIDE_CONTENT;
use crate::suite::support::RESOLVERS;
use crate::suite::support::b64;

/// Enough rounds to see both outcomes many times; the loop ends early once it has.
const MAX_ROUNDS: usize = 200_000;
const ENOUGH_OF_EACH: usize = 200;

#[test]
fn swapping_a_directory_for_a_symlink_never_escapes() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        fx.file("d/secret.txt", b"inside");
        // `alt` is a link to the outside tree, which also holds a `secret.txt`.
        fx.link("alt", &fx.outside);
        let outside_before = fx.outside_snapshot();
        let root = fx.root(resolver);
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = Arc::clone(&stop);
            let root_dir = fx.root_dir.clone();
            std::thread::spawn(move || {
                let dir = std::fs::File::open(&root_dir).unwrap();
                let mut swaps = 0_u64;
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        &dir,
                        "d",
                        &dir,
                        "alt",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut inside_reads, mut refused) = (0, 0);
        for round in 0..MAX_ROUNDS {
            let fetched = file_fetch(
                &root,
                &FileFetchParams {
                    path: fx.wire("d/secret.txt"),
                    ..FileFetchParams::default()
                },
            );
            match fetched {
                Ok(result) => {
                    let bytes = gatehouse_fsops::commands::decode_base64_strict(
                        result.base64.as_deref().unwrap(),
                    )
                    .unwrap();
                    assert_eq!(bytes, b"inside", "{resolver:?}: read escaped the root");
                    inside_reads += 1;
                }
                Err(error) => {
                    assert_eq!(
                        error.code(),
                        ErrorCode::SymlinkRedirect,
                        "{resolver:?}: {error}"
                    );
                    refused += 1;
                }
            }
            let written = file_write(
                &root,
                &FileWriteParams {
                    path: fx.wire(&format!("d/new-{}.txt", round % 4)),
                    content_base64: b64(b"w"),
                    overwrite: true,
                    ..FileWriteParams::default()
                },
            );
            if let Err(error) = written {
                assert_eq!(
                    error.code(),
                    ErrorCode::SymlinkRedirect,
                    "{resolver:?}: {error}"
                );
            }
            if inside_reads >= ENOUGH_OF_EACH && refused >= ENOUGH_OF_EACH {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 0);
        assert!(
            inside_reads > 0 && refused > 0,
            "{resolver:?}: the race did not happen ({inside_reads} reads, {refused} refusals)"
        );
        assert_eq!(
            fx.outside_snapshot(),
            outside_before,
            "{resolver:?}: something was written outside"
        );
        assert_eq!(
            std::fs::read(fx.outside.join("secret.txt")).unwrap(),
            OUTSIDE_CONTENT.as_bytes()
        );
    }
}
