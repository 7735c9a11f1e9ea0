use pretty_assertions::assert_eq;

use crate::gateway_url::normalize_gateway_url;

#[test]
fn accepted_forms_map_to_the_node_endpoint() {
    let cases = [
        ("ws://gw:7420", Ok("ws://gw:7420/node")),
        ("ws://gw:7420/", Ok("ws://gw:7420/node")),
        ("ws://gw:7420/node", Ok("ws://gw:7420/node")),
        ("http://gw:7420", Ok("ws://gw:7420/node")),
        ("http://127.0.0.1:7420/", Ok("ws://127.0.0.1:7420/node")),
        ("  ws://gw:7420/node\n", Ok("ws://gw:7420/node")),
        ("ws://gw:7420/custom/path", Ok("ws://gw:7420/custom/path")),
    ];
    for (input, expected) in cases {
        let expected = expected.map(str::to_owned);
        assert_eq!(normalize_gateway_url(input), expected, "{input}");
    }
}

#[test]
fn other_forms_are_refused() {
    for input in [
        "",
        "gw:7420",
        "ftp://gw",
        "ws://",
        "ws:///node",
        "wss://gw:7420",
        "https://gw:7420",
        "ws://user:pw@gw:7420",
        "ws://gw 1:7420",
    ] {
        assert!(normalize_gateway_url(input).is_err(), "{input}");
    }
}
