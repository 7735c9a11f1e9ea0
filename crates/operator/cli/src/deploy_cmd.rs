//! `gatehouse deploy`: Kubernetes manifests from an installation file.
//!
//! `gatehouse deploy render --config INSTALLATION.yaml` writes every object as one multi-document
//! YAML stream to stdout. With `--out DIR` it writes one file per object instead, named
//! `NN-kind-name.yaml` so that `kubectl apply -f DIR` applies them in order.

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gatehouse_deploy::installation::Installation;
use gatehouse_deploy::render::Rendered;

use crate::exit::UsageError;
use crate::output;

/// Arguments of `gatehouse deploy`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    #[command(subcommand)]
    command: DeployCommand,
}

#[derive(Debug, clap::Subcommand)]
enum DeployCommand {
    /// Render the Kubernetes objects of one agent from an installation file.
    Render(RenderArgs),
}

#[derive(Debug, clap::Args)]
struct RenderArgs {
    /// The installation file (YAML).
    #[arg(long, value_name = "INSTALLATION.yaml")]
    config: PathBuf,
    /// Write one file per object into this directory instead of one stream to stdout.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Runs `gatehouse deploy`.
pub(crate) fn run(args: DeployArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        DeployCommand::Render(render_args) => run_render(&render_args),
    }
}

fn run_render(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    let config_display = args.config.display();
    let text = match std::fs::read_to_string(&args.config) {
        Ok(text) => text,
        Err(err) => {
            return Err(anyhow::Error::new(UsageError::new(format!(
                "cannot read installation file {config_display}: {err}"
            ))));
        }
    };
    let installation = Installation::from_yaml(&text).map_err(|err| {
        anyhow::Error::new(UsageError::new(format!(
            "{config_display}: {err} [{}]",
            err.code()
        )))
    })?;
    let rendered = gatehouse_deploy::render::render(&installation).map_err(|err| {
        match err.is_config_error() {
            true => anyhow::Error::new(UsageError::new(format!(
                "{config_display}: {err} [{}]",
                err.code()
            ))),
            false => anyhow::Error::new(err).context("rendered manifests failed validation"),
        }
    })?;
    match &args.out {
        None => output::line(rendered.to_yaml().trim_end()),
        Some(dir) => write_files(&rendered, dir)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes one file per object into `dir`, refusing a directory that holds other YAML files, so
/// a stale object from an earlier render is never applied by accident.
fn write_files(rendered: &Rendered, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let file_names: Vec<String> = rendered
        .manifests()
        .iter()
        .enumerate()
        .map(|(index, manifest)| manifest.file_name(index))
        .collect();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list output directory {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if is_yaml && !file_names.contains(&name) {
            return Err(anyhow::Error::new(UsageError::new(format!(
                "{} holds {name}, which this render does not produce; remove it or choose an empty directory",
                dir.display()
            ))));
        }
    }
    for (manifest, file_name) in rendered.manifests().iter().zip(&file_names) {
        let path = dir.join(file_name);
        let document = format!("---\n{}", manifest.yaml());
        std::fs::write(&path, document)
            .with_context(|| format!("cannot write {}", path.display()))?;
        output::line(&path.display().to_string());
    }
    Ok(())
}
