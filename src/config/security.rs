//! The client listener's security: its protocol (`listener.security.protocol.map`) and, for SSL
//! and SASL_SSL, the TLS server configuration built from the `ssl.*` keys, as Kafka 4.1 reads
//! them. A key prefixed `listener.name.<listener>.` (listener name in lower case) wins over the
//! plain key. Every bad value stops startup with an error naming the key.
//!
//! Key stores: PEM (`ssl.keystore.location` holding the certificate chain and the key, or the
//! inline `ssl.keystore.certificate.chain` / `ssl.keystore.key`) and PKCS12
//! (`ssl.keystore.location`, `ssl.keystore.password`). Trust stores likewise (PEM:
//! `ssl.truststore.location` or the inline `ssl.truststore.certificates`; PKCS12), and JKS,
//! Kafka's default `ssl.keystore.type` and `ssl.truststore.type`, read by our own `jks.rs`
//! (the key of a JKS entry is recovered with `ssl.key.password`, else the store's password).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::kraft::SecurityProtocol;
use super::{ConfigError, RawConfig};

pub const SSL_KEYSTORE_TYPE: &str = "ssl.keystore.type";
pub const SSL_KEYSTORE_LOCATION: &str = "ssl.keystore.location";
pub const SSL_KEYSTORE_PASSWORD: &str = "ssl.keystore.password";
pub const SSL_KEYSTORE_CERTIFICATE_CHAIN: &str = "ssl.keystore.certificate.chain";
pub const SSL_KEYSTORE_KEY: &str = "ssl.keystore.key";
pub const SSL_KEY_PASSWORD: &str = "ssl.key.password";
pub const SSL_TRUSTSTORE_TYPE: &str = "ssl.truststore.type";
pub const SSL_TRUSTSTORE_LOCATION: &str = "ssl.truststore.location";
pub const SSL_TRUSTSTORE_PASSWORD: &str = "ssl.truststore.password";
pub const SSL_TRUSTSTORE_CERTIFICATES: &str = "ssl.truststore.certificates";
pub const SSL_CLIENT_AUTH: &str = "ssl.client.auth";
pub const SSL_PRINCIPAL_MAPPING_RULES: &str = "ssl.principal.mapping.rules";
/// `ssl.endpoint.identification.algorithm`: `https` (Kafka's default) checks that the peer's
/// certificate names the host connected to; empty turns the check off.
pub const SSL_ENDPOINT_IDENTIFICATION_ALGORITHM: &str = "ssl.endpoint.identification.algorithm";
/// `ssl.allow.dn.changes` / `ssl.allow.san.changes` (Kafka's `BrokerSecurityConfigs`, default
/// false): whether a key store changed at runtime may carry another subject, or fewer
/// subject alternative names, than the one it replaces.
pub const SSL_ALLOW_DN_CHANGES: &str = "ssl.allow.dn.changes";
pub const SSL_ALLOW_SAN_CHANGES: &str = "ssl.allow.san.changes";
/// `sasl.mechanism.inter.broker.protocol`: the mechanism a broker authenticates with to other
/// brokers (Kafka's default GSSAPI, which KafkaIQ does not speak).
pub const SASL_MECHANISM_INTER_BROKER_PROTOCOL: &str = "sasl.mechanism.inter.broker.protocol";
pub const SASL_MECHANISM_CONTROLLER_PROTOCOL: &str = "sasl.mechanism.controller.protocol";

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

pub const SASL_ENABLED_MECHANISMS: &str = "sasl.enabled.mechanisms";
pub const SASL_SERVER_MAX_RECEIVE_SIZE: &str = "sasl.server.max.receive.size";
pub const CONNECTION_FAILED_AUTHENTICATION_DELAY_MS: &str =
    "connection.failed.authentication.delay.ms";
/// KIP-368: how long an authenticated SASL session lasts before the client must re-authenticate
/// on its connection (0, Kafka's default: no limit but the credential's own). Also per listener
/// and mechanism: `listener.name.<l>.<mechanism>.connections.max.reauth.ms`.
pub const CONNECTIONS_MAX_REAUTH_MS: &str = "connections.max.reauth.ms";
/// Kafka's default `sasl.server.max.receive.size`.
pub const SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT: usize = 524_288;
/// Kafka's default `connection.failed.authentication.delay.ms`.
pub const CONNECTION_FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: u64 = 100;
pub(super) const PLAIN_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.plain.PlainLoginModule";
const OAUTHBEARER_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
/// A listener and mechanism's server callback handler (`listener.name.<l>.<mechanism>.` + this).
const SASL_SERVER_CALLBACK_HANDLER_CLASS: &str = "sasl.server.callback.handler.class";

/// SCRAM users from the config file, KafkaIQ's own key: `user:password,…`, each user for both
/// SCRAM mechanisms. Kafka keeps SCRAM credentials only in the metadata log (set with
/// `kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=…]'`), and so does KafkaIQ; a
/// credential there wins over one from this key, and one deleted there stays deleted (see
/// [`crate::metadata::MetadataImage::scram_removed`]).
pub const KAFKAIQ_SASL_SCRAM_USERS: &str = "kafkaiq.sasl.scram.users";

pub use crate::security::Mechanism;

/// Kafka's server callback handler of `mechanism`, the only one KafkaIQ has.
fn server_callback_handler(mechanism: Mechanism) -> &'static str {
    match mechanism {
        Mechanism::Plain => "org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler",
        Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
            "org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler"
        }
        Mechanism::OAuthBearer => {
            "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
        }
    }
}

/// The options of Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler`, the OAUTHBEARER
/// validator a Kafka broker uses unless another is configured: options of the listener's
/// `oauthbearer.sasl.jaas.config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredValidatorOptions {
    /// `unsecuredValidatorPrincipalClaimName`: the claim naming the principal (default `sub`).
    pub principal_claim: String,
    /// `unsecuredValidatorScopeClaimName`: the claim holding the token's scope (default `scope`).
    pub scope_claim: String,
    /// `unsecuredValidatorRequiredScope`: space-separated scope items every token must have.
    pub required_scope: Vec<String>,
    /// `unsecuredValidatorAllowableClockSkewMs` (default 0).
    pub allowable_clock_skew_ms: u64,
}

impl Default for UnsecuredValidatorOptions {
    fn default() -> Self {
        UnsecuredValidatorOptions {
            principal_claim: "sub".to_owned(),
            scope_claim: "scope".to_owned(),
            required_scope: Vec::new(),
            allowable_clock_skew_ms: 0,
        }
    }
}

pub use crate::scram::{ScramCredential, ScramHash, SCRAM_ITERATIONS};

/// The SASL side of a SASL_PLAINTEXT or SASL_SSL listener.
#[derive(Clone)]
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, in the order written.
    pub mechanisms: Vec<Mechanism>,
    /// PLAIN's users and passwords: the `user_<name>="<password>"` options of
    /// `listener.name.<listener>.plain.sasl.jaas.config`.
    pub plain_users: std::collections::BTreeMap<String, String>,
    /// SCRAM credentials per mechanism and user ([`KAFKAIQ_SASL_SCRAM_USERS`]).
    pub scram: std::collections::BTreeMap<(&'static str, String), ScramCredential>,
    /// `sasl.server.max.receive.size`: the largest frame read before authentication completes.
    pub max_receive_size: usize,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay_ms: u64,
    /// OAUTHBEARER's validator, when the mechanism is enabled.
    pub oauthbearer: Option<UnsecuredValidatorOptions>,
    /// `connections.max.reauth.ms` of each enabled mechanism for which it is positive (KIP-368).
    pub max_reauth_ms: std::collections::BTreeMap<Mechanism, u64>,
}

