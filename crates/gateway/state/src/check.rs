//! Checking a Gateway store's integrity on either backend ([`check`]).
//!
//! The checks read only; each problem found is one typed [`Finding`], whose code is one of the catalogue's store
//! integrity codes. They cover what the
//! store's own constraints do not: contiguous transcript and event sequence numbers per session
//! (1 up to the session's counter), rows whose session, turn or checkpoint is gone, more than
//! one running turn in a session, bindings to sessions or nodes that do not exist, and, given
//! the media store, checkpoint entries, turn attachments and upload pins whose blob is missing.

use std::collections::HashMap;

use gatehouse_media::MediaStore;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::location::StoreLocation;
use gatehouse_store::records::Attachment;
use gatehouse_store::records::CheckpointManifest;

use crate::db::Cell;
use crate::db::Db;
use crate::error::Result;
use crate::error::StateError;
use crate::tables::Kind;

/// The outcome of [`check`], as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The store URL.
    pub store: String,
    /// Whether nothing was found.
    pub ok: bool,
    /// Every problem found.
    pub findings: Vec<Finding>,
}

/// One problem in a store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What kind of problem it is: one of the store integrity codes of the catalogue
    /// (`TRANSCRIPT_SEQUENCE_BROKEN`, `ATTACHMENT_BLOB_MISSING`, ...).
    pub code: ErrorCode,
    /// What was found, for a person.
    pub detail: String,
    /// The session concerned, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The turn concerned, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The blob concerned, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_id: Option<String>,
}

impl Finding {
    fn new(code: ErrorCode, detail: String) -> Self {
        Self {
            code,
            detail,
            session_key: None,
            turn_id: None,
            media_id: None,
        }
    }

    fn session(mut self, key: &str) -> Self {
        self.session_key = Some(key.to_owned());
        self
    }

    fn turn(mut self, id: &str) -> Self {
        self.turn_id = Some(id.to_owned());
        self
    }

    fn media(mut self, id: &str) -> Self {
        self.media_id = Some(id.to_owned());
        self
    }
}

/// Checks the store at `location` (opened read-only) and, when given, that every blob it
/// refers to is in `media`.
///
/// # Errors
/// The store's and the media store's errors; a problem in the data is a [`Finding`].
pub async fn check(location: &StoreLocation, media: Option<&MediaStore>) -> Result<CheckReport> {
    let db = Db::open_read_only(location).await?;
    if db.schema_versions().await?.is_empty() {
        return Err(StateError::NotAStore {
            store: location.to_string(),
        });
    }
    let mut findings = Vec::new();
    sequences(&db, "messages", "next_message_seq", &mut findings).await?;
    sequences(&db, "session_events", "next_event_seq", &mut findings).await?;
    references(&db, &mut findings).await?;
    if let Some(media) = media {
        blobs(&db, media, &mut findings).await?;
    }
    db.close().await;
    Ok(CheckReport {
        store: location.to_string(),
        ok: findings.is_empty(),
        findings,
    })
}

/// Finds sessions whose rows in `table` are not numbered 1 up to the counter `counter` - 1.
async fn sequences(
    db: &Db,
    table: &'static str,
    counter: &str,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    let rows = db
        .fetch_cells(
            &format!(
                "SELECT s.session_key, s.{counter}, COUNT(r.seq), COALESCE(MIN(r.seq), 0), \
                 COALESCE(MAX(r.seq), 0) FROM sessions s LEFT JOIN {table} r \
                 ON r.session_key = s.session_key GROUP BY s.session_key, s.{counter} \
                 ORDER BY s.session_key"
            ),
            &[Kind::Text, Kind::Int, Kind::Int, Kind::Int, Kind::Int],
        )
        .await?;
    let code = match table {
        "messages" => ErrorCode::TranscriptSequenceBroken,
        _ => ErrorCode::EventSequenceBroken,
    };
    for row in rows {
        let [
            Cell::Text(session),
            Cell::Int(next),
            Cell::Int(count),
            Cell::Int(min),
            Cell::Int(max),
        ] = row.as_slice()
        else {
            continue;
        };
        let expected = next - 1;
        let contiguous = *count == expected && (*count == 0 || (*min == 1 && *max == expected));
        if !contiguous {
            let detail = match *count {
                0 => format!(
                    "session {session}: no rows in {table}, but its counter says {expected}"
                ),
                _ => format!(
                    "session {session}: {count} rows in {table} numbered {min} to {max}, \
                     expected 1 to {expected}"
                ),
            };
            findings.push(Finding::new(code, detail).session(session));
        }
    }
    Ok(())
}

