//! The accepted forms of the Gateway URL.

/// The path of the node endpoint on the Gateway.
const NODE_PATH: &str = "/node";

/// Returns the WebSocket URL of the Gateway's node endpoint for `text`.
///
/// Accepted forms: `ws://host:port` and `http://host:port` (both mapped to
/// `ws://host:port/node`), and `ws://host:port/PATH`, kept as given. A trailing `/` alone counts
/// as no path.
///
/// # Errors
/// Returns a short reason when the scheme is not `ws` or `http` (this build has no TLS), or the
/// host is missing or contains whitespace.
pub fn normalize_gateway_url(text: &str) -> Result<String, &'static str> {
    let text = text.trim();
    let rest = match text.split_once("://") {
        Some(("ws" | "http", rest)) => rest,
        Some(("wss" | "https", _)) => return Err("tls is not supported by this build, use ws://"),
        Some(_) | None => return Err("must start with ws:// or http://"),
    };
    let (authority, path) = match rest.find('/') {
        Some(slash_idx) => rest.split_at(slash_idx),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err("has no host");
    }
    if authority.contains(|c: char| c.is_whitespace() || c == '@')
        || path.contains(char::is_whitespace)
    {
        return Err("contains whitespace or credentials");
    }
    let path = match path {
        "" | "/" => NODE_PATH,
        path => path,
    };
    Ok(format!("ws://{authority}{path}"))
}

#[cfg(test)]
#[path = "gateway_url_tests.rs"]
mod tests;