impl fmt::Debug for SaslSettings {
    // Passwords are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanisms", &self.mechanisms)
            .field("plain_users", &self.plain_users.keys().collect::<Vec<_>>())
            .field("scram_users", &self.scram.keys().collect::<Vec<_>>())
            .field("max_receive_size", &self.max_receive_size)
            .field(
                "failed_authentication_delay_ms",
                &self.failed_authentication_delay_ms,
            )
            .field("oauthbearer", &self.oauthbearer)
            .field("max_reauth_ms", &self.max_reauth_ms)
            .finish()
    }
}

/// Whether `security::parse` reads this key: an `ssl.*` or SASL key above, plain or prefixed with
/// `listener.name.<listener>.`, or a listener's `<mechanism>.sasl.jaas.config`,
/// `<mechanism>.connections.max.reauth.ms` or `<mechanism>.sasl.server.callback.handler.class`.
pub fn is_security_key(key: &str) -> bool {
    const KEYS: &[&str] = &[
        SSL_KEYSTORE_TYPE,
        SSL_KEYSTORE_LOCATION,
        SSL_KEYSTORE_PASSWORD,
        SSL_KEYSTORE_CERTIFICATE_CHAIN,
        SSL_KEYSTORE_KEY,
        SSL_KEY_PASSWORD,
        SSL_TRUSTSTORE_TYPE,
        SSL_TRUSTSTORE_LOCATION,
        SSL_TRUSTSTORE_PASSWORD,
        SSL_TRUSTSTORE_CERTIFICATES,
        SSL_CLIENT_AUTH,
        SSL_PRINCIPAL_MAPPING_RULES,
        SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
        SSL_ALLOW_DN_CHANGES,
        SSL_ALLOW_SAN_CHANGES,
        SASL_MECHANISM_INTER_BROKER_PROTOCOL,
        SASL_MECHANISM_CONTROLLER_PROTOCOL,
        SASL_ENABLED_MECHANISMS,
        SASL_SERVER_MAX_RECEIVE_SIZE,
        CONNECTION_FAILED_AUTHENTICATION_DELAY_MS,
        CONNECTIONS_MAX_REAUTH_MS,
        KAFKAIQ_SASL_SCRAM_USERS,
        AUTHORIZER_CLASS_NAME,
        SUPER_USERS,
        ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    ];
    if KEYS.contains(&key) {
        return true;
    }
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    let Some((_, suffix)) = rest.split_once('.') else {
        return false;
    };
    // `<mechanism>.sasl.jaas.config` and the other keys Kafka reads per listener and mechanism.
    KEYS.contains(&suffix)
        || [
            ".sasl.jaas.config",
            ".connections.max.reauth.ms",
            ".sasl.server.callback.handler.class",
        ]
        .iter()
        .any(|k| suffix.ends_with(k))
}

/// `authorizer.class.name`: which authorizer checks every request; unset, none does.
pub const AUTHORIZER_CLASS_NAME: &str = "authorizer.class.name";
/// `super.users`: semicolon-separated principals that may do everything.
pub const SUPER_USERS: &str = "super.users";
/// `allow.everyone.if.no.acl.found`: the answer for a resource no ACL names (default false).
pub const ALLOW_EVERYONE_IF_NO_ACL_FOUND: &str = "allow.everyone.if.no.acl.found";
/// The one authorizer KafkaIQ has: Kafka's KRaft authorizer, ACLs in the metadata log.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

/// The authorizer's settings, when `authorizer.class.name` names Kafka's `StandardAuthorizer`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// `super.users`, each trimmed, empty entries dropped (as Kafka's
    /// `StandardAuthorizer#getConfiguredSuperUsers`).
    pub super_users: std::collections::BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
}

