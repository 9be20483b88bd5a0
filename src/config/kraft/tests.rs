use std::path::{Path, PathBuf};

use super::*;
use crate::config::{BrokerConfig, ConfigError, RawConfig, Validated};

/// Node 2 of a three-node loopback cluster, in Kafka's keys.
const NODE2: &str = "process.roles=broker,controller
node.id=2
controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094
listeners=PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:19093
advertised.listeners=PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:19093
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=/tmp/kq/node-2
broker.rack=rack-2
";

/// `base` with each change applied: `key=value` replaces or adds, `-key` removes.
fn variant(base: &str, changes: &[&str]) -> String {
    let mut lines: Vec<String> = base.lines().map(str::to_owned).collect();
    for change in changes {
        let key = change
            .strip_prefix('-')
            .unwrap_or_else(|| change.split('=').next().unwrap());
        lines.retain(|l| l.split('=').next() != Some(key));
        if !change.starts_with('-') {
            lines.push((*change).to_owned());
        }
    }
    lines.join("\n") + "\n"
}

fn validated(text: &str) -> Result<Validated, ConfigError> {
    BrokerConfig::from_raw(RawConfig::parse(text, Path::new("test.properties"))?)
}

fn config(text: &str) -> BrokerConfig {
    match validated(text) {
        Ok(v) => v.config,
        Err(e) => panic!("{e}\n{text}"),
    }
}

#[test]
fn a_combined_node_of_three_is_typed() {
    let v = validated(NODE2).unwrap();
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let c = v.config;
    let k = &c.kraft;
    assert!(!k.standalone);
    assert_eq!(k.roles, ProcessRoles::COMBINED);
    assert_eq!(k.node_id, 2);
    assert_eq!(c.node_id, 2);
    assert_eq!(
        k.voters,
        vec![
            Voter {
                id: 1,
                host: "127.0.0.1".into(),
                port: 19092
            },
            Voter {
                id: 2,
                host: "127.0.0.1".into(),
                port: 19093
            },
            Voter {
                id: 3,
                host: "127.0.0.1".into(),
                port: 19094
            },
        ]
    );
    assert_eq!(k.voter_ids(), vec![1, 2, 3]);
    assert_eq!(k.local_voter().unwrap().port, 19093);
    assert_eq!(
        k.other_voters().map(|v| v.id).collect::<Vec<_>>(),
        vec![1, 3]
    );
    assert!(k.bootstrap_servers.is_empty());
    let client: Vec<String> = k.client_listeners().iter().map(|l| l.to_string()).collect();
    assert_eq!(client, vec!["PLAINTEXT://127.0.0.1:9093"]);
    let controller = k.controller_listener().unwrap();
    assert_eq!(controller.to_string(), "CONTROLLER://127.0.0.1:19093");
    assert_eq!(controller.protocol, SecurityProtocol::Plaintext);
    assert_eq!(k.controller_connect_listener_name(), Some("CONTROLLER"));
    assert_eq!(k.advertised("controller").unwrap().port, 19093);
    assert_eq!(k.advertised("PLAINTEXT").unwrap().port, 9093);
    assert_eq!(k.advertised_broker_listeners().len(), 1);
    assert_eq!(k.inter_broker_listener_name, "PLAINTEXT");
    assert_eq!(k.inter_broker_endpoint().unwrap().port, 9093);
    assert_eq!(k.broker_heartbeat_interval_ms, 2_000);
    assert_eq!(k.broker_session_timeout_ms, 9_000);
    assert_eq!(k.election_timeout_ms, 1_000);
    assert_eq!(k.fetch_timeout_ms, 2_000);
    assert!(!k.unclean_leader_election_enable);
    assert_eq!(k.metadata_log_dir, PathBuf::from("/tmp/kq/node-2"));
    // The existing single-listener fields keep meaning the client listener.
    assert_eq!(c.listener.name, "PLAINTEXT");
    assert_eq!(c.listener.port, 9093);
    assert_eq!(c.advertised().port, 9093);
    assert_eq!(c.broker_rack.as_deref(), Some("rack-2"));
    assert_eq!(
        c.meta_properties_dirs(),
        vec![PathBuf::from("/tmp/kq/node-2")]
    );
}

