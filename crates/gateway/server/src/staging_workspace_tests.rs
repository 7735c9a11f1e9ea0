//! Attachment staging (DESIGN §6, oce-spec §4.4) against the real media store and a recording
//! fake of the Harness workspace.

use std::sync::Arc;
use std::sync::Mutex;

use crate::staging::GITIGNORE_CONTENT;
use crate::staging::SkippedAttachment;
use crate::staging::StagingError;
use crate::staging::WorkspaceStager;
use crate::staging::new_staged_id;
use crate::staging::stage_attachments;
use crate::turns::AttachmentStager;
use crate::workspace::WorkspaceAccess;
use crate::workspace::WorkspaceError;
use crate::workspace::WorkspaceFile;
use crate::workspace::WriteMode;
use crate::workspace::Written;
use axum::body::Bytes;
use gatehouse_media::MediaStore;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_store::records::Attachment;
use pretty_assertions::assert_eq;
use serde_json::json;

const STAGED_ID: &str = "turn0staged";
const DIR: &str = "media/inbound/gatehouse-staged-turn0staged";

/// How the fake fails a write whose path contains a marker.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// No node is connected.
    Unavailable,
    /// The node refuses the write with `PERMISSION_DENIED`.
    Refused,
}

/// One write the fake received (failed ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
struct WriteCall {
    relative: String,
    bytes: Vec<u8>,
    mode: WriteMode,
}

/// A fake Harness workspace that records every call and fails writes to chosen paths.
#[derive(Debug, Default)]
struct RecordingWorkspace {
    failures: Vec<(String, Failure)>,
    fetches: Mutex<Vec<String>>,
    writes: Mutex<Vec<WriteCall>>,
}

impl RecordingWorkspace {
    fn failing(marker: &str, failure: Failure) -> Self {
        Self {
            failures: vec![(marker.to_owned(), failure)],
            ..Self::default()
        }
    }

    fn writes(&self) -> Vec<WriteCall> {
        self.writes.lock().unwrap().clone()
    }

    fn n_calls(&self) -> usize {
        self.fetches.lock().unwrap().len() + self.writes.lock().unwrap().len()
    }
}

#[async_trait::async_trait]
impl WorkspaceAccess for RecordingWorkspace {
    async fn fetch(&self, relative: &str) -> Result<WorkspaceFile, WorkspaceError> {
        self.fetches.lock().unwrap().push(relative.to_owned());
        Err(WorkspaceError::Unavailable)
    }

    async fn write(
        &self,
        relative: &str,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<Written, WorkspaceError> {
        self.writes.lock().unwrap().push(WriteCall {
            relative: relative.to_owned(),
            bytes: bytes.to_vec(),
            mode,
        });
        let failure = self
            .failures
            .iter()
            .find(|(marker, _)| relative.contains(marker.as_str()));
        match failure {
            None => Ok(Written {
                path: format!("/home/node/workspace/{relative}"),
                size: bytes.len() as u64,
            }),
            Some((_, Failure::Unavailable)) => Err(WorkspaceError::Unavailable),
            Some((_, Failure::Refused)) => Err(WorkspaceError::Remote(WireError::new(
                ErrorCode::PermissionDenied,
                "permission denied",
            ))),
        }
    }
}

struct Media {
    store: MediaStore,
    _dir: tempfile::TempDir,
}

fn media() -> Media {
    let dir = tempfile::tempdir().unwrap();
    let store = MediaStore::open(&dir.path().join("media")).unwrap();
    Media { store, _dir: dir }
}

async fn put(media: &Media, content: &[u8], filename: Option<&str>) -> String {
    media
        .store
        .put(Bytes::copy_from_slice(content), "text/plain", filename)
        .await
        .unwrap()
        .id
}

fn required(media_id: &str) -> Attachment {
    Attachment {
        media_id: media_id.to_owned(),
        required: true,
    }
}

fn optional(media_id: &str) -> Attachment {
    Attachment {
        media_id: media_id.to_owned(),
        required: false,
    }
}

fn gitignore_call() -> WriteCall {
    WriteCall {
        relative: format!("{DIR}/.gitignore"),
        bytes: GITIGNORE_CONTENT.to_vec(),
        mode: WriteMode::CreateNew,
    }
}

#[tokio::test]
async fn staged_bytes_equal_the_upload_and_the_gitignore_is_written_first() {
    let media = media();
    let content: Vec<u8> = (0..=255_u8).cycle().take(10_000).collect();
    let media_id = put(&media, &content, Some("report.pdf")).await;
    let workspace = RecordingWorkspace::default();
    let report = stage_attachments(&workspace, &media.store, &[required(&media_id)], STAGED_ID)
        .await
        .unwrap();
    let relative = format!("{DIR}/input-report.pdf");
    assert_eq!(
        workspace.writes(),
        vec![
            gitignore_call(),
            WriteCall {
                relative: relative.clone(),
                bytes: content,
                mode: WriteMode::CreateNew,
            },
        ]
    );
    assert_eq!(GITIGNORE_CONTENT, b"*\n");
    assert_eq!(report.directory.as_deref(), Some(DIR));
    assert_eq!(report.skipped, Vec::new());
    assert_eq!(report.staged.len(), 1);
    assert_eq!(report.staged[0].media_id, media_id);
    assert_eq!(report.staged[0].relative_path, relative);
    assert_eq!(
        report.staged[0].remote_path,
        format!("/home/node/workspace/{relative}")
    );
    assert_eq!(report.staged[0].size, 10_000);
    assert_eq!(report.staged[0].mime_type, "text/plain");
}

#[tokio::test]
async fn names_are_sanitized() {
    let long = format!("{}.pdf", "n".repeat(496));
    let table: Vec<(Option<&str>, String)> = vec![
        (Some("a/b/c.txt"), "c.txt".to_owned()),
        (Some("..\\..\\evil.sh"), "evil.sh".to_owned()),
        (Some("../../etc/passwd"), "passwd".to_owned()),
        (
            Some("re\0po\u{7}rt\r\n\u{1b}[31m.md"),
            "report_31m.md".to_owned(),
        ),
        (Some(long.as_str()), format!("{}.pdf", "n".repeat(116))),
        (Some(".hidden"), "hidden".to_owned()),
        (Some(""), "file".to_owned()),
        (None, "file-2".to_owned()),
    ];
    let media = media();
    let mut attachments = Vec::new();
    for (row_idx, (filename, _)) in table.iter().enumerate() {
        let content = format!("row {row_idx}");
        attachments.push(required(&put(&media, content.as_bytes(), *filename).await));
    }
    let workspace = RecordingWorkspace::default();
    let report = stage_attachments(&workspace, &media.store, &attachments, STAGED_ID)
        .await
        .unwrap();
    let staged: Vec<String> = report
        .staged
        .iter()
        .map(|staged| staged.relative_path.clone())
        .collect();
    let expected: Vec<String> = table
        .iter()
        .map(|(_, name)| format!("{DIR}/input-{name}"))
        .collect();
    assert_eq!(staged, expected);
    for path in &staged {
        let name = path.rsplit('/').next().unwrap();
        assert!(name.len() <= "input-".len() + 120, "{name}");
        assert!(
            name.bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte)),
            "{name}"
        );
    }
    // Each staged file holds its own row.
    let writes = workspace.writes();
    assert_eq!(writes[0], gitignore_call());
    for (row_idx, write) in writes[1..].iter().enumerate() {
        assert_eq!(write.bytes, format!("row {row_idx}").into_bytes());
    }
}

