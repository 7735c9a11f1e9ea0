//! The native agent loop and the native tools of a hosted session.
//!
//! A worker process builds a [`ToolContext`] on the session workspace, a [`ToolSet`] filtered by
//! the tool policy, and the system prompt from the workspace's bootstrap files, then runs one
//! [`run_turn`] per user turn against a [`gatehouse_model::ModelClient`]. This crate has no
//! network code besides that client and knows nothing of the Gateway.
//!
//! ```no_run
//! # async fn demo() -> Result<(), gatehouse_agent::AgentError> {
//! use gatehouse_agent::{SandboxPolicy, ToolConfig, ToolContext, ToolSet, TurnRequest};
//! use gatehouse_model::MockClient;
//! use tokio_util::sync::CancellationToken;
//!
//! let ctx = ToolContext::new(
//!     std::path::Path::new("/srv/session/workspace"),
//!     ToolConfig::new(SandboxPolicy::Require),
//! )?;
//! let tools = ToolSet::native().filtered(&[]);
//! let system = gatehouse_agent::build_system_prompt(ctx.workspace()).text;
//! let request = TurnRequest {
//!     system,
//!     history: Vec::new(),
//!     user_texts: vec![String::from("/say hi")],
//!     max_turn_tokens: None,
//! };
//! let output = gatehouse_agent::run_turn(
//!     &MockClient::default(), request, &tools, &ctx, &mut |_event| {}, &CancellationToken::new(),
//! ).await?;
//! assert_eq!(output.reply, "hi");
//! # Ok(())
//! # }
//! ```
//!
//! # Tools
//!
//! | tool | arguments | notes |
//! |---|---|---|
//! | `read` | `path`, `offset?`, `limit?` | numbered lines, output capped at 100 KB |
//! | `write` | `path`, `content` | atomic, creates parents |
//! | `edit` | `path`, `old_string`, `new_string`, `replace_all?` | exact match, unique unless `replace_all` |
//! | `apply_patch` | freeform `*** Begin Patch` text | validated as a whole before writing |
//! | `ls` | `path?` | one directory |
//! | `grep` | `pattern`, `path?`, `regex?` | plain substring; `regex: true` is refused |
//! | `exec` | `command`, `timeout_ms?` | bubblewrap sandbox, process-group kill |
//! | `process` | `action`, `command?`, `id?` | background commands |
//!
//! Every file access goes through the workspace's [`gatehouse_fsops::Root`]: paths are relative,
//! and absolute paths, `..` and symbolic links are refused with the fsops code in the result
//! text. A failed tool call is a result the model reads (`CODE: message`), never a panic or an
//! error of the turn.
//!
//! # Modules
//! - [`turn`] has [`run_turn`], its request, output and events;
//! - [`tool`] has the [`Tool`] trait, [`ToolOutcome`] and [`ToolSet`];
//! - [`tools`] has the native tools;
//! - [`context`] has [`ToolContext`] and its settings;
//! - [`prompt`] has [`build_system_prompt`];
//! - [`error`] has [`AgentError`]; its codes are variants of `gatehouse_protocol::error::ErrorCode`.

#![deny(missing_docs)]

pub mod checkpoint;
pub mod context;
pub mod error;
mod output;
pub mod prompt;
pub mod sandbox;
pub mod tool;
pub mod tools;
pub mod turn;

pub use crate::context::BwrapLocation;
pub use crate::context::SandboxPolicy;
pub use crate::context::ToolConfig;
pub use crate::context::ToolContext;
pub use crate::error::AgentError;
pub use crate::error::Result;
pub use crate::prompt::SystemPrompt;
pub use crate::prompt::build_system_prompt;
pub use crate::tool::Tool;
pub use crate::tool::ToolOutcome;
pub use crate::tool::ToolSet;
pub use crate::tools::exec::SandboxTrial;
pub use crate::tools::exec::SandboxTrialError;
pub use crate::tools::exec::trial_sandbox;
pub use crate::turn::AgentEvent;
pub use crate::turn::MAX_MODEL_CALLS_PER_TURN;
pub use crate::turn::MessageRole;
pub use crate::turn::TurnOutput;
pub use crate::turn::TurnRequest;
pub use crate::turn::run_turn;
