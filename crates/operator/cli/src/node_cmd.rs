//! `gatehouse node`: the dedicated Harness node host. It connects out to the Gateway and listens
//! on nothing.
//!
//! - `gatehouse node --gateway URL [--gateway URL ...] --root DIR --runtime native|codex ...`
//!   runs the node host.
//! - `gatehouse node health --root DIR [--ready] [--json]` is its liveness (or readiness) probe:
//!   the node host has no port to probe, so this reads the status file it keeps under `DIR` and
//!   exits 0 when healthy, else 1 with the reason on stderr. It opens no socket.

use gatehouse_protocol::runtime::RuntimeKind;
use gatehouse_protocol::time::now_ms;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config_file::GatewayUrls;
use anyhow::Context;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::NodeHostConfig;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::host::run_node_host_with;
use gatehouse_harness::model_spec::ModelSpec;
use gatehouse_harness::model_spec::default_key_env;
use gatehouse_harness::status::NodeStatus;
use gatehouse_harness::status::Probe;
use gatehouse_scratch::ScratchReport;

use crate::exit::UsageError;
use crate::output;

/// Arguments of `gatehouse node`: either the `health` subcommand or the node host's own flags.
///
/// `--root` and `--runtime` are required unless a subcommand is given, so they are `Option`s
/// here and checked again in [`run`].
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct NodeArgs {
    #[command(subcommand)]
    command: Option<NodeCommand>,
    /// The Gateway: `ws://HOST:PORT[/node]` or `http://HOST:PORT`; repeat it for the replicas
    /// of one Gateway, which the node tries in turn (the next after a failed attempt or a lost
    /// link). Defaults to the URL saved at enrollment, else the setup code's.
    #[arg(long, value_name = "URL")]
    gateway: Vec<String>,
    /// The node root; the identity, the device token, the status file and the Agent workspace
    /// live under it.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The agent runtime this node hosts.
    #[arg(long, value_enum)]
    runtime: Option<RuntimeKind>,
    /// A file holding a setup code from `gatehouse setup-code`, needed until the node is
    /// enrolled.
    #[arg(long, value_name = "FILE")]
    setup_code_file: Option<PathBuf>,
    /// How many sessions the node hosts at once, 1..=1024 (default 8).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=1024),
    )]
    capacity: Option<u32>,
    /// A TOML file with the same settings in kebab-case (`gateway`, `root`, `runtime`,
    /// `capacity`, `model`, `deny-tools`, ...); flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The name operators see for this node.
    #[arg(long, value_name = "NAME")]
    display_name: Option<String>,
    /// An operator-owned scratch directory, checked at start like `gatehouse scratch prepare`.
    /// The `exec` sandbox will bind it at /sandbox/scratch; file commands never see it.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
    /// The model: `mock` (default), `openai-responses:URL:MODEL`, `openai-chat:URL:MODEL` or
    /// `anthropic:URL:MODEL`.
    #[arg(long, value_name = "SPEC")]
    model: Option<String>,
    /// The environment variable holding the model API key, never passed in argv (default
    /// ANTHROPIC_API_KEY for an anthropic: model, OPENAI_API_KEY otherwise).
    #[arg(long, value_name = "NAME")]
    model_key_env: Option<String>,
    /// Let the `exec` tool run without bubblewrap when `bwrap` is missing (it says so in its
    /// output). Without this flag, `exec` refuses to run unsandboxed.
    #[arg(long)]
    allow_unsandboxed_exec: bool,
    /// Native tools to deny, by name or group (for example `exec,process` or `group:runtime`).
    #[arg(long, value_delimiter = ',')]
    deny_tools: Vec<String>,
    /// Host names, addresses and networks (`git.corp.example,10.0.0.0/8`) a session's
    /// repository may be fetched from although they are, or resolve to, loopback, link-local or
    /// private addresses, which are refused by default.
    #[arg(long, value_delimiter = ',', value_name = "HOSTS")]
    source_allow_hosts: Vec<String>,
    /// The longest an `exec` tool call may run, in seconds (default 1800).
    #[arg(long)]
    exec_timeout_seconds: Option<u64>,
    /// The `codex` executable for `--runtime codex` (default: `$GATEHOUSE_CODEX_BIN`, else
    /// `codex` on PATH). Tested with @openai/codex 0.171.0.
    #[arg(long, value_name = "PATH")]
    codex_bin: Option<PathBuf>,
    #[command(flatten)]
    sandbox: crate::sandbox_setup::SandboxArgs,
    #[command(flatten)]
    retirement: crate::worker_args::RetirementArgs,
}

#[derive(Debug, clap::Subcommand)]
enum NodeCommand {
    /// Exit 0 when the node host on --root is live (its status was written in the last 90 s)
    /// or, with --ready, connected (and written in the last 30 s); else exit 1 with the reason.
    Health(HealthArgs),
}