#[tokio::test]
async fn missing_required_attachment_fails_before_any_write() {
    let media = media();
    let present = put(&media, b"present", Some("a.txt")).await;
    let cases = [
        "0".repeat(64),
        "../x".to_owned(),
        "a".repeat(63),
        String::new(),
    ];
    for missing in cases {
        let workspace = RecordingWorkspace::default();
        let attachments = [required(&present), optional(&present), required(&missing)];
        let error = stage_attachments(&workspace, &media.store, &attachments, STAGED_ID)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "ATTACHMENT_NOT_FOUND", "{missing:?}");
        assert!(
            matches!(&error, StagingError::AttachmentNotFound { media_id, .. } if *media_id == missing),
            "{error:?}"
        );
        assert_eq!(workspace.n_calls(), 0, "{missing:?}");
    }
}

#[tokio::test]
async fn missing_optional_attachment_is_skipped_and_reported() {
    let media = media();
    let present = put(&media, b"present", Some("a.txt")).await;
    let missing = "f".repeat(64);
    let workspace = RecordingWorkspace::default();
    let attachments = [
        optional(&missing),
        required(&present),
        optional("not-an-id"),
    ];
    let report = stage_attachments(&workspace, &media.store, &attachments, STAGED_ID)
        .await
        .unwrap();
    assert_eq!(
        report
            .staged
            .iter()
            .map(|staged| staged.relative_path.as_str())
            .collect::<Vec<_>>(),
        [format!("{DIR}/input-a.txt")]
    );
    assert_eq!(
        report.skipped,
        vec![
            SkippedAttachment {
                media_id: missing.clone(),
                code: "ATTACHMENT_NOT_FOUND",
                message: format!("no media {missing}"),
            },
            SkippedAttachment {
                media_id: "not-an-id".to_owned(),
                code: "ATTACHMENT_NOT_FOUND",
                message: "invalid media id: expected 64 lowercase hex characters".to_owned(),
            },
        ]
    );
    assert_eq!(workspace.writes().len(), 2);
}

#[tokio::test]
async fn only_missing_optional_attachments_write_nothing() {
    let media = media();
    let workspace = RecordingWorkspace::default();
    let report = stage_attachments(
        &workspace,
        &media.store,
        &[optional(&"e".repeat(64))],
        STAGED_ID,
    )
    .await
    .unwrap();
    assert_eq!(report.directory, None);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(workspace.n_calls(), 0);

    let report = stage_attachments(&workspace, &media.store, &[], STAGED_ID)
        .await
        .unwrap();
    assert_eq!(report, Default::default());
    assert_eq!(workspace.n_calls(), 0);
}

