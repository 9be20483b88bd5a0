//! How this broker's own client secures its connections to another node's listener, read as
//! Kafka 4.1 reads it for its two outbound channels: to other brokers' inter-broker listener
//! (replica fetches, transaction markers) from `sasl.mechanism.inter.broker.protocol`, and to
//! the controllers' listener (the first of `controller.listener.names`: Raft messages between
//! voters, the metadata log fetch, registration, heartbeats, AlterPartition, forwarding) from
//! `sasl.mechanism.controller.protocol`; for either, the `ssl.*` keys of that listener (the
//! `listener.name.<listener>.` key first) and the `username` and `password` options of the
//! listener's `listener.name.<listener>.<mechanism>.sasl.jaas.config`.
//!
//! TLS: the trust store verifies the other node's certificate; the key store, when one is
//! set, is the certificate this node presents when the other asks for one
//! (`ssl.client.auth=requested` or `required`); `ssl.endpoint.identification.algorithm`
//! (default `https`) checks that the certificate names the host connected to, and empty turns
//! that check off (the chain is still verified).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

use super::kraft::SecurityProtocol;
use super::security::{
    parse_jaas, read_keystore, read_truststore, Keys, Mechanism, PLAIN_LOGIN_MODULE,
    SASL_MECHANISM_CONTROLLER_PROTOCOL, SASL_MECHANISM_INTER_BROKER_PROTOCOL,
    SSL_ENDPOINT_IDENTIFICATION_ALGORITHM, SSL_KEYSTORE_CERTIFICATE_CHAIN, SSL_KEYSTORE_KEY,
    SSL_KEYSTORE_LOCATION, SSL_TRUSTSTORE_LOCATION,
};
use super::{ConfigError, RawConfig};
pub use crate::security::{ClientSecurity, ClientTls, SaslCredentials};

const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// Which of a node's outbound channels a listener is reached by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// To other brokers' `inter.broker.listener.name`.
    InterBroker,
    /// To the controllers' listener (`controller.listener.names`).
    Controller,
}

impl Channel {
    /// The key naming the SASL mechanism of the channel (Kafka's default for both: GSSAPI).
    pub fn mechanism_key(self) -> &'static str {
        match self {
            Channel::InterBroker => SASL_MECHANISM_INTER_BROKER_PROTOCOL,
            Channel::Controller => SASL_MECHANISM_CONTROLLER_PROTOCOL,
        }
    }

    fn listener(self) -> &'static str {
        match self {
            Channel::InterBroker => "the inter-broker listener",
            Channel::Controller => "the controller listener",
        }
    }

    fn peers(self) -> &'static str {
        match self {
            Channel::InterBroker => "the other brokers",
            Channel::Controller => "the controllers",
        }
    }
}

/// The client security of the inter-broker listener `listener_name` speaking `protocol`;
/// `None` for PLAINTEXT.
pub fn parse(
    raw: &RawConfig,
    listener_name: &str,
    protocol: SecurityProtocol,
) -> Result<Option<ClientSecurity>, ConfigError> {
    parse_for(raw, listener_name, protocol, Channel::InterBroker)
}

/// The client security of listener `listener_name` speaking `protocol`, reached by `channel`;
/// `None` for PLAINTEXT.
pub fn parse_for(
    raw: &RawConfig,
    listener_name: &str,
    protocol: SecurityProtocol,
    channel: Channel,
) -> Result<Option<ClientSecurity>, ConfigError> {
    if protocol == SecurityProtocol::Plaintext {
        return Ok(None);
    }
    let keys = Keys {
        raw,
        prefix: format!("listener.name.{}.", listener_name.to_ascii_lowercase()),
    };
    let sasl = match protocol {
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
            Some(credentials(raw, listener_name, channel)?)
        }
        _ => None,
    };
    let tls = match protocol {
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl => {
            Some(ClientTls::new(tls_config(&keys, listener_name, channel)?))
        }
        _ => None,
    };
    Ok(Some(ClientSecurity {
        listener: listener_name.to_owned(),
        protocol: protocol.name(),
        tls,
        sasl,
    }))
}

