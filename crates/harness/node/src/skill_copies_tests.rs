use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use base64::Engine;
use gatehouse_fsops::Dir;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::SkillCopy;
use gatehouse_protocol::worker::SkillCopyFile;

use crate::skill_copies::prepare;

/// Prepares the copies in the session workspace at `ws`, created if missing.
fn prepare_at(ws: &Path, agent: &Path, copies: &[SkillCopy]) -> Result<(), WireError> {
    std::fs::create_dir_all(ws).unwrap();
    prepare(&Dir::open(ws).unwrap(), agent, copies)
}

fn copy(name: &str, path: &str, text: &str) -> SkillCopy {
    SkillCopy {
        name: name.to_owned(),
        files: vec![SkillCopyFile {
            path: path.to_owned(),
            content_base64: base64::engine::general_purpose::STANDARD.encode(text),
        }],
        source: None,
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn copies_are_private_read_only_and_replaced_each_turn() {
    let temp = tempfile::tempdir().unwrap();
    let ws = temp.path().join("ws");
    prepare_at(&ws, temp.path(), &[copy("greeter", "SKILL.md", "hello")]).unwrap();
    let file = ws.join(".gatehouse-skills/greeter/SKILL.md");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
    assert_eq!(mode(&file), 0o400);
    assert_eq!(mode(&ws.join(".gatehouse-skills/greeter")), 0o500);
    assert_eq!(mode(&ws.join(".gatehouse-skills")), 0o500);
    // The next turn without skills removes them, read-only or not.
    prepare_at(&ws, temp.path(), &[]).unwrap();
    assert!(!ws.join(".gatehouse-skills").exists());
    // A link planted in their place is removed, not followed.
    let outside = temp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".gatehouse-skills")).unwrap();
    prepare_at(&ws, temp.path(), &[copy("greeter", "SKILL.md", "again")]).unwrap();
    assert!(outside.join("keep").exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "again");
}

#[test]
fn workspace_skills_are_copied_from_the_agent_workspace_without_links() {
    let temp = tempfile::tempdir().unwrap();
    let agent = temp.path().join("agent");
    let skill = agent.join("skills/notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "notes skill").unwrap();
    std::fs::write(skill.join("template.txt"), "t").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", skill.join("leak.txt")).unwrap();
    let agent = agent.canonicalize().unwrap();
    let ws = temp.path().join("ws");
    let source = SkillCopy {
        name: String::from("notes"),
        files: Vec::new(),
        source: Some(format!("{}/skills/notes", agent.display())),
    };
    prepare_at(&ws, &agent, &[source]).unwrap();
    let copied = ws.join(".gatehouse-skills/notes");
    assert_eq!(
        std::fs::read_to_string(copied.join("SKILL.md")).unwrap(),
        "notes skill"
    );
    assert!(copied.join("template.txt").is_file());
    assert!(!copied.join("leak.txt").exists(), "a link was followed");
    // A source outside the Agent workspace is refused.
    let outside = SkillCopy {
        name: String::from("x"),
        files: Vec::new(),
        source: Some(String::from("/etc")),
    };
    assert_eq!(
        prepare_at(&ws, &agent, &[outside]).unwrap_err().code,
        "PATH_TRAVERSAL"
    );
}

#[test]
fn names_and_paths_must_be_plain() {
    let temp = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("../x", "SKILL.md"),
        ("ok", "../SKILL.md"),
        (".hidden", "SKILL.md"),
        ("ok", "/etc/passwd"),
    ] {
        let error = prepare_at(temp.path(), temp.path(), &[copy(name, path, "x")]).unwrap_err();
        assert_eq!(error.code, "INVALID_PARAMS", "{name} {path}");
    }
}

