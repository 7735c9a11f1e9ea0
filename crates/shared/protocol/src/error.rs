//! Stable error codes and the wire error shape.
//!
//! Every refusal that crosses the link or the HTTP API carries one of these codes, and every
//! stable code of the system is one variant of [`ErrorCode`]: the wire codes of the link, the
//! HTTP codes of the Gateway, the codes of failed turns and tool calls, and the codes the node
//! host, the sandbox and the CLI report. The set is closed on purpose: a caller matches on
//! [`ErrorCode`], never on message text. A code received from a newer peer that this build does
//! not know is kept as text in [`WireError::code`].
//!
//! The catalogue is one table (the `catalogue!` invocation below): each entry gives the variant,
//! its wire text, its HTTP status and, as its doc comment, its one-line meaning, and sits in an
//! [`ErrorGroup`]. `docs/errors.md` is generated from the same table by this crate's tests.
//! A code that never reaches an HTTP answer on its own (a node-host, sandbox or CLI code) has the
//! status a Gateway relaying it would use.

use serde::Deserialize;
use serde::Serialize;

/// Generates [`ErrorCode`], [`ErrorGroup`] and their tables from one list of groups and codes.
///
/// Each entry is `Variant = "WIRE_TEXT", status;` under its doc comment, which becomes both the
/// rustdoc of the variant and the text of [`ErrorCode::meaning`].
macro_rules! catalogue {
    ($(
        $(#[doc = $group_doc:literal])+
        $group:ident = $title:literal {
            $(
                $(#[doc = $doc:literal])+
                $variant:ident = $wire:literal, $status:literal;
            )+
        }
    )+) => {
        /// A stable, machine-readable error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(
                $(#[doc = $doc])+
                $variant,
            )+)+
        }

        /// The part of the system a code belongs to; it orders `docs/errors.md`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum ErrorGroup {
            $(
                $(#[doc = $group_doc])+
                $group,
            )+
        }

        impl ErrorGroup {
            /// Every group, in the order of the catalogue.
            pub const ALL: &'static [ErrorGroup] = &[$(ErrorGroup::$group),+];

            /// The heading of the group in `docs/errors.md`.
            pub const fn title(self) -> &'static str {
                match self {
                    $(ErrorGroup::$group => $title,)+
                }
            }
        }

        impl ErrorCode {
            /// Every code, in the order of the catalogue.
            pub const ALL: &'static [ErrorCode] = &[$($(ErrorCode::$variant,)+)+];

            /// Returns the code as it appears on the wire, for example `SYMLINK_REDIRECT`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($(ErrorCode::$variant => $wire,)+)+
                }
            }

            /// Returns the HTTP status the Gateway answers with this code, for example `404` for
            /// `NOT_FOUND`. A route documented to answer otherwise overrides it explicitly.
            pub const fn http_status(self) -> u16 {
                match self {
                    $($(ErrorCode::$variant => $status,)+)+
                }
            }

            /// Returns the one-line meaning of the code (its doc comment).
            pub fn meaning(self) -> &'static str {
                let text = match self {
                    $($(ErrorCode::$variant => concat!($($doc),+),)+)+
                };
                text.trim()
            }

            /// Returns the group the code is listed under.
            pub const fn group(self) -> ErrorGroup {
                match self {
                    $($(ErrorCode::$variant => ErrorGroup::$group,)+)+
                }
            }
        }
    };
}

