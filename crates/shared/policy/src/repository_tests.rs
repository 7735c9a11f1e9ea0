use std::net::IpAddr;
use std::path::PathBuf;

use pretty_assertions::assert_eq;

use super::AddressClass;
use super::Host;
use super::RepositoryUrl;
use super::Scheme;
use super::SourceAllowList;
use super::UrlRefusal;
use super::refused_class;

fn parsed(text: &str) -> RepositoryUrl {
    RepositoryUrl::parse(text).unwrap_or_else(|refusal| panic!("{text}: {refusal}"))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn the_scheme_is_read_in_any_case_and_written_in_lowercase() {
    let file = parsed("FILE:///srv/repo");
    assert_eq!(
        (file.scheme(), file.as_str(), file.file_path()),
        (
            Scheme::File,
            "file:///srv/repo",
            Some(PathBuf::from("/srv/repo"))
        )
    );
    let https = parsed("HTTPS://Git.Example.COM/org/repo.git");
    assert_eq!(
        (https.scheme(), https.host(), https.port_or_default()),
        (
            Scheme::Https,
            Some(&Host::Name(String::from("git.example.com"))),
            Some(443)
        )
    );
    assert_eq!(https.as_str(), "https://git.example.com/org/repo.git");
    assert_eq!(parsed("Ssh://git@example.com/r").scheme(), Scheme::Ssh);
}

#[test]
fn whitespace_is_refused_wherever_it_is_never_trimmed() {
    for text in [
        " file:///x",
        "\tfile:///x",
        "file:///x ",
        "https://example.com/a b",
        "https://example.com/\u{0}",
        "https://example.com\\r",
        "\u{a0}https://example.com/r",
    ] {
        assert_eq!(
            RepositoryUrl::parse(text),
            Err(UrlRefusal::Whitespace),
            "{text:?}"
        );
    }
}

#[test]
fn a_file_url_names_localhost_or_no_host_and_both_read_alike() {
    let root = "/var/lib/gatehouse/harness/sources/abc";
    let plain = parsed(&format!("file://{root}"));
    let localhost = parsed(&format!("file://localhost{root}"));
    let upper = parsed(&format!("FILE://LOCALHOST{root}"));
    assert_eq!(localhost, plain);
    assert_eq!(upper, plain);
    assert_eq!(localhost.file_path(), Some(PathBuf::from(root)));
    assert_eq!(localhost.as_str(), format!("file://{root}"));
    for text in [
        "file://otherhost/srv/repo",
        "file://127.0.0.1/srv/repo",
        "file://[::1]/srv/repo",
    ] {
        assert_eq!(
            RepositoryUrl::parse(text),
            Err(UrlRefusal::FileHost),
            "{text}"
        );
    }
}

#[test]
fn percent_encoded_dots_are_resolved_and_an_encoded_parent_is_refused() {
    // `%2e%2e` is a dot segment, resolved before any check: the check and git read one path.
    let resolved = parsed("file:///srv/harness/sessions/%2e%2e/sources/x");
    assert_eq!(
        resolved.file_path(),
        Some(PathBuf::from("/srv/harness/sources/x"))
    );
    assert_eq!(resolved.as_str(), "file:///srv/harness/sources/x");
    // An encoded slash would make `..` a component only once decoded.
    assert_eq!(
        RepositoryUrl::parse("file:///srv/x%2f..%2fharness"),
        Err(UrlRefusal::FilePath)
    );
    assert_eq!(
        RepositoryUrl::parse("file:///srv/x%00y"),
        Err(UrlRefusal::FilePath)
    );
    let decoded = parsed("file:///srv/a%20b");
    assert_eq!(decoded.file_path(), Some(PathBuf::from("/srv/a b")));
}

#[test]
fn credentials_are_refused_and_an_ssh_user_is_kept() {
    for text in [
        "https://ghp_token@example.com/r.git",
        "https://user:secret@example.com/r.git",
        "https://:secret@example.com/r.git",
        "ssh://user:secret@example.com/r.git",
        "ssh://u%3Asecret@example.com/r.git",
    ] {
        assert_eq!(
            RepositoryUrl::parse(text),
            Err(UrlRefusal::Credentials),
            "{text}"
        );
        assert!(
            !RepositoryUrl::parse(text)
                .unwrap_err()
                .to_string()
                .contains("secret")
        );
    }
    let ssh = parsed("ssh://git@example.com:2222/r.git");
    assert_eq!(
        (ssh.user(), ssh.port(), ssh.as_str()),
        (Some("git"), Some(2222), "ssh://git@example.com:2222/r.git")
    );
    assert_eq!(
        RepositoryUrl::parse("ssh://-git@example.com/r"),
        Err(UrlRefusal::User)
    );
}

#[test]
fn ip_literals_are_typed_and_other_hosts_are_checked() {
    let v6 = parsed("https://[::1]:8443/");
    assert_eq!(
        (v6.host(), v6.port(), v6.as_str()),
        (
            Some(&Host::Ip(ip("::1"))),
            Some(8443),
            "https://[::1]:8443/"
        )
    );
    let mapped = parsed("https://[::ffff:127.0.0.1]/r");
    assert_eq!(mapped.host(), Some(&Host::Ip(ip("::ffff:7f00:1"))));
    // URL parsing reads the other IPv4 spellings of an https host as the address.
    assert_eq!(
        parsed("https://2130706433/r").host(),
        Some(&Host::Ip(ip("127.0.0.1")))
    );
    assert_eq!(
        parsed("https://%31%32%37.0.0.1/r").host(),
        Some(&Host::Ip(ip("127.0.0.1")))
    );
    // An ssh host is opaque to URL parsing; an IPv4 literal is still an address.
    assert_eq!(
        parsed("ssh://169.254.169.254/r").host(),
        Some(&Host::Ip(ip("169.254.169.254")))
    );
    assert_eq!(
        parsed("ssh://[fe80::1]/r").with_address(ip("192.0.2.1")),
        "ssh://192.0.2.1/r"
    );
    for (text, refusal) in [
        ("ssh://-oProxyCommand=touch/repo", UrlRefusal::Host),
        ("ssh://ex%61mple.com/r", UrlRefusal::Host),
        ("ssh://ex$ample.com/r", UrlRefusal::Host),
        ("ssh://example.com", UrlRefusal::NoPath),
        ("https://example.com/r?x=1", UrlRefusal::Query),
        ("https://example.com/r#x", UrlRefusal::Query),
        ("http://example.com/r", UrlRefusal::Scheme),
        ("ext::sh -c x", UrlRefusal::Whitespace),
        ("ext::sh", UrlRefusal::Scheme),
        ("git@example.com:r.git", UrlRefusal::NotUrl),
        ("-uhttps://example.com/r", UrlRefusal::NotUrl),
    ] {
        assert_eq!(RepositoryUrl::parse(text), Err(refusal), "{text}");
    }
    assert!(RepositoryUrl::parse("ssh:///r").is_err());
    assert_eq!(
        RepositoryUrl::parse(&format!("https://example.com/{}", "a".repeat(4096))),
        Err(UrlRefusal::TooLong)
    );
}

#[test]
fn the_default_rule_refuses_internal_addresses_and_their_mapped_forms() {
    for (address, class) in [
        ("127.0.0.1", AddressClass::Loopback),
        ("127.8.9.10", AddressClass::Loopback),
        ("::1", AddressClass::Loopback),
        ("::ffff:127.0.0.1", AddressClass::Loopback),
        ("169.254.169.254", AddressClass::LinkLocal),
        ("::ffff:169.254.169.254", AddressClass::LinkLocal),
        ("fe80::1", AddressClass::LinkLocal),
        ("10.1.2.3", AddressClass::Private),
        ("172.16.0.1", AddressClass::Private),
        ("192.168.1.1", AddressClass::Private),
        ("100.64.0.1", AddressClass::Private),
        ("fd00::1", AddressClass::Private),
        ("fc00::1", AddressClass::Private),
        ("::ffff:10.0.0.1", AddressClass::Private),
        ("0.0.0.0", AddressClass::Unspecified),
        ("0.1.2.3", AddressClass::Unspecified),
        ("::", AddressClass::Unspecified),
        ("224.0.0.1", AddressClass::Multicast),
        ("255.255.255.255", AddressClass::Multicast),
        ("ff02::1", AddressClass::Multicast),
        // IPv4 reached through NAT64, 6to4 or the IPv4-compatible form is judged as IPv4.
        ("64:ff9b::a00:1", AddressClass::Private),
        ("64:ff9b::7f00:1", AddressClass::Loopback),
        ("64:ff9b:1::a9fe:a9fe", AddressClass::LinkLocal),
        ("2002:a9fe:a9fe::1", AddressClass::LinkLocal),
        ("::10.0.0.1", AddressClass::Private),
        ("fec0::1", AddressClass::Private),
    ] {
        assert_eq!(refused_class(ip(address)), Some(class), "{address}");
    }
    // A public address behind NAT64 or 6to4 stays public.
    for address in ["64:ff9b::5db8:d70e", "2002:5db8:d70e::1"] {
        assert_eq!(refused_class(ip(address)), None, "{address}");
    }
    for address in [
        "93.184.215.14",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
        "100.128.0.1",
    ] {
        assert_eq!(refused_class(ip(address)), None, "{address}");
    }
}

#[test]
fn the_allow_list_exempts_named_hosts_and_networks() {
    let list =
        SourceAllowList::new(["Git.Corp.Example", "10.0.0.0/8", "127.0.0.1", "fd00::/8"]).unwrap();
    let corp = Host::Name(String::from("git.corp.example"));
    let other = Host::Name(String::from("other.example"));
    assert_eq!(list.check(&corp, ip("192.168.3.4")), Ok(()));
    assert_eq!(list.check(&other, ip("10.9.8.7")), Ok(()));
    assert_eq!(list.check(&other, ip("::ffff:10.9.8.7")), Ok(()));
    assert_eq!(list.check(&other, ip("127.0.0.1")), Ok(()));
    assert_eq!(list.check(&other, ip("fd12::1")), Ok(()));
    assert_eq!(
        list.check(&other, ip("127.0.0.2")).unwrap_err().class,
        AddressClass::Loopback
    );
    assert_eq!(
        list.check(&other, ip("192.168.3.4")).unwrap_err().class,
        AddressClass::Private
    );
    let empty = SourceAllowList::default();
    assert!(empty.is_empty());
    assert_eq!(
        empty
            .check(&Host::Ip(ip("169.254.169.254")), ip("169.254.169.254"))
            .unwrap_err()
            .class,
        AddressClass::LinkLocal
    );
    assert_eq!(empty.check(&other, ip("93.184.215.14")), Ok(()));
    assert_eq!(
        "git.corp.example,10.0.0.0/8".parse::<SourceAllowList>(),
        SourceAllowList::new(["git.corp.example", "10.0.0.0/8"])
    );
    for entry in ["-x", "a b", "10.0.0.0/33", "host:22"] {
        assert!(SourceAllowList::new([entry]).is_err(), "{entry}");
    }
}

#[test]
fn a_host_name_with_a_trailing_dot_or_an_empty_label_is_refused() {
    for url in [
        "https://example.com./repo.git",
        "https://example..com/repo.git",
        "ssh://git@example.com./repo.git",
    ] {
        assert!(RepositoryUrl::parse(url).is_err(), "{url}");
    }
    assert!(RepositoryUrl::parse("https://git.example.com/repo.git").is_ok());
}
