//! Strict validation of rendered manifests against the typed Kubernetes schema.
//!
//! `k8s-openapi` types silently ignore fields they do not know, so a misspelled field would
//! vanish when the API server reads the object. [`parse_manifests`] therefore parses every
//! document through `serde_ignored` and refuses any ignored field, then serializes the typed
//! object again and requires the result to equal the document, so nothing was dropped or
//! coerced on the way.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::canonical;
use crate::error::DeployError;
use crate::error::Result;
use crate::strict;

/// A typed Kubernetes object of one of the kinds this crate emits.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Object {
    /// A `v1` ServiceAccount.
    ServiceAccount(ServiceAccount),
    /// A `v1` PersistentVolumeClaim.
    PersistentVolumeClaim(PersistentVolumeClaim),
    /// A `v1` Service.
    Service(Service),
    /// A `networking.k8s.io/v1` NetworkPolicy.
    NetworkPolicy(NetworkPolicy),
    /// An `apps/v1` Deployment.
    Deployment(Box<Deployment>),
    /// An `apps/v1` StatefulSet (the Harness of several node hosts).
    StatefulSet(Box<StatefulSet>),
    /// A `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget(PodDisruptionBudget),
}

/// Parses a multi-document YAML stream into typed objects, refusing unknown fields.
///
/// # Errors
///
/// Returns [`DeployError::InvalidManifest`] naming the document index when the stream is not
/// YAML, a document has an `apiVersion`/`kind` this crate does not emit, a field is unknown to
/// the typed schema (with its dotted path), or the typed object does not serialize back to the
/// same document.
pub fn parse_manifests(yaml: &str) -> Result<Vec<Object>> {
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|err| DeployError::InvalidManifest {
            index: 0,
            problem: format!("not valid yaml: {err}"),
        })?;
    let mut objects = Vec::with_capacity(documents.len());
    for (index, document) in documents.iter().enumerate() {
        let api_version = document.get("apiVersion").and_then(Value::as_str);
        let kind = document.get("kind").and_then(Value::as_str);
        let object = match (api_version, kind) {
            (Some("v1"), Some("ServiceAccount")) => {
                Object::ServiceAccount(parse_typed(index, document)?)
            }
            (Some("v1"), Some("PersistentVolumeClaim")) => {
                Object::PersistentVolumeClaim(parse_typed(index, document)?)
            }
            (Some("v1"), Some("Service")) => Object::Service(parse_typed(index, document)?),
            (Some("networking.k8s.io/v1"), Some("NetworkPolicy")) => {
                Object::NetworkPolicy(parse_typed(index, document)?)
            }
            (Some("apps/v1"), Some("Deployment")) => {
                Object::Deployment(Box::new(parse_typed(index, document)?))
            }
            (Some("apps/v1"), Some("StatefulSet")) => {
                Object::StatefulSet(Box::new(parse_typed(index, document)?))
            }
            (Some("policy/v1"), Some("PodDisruptionBudget")) => {
                Object::PodDisruptionBudget(parse_typed(index, document)?)
            }
            (api_version, kind) => {
                return Err(DeployError::InvalidManifest {
                    index,
                    problem: format!("unsupported apiVersion {api_version:?} and kind {kind:?}"),
                });
            }
        };
        objects.push(object);
    }
    Ok(objects)
}

fn parse_typed<T: DeserializeOwned + Serialize>(index: usize, document: &Value) -> Result<T> {
    let mut unknown_fields = Vec::new();
    let typed: T = serde_ignored::deserialize(document, |path| {
        unknown_fields.push(strict::format_ignored_path(&path));
    })
    .map_err(|err| DeployError::InvalidManifest {
        index,
        problem: format!("does not match the typed schema: {err}"),
    })?;
    if !unknown_fields.is_empty() {
        return Err(DeployError::InvalidManifest {
            index,
            problem: format!("unknown fields: {}", unknown_fields.join(", ")),
        });
    }
    let round_trip = serde_json::to_value(&typed).map_err(|err| DeployError::InvalidManifest {
        index,
        problem: format!("does not serialize back: {err}"),
    })?;
    if canonical::sorted(&round_trip) != canonical::sorted(document) {
        return Err(DeployError::InvalidManifest {
            index,
            problem: String::from("changes when read into its typed form and written back"),
        });
    }
    Ok(typed)
}
