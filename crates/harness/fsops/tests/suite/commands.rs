//! Table tests of the five file commands: every success path and every error code, each run
//! against both resolvers.

use gatehouse_fsops::FsError;
use gatehouse_fsops::Root;
use gatehouse_fsops::commands::dir_list;
use gatehouse_fsops::commands::file_create;
use gatehouse_fsops::commands::file_fetch;
use gatehouse_fsops::commands::file_stat;
use gatehouse_fsops::commands::file_write;
use gatehouse_fsops::commands::sha256_hex;
use gatehouse_protocol::commands::DirListParams;
use gatehouse_protocol::commands::EntryKind;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileStatParams;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::suite::support::Fixture;
use crate::suite::support::OUTSIDE_CONTENT;
use crate::suite::support::RESOLVERS;
use crate::suite::support::b64;

const MIB: usize = 1024 * 1024;

fn code<T: std::fmt::Debug>(result: Result<T, FsError>) -> ErrorCode {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(error) => error.code(),
    }
}

fn fetch(
    fx: &Fixture,
    root: &Root,
    rel: &str,
) -> Result<gatehouse_protocol::commands::FileFetchResult, FsError> {
    file_fetch(
        root,
        &FileFetchParams {
            path: fx.wire(rel),
            ..FileFetchParams::default()
        },
    )
}

fn write(
    fx: &Fixture,
    root: &Root,
    rel: &str,
    content: &[u8],
    overwrite: bool,
) -> Result<gatehouse_protocol::commands::FileWriteResult, FsError> {
    file_write(
        root,
        &FileWriteParams {
            path: fx.wire(rel),
            content_base64: b64(content),
            overwrite,
            ..FileWriteParams::default()
        },
    )
}

