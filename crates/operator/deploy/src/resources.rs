//! CPU and memory requests and limits of every rendered container.
//!
//! The installation file may set them under `runtime.resources`, per container group, value by
//! value; every value it leaves out has a documented default. The defaults of a container that
//! hosts native workers grow with `runtime.workerCapacity` (default 8):
//!
//! | group | requests | limits |
//! |---|---|---|
//! | `gateway` | cpu 250m, memory 512Mi | cpu 2, memory 2Gi |
//! | `harness` (native) | cpu 500m, memory 256Mi + 64Mi per worker | cpu 4, memory 1Gi + 512Mi per worker |
//! | `harness` (codex) | cpu 500m, memory 512Mi | cpu 4, memory 4Gi |
//! | `embedded` | cpu 750m, memory 768Mi + 64Mi per worker | cpu 6, memory 3Gi + 512Mi per worker |
//! | storage init containers | cpu 10m, memory 16Mi | cpu 100m, memory 64Mi |
//!
//! Quantities are Kubernetes quantities in plain decimal form: CPU in cores or millicores
//! (`2`, `0.5`, `250m`), memory in bytes with an optional binary or decimal suffix (`512Mi`,
//! `1G`). A request above its limit is refused.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;

use crate::error::DeployError;
use crate::error::Result;
use crate::installation::Topology;

/// The default number of native worker slots of a Harness, as `gatehouse node --capacity`.
pub const DEFAULT_WORKER_CAPACITY: u32 = 8;

/// The largest `runtime.workerCapacity`, as `gatehouse node --capacity`.
pub const MAX_WORKER_CAPACITY: u32 = 1024;

/// `runtime.resources`: the requests and limits of each container group.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceSettings {
    /// The dedicated Gateway's container.
    #[serde(default)]
    pub(crate) gateway: Option<ContainerResources>,
    /// The dedicated Harness's container.
    #[serde(default)]
    pub(crate) harness: Option<ContainerResources>,
    /// The embedded Pod's one container.
    #[serde(default)]
    pub(crate) embedded: Option<ContainerResources>,
}

/// The requests and limits of one container group.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerResources {
    #[serde(default)]
    pub(crate) requests: Option<Amounts>,
    #[serde(default)]
    pub(crate) limits: Option<Amounts>,
}

/// A CPU and a memory quantity, either left to its default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Amounts {
    #[serde(default)]
    pub(crate) cpu: Option<String>,
    #[serde(default)]
    pub(crate) memory: Option<String>,
}

/// Which rendered container the resources are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    /// The dedicated Gateway.
    Gateway,
    /// The dedicated Harness.
    Harness,
    /// The embedded Pod's container.
    Embedded,
    /// A storage init container.
    StorageInit,
}

impl Group {
    fn key(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Harness => "harness",
            Self::Embedded => "embedded",
            Self::StorageInit => "storageInit",
        }
    }
}

/// The final requests and limits of one container: `[cpu, memory]` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    requests: [String; 2],
    limits: [String; 2],
}

impl Resolved {
    /// Returns them as the container's `resources`.
    pub(crate) fn requirements(&self) -> ResourceRequirements {
        let amounts = |[cpu, memory]: &[String; 2]| {
            BTreeMap::from([
                (String::from("cpu"), Quantity(cpu.clone())),
                (String::from("memory"), Quantity(memory.clone())),
            ])
        };
        ResourceRequirements {
            requests: Some(amounts(&self.requests)),
            limits: Some(amounts(&self.limits)),
            ..ResourceRequirements::default()
        }
    }
}

const MI: u64 = 1024 * 1024;

/// Returns the default `[requests, limits]` of `group`, each `[cpu, memory]`.
fn defaults(group: Group, topology: Topology, capacity: u32) -> [[String; 2]; 2] {
    let capacity = u64::from(capacity);
    let memory = |mebibytes: u64| format!("{mebibytes}Mi");
    let cpu = String::from;
    match (group, topology) {
        (Group::Gateway, _) => [[cpu("250m"), memory(512)], [cpu("2"), memory(2048)]],
        (Group::Harness, Topology::DedicatedCodex) => {
            [[cpu("500m"), memory(512)], [cpu("4"), memory(4096)]]
        }
        (Group::Harness, _) => [
            [cpu("500m"), memory(256 + 64 * capacity)],
            [cpu("4"), memory(1024 + 512 * capacity)],
        ],
        (Group::Embedded, _) => [
            [cpu("750m"), memory(768 + 64 * capacity)],
            [cpu("6"), memory(3072 + 512 * capacity)],
        ],
        (Group::StorageInit, _) => [[cpu("10m"), memory(16)], [cpu("100m"), memory(64)]],
    }
}

