//! Security types shared by the config, which reads them, and the outbound client, which uses
//! them: the SASL mechanisms, and how this broker's client secures its connections to another
//! broker's inter-broker listener (`config::inter_broker` reads it, `client::secure` speaks
//! it). A leaf module, so both layers may use it.

use std::fmt;
use std::sync::{Arc, RwLock};

use rustls::ClientConfig;

/// A SASL mechanism KafkaIQ serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    /// RFC 7628, with Kafka's default validator of unsecured JSON Web Tokens.
    OAuthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// The TLS settings of this node's client for a listener: one cell that every clone shares, so
/// that a dynamic change of the listener's key or trust store (`listener.name.<l>.ssl.*`, per
/// broker) reaches every client made from it, as Kafka reconfigures its inter-broker channel
/// builders. A connection takes the settings current when it opens; an open one keeps its own.
#[derive(Clone)]
pub struct ClientTls(Arc<RwLock<Arc<ClientConfig>>>);

impl ClientTls {
    pub fn new(config: ClientConfig) -> ClientTls {
        ClientTls(Arc::new(RwLock::new(Arc::new(config))))
    }

    /// The settings for a connection opened now.
    pub fn current(&self) -> Arc<ClientConfig> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes `config` the settings of the connections opened from now on.
    pub fn replace(&self, config: Arc<ClientConfig>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = config;
    }
}

/// What the inter-broker client needs to reach a SSL, SASL_PLAINTEXT or SASL_SSL listener.
#[derive(Clone)]
pub struct ClientSecurity {
    /// The inter-broker listener's name, for messages.
    pub listener: String,
    /// Its security protocol's name (`SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub protocol: &'static str,
    /// For SSL and SASL_SSL.
    pub tls: Option<ClientTls>,
    /// For SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<SaslCredentials>,
}

/// The mechanism and credentials this broker authenticates with.
#[derive(Clone)]
pub struct SaslCredentials {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for ClientSecurity {
    // Neither the key store nor the password is ever printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("listener", &self.listener)
            .field("protocol", &self.protocol)
            .field("tls", &self.tls.is_some())
            .field(
                "sasl",
                &self
                    .sasl
                    .as_ref()
                    .map(|s| (s.mechanism.name(), s.username.as_str())),
            )
            .finish()
    }
}
