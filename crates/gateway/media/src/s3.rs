//! The S3 backend of the media store: [`object_store`]'s `AmazonS3`, configured from the
//! environment.
//!
//! The standard variables are read as `object_store` reads them (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//! `AWS_ALLOW_HTTP=true` for a plain-HTTP endpoint, `AWS_WEB_IDENTITY_TOKEN_FILE`, ...). Without
//! keys in the environment the profile's keys, region and endpoint come from the standard shared
//! files (`~/.aws/credentials` and `~/.aws/config`, `AWS_PROFILE`; see [`crate::aws_profile`]);
//! with none there either, `object_store` asks the container or instance credential endpoint.
//! [`ENDPOINT_ENV`], [`REGION_ENV`] and [`PATH_STYLE_ENV`] override the endpoint, the region and
//! the addressing style. Credentials never come from the media URL or the command line.
//!
//! A dead endpoint fails a call within seconds ([`CONNECT_TIMEOUT`], [`RETRY_TIMEOUT`]) rather
//! than after `object_store`'s default three minutes of retries, so an upload during an outage
//! answers `MEDIA_STORE_FAILURE` quickly; the next call tries again, so the store serves as soon
//! as the endpoint is back.
//!
//! Storing the same bytes twice stays a no-op on S3: `PutMode::Create` is sent as a put with
//! `If-None-Match: *` (S3's conditional write), which the server refuses with `412` when the
//! key exists; the store reads that as "already stored".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::BackoffConfig;
use object_store::ClientConfigKey;
use object_store::ObjectStore;
use object_store::RetryConfig;
use object_store::aws::AmazonS3Builder;
use object_store::aws::AmazonS3ConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;

use crate::MediaError;
use crate::location::S3Location;

/// Overrides `AWS_ENDPOINT_URL`: the S3 endpoint URL (for example `https://minio.internal:9000`).
pub const ENDPOINT_ENV: &str = "GATEHOUSE_S3_ENDPOINT";

/// Overrides `AWS_REGION`.
pub const REGION_ENV: &str = "GATEHOUSE_S3_REGION";

/// `true` (the default) addresses the bucket in the path (`ENDPOINT/BUCKET/KEY`), as most
/// S3-compatible stores want; `false` in the host name (`BUCKET.ENDPOINT/KEY`).
pub const PATH_STYLE_ENV: &str = "GATEHOUSE_S3_PATH_STYLE";

/// How long connecting to the endpoint may take, unless `AWS_CONNECT_TIMEOUT` says otherwise.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may take, unless `AWS_TIMEOUT` says otherwise: room for an upload at
/// the size cap over a slow link.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a call keeps retrying transient failures before it fails.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the objects under `location`'s prefix in its bucket, configured from the environment
/// `env` (the process environment, or a test's own). Nothing is sent to the endpoint yet.
///
/// # Errors
/// [`MediaError::Open`] when the environment's S3 settings are unusable.
pub(crate) fn open(
    location: &S3Location,
    env: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, MediaError> {
    let open_error = |message: String| MediaError::Open(std::io::Error::other(message));
    let mut builder = AmazonS3Builder::new().with_bucket_name(location.bucket());
    // What `AmazonS3Builder::from_env` does, over `env` rather than the process environment.
    for (key, value) in env {
        if !key.starts_with("AWS_") || value.is_empty() {
            continue;
        }
        if let Ok(config_key) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
            builder = builder.with_config(config_key, value);
        }
    }
    let profile = crate::aws_profile::read(env).map_err(open_error)?;
    if let Some((id, secret)) = profile.keys {
        builder = builder
            .with_access_key_id(id)
            .with_secret_access_key(secret);
    }
    if let Some(token) = profile.session_token {
        builder = builder.with_token(token);
    }
    if let Some(region) = profile.region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = profile.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    let env = |name: &str| env.get(name).filter(|value| !value.is_empty()).cloned();
    if let Some(endpoint) = env(ENDPOINT_ENV) {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = env(REGION_ENV) {
        builder = builder.with_region(region);
    }
    if let Some(path_style) = env(PATH_STYLE_ENV) {
        let path_style = match path_style.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => true,
            "false" | "0" | "no" => false,
            _ => {
                return Err(open_error(format!(
                    "{PATH_STYLE_ENV}='{path_style}' is neither true nor false"
                )));
            }
        };
        builder = builder.with_virtual_hosted_style_request(!path_style);
    }
    for (key, default) in [
        (ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT),
        (ClientConfigKey::Timeout, REQUEST_TIMEOUT),
    ] {
        let key = AmazonS3ConfigKey::Client(key);
        if builder.get_config_value(&key).is_none() {
            builder = builder.with_config(key, format!("{}ms", default.as_millis()));
        }
    }
    let builder = builder.with_retry(RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: RETRY_TIMEOUT,
    });
    let s3 = builder.build().map_err(|error| {
        open_error(format!(
            "cannot configure the S3 media store {location}: {error}"
        ))
    })?;
    Ok(match location.prefix() {
        "" => Arc::new(s3),
        prefix => Arc::new(PrefixStore::new(s3, ObjectPath::from(prefix))),
    })
}