/// Returns the resources of `group`: the installation's values over the defaults.
///
/// # Errors
/// [`DeployError::InvalidValue`] naming the key of a quantity that does not parse, or of a
/// request above its limit.
pub(crate) fn resolve(
    settings: Option<&ResourceSettings>,
    group: Group,
    topology: Topology,
    capacity: u32,
) -> Result<Resolved> {
    let configured = settings.and_then(|settings| match group {
        Group::Gateway => settings.gateway.as_ref(),
        Group::Harness => settings.harness.as_ref(),
        Group::Embedded => settings.embedded.as_ref(),
        Group::StorageInit => None,
    });
    let [default_requests, default_limits] = defaults(group, topology, capacity);
    let pick = |amounts: Option<&Amounts>, defaults: [String; 2]| -> [String; 2] {
        let [cpu, memory] = defaults;
        [
            amounts.and_then(|a| a.cpu.clone()).unwrap_or(cpu),
            amounts.and_then(|a| a.memory.clone()).unwrap_or(memory),
        ]
    };
    let requests = pick(
        configured.and_then(|c| c.requests.as_ref()),
        default_requests,
    );
    let limits = pick(configured.and_then(|c| c.limits.as_ref()), default_limits);
    for (index, (kind, parse)) in [
        ("cpu", parse_cpu as fn(&str) -> Option<f64>),
        ("memory", parse_memory),
    ]
    .into_iter()
    .enumerate()
    {
        let path = |side: &str| format!("runtime.resources.{}.{side}.{kind}", group.key());
        let request = parse(&requests[index])
            .ok_or_else(|| not_a_quantity(&path("requests"), kind, &requests[index]))?;
        let limit = parse(&limits[index])
            .ok_or_else(|| not_a_quantity(&path("limits"), kind, &limits[index]))?;
        if request > limit {
            return Err(DeployError::InvalidValue {
                path: path("requests"),
                reason: format!(
                    "{:?} is more than the limit {:?}; a request may not pass its limit",
                    requests[index], limits[index]
                ),
            });
        }
    }
    Ok(Resolved { requests, limits })
}

fn not_a_quantity(path: &str, kind: &str, value: &str) -> DeployError {
    let example = match kind {
        "cpu" => "cores or millicores such as 2, 0.5 or 250m",
        _ => "bytes with an optional suffix such as 512Mi or 1G",
    };
    DeployError::InvalidValue {
        path: path.to_owned(),
        reason: format!("{value:?} is not a {kind} quantity: use {example}"),
    }
}

/// Parses a positive decimal number (`2`, `0.5`); no sign, exponent or spaces.
fn parse_decimal(text: &str) -> Option<f64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || text.ends_with('.') {
        return None;
    }
    text.parse::<f64>().ok().filter(|value| *value > 0.0)
}

/// Parses a CPU quantity into cores.
fn parse_cpu(text: &str) -> Option<f64> {
    match text.strip_suffix('m') {
        Some(millis) => parse_decimal(millis).map(|value| value / 1000.0),
        None => parse_decimal(text),
    }
}

/// Parses a memory quantity into bytes.
fn parse_memory(text: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 12] = [
        ("Ki", 1024.0),
        ("Mi", MI as f64),
        ("Gi", (1024 * MI) as f64),
        ("Ti", (1024 * 1024 * MI) as f64),
        ("Pi", (1024 * 1024 * 1024 * MI) as f64),
        ("Ei", (1024 * 1024 * 1024 * 1024 * MI) as f64),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in SUFFIXES {
        if let Some(number) = text.strip_suffix(suffix) {
            return parse_decimal(number).map(|value| value * factor);
        }
    }
    parse_decimal(text)
}

/// Checks `runtime.workerCapacity` and `runtime.resources` for `topology`, and returns the
/// worker capacity (the default when unset).
///
/// # Errors
/// [`DeployError::InvalidValue`] for a capacity out of range or on the Codex topology, a group
/// the topology does not render, or a quantity [`resolve`] refuses.
pub(crate) fn check(
    settings: Option<&ResourceSettings>,
    worker_capacity: Option<u32>,
    topology: Topology,
) -> Result<u32> {
    let capacity = match (worker_capacity, topology) {
        (Some(_), Topology::DedicatedCodex) => {
            return Err(DeployError::InvalidValue {
                path: String::from("runtime.workerCapacity"),
                reason: String::from("a Codex Harness hosts no native workers; remove this key"),
            });
        }
        (Some(capacity), _) if !(1..=MAX_WORKER_CAPACITY).contains(&capacity) => {
            return Err(DeployError::InvalidValue {
                path: String::from("runtime.workerCapacity"),
                reason: format!("{capacity} is not between 1 and {MAX_WORKER_CAPACITY}"),
            });
        }
        (capacity, _) => capacity.unwrap_or(DEFAULT_WORKER_CAPACITY),
    };
    let groups: &[Group] = match topology.is_dedicated() {
        true => &[Group::Gateway, Group::Harness],
        false => &[Group::Embedded],
    };
    if let Some(settings) = settings {
        let present = [
            (Group::Gateway, settings.gateway.is_some()),
            (Group::Harness, settings.harness.is_some()),
            (Group::Embedded, settings.embedded.is_some()),
        ];
        if let Some((group, _)) = present
            .iter()
            .find(|(group, present)| *present && !groups.contains(group))
        {
            return Err(DeployError::InvalidValue {
                path: format!("runtime.resources.{}", group.key()),
                reason: match topology.is_dedicated() {
                    true => String::from(
                        "a dedicated topology has a gateway and a harness container; use those keys",
                    ),
                    false => String::from(
                        "the embedded topology has one container; set runtime.resources.embedded",
                    ),
                },
            });
        }
    }
    for group in groups {
        resolve(settings, *group, topology, capacity)?;
    }
    Ok(capacity)
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
