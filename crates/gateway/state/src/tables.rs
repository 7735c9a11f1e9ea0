//! The catalogue of the Gateway store's tables, as the copier and the checks see them.
//!
//! Every table the migrations of either backend create is listed here with every column it ends
//! up with, in the order rows must be inserted so each foreign key finds its parent. The test
//! `every_table_and_column_of_the_schema_is_in_the_catalogue` compares this list with the
//! migration files and with the live schema of a fresh store on both backends, so a table or
//! column added to the schema and not here fails the build's tests rather than being left
//! behind by a migration.

/// How a column's value is read, written and hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A 64-bit integer (`INTEGER` on SQLite, `BIGINT` on PostgreSQL).
    Int,
    /// Text.
    Text,
    /// JSON text (`TEXT` on SQLite, `JSONB` on PostgreSQL).
    Json,
}

/// One column of a table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The column name.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
}

/// One table of the Gateway store.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The table name, the same on both backends.
    pub name: &'static str,
    /// The columns that are copied and hashed.
    pub columns: &'static [Column],
    /// The columns a PostgreSQL source is read in order of (its primary key, or the column
    /// that keeps the order rows were saved in). A SQLite source is read in `rowid` order.
    /// Rows are inserted into the target in that order, so its `rowid` (SQLite) or generated
    /// order column (PostgreSQL) follows the source's.
    pub postgres_order: &'static [&'static str],
    /// A PostgreSQL identity column that is copied: after the copy its sequence is moved past
    /// the largest copied value, so the next row the Gateway writes gets a new number.
    pub identity: Option<&'static str>,
    /// A PostgreSQL-only identity column that is not copied: the target generates it in the
    /// order rows are inserted (SQLite keeps that order in `rowid`).
    pub generated_order: Option<&'static str>,
}

const fn int(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Int,
    }
}

const fn text(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Text,
    }
}

const fn json(name: &'static str) -> Column {
    Column {
        name,
        kind: Kind::Json,
    }
}

