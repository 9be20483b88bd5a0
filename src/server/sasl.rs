//! The server side of SASL on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka's
//! `SaslServerAuthenticator` behaves: before authentication completes a connection may send
//! ApiVersions and SaslHandshake, then its SASL tokens — wrapped in SaslAuthenticate after a
//! v1 handshake, raw size-prefixed frames after a v0 one (what old librdkafka sends). Anything
//! else closes the connection. A failed authentication is answered (SASL_AUTHENTICATION_FAILED
//! for SaslAuthenticate) and the connection closes `connection.failed.authentication.delay.ms`
//! later. Passwords are compared in constant time and never logged.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use subtle::ConstantTimeEq;

use super::scram;
use crate::config::security::{Mechanism, SaslSettings};
use crate::metadata::scram::ScramMechanism;
use crate::protocol;

/// Kafka's error codes of SASL.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for ApiVersions or SaslHandshake.
    Handshake,
    /// After a v1 handshake: SaslAuthenticate requests carry the tokens.
    Authenticate(Mechanism),
    /// After a v0 handshake: the next frame is the raw token.
    RawToken(Mechanism),
    Complete,
}

/// What the connection does with one pre-authentication frame.
#[derive(Debug)]
pub enum Step {
    /// Hand the frame to the normal dispatch (ApiVersions).
    Dispatch,
    /// Write this response frame (size prefix included) and go on.
    Reply(Bytes),
    /// Write this response, authentication is complete as `principal`.
    Authenticated { response: Bytes, principal: String },
    /// Write this response (if any), wait `connection.failed.authentication.delay.ms`, close.
    Fail {
        response: Option<Bytes>,
        reason: String,
    },
    /// Close at once: a request that is not allowed before authentication.
    Close(String),
}

/// One client token's outcome.
enum Outcome {
    /// Another round: the server's token.
    Challenge(Vec<u8>),
    /// Authenticated as the principal; the server's last token.
    Done(String, Vec<u8>),
    Fail(String),
}

/// What the metadata log (the node's current image) holds for a user and SCRAM mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredCredential {
    /// Set by AlterUserScramCredentials (or a bootstrap): it wins over
    /// `kafkaiq.sasl.scram.users`.
    Set(scram::ScramCredential),
    /// Removed by AlterUserScramCredentials: the user cannot authenticate with this mechanism,
    /// whatever `kafkaiq.sasl.scram.users` holds (a password replaced and then deleted in the
    /// log must not come back from the config file).
    Removed,
    /// Never in the log: `kafkaiq.sasl.scram.users` decides.
    Absent,
}

impl StoredCredential {
    /// What `image` holds for `user` and `mechanism`.
    pub fn of(
        image: &crate::metadata::MetadataImage,
        mechanism: ScramMechanism,
        user: &str,
    ) -> StoredCredential {
        let key = (user.to_owned(), mechanism);
        match image.scram.get(&key) {
            Some(credential) => StoredCredential::Set(credential.clone()),
            None if image.scram_removed.contains(&key) => StoredCredential::Removed,
            None => StoredCredential::Absent,
        }
    }
}

/// Finds a user's SCRAM credential in the metadata log (the node's current image).
pub type ScramCredentialsLookup =
    Arc<dyn Fn(ScramMechanism, &str) -> StoredCredential + Send + Sync>;

/// One connection's authentication.
pub struct Authenticator {
    settings: Arc<SaslSettings>,
    /// Credentials set by AlterUserScramCredentials; they win over
    /// `kafkaiq.sasl.scram.users`.
    stored: Option<ScramCredentialsLookup>,
    state: State,
    /// A SCRAM exchange between its first and final client messages.
    scram: Option<scram::ScramExchange>,
}

impl Authenticator {
    pub fn new(
        settings: Arc<SaslSettings>,
        stored: Option<ScramCredentialsLookup>,
    ) -> Authenticator {
        Authenticator {
            settings,
            stored,
            state: State::Handshake,
            scram: None,
        }
    }

    /// The mechanism the client chose, once its handshake named one.
    pub fn mechanism(&self) -> Option<&'static str> {
        match self.state {
            State::Authenticate(m) | State::RawToken(m) => Some(m.name()),
            State::Handshake | State::Complete => None,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.state == State::Complete
    }

