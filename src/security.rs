//! Security types shared by the config, which reads them, and the outbound client, which uses
//! them: the SASL mechanisms, and how this broker's client secures its connections to another
//! broker's inter-broker listener (`config::inter_broker` reads it, `client::secure` speaks
//! it). A leaf module, so both layers may use it.

use std::fmt;
use std::sync::Arc;

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

/// What the inter-broker client needs to reach a SSL, SASL_PLAINTEXT or SASL_SSL listener.
#[derive(Clone)]
pub struct ClientSecurity {
    /// The inter-broker listener's name, for messages.
    pub listener: String,
    /// Its security protocol's name (`SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub protocol: &'static str,
    /// For SSL and SASL_SSL.
    pub tls: Option<Arc<ClientConfig>>,
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