#[test]
fn file_fetch_table() {
    type Setup = fn(&Fixture);
    // (name, setup, path relative to the root or absolute when it starts with '/', maxBytes,
    // expected code or None for success)
    /// (name, setup, path, maxBytes, expected code or `None` for success)
    type Row = (
        &'static str,
        Setup,
        &'static str,
        Option<u64>,
        Option<ErrorCode>,
    );
    let rows: Vec<Row> = vec![
        (
            "regular file",
            |fx| fx.file("a.txt", b"hello"),
            "a.txt",
            None,
            None,
        ),
        (
            "nested file",
            |fx| fx.file("d/e/f.md", b"x"),
            "d/e/f.md",
            None,
            None,
        ),
        (
            "dot segments are dropped",
            |fx| fx.file("d/a", b"x"),
            "./d/./a",
            None,
            None,
        ),
        (
            "missing",
            |_| {},
            "nope.txt",
            None,
            Some(ErrorCode::NotFound),
        ),
        (
            "missing parent",
            |_| {},
            "no/such/file",
            None,
            Some(ErrorCode::NotFound),
        ),
        (
            "directory",
            |fx| fx.dir("d"),
            "d",
            None,
            Some(ErrorCode::IsDirectory),
        ),
        (
            "the root itself",
            |_| {},
            "",
            None,
            Some(ErrorCode::IsDirectory),
        ),
        (
            "parent is a file",
            |fx| fx.file("f", b"x"),
            "f/g",
            None,
            Some(ErrorCode::NotDirectory),
        ),
        (
            "fifo is not regular",
            |fx| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    fx.root_dir.join("fifo").as_path(),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o644),
                    0,
                )
                .unwrap();
            },
            "fifo",
            None,
            Some(ErrorCode::ReadError),
        ),
        (
            "over maxBytes",
            |fx| fx.file("big", &[7; 100]),
            "big",
            Some(99),
            Some(ErrorCode::FileTooLarge),
        ),
        (
            "exactly maxBytes",
            |fx| fx.file("big", &[7; 100]),
            "big",
            Some(100),
            None,
        ),
        (
            "default limit is 8 MiB: 8 MiB passes",
            |fx| fx.file("big", &vec![1; 8 * MIB]),
            "big",
            None,
            None,
        ),
        (
            "default limit is 8 MiB: one byte more fails",
            |fx| fx.file("big", &vec![1; 8 * MIB + 1]),
            "big",
            None,
            Some(ErrorCode::FileTooLarge),
        ),
        (
            "maxBytes is clamped to 16 MiB",
            |fx| fx.file("big", &vec![1; 16 * MIB + 1]),
            "big",
            Some(64 * MIB as u64),
            Some(ErrorCode::FileTooLarge),
        ),
        (
            "16 MiB passes with maxBytes",
            |fx| fx.file("big", &vec![1; 16 * MIB]),
            "big",
            Some(16 * MIB as u64),
            None,
        ),
        (
            "symlink at the end",
            |fx| {
                fx.file("real", b"x");
                fx.link("l", "real");
            },
            "l",
            None,
            Some(ErrorCode::SymlinkRedirect),
        ),
        (
            "symlink in the middle",
            |fx| {
                fx.file("d/real", b"x");
                fx.link("l", "d");
            },
            "l/real",
            None,
            Some(ErrorCode::SymlinkRedirect),
        ),
        (
            "symlink to outside",
            |fx| fx.link("l", fx.outside.join("secret.txt")),
            "l",
            None,
            Some(ErrorCode::SymlinkRedirect),
        ),
        (
            "symlink to /",
            |fx| fx.link("slash", "/"),
            "slash/etc/passwd",
            None,
            Some(ErrorCode::SymlinkRedirect),
        ),
        (
            "hard link",
            |fx| {
                fx.file("a", b"x");
                std::fs::hard_link(fx.root_dir.join("a"), fx.root_dir.join("b")).unwrap();
            },
            "b",
            None,
            Some(ErrorCode::HardlinkDenied),
        ),
        (
            "dot-dot",
            |_| {},
            "../outside/secret.txt",
            None,
            Some(ErrorCode::PathTraversal),
        ),
        (
            "dot-dot with a backslash",
            |_| {},
            "d\\..\\..\\x",
            None,
            Some(ErrorCode::PathTraversal),
        ),
        (
            "absolute path outside the root",
            |_| {},
            "/etc/passwd",
            None,
            Some(ErrorCode::PathTraversal),
        ),
        (
            "a sibling sharing the root's prefix",
            |_| {},
            "/PREFIX-sibling/x",
            None,
            Some(ErrorCode::PathTraversal),
        ),
    ];
    for resolver in RESOLVERS {
        for (name, setup, rel, max_bytes, expected) in &rows {
            let fx = Fixture::new();
            setup(&fx);
            let root = fx.root(resolver);
            let path = match rel.strip_prefix("/PREFIX") {
                Some(rest) => format!("{}{rest}", fx.root_dir.display()),
                None if rel.starts_with('/') => (*rel).to_owned(),
                None => fx.wire(rel),
            };
            let result = file_fetch(
                &root,
                &FileFetchParams {
                    path,
                    max_bytes: *max_bytes,
                    ..FileFetchParams::default()
                },
            );
            match (expected, result) {
                (None, Ok(fetched)) => {
                    let bytes = gatehouse_fsops::commands::decode_base64_strict(
                        fetched.base64.as_deref().unwrap(),
                    )
                    .unwrap();
                    assert_eq!(fetched.size, bytes.len() as u64, "{resolver:?} {name}");
                    assert_eq!(
                        fetched.sha256.as_deref(),
                        Some(sha256_hex(&bytes).as_str()),
                        "{resolver:?} {name}"
                    );
                    assert!(
                        fetched.path.starts_with(fx.root_dir.to_str().unwrap()),
                        "{resolver:?} {name}"
                    );
                }
                (Some(code), Err(error)) => {
                    assert_eq!(error.code(), *code, "{resolver:?} {name}: {error}")
                }
                (expected, result) => {
                    panic!("{resolver:?} {name}: expected {expected:?}, got {result:?}")
                }
            }
        }
    }
}