/// The authorizer `authorizer.class.name` turns on: `None` when unset or empty (every principal
/// may do everything, Kafka's default). Kafka loads any class named there; KafkaIQ has only the
/// `StandardAuthorizer`, so another name is refused at startup rather than silently leaving the
/// cluster open.
pub fn parse_authorizer(raw: &RawConfig) -> Result<Option<AuthorizerSettings>, ConfigError> {
    let invalid = |key: &str, value: &str, reason: &str| ConfigError::Invalid {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    match raw.get(AUTHORIZER_CLASS_NAME).map(str::trim) {
        None | Some("") => return Ok(None),
        Some(STANDARD_AUTHORIZER) => {}
        Some(other) => {
            return Err(invalid(
                AUTHORIZER_CLASS_NAME,
                other,
                "the only authorizer is org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ))
        }
    }
    let mut super_users = std::collections::BTreeSet::new();
    if let Some(value) = raw.get(SUPER_USERS) {
        for user in value.split(';').map(str::trim).filter(|u| !u.is_empty()) {
            // Kafka's `SecurityUtils.parseKafkaPrincipal`: `Type:name`.
            match user.split_once(':') {
                Some((t, _)) if !t.is_empty() => {
                    super_users.insert(user.to_owned());
                }
                _ => {
                    return Err(invalid(
                        SUPER_USERS,
                        value,
                        &format!("`{user}` is not a principal of the form `User:name`"),
                    ))
                }
            }
        }
    }
    // Kafka reads it with `Boolean.parseBoolean`: anything but `true` (any case) is false.
    let allow_everyone_if_no_acl_found = raw
        .get(ALLOW_EVERYONE_IF_NO_ACL_FOUND)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    Ok(Some(AuthorizerSettings {
        super_users,
        allow_everyone_if_no_acl_found,
    }))
}

/// What the client listener needs to secure its connections.
#[derive(Clone)]
pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    /// For SSL and SASL_SSL.
    pub tls: Option<Arc<ServerConfig>>,
    pub client_auth: ClientAuth,
    /// For SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<Arc<SaslSettings>>,
    /// The key store's certificate chain (the server's certificate first); empty without TLS.
    pub certificates: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for ListenerSecurity {
    // The server config holds the private key: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerSecurity")
            .field("protocol", &self.protocol)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("sasl", &self.sasl)
            .finish()
    }
}

impl ListenerSecurity {
    pub fn plaintext() -> ListenerSecurity {
        ListenerSecurity {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            client_auth: ClientAuth::None,
            sasl: None,
            certificates: Vec::new(),
        }
    }
}

/// Reads `ssl.*` keys for one listener, the listener-prefixed key first.
pub(super) struct Keys<'a> {
    pub(super) raw: &'a RawConfig,
    pub(super) prefix: String,
}

impl<'a> Keys<'a> {
    /// The value and the key it was found under.
    pub(super) fn get(&self, key: &str) -> Option<(String, &'a str)> {
        let prefixed = format!("{}{key}", self.prefix);
        if let Some(v) = self.raw.get(&prefixed) {
            return Some((prefixed, v));
        }
        self.raw.get(key).map(|v| (key.to_owned(), v))
    }

    fn name_of(&self, key: &str) -> String {
        self.get(key).map_or_else(|| key.to_owned(), |(k, _)| k)
    }

    pub(super) fn invalid(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        let (key, value) = match self.get(key) {
            Some((k, v)) => (k, v.to_owned()),
            None => (key.to_owned(), String::new()),
        };
        // Passwords and inline keys are never echoed.
        let value = if key.contains("password") || key.ends_with("ssl.keystore.key") {
            "[hidden]".to_owned()
        } else {
            value
        };
        ConfigError::Invalid {
            key,
            value,
            reason: reason.into(),
        }
    }
}

/// The security of the client listener `listener_name` speaking `protocol`.
pub fn parse(
    raw: &RawConfig,
    listener_name: &str,
    protocol: SecurityProtocol,
) -> Result<ListenerSecurity, ConfigError> {
    let keys = Keys {
        raw,
        prefix: format!("listener.name.{}.", listener_name.to_ascii_lowercase()),
    };
    let sasl = match protocol {
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
            Some(Arc::new(parse_sasl(&keys, listener_name)?))
        }
        _ => None,
    };
    if !matches!(protocol, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl) {
        return Ok(ListenerSecurity {
            protocol,
            tls: None,
            client_auth: ClientAuth::None,
            sasl,
            certificates: Vec::new(),
        });
    }
    // As in Kafka, a SASL_SSL listener asks for client certificates only through its
    // listener-prefixed `ssl.client.auth`: the broker-wide key applies to SSL listeners.
    let client_auth_value = match protocol {
        SecurityProtocol::SaslSsl => raw.get(&format!("{}{SSL_CLIENT_AUTH}", keys.prefix)),
        _ => keys.get(SSL_CLIENT_AUTH).map(|(_, v)| v),
    };
    let client_auth = match client_auth_value.map(|v| v.trim().to_ascii_lowercase()) {
        None => ClientAuth::None,
        Some(v) if v == "none" => ClientAuth::None,
        Some(v) if v == "requested" => ClientAuth::Requested,
        Some(v) if v == "required" => ClientAuth::Required,
        Some(_) => {
            return Err(keys.invalid(SSL_CLIENT_AUTH, "must be one of none, requested, required"))
        }
    };
    if let Some((_, rules)) = keys.get(SSL_PRINCIPAL_MAPPING_RULES) {
        if !rules.trim().eq_ignore_ascii_case("DEFAULT") {
            return Err(keys.invalid(
                SSL_PRINCIPAL_MAPPING_RULES,
                "only DEFAULT is supported (the principal is User:<the certificate's RFC 2253 \
                 distinguished name>)",
            ));
        }
    }
    let trust = read_truststore(&keys)?;
    let (certs, key) = read_keystore(&keys)?;

    // ring rather than aws-lc-rs: it builds without cmake or a C toolchain beyond cc. Its
    // provider is deprecated only for lacking post-quantum key exchange.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| keys.invalid(SSL_KEYSTORE_LOCATION, e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let mut roots = RootCertStore::empty();
            for cert in trust {
                roots
                    .add(cert)
                    .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(keys.invalid(
                    SSL_CLIENT_AUTH,
                    format!(
                        "client certificates are {}, but no trust store \
                         (ssl.truststore.location or ssl.truststore.certificates) is set",
                        if client_auth == ClientAuth::Required {
                            "required"
                        } else {
                            "requested"
                        }
                    ),
                ));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if client_auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = certs.clone();
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        keys.invalid(
            SSL_KEYSTORE_LOCATION,
            format!("the key store's certificate and key do not fit: {e}"),
        )
    })?;
    Ok(ListenerSecurity {
        protocol,
        tls: Some(Arc::new(config)),
        client_auth,
        sasl,
        certificates: chain,
    })
}

fn parse_sasl(keys: &Keys, listener_name: &str) -> Result<SaslSettings, ConfigError> {
    // Kafka's default is GSSAPI, which KafkaIQ does not serve: the key must name PLAIN.
    let written = keys
        .get(SASL_ENABLED_MECHANISMS)
        .map(|(_, v)| v)
        .unwrap_or("GSSAPI");
    let mut mechanisms = Vec::new();
    for name in written.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "PLAIN" => mechanisms.push(Mechanism::Plain),
            "SCRAM-SHA-256" => mechanisms.push(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => mechanisms.push(Mechanism::ScramSha512),
            "OAUTHBEARER" => mechanisms.push(Mechanism::OAuthBearer),
            other => {
                return Err(keys.invalid(
                    SASL_ENABLED_MECHANISMS,
                    format!(
                        "mechanism {other} is not supported{}: KafkaIQ serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER",
                        if keys.get(SASL_ENABLED_MECHANISMS).is_none() {
                            " (GSSAPI is Kafka's default)"
                        } else {
                            ""
                        }
                    ),
                ))
            }
        }
    }
    if mechanisms.is_empty() {
        return Err(keys.invalid(
            SASL_ENABLED_MECHANISMS,
            "a SASL listener needs at least one mechanism",
        ));
    }
    let lower = listener_name.to_ascii_lowercase();
    for mechanism in &mechanisms {
        // Kafka loads any class named here; KafkaIQ has only Kafka's default handler of each
        // mechanism, so another (an LDAP check, a JWKS-verifying OAUTHBEARER validator) is
        // refused rather than silently replaced by the default.
        let key = format!(
            "listener.name.{lower}.{}.{SASL_SERVER_CALLBACK_HANDLER_CLASS}",
            mechanism.name().to_ascii_lowercase()
        );
        if let Some(class) = keys.raw.get(&key) {
            if class.trim() != server_callback_handler(*mechanism) {
                return Err(ConfigError::Invalid {
                    key,
                    value: class.to_owned(),
                    reason: format!(
                        "KafkaIQ has only Kafka's default handler for {}: {}",
                        mechanism.name(),
                        server_callback_handler(*mechanism)
                    ),
                });
            }
        }
    }
    let mut plain_users = std::collections::BTreeMap::new();
    if mechanisms.contains(&Mechanism::Plain) {
        let options = jaas_options(
            keys,
            listener_name,
            Mechanism::Plain,
            PLAIN_LOGIN_MODULE,
            " user_<name>=\"<password>\"",
        )?;
        for (k, v) in options {
            if let Some(user) = k.strip_prefix("user_") {
                plain_users.insert(user.to_owned(), v);
            }
        }
    }
    let oauthbearer = if mechanisms.contains(&Mechanism::OAuthBearer) {
        // As Kafka 4.1: the broker does not start without the listener's JAAS entry for the
        // mechanism ("Could not find a 'KafkaServer' ... entry in the JAAS configuration").
        let options = jaas_options(
            keys,
            listener_name,
            Mechanism::OAuthBearer,
            OAUTHBEARER_LOGIN_MODULE,
            "",
        )?;
        Some(unsecured_validator_options(listener_name, &options)?)
    } else {
        None
    };
    let mut scram = std::collections::BTreeMap::new();
    let scram_hashes: Vec<(Mechanism, ScramHash)> = mechanisms
        .iter()
        .filter_map(|m| match m {
            Mechanism::ScramSha256 => Some((*m, ScramHash::Sha256)),
            Mechanism::ScramSha512 => Some((*m, ScramHash::Sha512)),
            Mechanism::Plain | Mechanism::OAuthBearer => None,
        })
        .collect();
    if !scram_hashes.is_empty() {
        let users = keys.raw.get(KAFKAIQ_SASL_SCRAM_USERS).unwrap_or_default();
        #[allow(deprecated)]
        let random = rustls::crypto::ring::default_provider().secure_random;
        for entry in users.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((user, password)) = entry
                .split_once(':')
                .filter(|(u, p)| !u.is_empty() && !p.is_empty())
            else {
                return Err(ConfigError::Invalid {
                    key: KAFKAIQ_SASL_SCRAM_USERS.to_owned(),
                    value: "[hidden]".to_owned(),
                    reason: "entries must be user:password".to_owned(),
                });
            };
            for (mechanism, hash) in &scram_hashes {
                let mut salt = vec![0u8; 16];
                random
                    .fill(&mut salt)
                    .map_err(|_| keys.invalid(KAFKAIQ_SASL_SCRAM_USERS, "no random salt"))?;
                scram.insert(
                    (mechanism.name(), user.to_owned()),
                    ScramCredential::new(*hash, password, salt, SCRAM_ITERATIONS),
                );
            }
        }
    }
    let max_receive_size = match keys.raw.get(SASL_SERVER_MAX_RECEIVE_SIZE) {
        None => SASL_SERVER_MAX_RECEIVE_SIZE_DEFAULT,
        Some(v) => v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| keys.invalid(SASL_SERVER_MAX_RECEIVE_SIZE, "must be a positive int"))?
            as usize,
    };
    let failed_authentication_delay_ms =
        match keys.raw.get(CONNECTION_FAILED_AUTHENTICATION_DELAY_MS) {
            None => CONNECTION_FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
            Some(v) => v
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    keys.invalid(
                        CONNECTION_FAILED_AUTHENTICATION_DELAY_MS,
                        "must be an int, at least 0",
                    )
                })? as u64,
        };
    let mut max_reauth_ms = std::collections::BTreeMap::new();
    for mechanism in &mechanisms {
        // As Kafka's `SaslChannelBuilder`: the listener's key for the mechanism, else the
        // listener's or the broker's. A value of 0 or less sets no limit.
        let per_mechanism = format!(
            "listener.name.{lower}.{}.{CONNECTIONS_MAX_REAUTH_MS}",
            mechanism.name().to_ascii_lowercase()
        );
        let (key, value) = match keys.raw.get(&per_mechanism) {
            Some(v) => (per_mechanism, v),
            None => match keys.get(CONNECTIONS_MAX_REAUTH_MS) {
                Some(found) => found,
                None => continue,
            },
        };
        let ms = value
            .trim()
            .parse::<i64>()
            .map_err(|_| ConfigError::Invalid {
                key,
                value: value.to_owned(),
                reason: "must be a long".to_owned(),
            })?;
        if ms > 0 {
            max_reauth_ms.insert(*mechanism, ms as u64);
        }
    }
    Ok(SaslSettings {
        mechanisms,
        plain_users,
        scram,
        max_receive_size,
        failed_authentication_delay_ms,
        oauthbearer,
        max_reauth_ms,
    })
}

