//! Path policy and tool policy for Gatehouse, as pure functions.
//!
//! Nothing in this crate performs I/O: callers pass in the configuration and the request, and
//! get back a decision. Both the Gateway (before it sends a file command) and the node (before
//! it touches disk) evaluate the same path policy; the Gateway alone evaluates tool policy.
//!
//! # Modules
//!
//! - [`path`]: the file-transfer path policy. Deny by default, keyed by node, with glob allow
//!   and deny lists, ask modes, "allow always" persistence and the default workspace-node
//!   policy.
//! - [`tool`]: the tool policy. Profiles, groups and allow/deny layers where each layer can
//!   only narrow and a deny always wins.
//! - [`repository`]: the repository URLs of session workspace sources, parsed one way for the
//!   Gateway and the node host, and the addresses the node host's `git` may reach.
//! - [`PolicyError`]: the one error type, for invalid configuration and refused updates.
//!   Policy decisions are values, not errors.
//!
//! # Example
//!
//! ```
//! use gatehouse_policy::path::{self, AccessKind, Decision, DenyCode, FileTransferPolicy, NodeRef};
//!
//! let home = "/home/node";
//! let mut policy = FileTransferPolicy::default();
//! path::apply_default_policy(&mut policy, "node-1", "main", "/home/node/workspace", home)?;
//!
//! let node = NodeRef { id: "node-1", display_name: None };
//! let notes = "/home/node/workspace/notes.md";
//! let read = path::evaluate(Some(&policy), &node, notes, AccessKind::Read, home);
//! assert_eq!(read, Decision::Allow { max_bytes: None, follow_symlinks: false });
//!
//! let escape = "/home/node/workspace/../.ssh/id_ed25519";
//! let read = path::evaluate(Some(&policy), &node, escape, AccessKind::Read, home);
//! assert!(matches!(read, Decision::Deny { code: DenyCode::PolicyDenied, askable: false, .. }));
//!
//! use gatehouse_policy::tool::{self, LayerSource, ToolDecision, ToolLayer};
//!
//! let layers = [ToolLayer {
//!     source: LayerSource::Agent,
//!     allow: None,
//!     deny: vec!["group:runtime".to_owned()],
//! }];
//! let denied = tool::evaluate_tool(&layers, "bash");
//! assert!(matches!(denied, ToolDecision::Deny { layer: LayerSource::Agent, .. }));
//! # Ok::<(), gatehouse_policy::PolicyError>(())
//! ```

#![deny(missing_docs)]

mod error;
pub mod path;
pub mod repository;
pub mod tool;

pub use crate::error::PolicyError;
pub use crate::error::Result;
