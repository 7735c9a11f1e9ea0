//! The native tools.
//!
//! - [`fs`] has `read`, `write`, `edit`, `ls` and `grep`;
//! - [`patch`] has `apply_patch`;
//! - [`exec`] has `exec` and the sandboxed launch;
//! - [`process`] has `process`, for background commands.

pub mod exec;
pub mod fs;
pub mod patch;
pub mod process;

use crate::tool::Tool;

/// Returns the eight native tools, in the order of [`gatehouse_policy::tool::NATIVE_TOOLS`].
pub fn native_tools() -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(fs::ReadTool),
        Box::new(fs::WriteTool),
        Box::new(fs::EditTool),
        Box::new(patch::ApplyPatchTool),
        Box::new(fs::LsTool),
        Box::new(fs::GrepTool),
        Box::new(exec::ExecTool),
        Box::new(process::ProcessTool),
    ]
}