/// Every table of the Gateway store, parents before children.
pub const TABLES: &[Table] = &[
    Table {
        name: "nodes",
        columns: &[
            text("device_id"),
            text("public_key"),
            text("display_name"),
            text("runtime"),
            json("commands_json"),
            text("workspace_root"),
            text("device_token_sha256"),
            int("enrolled_at_ms"),
            int("last_seen_at_ms"),
        ],
        postgres_order: &["device_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "setup_codes",
        columns: &[
            text("token_sha256"),
            int("created_at_ms"),
            int("expires_at_ms"),
            int("used_at_ms"),
            text("used_by_device_id"),
        ],
        postgres_order: &["token_sha256"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "audit_events",
        columns: &[
            int("seq"),
            int("at_ms"),
            text("actor"),
            text("action"),
            text("outcome"),
            text("reason_code"),
            json("details_json"),
        ],
        postgres_order: &["seq"],
        identity: Some("seq"),
        generated_order: None,
    },
    Table {
        name: "sessions",
        columns: &[
            text("session_key"),
            text("runtime"),
            int("created_at_ms"),
            int("updated_at_ms"),
            int("next_message_seq"),
            int("next_event_seq"),
            text("latest_checkpoint_id"),
            text("node_id"),
            int("node_bound_at_ms"),
            json("workspace_json"),
            text("workspace_commit"),
            json("worktree_base_json"),
        ],
        postgres_order: &["session_key"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "turns",
        columns: &[
            text("turn_id"),
            text("session_key"),
            int("turn_no"),
            text("status"),
            text("queue_mode"),
            text("idempotency_key"),
            json("attachments_json"),
            text("reply"),
            text("error_code"),
            text("error_message"),
            int("created_at_ms"),
            int("started_at_ms"),
            int("ended_at_ms"),
            int("input_tokens"),
            int("output_tokens"),
            int("total_tokens"),
            text("claim_replica"),
            int("claim_epoch"),
            int("cached_input_tokens"),
            int("model_calls"),
            int("retries"),
            text("model"),
            text("api_key"),
        ],
        postgres_order: &["turn_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "messages",
        columns: &[
            text("session_key"),
            int("seq"),
            text("turn_id"),
            text("role"),
            text("content"),
            text("tool_name"),
            int("created_at_ms"),
        ],
        postgres_order: &["session_key", "seq"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "session_events",
        columns: &[
            text("session_key"),
            int("seq"),
            text("kind"),
            json("payload_json"),
            int("created_at_ms"),
        ],
        postgres_order: &["session_key", "seq"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "checkpoints",
        columns: &[
            text("checkpoint_id"),
            text("session_key"),
            json("manifest_json"),
            int("created_at_ms"),
        ],
        postgres_order: &["saved_order"],
        identity: None,
        generated_order: Some("saved_order"),
    },
    Table {
        name: "codex_threads",
        columns: &[text("session_key"), text("thread_id"), int("bound_at_ms")],
        postgres_order: &["session_key"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "checkpoint_blobs",
        columns: &[text("media_id"), int("size_bytes"), int("registered_at_ms")],
        postgres_order: &["media_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "media_pins",
        columns: &[text("media_id"), text("reason"), int("pinned_at_ms")],
        postgres_order: &["media_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "media_grants",
        columns: &[text("media_id"), text("grantee"), int("granted_at_ms")],
        postgres_order: &["media_id", "grantee"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "api_keys",
        columns: &[
            text("name"),
            text("secret_sha256"),
            json("scopes_json"),
            text("session_prefix"),
            int("created_at_ms"),
            int("expires_at_ms"),
            int("last_used_at_ms"),
            int("requests_per_minute"),
            int("concurrent_turns"),
            int("max_streams"),
            int("media_quota_bytes"),
            int("tokens_per_day"),
        ],
        postgres_order: &["name"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "session_owners",
        columns: &[text("session_key"), text("owner"), int("created_at_ms")],
        postgres_order: &["session_key"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "media_charges",
        columns: &[
            text("owner"),
            text("media_id"),
            text("kind"),
            int("size_bytes"),
            int("charged_at_ms"),
        ],
        postgres_order: &["owner", "media_id", "kind"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "worktree_versions",
        columns: &[
            text("session_key"),
            int("version"),
            text("origin"),
            text("turn_id"),
            text("actor"),
            json("manifest_json"),
            int("created_at_ms"),
        ],
        postgres_order: &["session_key", "version"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "worktree_results",
        columns: &[
            text("turn_id"),
            text("session_key"),
            text("staged_ref"),
            json("manifest_json"),
            text("state"),
            json("applied_json"),
            json("conflicts_json"),
            int("version"),
            int("staged_at_ms"),
            int("applied_at_ms"),
        ],
        postgres_order: &["turn_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_inbound",
        columns: &[
            text("channel"),
            text("message_id"),
            text("outcome"),
            text("turn_id"),
            int("received_at_ms"),
        ],
        postgres_order: &["channel", "message_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_turns",
        columns: &[
            text("turn_id"),
            text("channel"),
            text("message_id"),
            text("conversation"),
            text("sender"),
            text("thread"),
            text("stream_message"),
        ],
        postgres_order: &["turn_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_pairings",
        columns: &[
            text("channel"),
            text("code"),
            text("sender"),
            text("conversation"),
            int("created_at_ms"),
            int("expires_at_ms"),
        ],
        postgres_order: &["channel", "code"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_senders",
        columns: &[text("channel"), text("sender"), int("approved_at_ms")],
        postgres_order: &["channel", "sender"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_outbox",
        columns: &[
            text("delivery_id"),
            text("channel"),
            text("turn_id"),
            text("in_reply_to"),
            text("conversation"),
            text("recipient"),
            text("text"),
            text("state"),
            int("attempts"),
            int("next_attempt_at_ms"),
            text("claimed_by"),
            int("claimed_until_ms"),
            text("last_error"),
            int("created_at_ms"),
            int("ended_at_ms"),
            text("thread"),
            int("claims"),
        ],
        postgres_order: &["delivery_id"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "turn_artifacts",
        columns: &[
            text("turn_id"),
            text("path"),
            text("media_id"),
            int("size_bytes"),
            int("created_at_ms"),
        ],
        postgres_order: &["turn_id", "path"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_sessions",
        columns: &[
            text("session_key"),
            text("channel"),
            text("peer"),
            text("room"),
        ],
        postgres_order: &["session_key"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_rooms",
        columns: &[
            text("channel"),
            text("room"),
            text("peer"),
            int("created_at_ms"),
        ],
        postgres_order: &["channel", "room"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "channel_state",
        columns: &[
            text("channel"),
            text("cursor"),
            text("holder"),
            int("held_until_ms"),
            int("updated_at_ms"),
        ],
        postgres_order: &["channel"],
        identity: None,
        generated_order: None,
    },
    Table {
        name: "shared_secrets",
        columns: &[text("name"), text("value"), int("created_at_ms")],
        postgres_order: &["name"],
        identity: None,
        generated_order: None,
    },
];

/// The tables of the store that are not Gateway state and are never copied or checked: the
/// engines' own bookkeeping, the copier's progress markers, and the replicas' leases and node
/// links, which describe the processes running now (a copied installation starts without
/// them, and a turn a copied lease left running is marked interrupted at the first start).
pub const NOT_STATE: &[&str] = &[
    "_sqlx_migrations",
    "sqlite_sequence",
    crate::migrate::PROGRESS_TABLE,
    "replicas",
    "node_links",
];

/// Returns the table called `name`.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|table| table.name == name)
}