#[test]
fn no_kraft_keys_is_todays_single_node() {
    let c = BrokerConfig::from_raw(RawConfig::default()).unwrap().config;
    let k = &c.kraft;
    assert!(k.standalone);
    assert_eq!(k.roles, ProcessRoles::COMBINED);
    assert_eq!(k.node_id, 1);
    assert_eq!(k.voter_ids(), vec![1]);
    assert!(k.voters.is_empty());
    assert!(k.local_voter().is_none());
    assert!(k.controller_listener().is_none());
    assert_eq!(k.client_listeners().len(), 1);
    assert_eq!(c.listener.port, 9092);
    assert_eq!(c.listener.host, "127.0.0.1");
    assert!(c.advertised_listener.is_none());
    assert_eq!(k.metadata_log_dir, PathBuf::from("./kafkaiq-data"));
    assert_eq!(k.security_protocol_map.len(), 4);
    assert_eq!(k.inter_broker_listener_name, "PLAINTEXT");
}

#[test]
fn the_single_node_reference_file_and_other_roles_are_accepted() {
    // integration/apache-kafka.sh's file, the reference single KRaft node.
    let single = "process.roles=broker,controller\nnode.id=1\n\
controller.quorum.voters=1@127.0.0.1:9093\n\
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n\
advertised.listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n\
controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nlog.dirs=/tmp/kraft-1\n\
offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
transaction.state.log.min.isr=1\nshare.coordinator.state.topic.replication.factor=1\n\
share.coordinator.state.topic.min.isr=1\n";
    let v = validated(single).unwrap();
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    assert_eq!(v.config.kraft.voter_ids(), vec![1]);

    // Broker only: the controllers are elsewhere.
    let broker = config(&variant(
        NODE2,
        &[
            "node.id=4",
            "process.roles=broker",
            "listeners=PLAINTEXT://127.0.0.1:9095",
            "advertised.listeners=PLAINTEXT://localhost:9095",
        ],
    ));
    assert!(broker.kraft.is_broker() && !broker.kraft.is_controller());
    assert!(broker.kraft.controller_listener().is_none());
    assert_eq!(broker.kraft.client_listeners().len(), 1);
    assert_eq!(broker.advertised().host, "localhost");

    // Controller only.
    let controller = config(&variant(
        NODE2,
        &[
            "process.roles=controller",
            "-inter.broker.listener.name",
            "listeners=CONTROLLER://127.0.0.1:19093",
            "advertised.listeners=CONTROLLER://127.0.0.1:19093",
        ],
    ));
    assert!(controller.kraft.client_listeners().is_empty());
    assert_eq!(controller.kraft.controller_listener().unwrap().port, 19093);
    assert_eq!(controller.listener.name, "CONTROLLER");

    // Dynamic quorum: only bootstrap servers.
    let dynamic = config(&variant(
        NODE2,
        &[
            "-controller.quorum.voters",
            "controller.quorum.bootstrap.servers=127.0.0.1:19092, [::1]:19093",
        ],
    ));
    assert!(dynamic.kraft.voters.is_empty());
    assert!(dynamic.kraft.voter_ids().is_empty());
    assert_eq!(
        dynamic
            .kraft
            .bootstrap_servers
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>(),
        vec!["127.0.0.1:19092", "[::1]:19093"]
    );
}

