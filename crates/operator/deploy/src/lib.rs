//! Kubernetes manifests for Gatehouse, and the operator scratch-volume binding.
//!
//! `gatehouse deploy render` reads one installation file (see [`installation`] for the schema),
//! validates it strictly and renders the Kubernetes objects of one agent in one of three
//! topologies: `embedded`, `dedicated-native` or `dedicated-codex`.
//!
//! ```no_run
//! # fn main() -> gatehouse_deploy::error::Result<()> {
//! let text = std::fs::read_to_string("installation.yaml").unwrap_or_default();
//! let installation = gatehouse_deploy::installation::Installation::from_yaml(&text)?;
//! let rendered = gatehouse_deploy::render::render(&installation)?;
//! let yaml: String = rendered.to_yaml();
//! # let _ = yaml;
//! # Ok(())
//! # }
//! ```
//!
//! Modules:
//! - [`installation`]: the installation schema, strict parsing with key paths in every error,
//!   topology rules and the exact scratch-binding match;
//! - [`render`]: deterministic rendering into typed `k8s-openapi` objects and YAML;
//! - [`manifest`]: parsing YAML back into typed objects, refusing unknown fields;
//! - [`resources`]: every container's CPU and memory requests and limits, and their defaults;
//! - [`error`]: the error type and its stable codes.

#![deny(missing_docs)]

mod canonical;
pub mod error;
pub mod installation;
pub mod manifest;
pub mod render;
pub mod resources;
mod strict;