#[test]
fn file_fetch_reports_content_hash_mime_and_canonical_path() {
    let fx = Fixture::new();
    fx.file("notes/a.md", b"# hi\n");
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    let fetched = file_fetch(
        &root,
        &FileFetchParams {
            path: format!("{}//notes/./a.md", fx.root_dir.display()),
            ..FileFetchParams::default()
        },
    )
    .unwrap();
    assert_eq!(
        fetched,
        gatehouse_protocol::commands::FileFetchResult {
            ok: true,
            path: fx.wire("notes/a.md"),
            size: 5,
            mime_type: "text/markdown".into(),
            base64: Some(b64(b"# hi\n")),
            // sha256 of "# hi\n"
            sha256: Some(sha256_hex(b"# hi\n")),
        }
    );
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn file_fetch_preflight_reports_the_size_without_content() {
    let fx = Fixture::new();
    fx.file("a", &[0; 1234]);
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    let fetched = file_fetch(
        &root,
        &FileFetchParams {
            path: fx.wire("a"),
            preflight_only: Some(true),
            ..FileFetchParams::default()
        },
    )
    .unwrap();
    assert_eq!(
        (fetched.size, fetched.base64, fetched.sha256),
        (1234, None, None)
    );
    // Preflight still applies the limit.
    let refused = file_fetch(
        &root,
        &FileFetchParams {
            path: fx.wire("a"),
            preflight_only: Some(true),
            max_bytes: Some(10),
            ..FileFetchParams::default()
        },
    );
    assert_eq!(code(refused), ErrorCode::FileTooLarge);
}

#[test]
fn invalid_wire_paths_are_refused() {
    let fx = Fixture::new();
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    for (path, expected) in [
        ("", ErrorCode::InvalidPath),
        ("relative/a.txt", ErrorCode::InvalidPath),
        ("/x\0y", ErrorCode::InvalidPath),
    ] {
        let result = file_fetch(
            &root,
            &FileFetchParams {
                path: path.into(),
                ..FileFetchParams::default()
            },
        );
        assert_eq!(code(result), expected, "{path:?}");
    }
    let nul_inside = format!("{}/a\0b", fx.root_dir.display());
    assert_eq!(
        code(file_fetch(
            &root,
            &FileFetchParams {
                path: nul_inside,
                ..FileFetchParams::default()
            }
        )),
        ErrorCode::InvalidPath
    );
}

#[test]
fn file_write_table() {
    type Setup = fn(&Fixture);
    struct Row {
        name: &'static str,
        setup: Setup,
        rel: &'static str,
        overwrite: bool,
        create_parents: bool,
        content_base64: Option<&'static str>,
        expected_sha256: Option<&'static str>,
        expected: Option<ErrorCode>,
    }
    let row = |name, setup: Setup, rel, expected| Row {
        name,
        setup,
        rel,
        overwrite: false,
        create_parents: false,
        content_base64: None,
        expected_sha256: None,
        expected,
    };
    let rows = vec![
        row("new file", |_| {}, "a.txt", None),
        Row {
            overwrite: true,
            ..row(
                "overwrite allowed",
                |fx| fx.file("a.txt", b"old"),
                "a.txt",
                None,
            )
        },
        row(
            "exists, no overwrite",
            |fx| fx.file("a.txt", b"old"),
            "a.txt",
            Some(ErrorCode::ExistsNoOverwrite),
        ),
        row(
            "missing parent",
            |_| {},
            "d/e/a.txt",
            Some(ErrorCode::ParentNotFound),
        ),
        Row {
            create_parents: true,
            ..row("create parents", |_| {}, "d/e/a.txt", None)
        },
        Row {
            create_parents: true,
            ..row(
                "create parents through a symlinked dir",
                |fx| fx.link("d", fx.outside.join("sub")),
                "d/e/a.txt",
                Some(ErrorCode::SymlinkRedirect),
            )
        },
        row(
            "parent is a file",
            |fx| fx.file("f", b"x"),
            "f/a.txt",
            Some(ErrorCode::NotDirectory),
        ),
        Row {
            overwrite: true,
            ..row(
                "target is a directory",
                |fx| fx.dir("d"),
                "d",
                Some(ErrorCode::IsDirectory),
            )
        },
        Row {
            overwrite: true,
            ..row(
                "target is the root",
                |_| {},
                "",
                Some(ErrorCode::IsDirectory),
            )
        },
        Row {
            overwrite: true,
            ..row(
                "target is a symlink",
                |fx| {
                    fx.file("real", b"old");
                    fx.link("l", "real");
                },
                "l",
                Some(ErrorCode::SymlinkTargetDenied),
            )
        },
        Row {
            overwrite: true,
            ..row(
                "target is a symlink to outside",
                |fx| fx.link("l", fx.outside.join("secret.txt")),
                "l",
                Some(ErrorCode::SymlinkTargetDenied),
            )
        },
        Row {
            overwrite: true,
            ..row(
                "target is a dangling symlink",
                |fx| fx.link("l", fx.outside.join("created-by-write")),
                "l",
                Some(ErrorCode::SymlinkTargetDenied),
            )
        },
        Row {
            overwrite: true,
            ..row(
                "parent is a symlink",
                |fx| fx.link("d", fx.outside.join("sub")),
                "d/secret.txt",
                Some(ErrorCode::SymlinkRedirect),
            )
        },
        Row {
            content_base64: Some("not base64!"),
            ..row(
                "bad base64 characters",
                |_| {},
                "a",
                Some(ErrorCode::InvalidBase64),
            )
        },
        Row {
            content_base64: Some("eA"),
            ..row(
                "missing padding",
                |_| {},
                "a",
                Some(ErrorCode::InvalidBase64),
            )
        },
        Row {
            content_base64: Some("eB=="),
            ..row(
                "non-canonical trailing bits",
                |_| {},
                "a",
                Some(ErrorCode::InvalidBase64),
            )
        },
        Row {
            content_base64: Some("eA==\n"),
            ..row(
                "trailing newline",
                |_| {},
                "a",
                Some(ErrorCode::InvalidBase64),
            )
        },
        Row {
            expected_sha256: Some(
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
            overwrite: true,
            ..row(
                "hash mismatch",
                |fx| fx.file("a", b"old"),
                "a",
                Some(ErrorCode::IntegrityFailure),
            )
        },
        // sha256("new content")
        Row {
            expected_sha256: Some(
                "FE32608C9EF5B6CF7E3F946480253FF76F24F4EC0678F3D0F07F9844CBFF9601",
            ),
            overwrite: true,
            ..row(
                "hash match, upper case",
                |fx| fx.file("a", b"old"),
                "a",
                None,
            )
        },
        row(
            "dot-dot",
            |_| {},
            "../outside/new",
            Some(ErrorCode::PathTraversal),
        ),
    ];
    for resolver in RESOLVERS {
        for row in &rows {
            let fx = Fixture::new();
            (row.setup)(&fx);
            let before_outside = fx.outside_snapshot();
            let before_target = std::fs::symlink_metadata(fx.root_dir.join(row.rel))
                .ok()
                .map(|_| std::fs::read(fx.root_dir.join(row.rel)).ok());
            let root = fx.root(resolver);
            let result = file_write(
                &root,
                &FileWriteParams {
                    path: fx.wire(row.rel),
                    content_base64: row
                        .content_base64
                        .map_or_else(|| b64(b"new content"), str::to_owned),
                    overwrite: row.overwrite,
                    create_parents: row.create_parents,
                    expected_sha256: row.expected_sha256.map(str::to_owned),
                    ..FileWriteParams::default()
                },
            );
            let name = row.name;
            match (row.expected, result) {
                (None, Ok(written)) => {
                    assert_eq!(fx.read(row.rel), b"new content", "{resolver:?} {name}");
                    assert_eq!(written.size, 11);
                    assert_eq!(written.sha256, sha256_hex(b"new content"));
                    assert_eq!(
                        written.overwritten,
                        before_target.is_some(),
                        "{resolver:?} {name}"
                    );
                }
                (Some(code), Err(error)) => {
                    assert_eq!(error.code(), code, "{resolver:?} {name}: {error}");
                    let after_target = std::fs::symlink_metadata(fx.root_dir.join(row.rel))
                        .ok()
                        .map(|_| std::fs::read(fx.root_dir.join(row.rel)).ok());
                    assert_eq!(
                        after_target, before_target,
                        "{resolver:?} {name}: a refused write changed the target"
                    );
                }
                (expected, result) => {
                    panic!("{resolver:?} {name}: expected {expected:?}, got {result:?}")
                }
            }
            assert_eq!(
                fx.outside_snapshot(),
                before_outside,
                "{resolver:?} {name}: outside changed"
            );
            assert!(!fx.outside.join("created-by-write").exists());
            let strays: Vec<String> = fx
                .root_names("")
                .into_iter()
                .filter(|n| n.ends_with(".tmp"))
                .collect();
            assert!(
                strays.is_empty(),
                "{resolver:?} {name}: temp files left: {strays:?}"
            );
        }
    }
}

#[test]
fn file_write_size_limit_is_16_mib() {
    let fx = Fixture::new();
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    let at_limit = write(&fx, &root, "limit", &vec![3; 16 * MIB], false).unwrap();
    assert_eq!(at_limit.size, 16 * MIB as u64);
    let over = write(&fx, &root, "over", &vec![3; 16 * MIB + 1], false);
    assert_eq!(code(over), ErrorCode::FileTooLarge);
    assert!(!fx.root_dir.join("over").exists());
}

#[test]
fn file_write_preflight_touches_nothing() {
    let fx = Fixture::new();
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    fx.file("a", b"old");
    let params = |rel: &str, overwrite| FileWriteParams {
        path: fx.wire(rel),
        content_base64: b64(b"new"),
        overwrite,
        create_parents: true,
        preflight_only: Some(true),
        ..FileWriteParams::default()
    };
    let replaced = file_write(&root, &params("a", true)).unwrap();
    assert!(replaced.overwritten);
    assert_eq!(fx.read("a"), b"old");
    let created = file_write(&root, &params("new/dir/b", false)).unwrap();
    assert!(!created.overwritten);
    assert!(!fx.root_dir.join("new").exists());
    assert_eq!(
        code(file_write(&root, &params("a", false))),
        ErrorCode::ExistsNoOverwrite
    );
}

#[test]
fn file_write_keeps_the_mode_of_a_replaced_file() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    fx.file("run.sh", b"#!/bin/sh\n");
    std::fs::set_permissions(
        fx.root_dir.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    write(&fx, &root, "run.sh", b"#!/bin/sh\necho\n", true).unwrap();
    let mode = std::fs::metadata(fx.root_dir.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[test]
fn writing_over_a_hard_link_never_modifies_the_linked_inode() {
    // A hard link inside the root to a file outside: reads are refused, and a write replaces the
    // directory entry, so the outside file keeps its content.
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        std::fs::hard_link(fx.outside.join("secret.txt"), fx.root_dir.join("alias")).unwrap();
        let root = fx.root(resolver);
        assert_eq!(code(fetch(&fx, &root, "alias")), ErrorCode::HardlinkDenied);
        let written = write(&fx, &root, "alias", b"replaced", true).unwrap();
        assert!(written.overwritten);
        assert_eq!(
            std::fs::read(fx.outside.join("secret.txt")).unwrap(),
            OUTSIDE_CONTENT.as_bytes()
        );
        assert_eq!(fx.read("alias"), b"replaced");
    }
}

#[test]
fn file_create_never_overwrites() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        let root = fx.root(resolver);
        let params = |rel: &str| FileCreateParams {
            path: fx.wire(rel),
            content_base64: b64(b"created"),
            create_parents: true,
            ..FileCreateParams::default()
        };
        let created = file_create(&root, &params("media/inbound/x/input-a.txt")).unwrap();
        assert!(!created.overwritten);
        assert_eq!(fx.read("media/inbound/x/input-a.txt"), b"created");
        fx.file("exists", b"keep");
        assert_eq!(
            code(file_create(&root, &params("exists"))),
            ErrorCode::ExistsNoOverwrite
        );
        assert_eq!(fx.read("exists"), b"keep");
        fx.link("link", fx.outside.join("new-outside"));
        assert_eq!(
            code(file_create(&root, &params("link"))),
            ErrorCode::SymlinkTargetDenied
        );
        assert!(!fx.outside.join("new-outside").exists());
    }
}

#[test]
fn file_stat_describes_without_following() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        fx.file("d/a.txt", b"12345");
        fx.link("l", fx.outside.join("secret.txt"));
        fx.link("dl", "d");
        let root = fx.root(resolver);
        let stat = |rel: &str| {
            file_stat(
                &root,
                &FileStatParams {
                    path: fx.wire(rel),
                    ..FileStatParams::default()
                },
            )
        };
        let file = stat("d/a.txt").unwrap();
        assert_eq!(
            (file.kind, file.size, file.hard_linked),
            (EntryKind::File, 5, false)
        );
        assert_eq!(stat("d").unwrap().kind, EntryKind::Directory);
        assert_eq!(stat("").unwrap().kind, EntryKind::Directory);
        let link = stat("l").unwrap();
        assert_eq!(link.kind, EntryKind::Symlink);
        assert_ne!(link.size, OUTSIDE_CONTENT.len() as u64 + 1000);
        assert_eq!(code(stat("dl/a.txt")), ErrorCode::SymlinkRedirect);
        assert_eq!(code(stat("missing")), ErrorCode::NotFound);
        assert_eq!(code(stat("../outside")), ErrorCode::PathTraversal);
    }
}

