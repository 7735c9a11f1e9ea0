use super::*;

#[test]
fn quantities_parse_in_kubernetes_units() {
    for (text, cores) in [("2", 2.0), ("0.5", 0.5), ("250m", 0.25), ("1500m", 1.5)] {
        assert_eq!(parse_cpu(text), Some(cores), "{text}");
    }
    for (text, bytes) in [
        ("512Mi", 512.0 * 1024.0 * 1024.0),
        ("1Gi", 1024.0 * 1024.0 * 1024.0),
        ("1G", 1e9),
        ("64k", 64e3),
        ("1000", 1000.0),
    ] {
        assert_eq!(parse_memory(text), Some(bytes), "{text}");
    }
    for text in [
        "", "m", "-1", "1e3", "1.", ".5", "2 ", "two", "0", "1Mib", "1.5.2",
    ] {
        assert_eq!(
            (parse_cpu(text), parse_memory(text)),
            (None, None),
            "{text:?}"
        );
    }
}

#[test]
fn the_harness_defaults_grow_with_the_worker_capacity() {
    let eight = resolve(None, Group::Harness, Topology::DedicatedNative, 8).unwrap();
    assert_eq!(
        eight,
        Resolved {
            requests: [String::from("500m"), String::from("768Mi")],
            limits: [String::from("4"), String::from("5120Mi")],
        }
    );
    let one = resolve(None, Group::Harness, Topology::DedicatedNative, 1).unwrap();
    assert_eq!(one.requests[1], "320Mi");
    assert_eq!(one.limits[1], "1536Mi");
    // A Codex Harness hosts no native workers.
    let codex = resolve(None, Group::Harness, Topology::DedicatedCodex, 8).unwrap();
    assert_eq!(codex.limits[1], "4096Mi");
}

#[test]
fn an_installation_value_replaces_only_its_own_default() {
    let settings = ResourceSettings {
        gateway: Some(ContainerResources {
            requests: None,
            limits: Some(Amounts {
                cpu: None,
                memory: Some(String::from("4Gi")),
            }),
        }),
        ..ResourceSettings::default()
    };
    let gateway = resolve(
        Some(&settings),
        Group::Gateway,
        Topology::DedicatedNative,
        8,
    )
    .unwrap();
    assert_eq!(
        gateway,
        Resolved {
            requests: [String::from("250m"), String::from("512Mi")],
            limits: [String::from("2"), String::from("4Gi")],
        }
    );
}

#[test]
fn a_request_above_its_limit_or_a_bad_quantity_names_its_key() {
    let with = |requests: Amounts, limits: Amounts| ResourceSettings {
        harness: Some(ContainerResources {
            requests: Some(requests),
            limits: Some(limits),
        }),
        ..ResourceSettings::default()
    };
    let memory = |value: &str| Amounts {
        cpu: None,
        memory: Some(value.to_owned()),
    };
    let cpu = |value: &str| Amounts {
        cpu: Some(value.to_owned()),
        memory: None,
    };
    for (settings, path) in [
        (
            with(memory("2Gi"), memory("1Gi")),
            "runtime.resources.harness.requests.memory",
        ),
        (
            with(cpu("3"), cpu("2500m")),
            "runtime.resources.harness.requests.cpu",
        ),
        (
            with(memory("lots"), memory("1Gi")),
            "runtime.resources.harness.requests.memory",
        ),
        (
            with(cpu("1"), cpu("1e3")),
            "runtime.resources.harness.limits.cpu",
        ),
    ] {
        let error = resolve(
            Some(&settings),
            Group::Harness,
            Topology::DedicatedNative,
            8,
        )
        .unwrap_err();
        assert!(
            matches!(&error, DeployError::InvalidValue { path: found, .. } if found == path),
            "{error:?}"
        );
    }
}

#[test]
fn the_topology_decides_which_groups_and_capacities_it_takes() {
    let embedded_only = ResourceSettings {
        embedded: Some(ContainerResources::default()),
        ..ResourceSettings::default()
    };
    let gateway_only = ResourceSettings {
        gateway: Some(ContainerResources::default()),
        ..ResourceSettings::default()
    };
    assert_eq!(
        check(Some(&embedded_only), None, Topology::Embedded).unwrap(),
        8
    );
    assert_eq!(
        check(Some(&gateway_only), Some(3), Topology::DedicatedNative).unwrap(),
        3
    );
    for (settings, capacity, topology, path) in [
        (
            Some(&embedded_only),
            None,
            Topology::DedicatedNative,
            "runtime.resources.embedded",
        ),
        (
            Some(&gateway_only),
            None,
            Topology::Embedded,
            "runtime.resources.gateway",
        ),
        (
            None,
            Some(4),
            Topology::DedicatedCodex,
            "runtime.workerCapacity",
        ),
        (
            None,
            Some(0),
            Topology::DedicatedNative,
            "runtime.workerCapacity",
        ),
        (
            None,
            Some(1025),
            Topology::Embedded,
            "runtime.workerCapacity",
        ),
    ] {
        let error = check(settings, capacity, topology).unwrap_err();
        assert!(
            matches!(&error, DeployError::InvalidValue { path: found, .. } if found == path),
            "{error:?}"
        );
    }
}