catalogue! {
    /// Codes of any request, and those the HTTP layer answers before a handler runs.
    Request = "Requests and the HTTP layer" {
        /// The request is malformed: bad JSON, a missing or mistyped field, a bad path parameter
        /// or query string, an unknown method.
        InvalidRequest = "INVALID_REQUEST", 400;
        /// A command's parameters are well-formed JSON but not valid for the command.
        InvalidParams = "INVALID_PARAMS", 400;
        /// The body is larger than the route accepts (2 MiB for JSON bodies, the media upload
        /// limit for `POST /v1/media`).
        PayloadTooLarge = "PAYLOAD_TOO_LARGE", 413;
        /// A JSON route got a body without `Content-Type: application/json`.
        UnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE", 415;
        /// The route exists but not for this method; the `Allow` header lists the methods.
        MethodNotAllowed = "METHOD_NOT_ALLOWED", 405;
        /// Any other error status the HTTP layer answers without a handler (for example `426` for
        /// a `/node` request that is not a WebSocket upgrade); it keeps that status.
        HttpError = "HTTP_ERROR", 500;
        /// Nothing exists at the path, or no route matches it.
        NotFound = "NOT_FOUND", 404;
        /// The device is not enrolled, or the token is missing or wrong.
        Unauthorized = "UNAUTHORIZED", 401;
        /// The caller is authenticated but may not do this.
        Forbidden = "FORBIDDEN", 403;
        /// The API key is valid, but the route is outside its scopes, or the session is outside
        /// the session-key prefix the key is limited to.
        ScopeDenied = "SCOPE_DENIED", 403;
        /// The API key sent more requests in a minute, or has more turns queued or running, than
        /// its limits allow; retry after the `Retry-After` seconds.
        RateLimited = "RATE_LIMITED", 429;
        /// The API key already holds its share of open event streams and long polls
        /// (`maxStreams`), or the Gateway holds as many as it serves in all; retry after the
        /// `Retry-After` seconds or close a stream. The refusal is an answer, never a refused
        /// connection.
        StreamShareExhausted = "STREAM_SHARE_EXHAUSTED", 429;
        /// The API key or the session used its tokens for the day (`totalTokens` of the UTC
        /// day's turns at or over `--tokens-per-day` or `--session-tokens-per-day`); nothing was
        /// admitted. Retry after the `Retry-After` seconds (the next UTC day).
        BudgetExhausted = "BUDGET_EXHAUSTED", 429;
        /// The command is not declared by the node or not known to it.
        UnknownCommand = "UNKNOWN_COMMAND", 502;
        /// The peer that would serve the request is not connected.
        Unavailable = "UNAVAILABLE", 503;
        /// A dependency of the Gateway (the node, the workspace service) is unreachable.
        DependencyUnavailable = "DEPENDENCY_UNAVAILABLE", 503;
        /// The request was sent, and no answer came before the deadline.
        Timeout = "TIMEOUT", 503;
        /// The request was cancelled by its caller.
        Cancelled = "CANCELLED", 503;
        /// An unexpected internal failure.
        Internal = "INTERNAL", 500;
    }

    /// Codes of the workspace commands and of the path policy.
    Workspace = "Workspace files and the path policy" {
        /// The path is empty, relative, not valid UTF-8, or contains NUL.
        InvalidPath = "INVALID_PATH", 400;
        /// The path has a `..` segment or resolves outside the root.
        PathTraversal = "PATH_TRAVERSAL", 403;
        /// The path policy refuses the access, or a tool policy does (a tool denied to the session
        /// by its channel, called or reported run anyway).
        PolicyDenied = "POLICY_DENIED", 403;
        /// No path policy entry applies to the node.
        NoPolicy = "NO_POLICY", 403;
        /// The operating system refused the access.
        PermissionDenied = "PERMISSION_DENIED", 403;
        /// The path names a directory where a file was expected.
        IsDirectory = "IS_DIRECTORY", 400;
        /// A path component that must be a directory is not one.
        NotDirectory = "NOT_DIRECTORY", 400;
        /// The file is larger than the limit of the request or the hard limit.
        FileTooLarge = "FILE_TOO_LARGE", 413;
        /// The path crosses a symbolic link, which is never followed.
        SymlinkRedirect = "SYMLINK_REDIRECT", 403;
        /// The target of a write is a symbolic link.
        SymlinkTargetDenied = "SYMLINK_TARGET_DENIED", 403;
        /// The file has more than one hard link, so it may be an alias of a file outside the root.
        HardlinkDenied = "HARDLINK_DENIED", 403;
        /// Reading failed, or the path is not a regular file.
        ReadError = "READ_ERROR", 422;
        /// Writing failed.
        WriteError = "WRITE_ERROR", 500;
        /// The content is not canonical base64.
        InvalidBase64 = "INVALID_BASE64", 400;
        /// The content does not match `expectedSha256`.
        IntegrityFailure = "INTEGRITY_FAILURE", 422;
        /// The file exists and the request does not allow overwriting it.
        ExistsNoOverwrite = "EXISTS_NO_OVERWRITE", 409;
        /// The parent directory does not exist and `createParents` is false.
        ParentNotFound = "PARENT_NOT_FOUND", 404;
        /// A write was sent and its outcome is unknown (the node went away before answering); it
        /// is never replayed: read the file before writing again.
        UnknownOutcome = "UNKNOWN_OUTCOME", 503;
        /// The node answered something the Gateway cannot read.
        NodeBadResponse = "NODE_BAD_RESPONSE", 502;
        /// A node or a runtime failed with a code this build's catalogue does not know (a newer
        /// peer, or a hostile one); the Gateway stores and traces this code instead, and a
        /// turn's message starts with the code as sent, cut to 256 bytes.
        UnrecognizedCode = "UNRECOGNIZED_CODE", 502;
    }

    /// Codes of the node link: the handshake, frames and the node's connection.
    Link = "The node link and its handshake" {
        /// The device signature is invalid, stale, or for another nonce or key.
        DeviceAuthFailed = "DEVICE_AUTH_FAILED", 401;
        /// The setup code is unknown, expired or already used.
        SetupCodeInvalid = "SETUP_CODE_INVALID", 401;
        /// The connecting peer did not ask for the `node` role.
        RoleNotNode = "ROLE_NOT_NODE", 403;
        /// The peer's protocol version range does not include the Gateway's.
        ProtocolUnsupported = "PROTOCOL_UNSUPPORTED", 400;
        /// The `connect` request carries no device identity.
        DeviceRequired = "DEVICE_REQUIRED", 401;
        /// The device token names a device that is not enrolled.
        DeviceUnknown = "DEVICE_UNKNOWN", 401;
        /// The device token is not the one issued to this device.
        DeviceTokenMismatch = "DEVICE_TOKEN_MISMATCH", 401;
        /// The `connect` request carries neither a setup code nor a device token.
        TokenRequired = "TOKEN_REQUIRED", 401;
        /// The Gateway could not draw the random bytes of a challenge or a token.
        RandomFailed = "RANDOM_FAILED", 500;
        /// The setup code is not one the Gateway issued.
        CodeUnknown = "CODE_UNKNOWN", 401;
        /// The setup code has expired.
        CodeExpired = "CODE_EXPIRED", 401;
        /// The setup code was already used.
        CodeUsed = "CODE_USED", 401;
        /// The device public key is not 32 bytes of base64url.
        PublicKeyInvalid = "PUBLIC_KEY_INVALID", 400;
        /// The device id is not derived from the device public key.
        DeviceIdMismatch = "DEVICE_ID_MISMATCH", 401;
        /// The signed nonce is not the challenge nonce.
        NonceMismatch = "NONCE_MISMATCH", 401;
        /// The signature's time is outside the allowed clock skew.
        SignatureExpired = "SIGNATURE_EXPIRED", 401;
        /// The signature's `signedAt` is not the challenge's `ts`.
        SignedAtMismatch = "SIGNED_AT_MISMATCH", 401;
        /// The device signature is malformed or does not verify.
        SignatureInvalid = "SIGNATURE_INVALID", 401;
        /// The handshake did not complete in time.
        HandshakeTimeout = "HANDSHAKE_TIMEOUT", 408;
        /// A binary WebSocket frame arrived; the link speaks text frames only.
        BinaryFrame = "BINARY_FRAME", 400;
        /// The first request of a connection was not `connect`.
        ConnectRequired = "CONNECT_REQUIRED", 400;
        /// A frame is not valid JSON of a known frame kind.
        MalformedFrame = "MALFORMED_FRAME", 400;
        /// The parameters of `connect` cannot be read.
        ConnectParamsInvalid = "CONNECT_PARAMS_INVALID", 400;
        /// A frame is larger than the limit for the connection state.
        FrameTooLarge = "FRAME_TOO_LARGE", 413;
        /// A frame before the handshake is larger than the pre-authentication limit.
        PreauthFrameTooLarge = "PREAUTH_FRAME_TOO_LARGE", 413;
        /// A `node.invoke.progress` chunk is larger than `MAX_PROGRESS_CHUNK_BYTES`; the Gateway
        /// fails that invoke.
        ProgressChunkTooLarge = "PROGRESS_CHUNK_TOO_LARGE", 502;
        /// A line streamed through progress chunks grew past its bound without a newline; the
        /// Gateway fails that invoke.
        ProgressLineTooLong = "PROGRESS_LINE_TOO_LONG", 502;
        /// A node sent progress faster than its caller took it, past the bytes the Gateway buffers
        /// for one connection; the Gateway fails that invoke. Retrying later may succeed.
        NodeBufferExhausted = "NODE_BUFFER_EXHAUSTED", 503;
        /// A node acted for a turn whose invoke does not run on its own connection (another node's
        /// turn, or one that ended); refused and audited.
        TurnNotOwned = "TURN_NOT_OWNED", 403;
        /// A node tried to commit a message with a role other than `assistant` or `tool`; the turn
        /// fails.
        RoleNotAllowed = "ROLE_NOT_ALLOWED", 403;
        /// A node had more `node.gateway.tool` calls in flight on one connection than the Gateway
        /// answers at once; the call is refused without running and may be retried.
        TooManyToolCalls = "TOO_MANY_TOOL_CALLS", 429;
        /// No Harness node with the workspace commands is connected.
        NodeNotConnected = "NODE_NOT_CONNECTED", 503;
        /// The connected node does not serve every command its runtime needs.
        NodeRuntimeIncomplete = "NODE_RUNTIME_INCOMPLETE", 503;
    }

    /// Codes of sessions, turns and their attachments.
    Turn = "Sessions and turns" {
        /// The session has a running turn, so it cannot be moved now; retry after the turn ends.
        SessionBusy = "SESSION_BUSY", 409;
        /// An event-stream subscriber fell further behind than the Gateway buffers for it; the
        /// stream ends and the client resumes from the durable log with `after=`.
        SlowConsumer = "SLOW_CONSUMER", 503;
        /// A turn's runtime tried to store more than the Gateway keeps for one turn (messages and
        /// tool events together); the turn fails and what it stored before stays.
        TurnStorageExceeded = "TURN_STORAGE_EXCEEDED", 507;
        /// A node called a Gateway tool for a turn that is not running.
        TurnNotRunning = "TURN_NOT_RUNNING", 409;
        /// The turn lost its claim to another driver of the session; its result is not stored.
        TurnFenced = "TURN_FENCED", 409;
        /// The turn did not finish before its deadline.
        TurnTimeout = "TURN_TIMEOUT", 504;
        /// No runtime is configured for the session's turns.
        NoRuntime = "NO_RUNTIME", 503;
        /// The session's runtime does not take attachments.
        AttachmentsUnsupported = "ATTACHMENTS_UNSUPPORTED", 400;
        /// A staged attachment id is not one the Gateway issued.
        InvalidStagedId = "INVALID_STAGED_ID", 400;
        /// An attachment's media is not in the media store.
        AttachmentNotFound = "ATTACHMENT_NOT_FOUND", 404;
        /// An attachment could not be written into the session workspace.
        AttachmentTransferFailed = "ATTACHMENT_TRANSFER_FAILED", 502;
        /// Staging the turn's attachments failed inside the Gateway.
        StagingFailure = "STAGING_FAILURE", 500;
        /// The session workspace is gone on the node and must be restored from a checkpoint first.
        WorkspaceMissing = "WORKSPACE_MISSING", 409;
        /// Rebuilding a lost session workspace from its checkpoint failed.
        WorkspaceRestoreFailed = "WORKSPACE_RESTORE_FAILED", 502;
        /// The turn was aborted by its caller, or its runtime reported it interrupted.
        Aborted = "ABORTED", 503;
        /// The Gateway shut down or stopped while the turn ran; the turn is `interrupted` (at
        /// shutdown, or at the next start after a crash) and never replayed.
        Interrupted = "INTERRUPTED", 503;
    }

    /// Codes of the native runtime's workers and of checkpoints.
    Worker = "Workers and checkpoints" {
        /// Every worker slot of the node is taken by other sessions.
        WorkerCapacityExhausted = "WORKER_CAPACITY_EXHAUSTED", 503;
        /// The worker exited during a turn.
        WorkerCrashed = "WORKER_CRASHED", 502;
        /// A line between a node host and its worker (a turn request or a worker event) is longer
        /// than its bound (`MAX_WORKER_REQUEST_LINE_BYTES`, `MAX_WORKER_EVENT_LINE_BYTES`); the
        /// turn fails, and a worker that wrote one is stopped.
        WorkerLineTooLong = "WORKER_LINE_TOO_LONG", 502;
        /// A checkpoint manifest breaks the manifest rules (a path that is not canonical, an entry
        /// below a link, an unknown kind, a bound exceeded); the details carry the stable `reason`.
        CheckpointInvalid = "CHECKPOINT_INVALID", 422;
        /// The session's retained checkpoints would hold more than the checkpoint quota
        /// (`--checkpoint-quota-bytes`); the session keeps its last good checkpoint and the turn
        /// fails.
        CheckpointQuotaExceeded = "CHECKPOINT_QUOTA_EXCEEDED", 507;
        /// Removing a turn's copies of its skills failed.
        SkillCleanupFailed = "SKILL_CLEANUP_FAILED", 500;
    }

    /// Codes of session workspace sources (`empty`, `repository`, `worktree`).
    Source = "Session workspace sources" {
        /// The session's workspace source cannot change: the session has messages.
        SessionSourceLocked = "SESSION_SOURCE_LOCKED", 409;
        /// The session's repository cannot be fetched, or its ref does not resolve to a commit.
        SourceUnavailable = "SOURCE_UNAVAILABLE", 502;
        /// The previous turn's workspace result is still being reconciled with the session's
        /// worktree; the turn waited for it and gave up.
        WorkspaceReconciling = "WORKSPACE_RECONCILING", 503;
    }

    /// Codes of the Gateway's store and media store.
    Storage = "Store and media" {
        /// The record already exists.
        AlreadyExists = "ALREADY_EXISTS", 409;
        /// The disk under the store or the media is full.
        StorageFull = "STORAGE_FULL", 507;
        /// The store cannot be reached or is busy; retrying later may succeed.
        StoreUnavailable = "STORE_UNAVAILABLE", 503;
        /// Another Gateway holds the store (its state directory's database, or the PostgreSQL
        /// database): a Gateway refuses to start beside it, and stops when, after a lost
        /// connection, another Gateway took its database over.
        StoreInUse = "STORE_IN_USE", 503;
        /// A live Gateway replica on the same store holds this replica id (`--replica-id`):
        /// give each replica an id of its own, or wait for the old process's lease to expire.
        ReplicaIdInUse = "REPLICA_ID_IN_USE", 503;
        /// A Gateway replica's lease expired before it renewed it (it stalled, or could not
        /// reach its store): it stops its running turns, which the other replicas mark
        /// interrupted, closes its node links, which reconnect, and takes a new lease.
        ReplicaLeaseLost = "REPLICA_LEASE_LOST", 503;
        /// The store failed or holds a corrupt record.
        StoreFailure = "STORE_FAILURE", 500;
        /// The Gateway's media quota (`--media-quota-bytes`) is used up; a native turn whose
        /// checkpoint needs more room fails with it and keeps the session's last good checkpoint.
        MediaQuotaExceeded = "MEDIA_QUOTA_EXCEEDED", 507;
        /// The API key's media share (`mediaQuotaBytes`: its uploads plus the checkpoints and
        /// worktree versions of the sessions it created) is used up; delete uploads it no longer
        /// needs (`DELETE /v1/media/{mediaId}`). A native turn of one of its sessions whose
        /// checkpoint needs more room fails with it and keeps the session's last good checkpoint.
        KeyMediaQuotaExceeded = "KEY_MEDIA_QUOTA_EXCEEDED", 507;
        /// The media id is not one the media store issues.
        InvalidMediaId = "INVALID_MEDIA_ID", 400;
        /// The MIME type is not a valid `type/subtype`.
        InvalidMimeType = "INVALID_MIME_TYPE", 400;
        /// No media has this id.
        MediaNotFound = "MEDIA_NOT_FOUND", 404;
        /// The stored media does not match its recorded digest or size.
        MediaCorrupt = "MEDIA_CORRUPT", 500;
        /// The media store failed.
        MediaStoreFailure = "MEDIA_STORE_FAILURE", 500;
        /// The media URL (`--media`) is neither `file://DIR` nor `s3://BUCKET/PREFIX`.
        MediaUrlScheme = "MEDIA_URL_SCHEME", 400;
        /// A `file://` media URL names no directory.
        MediaUrlEmptyPath = "MEDIA_URL_EMPTY_PATH", 400;
        /// An `s3://` media URL names no bucket.
        MediaUrlEmptyBucket = "MEDIA_URL_EMPTY_BUCKET", 400;
        /// The bucket of an `s3://` media URL is not a valid S3 bucket name.
        MediaUrlBadBucket = "MEDIA_URL_BAD_BUCKET", 400;
        /// The prefix of an `s3://` media URL has an empty, `.` or `..` segment or a control
        /// character.
        MediaUrlBadPrefix = "MEDIA_URL_BAD_PREFIX", 400;
        /// An `s3://` media URL carries credentials, a port, a query or a fragment, which belong in
        /// the environment.
        MediaUrlExtraParts = "MEDIA_URL_EXTRA_PARTS", 400;
    }

    /// Codes of documents and of the memory index.
    Memory = "Documents and memory" {
        /// The document cannot be stored as sent.
        InvalidDocument = "INVALID_DOCUMENT", 422;
        /// Detail of `INVALID_DOCUMENT`: the content is not valid Unicode.
        InvalidValue = "INVALID_VALUE", 422;
        /// Detail of `INVALID_DOCUMENT`: the content holds a NUL character.
        InvalidFormat = "INVALID_FORMAT", 422;
        /// Detail of `INVALID_DOCUMENT`: the content is longer than a document may be.
        TooLong = "TOO_LONG", 422;
        /// Memory search is not available (no embedder, or the index is not ready).
        MemoryUnavailable = "MEMORY_UNAVAILABLE", 503;
        /// Updating or reading the memory index failed.
        MemoryIndexFailed = "MEMORY_INDEX_FAILED", 500;
    }

    /// Codes of model calls, whichever runtime makes them.
    Model = "Models" {
        /// The model could not be reached or did not answer in time (connect error, 5xx, timeout).
        ModelUnavailable = "MODEL_UNAVAILABLE", 503;
        /// The model refused the credential (401/403) or no credential is configured.
        ModelAuthFailed = "MODEL_AUTH_FAILED", 502;
        /// The model is rate limiting us (429).
        ModelRateLimited = "MODEL_RATE_LIMITED", 429;
        /// The model answered something that cannot be used: malformed SSE or JSON, a stream
        /// without its end marker, a failed or incomplete response, or a shape we cannot interpret.
        ModelBadResponse = "MODEL_BAD_RESPONSE", 502;
        /// The conversation no longer fits the model's context window.
        ContextWindowExceeded = "CONTEXT_WINDOW_EXCEEDED", 422;
        /// The turn's model calls used more tokens than `--turn-max-tokens` allows; the turn
        /// ended there, its transcript kept.
        TurnBudgetExceeded = "TURN_BUDGET_EXCEEDED", 422;
    }

    /// Codes of the Codex runtime.
    Codex = "The Codex runtime" {
        /// The Codex app-server is not reachable through a connected codex node.
        CodexUnavailable = "CODEX_UNAVAILABLE", 503;
        /// The session's Codex thread cannot be resumed; it is never silently replaced.
        CodexThreadUnavailable = "CODEX_THREAD_UNAVAILABLE", 503;
        /// The app-server answered something the runtime cannot read.
        CodexBadResponse = "CODEX_BAD_RESPONSE", 502;
        /// The app-server connection is not initialized yet.
        CodexNotInitialized = "CODEX_NOT_INITIALIZED", 503;
        /// Codex reported a failed turn with no more specific code.
        CodexTurnFailed = "CODEX_TURN_FAILED", 502;
        /// Codex reported a failure of its own sandbox.
        SandboxError = "SANDBOX_ERROR", 500;
        /// The approval policy declined a command or a file change Codex asked for.
        PolicyDeclined = "POLICY_DECLINED", 403;
        /// A Codex turn produced more artifacts than a turn keeps.
        TooManyArtifacts = "TOO_MANY_ARTIFACTS", 413;
        /// A Codex turn's artifacts are larger than a turn keeps.
        ArtifactsTooLarge = "ARTIFACTS_TOO_LARGE", 413;
    }

    /// Codes of the native agent, its tools and the `exec` sandbox.
    Agent = "The native agent, its tools and the sandbox" {
        /// The turn made the maximum number of model calls and the model still asked for tools.
        AgentStepLimit = "AGENT_STEP_LIMIT", 422;
        /// The turn was cancelled by its caller.
        AgentCancelled = "AGENT_CANCELLED", 503;
        /// No sandbox is available and the sandbox policy requires one.
        SandboxUnavailable = "SANDBOX_UNAVAILABLE", 503;
        /// The sandbox helper could not apply one of its layers (descriptors, resource limits,
        /// `no_new_privs`, Landlock or seccomp), so the command was not run; the message names it.
        SandboxLayerFailed = "SANDBOX_LAYER_FAILED", 500;
        /// Startup: the kernel gives no Landlock and `--sandbox-allow-missing landlock` was not
        /// passed.
        SandboxLandlockUnavailable = "SANDBOX_LANDLOCK_UNAVAILABLE", 503;
        /// Startup: the kernel gives no seccomp filters and `--sandbox-allow-missing seccomp` was
        /// not passed.
        SandboxSeccompUnavailable = "SANDBOX_SECCOMP_UNAVAILABLE", 503;
        /// A sandboxed command held more processes than the sandbox's process limit, so the
        /// supervisor inside the sandbox killed every process of the command (the command's output
        /// ends with a line naming the limit and this code).
        SandboxProcessLimit = "SANDBOX_PROCESS_LIMIT", 422;
        /// Startup: bubblewrap is there but the hardened sandbox does not start (for example user
        /// namespaces are refused); the message carries bubblewrap's own.
        SandboxTrialFailed = "SANDBOX_TRIAL_FAILED", 500;
        /// The sandbox helper got a spec it cannot read (a node and helper of different builds).
        SandboxSpecInvalid = "SANDBOX_SPEC_INVALID", 400;
        /// A tool was called that is not offered in this session.
        ToolNotAllowed = "TOOL_NOT_ALLOWED", 403;
        /// `edit` found no occurrence of `old_string`.
        EditNoMatch = "EDIT_NO_MATCH", 422;
        /// `edit` found several occurrences of `old_string` and `replace_all` was not set.
        EditAmbiguous = "EDIT_AMBIGUOUS", 422;
        /// `apply_patch` got a patch it cannot parse.
        PatchInvalid = "PATCH_INVALID", 400;
        /// `apply_patch` got a patch that does not fit the files in the workspace.
        PatchConflict = "PATCH_CONFLICT", 409;
        /// A command could not be started.
        ExecFailed = "EXEC_FAILED", 500;
        /// `process` was given an id it does not know.
        ProcessNotFound = "PROCESS_NOT_FOUND", 404;
        /// `process start` was refused because too many background processes exist.
        ProcessLimit = "PROCESS_LIMIT", 429;
        /// A file is not valid UTF-8 where text is required.
        NotText = "NOT_TEXT", 422;
        /// A tool failed in an unexpected way.
        ToolInternal = "TOOL_INTERNAL", 500;
    }

    /// Findings of `gatehouse state check`, each a problem in a Gateway store; they are never an
    /// HTTP answer, so they carry the status of a broken store.
    StateCheck = "Store integrity findings" {
        /// A session's transcript is not numbered 1, 2, ... up to its counter.
        TranscriptSequenceBroken = "TRANSCRIPT_SEQUENCE_BROKEN", 500;
        /// A session's event log is not numbered 1, 2, ... up to its counter.
        EventSequenceBroken = "EVENT_SEQUENCE_BROKEN", 500;
        /// A turn, message, event or checkpoint belongs to a session that does not exist.
        SessionMissing = "SESSION_MISSING", 500;
        /// A message belongs to a turn that does not exist.
        TurnMissing = "TURN_MISSING", 500;
        /// A session has more than one running turn.
        SeveralRunningTurns = "SEVERAL_RUNNING_TURNS", 500;
        /// A session's latest checkpoint does not exist.
        CheckpointMissing = "CHECKPOINT_MISSING", 500;
        /// A Codex thread binding names a session that does not exist.
        DanglingCodexBinding = "DANGLING_CODEX_BINDING", 500;
        /// A session is bound to a node that is not enrolled.
        DanglingNodeBinding = "DANGLING_NODE_BINDING", 500;
        /// A checkpoint entry's blob is not in the media store.
        CheckpointBlobMissing = "CHECKPOINT_BLOB_MISSING", 500;
        /// A turn attachment's blob is not in the media store.
        AttachmentBlobMissing = "ATTACHMENT_BLOB_MISSING", 500;
        /// A pinned upload's blob is not in the media store.
        PinnedBlobMissing = "PINNED_BLOB_MISSING", 500;
    }

    /// Codes the node host reports in its log, its status file and its exit.
    NodeHost = "The node host" {
        /// The setup code file cannot be read.
        SetupCodeUnreadable = "SETUP_CODE_UNREADABLE", 400;
        /// The node has no device token and no setup code to enroll with.
        NoCredential = "NO_CREDENTIAL", 401;
        /// No Gateway URL is configured or saved.
        NoGatewayUrl = "NO_GATEWAY_URL", 400;
        /// The Gateway URL is not a `ws://` or `wss://` URL.
        InvalidGatewayUrl = "INVALID_GATEWAY_URL", 400;
        /// A file of the node's state is a symbolic link, which is never followed.
        StateSymlink = "STATE_SYMLINK", 500;
        /// A file of the node's state cannot be parsed.
        InvalidStateFile = "INVALID_STATE_FILE", 500;
        /// Reading or writing the node's state failed.
        StateIo = "STATE_IO", 500;
        /// The workspace root cannot be used.
        WorkspaceUnusable = "WORKSPACE_UNUSABLE", 500;
        /// Connecting to the Gateway failed.
        ConnectFailed = "CONNECT_FAILED", 503;
        /// The Gateway closed the link.
        LinkClosed = "LINK_CLOSED", 503;
        /// The link carried nothing for longer than its idle limit.
        LinkIdle = "LINK_IDLE", 503;
        /// The Gateway broke the link protocol.
        ProtocolError = "PROTOCOL_ERROR", 502;
        /// The device token the Gateway issued could not be saved.
        SaveDeviceTokenFailed = "SAVE_DEVICE_TOKEN_FAILED", 500;
        /// The node's status file cannot be written.
        StatusIo = "STATUS_IO", 500;
        /// The last error recorded in a status file is not a stable code.
        UnknownError = "UNKNOWN_ERROR", 500;
    }

    /// Codes of the Gateway's channels: chat platforms and signed webhooks.
    Channel = "Channels" {
        /// An inbound webhook's signature, secret header or timestamp did not verify (a missing
        /// header, a wrong signature, or a timestamp more than 300 s from the Gateway's clock):
        /// nothing was admitted.
        ChannelSignatureInvalid = "CHANNEL_SIGNATURE_INVALID", 401;
        /// No channel of that name is configured and enabled on this Gateway.
        ChannelNotFound = "CHANNEL_NOT_FOUND", 404;
        /// No pairing with that code is pending on the channel (it expired, or was approved or
        /// denied already).
        PairingNotFound = "PAIRING_NOT_FOUND", 404;
        /// `[[channels]]` in the config file is invalid; the message names the key
        /// (`channels[i].key`).
        ChannelConfigInvalid = "CHANNEL_CONFIG_INVALID", 400;
        /// A channel's credential (`*-env`, `*-file`) is not set or cannot be read.
        ChannelCredentialMissing = "CHANNEL_CREDENTIAL_MISSING", 400;
        /// `gatehouse up` was given an enabled channel: channel credentials need dedicated
        /// execution, a Gateway (`gatehouse gateway`) with its node hosts on other machines or
        /// users.
        ChannelsNeedDedicated = "CHANNELS_NEED_DEDICATED", 400;
        /// A polling channel cannot reach its platform, or the platform refuses its credential
        /// (a Matrix `/sync` that fails, an access token of another user); the channel retries
        /// with backoff and `GET /v1/channels` shows it `degraded`.
        ChannelUnavailable = "CHANNEL_UNAVAILABLE", 502;
        /// A reply could not be delivered to its channel within the retry bound; the transcript
        /// keeps it and the audit trail has a `delivery.failed` row.
        DeliveryFailed = "DELIVERY_FAILED", 502;
    }

    /// Codes of the scratch volume and of deployment rendering.
    Deploy = "Scratch space and deployment" {
        /// The scratch directory does not exist.
        ScratchNotFound = "SCRATCH_NOT_FOUND", 500;
        /// The scratch path is not a directory.
        ScratchNotDirectory = "SCRATCH_NOT_DIRECTORY", 500;
        /// The scratch directory is on a read-only file system.
        ScratchReadOnly = "SCRATCH_READ_ONLY", 500;
        /// The scratch directory cannot be written by this process.
        ScratchNotWritable = "SCRATCH_NOT_WRITABLE", 500;
        /// The scratch volume has no space left.
        ScratchNoSpace = "SCRATCH_NO_SPACE", 507;
        /// The scratch directory is unsafe (a link, or writable by others).
        ScratchUnsafe = "SCRATCH_UNSAFE", 500;
        /// Checking the scratch directory failed.
        ScratchIo = "SCRATCH_IO", 500;
        /// The installation file is not valid YAML.
        InstallationYamlInvalid = "INSTALLATION_YAML_INVALID", 400;
        /// The installation file has a key the schema does not know.
        InstallationUnknownKey = "INSTALLATION_UNKNOWN_KEY", 400;
        /// The installation file breaks its schema.
        InstallationSchemaViolation = "INSTALLATION_SCHEMA_VIOLATION", 400;
        /// A value of the installation file is not allowed.
        InstallationInvalidValue = "INSTALLATION_INVALID_VALUE", 400;
        /// The scratch binding of the installation does not match the topology.
        ScratchBindingMismatch = "SCRATCH_BINDING_MISMATCH", 400;
        /// A rendered manifest does not parse back into its Kubernetes type.
        ManifestInvalid = "MANIFEST_INVALID", 500;
    }
}

