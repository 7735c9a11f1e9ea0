//! [`Dir`]: the directory-handle operations of the node host, against planted links and a racer
//! that keeps swapping components for links to the outside tree.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use gatehouse_fsops::Dir;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::root::Kind;
use gatehouse_fsops::root::Overwrite;
use gatehouse_fsops::test_support::tree;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::suite::support::Fixture;
use crate::suite::support::OUTSIDE_CONTENT;
use crate::suite::support::RESOLVERS;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn remove_unlinks_planted_links_and_never_follows_them() {
    let fx = Fixture::new();
    let outside_file = fx.outside.join("secret.txt");
    fx.file("tree/a/b/file.txt", b"x");
    fx.link("tree/a/to-outside-dir", &fx.outside);
    fx.link("tree/a/b/to-outside-file", &outside_file);
    fx.link("tree/dangling", "/nonexistent/target");
    std::fs::set_permissions(
        fx.root_dir.join("tree/a/b"),
        std::fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    std::fs::set_permissions(
        fx.root_dir.join("tree/a"),
        std::fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    let outside_before = tree(&fx.outside);
    let root = Dir::open(&fx.root_dir).unwrap();
    assert!(root.remove("tree").unwrap());
    assert!(!fx.root_dir.join("tree").exists());
    assert!(!root.remove("tree").unwrap(), "nothing left to remove");
    // A link in the place of the tree is removed itself.
    fx.link("tree", &fx.outside);
    assert!(root.remove("tree").unwrap());
    assert_eq!(tree(&fx.outside), outside_before);
    assert_eq!(
        std::fs::read(&outside_file).unwrap(),
        OUTSIDE_CONTENT.as_bytes()
    );
}

#[test]
fn creation_writes_and_modes_refuse_planted_links() {
    let fx = Fixture::new();
    fx.link("skills", &fx.outside);
    fx.link("file", fx.outside.join("secret.txt"));
    let outside_before = tree(&fx.outside);
    let root = Dir::open(&fx.root_dir).unwrap();
    let code = |error: gatehouse_fsops::FsError| error.code();
    assert_eq!(
        root.ensure_dir("skills", 0o700).map(|_| ()).map_err(code),
        Err(ErrorCode::SymlinkRedirect)
    );
    assert_eq!(
        root.create_dir("skills", 0o700).map(|_| ()).map_err(code),
        Err(ErrorCode::ExistsNoOverwrite)
    );
    assert_eq!(
        root.open_dir("skills").map(|_| ()).map_err(code),
        Err(ErrorCode::SymlinkRedirect)
    );
    assert_eq!(
        root.ensure_dirs(&RelPath::parse("skills/below").unwrap(), 0o700)
            .map(|_| ())
            .map_err(code),
        Err(ErrorCode::SymlinkRedirect)
    );
    assert_eq!(
        root.write_file("file", b"new", 0o600, Overwrite::Deny)
            .map_err(code),
        Err(ErrorCode::ExistsNoOverwrite)
    );
    // Overwriting replaces the link; the file it pointed at keeps its content.
    root.write_file("file", b"new", 0o600, Overwrite::Allow)
        .unwrap();
    assert_eq!(fx.read("file"), b"new");
    assert_eq!(mode(&fx.root_dir.join("file")), 0o600);
    assert_eq!(root.kind("skills").unwrap(), Some(Kind::Symlink));
    assert_eq!(
        root.read_link("skills").unwrap(),
        fx.outside.clone().into_os_string()
    );
    assert_eq!(
        root.read_link("file").map_err(code),
        Err(ErrorCode::InvalidPath)
    );
    for name in ["", ".", "..", "a/b"] {
        assert_eq!(
            root.ensure_dir(name, 0o700).map(|_| ()).map_err(code),
            Err(ErrorCode::InvalidPath),
            "{name:?}"
        );
    }
    // Modes are exact (no umask) and set on handles.
    let created = root.create_dir("made", 0o750).unwrap();
    assert_eq!(mode(&fx.root_dir.join("made")), 0o750);
    created.set_mode(0o500).unwrap();
    assert_eq!(mode(&fx.root_dir.join("made")), 0o500);
    created.symlink("to-etc", "/etc").unwrap();
    assert_eq!(
        std::fs::read_link(fx.root_dir.join("made/to-etc")).unwrap(),
        PathBuf::from("/etc")
    );
    assert_eq!(
        created.symlink("to-etc", "/etc").map_err(code),
        Err(ErrorCode::ExistsNoOverwrite)
    );
    assert_eq!(tree(&fx.outside), outside_before);
}

#[test]
fn root_opens_dir_handles_and_reads_links_without_following() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        fx.dir("d/sub");
        fx.link("d/link", &fx.outside);
        let root = fx.root(resolver);
        let d = root.dir(&RelPath::parse("d").unwrap()).unwrap();
        assert_eq!(d.names().unwrap(), vec!["link", "sub"]);
        assert_eq!(
            root.read_link(&RelPath::parse("d/link").unwrap()).unwrap(),
            fx.outside.clone().into_os_string()
        );
        assert_eq!(
            root.dir(&RelPath::parse("d/link").unwrap())
                .map(|_| ())
                .map_err(|error| error.code()),
            Err(ErrorCode::SymlinkRedirect),
            "{resolver:?}"
        );
    }
}