    /// Handles one frame read before authentication completed.
    pub fn handle(&mut self, frame: Bytes) -> Step {
        if let State::RawToken(mechanism) = self.state {
            // Server tokens go back size-prefixed, without Kafka framing.
            let raw = |token: Vec<u8>| {
                let mut frame = (token.len() as i32).to_be_bytes().to_vec();
                frame.extend_from_slice(&token);
                Bytes::from(frame)
            };
            return match self.authenticate(mechanism, &frame) {
                Outcome::Challenge(token) => Step::Reply(raw(token)),
                Outcome::Done(principal, token) => {
                    self.state = State::Complete;
                    Step::Authenticated {
                        response: raw(token),
                        principal,
                    }
                }
                Outcome::Fail(reason) => Step::Fail {
                    response: None,
                    reason,
                },
            };
        }
        let request = match protocol::decode_request(frame) {
            Ok(r) => r,
            Err(e) => {
                return Step::Close(format!("undecodable request before authentication: {e}"))
            }
        };
        let correlation_id = request.correlation_id();
        let version = request.api_version;
        match (self.state, request.body) {
            (State::Handshake, RequestKind::ApiVersions(_)) => Step::Dispatch,
            (State::Handshake, RequestKind::SaslHandshake(r)) => {
                let enabled = self
                    .settings
                    .mechanisms
                    .iter()
                    .map(|m| StrBytes::from_static_str(m.name()))
                    .collect();
                let mut response = SaslHandshakeResponse::default().with_mechanisms(enabled);
                let chosen = self
                    .settings
                    .mechanisms
                    .iter()
                    .find(|m| m.name() == r.mechanism.as_str())
                    .copied();
                match chosen {
                    Some(mechanism) => {
                        self.state = if version == 0 {
                            State::RawToken(mechanism)
                        } else {
                            State::Authenticate(mechanism)
                        };
                        encode(
                            ApiKey::SaslHandshake,
                            version,
                            correlation_id,
                            ResponseKind::SaslHandshake(response),
                        )
                        .map_or_else(Step::Close, Step::Reply)
                    }
                    None => {
                        response.error_code = UNSUPPORTED_SASL_MECHANISM;
                        let reason = format!("unsupported SASL mechanism {}", r.mechanism.as_str());
                        match encode(
                            ApiKey::SaslHandshake,
                            version,
                            correlation_id,
                            ResponseKind::SaslHandshake(response),
                        ) {
                            Ok(bytes) => Step::Fail {
                                response: Some(bytes),
                                reason,
                            },
                            Err(e) => Step::Close(e),
                        }
                    }
                }
            }
            (State::Authenticate(mechanism), RequestKind::SaslAuthenticate(r)) => {
                let outcome = self.authenticate(mechanism, &r.auth_bytes);
                let mut response = SaslAuthenticateResponse::default();
                match &outcome {
                    Outcome::Challenge(token) | Outcome::Done(_, token) => {
                        response.auth_bytes = Bytes::from(token.clone());
                    }
                    Outcome::Fail(reason) => {
                        response.error_code = SASL_AUTHENTICATION_FAILED;
                        response.error_message = Some(StrBytes::from_string(reason.clone()));
                    }
                }
                let bytes = match encode(
                    ApiKey::SaslAuthenticate,
                    version,
                    correlation_id,
                    ResponseKind::SaslAuthenticate(response),
                ) {
                    Ok(b) => b,
                    Err(e) => return Step::Close(e),
                };
                match outcome {
                    Outcome::Challenge(_) => Step::Reply(bytes),
                    Outcome::Done(principal, _) => {
                        self.state = State::Complete;
                        Step::Authenticated {
                            response: bytes,
                            principal,
                        }
                    }
                    Outcome::Fail(reason) => Step::Fail {
                        response: Some(bytes),
                        reason,
                    },
                }
            }
            (state, _) => Step::Close(format!(
                "unexpected {:?} request during SASL {}",
                request.api_key,
                if state == State::Handshake {
                    "handshake"
                } else {
                    "authentication"
                }
            )),
        }
    }

