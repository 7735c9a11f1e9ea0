use pretty_assertions::assert_eq;

use crate::installation::url_port;

#[test]
fn url_port_takes_the_explicit_port_or_the_scheme_default() {
    let cases = [
        ("https://api.openai.com/v1", Some(443)),
        ("http://model.models.svc/v1", Some(80)),
        ("http://model.models.svc:8000/v1", Some(8000)),
        ("https://user:secret@example.com:8443", Some(8443)),
        ("http://[fd00::1]:9000/v1", Some(9000)),
        ("http://[fd00::1]/v1", Some(80)),
        ("https://example.com?x=1", Some(443)),
        ("ftp://example.com", None),
        ("example.com", None),
        ("https://", None),
        ("https://:443", None),
        ("https://example.com:0", None),
        ("https://example.com:99999", None),
        ("http://[fd00::1]x", None),
    ];
    for (url, expected) in cases {
        assert_eq!(url_port(url), expected, "{url}");
    }
}
