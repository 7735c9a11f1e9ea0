//! Where a browser says a request comes from: the `Sec-Fetch-Site` and `Origin` headers.
//!
//! The document routes refuse `Sec-Fetch-Site: cross-site` whoever sends it
//! ([`is_cross_site`]). The console's state-changing requests, which a browser sends with the
//! session cookie by itself, must come from the console's own origin ([`check`]): a page on
//! another port of the same host is `same-site` and would otherwise get the cookie attached.

use axum::http::HeaderMap;
use axum::http::header;
use gatehouse_protocol::error::ErrorCode;

use crate::http::error::ApiError;

/// The header browsers send with the relation of the page to the target.
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// Returns true when any `sec-fetch-site` header says `cross-site`, in any case.
pub(crate) fn is_cross_site(headers: &HeaderMap) -> bool {
    fetch_site_says(headers, b"cross-site")
}

/// Refuses a request that a browser says comes from another origin: a `Sec-Fetch-Site` other
/// than `same-origin` (`cross-site`, `same-site`, `none`), or an `Origin` whose host and port
/// are not the request's `Host`. A client that sends neither header (not a browser) passes; the
/// console's CSRF token is what stops a forged request then.
///
/// # Errors
/// `403 FORBIDDEN`.
pub(crate) fn check(headers: &HeaderMap) -> Result<(), ApiError> {
    let foreign_site = headers.get_all(SEC_FETCH_SITE).iter().any(|value| {
        !value
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"same-origin")
    });
    if foreign_site {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "the console accepts state-changing requests from its own pages only (sec-fetch-site)",
        ));
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = headers
        .get(header::HOST)
        .map(|value| value.as_bytes().trim_ascii());
    let origin_host = origin
        .as_bytes()
        .trim_ascii()
        .strip_prefix(b"http://")
        .or_else(|| origin.as_bytes().trim_ascii().strip_prefix(b"https://"));
    match (origin_host, host) {
        (Some(origin_host), Some(host)) if origin_host.eq_ignore_ascii_case(host) => Ok(()),
        (Some(_), Some(_)) | (None, _) | (_, None) => Err(ApiError::new(
            ErrorCode::Forbidden,
            "the console accepts state-changing requests from its own origin only (origin)",
        )),
    }
}

/// Returns true when any `sec-fetch-site` header is `expected`, in any case.
fn fetch_site_says(headers: &HeaderMap, expected: &[u8]) -> bool {
    headers
        .get_all(SEC_FETCH_SITE)
        .iter()
        .any(|value| value.as_bytes().trim_ascii().eq_ignore_ascii_case(expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn only_the_consoles_own_origin_passes() {
        let cases: &[(&[(&'static str, &'static str)], bool)] = &[
            (&[], true),
            (&[("host", "127.0.0.1:7420")], true),
            (&[("sec-fetch-site", "same-origin")], true),
            (&[("sec-fetch-site", "Same-Origin")], true),
            (&[("sec-fetch-site", "same-site")], false),
            (&[("sec-fetch-site", "cross-site")], false),
            (&[("sec-fetch-site", "none")], false),
            (
                &[
                    ("host", "127.0.0.1:7420"),
                    ("origin", "http://127.0.0.1:7420"),
                ],
                true,
            ),
            (
                &[("host", "gh.example"), ("origin", "https://GH.example")],
                true,
            ),
            (
                &[
                    ("host", "127.0.0.1:7420"),
                    ("origin", "http://127.0.0.1:8000"),
                ],
                false,
            ),
            (&[("host", "127.0.0.1:7420"), ("origin", "null")], false),
            (&[("origin", "http://127.0.0.1:7420")], false),
            (
                &[
                    ("host", "127.0.0.1:7420"),
                    ("origin", "http://127.0.0.1:7420"),
                    ("sec-fetch-site", "same-site"),
                ],
                false,
            ),
        ];
        for (pairs, passes) in cases {
            assert_eq!(check(&headers(pairs)).is_ok(), *passes, "{pairs:?}");
        }
    }

    #[test]
    fn cross_site_is_recognised_in_any_case() {
        assert!(is_cross_site(&headers(&[("sec-fetch-site", "Cross-Site")])));
        assert!(!is_cross_site(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(!is_cross_site(&headers(&[])));
    }
}