#[test]
fn kafka_defaults_fill_the_security_map_and_advertised_controllers() {
    // No map: Kafka's default, plus CONTROLLER -> PLAINTEXT because it is a controller name.
    // No advertised.listeners: each listener advertises itself, 0.0.0.0 becomes "".
    let c = config(&variant(
        NODE2,
        &[
            "-listener.security.protocol.map",
            "-advertised.listeners",
            "-inter.broker.listener.name",
            "listeners=PLAINTEXT://:9093,CONTROLLER://0.0.0.0:19093",
        ],
    ));
    let k = &c.kraft;
    assert_eq!(
        k.security_protocol_map.get("CONTROLLER"),
        Some(&SecurityProtocol::Plaintext)
    );
    assert_eq!(
        k.security_protocol_map.get("SASL_SSL"),
        Some(&SecurityProtocol::SaslSsl)
    );
    assert_eq!(k.advertised("CONTROLLER").unwrap().host, "");
    assert_eq!(k.controller_listener().unwrap().host, "0.0.0.0");
    assert_eq!(k.advertised("PLAINTEXT").unwrap().host, "");
    assert!(c.advertised_listener.is_none());
    // Lower-case names are normalised, as Kafka's ListenerName.normalised does.
    let c = config(&variant(
        NODE2,
        &[
            "listeners=plaintext://127.0.0.1:9093,controller://127.0.0.1:19093",
            "controller.listener.names=controller",
        ],
    ));
    assert_eq!(c.kraft.controller_listener().unwrap().name, "CONTROLLER");
    assert_eq!(c.listener.name, "PLAINTEXT");
}

#[test]
fn several_client_listeners_and_the_inter_broker_one() {
    let c = config(&variant(
        NODE2,
        &[
            "listeners=EXTERNAL://127.0.0.1:9093,INTERNAL://127.0.0.1:29093,CONTROLLER://127.0.0.1:19093",
            "advertised.listeners=EXTERNAL://localhost:9093,INTERNAL://127.0.0.1:29093",
            "listener.security.protocol.map=EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
        ],
    ));
    let k = &c.kraft;
    assert_eq!(
        k.client_listeners()
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>(),
        vec!["EXTERNAL", "INTERNAL"]
    );
    // Each is served, with its own security.
    assert_eq!(
        c.client_listeners
            .iter()
            .map(|l| (
                l.listener.name.as_str(),
                l.listener.port,
                l.security.protocol
            ))
            .collect::<Vec<_>>(),
        vec![
            ("EXTERNAL", 9093, SecurityProtocol::Plaintext),
            ("INTERNAL", 29093, SecurityProtocol::Plaintext)
        ]
    );
    assert_eq!(c.listener.name, "EXTERNAL");
    assert_eq!(c.advertised().host, "localhost");
    assert_eq!(k.inter_broker_endpoint().unwrap().port, 29093);
    // The controller's advertised endpoint falls back to its listener.
    assert_eq!(k.advertised("CONTROLLER").unwrap().port, 19093);
    assert_eq!(k.advertised_broker_listeners().len(), 2);
    // One IPv4 and one IPv6 listener may share a port.
    config(&variant(
        NODE2,
        &[
            "listeners=PLAINTEXT://127.0.0.1:9093,V6://[::1]:9093,CONTROLLER://127.0.0.1:19093",
            "listener.security.protocol.map=V6:PLAINTEXT,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ],
    ));
}

#[test]
fn timings_metadata_dir_and_unclean_election_are_read() {
    let c = config(&variant(
        NODE2,
        &[
            "broker.heartbeat.interval.ms=500",
            "broker.session.timeout.ms=3000",
            "controller.quorum.election.timeout.ms=400",
            "controller.quorum.fetch.timeout.ms=800",
            "unclean.leader.election.enable=true",
            "metadata.log.dir=/tmp/kq/meta-2",
        ],
    ));
    let k = &c.kraft;
    assert_eq!(k.broker_heartbeat_interval_ms, 500);
    assert_eq!(k.broker_session_timeout_ms, 3_000);
    assert_eq!(k.election_timeout_ms, 400);
    assert_eq!(k.fetch_timeout_ms, 800);
    assert!(k.unclean_leader_election_enable);
    assert_eq!(k.metadata_log_dir, PathBuf::from("/tmp/kq/meta-2"));
    assert_eq!(
        c.meta_properties_dirs(),
        vec![
            PathBuf::from("/tmp/kq/node-2"),
            PathBuf::from("/tmp/kq/meta-2")
        ]
    );
    let v = validated(&variant(
        NODE2,
        &[
            "broker.heartbeat.interval.ms=5000",
            "broker.session.timeout.ms=5000",
        ],
    ))
    .unwrap();
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("broker.session.timeout.ms")),
        "{:?}",
        v.warnings
    );
}