/// The racer of [`finding_2_skill_copy_race_never_escapes_the_session`]: it keeps exchanging
/// `.gatehouse-skills` and its skill directory with links to another session's workspace and to
/// a sentinel directory outside, and planting such links where the copies are about to be
/// created. It works through directory handles itself, so only the node host could follow a
/// link it plants.
fn race_skill_copies(
    workspace: &Path,
    targets: &[PathBuf],
    stop: &std::sync::atomic::AtomicBool,
) -> u64 {
    use rustix::fs::Mode;
    use rustix::fs::OFlags;
    use rustix::fs::RenameFlags;
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let ws = rustix::fs::open(workspace, dir_flags, Mode::empty()).unwrap();
    let mut n_swaps = 0_u64;
    let mut round = 0_usize;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        round += 1;
        let target = &targets[round % targets.len()];
        let _ = rustix::fs::unlinkat(&ws, "planted", rustix::fs::AtFlags::empty());
        let _ = rustix::fs::symlinkat(target, &ws, "planted");
        let swapped = match round % 3 {
            // Put the link in place of the copies (or where they are about to be made).
            0 => rustix::fs::renameat_with(
                &ws,
                "planted",
                &ws,
                ".gatehouse-skills",
                RenameFlags::NOREPLACE,
            ),
            1 => rustix::fs::renameat_with(
                &ws,
                "planted",
                &ws,
                ".gatehouse-skills",
                RenameFlags::EXCHANGE,
            ),
            // One level down: the skill directory itself.
            _ => match rustix::fs::openat(&ws, ".gatehouse-skills", dir_flags, Mode::empty()) {
                Ok(skills) => {
                    let _ = rustix::fs::symlinkat(target, &skills, "planted");
                    rustix::fs::renameat_with(
                        &skills,
                        "planted",
                        &skills,
                        "greeter",
                        RenameFlags::EXCHANGE,
                    )
                    .or_else(|_| {
                        rustix::fs::renameat_with(
                            &skills,
                            "planted",
                            &skills,
                            "greeter",
                            RenameFlags::NOREPLACE,
                        )
                    })
                }
                Err(errno) => Err(errno),
            },
        };
        n_swaps += u64::from(swapped.is_ok());
    }
    n_swaps
}

/// Issue 12, finding 2: a racer swapping `.gatehouse-skills` and the directories below it for
/// links to another session's workspace and to a sentinel directory, run against 500 turns'
/// worth of skill-copy preparation (removal and creation), never gets anything created,
/// chmodded or removed outside its own session workspace.
#[test]
fn finding_2_skill_copy_race_never_escapes_the_session() {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let ws = base.join("sessions/a/workspace");
    let other = base.join("sessions/b/workspace");
    let sentinel = base.join("sentinel");
    std::fs::create_dir_all(&ws).unwrap();
    // The other session has copies of its own, read-only like ours, and a file.
    std::fs::create_dir_all(other.join(".gatehouse-skills/greeter")).unwrap();
    std::fs::write(other.join(".gatehouse-skills/greeter/SKILL.md"), "theirs").unwrap();
    std::fs::write(other.join("notes.md"), "other session").unwrap();
    std::fs::create_dir_all(sentinel.join("greeter")).unwrap();
    std::fs::write(sentinel.join("keep"), "sentinel").unwrap();
    for (dir, mode) in [
        (other.join(".gatehouse-skills/greeter"), 0o500),
        (other.join(".gatehouse-skills"), 0o500),
        (sentinel.join("greeter"), 0o755),
        (sentinel.clone(), 0o755),
    ] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let before = (
        gatehouse_fsops::test_support::tree(&other),
        gatehouse_fsops::test_support::tree(&sentinel),
    );
    let targets = vec![
        other.clone(),
        other.join(".gatehouse-skills"),
        sentinel.clone(),
    ];
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (ws, stop) = (ws.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || race_skill_copies(&ws, &targets, &stop))
    };
    let session = Dir::open(&ws).unwrap();
    let copies = [
        copy("greeter", "SKILL.md", "hello"),
        copy("greeter-two", "docs/extra.md", "more"),
    ];
    let (mut n_prepared, mut n_refused) = (0_u32, 0_u32);
    for turn in 0..500 {
        let turn_copies = match turn % 5 {
            4 => &copies[..0],
            _ => &copies[..],
        };
        match prepare(&session, &base, turn_copies) {
            Ok(()) => n_prepared += 1,
            Err(_) => n_refused += 1,
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n_swaps = racer.join().unwrap();
    assert!(
        n_swaps > 0 && n_prepared > 0 && n_refused > 0,
        "the race did not happen: {n_swaps} swaps, {n_prepared} prepared, {n_refused} refused"
    );
    let after = (
        gatehouse_fsops::test_support::tree(&other),
        gatehouse_fsops::test_support::tree(&sentinel),
    );
    assert_eq!(
        after, before,
        "something outside the session workspace changed"
    );
    // Without the racer, the next turn's preparation succeeds and cleans up whatever it left.
    prepare(&session, &base, &copies).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join(".gatehouse-skills/greeter/SKILL.md")).unwrap(),
        "hello"
    );
}