#[test]
fn dir_list_pages_in_a_stable_order() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        for index in 0..450 {
            fx.file(&format!("many/f{index:04}"), b"x");
        }
        let root = fx.root(resolver);
        let list = |limit: Option<u32>, token: Option<String>| {
            dir_list(
                &root,
                &DirListParams {
                    path: fx.wire("many"),
                    limit,
                    page_token: token,
                },
            )
        };
        let mut names = Vec::new();
        let mut token = None;
        let mut page_sizes = Vec::new();
        loop {
            let page = list(None, token.clone()).unwrap();
            page_sizes.push(page.entries.len());
            names.extend(page.entries.into_iter().map(|entry| entry.name));
            token = page.next_page_token;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(page_sizes, vec![200, 200, 50], "{resolver:?}");
        let expected: Vec<String> = (0..450).map(|index| format!("f{index:04}")).collect();
        assert_eq!(names, expected);
        // A limit above 5000 is clamped, zero becomes one.
        assert_eq!(list(Some(100_000), None).unwrap().entries.len(), 450);
        assert_eq!(list(Some(0), None).unwrap().entries.len(), 1);
        assert_eq!(
            code(list(None, Some("zz-not-hex".into()))),
            ErrorCode::InvalidPath
        );
    }
}

#[test]
fn dir_list_clamps_to_5000_entries() {
    let fx = Fixture::new();
    for index in 0..5001 {
        fx.file(&format!("d/{index:05}"), b"");
    }
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    let page = dir_list(
        &root,
        &DirListParams {
            path: fx.wire("d"),
            limit: Some(6000),
            page_token: None,
        },
    )
    .unwrap();
    assert_eq!(page.entries.len(), 5000);
    assert!(page.next_page_token.is_some());
}

