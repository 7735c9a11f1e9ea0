//! Property: over random trees of files, directories and symlinks, and random paths, no operation
//! ever reads from or writes to anything outside the root.

use std::path::Path;

use gatehouse_fsops::Root;
use gatehouse_fsops::commands::dir_list;
use gatehouse_fsops::commands::file_create;
use gatehouse_fsops::commands::file_fetch;
use gatehouse_fsops::commands::file_stat;
use gatehouse_fsops::commands::file_write;
use gatehouse_protocol::commands::DirListParams;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileStatParams;
use gatehouse_protocol::commands::FileWriteParams;
use proptest::prelude::*;

use crate::suite::support::Fixture;
use crate::suite::support::OUTSIDE_CONTENT;
use crate::suite::support::RESOLVERS;
use crate::suite::support::b64;

#[derive(Debug, Clone)]
enum Entry {
    Dir(String),
    File(String),
    Link(String, LinkTarget),
}

#[derive(Debug, Clone)]
enum LinkTarget {
    Outside,
    OutsideFile,
    Slash,
    Relative(String),
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Fetch,
    Stat,
    Write,
    Create,
    List,
}

fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_owned),
        1 => Just(String::from("..")),
        1 => Just(String::from(".")),
        1 => Just(String::new()),
    ]
}

fn rel_path() -> impl Strategy<Value = String> {
    prop::collection::vec(component(), 1..4).prop_map(|parts| parts.join("/"))
}

fn clean_rel_path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "d"]), 1..4)
        .prop_map(|parts| parts.join("/"))
}

fn entry() -> impl Strategy<Value = Entry> {
    let target = prop_oneof![
        Just(LinkTarget::Outside),
        Just(LinkTarget::OutsideFile),
        Just(LinkTarget::Slash),
        rel_path().prop_map(LinkTarget::Relative),
    ];
    prop_oneof![
        clean_rel_path().prop_map(Entry::Dir),
        clean_rel_path().prop_map(Entry::File),
        (clean_rel_path(), target).prop_map(|(path, target)| Entry::Link(path, target)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop::sample::select(vec![Op::Fetch, Op::Stat, Op::Write, Op::Create, Op::List])
}

/// True when some ancestor of `path` below `root` is a symlink (then building through it with
/// `std::fs`, which follows links, could itself escape).
fn crosses_link(root: &Path, rel: &str) -> bool {
    let mut current = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        current.push(part);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => return true,
            Ok(meta) if !meta.is_dir() => return true,
            _ => {}
        }
    }
    false
}

fn build(fx: &Fixture, entries: &[Entry]) {
    // Directories, then files, then links, so nothing is created through a link.
    for entry in entries {
        if let Entry::Dir(rel) = entry
            && !crosses_link(&fx.root_dir, rel)
        {
            let _ = std::fs::create_dir_all(fx.root_dir.join(rel));
        }
    }
    for (index, entry) in entries.iter().enumerate() {
        if let Entry::File(rel) = entry
            && !crosses_link(&fx.root_dir, rel)
            && let Some(parent) = Path::new(rel).parent()
            && std::fs::create_dir_all(fx.root_dir.join(parent)).is_ok()
        {
            let _ = std::fs::write(fx.root_dir.join(rel), format!("INSIDE-{index}"));
        }
    }
    for entry in entries {
        if let Entry::Link(rel, target) = entry
            && !crosses_link(&fx.root_dir, rel)
        {
            let target = match target {
                LinkTarget::Outside => fx.outside.clone(),
                LinkTarget::OutsideFile => fx.outside.join("secret.txt"),
                LinkTarget::Slash => std::path::PathBuf::from("/"),
                LinkTarget::Relative(rel) => std::path::PathBuf::from(rel),
            };
            let _ = std::os::unix::fs::symlink(target, fx.root_dir.join(rel));
        }
    }
}

fn check(fx: &Fixture, root: &Root, op: Op, path: &str) {
    let root_prefix = format!("{}/", fx.root_dir.display());
    match op {
        Op::Fetch => {
            if let Ok(result) = file_fetch(
                root,
                &FileFetchParams {
                    path: path.to_owned(),
                    ..FileFetchParams::default()
                },
            ) {
                let bytes = gatehouse_fsops::commands::decode_base64_strict(
                    result.base64.as_deref().unwrap(),
                )
                .unwrap();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(OUTSIDE_CONTENT),
                    "read outside content via {path}"
                );
                assert!(result.path.starts_with(&root_prefix), "{}", result.path);
            }
        }
        Op::Stat => {
            if let Ok(result) = file_stat(
                root,
                &FileStatParams {
                    path: path.to_owned(),
                    ..FileStatParams::default()
                },
            ) {
                assert!(result.path.starts_with(fx.root_dir.to_str().unwrap()));
            }
        }
        Op::Write => {
            let params = FileWriteParams {
                path: path.to_owned(),
                content_base64: b64(b"written"),
                overwrite: true,
                create_parents: true,
                ..FileWriteParams::default()
            };
            if let Ok(result) = file_write(root, &params) {
                assert!(result.path.starts_with(&root_prefix), "{}", result.path);
            }
        }
        Op::Create => {
            let params = FileCreateParams {
                path: path.to_owned(),
                content_base64: b64(b"created"),
                create_parents: true,
                ..FileCreateParams::default()
            };
            if let Ok(result) = file_create(root, &params) {
                assert!(result.path.starts_with(&root_prefix), "{}", result.path);
            }
        }
        Op::List => {
            if let Ok(result) = dir_list(
                root,
                &DirListParams {
                    path: path.to_owned(),
                    ..DirListParams::default()
                },
            ) {
                assert!(result.path.starts_with(fx.root_dir.to_str().unwrap()));
                for entry in result.entries {
                    assert_ne!(
                        entry.name, "secret.txt",
                        "listed the outside directory via {path}"
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_operation_touches_anything_outside_the_root(
        entries in prop::collection::vec(entry(), 0..14),
        ops in prop::collection::vec((op(), rel_path(), any::<bool>()), 1..24),
    ) {
        for resolver in RESOLVERS {
            let fx = Fixture::new();
            build(&fx, &entries);
            let outside_before = fx.outside_snapshot();
            let root = fx.root(resolver);
            for (op, rel, absolute_outside) in &ops {
                let path = match absolute_outside {
                    true => format!("{}/{rel}", fx.outside.display()),
                    false => fx.wire(rel),
                };
                check(&fx, &root, *op, &path);
            }
            prop_assert_eq!(fx.outside_snapshot(), outside_before);
        }
    }
}
