//! Files in and out of a channel ([`gatehouse_channels::files`] holds the bounds).
//!
//! - **In.** A file an admitted message carries is read (inline from a webhook body, or
//!   downloaded from the homeserver with the bot's token) up to the Gateway's upload bound
//!   (`--media-max-bytes`), stored under the MIME type its bytes show, charged to the channel
//!   sender on the channel (`channel:<name>:<sender>`, with an API key's default media share),
//!   pinned, granted to the session,
//!   and attached to the turn, which stages it on the Harness as an API attachment. A refused
//!   file becomes a line of the message's text. Files of refused or ignored messages are never
//!   fetched.
//! - **Out.** A turn's reply artifacts (fetched into the media store as the turn ended) are read
//!   back and sent with its reply, within [`gatehouse_channels::files::MAX_REPLY_FILES`] and
//!   [`gatehouse_channels::files::MAX_REPLY_FILE_BYTES`].

use gatehouse_api::sessions::Attachment;
use gatehouse_channels::files::MAX_FILES_PER_MESSAGE;
use gatehouse_channels::files::MAX_REPLY_FILE_BYTES;
use gatehouse_channels::files::MAX_REPLY_FILES;
use gatehouse_channels::files::OutgoingFile;
use gatehouse_channels::files::display_name;
use gatehouse_channels::files::refusal_note;
use gatehouse_channels::files::sniff_mime_type;
use gatehouse_channels::matrix::MatrixClient;

use crate::audit::loggable;
use crate::intake::Incoming;
use crate::intake::Intake;
use crate::intake::IntakeError;

/// Where a received file's bytes are.
#[derive(Clone)]
pub(crate) enum FileSource {
    /// In the message itself (a webhook's base64).
    Inline(bytes::Bytes),
    /// On the homeserver, at this `mxc://` URI.
    Matrix {
        /// The bot's client.
        client: MatrixClient,
        /// The file's URI.
        url: String,
        /// How long its download may take.
        timeout: std::time::Duration,
    },
    /// On Slack, at the file's private URL (fetched with the bot token).
    Slack {
        /// The app's client.
        client: gatehouse_channels::slack::SlackClient,
        /// The shared file.
        file: gatehouse_channels::slack::SlackFile,
    },
    /// On Telegram's servers, under this `file_id`.
    Telegram {
        /// The bot's client.
        client: gatehouse_channels::telegram::TelegramClient,
        /// What `getFile` takes.
        file_id: String,
        /// Its size, when the update said.
        size: Option<u64>,
    },
}

/// A file a message carries.
#[derive(Clone)]
pub(crate) struct InboundFile {
    /// Its name, as the sender gave it.
    pub(crate) name: String,
    /// The MIME type the sender declared (only believed for text the bytes confirm).
    pub(crate) mime_type: String,
    /// Its bytes.
    pub(crate) source: FileSource,
}

impl std::fmt::Debug for InboundFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundFile")
            .field("name", &self.name)
            .field("mime_type", &self.mime_type)
            .finish_non_exhaustive()
    }
}

/// How the channels take files in and read reply artifacts.
#[derive(Clone)]
pub(crate) struct ChannelFiles {
    /// The media store's intake.
    pub(crate) intake: Intake,
    /// The most bytes of one file (the Gateway's upload bound).
    pub(crate) max_bytes: u64,
    /// The media share of each sender on a channel.
    pub(crate) share_bytes: u64,
}

/// What became of a message's files: the attachments of its turn, and a line of text for each
/// file refused.
#[derive(Debug, Default)]
pub(crate) struct TakenFiles {
    pub(crate) attachments: Vec<Attachment>,
    pub(crate) notes: Vec<String>,
}

impl ChannelFiles {
    /// Takes `files` that `sender` sent on `channel` in for `session_key`; they are charged
    /// to the sender on that channel (`channel:<name>:<sender>`), so one sender cannot take
    /// another's room.
    pub(crate) async fn take(
        &self,
        channel: &str,
        sender: &str,
        session_key: &str,
        files: Vec<InboundFile>,
    ) -> TakenFiles {
        let mut taken = TakenFiles::default();
        let owner = format!("channel:{channel}:{sender}");
        let grantee = format!("session:{session_key}");
        for (index, file) in files.into_iter().enumerate() {
            if index >= MAX_FILES_PER_MESSAGE {
                taken.notes.push(refusal_note(
                    &file.name,
                    &format!("a message passes on at most {MAX_FILES_PER_MESSAGE} files"),
                ));
                continue;
            }
            match self.take_one(&owner, &grantee, &file).await {
                Ok(media_id) => taken.attachments.push(Attachment {
                    media_id,
                    required: true,
                }),
                Err(reason) => {
                    tracing::info!(channel, file = %loggable(&file.name), reason = %loggable(&reason), "refused a file a channel received");
                    taken.notes.push(refusal_note(&file.name, &reason));
                }
            }
        }
        taken
    }

