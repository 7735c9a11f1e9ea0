//! The JSON Schema of the whole API: every type of this crate under `$defs`, and under
//! `routes` each route with the types of its query, body and answer (as `$ref`s).
//!
//! The committed copy is `crates/shared/api/schema/api.schema.json`; the crate's tests fail when it is
//! stale, and `GATEHOUSE_BLESS=1 cargo test -p gatehouse-api --test schema_fixture` rewrites it.

use schemars::JsonSchema;
use schemars::SchemaGenerator;
use serde_json::Map;
use serde_json::Value;

use crate::audit;
use crate::channels;
use crate::documents;
use crate::error;
use crate::events;
use crate::health;
use crate::keys;
use crate::media;
use crate::memory;
use crate::nodes;
use crate::openai;
use crate::sessions;
use crate::skills;
use crate::usage;

/// Where a route's types go in [`api_schema`]'s `routes`.
struct RouteTypes {
    method: &'static str,
    path: &'static str,
    query: Option<Value>,
    body: Option<Value>,
    answer: Value,
}

/// Returns the `$ref` of `T` in `generator`, registering `T` and what it refers to.
fn reference<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

/// Returns the JSON Schema document of the API, in a stable order.
pub fn api_schema() -> Value {
    let mut generator = SchemaGenerator::default();
    let error = reference::<error::ErrorResponse>(&mut generator);
    let openai_error = reference::<openai::OpenAiErrorResponse>(&mut generator);
    let bytes = Value::String(String::from("the raw bytes"));
    let ndjson = reference::<memory::ReindexLine>(&mut generator);
    let routes = [
        RouteTypes {
            method: "GET",
            path: "/healthz",
            query: None,
            body: None,
            answer: reference::<health::HealthResponse>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/readyz",
            query: None,
            body: None,
            answer: reference::<health::HealthResponse>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/nodes",
            query: None,
            body: None,
            answer: reference::<nodes::NodeList>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/replicas",
            query: None,
            body: None,
            answer: reference::<nodes::ReplicaList>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/nodes/setup-codes",
            query: None,
            body: Some(reference::<nodes::SetupCodeParams>(&mut generator)),
            answer: reference::<nodes::SetupCode>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/agents/{agent}/workspace/{path}",
            query: None,
            body: None,
            answer: bytes.clone(),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/audit",
            query: Some(reference::<audit::AuditQuery>(&mut generator)),
            body: None,
            answer: reference::<audit::AuditList>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/agents/{agent}/files/{name}",
            query: None,
            body: None,
            answer: reference::<documents::Document>(&mut generator),
        },
        RouteTypes {
            method: "PUT",
            path: "/v1/agents/{agent}/files/{name}",
            query: None,
            body: Some(reference::<documents::DocumentWrite>(&mut generator)),
            answer: reference::<documents::DocumentWritten>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions",
            query: None,
            body: None,
            answer: reference::<sessions::SessionList>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/sessions/{key}/messages",
            query: None,
            body: Some(reference::<sessions::MessageParams>(&mut generator)),
            answer: reference::<sessions::MessageAccepted>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/transcript",
            query: None,
            body: None,
            answer: reference::<sessions::Transcript>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/events",
            query: Some(reference::<events::EventsQuery>(&mut generator)),
            body: None,
            answer: reference::<events::EventData>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/sessions/{key}/abort",
            query: None,
            body: None,
            answer: reference::<sessions::AbortResponse>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/sessions/{key}/stop",
            query: None,
            body: None,
            answer: reference::<sessions::StopResponse>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/sessions/{key}/move",
            query: None,
            body: Some(reference::<sessions::MoveParams>(&mut generator)),
            answer: reference::<sessions::MoveResponse>(&mut generator),
        },
        RouteTypes {
            method: "PUT",
            path: "/v1/sessions/{key}",
            query: None,
            body: Some(reference::<sessions::SessionParams>(&mut generator)),
            answer: reference::<sessions::SessionCreated>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}",
            query: None,
            body: None,
            answer: reference::<sessions::Session>(&mut generator),
        },
        RouteTypes {
            method: "PUT",
            path: "/v1/sessions/{key}/worktree/{path}",
            query: Some(reference::<sessions::WorktreeWriteQuery>(&mut generator)),
            body: None,
            answer: reference::<sessions::WorktreeWritten>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/worktree.json",
            query: None,
            body: None,
            answer: reference::<sessions::WorktreeLog>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/worktree/{path}",
            query: None,
            body: None,
            answer: bytes.clone(),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/worktree.tar",
            query: Some(reference::<sessions::WorktreeTarQuery>(&mut generator)),
            body: None,
            answer: bytes.clone(),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/sessions/{key}/worktree/diff",
            query: None,
            body: None,
            answer: bytes.clone(),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/turns/{turnId}",
            query: Some(reference::<sessions::TurnQuery>(&mut generator)),
            body: None,
            answer: reference::<sessions::Turn>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/media",
            query: None,
            body: Some(bytes.clone()),
            answer: reference::<media::MediaUploaded>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/media/{mediaId}",
            query: None,
            body: None,
            answer: bytes,
        },
        RouteTypes {
            method: "GET",
            path: "/v1/memory/search",
            query: Some(reference::<memory::MemorySearchQuery>(&mut generator)),
            body: None,
            answer: reference::<memory::MemorySearchAnswer>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/memory/get",
            query: Some(reference::<memory::MemoryGetQuery>(&mut generator)),
            body: None,
            answer: reference::<memory::MemoryReadResult>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/memory/status",
            query: None,
            body: None,
            answer: reference::<memory::MemoryStatus>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/memory/reindex",
            query: None,
            body: None,
            answer: ndjson,
        },
        RouteTypes {
            method: "GET",
            path: "/v1/skills",
            query: None,
            body: None,
            answer: reference::<skills::SkillsView>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/usage",
            query: Some(reference::<usage::UsageParams>(&mut generator)),
            body: None,
            answer: reference::<usage::UsageView>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/channels",
            query: None,
            body: None,
            answer: reference::<channels::ChannelList>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/channels/{name}/pairings",
            query: None,
            body: None,
            answer: reference::<channels::PairingList>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/channels/{name}/pairings/{code}/approve",
            query: None,
            body: None,
            answer: reference::<channels::PairingApproved>(&mut generator),
        },
        RouteTypes {
            method: "DELETE",
            path: "/v1/channels/{name}/pairings/{code}",
            query: None,
            body: None,
            answer: reference::<channels::PairingDenied>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/channels/{name}/inbound",
            query: None,
            body: Some(reference::<channels::WebhookMessage>(&mut generator)),
            answer: reference::<channels::WebhookAnswer>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/keys",
            query: None,
            body: Some(reference::<keys::ApiKeyParams>(&mut generator)),
            answer: reference::<keys::ApiKeyCreated>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/keys",
            query: None,
            body: None,
            answer: reference::<keys::ApiKeyList>(&mut generator),
        },
        RouteTypes {
            method: "DELETE",
            path: "/v1/keys/{name}",
            query: None,
            body: None,
            answer: reference::<keys::ApiKeyRevoked>(&mut generator),
        },
        RouteTypes {
            method: "GET",
            path: "/v1/models",
            query: None,
            body: None,
            answer: reference::<openai::ModelList>(&mut generator),
        },
        RouteTypes {
            method: "POST",
            path: "/v1/chat/completions",
            query: None,
            body: Some(reference::<openai::ChatCompletionParams>(&mut generator)),
            answer: reference::<openai::ChatCompletion>(&mut generator),
        },
    ];
    // The event payloads and error details are not the answer of a route on their own; they
    // are listed so that their shapes are part of the fixture too.
    let mut extras = Map::new();
    for (name, schema) in [
        (
            events::TURN_QUEUED,
            reference::<events::TurnQueued>(&mut generator),
        ),
        (
            events::TURN_STARTED,
            reference::<events::TurnStarted>(&mut generator),
        ),
        (
            events::MESSAGE_DELTA,
            reference::<events::MessageDelta>(&mut generator),
        ),
        (
            events::MESSAGE_COMPLETED,
            reference::<events::MessageCompleted>(&mut generator),
        ),
        (
            events::TOOL_STARTED,
            reference::<events::ToolStarted>(&mut generator),
        ),
        (
            events::TOOL_COMPLETED,
            reference::<events::ToolCompleted>(&mut generator),
        ),
        (
            events::ARTIFACT_STORED,
            reference::<events::ArtifactStored>(&mut generator),
        ),
        (
            events::ARTIFACT_REFUSED,
            reference::<events::ArtifactRefused>(&mut generator),
        ),
        (
            events::TURN_COMPLETED,
            reference::<events::TurnCompleted>(&mut generator),
        ),
        (
            events::TURN_FAILED,
            reference::<events::TurnFailed>(&mut generator),
        ),
        (
            events::STREAM_DROPPED,
            reference::<events::StreamDropped>(&mut generator),
        ),
        (
            events::WORKSPACE_CONFLICT,
            reference::<events::WorkspaceConflict>(&mut generator),
        ),
        (
            "chat.completion.chunk",
            reference::<openai::ChatCompletionChunk>(&mut generator),
        ),
    ] {
        extras.insert(String::from(name), schema);
    }
    let mut details = Map::new();
    extras.insert(
        String::from("tool.started arguments over 64 KiB"),
        reference::<events::TruncatedArguments>(&mut generator),
    );
    details.insert(
        String::from("content"),
        reference::<error::ContentErrorDetails>(&mut generator),
    );
    details.insert(
        String::from("payloadTooLarge"),
        reference::<error::PayloadTooLargeDetails>(&mut generator),
    );
    // What a `webhook` channel POSTs to its `reply-url`.
    let webhook_reply = reference::<channels::WebhookDelivery>(&mut generator);
    let routes: Vec<Value> = routes
        .into_iter()
        .map(|route| {
            let mut entry = Map::new();
            entry.insert(String::from("method"), Value::from(route.method));
            entry.insert(String::from("path"), Value::from(route.path));
            if let Some(query) = route.query {
                entry.insert(String::from("query"), query);
            }
            if let Some(body) = route.body {
                entry.insert(String::from("body"), body);
            }
            entry.insert(String::from("answer"), route.answer);
            // The OpenAI-compatible routes answer errors in OpenAI's shape.
            let route_error =
                match route.path.starts_with("/v1/models") || route.path.starts_with("/v1/chat/") {
                    true => openai_error.clone(),
                    false => error.clone(),
                };
            entry.insert(String::from("error"), route_error);
            Value::Object(entry)
        })
        .collect();
    let mut document = Map::new();
    document.insert(
        String::from("$schema"),
        Value::from("https://json-schema.org/draft/2020-12/schema"),
    );
    document.insert(
        String::from("title"),
        Value::from("Gatehouse operator HTTP API"),
    );
    document.insert(String::from("routes"), Value::Array(routes));
    document.insert(String::from("events"), Value::Object(extras));
    document.insert(String::from("errorDetails"), Value::Object(details));
    document.insert(String::from("webhookReply"), webhook_reply);
    document.insert(
        String::from("$defs"),
        Value::Object(generator.take_definitions(true)),
    );
    Value::Object(document)
}