#[test]
fn dir_list_reports_links_and_refuses_linked_directories() {
    for resolver in RESOLVERS {
        let fx = Fixture::new();
        fx.file("d/a", b"x");
        fx.dir("d/sub");
        fx.link("d/out", fx.outside.join("sub"));
        fx.link("dl", fx.outside.join("sub"));
        fx.file("f", b"x");
        let root = fx.root(resolver);
        let list = |rel: &str| {
            dir_list(
                &root,
                &DirListParams {
                    path: fx.wire(rel),
                    ..DirListParams::default()
                },
            )
        };
        let page = list("d").unwrap();
        let kinds: Vec<(String, EntryKind)> = page
            .entries
            .into_iter()
            .map(|entry| (entry.name, entry.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("a".to_owned(), EntryKind::File),
                ("out".to_owned(), EntryKind::Symlink),
                ("sub".to_owned(), EntryKind::Directory),
            ]
        );
        assert_eq!(code(list("dl")), ErrorCode::SymlinkRedirect);
        assert_eq!(code(list("f")), ErrorCode::NotDirectory);
        assert_eq!(code(list("missing")), ErrorCode::NotFound);
        assert_eq!(list("").unwrap().entries.len(), 3);
    }
}

#[test]
fn errors_carry_their_code_and_canonical_path_on_the_wire() {
    let fx = Fixture::new();
    fx.file("d/real", b"x");
    fx.link("l", "d");
    let root = fx.root(gatehouse_fsops::root::Resolver::Openat2);
    let error = fetch(&fx, &root, "l/real").unwrap_err();
    let wire = error.to_wire();
    assert_eq!(wire.code, "SYMLINK_REDIRECT");
    assert_eq!(
        wire.details.unwrap()["canonicalPath"],
        serde_json::json!(fx.wire("l/real"))
    );
    fx.file("big", &[0; 10]);
    let too_large = file_fetch(
        &root,
        &FileFetchParams {
            path: fx.wire("big"),
            max_bytes: Some(3),
            ..FileFetchParams::default()
        },
    )
    .unwrap_err()
    .to_wire();
    assert_eq!(too_large.details.unwrap()["limit"], serde_json::json!(3));
}
