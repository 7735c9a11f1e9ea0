//! `gatehouse up`: embedded mode. The Gateway and a Harness node host run in one process over an
//! in-process link carrying the same frames as `/node`; their storage roots stay separate.

use gatehouse_protocol::runtime::RuntimeKind;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::OPERATOR_TOKEN_ENV;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::model_spec::ModelSpec;
use gatehouse_harness::worker::WorkerSettings;

use crate::exit::UsageError;

/// Arguments of `gatehouse up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// A config file in `gatehouse gateway`'s format, for the settings `up` has no flag for
    /// and the flags' defaults; an enabled channel is refused (`CHANNELS_NEED_DEDICATED`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The data directory: Gateway state in `DIR/gateway`, the Harness root in `DIR/harness`
    /// (default `$XDG_DATA_HOME/gatehouse`).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, env = "GATEHOUSE_LISTEN", default_value = gatehouse_gateway::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The Gateway state directory (default `DATA/gateway`).
    #[arg(long, value_name = "DIR")]
    gateway_state: Option<PathBuf>,
    /// The Harness root (default `DATA/harness`).
    #[arg(long, value_name = "DIR")]
    harness_root: Option<PathBuf>,
    /// The runtime of the in-process Harness.
    #[arg(long, value_enum, default_value = "native")]
    runtime: RuntimeKind,
    /// The model: `mock`, `openai-responses:URL:MODEL`, `openai-chat:URL:MODEL` or
    /// `anthropic:URL:MODEL`.
    #[arg(long, default_value = "mock")]
    model: String,
    /// The name of the environment variable holding the model API key (default
    /// ANTHROPIC_API_KEY for an anthropic: model, OPENAI_API_KEY otherwise).
    #[arg(long, value_name = "NAME")]
    model_key_env: Option<String>,
    /// Native worker slots (sessions hosted at once), 1..=1024.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    capacity: u32,
    /// Let the `exec` tool run without bubblewrap when `bwrap` is missing.
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
    /// The longest an `exec` tool call may run, in seconds.
    #[arg(long, default_value_t = gatehouse_protocol::worker::DEFAULT_EXEC_TIMEOUT_SECONDS)]
    exec_timeout_seconds: u64,
    /// The `codex` executable for `--runtime codex` (default: `$GATEHOUSE_CODEX_BIN`, else
    /// `codex` on PATH).
    #[arg(long, value_name = "PATH")]
    codex_bin: Option<PathBuf>,
    #[command(flatten)]
    memory_skills: crate::memory_setup::MemorySkillsArgs,
    #[command(flatten)]
    quotas: crate::quota_args::QuotaArgs,
    #[command(flatten)]
    shares: crate::share_args::ShareArgs,
    #[command(flatten)]
    store: crate::store_args::StoreArgs,
    #[command(flatten)]
    sandbox: crate::sandbox_setup::SandboxArgs,
    #[command(flatten)]
    retirement: crate::worker_args::RetirementArgs,
}

/// The four Agent documents created on first start, with short defaults.
const DEFAULT_DOCUMENTS: [(&str, &str); 4] = [
    (
        "AGENTS.md",
        "# Agent instructions\n\nWork inside this workspace. Explain what you change, keep changes small, and ask before anything destructive.\n",
    ),
    (
        "SOUL.md",
        "# Soul\n\nBe direct, careful and honest. Say when you are unsure.\n",
    ),
    (
        "IDENTITY.md",
        "# Identity\n\nYou are the Gatehouse agent `main`.\n",
    ),
    (
        "USER.md",
        "# User\n\nDescribe the people this agent works for here.\n",
    ),
];