    async fn take_one(
        &self,
        owner: &str,
        grantee: &str,
        file: &InboundFile,
    ) -> Result<String, String> {
        let too_large = || format!("it is larger than {} bytes", self.max_bytes);
        let bytes = match &file.source {
            FileSource::Inline(bytes) if bytes.len() as u64 > self.max_bytes => {
                return Err(too_large());
            }
            FileSource::Inline(bytes) => bytes.clone(),
            FileSource::Matrix {
                client,
                url,
                timeout,
            } => client
                .download(url, self.max_bytes, *timeout)
                .await
                .map_err(|error| match error {
                    gatehouse_channels::matrix::MatrixError::TooLarge { .. } => too_large(),
                    other => format!("it could not be downloaded ({other})"),
                })?,
            FileSource::Slack { client, file } => client
                .download(
                    file,
                    self.max_bytes,
                    gatehouse_channels::files::DOWNLOAD_TIMEOUT,
                )
                .await
                .map_err(|error| match error {
                    gatehouse_channels::slack::SlackError::TooLarge { .. } => too_large(),
                    other => format!("it could not be downloaded ({other})"),
                })?,
            FileSource::Telegram { size, .. }
                if size.is_some_and(|size| {
                    size > gatehouse_channels::telegram::MAX_DOWNLOAD_BYTES
                }) =>
            {
                return Err(telegram_too_large());
            }
            FileSource::Telegram {
                client, file_id, ..
            } => client
                .download(
                    file_id,
                    self.max_bytes,
                    gatehouse_channels::files::DOWNLOAD_TIMEOUT,
                )
                .await
                .map_err(|error| match error {
                    gatehouse_channels::telegram::TelegramError::TooLarge { max_bytes }
                        if max_bytes == gatehouse_channels::telegram::MAX_DOWNLOAD_BYTES
                            && max_bytes < self.max_bytes =>
                    {
                        telegram_too_large()
                    }
                    gatehouse_channels::telegram::TelegramError::TooLarge { .. } => too_large(),
                    other => format!("it could not be downloaded ({other})"),
                })?,
        };
        let mime_type = sniff_mime_type(&bytes, &file.mime_type);
        let taken = self
            .intake
            .take(Incoming {
                owner,
                quota_bytes: Some(self.share_bytes),
                grantee: Some(grantee),
                pin: "channel",
                bytes,
                mime_type: &mime_type,
                filename: Some(&file.name),
            })
            .await;
        match taken {
            Ok(record) => Ok(record.id),
            Err(IntakeError::OverShare { quota_bytes, .. }) => Err(format!(
                "the sender's files on this channel would pass their media share of {quota_bytes} bytes"
            )),
            Err(error) => Err(format!("it could not be stored ({error})")),
        }
    }

    /// Reads the reply artifacts of `turn_id` back from the media store, within the reply
    /// bounds; an artifact past them, or unreadable, is left out and logged.
    ///
    /// # Errors
    /// The store's failure to list the artifacts.
    pub(crate) async fn reply_files(
        &self,
        turn_id: &str,
    ) -> Result<Vec<OutgoingFile>, gatehouse_store::StoreError> {
        let artifacts = self.intake.store.turn_artifacts(turn_id).await?;
        let mut files = Vec::new();
        let mut total: u64 = 0;
        for artifact in artifacts {
            total = total.saturating_add(artifact.size_bytes);
            if files.len() >= MAX_REPLY_FILES || total > MAX_REPLY_FILE_BYTES {
                tracing::warn!(turn_id, path = %loggable(&artifact.path), "a reply artifact is past the bounds of a channel reply; not sent");
                continue;
            }
            match self.intake.media.get(&artifact.media_id).await {
                // Named and typed again here: the name comes from the model's path, the type
                // from the node.
                Ok((record, bytes)) => files.push(OutgoingFile {
                    name: display_name(file_name(&artifact.path)),
                    mime_type: sniff_mime_type(&bytes, &record.mime_type),
                    bytes,
                }),
                Err(error) => {
                    tracing::warn!(turn_id, error = %error, "cannot read a reply artifact; not sent");
                }
            }
        }
        Ok(files)
    }
}

/// Why a file past the Bot API's download bound is refused.
fn telegram_too_large() -> String {
    format!(
        "the Telegram Bot API lets a bot download files of at most {} MB",
        gatehouse_channels::telegram::MAX_DOWNLOAD_BYTES / (1024 * 1024)
    )
}

/// The last component of a workspace path.
fn file_name(path: &str) -> &str {
    path.rsplit('/')
        .find(|part| !part.is_empty())
        .unwrap_or("file")
}
