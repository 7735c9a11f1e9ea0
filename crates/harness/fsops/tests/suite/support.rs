//! A temporary directory with a workspace root and a sibling "outside" tree to escape into.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::path::PathBuf;

use base64::Engine;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::Resolver;

/// The content of every file outside the root; no operation may ever return it.
pub(crate) const OUTSIDE_CONTENT: &str = "OUTSIDE-SECRET";

/// Both resolvers, so every test runs against each.
pub(crate) const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::ComponentWalk];

pub(crate) struct Fixture {
    _temp: tempfile::TempDir,
    pub(crate) root_dir: PathBuf,
    pub(crate) outside: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path().canonicalize().unwrap();
        let root_dir = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(&root_dir).unwrap();
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::write(outside.join("secret.txt"), OUTSIDE_CONTENT).unwrap();
        std::fs::write(outside.join("sub/secret.txt"), OUTSIDE_CONTENT).unwrap();
        Self {
            _temp: temp,
            root_dir,
            outside,
        }
    }

    pub(crate) fn root(&self, resolver: Resolver) -> Root {
        Root::open_with(&self.root_dir, resolver).unwrap()
    }

    /// The wire path of `rel` under the root.
    pub(crate) fn wire(&self, rel: &str) -> String {
        format!("{}/{rel}", self.root_dir.display())
    }

    pub(crate) fn file(&self, rel: &str, content: &[u8]) {
        let path = self.root_dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub(crate) fn dir(&self, rel: &str) {
        std::fs::create_dir_all(self.root_dir.join(rel)).unwrap();
    }

    pub(crate) fn link(&self, rel: &str, target: impl AsRef<Path>) {
        symlink(target, self.root_dir.join(rel)).unwrap();
    }

    pub(crate) fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root_dir.join(rel)).unwrap()
    }

    /// Every file under the outside tree with its content; compared before and after to prove
    /// nothing there changed.
    pub(crate) fn outside_snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        snapshot(&self.outside)
    }

    /// Names in the root's top directory, to find stray temporary files.
    pub(crate) fn root_names(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root_dir.join(rel))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

pub(crate) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            let file_type = entry.file_type().unwrap();
            let path = entry.path();
            if file_type.is_dir() {
                pending.push(path.clone());
                files.insert(path, b"<dir>".to_vec());
            } else if file_type.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                files.insert(path, target.to_string_lossy().as_bytes().to_vec());
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