/// The options of the listener's JAAS entry for `mechanism`
/// (`listener.name.<l>.<mechanism>.sasl.jaas.config`), which must name `module`; `hint` is the
/// options to suggest when it is missing.
fn jaas_options(
    keys: &Keys,
    listener_name: &str,
    mechanism: Mechanism,
    module: &str,
    hint: &str,
) -> Result<Vec<(String, String)>, ConfigError> {
    let jaas_key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        listener_name.to_ascii_lowercase(),
        mechanism.name().to_ascii_lowercase()
    );
    let jaas = keys
        .raw
        .get(&jaas_key)
        .ok_or_else(|| ConfigError::Invalid {
            key: jaas_key.clone(),
            value: String::new(),
            reason: format!(
                "{} is enabled on listener {listener_name}: set it to `{module} required{hint};`",
                mechanism.name()
            ),
        })?;
    let invalid = |reason: String| ConfigError::Invalid {
        key: jaas_key.clone(),
        value: "[hidden]".to_owned(),
        reason,
    };
    let (found, options) = parse_jaas(jaas).map_err(|e| invalid(e.to_owned()))?;
    if found != module {
        return Err(invalid(format!(
            "the login module must be {module}, not {found}"
        )));
    }
    Ok(options)
}

/// The unsecured validator's options from the OAUTHBEARER JAAS entry's, read as Kafka's
/// `OAuthBearerUnsecuredValidatorCallbackHandler` reads them (blank is the default). Kafka finds
/// a bad clock skew or scope item only when a client authenticates; here it stops startup.
fn unsecured_validator_options(
    listener_name: &str,
    options: &[(String, String)],
) -> Result<UnsecuredValidatorOptions, ConfigError> {
    let option = |name: &str| {
        options
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    };
    let invalid = |name: &str, value: &str, reason: &str| ConfigError::Invalid {
        key: format!(
            "listener.name.{}.oauthbearer.sasl.jaas.config",
            listener_name.to_ascii_lowercase()
        ),
        value: format!("{name}=\"{value}\""),
        reason: reason.to_owned(),
    };
    let mut validator = UnsecuredValidatorOptions::default();
    if let Some(claim) = option("unsecuredValidatorPrincipalClaimName") {
        validator.principal_claim = claim.to_owned();
    }
    if let Some(claim) = option("unsecuredValidatorScopeClaimName") {
        validator.scope_claim = claim.to_owned();
    }
    if let Some(scope) = option("unsecuredValidatorRequiredScope") {
        for item in scope.split(' ').filter(|i| !i.is_empty()) {
            // RFC 6749's scope-token: %x21 / %x23-5B / %x5D-7E.
            let valid = item
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
            if !valid {
                return Err(invalid(
                    "unsecuredValidatorRequiredScope",
                    scope,
                    &format!("invalid scope value: {item}"),
                ));
            }
            validator.required_scope.push(item.to_owned());
        }
    }
    if let Some(skew) = option("unsecuredValidatorAllowableClockSkewMs") {
        validator.allowable_clock_skew_ms = skew
            .parse::<i32>()
            .ok()
            .and_then(|ms| u64::try_from(ms).ok())
            .ok_or_else(|| {
                invalid(
                    "unsecuredValidatorAllowableClockSkewMs",
                    skew,
                    "must be an int, at least 0",
                )
            })?;
    }
    Ok(validator)
}

/// One JAAS login module entry, as Kafka's `JaasConfig` reads it: `<class> <flag> key=value ...;`,
/// values bare words or double-quoted (with `\` escapes). Gives the class and the options.
pub(super) fn parse_jaas(text: &str) -> Result<(String, Vec<(String, String)>), &'static str> {
    let mut tokens: Vec<String> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted value"),
                    Some('"') => break,
                    Some('\\') => value.push(chars.next().ok_or("unterminated quoted value")?),
                    Some(c) => value.push(c),
                }
            }
            tokens.push(value);
        } else if c == '=' || c == ';' {
            chars.next();
            tokens.push(c.to_string());
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '=' || c == ';' || c == '"' {
                    break;
                }
                word.push(c);
                chars.next();
            }
            tokens.push(word);
        }
    }
    let mut it = tokens.into_iter();
    let module = it
        .next()
        .ok_or("empty: expected `<LoginModule> required ...;`")?;
    let flag = it
        .next()
        .ok_or("expected a control flag after the login module")?;
    if !matches!(
        flag.as_str(),
        "required" | "requisite" | "sufficient" | "optional"
    ) {
        return Err("the control flag must be required, requisite, sufficient or optional");
    }
    let mut options = Vec::new();
    loop {
        match it.next() {
            None => return Err("the entry must end with `;`"),
            Some(t) if t == ";" => break,
            Some(key) => {
                if it.next().as_deref() != Some("=") {
                    return Err("expected key=value options");
                }
                let value = it.next().ok_or("expected a value after `=`")?;
                options.push((key, value));
            }
        }
    }
    if it.next().is_some() {
        return Err("one login module entry expected");
    }
    Ok((module, options))
}

