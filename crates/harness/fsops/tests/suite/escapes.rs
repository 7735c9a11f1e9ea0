//! Escape attempts, each in its own temporary directory: each is refused with its code, nothing
//! outside the root is read, and nothing outside is written.

use gatehouse_fsops::FsError;
use gatehouse_fsops::Root;
use gatehouse_fsops::commands::file_create;
use gatehouse_fsops::commands::file_fetch;
use gatehouse_fsops::commands::file_write;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::suite::support::Fixture;
use crate::suite::support::RESOLVERS;
use crate::suite::support::b64;

enum Attempt {
    Read(&'static str),
    Write(&'static str),
    Create(&'static str),
}

fn run(fx: &Fixture, root: &Root, attempt: &Attempt) -> Result<(), FsError> {
    let wire = |rel: &str| match rel.starts_with('/') {
        true => rel.to_owned(),
        false => fx.wire(rel),
    };
    match attempt {
        Attempt::Read(rel) => file_fetch(
            root,
            &FileFetchParams {
                path: wire(rel),
                ..FileFetchParams::default()
            },
        )
        .map(|_| ()),
        Attempt::Write(rel) => file_write(
            root,
            &FileWriteParams {
                path: wire(rel),
                content_base64: b64(b"escaped"),
                overwrite: true,
                create_parents: true,
                ..FileWriteParams::default()
            },
        )
        .map(|_| ()),
        Attempt::Create(rel) => file_create(
            root,
            &FileCreateParams {
                path: wire(rel),
                content_base64: b64(b"escaped"),
                create_parents: true,
                ..FileCreateParams::default()
            },
        )
        .map(|_| ()),
    }
}

#[test]
fn every_escape_attempt_is_refused_with_its_code() {
    type Setup = fn(&Fixture);
    let attempts: Vec<(&str, Setup, Attempt, ErrorCode)> = vec![
        (
            "read through a symlink in the middle",
            |fx| fx.link("mid", &fx.outside),
            Attempt::Read("mid/secret.txt"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "write through a symlink in the middle",
            |fx| fx.link("mid", &fx.outside),
            Attempt::Write("mid/new.txt"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "create through a symlink in the middle",
            |fx| fx.link("mid", &fx.outside),
            Attempt::Create("mid/sub/new.txt"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "read a symlink at the end",
            |fx| fx.link("end", fx.outside.join("secret.txt")),
            Attempt::Read("end"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "write a symlink at the end",
            |fx| fx.link("end", fx.outside.join("secret.txt")),
            Attempt::Write("end"),
            ErrorCode::SymlinkTargetDenied,
        ),
        (
            "read through a symlink to /",
            |fx| fx.link("slash", "/"),
            Attempt::Read("slash/etc/hostname"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "write through a symlink to /",
            |fx| fx.link("slash", "/"),
            Attempt::Write("slash/tmp/gatehouse-escape"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "write a dangling symlink",
            |fx| fx.link("dangling", fx.outside.join("made-by-escape")),
            Attempt::Write("dangling"),
            ErrorCode::SymlinkTargetDenied,
        ),
        (
            "create a dangling symlink",
            |fx| fx.link("dangling", fx.outside.join("made-by-escape")),
            Attempt::Create("dangling"),
            ErrorCode::SymlinkTargetDenied,
        ),
        (
            "relative symlink climbing out",
            |fx| fx.link("up", "../outside"),
            Attempt::Read("up/secret.txt"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "symlink chain inside then out",
            |fx| {
                fx.link("a", "b");
                fx.link("b", "../outside");
            },
            Attempt::Read("a/secret.txt"),
            ErrorCode::SymlinkRedirect,
        ),
        (
            "dot-dot read",
            |_| {},
            Attempt::Read("../outside/secret.txt"),
            ErrorCode::PathTraversal,
        ),
        (
            "dot-dot write",
            |_| {},
            Attempt::Write("d/../../outside/new.txt"),
            ErrorCode::PathTraversal,
        ),
        (
            "dot-dot with backslashes",
            |_| {},
            Attempt::Write("d\\..\\..\\outside\\new.txt"),
            ErrorCode::PathTraversal,
        ),
        (
            "absolute path read",
            |_| {},
            Attempt::Read("/etc/passwd"),
            ErrorCode::PathTraversal,
        ),
        (
            "absolute path write",
            |_| {},
            Attempt::Write("/tmp/gatehouse-escape-absolute"),
            ErrorCode::PathTraversal,
        ),
        (
            "NUL in the path",
            |_| {},
            Attempt::Read("a\0/../../etc/passwd"),
            ErrorCode::InvalidPath,
        ),
        (
            "proc magic link",
            |fx| fx.link("self", "/proc/self/root"),
            Attempt::Read("self/etc/passwd"),
            ErrorCode::SymlinkRedirect,
        ),
    ];
    for resolver in RESOLVERS {
        for (name, setup, attempt, expected) in &attempts {
            let fx = Fixture::new();
            setup(&fx);
            let outside_before = fx.outside_snapshot();
            let root = fx.root(resolver);
            match run(&fx, &root, attempt) {
                Ok(()) => panic!("{resolver:?} {name}: escape attempt succeeded"),
                Err(error) => assert_eq!(error.code(), *expected, "{resolver:?} {name}: {error}"),
            }
            assert_eq!(fx.outside_snapshot(), outside_before, "{resolver:?} {name}");
            assert!(!std::path::Path::new("/tmp/gatehouse-escape").exists());
            assert!(!std::path::Path::new("/tmp/gatehouse-escape-absolute").exists());
        }
    }
}

#[test]
fn the_root_itself_must_not_be_a_symlink() {
    let fx = Fixture::new();
    let link = fx.root_dir.with_file_name("root-link");
    std::os::unix::fs::symlink(&fx.outside, &link).unwrap();
    let error = Root::open(&link).unwrap_err();
    assert_eq!(error.code(), ErrorCode::SymlinkRedirect);
}

#[test]
fn the_kernel_resolver_is_chosen_when_available() {
    let fx = Fixture::new();
    let root = Root::open(&fx.root_dir).unwrap();
    // Linux 5.6 and later have openat2; the machines this runs on do.
    assert_eq!(root.resolver(), gatehouse_fsops::root::Resolver::Openat2);
}
