//! The `gatehouse` binary: parses arguments, dispatches to the subcommand, and turns the final
//! error into an exit code (0 success, 1 runtime failure, 2 usage or configuration error).

mod bench;
mod channels_cmd;
mod chat_cmd;
mod codex_setup;
mod config_file;
mod deploy_cmd;
mod doctor_cmd;
mod embedded;
mod exit;
mod gateway_cmd;
mod keys_cmd;
mod logging;
mod media_url;
mod memory_cmd;
mod memory_setup;
mod mock_model_cmd;
mod node_cmd;
mod output;
mod paths;
mod quota_args;
mod records;
mod sandbox_exec_cmd;
mod sandbox_setup;
mod scratch_cmd;
mod session_cmd;
mod setup_code_cmd;
mod share_args;
mod signals;
mod skills_cmd;
mod state_cmd;
mod store_args;
mod up_cmd;
mod usage_cmd;
mod worker_args;
mod worker_cmd;

use std::process::ExitCode;

use clap::Parser;
use clap::Subcommand;

use crate::exit::UsageError;

/// Gatehouse runs AI agents with a hard split between a trusted Gateway and an untrusted Harness.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The format of log lines on stderr: `text` (default) or `json` (one object per line,
    /// with the fields of its spans).
    #[arg(long, global = true, value_enum, env = logging::LOG_FORMAT_ENV, default_value_t)]
    log_format: logging::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run embedded mode: the Gateway plus an in-process Harness node, with separate roots.
    Up(up_cmd::UpArgs),
    /// Send a message to a session and stream the reply.
    Chat(chat_cmd::ChatArgs),
    /// Run a benchmark and print its figures with their ratio to a baseline measured in the same run.
    Bench(bench::BenchArgs),
    /// Render and validate Kubernetes manifests from an installation file.
    Deploy(deploy_cmd::DeployArgs),
    /// Run the dedicated Gateway.
    Gateway(gateway_cmd::GatewayArgs),
    /// Run the dedicated Harness node host; it only connects outbound and listens on nothing.
    Node(node_cmd::NodeArgs),
    /// Print a one-time enrollment code for a Harness node.
    SetupCode(setup_code_cmd::SetupCodeArgs),
    /// Create, list or revoke the Gateway's scoped API keys.
    Keys(keys_cmd::KeysArgs),
    /// Show the tokens and model calls of turns, by session, API key, agent or UTC day.
    Usage(usage_cmd::UsageArgs),
    /// List the Gateway's channels, and approve or deny their pairing requests.
    Channels(channels_cmd::ChannelsArgs),
    /// Create a session with its workspace source, or export a worktree session's history.
    Session(session_cmd::SessionArgs),
    /// Serve the deterministic mock model over HTTP.
    MockModel(mock_model_cmd::MockModelArgs),
    /// Run one native worker (started by the node host; reads its envelope on stdin).
    #[command(hide = true)]
    Worker(worker_cmd::WorkerArgs),
    /// Check that this machine can run Gatehouse (kernel, sandbox, Codex, model, data, Gateway).
    Doctor(doctor_cmd::DoctorArgs),
    /// Check an operator-owned scratch volume.
    Scratch(scratch_cmd::ScratchArgs),
    /// Search, inspect or rebuild the Gateway's memory index.
    Memory(memory_cmd::MemoryArgs),
    /// List the skills of both hosts.
    Skills(skills_cmd::SkillsArgs),
    /// Move the Gateway state to another store, or check a store's integrity.
    State(state_cmd::StateArgs),
}

fn main() -> ExitCode {
    // The sandbox helper (`gatehouse sandbox-exec`, hidden from `--help`) runs before every
    // command in the sandbox, so it is dispatched before the whole command line and the log
    // subscriber are built.
    if let Some(code) = sandbox_exec_cmd::run_if_invoked() {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are a parse result, not a failure.
            let _ = err.print();
            return match err.use_stderr() {
                true => ExitCode::from(2),
                false => ExitCode::SUCCESS,
            };
        }
    };
    let telemetry = logging::init(cli.log_format, cli.command.role());
    let result = match cli.command {
        Command::Up(args) => up_cmd::run(args),
        Command::Chat(args) => chat_cmd::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Deploy(args) => deploy_cmd::run(args),
        Command::Gateway(args) => gateway_cmd::run(args),
        Command::Node(args) => node_cmd::run(args),
        Command::SetupCode(args) => setup_code_cmd::run(args),
        Command::Keys(args) => keys_cmd::run(args),
        Command::Usage(args) => usage_cmd::run(args),
        Command::Channels(args) => channels_cmd::run(args),
        Command::Session(args) => session_cmd::run(args),
        Command::MockModel(args) => mock_model_cmd::run(args),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Scratch(args) => scratch_cmd::run(args),
        Command::Memory(args) => memory_cmd::run(args),
        Command::Skills(args) => skills_cmd::run(args),
        Command::State(args) => state_cmd::run(args),
        Command::Worker(args) => worker_cmd::run(args),
    };
    telemetry.shutdown();
    match result {
        Ok(code) => code,
        Err(err) => {
            output::error_line(&format!("error: {err:#}"));
            match err.downcast_ref::<UsageError>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::from(1),
            }
        }
    }
}

impl Command {
    /// Returns the process role this command runs as, for `service.name` and
    /// `gatehouse.role` of its exported spans.
    fn role(&self) -> &'static str {
        match self {
            Command::Up(_) => "up",
            Command::Chat(_) => "chat",
            Command::Bench(_) => "bench",
            Command::Deploy(_) => "deploy",
            Command::Gateway(_) => "gateway",
            Command::Node(_) => "node",
            Command::SetupCode(_) => "setup-code",
            Command::Keys(_) => "keys",
            Command::Usage(_) => "usage",
            Command::Channels(_) => "channels",
            Command::Session(_) => "session",
            Command::MockModel(_) => "mock-model",
            Command::Worker(_) => "worker",
            Command::Doctor(_) => "doctor",
            Command::Scratch(_) => "scratch",
            Command::Memory(_) => "memory",
            Command::Skills(_) => "skills",
            Command::State(_) => "state",
        }
    }
}