fn credentials(
    raw: &RawConfig,
    listener_name: &str,
    channel: Channel,
) -> Result<SaslCredentials, ConfigError> {
    let invalid = |key: &str, value: &str, reason: String| ConfigError::Invalid {
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    // Kafka's default is GSSAPI, which KafkaIQ does not speak.
    let mechanism_key = channel.mechanism_key();
    let written = raw.get(mechanism_key);
    let mechanism = match written.map(str::trim).unwrap_or("GSSAPI") {
        "PLAIN" => Mechanism::Plain,
        "SCRAM-SHA-256" => Mechanism::ScramSha256,
        "SCRAM-SHA-512" => Mechanism::ScramSha512,
        other => {
            return Err(invalid(
                mechanism_key,
                written.unwrap_or_default(),
                format!(
                    "{} {listener_name} is SASL, and mechanism {other}{} is not supported: set \
                     {mechanism_key} to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                    channel.listener(),
                    if written.is_none() {
                        " (Kafka's default)"
                    } else {
                        ""
                    }
                ),
            ))
        }
    };
    let jaas_key = format!(
        "listener.name.{}.{}.sasl.jaas.config",
        listener_name.to_ascii_lowercase(),
        mechanism.name().to_ascii_lowercase()
    );
    let module = if mechanism == Mechanism::Plain {
        PLAIN_LOGIN_MODULE
    } else {
        SCRAM_LOGIN_MODULE
    };
    let hidden = |reason: String| invalid(&jaas_key, "[hidden]", reason);
    let jaas = raw.get(&jaas_key).ok_or_else(|| {
        invalid(
            &jaas_key,
            "",
            format!(
                "this node authenticates to {} with {}: set it to `{module} required \
                 username=\"<user>\" password=\"<password>\";`",
                channel.peers(),
                mechanism.name()
            ),
        )
    })?;
    let (written_module, options) = parse_jaas(jaas).map_err(|e| hidden(e.to_owned()))?;
    if written_module != module {
        return Err(hidden(format!(
            "the login module must be {module}, not {written_module}"
        )));
    }
    let option = |name: &str| {
        options
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                hidden(format!(
                    "no `{name}` option: the client of {} authenticates with the \
                     username and password options",
                    channel.listener()
                ))
            })
    };
    Ok(SaslCredentials {
        mechanism,
        username: option("username")?,
        password: option("password")?,
    })
}