/// Finds rows whose session, turn, checkpoint or node is gone, and sessions with more than one
/// running turn.
async fn references(db: &Db, findings: &mut Vec<Finding>) -> Result<()> {
    let text2 = [Kind::Text, Kind::Text];
    for (table, id) in [
        ("turns", "turn_id"),
        ("messages", "turn_id"),
        ("session_events", "kind"),
        ("checkpoints", "checkpoint_id"),
    ] {
        let rows = db
            .fetch_cells(
                &format!(
                    "SELECT r.session_key, r.{id} FROM {table} r LEFT JOIN sessions s \
                     ON s.session_key = r.session_key WHERE s.session_key IS NULL"
                ),
                &text2,
            )
            .await?;
        for [session, what] in texts(rows) {
            findings.push(
                Finding::new(
                    ErrorCode::SessionMissing,
                    format!("{table} row ({id} {what}) belongs to the missing session {session}"),
                )
                .session(&session),
            );
        }
    }
    let rows = db
        .fetch_cells(
            "SELECT m.session_key, m.turn_id FROM messages m LEFT JOIN turns t \
             ON t.turn_id = m.turn_id WHERE t.turn_id IS NULL",
            &text2,
        )
        .await?;
    for [session, turn] in texts(rows) {
        findings.push(
            Finding::new(
                ErrorCode::TurnMissing,
                format!("a message of session {session} belongs to the missing turn {turn}"),
            )
            .session(&session)
            .turn(&turn),
        );
    }
    let rows = db
        .fetch_cells(
            "SELECT session_key, COUNT(*) FROM turns WHERE status = 'running' \
             GROUP BY session_key HAVING COUNT(*) > 1",
            &[Kind::Text, Kind::Int],
        )
        .await?;
    for row in rows {
        if let [Cell::Text(session), Cell::Int(count)] = row.as_slice() {
            findings.push(
                Finding::new(
                    ErrorCode::SeveralRunningTurns,
                    format!("session {session} has {count} running turns"),
                )
                .session(session),
            );
        }
    }
    let checks = [
        (
            "SELECT s.session_key, s.latest_checkpoint_id FROM sessions s LEFT JOIN checkpoints c \
             ON c.checkpoint_id = s.latest_checkpoint_id \
             WHERE s.latest_checkpoint_id IS NOT NULL AND c.checkpoint_id IS NULL",
            ErrorCode::CheckpointMissing,
            "latest checkpoint",
        ),
        (
            "SELECT b.session_key, b.thread_id FROM codex_threads b LEFT JOIN sessions s \
             ON s.session_key = b.session_key WHERE s.session_key IS NULL",
            ErrorCode::DanglingCodexBinding,
            "Codex thread",
        ),
        (
            "SELECT s.session_key, s.node_id FROM sessions s LEFT JOIN nodes n \
             ON n.device_id = s.node_id WHERE s.node_id IS NOT NULL AND n.device_id IS NULL",
            ErrorCode::DanglingNodeBinding,
            "node",
        ),
    ];
    for (sql, code, what) in checks {
        for [session, target] in texts(db.fetch_cells(sql, &text2).await?) {
            findings.push(
                Finding::new(
                    code,
                    format!(
                        "session {session} is bound to the {what} {target}, which does not exist"
                    ),
                )
                .session(&session),
            );
        }
    }
    Ok(())
}