#[test]
fn broker_only_with_several_controller_names_warns() {
    let v = validated(&variant(
        NODE2,
        &[
            "node.id=4",
            "process.roles=broker",
            "listeners=PLAINTEXT://127.0.0.1:9095",
            "-advertised.listeners",
            "controller.listener.names=CONTROLLER,OTHER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        ],
    ))
    .unwrap();
    assert!(
        v.warnings.iter().any(|w| w.contains("only the first")),
        "{:?}",
        v.warnings
    );
}

/// Every refused setting: (what, changes to NODE2, words the message must contain, starting
/// with the keys it names).
#[test]
fn inconsistent_or_unsupported_settings_stop_startup_naming_the_keys() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "unknown role",
            &["process.roles=broker,zookeeper"],
            &["process.roles", "Unknown process role 'zookeeper'"],
        ),
        (
            "duplicate role",
            &["process.roles=broker,broker"],
            &["process.roles", "Duplicate role names"],
        ),
        ("no role", &["process.roles="], &["process.roles"]),
        (
            "node.id missing",
            &["-node.id"],
            &["node.id", "Missing required configuration \"node.id\""],
        ),
        (
            "node.id and broker.id disagree",
            &["broker.id=3"],
            &["node.id", "broker.id", "the same value"],
        ),
        (
            "no quorum at all",
            &["-controller.quorum.voters"],
            &[
                "controller.quorum.bootstrap.servers",
                "controller.quorum.voters",
                "If using process.roles",
            ],
        ),
        (
            "voter without @",
            &["controller.quorum.voters=1-127.0.0.1:19092"],
            &["controller.quorum.voters", "{id}@{host}:{port}"],
        ),
        (
            "voter id not a number",
            &["controller.quorum.voters=one@127.0.0.1:19092"],
            &["controller.quorum.voters", "Failed to parse voter ID"],
        ),
        (
            "voter without port",
            &["controller.quorum.voters=2@127.0.0.1"],
            &["controller.quorum.voters", "Failed to parse host"],
        ),
        (
            "voter without host",
            &["controller.quorum.voters=2@:19093"],
            &["controller.quorum.voters", "Failed to parse host name"],
        ),
        (
            "voter at 0.0.0.0",
            &["controller.quorum.voters=2@0.0.0.0:19093"],
            &["controller.quorum.voters", "not routeable"],
        ),
        (
            "voter listed twice",
            &["controller.quorum.voters=2@127.0.0.1:19093,2@127.0.0.1:19093"],
            &["controller.quorum.voters", "more than once"],
        ),
        (
            "bootstrap server without port",
            &[
                "-controller.quorum.voters",
                "controller.quorum.bootstrap.servers=localhost",
            ],
            &["controller.quorum.bootstrap.servers", "Failed to parse host"],
        ),
        (
            "controller not among the voters",
            &["controller.quorum.voters=1@127.0.0.1:19092,3@127.0.0.1:19094"],
            &[
                "process.roles",
                "node.id",
                "controller.quorum.voters",
                "must be included in the set of voters",
                "Set(1, 3)",
            ],
        ),
        (
            "broker-only node among the voters",
            &[
                "process.roles=broker",
                "listeners=PLAINTEXT://127.0.0.1:9093",
                "advertised.listeners=PLAINTEXT://127.0.0.1:9093",
            ],
            &[
                "process.roles",
                "controller.quorum.voters",
                "must not be included in the set of voters",
            ],
        ),
        (
            "broker-only without controller.listener.names",
            &[
                "node.id=4",
                "process.roles=broker",
                "listeners=PLAINTEXT://127.0.0.1:9095",
                "-advertised.listeners",
                "-controller.listener.names",
            ],
            &[
                "controller.listener.names",
                "must contain at least one value when running KRaft with just the broker role",
            ],
        ),
        (
            "broker-only binding a controller listener",
            &["node.id=4", "process.roles=broker"],
            &[
                "controller.listener.names",
                "listeners",
                "must not contain a value appearing in the 'listeners'",
            ],
        ),
        (
            "broker-only, controller name missing from the explicit map",
            &[
                "node.id=4",
                "process.roles=broker",
                "listeners=PLAINTEXT://127.0.0.1:9095",
                "-advertised.listeners",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT",
            ],
            &[
                "controller.listener.names",
                "listener.security.protocol.map",
                "Controller listener with name CONTROLLER",
            ],
        ),
        (
            "controller-only with a client listener",
            &["process.roles=controller", "-inter.broker.listener.name"],
            &[
                "listeners",
                "controller.listener.names",
                "must only contain KRaft controller listeners",
            ],
        ),
        (
            "controller-only naming a controller listener as inter-broker",
            &[
                "process.roles=controller",
                "listeners=CONTROLLER://127.0.0.1:19093",
                "advertised.listeners=CONTROLLER://127.0.0.1:19093",
                "inter.broker.listener.name=CONTROLLER",
            ],
            &[
                "controller.listener.names",
                "inter.broker.listener.name",
                "must not contain an explicitly set",
            ],
        ),
        (
            "controller.listener.names names no listener",
            &["controller.listener.names=CTRL"],
            &[
                "controller.listener.names",
                "listeners",
                "must contain at least one value appearing in the 'listeners'",
            ],
        ),
        (
            "controller.listener.names names one listener that is missing",
            &[
                "controller.listener.names=CONTROLLER,CTRL",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CTRL:PLAINTEXT",
            ],
            &[
                "controller.listener.names",
                "must only contain values appearing in the 'listeners'",
            ],
        ),
        (
            "every listener is a controller listener",
            &[
                "listeners=CONTROLLER://127.0.0.1:19093",
                "-advertised.listeners",
                "-inter.broker.listener.name",
            ],
            &["listeners", "There must be at least one broker advertised listener"],
        ),
        (
            "inter-broker listener not advertised",
            &["inter.broker.listener.name=CONTROLLER"],
            &[
                "inter.broker.listener.name",
                "advertised.listeners",
                "must be a listener name defined in advertised.listeners",
            ],
        ),
        (
            "inter-broker listener not in the map",
            &["inter.broker.listener.name=INTERNAL"],
            &[
                "inter.broker.listener.name",
                "listener.security.protocol.map",
                "Listener with name INTERNAL defined in inter.broker.listener.name not found",
            ],
        ),
        (
            "inter-broker listener and protocol both set",
            &["inter.broker.security.protocol=PLAINTEXT"],
            &[
                "inter.broker.listener.name",
                "inter.broker.security.protocol",
                "Only one of",
            ],
        ),
        (
            // Accepted as a protocol, as Kafka does; no SSL listener is advertised.
            "inter-broker protocol SSL without an SSL listener",
            &["-inter.broker.listener.name", "inter.broker.security.protocol=SSL"],
            &[
                "inter.broker.listener.name",
                "must be a listener name defined in advertised.listeners",
            ],
        ),
        (
            "advertised listener that is not a listener",
            &["advertised.listeners=PLAINTEXT://127.0.0.1:9093,OTHER://127.0.0.1:9999,CONTROLLER://127.0.0.1:19093",
              "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"],
            &[
                "advertised.listeners",
                "listeners",
                "must be equal to or a subset",
            ],
        ),
        (
            "advertised 0.0.0.0",
            &["advertised.listeners=PLAINTEXT://0.0.0.0:9093,CONTROLLER://127.0.0.1:19093"],
            &["advertised.listeners", "nonroutable meta-address 0.0.0.0"],
        ),
        (
            // The second listener is served too, so its key store is needed.
            "second listener SSL without a key store",
            &[
                "listeners=PLAINTEXT://127.0.0.1:9093,SSL://127.0.0.1:9443,CONTROLLER://127.0.0.1:19093",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            ],
            &["ssl.keystore.location"],
        ),
        (
            // Kafka's default inter-broker mechanism, GSSAPI, is not spoken.
            "SASL_PLAINTEXT inter-broker listener without an inter-broker mechanism",
            &[
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                PLAIN_JAAS,
            ],
            &["sasl.mechanism.inter.broker.protocol", "GSSAPI"],
        ),
        (
            // Kafka's default controller mechanism, GSSAPI, is not spoken.
            "SASL controller listener without a controller mechanism",
            &[
                "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                CONTROLLER_PLAIN_JAAS,
            ],
            &["sasl.mechanism.controller.protocol", "GSSAPI", "controller listener"],
        ),
        (
            "SASL controller listener with GSSAPI named",
            &[
                "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN",
                "sasl.mechanism.controller.protocol=GSSAPI",
                CONTROLLER_PLAIN_JAAS,
            ],
            &["sasl.mechanism.controller.protocol", "GSSAPI"],
        ),
        (
            "SASL controller listener without the client's credentials",
            &[
                "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "sasl.enabled.mechanisms=SCRAM-SHA-256",
                "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
            ],
            &["listener.name.controller.scram-sha-256.sasl.jaas.config"],
        ),
        (
            // Served as a client listener's is: TLS needs the node's certificate.
            "SSL controller listener without a key store",
            &["listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT"],
            &["ssl.keystore.location"],
        ),
        (
            "listener name without a protocol",
            &["listeners=CLIENT://127.0.0.1:9093,CONTROLLER://127.0.0.1:19093"],
            &[
                "listeners",
                "listener.security.protocol.map",
                "No security protocol defined for listener CLIENT",
            ],
        ),
        (
            "unknown protocol in the map",
            &["listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:TLS"],
            &[
                "listener.security.protocol.map",
                "Invalid security protocol `TLS`",
            ],
        ),
        (
            "two listeners with one name",
            &["listeners=PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:19093"],
            &["listeners", "Each listener must have a different name"],
        ),
        (
            "two listeners on one port",
            &["listeners=PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9093"],
            &["listeners", "Each listener must have a different port"],
        ),
        (
            "malformed listener",
            &["listeners=PLAINTEXT:127.0.0.1:9093,CONTROLLER://127.0.0.1:19093"],
            &["listeners", "Unable to parse"],
        ),
        (
            "listener port out of range",
            &["listeners=PLAINTEXT://127.0.0.1:90930,CONTROLLER://127.0.0.1:19093"],
            &["listeners", "port"],
        ),
        (
            "own voter entry on another port than the controller listener",
            &["controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19999,3@127.0.0.1:19094"],
            &[
                "controller.quorum.voters",
                "listeners",
                "advertised.listeners",
                "127.0.0.1:19999",
                "CONTROLLER://127.0.0.1:19093",
            ],
        ),
        (
            "own voter entry on another address than the controller listener",
            &["controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.9:19093,3@127.0.0.1:19094"],
            &["controller.quorum.voters", "127.0.0.9:19093"],
        ),
        (
            "controller listener on port 0 with other voters",
            &[
                "listeners=PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:0",
                "-advertised.listeners",
            ],
            &["controller.quorum.voters", "could not reach it"],
        ),
        (
            "quorum keys without process.roles",
            &["-process.roles"],
            &["process.roles", "controller.quorum.voters", "is set but process.roles is not"],
        ),
        (
            "heartbeat interval 0",
            &["broker.heartbeat.interval.ms=0"],
            &["broker.heartbeat.interval.ms", "at least 1"],
        ),
        (
            "session timeout not a number",
            &["broker.session.timeout.ms=soon"],
            &["broker.session.timeout.ms"],
        ),
        (
            "negative election timeout",
            &["controller.quorum.election.timeout.ms=-1"],
            &["controller.quorum.election.timeout.ms", "at least 0"],
        ),
        (
            "fetch timeout not a number",
            &["controller.quorum.fetch.timeout.ms=2s"],
            &["controller.quorum.fetch.timeout.ms"],
        ),
        (
            "empty metadata.log.dir",
            &["metadata.log.dir="],
            &["metadata.log.dir"],
        ),
        (
            "unclean election neither true nor false",
            &["unclean.leader.election.enable=sometimes"],
            &["unclean.leader.election.enable"],
        ),
    ];
    for (what, changes, words) in cases {
        let text = variant(NODE2, changes);
        match validated(&text) {
            Ok(_) => panic!("{what}: accepted\n{text}"),
            Err(e) => {
                let message = e.to_string();
                for word in *words {
                    assert!(
                        message.contains(word),
                        "{what}: `{message}` does not contain `{word}`"
                    );
                }
            }
        }
    }
}