#[tokio::test]
async fn failed_required_transfer_is_an_error() {
    let media = media();
    let first = put(&media, b"first", Some("first.txt")).await;
    let second = put(&media, b"second", Some("second.txt")).await;
    let workspace = RecordingWorkspace::failing("input-second", Failure::Refused);
    let error = stage_attachments(
        &workspace,
        &media.store,
        &[required(&first), required(&second)],
        STAGED_ID,
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "ATTACHMENT_TRANSFER_FAILED");
    assert!(
        matches!(&error, StagingError::TransferFailed { path, .. } if *path == format!("{DIR}/input-second.txt")),
        "{error:?}"
    );
}

#[tokio::test]
async fn unavailable_node_is_dependency_unavailable() {
    let media = media();
    let media_id = put(&media, b"x", Some("x.txt")).await;
    let workspace = RecordingWorkspace::failing(DIR, Failure::Unavailable);
    let error = stage_attachments(&workspace, &media.store, &[required(&media_id)], STAGED_ID)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "DEPENDENCY_UNAVAILABLE");
    // The .gitignore write failed first; no input file was attempted.
    assert_eq!(workspace.writes(), vec![gitignore_call()]);

    // Optional attachments are skipped with the same reason.
    let workspace = RecordingWorkspace::failing(DIR, Failure::Unavailable);
    let report = stage_attachments(&workspace, &media.store, &[optional(&media_id)], STAGED_ID)
        .await
        .unwrap();
    assert_eq!(report.directory, None);
    assert_eq!(report.staged, Vec::new());
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].code, "DEPENDENCY_UNAVAILABLE");
}

#[tokio::test]
async fn failed_optional_transfer_is_skipped() {
    let media = media();
    let kept = put(&media, b"kept", Some("kept.txt")).await;
    let refused = put(&media, b"refused", Some("refused.txt")).await;
    let workspace = RecordingWorkspace::failing("input-refused", Failure::Refused);
    let report = stage_attachments(
        &workspace,
        &media.store,
        &[optional(&refused), required(&kept)],
        STAGED_ID,
    )
    .await
    .unwrap();
    assert_eq!(report.staged.len(), 1);
    assert_eq!(report.staged[0].media_id, kept);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].media_id, refused);
    assert_eq!(report.skipped[0].code, "ATTACHMENT_TRANSFER_FAILED");
}

#[tokio::test]
async fn invalid_staged_ids_are_refused_before_any_call() {
    let media = media();
    let media_id = put(&media, b"x", None).await;
    for staged_id in ["", "../up", "a/b", "a.b", &"a".repeat(65)] {
        let workspace = RecordingWorkspace::default();
        let error = stage_attachments(&workspace, &media.store, &[required(&media_id)], staged_id)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "INVALID_STAGED_ID", "{staged_id:?}");
        assert_eq!(workspace.n_calls(), 0);
    }
}

#[tokio::test]
async fn staged_ids_are_fresh_and_filename_safe() {
    let first = new_staged_id().unwrap();
    let second = new_staged_id().unwrap();
    assert_ne!(first, second);
    for staged_id in [first, second] {
        assert!(
            staged_id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_')),
            "{staged_id}"
        );
    }
}

#[test]
fn attachment_refs_default_to_required() {
    let attachments: Vec<Attachment> = serde_json::from_value(json!([
        {"mediaId": "a"},
        {"mediaId": "b", "required": false},
    ]))
    .unwrap();
    assert_eq!(attachments, vec![required("a"), optional("b")]);
    let unknown = serde_json::from_value::<Attachment>(json!({"mediaId": "a", "path": "/x"}));
    assert!(unknown.is_err());
}

#[tokio::test]
async fn the_turn_stager_returns_the_staged_paths() {
    let media = media();
    let media_id = put(&media, b"for the turn", Some("notes.md")).await;
    let workspace = Arc::new(RecordingWorkspace::default());
    let stager = WorkspaceStager::new(
        Arc::clone(&workspace) as Arc<dyn WorkspaceAccess>,
        Arc::new(media.store.clone()),
    );
    let paths = stager
        .stage("turn-1", &attachments(json!([{"mediaId": media_id}])))
        .await
        .unwrap();
    assert_eq!(paths.len(), 1);
    assert!(
        paths[0].starts_with("media/inbound/gatehouse-staged-"),
        "{}",
        paths[0]
    );
    assert!(paths[0].ends_with("/input-notes.md"), "{}", paths[0]);
    assert_eq!(workspace.writes()[1].bytes, b"for the turn");

    let failure = stager
        .stage("turn-2", &attachments(json!([{"mediaId": "0".repeat(64)}])))
        .await
        .unwrap_err();
    assert_eq!(failure.code, "ATTACHMENT_NOT_FOUND");
    assert_eq!(workspace.writes().len(), 2);

    // Attachments that are not a list never reach the stager: they do not decode.
    let not_a_list = serde_json::from_value::<Vec<Attachment>>(json!({"mediaId": media_id}));
    assert!(not_a_list.is_err());
}

/// Decodes a message's `attachments` as the API does.
fn attachments(value: serde_json::Value) -> Vec<Attachment> {
    serde_json::from_value(value).unwrap()
}