    /// Takes one client token.
    fn authenticate(&mut self, mechanism: Mechanism, token: &[u8]) -> Outcome {
        let hash = match mechanism {
            Mechanism::Plain => {
                return match plain(&self.settings, token) {
                    Ok(principal) => Outcome::Done(principal, Vec::new()),
                    Err(reason) => Outcome::Fail(reason),
                }
            }
            Mechanism::ScramSha256 => scram::ScramHash::Sha256,
            Mechanism::ScramSha512 => scram::ScramHash::Sha512,
        };
        match self.scram.take() {
            None => {
                let settings = self.settings.clone();
                let stored = self.stored.clone();
                let scram_mechanism = if hash == scram::ScramHash::Sha512 {
                    ScramMechanism::Sha512
                } else {
                    ScramMechanism::Sha256
                };
                let lookup = |user: &str| {
                    let in_log = stored.as_ref().map_or(StoredCredential::Absent, |stored| {
                        stored(scram_mechanism, user)
                    });
                    match in_log {
                        StoredCredential::Set(credential) => Some(credential),
                        StoredCredential::Removed => None,
                        StoredCredential::Absent => settings
                            .scram
                            .get(&(mechanism.name(), user.to_owned()))
                            .cloned(),
                    }
                };
                match scram::client_first(hash, token, &server_nonce(), lookup) {
                    Ok((exchange, server_first)) => {
                        self.scram = Some(exchange);
                        Outcome::Challenge(server_first.into_bytes())
                    }
                    Err(reason) => Outcome::Fail(reason),
                }
            }
            Some(exchange) => match exchange.client_final(token) {
                Ok((principal, server_final)) => {
                    Outcome::Done(principal, server_final.into_bytes())
                }
                Err(reason) => Outcome::Fail(reason),
            },
        }
    }
}

/// A fresh server nonce: 24 random bytes, base64 (printable, no comma).
fn server_nonce() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 24];
    #[allow(deprecated)]
    let random = rustls::crypto::ring::default_provider().secure_random;
    // ring's system randomness does not fail on Linux; the nonce is still combined with the
    // client's.
    let _ = random.fill(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn encode(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: ResponseKind,
) -> Result<Bytes, String> {
    let body = protocol::encode_response(api_key, version, correlation_id, &body)
        .map_err(|e| e.to_string())?;
    Ok(body)
}

/// PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`, checked against the JAAS `user_<name>`
/// entries. As Kafka, an authorization id other than the user name is refused.
fn plain(settings: &SaslSettings, token: &[u8]) -> Result<String, String> {
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(
            "Authentication failed: Invalid SASL/PLAIN response: expected 3 tokens".to_owned(),
        );
    };
    let (Ok(authzid), Ok(user)) = (std::str::from_utf8(authzid), std::str::from_utf8(user)) else {
        return Err("Authentication failed: Invalid SASL/PLAIN response: not UTF-8".to_owned());
    };
    if user.is_empty() {
        return Err("Authentication failed: username not specified".to_owned());
    }
    if password.is_empty() {
        return Err("Authentication failed: password not specified".to_owned());
    }
    if !authzid.is_empty() && authzid != user {
        return Err(
            "Authentication failed: Client requested an authorization id that is different from username"
                .to_owned(),
        );
    }
    // The same work whether or not the user exists: an unknown user compares against an
    // empty password, which never matches a non-empty one.
    let expected = settings.plain_users.get(user);
    let matches: bool = expected
        .map(String::as_bytes)
        .unwrap_or_default()
        .ct_eq(password)
        .into();
    if expected.is_some() && matches {
        Ok(format!("User:{user}"))
    } else {
        Err("Authentication failed: Invalid username or password".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Arc<SaslSettings> {
        Arc::new(SaslSettings {
            mechanisms: vec![Mechanism::Plain],
            plain_users: [("alice".to_owned(), "alice-secret".to_owned())].into(),
            scram: Default::default(),
            max_receive_size: 524_288,
            failed_authentication_delay_ms: 100,
        })
    }

    #[test]
    fn plain_accepts_the_right_password_only() {
        let s = settings();
        assert_eq!(plain(&s, b"\0alice\0alice-secret").unwrap(), "User:alice");
        assert_eq!(
            plain(&s, b"alice\0alice\0alice-secret").unwrap(),
            "User:alice"
        );
        for bad in [
            &b"\0alice\0wrong"[..],
            b"\0bob\0alice-secret",
            b"\0bob\0",
            b"admin\0alice\0alice-secret",
            b"\0alice",
        ] {
            let e = plain(&s, bad).unwrap_err();
            assert!(e.starts_with("Authentication failed"), "{e}");
            assert!(!e.contains("alice-secret"));
        }
    }

    #[test]
    fn a_raw_token_after_a_v0_handshake_authenticates() {
        let mut a = Authenticator::new(settings(), None);
        a.state = State::RawToken(Mechanism::Plain);
        match a.handle(Bytes::from_static(b"\0alice\0alice-secret")) {
            Step::Authenticated {
                principal,
                response,
            } => {
                assert_eq!(principal, "User:alice");
                assert_eq!(&response[..], &[0, 0, 0, 0]);
            }
            other => panic!("{other:?}"),
        }
        assert!(a.is_complete());
    }
}