impl std::str::FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ErrorCode::parse(text).ok_or_else(|| UnknownErrorCode(text.to_owned()))
    }
}

/// A code that this build does not know, as the error of [`ErrorCode::from_str`].
///
/// [`ErrorCode::from_str`]: std::str::FromStr::from_str
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownErrorCode(pub String);

impl std::fmt::Display for UnknownErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown error code {}", self.0)
    }
}

impl std::error::Error for UnknownErrorCode {}

impl ErrorCode {
    /// Parses a wire code; returns `None` for a code this build does not know.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == text)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AsRef<str> for ErrorCode {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<ErrorCode> for String {
    fn from(code: ErrorCode) -> Self {
        code.as_str().to_owned()
    }
}

/// A code compares equal to its wire text, so `error.code() == "NOT_FOUND"` keeps working where
/// a code is checked against text received from a peer.
impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<ErrorCode> for str {
    fn eq(&self, other: &ErrorCode) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<ErrorCode> for &str {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<ErrorCode> for String {
    fn eq(&self, other: &ErrorCode) -> bool {
        self == other.as_str()
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ErrorCode::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text}")))
    }
}

/// The error shape of a `res` frame and of a failed node command.
///
/// `code` is text so that a code from a newer peer survives a round trip; use [`WireError::known_code`]
/// to match on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireError {
    /// The stable code, for example `NOT_FOUND`.
    pub code: String,
    /// A short human-readable explanation that says what to do.
    pub message: String,
    /// Structured context, such as `canonicalPath`; never file content or secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// True when the same request may succeed if sent again later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

impl WireError {
    /// Returns an error with `code` and `message` and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.as_str().to_owned(),
            message: message.into(),
            details: None,
            retryable: None,
        }
    }

    /// Returns the same error with another code, for codes outside [`ErrorCode`] (for example
    /// a model's or a worker's code passed through).
    #[must_use]
    pub fn with_code(mut self, code: &str) -> Self {
        self.code = code.to_owned();
        self
    }

    /// Returns the same error with `details` attached.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Returns the code as an [`ErrorCode`], or `None` when this build does not know it.
    pub fn known_code(&self) -> Option<ErrorCode> {
        ErrorCode::parse(&self.code)
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for WireError {}