#[derive(Debug, clap::Args)]
struct HealthArgs {
    /// The node root the node host runs with.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Check readiness: the node host is also connected to the Gateway.
    #[arg(long)]
    ready: bool,
    /// Print the status with a `healthy` field as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `gatehouse node health`, or else the node host until SIGINT or SIGTERM.
pub(crate) fn run(args: NodeArgs) -> anyhow::Result<ExitCode> {
    let NodeArgs {
        command,
        gateway,
        root,
        runtime,
        setup_code_file,
        capacity,
        config,
        display_name,
        scratch,
        model,
        model_key_env,
        allow_unsandboxed_exec,
        deny_tools,
        source_allow_hosts,
        exec_timeout_seconds,
        codex_bin,
        sandbox,
        retirement,
    } = args;
    if let Some(NodeCommand::Health(health_args)) = command {
        return Ok(run_health(&health_args));
    }
    let file: crate::config_file::NodeFile = crate::config_file::load(config.as_deref())?;
    let runtime = runtime.or(file.runtime);
    let (Some(root), Some(runtime)) = (root.or(file.root), runtime) else {
        return Err(anyhow::Error::new(UsageError::new(
            "gatehouse node needs --root DIR and --runtime native|codex (or `root` and `runtime` in the config file)",
        )));
    };
    let gateway = match gateway.is_empty() {
        true => file.gateway.map(GatewayUrls::into_vec).unwrap_or_default(),
        false => gateway,
    };
    let setup_code_file = setup_code_file.or(file.setup_code_file);
    let display_name = display_name.or(file.display_name);
    let scratch = scratch.or(file.scratch);
    let capacity = capacity.or(file.capacity).unwrap_or(8);
    if !(1..=1024).contains(&capacity) {
        return Err(UsageError::new("capacity must be between 1 and 1024").into());
    }
    let retirement = retirement.resolve(file.worker_retirement, file.worker_idle_seconds)?;
    let model = model.or(file.model).unwrap_or_else(|| String::from("mock"));
    let model_key_env = model_key_env
        .or(file.model_key_env)
        .unwrap_or_else(|| String::from(default_key_env(&model)));
    let allow_unsandboxed_exec =
        allow_unsandboxed_exec || file.allow_unsandboxed_exec.unwrap_or(false);
    let deny_tools = match deny_tools.is_empty() {
        true => file.deny_tools.unwrap_or_default(),
        false => deny_tools,
    };
    let source_allow = match source_allow_hosts.is_empty() {
        true => file.source_allow_hosts.unwrap_or_default(),
        false => source_allow_hosts,
    };
    let source_allow = crate::worker_args::source_allow_list(&source_allow)?;
    let exec_timeout_seconds = exec_timeout_seconds
        .or(file.exec_timeout_seconds)
        .unwrap_or(gatehouse_protocol::worker::DEFAULT_EXEC_TIMEOUT_SECONDS);
    let model_key_env_name = model_key_env.clone();
    let model = ModelSpec::parse(&model, &model_key_env)
        .map_err(|err| anyhow::Error::new(UsageError::new(format!("--model: {err}"))))?;
    if let Some(key_env) = model.key_env()
        && std::env::var_os(key_env).is_none_or(|value| value.is_empty())
    {
        return Err(anyhow::Error::new(UsageError::new(format!(
            "the model key variable {key_env} is not set or is empty: set {key_env} to the API key, or name another variable with --model-key-env"
        ))));
    }
    log_model(&model);
    let scratch = match &scratch {
        Some(dir) => Some(prepare_scratch(dir)?),
        None => None,
    };
    let config = NodeHostConfig {
        root,
        gateway_urls: gateway,
        setup_code_file,
        runtime,
        display_name,
        home: None,
    };
    let program =
        std::env::current_exe().context("cannot find the gatehouse executable for workers")?;
    let sandbox = match runtime {
        Runtime::Native => {
            let sandbox = sandbox.with_file(file.sandbox_read_only, file.sandbox_allow_missing);
            crate::sandbox_setup::startup(
                &sandbox,
                std::slice::from_ref(&config.root),
                &program,
                allow_unsandboxed_exec,
                "gatehouse node:",
            )?
        }
        // Codex runs its own sandbox; these flags apply to native workers.
        Runtime::Codex => gatehouse_protocol::worker::SandboxSettings::default(),
    };
    let workers = gatehouse_harness::worker::WorkerSettings {
        program,
        capacity: capacity as usize,
        retirement,
        model: model.to_string(),
        model_key_env: model.key_env().unwrap_or(&model_key_env_name).to_owned(),
        allow_unsandboxed: allow_unsandboxed_exec,
        scratch: scratch
            .as_ref()
            .map(|report| report.private_dir().to_path_buf()),
        hidden_paths: Vec::new(),
        denied_tools: deny_tools,
        exec_timeout_seconds,
        sandbox,
        telemetry_env: crate::logging::worker_env(),
        source_allow,
    };
    let codex_bin = codex_bin.or(file.codex_bin);
    let runtime_config = match runtime {
        Runtime::Native => RuntimeConfig {
            model,
            scratch,
            workers: Some(workers),
            codex: None,
        },
        // The companion file node: workspace commands and the Codex relay, no workers.
        Runtime::Codex => RuntimeConfig {
            codex: Some(crate::codex_setup::node_settings(
                &model,
                codex_bin.as_deref(),
                true,
            )?),
            model,
            scratch,
            workers: None,
        },
    };
    tracing::debug!(capacity, "starting the node host");
    let async_runtime = crate::signals::runtime().context("cannot start the async runtime")?;
    async_runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn(stop_on_signal(shutdown.clone()));
        let result = run_node_host_with(config, runtime_config, shutdown).await;
        signals.abort();
        match result {
            Ok(()) => {
                tracing::info!("node host stopped");
                Ok(ExitCode::SUCCESS)
            }
            Err(err) if err.is_startup() => {
                let message = format!("{:#}", anyhow::Error::new(err));
                Err(anyhow::Error::new(UsageError::new(message)))
            }
            Err(err) => Err(anyhow::Error::new(err)),
        }
    })
}