/// A racer keeps exchanging `work` and `work/sub` with links to the outside tree while the
/// handle operations create, chmod, write, link and remove there: the outside tree keeps every
/// entry, mode and byte.
#[test]
fn swapping_components_for_links_never_touches_the_outside_tree() {
    let fx = Fixture::new();
    std::fs::set_permissions(&fx.outside, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.link("alt", &fx.outside);
    let outside_before = tree(&fx.outside);
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let stop = Arc::clone(&stop);
        let root_dir = fx.root_dir.clone();
        let outside_sub = fx.outside.join("sub");
        std::thread::spawn(move || {
            let dir = std::fs::File::open(&root_dir).unwrap();
            let exchange = |parent: &dyn std::os::fd::AsFd, from: &str, to: &str| {
                rustix::fs::renameat_with(
                    parent,
                    from,
                    parent,
                    to,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .is_ok()
            };
            let mut n_swaps = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                n_swaps += u64::from(exchange(&dir, "work", "alt"));
                // The racer itself never follows a link either: it opens `work` only when it
                // is a directory, and swaps `sub` there for a link to the outside.
                let flags = rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW;
                if let Ok(work) = rustix::fs::openat(&dir, "work", flags, rustix::fs::Mode::empty())
                {
                    let _ = rustix::fs::symlinkat(&outside_sub, &work, "alt-sub");
                    n_swaps += u64::from(exchange(&work, "sub", "alt-sub"));
                }
            }
            n_swaps
        })
    };
    let root = Dir::open(&fx.root_dir).unwrap();
    let (mut n_done, mut n_refused) = (0_u32, 0_u32);
    for round in 0..3000 {
        let outcome = (|| -> gatehouse_fsops::Result<()> {
            let work = root.ensure_dir("work", 0o700)?;
            let sub = work.ensure_dir("sub", 0o700)?;
            sub.write_file(&format!("f{}", round % 3), b"w", 0o400, Overwrite::Allow)?;
            let _ = sub.symlink("l", "/etc");
            sub.set_mode(0o500)?;
            work.set_mode(0o500)?;
            work.set_mode(0o700)?;
            if round % 7 == 0 {
                root.remove("work")?;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => n_done += 1,
            Err(_) => n_refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n_swaps = racer.join().unwrap();
    assert!(n_swaps > 0 && n_done > 0, "{n_swaps} swaps, {n_done} done");
    assert!(n_refused > 0, "the race never made an operation refuse");
    assert_eq!(tree(&fx.outside), outside_before);
}