/// The store type: as written, else PEM when the store is inline, else Kafka's default JKS.
fn store_type(keys: &Keys, type_key: &str, inline: bool) -> Result<String, ConfigError> {
    match keys.get(type_key) {
        Some((_, v)) => {
            let t = v.trim().to_ascii_uppercase();
            match t.as_str() {
                "PEM" | "PKCS12" | "JKS" => Ok(t),
                _ => Err(keys.invalid(type_key, "must be JKS, PKCS12 or PEM")),
            }
        }
        None if inline => Ok("PEM".to_owned()),
        None => Ok("JKS".to_owned()),
    }
}

fn read_file(keys: &Keys, location_key: &str) -> Result<Vec<u8>, ConfigError> {
    let (_, path) = keys.get(location_key).expect("checked by the caller");
    std::fs::read(path.trim())
        .map_err(|e| keys.invalid(location_key, format!("cannot read {}: {e}", path.trim())))
}

fn pem_certs(
    keys: &Keys,
    key: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| keys.invalid(key, format!("bad PEM: {e}")))?;
    Ok(certs)
}

/// The DER bytes of the first `ENCRYPTED PRIVATE KEY` block (a PKCS#8 EncryptedPrivateKeyInfo)
/// of a PEM text, if it has one.
fn encrypted_pem_block(text: &str) -> Option<Result<Vec<u8>, base64::DecodeError>> {
    use base64::Engine;
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    let body: String = text[start..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    Some(base64::engine::general_purpose::STANDARD.decode(body))
}

/// The private key of a PEM key store. An encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`, as
/// `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes it) is decrypted with `ssl.key.password`, as
/// Kafka does; PBES2 with AES or 3DES is supported, the legacy PBES1 schemes are not.
fn pem_key(keys: &Keys, key: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, ConfigError> {
    if let Some(block) = std::str::from_utf8(pem).ok().and_then(encrypted_pem_block) {
        let der = block.map_err(|e| keys.invalid(key, format!("bad PEM: {e}")))?;
        let Some((_, password)) = keys.get(SSL_KEY_PASSWORD) else {
            return Err(keys.invalid(key, "the private key is encrypted: set ssl.key.password"));
        };
        let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_slice())
            .map_err(|e| keys.invalid(key, format!("bad encrypted private key: {e}")))?;
        let plain = info.decrypt(password).map_err(|e| {
            keys.invalid(
                SSL_KEY_PASSWORD,
                format!(
                    "cannot decrypt the private key with it (a wrong password, or a scheme other \
                     than PBES2 with AES or 3DES): {e}"
                ),
            )
        })?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            plain.as_bytes().to_vec(),
        )));
    }
    rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|e| keys.invalid(key, format!("bad PEM: {e}")))?
        .ok_or_else(|| keys.invalid(key, "no private key in it"))
}

pub(super) type KeyStore = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

pub(super) fn read_keystore(keys: &Keys) -> Result<KeyStore, ConfigError> {
    let inline =
        keys.get(SSL_KEYSTORE_CERTIFICATE_CHAIN).is_some() || keys.get(SSL_KEYSTORE_KEY).is_some();
    let location = keys.get(SSL_KEYSTORE_LOCATION).is_some();
    if !inline && !location {
        return Err(keys.invalid(
            SSL_KEYSTORE_LOCATION,
            "an SSL listener needs a key store: set ssl.keystore.location (PEM or PKCS12) or \
             ssl.keystore.certificate.chain and ssl.keystore.key",
        ));
    }
    let store_type = store_type(keys, SSL_KEYSTORE_TYPE, inline)?;
    if inline {
        if location {
            return Err(keys.invalid(
                SSL_KEYSTORE_LOCATION,
                "set either ssl.keystore.location or ssl.keystore.certificate.chain and \
                 ssl.keystore.key, not both",
            ));
        }
        if store_type != "PEM" {
            return Err(keys.invalid(SSL_KEYSTORE_TYPE, "inline key stores are PEM"));
        }
        let chain = keys.get(SSL_KEYSTORE_CERTIFICATE_CHAIN).ok_or_else(|| {
            keys.invalid(
                SSL_KEYSTORE_CERTIFICATE_CHAIN,
                "needed with ssl.keystore.key",
            )
        })?;
        let key = keys.get(SSL_KEYSTORE_KEY).ok_or_else(|| {
            keys.invalid(
                SSL_KEYSTORE_KEY,
                "needed with ssl.keystore.certificate.chain",
            )
        })?;
        let certs = pem_certs(keys, SSL_KEYSTORE_CERTIFICATE_CHAIN, chain.1.as_bytes())?;
        if certs.is_empty() {
            return Err(keys.invalid(SSL_KEYSTORE_CERTIFICATE_CHAIN, "no certificate in it"));
        }
        let key = pem_key(keys, SSL_KEYSTORE_KEY, key.1.as_bytes())?;
        return Ok((certs, key));
    }
    let data = read_file(keys, SSL_KEYSTORE_LOCATION)?;
    if store_type == "PEM" {
        let certs = pem_certs(keys, SSL_KEYSTORE_LOCATION, &data)?;
        if certs.is_empty() {
            return Err(keys.invalid(SSL_KEYSTORE_LOCATION, "no certificate in the PEM file"));
        }
        let key = pem_key(keys, SSL_KEYSTORE_LOCATION, &data)?;
        return Ok((certs, key));
    }
    let password = keys
        .get(SSL_KEYSTORE_PASSWORD)
        .map(|(_, v)| v)
        .unwrap_or("");
    if store_type == "JKS" {
        let store = super::jks::JksStore::parse(&data, Some(password))
            .map_err(|e| keys.invalid(SSL_KEYSTORE_LOCATION, format!("{e}")))?;
        let entry = store.keys.first().ok_or_else(|| {
            keys.invalid(
                SSL_KEYSTORE_LOCATION,
                "no private key entry in the JKS store",
            )
        })?;
        let key_password = keys.get(SSL_KEY_PASSWORD).map_or(password, |(_, v)| v);
        let key = entry
            .private_key(key_password)
            .map_err(|e| keys.invalid(SSL_KEY_PASSWORD, e))?;
        let certs = entry
            .chain
            .iter()
            .map(|c| CertificateDer::from(c.clone()))
            .collect();
        return Ok((certs, PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key))));
    }
    let store =
        p12_keystore::KeyStore::from_pkcs12(&data, password, Default::default()).map_err(|e| {
            keys.invalid(
                SSL_KEYSTORE_LOCATION,
                format!(
                    "cannot open the PKCS12 store (wrong {}?): {e}",
                    keys.name_of(SSL_KEYSTORE_PASSWORD)
                ),
            )
        })?;
    let (_, chain) = store.private_key_chain().ok_or_else(|| {
        keys.invalid(
            SSL_KEYSTORE_LOCATION,
            "no private key entry in the PKCS12 store",
        )
    })?;
    let certs: Vec<CertificateDer<'static>> = chain
        .certs()
        .iter()
        .map(|c| CertificateDer::from(c.as_der().to_vec()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec()));
    Ok((certs, key))
}