/// Logs which model is configured; never the key, which is not even read here.
fn log_model(model: &ModelSpec) {
    match model {
        ModelSpec::Mock => tracing::info!(
            model = "mock",
            "model configured: mock; for a real one pass --model openai-responses:URL:MODEL, openai-chat:URL:MODEL or anthropic:URL:MODEL"
        ),
        ModelSpec::Remote(remote) => tracing::info!(
            api = remote.api().as_str(),
            base_url = %remote.base_url(),
            model = %remote.model(),
            key_env = %remote.key_env(),
            "model configured"
        ),
    }
}

/// Runs the scratch start check on `dir`. It never changes the mode or owner of anything that
/// exists; it only creates the private `gatehouse` directory when absent.
///
/// # Errors
/// `CODE: message` (for example `SCRATCH_UNSAFE: ...`) when the check fails; the process exits
/// with 1, since the operator must fix the volume rather than the flags.
fn prepare_scratch(dir: &Path) -> anyhow::Result<ScratchReport> {
    let report = match gatehouse_scratch::prepare(dir) {
        Ok(report) => report,
        Err(err) => return Err(anyhow::anyhow!("{}: {err}", err.code())),
    };
    let capacity = report.capacity();
    tracing::info!(
        scratch = %report.root().display(),
        total_bytes = capacity.total_bytes,
        available_bytes = capacity.available_bytes,
        created = report.created(),
        "scratch volume ready"
    );
    Ok(report)
}

/// Runs `gatehouse node health`: reads the status file without following symbolic links and
/// judges it. Exits 0 when healthy, else 1 with a one-line reason on stderr.
fn run_health(args: &HealthArgs) -> ExitCode {
    let probe = match args.ready {
        true => Probe::Readiness,
        false => Probe::Liveness,
    };
    let (status, verdict) = match gatehouse_harness::status::read_status(&args.root) {
        Ok(Some(status)) => {
            let verdict = status.check(probe, now_ms()).map_err(|err| err.to_string());
            (Some(status), verdict)
        }
        Ok(None) => {
            let path = gatehouse_harness::status::status_path(&args.root);
            let reason = format!(
                "no node status at {}: the node host has not started with --root {}",
                path.display(),
                args.root.display()
            );
            (None, Err(reason))
        }
        Err(err) => (None, Err(format!("{:#}", anyhow::Error::new(err)))),
    };
    if args.json {
        output::json(&health_json(status.as_ref(), &verdict));
    }
    match verdict {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            output::error_line(&format!("unhealthy: {reason}"));
            ExitCode::from(1)
        }
    }
}

/// Returns the status fields (when there is a status) plus `healthy`, and `reason` when
/// unhealthy.
fn health_json(status: Option<&NodeStatus>, verdict: &Result<(), String>) -> serde_json::Value {
    let mut fields = match status.map(serde_json::to_value) {
        Some(Ok(serde_json::Value::Object(fields))) => fields,
        Some(Ok(_) | Err(_)) | None => serde_json::Map::new(),
    };
    fields.insert(
        "healthy".to_owned(),
        serde_json::Value::Bool(verdict.is_ok()),
    );
    if let Err(reason) = verdict {
        fields.insert(
            "reason".to_owned(),
            serde_json::Value::String(reason.clone()),
        );
    }
    serde_json::Value::Object(fields)
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM, and exits at once on the second.
async fn stop_on_signal(shutdown: CancellationToken) {
    crate::signals::shutdown_signal().await;
    tracing::info!("stopping the node host");
    shutdown.cancel();
    crate::signals::shutdown_signal().await;
    tracing::warn!("second signal; exiting now");
    std::process::exit(1);
}