fn tls_config(
    keys: &Keys,
    listener_name: &str,
    channel: Channel,
) -> Result<ClientConfig, ConfigError> {
    let verify_host = match keys.get(SSL_ENDPOINT_IDENTIFICATION_ALGORITHM) {
        None => true,
        Some((_, v)) if v.trim().is_empty() => false,
        Some((_, v)) if v.trim().eq_ignore_ascii_case("https") => true,
        Some(_) => {
            return Err(keys.invalid(
                SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
                "must be https or empty",
            ))
        }
    };
    let mut roots = RootCertStore::empty();
    for cert in read_truststore(keys)? {
        roots
            .add(cert)
            .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(keys.invalid(
            SSL_TRUSTSTORE_LOCATION,
            format!(
                "{} {listener_name} is TLS: set a trust store (ssl.truststore.location or \
                 ssl.truststore.certificates) holding the certificate authority of {}",
                channel.listener(),
                channel.peers()
            ),
        ));
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if verify_host {
        webpki
    } else {
        Arc::new(AnyHostName(webpki))
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| keys.invalid(SSL_TRUSTSTORE_LOCATION, e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    // As Kafka's broker: its key store, when it has one, is the certificate it shows a listener
    // that asks for one.
    let has_keystore = [
        SSL_KEYSTORE_LOCATION,
        SSL_KEYSTORE_CERTIFICATE_CHAIN,
        SSL_KEYSTORE_KEY,
    ]
    .iter()
    .any(|k| keys.get(k).is_some());
    if !has_keystore {
        return Ok(builder.with_no_client_auth());
    }
    let (certs, key) = read_keystore(keys)?;
    builder.with_client_auth_cert(certs, key).map_err(|e| {
        keys.invalid(
            SSL_KEYSTORE_LOCATION,
            format!("the key store's certificate and key do not fit: {e}"),
        )
    })
}

/// The chain and signatures verified as usual, the host name not
/// (`ssl.endpoint.identification.algorithm=`).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::super::security::tests::raw;
    use super::*;

    fn err(entries: &[(&str, &str)], protocol: SecurityProtocol) -> String {
        parse(&raw(entries), "INTERNAL", protocol)
            .unwrap_err()
            .to_string()
    }

    const SCRAM_JAAS: &str = "org.apache.kafka.common.security.scram.ScramLoginModule required \
                              username=\"broker\" password=\"s3cret\";";

    #[test]
    fn plaintext_needs_nothing() {
        assert!(parse(&raw(&[]), "PLAINTEXT", SecurityProtocol::Plaintext)
            .unwrap()
            .is_none());
    }

    #[test]
    fn sasl_reads_the_mechanism_and_the_listeners_jaas_credentials() {
        let sec = parse(
            &raw(&[
                ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
                (
                    "listener.name.internal.scram-sha-512.sasl.jaas.config",
                    SCRAM_JAAS,
                ),
            ]),
            "INTERNAL",
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap()
        .unwrap();
        let sasl = sec.sasl.as_ref().unwrap();
        assert_eq!(sasl.mechanism, Mechanism::ScramSha512);
        assert_eq!(
            (sasl.username.as_str(), sasl.password.as_str()),
            ("broker", "s3cret")
        );
        assert!(sec.tls.is_none());
        assert!(!format!("{sec:?}").contains("s3cret"));

        let plain = parse(
            &raw(&[
                ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
                (
                    "listener.name.internal.plain.sasl.jaas.config",
                    "org.apache.kafka.common.security.plain.PlainLoginModule required \
                     username=\"admin\" password=\"pw\" user_admin=\"pw\";",
                ),
            ]),
            "INTERNAL",
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap()
        .unwrap();
        assert_eq!(plain.sasl.unwrap().username, "admin");
    }

    #[test]
    fn gssapi_kafkas_default_is_refused_naming_the_key() {
        let e = err(&[], SecurityProtocol::SaslPlaintext);
        assert!(
            e.contains("`sasl.mechanism.inter.broker.protocol`") && e.contains("GSSAPI"),
            "{e}"
        );
        let e = err(
            &[("sasl.mechanism.inter.broker.protocol", "GSSAPI")],
            SecurityProtocol::SaslSsl,
        );
        assert!(e.contains("`sasl.mechanism.inter.broker.protocol`"), "{e}");
    }

    #[test]
    fn the_controller_channel_reads_its_own_mechanism_key_and_listener() {
        let controller = |entries: &[(&str, &str)], protocol| {
            parse_for(&raw(entries), "CONTROLLER", protocol, Channel::Controller)
        };
        // Kafka's default, GSSAPI, refused naming the controller's key, not the inter-broker one.
        let e = controller(
            &[("sasl.mechanism.inter.broker.protocol", "PLAIN")],
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`sasl.mechanism.controller.protocol`")
                && e.contains("GSSAPI")
                && e.contains("controller listener"),
            "{e}"
        );
        let sec = controller(
            &[
                ("sasl.mechanism.controller.protocol", "SCRAM-SHA-256"),
                (
                    "listener.name.controller.scram-sha-256.sasl.jaas.config",
                    SCRAM_JAAS,
                ),
            ],
            SecurityProtocol::SaslPlaintext,
        )
        .unwrap()
        .unwrap();
        assert_eq!(sec.listener, "CONTROLLER");
        assert_eq!(sec.sasl.unwrap().mechanism, Mechanism::ScramSha256);
        let e = controller(&[], SecurityProtocol::Ssl)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`ssl.truststore.location`") && e.contains("the controllers"),
            "{e}"
        );
    }

    #[test]
    fn missing_or_incomplete_jaas_names_the_listeners_key_and_hides_the_value() {
        let e = err(
            &[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")],
            SecurityProtocol::SaslPlaintext,
        );
        assert!(
            e.contains("`listener.name.internal.scram-sha-256.sasl.jaas.config`"),
            "{e}"
        );
        let e = err(
            &[
                ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256"),
                (
                    "listener.name.internal.scram-sha-256.sasl.jaas.config",
                    "org.apache.kafka.common.security.scram.ScramLoginModule required \
                     username=\"broker\" secret=\"hunter2\";",
                ),
            ],
            SecurityProtocol::SaslPlaintext,
        );
        assert!(e.contains("password") && !e.contains("hunter2"), "{e}");
        let e = err(
            &[
                ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
                ("listener.name.internal.plain.sasl.jaas.config", SCRAM_JAAS),
            ],
            SecurityProtocol::SaslPlaintext,
        );
        assert!(e.contains("PlainLoginModule"), "{e}");
    }

    #[test]
    fn tls_trusts_the_trust_store_and_presents_the_key_store() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
        let trust = [(
            "listener.name.internal.ssl.truststore.certificates",
            cert_pem.as_str(),
        )];
        let sec = parse(&raw(&trust), "INTERNAL", SecurityProtocol::Ssl)
            .unwrap()
            .unwrap();
        let tls = sec.tls.unwrap().current();
        assert!(!tls.client_auth_cert_resolver.has_certs());
        let with_keystore = [
            trust[0],
            ("ssl.keystore.certificate.chain", cert_pem.as_str()),
            ("ssl.keystore.key", key_pem.as_str()),
            ("ssl.endpoint.identification.algorithm", ""),
        ];
        let sec = parse(&raw(&with_keystore), "INTERNAL", SecurityProtocol::SaslSsl);
        // SASL_SSL without a mechanism: refused for the mechanism, not for TLS.
        assert!(sec.unwrap_err().to_string().contains("sasl.mechanism"));
        let sec = parse(&raw(&with_keystore), "INTERNAL", SecurityProtocol::Ssl)
            .unwrap()
            .unwrap();
        assert!(sec
            .tls
            .unwrap()
            .current()
            .client_auth_cert_resolver
            .has_certs());
    }

    #[test]
    fn tls_without_a_trust_store_or_with_an_unknown_algorithm_names_the_key() {
        let e = err(&[], SecurityProtocol::Ssl);
        assert!(e.contains("`ssl.truststore.location`"), "{e}");
        let e = err(
            &[(
                "listener.name.internal.ssl.endpoint.identification.algorithm",
                "ldaps",
            )],
            SecurityProtocol::Ssl,
        );
        assert!(
            e.contains("`listener.name.internal.ssl.endpoint.identification.algorithm`"),
            "{e}"
        );
    }
}