pub(super) fn read_truststore(keys: &Keys) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    if let Some((_, pem)) = keys.get(SSL_TRUSTSTORE_CERTIFICATES) {
        return pem_certs(keys, SSL_TRUSTSTORE_CERTIFICATES, pem.as_bytes());
    }
    if keys.get(SSL_TRUSTSTORE_LOCATION).is_none() {
        return Ok(Vec::new());
    }
    let store_type = store_type(keys, SSL_TRUSTSTORE_TYPE, false)?;
    let data = read_file(keys, SSL_TRUSTSTORE_LOCATION)?;
    if store_type == "PEM" {
        return pem_certs(keys, SSL_TRUSTSTORE_LOCATION, &data);
    }
    if store_type == "JKS" {
        let password = keys.get(SSL_TRUSTSTORE_PASSWORD).map(|(_, v)| v);
        let store = super::jks::JksStore::parse(&data, password)
            .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e))?;
        // As Java's trust managers: the trusted certificates, and each key entry's own.
        let mut certs: Vec<CertificateDer<'static>> = store
            .certificates
            .into_iter()
            .map(CertificateDer::from)
            .collect();
        certs.extend(
            store
                .keys
                .into_iter()
                .filter_map(|k| k.chain.into_iter().next())
                .map(CertificateDer::from),
        );
        return Ok(certs);
    }
    let password = keys
        .get(SSL_TRUSTSTORE_PASSWORD)
        .map(|(_, v)| v)
        .unwrap_or("");
    let store = p12_keystore::KeyStore::from_pkcs12(
        &data,
        password,
        p12_keystore::Pkcs12ImportPolicy::Relaxed,
    )
    .map_err(|e| {
        keys.invalid(
            SSL_TRUSTSTORE_LOCATION,
            format!("cannot open the PKCS12 store: {e}"),
        )
    })?;
    let mut certs = Vec::new();
    for (_, entry) in store.entries() {
        match entry {
            p12_keystore::KeyStoreEntry::Certificate(c) => {
                certs.push(CertificateDer::from(c.as_der().to_vec()))
            }
            p12_keystore::KeyStoreEntry::PrivateKeyChain(chain) => certs.extend(
                chain
                    .certs()
                    .iter()
                    .map(|c| CertificateDer::from(c.as_der().to_vec())),
            ),
            _ => {}
        }
    }
    Ok(certs)
}

/// The subject (RFC 2253) and the subject alternative names of a certificate, as Kafka's
/// `SslFactory.CertificateEntries` compares them (each name as `[type, value]`, Java's
/// `X509Certificate#getSubjectAlternativeNames`).
fn certificate_names(der: &[u8]) -> Option<(String, BTreeSet<String>)> {
    use x509_parser::extensions::GeneralName;
    let subject = principal_of_certificate(der)?
        .strip_prefix("User:")?
        .to_owned();
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut sans = BTreeSet::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            sans.insert(match name {
                GeneralName::RFC822Name(v) => format!("[1, {v}]"),
                GeneralName::DNSName(v) => format!("[2, {v}]"),
                GeneralName::URI(v) => format!("[6, {v}]"),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => format!("[7, {}]", std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3])),
                    16 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(b);
                        format!("[7, {}]", std::net::Ipv6Addr::from(a))
                    }
                    _ => format!("[7, {b:?}]"),
                },
                GeneralName::DirectoryName(n) => format!("[4, {n}]"),
                GeneralName::RegisteredID(oid) => format!("[8, {oid}]"),
                other => format!("{other:?}"),
            });
        }
    }
    Some((subject, sans))
}

/// Kafka's `SslFactory#validateReconfiguration` check of a listener's new key store against
/// the one it serves (`CertificateEntries#ensureCompatible`): the same subject unless
/// `ssl.allow.dn.changes`, and every subject alternative name the old certificate had unless
/// `ssl.allow.san.changes` (read for `listener_name`, the prefixed key first). Says why not.
pub fn check_keystore_change(
    raw: &RawConfig,
    listener_name: &str,
    old: &ListenerSecurity,
    new: &ListenerSecurity,
) -> Result<(), String> {
    let keys = Keys {
        raw,
        prefix: format!("listener.name.{}.", listener_name.to_ascii_lowercase()),
    };
    let allowed = |key: &str| {
        keys.get(key)
            .is_some_and(|(_, v)| v.trim().eq_ignore_ascii_case("true"))
    };
    let (Some(old_cert), Some(new_cert)) = (old.certificates.first(), new.certificates.first())
    else {
        return Ok(());
    };
    let (Some((old_dn, old_sans)), Some((new_dn, new_sans))) =
        (certificate_names(old_cert), certificate_names(new_cert))
    else {
        return Err("the key store's certificate cannot be read".to_owned());
    };
    if !allowed(SSL_ALLOW_DN_CHANGES) && old_dn != new_dn {
        return Err(format!(
            "Keystore DistinguishedName does not match:  existing={{DN={old_dn}}}, new={{DN={new_dn}}}"
        ));
    }
    if !allowed(SSL_ALLOW_SAN_CHANGES) && !old_sans.is_subset(&new_sans) {
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
        return Err(format!(
            "Keystore SubjectAltNames do not match:  existing={{SAN=[{}]}}, new={{SAN=[{}]}}",
            list(&old_sans),
            list(&new_sans)
        ));
    }
    Ok(())
}

/// Kafka's default principal of a TLS client: `User:` and the subject of its certificate as
/// Java's `X500Principal#getName()` prints it (RFC 2253, most specific RDN first, no spaces
/// after commas), so that ACLs and `super.users` written for Kafka name the same principals;
/// `User:ANONYMOUS` without a certificate. See [`rfc2253_attribute`].
pub fn principal_of_certificate(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(rfc2253_attribute)
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(format!(
        "User:{}",
        rdns.into_iter().rev().collect::<Vec<_>>().join(",")
    ))
}

/// One attribute as Java writes it in RFC 2253 form: the keyword where RFC 2253 has one (CN, C,
/// L, ST, O, OU, STREET, DC, UID), else the dotted OID. A value under a dotted OID (an email
/// address, say) or of a non-string type is `#` and the hex of its whole DER encoding; a string
/// value has `,=+<>#;"\` escaped with a backslash wherever they are, NUL as `\00`, and leading
/// and trailing spaces escaped.
fn rfc2253_attribute(atv: &x509_parser::x509::AttributeTypeAndValue<'_>) -> String {
    use x509_parser::asn1_rs::{Class, Tag, ToDer};
    let oid = atv.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    let value = atv.attr_value();
    let string_type = value.header.class() == Class::Universal
        && [
            Tag::PrintableString,
            Tag::T61String,
            Tag::Ia5String,
            Tag::GeneralString,
            Tag::BmpString,
            Tag::Utf8String,
        ]
        .contains(&value.header.tag());
    let Some(keyword) = keyword.filter(|_| string_type) else {
        let der = value.to_der_vec().unwrap_or_default();
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        return format!("{}=#{hex}", keyword.unwrap_or(&oid));
    };
    format!(
        "{keyword}={}",
        escape_rfc2253(&String::from_utf8_lossy(value.data))
    )
}