/// The PLAIN login of NODE2's listener when it is SASL: its own user and the users it accepts.
const PLAIN_JAAS: &str = "listener.name.plaintext.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required username=\"broker\" \
password=\"pw\" user_broker=\"pw\";";

#[test]
fn an_inter_broker_listener_may_be_sasl_or_tls() {
    let c = config(&variant(
        NODE2,
        &[
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            PLAIN_JAAS,
        ],
    ));
    let client = c.inter_broker_client.as_ref().unwrap();
    assert_eq!(client.protocol, "SASL_PLAINTEXT");
    assert_eq!(client.sasl.as_ref().unwrap().username, "broker");

    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pem = dir.path().join("node.pem");
    std::fs::write(&pem, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    let pem = pem.to_str().unwrap();
    let keystore = format!("ssl.keystore.location={pem}");
    let truststore = format!("ssl.truststore.location={pem}");
    let c = config(&variant(
        NODE2,
        &[
            "listeners=SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:19093",
            "advertised.listeners=SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:19093",
            "-inter.broker.listener.name",
            "inter.broker.security.protocol=SSL",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SSL:SSL",
            "ssl.keystore.type=PEM",
            "ssl.truststore.type=PEM",
            "ssl.client.auth=required",
            &keystore,
            &truststore,
        ],
    ));
    assert_eq!(c.kraft.inter_broker_listener_name, "SSL");
    let client = c.inter_broker_client.as_ref().unwrap();
    assert!(client.tls.is_some() && client.sasl.is_none());
    assert!(c.controller_client.is_none());
}

/// The PLAIN login of NODE2's controller listener when it is SASL.
const CONTROLLER_PLAIN_JAAS: &str = "listener.name.controller.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required username=\"controller\" \
password=\"cpw\" user_controller=\"cpw\";";

#[test]
fn a_controller_listener_may_be_sasl_or_tls_as_in_kafka() {
    // SASL_PLAINTEXT with PLAIN: served with the listener's users, reached with its username.
    let c = config(&variant(
        NODE2,
        &[
            "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.controller.protocol=PLAIN",
            CONTROLLER_PLAIN_JAAS,
        ],
    ));
    let served = c.controller_listener_security.as_ref().unwrap();
    assert!(served.sasl.is_some() && served.tls.is_none());
    let client = c.controller_client.as_ref().unwrap();
    assert_eq!(
        (client.listener.as_str(), client.protocol),
        ("CONTROLLER", "SASL_PLAINTEXT")
    );
    let sasl = client.sasl.as_ref().unwrap();
    assert_eq!(
        (sasl.mechanism, sasl.username.as_str()),
        (crate::security::Mechanism::Plain, "controller")
    );
    // The inter-broker listener is untouched.
    assert!(c.inter_broker_client.is_none());
    assert!(c.client_listeners[0].security.sasl.is_none());
    // With an authorizer, the nodes' principal on it is the SASL user, not User:ANONYMOUS:
    // warned when it is not a super user.
    let sasl_controller = [
        "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        CONTROLLER_PLAIN_JAAS,
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    ];
    let warnings = |super_users: &str| {
        let mut changes = sasl_controller.to_vec();
        changes.push(super_users);
        validated(&variant(NODE2, &changes)).unwrap().warnings
    };
    let w = warnings("super.users=User:ANONYMOUS");
    assert!(
        w.len() == 1 && w[0].contains("User:controller") && !w[0].contains("ANONYMOUS"),
        "{w:?}"
    );
    assert!(warnings("super.users=User:controller").is_empty());

    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pem = dir.path().join("node.pem");
    std::fs::write(&pem, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    let pem = pem.to_str().unwrap();
    let keystore = format!("listener.name.controller.ssl.keystore.location={pem}");
    let truststore = format!("listener.name.controller.ssl.truststore.location={pem}");

    // A broker-only node has no controller listener to serve, and reaches the controllers'.
    let c = config(&variant(
        NODE2,
        &[
            "process.roles=broker",
            "node.id=4",
            "listeners=PLAINTEXT://127.0.0.1:9095",
            "advertised.listeners=PLAINTEXT://127.0.0.1:9095",
            "listener.security.protocol.map=CONTROLLER:SASL_SSL,PLAINTEXT:PLAINTEXT",
            "sasl.mechanism.controller.protocol=SCRAM-SHA-512",
            "ssl.truststore.type=PEM",
            &truststore,
            "listener.name.controller.scram-sha-512.sasl.jaas.config=\
             org.apache.kafka.common.security.scram.ScramLoginModule required \
             username=\"b\" password=\"p\";",
        ],
    ));
    assert!(c.controller_listener_security.is_none());
    let client = c.controller_client.as_ref().unwrap();
    assert_eq!(client.protocol, "SASL_SSL");
    assert!(client.tls.is_some());

    // SSL with client certificates required, one certificate for both sides.
    let c = config(&variant(
        NODE2,
        &[
            "listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT",
            "ssl.keystore.type=PEM",
            "ssl.truststore.type=PEM",
            "listener.name.controller.ssl.client.auth=required",
            &keystore,
            &truststore,
        ],
    ));
    let served = c.controller_listener_security.as_ref().unwrap();
    assert!(served.tls.is_some() && served.sasl.is_none());
    let client = c.controller_client.as_ref().unwrap();
    assert!(client
        .tls
        .as_ref()
        .unwrap()
        .current()
        .client_auth_cert_resolver
        .has_certs());
    assert!(client.sasl.is_none());
    // The client listener stays PLAINTEXT.
    assert!(c.client_listeners[0].security.tls.is_none());
}

#[test]
fn kafka_accepts_a_controller_listener_in_advertised_listeners_and_so_do_we() {
    // Kafka 4.1 reads the controller's advertised endpoint from advertised.listeners (KIP-853).
    let c = config(&variant(
        NODE2,
        &["advertised.listeners=PLAINTEXT://localhost:9093,CONTROLLER://localhost:19093"],
    ));
    assert_eq!(c.kraft.advertised("CONTROLLER").unwrap().host, "localhost");
    assert_eq!(c.kraft.advertised_broker_listeners().len(), 1);
}

#[test]
fn a_standalone_node_keeps_todays_listener_rules() {
    // Without process.roles the advertised client listener must be named, as before.
    let err = validated("advertised.listeners=OTHER://localhost:9092\n").unwrap_err();
    assert!(err.to_string().contains("advertised.listeners"), "{err}");
    let c = config("listeners=PLAINTEXT://127.0.0.1:0\nnode.id=7\n");
    assert!(c.kraft.standalone);
    assert_eq!(c.kraft.voter_ids(), vec![7]);
    // An SSL client listener is served; its key store must be there.
    let err =
        validated("listeners=SSL://127.0.0.1:9093\ninter.broker.listener.name=SSL\n").unwrap_err();
    assert!(err.to_string().contains("ssl.keystore.location"), "{err}");
}

#[test]
fn the_shipped_cluster_files_are_valid_and_describe_one_cluster() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["config/cluster", "docker/cluster"] {
        let mut voters = None;
        for n in 1..=3 {
            let path = root.join(dir).join(format!("node-{n}.properties"));
            let raw = RawConfig::from_file(&path).unwrap();
            let v = BrokerConfig::from_raw(raw).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            assert!(v.warnings.is_empty(), "{path:?}: {:?}", v.warnings);
            let k = &v.config.kraft;
            assert_eq!(k.node_id, n);
            assert!(k.roles.is_combined());
            assert!(k.local_voter().is_some());
            assert_eq!(v.config.broker_rack, Some(format!("rack-{n}")));
            match &voters {
                None => voters = Some(k.voters.clone()),
                Some(first) => assert_eq!(first, &k.voters, "{path:?}"),
            }
        }
        assert_eq!(voters.unwrap().len(), 3);
    }
}