/// Finds checkpoint entries, turn attachments and pins whose blob is not in `media`.
async fn blobs(db: &Db, media: &MediaStore, findings: &mut Vec<Finding>) -> Result<()> {
    let mut present: HashMap<String, bool> = HashMap::new();
    let manifest = db.read_expr("manifest_json", Kind::Json);
    let rows = db
        .fetch_cells(
            &format!("SELECT session_key, checkpoint_id, {manifest} FROM checkpoints"),
            &[Kind::Text, Kind::Text, Kind::Json],
        )
        .await?;
    for [session, checkpoint, manifest] in texts(rows) {
        let manifest: CheckpointManifest =
            serde_json::from_str(&manifest).map_err(|error| StateError::Corrupt {
                table: "checkpoints",
                column: "manifest_json",
                reason: error.to_string(),
            })?;
        for id in manifest
            .entries
            .into_iter()
            .filter_map(|entry| entry.content.media_id)
        {
            if !has_blob(media, &mut present, &id).await? {
                findings.push(
                    Finding::new(
                        ErrorCode::CheckpointBlobMissing,
                        format!("checkpoint {checkpoint} of session {session} needs the missing blob {id}"),
                    )
                    .session(&session)
                    .media(&id),
                );
            }
        }
    }
    let attachments = db.read_expr("attachments_json", Kind::Json);
    let rows = db
        .fetch_cells(
            &format!("SELECT session_key, turn_id, {attachments} FROM turns"),
            &[Kind::Text, Kind::Text, Kind::Json],
        )
        .await?;
    for [session, turn, attachments] in texts(rows) {
        let attachments: Vec<Attachment> =
            serde_json::from_str(&attachments).map_err(|error| StateError::Corrupt {
                table: "turns",
                column: "attachments_json",
                reason: error.to_string(),
            })?;
        for attachment in attachments {
            if !has_blob(media, &mut present, &attachment.media_id).await? {
                findings.push(
                    Finding::new(
                        ErrorCode::AttachmentBlobMissing,
                        format!(
                            "turn {turn} of session {session} has the attachment {}, whose blob is missing",
                            attachment.media_id
                        ),
                    )
                    .session(&session)
                    .turn(&turn)
                    .media(&attachment.media_id),
                );
            }
        }
    }
    let rows = db
        .fetch_cells(
            "SELECT media_id, reason FROM media_pins",
            &[Kind::Text, Kind::Text],
        )
        .await?;
    for [id, reason] in texts(rows) {
        if !has_blob(media, &mut present, &id).await? {
            findings.push(
                Finding::new(
                    ErrorCode::PinnedBlobMissing,
                    format!("the blob {id} is pinned ({reason}) but missing"),
                )
                .media(&id),
            );
        }
    }
    Ok(())
}

/// Returns whether `media` holds `id`, asking the store once per id. An id that is not a media
/// id at all is missing.
async fn has_blob(
    media: &MediaStore,
    present: &mut HashMap<String, bool>,
    id: &str,
) -> Result<bool> {
    if let Some(known) = present.get(id) {
        return Ok(*known);
    }
    let found = match media.contains(id).await {
        Ok(found) => found,
        Err(gatehouse_media::MediaError::InvalidId) => false,
        Err(error) => return Err(error.into()),
    };
    present.insert(id.to_owned(), found);
    Ok(found)
}

/// Returns the rows whose `N` cells are all text, as arrays of strings.
fn texts<const N: usize>(rows: Vec<Vec<Cell>>) -> Vec<[String; N]> {
    rows.into_iter()
        .filter_map(|row| {
            let values: Vec<String> = row
                .into_iter()
                .filter_map(|cell| match cell {
                    Cell::Text(text) => Some(text),
                    _ => None,
                })
                .collect();
            values.try_into().ok()
        })
        .collect()
}