fn escape_rfc2253(value: &str) -> String {
    let mut escaped: Vec<char> = Vec::with_capacity(value.len());
    for c in value.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => escaped.extend(['\\', c]),
            '\0' => escaped.extend(['\\', '0', '0']),
            c => escaped.push(c),
        }
    }
    let blank = |c: &char| *c == ' ' || *c == '\r';
    let lead = escaped.iter().take_while(|c| blank(c)).count();
    let trail = escaped.len() - escaped.iter().rev().take_while(|c| blank(c)).count();
    let mut out = String::with_capacity(escaped.len() + 2);
    for (i, c) in escaped.into_iter().enumerate() {
        if i < lead || i >= trail {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::config) fn raw(entries: &[(&str, &str)]) -> RawConfig {
        let mut raw = RawConfig::default();
        for (k, v) in entries {
            raw.set(k, v);
        }
        raw
    }

    fn err(raw: &RawConfig) -> String {
        parse(raw, "SSL", SecurityProtocol::Ssl)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_authorizer_is_off_unless_the_standard_authorizer_is_named() {
        assert_eq!(parse_authorizer(&raw(&[])).unwrap(), None);
        assert_eq!(
            parse_authorizer(&raw(&[(SUPER_USERS, "User:admin")])).unwrap(),
            None
        );
        let on = parse_authorizer(&raw(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (SUPER_USERS, " User:admin ; ;User:CN=broker,O=x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            on.super_users.iter().collect::<Vec<_>>(),
            ["User:CN=broker,O=x", "User:admin"]
        );
        assert!(!on.allow_everyone_if_no_acl_found);
        let open = parse_authorizer(&raw(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (ALLOW_EVERYONE_IF_NO_ACL_FOUND, "TRUE"),
        ]))
        .unwrap()
        .unwrap();
        assert!(open.allow_everyone_if_no_acl_found);
        let e = parse_authorizer(&raw(&[(
            AUTHORIZER_CLASS_NAME,
            "kafka.security.authorizer.AclAuthorizer",
        )]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`authorizer.class.name`"), "{e}");
        let e = parse_authorizer(&raw(&[
            (AUTHORIZER_CLASS_NAME, STANDARD_AUTHORIZER),
            (SUPER_USERS, "admin"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("`super.users`"), "{e}");
    }

    #[test]
    fn store_types_are_jks_by_default_and_errors_name_the_key() {
        // Kafka's default type is JKS: a location without a type is read as JKS.
        let e = err(&raw(&[("ssl.keystore.location", "/x/broker.jks")]));
        assert!(
            e.contains("`ssl.keystore.location`") && e.contains("/x/broker.jks"),
            "{e}"
        );
        let e = err(&raw(&[
            ("ssl.keystore.location", "/x/broker.jks"),
            ("ssl.keystore.type", "BKS"),
        ]));
        assert!(
            e.contains("`ssl.keystore.type`") && e.contains("JKS"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let damaged = dir.path().join("damaged.jks");
        std::fs::write(&damaged, [0xfe, 0xed, 0xfe, 0xed, 0, 0, 0, 2]).unwrap();
        let e = err(&raw(&[
            ("ssl.keystore.location", damaged.to_str().unwrap()),
            ("ssl.keystore.password", "secret"),
        ]));
        assert!(e.contains("`ssl.keystore.location`"), "{e}");
    }

    #[test]
    fn listener_prefixed_keys_win_and_errors_name_them() {
        let e = err(&raw(&[
            ("ssl.keystore.type", "PEM"),
            ("listener.name.ssl.ssl.keystore.type", "BKS"),
            ("ssl.keystore.location", "/x/k.pem"),
        ]));
        assert!(e.contains("`listener.name.ssl.ssl.keystore.type`"), "{e}");
    }

    #[test]
    fn security_keys_are_known_plain_and_listener_prefixed() {
        assert!(is_security_key("ssl.keystore.location"));
        assert!(is_security_key("listener.name.secure.ssl.client.auth"));
        assert!(is_security_key(
            "listener.name.sasl_ssl.plain.sasl.jaas.config"
        ));
        assert!(!is_security_key("listener.name.x.log.retention.ms"));
        assert!(!is_security_key("ssl.nonsense"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let e = err(&raw(&[("ssl.client.auth", "sometimes")]));
        assert!(e.contains("`ssl.client.auth`"), "{e}");
        let e = err(&raw(&[]));
        assert!(e.contains("`ssl.keystore.location`"), "{e}");
        let e = err(&raw(&[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", "/nonexistent/k.pem"),
        ]));
        assert!(
            e.contains("`ssl.keystore.location`") && e.contains("cannot read"),
            "{e}"
        );
        let e = err(&raw(&[(
            "ssl.principal.mapping.rules",
            "RULE:^CN=(.*)$/$1/",
        )]));
        assert!(e.contains("`ssl.principal.mapping.rules`"), "{e}");
    }

    #[test]
    fn a_pem_key_store_builds_a_tls_config_and_a_pkcs12_password_is_never_echoed() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let sec = parse(
            &raw(&[
                (
                    "listener.name.secure.ssl.keystore.certificate.chain",
                    &cert.pem(),
                ),
                (
                    "listener.name.secure.ssl.keystore.key",
                    &key.serialize_pem(),
                ),
            ]),
            "SECURE",
            SecurityProtocol::Ssl,
        )
        .unwrap();
        assert!(sec.tls.is_some());
        let dir = tempfile::tempdir().unwrap();
        let p12 = dir.path().join("k.p12");
        std::fs::write(&p12, b"not a pkcs12 store").unwrap();
        let e = err(&raw(&[
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", p12.to_str().unwrap()),
            ("ssl.keystore.password", "s3cret"),
        ]));
        assert!(
            e.contains("`ssl.keystore.location`") && !e.contains("s3cret"),
            "{e}"
        );
    }

    #[test]
    fn a_sasl_ssl_listener_asks_for_certificates_only_through_its_own_client_auth_key() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (chain, pem_key) = (cert.pem(), key.serialize_pem());
        let listener = |protocol, extra: &[(&str, &str)]| {
            let mut entries = vec![
                ("ssl.keystore.certificate.chain", chain.as_str()),
                ("ssl.keystore.key", pem_key.as_str()),
                ("ssl.truststore.type", "PEM"),
                ("ssl.truststore.certificates", chain.as_str()),
                ("sasl.enabled.mechanisms", "PLAIN"),
                (
                    "listener.name.secure.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \
                     user_a=\"b\";",
                ),
                ("ssl.client.auth", "required"),
            ];
            entries.extend_from_slice(extra);
            parse(&raw(&entries), "SECURE", protocol)
                .unwrap()
                .client_auth
        };
        assert_eq!(listener(SecurityProtocol::Ssl, &[]), ClientAuth::Required);
        assert_eq!(listener(SecurityProtocol::SaslSsl, &[]), ClientAuth::None);
        assert_eq!(
            listener(
                SecurityProtocol::SaslSsl,
                &[("listener.name.secure.ssl.client.auth", "requested")]
            ),
            ClientAuth::Requested
        );
    }

    #[test]
    fn an_encrypted_pem_key_is_opened_with_the_key_password_and_refused_without_it() {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
        for file in ["broker-encrypted-key.pem", "broker-encrypted-key-3des.pem"] {
            let location = format!("{fixtures}/{file}");
            let store = |password: Option<&str>| {
                let mut entries = vec![
                    ("ssl.keystore.type", "PEM"),
                    ("ssl.keystore.location", location.as_str()),
                ];
                entries.extend(password.map(|p| ("ssl.key.password", p)));
                parse(&raw(&entries), "SSL", SecurityProtocol::Ssl)
            };
            let sec = store(Some("fixture-key-pass")).unwrap();
            assert!(sec.tls.is_some(), "{file}");
            let e = store(None).unwrap_err().to_string();
            assert!(
                e.contains("`ssl.keystore.location`") && e.contains("ssl.key.password"),
                "{file}: {e}"
            );
            let e = store(Some("not-the-pass")).unwrap_err().to_string();
            assert!(
                e.contains("`ssl.key.password`") && !e.contains("not-the-pass"),
                "{file}: {e}"
            );
        }
    }

    #[test]
    fn oauthbearer_options_and_reauthentication_limits_are_read_per_listener_and_mechanism() {
        let sasl = |entries: &[(&str, &str)]| {
            parse(
                &raw(entries),
                "SASL_PLAINTEXT",
                SecurityProtocol::SaslPlaintext,
            )
            .map(|s| s.sasl.unwrap())
            .map_err(|e| e.to_string())
        };
        let jaas = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config";
        let module = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
        let s = sasl(&[
            (SASL_ENABLED_MECHANISMS, "OAUTHBEARER,PLAIN"),
            (jaas, &format!("{module} required;")),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                &format!("{PLAIN_LOGIN_MODULE} required user_a=\"b\";"),
            ),
            (CONNECTIONS_MAX_REAUTH_MS, "60000"),
            (
                "listener.name.sasl_plaintext.plain.connections.max.reauth.ms",
                "0",
            ),
        ])
        .unwrap();
        assert_eq!(s.oauthbearer, Some(UnsecuredValidatorOptions::default()));
        assert_eq!(
            s.max_reauth_ms.clone().into_iter().collect::<Vec<_>>(),
            [(Mechanism::OAuthBearer, 60_000)]
        );
        let s = sasl(&[
            (SASL_ENABLED_MECHANISMS, "OAUTHBEARER"),
            (
                jaas,
                &format!(
                    "{module} required unsecuredValidatorPrincipalClaimName=\" client_id \" \
                     unsecuredValidatorScopeClaimName=scp unsecuredValidatorRequiredScope=\"a  b\" \
                     unsecuredValidatorAllowableClockSkewMs=\"250\";"
                ),
            ),
            (
                "listener.name.sasl_plaintext.connections.max.reauth.ms",
                "5000",
            ),
        ])
        .unwrap();
        assert_eq!(
            s.oauthbearer.clone().unwrap(),
            UnsecuredValidatorOptions {
                principal_claim: "client_id".to_owned(),
                scope_claim: "scp".to_owned(),
                required_scope: vec!["a".to_owned(), "b".to_owned()],
                allowable_clock_skew_ms: 250,
            }
        );
        assert_eq!(s.max_reauth_ms[&Mechanism::OAuthBearer], 5_000);
        for (entries, key) in [
            (vec![(SASL_ENABLED_MECHANISMS, "OAUTHBEARER")], jaas),
            (
                vec![
                    (SASL_ENABLED_MECHANISMS, "OAUTHBEARER"),
                    (jaas, "org.apache.kafka.common.security.plain.PlainLoginModule required;"),
                ],
                jaas,
            ),
            (
                vec![
                    (SASL_ENABLED_MECHANISMS, "OAUTHBEARER"),
                    (jaas, "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorAllowableClockSkewMs=-1;"),
                ],
                jaas,
            ),
            (
                vec![
                    (SASL_ENABLED_MECHANISMS, "OAUTHBEARER"),
                    (jaas, "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorRequiredScope=\"a\\\\b\";"),
                ],
                jaas,
            ),
            (
                vec![
                    (SASL_ENABLED_MECHANISMS, "OAUTHBEARER"),
                    (jaas, "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"),
                    ("listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms", "soon"),
                ],
                "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms",
            ),
        ] {
            let e = sasl(&entries).unwrap_err();
            assert!(e.contains(&format!("`{key}`")), "{e}");
        }
        assert!(is_security_key(
            "listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms"
        ));
        assert!(is_security_key(CONNECTIONS_MAX_REAUTH_MS));
    }

    #[test]
    fn the_principal_is_the_rfc2253_subject() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CountryName, "DE");
        dn.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        dn.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            principal_of_certificate(cert.der()).unwrap(),
            "User:CN=alice,O=Acme\\, Inc,C=DE"
        );
        // What Java 17's X500Principal#getName() prints for this certificate (see the
        // fixtures' README): the email address under its OID as the hex of its DER encoding,
        // `=`, `#` and `;` escaped anywhere, leading and trailing spaces escaped.
        let pem = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tls/subject-escapes.crt"
        ))
        .unwrap();
        let der = rustls_pemfile::certs(&mut &pem[..])
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(
            principal_of_certificate(&der).unwrap(),
            "User:1.2.840.113549.1.9.1=#160b7840792e6578616d706c65,CN=\\ a\\=b\\#c\\;d\\ ,\
             O=Acme\\, Inc,C=DE"
        );
    }

    /// A listener secured by an inline PEM store of a new self-signed certificate.
    fn listener_with(cn: &str, sans: &[&str], extra: &[(&str, &str)]) -> ListenerSecurity {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        let mut entries = vec![
            (
                "listener.name.secure.ssl.keystore.certificate.chain",
                cert.pem(),
            ),
            ("listener.name.secure.ssl.keystore.key", key.serialize_pem()),
        ];
        entries.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let entries: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        parse(&raw(&entries), "SECURE", SecurityProtocol::Ssl).unwrap()
    }

    #[test]
    fn a_new_key_store_keeps_its_subject_and_names_unless_changes_are_allowed() {
        let none = raw(&[]);
        let old = listener_with("broker", &["a.example", "b.example"], &[]);
        let same = listener_with("broker", &["b.example", "a.example", "c.example"], &[]);
        assert_eq!(check_keystore_change(&none, "SECURE", &old, &same), Ok(()));
        let renamed = listener_with("other", &["a.example", "b.example"], &[]);
        let e = check_keystore_change(&none, "SECURE", &old, &renamed).unwrap_err();
        assert!(
            e.starts_with("Keystore DistinguishedName does not match")
                && e.contains("DN=CN=broker")
                && e.contains("DN=CN=other"),
            "{e}"
        );
        let fewer = listener_with("broker", &["a.example"], &[]);
        let e = check_keystore_change(&none, "SECURE", &old, &fewer).unwrap_err();
        assert!(
            e.starts_with("Keystore SubjectAltNames do not match") && e.contains("[2, b.example]"),
            "{e}"
        );
        // `ssl.allow.dn.changes` / `ssl.allow.san.changes`, plain or for the listener.
        let allow = raw(&[
            ("ssl.allow.dn.changes", "true"),
            ("listener.name.secure.ssl.allow.san.changes", "TRUE"),
        ]);
        assert_eq!(
            check_keystore_change(&allow, "SECURE", &old, &renamed),
            Ok(())
        );
        assert_eq!(
            check_keystore_change(&allow, "SECURE", &old, &fewer),
            Ok(())
        );
        assert!(is_security_key("listener.name.secure.ssl.allow.dn.changes"));
        assert!(is_security_key("ssl.allow.san.changes"));
    }
}