/// Runs `gatehouse up` until SIGINT or SIGTERM.
pub(crate) fn run(args: UpArgs) -> anyhow::Result<ExitCode> {
    let file: crate::config_file::GatewayFile = crate::config_file::load(args.config.as_deref())?;
    file.check_for_up()?;
    // An explicit --model-key-env wins; otherwise the variable depends on the model's API.
    let model_key_env = args
        .model_key_env
        .clone()
        .unwrap_or_else(|| gatehouse_harness::model_spec::default_key_env(&args.model).to_owned());
    let (model, model_line) = model_and_line(&args.model, &model_key_env)?;
    let data = match args.data {
        Some(data) => data,
        None => crate::paths::default_data_dir()?,
    };
    let gateway_state = args.gateway_state.unwrap_or_else(|| data.join("gateway"));
    let harness_root = args.harness_root.unwrap_or_else(|| data.join("harness"));
    if gateway_state.starts_with(&harness_root) || harness_root.starts_with(&gateway_state) {
        return Err(UsageError::new(
            "the gateway state and the harness root must not contain each other",
        )
        .into());
    }
    // The same machine checks as `gatehouse doctor`, one line per warning or failure.
    let machine = crate::doctor_cmd::MachineChecks {
        data,
        codex_bin: args.codex_bin.clone(),
        codex_required: args.runtime == RuntimeKind::Codex,
        memory_model_dir: args.memory_skills.memory_model_dir.clone(),
        // The Gateway loads the model itself below and says so when it cannot.
        load_model: false,
    };
    for check in crate::doctor_cmd::machine_checks(&machine) {
        if check.status != crate::doctor_cmd::Status::Pass {
            crate::output::error_line(&format!(
                "gatehouse up: {}",
                crate::doctor_cmd::text_line(&check)
            ));
        }
    }
    let sandbox = match args.runtime {
        RuntimeKind::Native => crate::sandbox_setup::startup(
            &args.sandbox,
            &[harness_root.clone(), gateway_state.clone()],
            &std::env::current_exe()?,
            args.allow_unsandboxed_exec,
            "gatehouse up:",
        )?,
        // Codex runs its own sandbox; these flags apply to native workers.
        RuntimeKind::Codex => gatehouse_protocol::worker::SandboxSettings::default(),
    };
    // Everything either role writes is private to this user.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    create_default_documents(&harness_root.join("workspace"))?;
    let gateway_state_dir = gateway_state.clone();
    let mut config = GatewayConfig::with_defaults(gateway_state, args.listen);
    config.worktree_apply_delay = crate::gateway_cmd::worktree_apply_delay();
    config.operator_token_override = std::env::var(OPERATOR_TOKEN_ENV).ok();
    // Ready once this process's own node links, not on a link a replaced `up` left behind.
    config.ready_needs_own_node = true;
    if let Some(max) = file.max_concurrent_turns {
        config.max_concurrent_turns = max;
    }
    if let Some(max) = file.media_max_bytes {
        config.media_max_bytes = max;
    }
    args.quotas.or_file(&file).apply(&mut config);
    args.shares.or_file(&file).apply(&mut config)?;
    args.store.or_file(&file).apply(&mut config)?;
    // Disabled channels only (checked above): listed as stopped.
    config.channels = file.channels()?;
    let runtime = args.runtime;
    let source_allow = crate::worker_args::source_allow_list(&args.source_allow_hosts)?;
    let memory_embedder = args.memory_skills.or_file(&file).apply(&mut config)?;
    crate::signals::runtime()?.block_on(async move {
        let send_key = !matches!(model, ModelSpec::Mock);
        let (mut extensions, codex_model) = match runtime {
            Runtime::Native => (gatehouse_gateway::Extensions::default(), None),
            Runtime::Codex => {
                let codex_model = codex_model(&model, &model_key_env).await?;
                let extensions = crate::codex_setup::gateway_extensions(
                    gatehouse_codex_driver::runtime::CodexConfig::default(),
                );
                (extensions, Some(codex_model))
            }
        };
        extensions.memory_embedder = memory_embedder;
        let running = crate::embedded::start_gateway_with(config, extensions).await?;
        let workers = WorkerSettings {
            program: std::env::current_exe()?,
            capacity: args.capacity as usize,
            retirement: args.retirement.resolve(None, None)?,
            model: model.to_string(),
            model_key_env: model_key_env.clone(),
            allow_unsandboxed: args.allow_unsandboxed_exec,
            scratch: None,
            // Commands in a worker must not read the Gateway's state either.
            hidden_paths: vec![std::fs::canonicalize(&gateway_state_dir)?],
            denied_tools: args.deny_tools.clone(),
            exec_timeout_seconds: args.exec_timeout_seconds,
            sandbox,
            telemetry_env: crate::logging::worker_env(),
            source_allow,
        };
        let shutdown = CancellationToken::new();
        let runtime_config = match codex_model {
            None => RuntimeConfig {
                model,
                scratch: None,
                workers: Some(workers),
                codex: None,
            },
            Some(codex_model) => RuntimeConfig {
                codex: Some(crate::codex_setup::node_settings(
                    &codex_model,
                    args.codex_bin.as_deref(),
                    send_key,
                )?),
                model: codex_model,
                scratch: None,
                workers: None,
            },
        };
        let node = crate::embedded::start_node(
            &running,
            &harness_root,
            runtime,
            runtime_config,
            shutdown.clone(),
        )
        .await?;
        crate::embedded::announce(&running, "gatehouse up:");
        crate::output::line(&format!(
            "harness workspace: {}",
            harness_root.join("workspace").display()
        ));
        crate::output::line(&model_line);
        if let Some(file) = node.setup_code_file {
            remove_code_after_enrollment(file, harness_root.join("node").join("device-token.json"));
        }
        crate::signals::until_shutdown(&running).await;
        tracing::info!("shutting down");
        shutdown.cancel();
        running.shutdown.cancel();
        let _ = node.task.await;
        running.wait().await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Parses `--model` and returns it with the line that says which model is in use (and how to
/// configure a real one when it is the mock).
fn model_and_line(model: &str, key_env: &str) -> anyhow::Result<(ModelSpec, String)> {
    let spec = ModelSpec::parse(model, key_env)
        .map_err(|error| UsageError::new(format!("--model: {error}")))?;
    if let Some(key_env) = spec.key_env()
        && std::env::var_os(key_env).is_none_or(|value| value.is_empty())
    {
        return Err(UsageError::new(format!(
            "the model key variable {key_env} is not set or is empty: set it to the API key, or name another variable with --model-key-env"
        ))
        .into());
    }
    let line = match spec.key_env() {
        None => String::from(
            "model: mock (deterministic test model); for a real one pass --model openai-responses:URL:MODEL, openai-chat:URL:MODEL or anthropic:URL:MODEL and put the key in the variable named by --model-key-env (default OPENAI_API_KEY, or ANTHROPIC_API_KEY for anthropic:)",
        ),
        Some(key_env) => format!("model: {spec} (key from ${key_env})"),
    };
    Ok((spec, line))
}

/// Returns the model Codex calls: `model` itself, or for the mock a loopback mock-model server
/// started in this process (Codex speaks only HTTP).
async fn codex_model(model: &ModelSpec, key_env: &str) -> anyhow::Result<ModelSpec> {
    if !matches!(model, ModelSpec::Mock) {
        return Ok(model.clone());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = gatehouse_mockmodel::serve(listener, std::future::pending()).await {
            tracing::error!(error = %error, "the loopback mock model stopped");
        }
    });
    let spec = format!(
        "openai-responses:http://{addr}/v1:{}",
        crate::codex_setup::MOCK_CODEX_MODEL
    );
    // The mock needs no key; Codex sends whatever the variable holds.
    Ok(ModelSpec::parse(&spec, key_env).map_err(|error| UsageError::new(error.to_string()))?)
}

/// Deletes the one-time code once the node has saved its device token.
fn remove_code_after_enrollment(code_file: PathBuf, token_file: PathBuf) {
    tokio::spawn(async move {
        for _ in 0..600 {
            if token_file.exists() {
                let _ = std::fs::remove_file(&code_file);
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
}

fn create_default_documents(workspace: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(workspace)?;
    for (name, content) in DEFAULT_DOCUMENTS {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(workspace.join(name));
        match created {
            Ok(mut file) => std::io::Write::write_all(&mut file, content.as_bytes())?,
            // Never replace what the owner wrote.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
