//! The server side of SASL on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka's
//! `SaslServerAuthenticator` behaves: before authentication completes a connection may send
//! ApiVersions and SaslHandshake, then its SASL tokens — wrapped in SaslAuthenticate after a
//! v1 handshake, raw size-prefixed frames after a v0 one (what old librdkafka sends). Anything
//! else fails the authentication: unanswered before the handshake, answered with that request's
//! own error response (ILLEGAL_SASL_STATE, [`error_response`]) during the exchange, as Kafka
//! does; an ApiVersions out of turn closes the connection at once. A failed authentication is answered (SASL_AUTHENTICATION_FAILED
//! for SaslAuthenticate) and the connection closes `connection.failed.authentication.delay.ms`
//! later. Passwords are compared in constant time and never logged.
//!
//! KIP-368: a session lasts `connections.max.reauth.ms` (of the listener and mechanism) or
//! until the credential expires (an OAUTHBEARER token's `exp`), whichever is sooner; the
//! SaslAuthenticate (v1+) answer that completes an authentication tells the client how long.
//! Only a session with such an end may re-authenticate: a SaslHandshake on its authenticated
//! connection starts the exchange again (at most once a second), the mechanism and principal
//! must stay the same, and a failure closes the connection. A request after the end of a
//! session closes its connection unanswered ([`Authenticator::session_expired`]). Without an
//! end, a SaslHandshake after authentication is dispatched (ILLEGAL_SASL_STATE), as in Kafka.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use subtle::ConstantTimeEq;

use super::{oauthbearer, scram};
use crate::config::security::{Mechanism, SaslSettings};
use crate::handlers::error_response::error_response;
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
    /// Authenticated as `principal`; the server's last token; when the credential expires
    /// (milliseconds since the epoch), if it does.
    Done {
        principal: String,
        token: Vec<u8>,
        expires_ms: Option<i64>,
    },
    Fail(String),
}

/// An authenticated session (KIP-368).
struct Session {
    principal: String,
    mechanism: Mechanism,
    /// When it ends; `None`: never, and the connection cannot re-authenticate.
    ends: Option<Instant>,
}

/// Kafka's least time between two re-authentications of one connection; a SaslHandshake
/// sooner is dispatched as any request (ILLEGAL_SASL_STATE).
const MIN_REAUTHENTICATION_INTERVAL: Duration = Duration::from_secs(1);

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
    /// OAUTHBEARER: the error sent as a challenge, until the client's `\x01` acknowledges it.
    oauth_error: Option<String>,
    /// The current session, once authenticated; kept while re-authenticating.
    session: Option<Session>,
    /// A re-authentication's handshake named another mechanism: its next token fails.
    other_mechanism: Option<String>,
    last_reauthentication: Option<Instant>,
    /// An ApiVersions was answered in this exchange, or it re-authenticates: the next request
    /// must be the SaslHandshake (Kafka's HANDSHAKE_REQUEST and REAUTH_PROCESS_HANDSHAKE
    /// states); another ApiVersions closes the connection.
    versions_done: bool,
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
            oauth_error: None,
            session: None,
            other_mechanism: None,
            last_reauthentication: None,
            versions_done: false,
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

    /// Whether the exchange under way re-authenticates an authenticated connection.
    pub fn is_reauthenticating(&self) -> bool {
        self.session.is_some() && self.state != State::Complete
    }

    /// Called with a SaslHandshake that arrived on the authenticated connection: whether it
    /// starts a re-authentication (then [`Authenticator::handle`] takes it and the frames
    /// after it until [`Authenticator::is_complete`]). Not when the session has no end, nor
    /// within a second of the last re-authentication (as Kafka's `KafkaChannel`).
    pub fn begin_reauthentication(&mut self, now: Instant) -> bool {
        let ends = self.session.as_ref().and_then(|s| s.ends);
        if self.state != State::Complete || ends.is_none() {
            return false;
        }
        if self
            .last_reauthentication
            .is_some_and(|last| now.saturating_duration_since(last) < MIN_REAUTHENTICATION_INTERVAL)
        {
            return false;
        }
        self.last_reauthentication = Some(now);
        self.versions_done = true;
        self.state = State::Handshake;
        self.oauth_error = None;
        self.other_mechanism = None;
        true
    }

    /// Whether the authenticated session has ended: its connection is closed at the next
    /// request, as Kafka's `SocketServer` closes it.
    pub fn session_expired(&self, now: Instant) -> bool {
        self.state == State::Complete
            && self
                .session
                .as_ref()
                .and_then(|s| s.ends)
                .is_some_and(|ends| now > ends)
    }

    /// The session an authentication that completed as `principal` begins, and its lifetime
    /// to tell the client (0: no end), as Kafka's `SaslServerAuthenticator` works it out; an
    /// error if a re-authentication changed the principal.
    fn begin_session(
        &mut self,
        mechanism: Mechanism,
        principal: &str,
        credential_expires_ms: Option<i64>,
    ) -> Result<i64, String> {
        if let Some(previous) = &self.session {
            if previous.principal != principal {
                // Kafka prints a principal as `<type>.<name>` here.
                let dotted = |p: &str| p.replacen(':', ".", 1);
                return Err(format!(
                    "Cannot change principals during re-authentication from {}: {}",
                    dotted(&previous.principal),
                    dotted(principal)
                ));
            }
        }
        let max = self.settings.max_reauth_ms.get(&mechanism).copied();
        let remaining = credential_expires_ms.map(|expires| expires - epoch_ms());
        let lifetime_ms = match (remaining, max) {
            (None, None) => None,
            (None, Some(max)) => Some(max as i64),
            (Some(remaining), None) => Some(remaining.max(0)),
            (Some(remaining), Some(max)) => Some(remaining.min(max as i64).max(0)),
        };
        self.session = Some(Session {
            principal: principal.to_owned(),
            mechanism,
            ends: lifetime_ms.map(|ms| Instant::now() + Duration::from_millis(ms as u64)),
        });
        Ok(lifetime_ms.unwrap_or(0))
    }

    /// Handles one frame read before authentication (or re-authentication) completed.
    pub fn handle(&mut self, frame: Bytes) -> Step {
        if let Some(reason) = self.other_mechanism.take() {
            // Kafka fails the exchange at the token after such a handshake, unanswered.
            return Step::Fail {
                response: None,
                reason,
            };
        }
        if let State::RawToken(mechanism) = self.state {
            // Server tokens go back size-prefixed, without Kafka framing.
            let raw = |token: Vec<u8>| {
                let mut frame = (token.len() as i32).to_be_bytes().to_vec();
                frame.extend_from_slice(&token);
                Bytes::from(frame)
            };
            return match self.authenticate(mechanism, &frame) {
                Outcome::Challenge(token) => Step::Reply(raw(token)),
                Outcome::Done {
                    principal,
                    token,
                    expires_ms,
                } => match self.begin_session(mechanism, &principal, expires_ms) {
                    Ok(_) => {
                        self.state = State::Complete;
                        Step::Authenticated {
                            response: raw(token),
                            principal,
                        }
                    }
                    Err(reason) => Step::Fail {
                        response: None,
                        reason,
                    },
                },
                Outcome::Fail(reason) => Step::Fail {
                    response: None,
                    reason,
                },
            };
        }
        let request = match protocol::decode_request(frame) {
            Ok(r) => r,
            // An ApiVersions newer than ours (franz-go 1.22 opens with v5) is answered, as Kafka's
            // SaslServerAuthenticator answers it, with UNSUPPORTED_VERSION and the versions we
            // support (KIP-511), so the client retries with one of them; the dispatcher does that.
            Err(protocol::DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                ..
            }) if self.state == State::Handshake && !self.versions_done => return Step::Dispatch,
            Err(e) => {
                return Step::Close(format!("undecodable request before authentication: {e}"))
            }
        };
        let correlation_id = request.correlation_id();
        let version = request.api_version;
        match (self.state, request.body) {
            (State::Handshake, RequestKind::ApiVersions(r)) if !self.versions_done => {
                // Answered by the dispatcher; a valid one moves the exchange on to the
                // handshake (an invalid one is answered INVALID_REQUEST and may be sent again).
                self.versions_done = crate::handlers::api_versions::is_valid(version, &r);
                Step::Dispatch
            }
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
                        if let Some(session) = &self.session {
                            if session.mechanism != mechanism {
                                self.other_mechanism = Some(format!(
                                    "SASL mechanism '{}' requested by client is not supported \
                                     for re-authentication of mechanism '{}'",
                                    mechanism.name(),
                                    session.mechanism.name()
                                ));
                            }
                        }
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
                let mut outcome = self.authenticate(mechanism, &r.auth_bytes);
                let mut response = SaslAuthenticateResponse::default();
                if let Outcome::Done {
                    principal,
                    expires_ms,
                    ..
                } = &outcome
                {
                    match self.begin_session(mechanism, principal, *expires_ms) {
                        Ok(lifetime_ms) => response.session_lifetime_ms = lifetime_ms,
                        Err(reason) => outcome = Outcome::Fail(reason),
                    }
                }
                match &outcome {
                    Outcome::Challenge(token) | Outcome::Done { token, .. } => {
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
                    Outcome::Done { principal, .. } => {
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
            // As Kafka's `SaslServerAuthenticator`: during the exchange another request is
            // answered with its own error response (ILLEGAL_SASL_STATE, `getErrorResponse`) and
            // fails the authentication; before the handshake it fails it unanswered.
            (State::Authenticate(_), body) => {
                let reason = format!(
                    "Unexpected Kafka request of type {:?} during SASL authentication.",
                    request.api_key
                );
                let response = error_response(&body, version, ILLEGAL_SASL_STATE, Some(&reason))
                    .and_then(|kind| encode(request.api_key, version, correlation_id, kind).ok());
                Step::Fail { response, reason }
            }
            // An ApiVersions out of turn closes the connection at once (Kafka's
            // `handleApiVersionsRequest` throws an IllegalStateException, not an authentication
            // failure).
            (_, RequestKind::ApiVersions(_)) => Step::Close(
                "Unexpected ApiVersions request received during SASL authentication".to_owned(),
            ),
            (_, _) => Step::Fail {
                response: None,
                reason: format!(
                    "Unexpected Kafka request of type {:?} during SASL handshake.",
                    request.api_key
                ),
            },
        }
    }

    /// Takes one client token.
    fn authenticate(&mut self, mechanism: Mechanism, token: &[u8]) -> Outcome {
        let hash = match mechanism {
            Mechanism::Plain => {
                return match plain(&self.settings, token) {
                    Ok(principal) => Outcome::Done {
                        principal,
                        token: Vec::new(),
                        expires_ms: None,
                    },
                    Err(reason) => Outcome::Fail(reason),
                }
            }
            Mechanism::OAuthBearer => return self.oauthbearer(token),
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
                Ok((principal, server_final)) => Outcome::Done {
                    principal,
                    token: server_final.into_bytes(),
                    expires_ms: None,
                },
                Err(reason) => Outcome::Fail(reason),
            },
        }
    }

    /// OAUTHBEARER's one client message, as Kafka's `OAuthBearerSaslServer` takes it: a token
    /// the validator refuses is answered with RFC 7628's JSON error as a challenge, and the
    /// client's `\x01` after it fails the exchange with that error as the message; a message
    /// that does not parse fails with Kafka's message for invalid credentials.
    fn oauthbearer(&mut self, message: &[u8]) -> Outcome {
        if message == b"\x01" {
            if let Some(error) = self.oauth_error.take() {
                return Outcome::Fail(error);
            }
        }
        self.oauth_error = None;
        let during = if self.session.is_some() {
            "re-authentication"
        } else {
            "authentication"
        };
        let response = match oauthbearer::parse(message) {
            Ok(response) => response,
            Err(reason) => {
                tracing::debug!(%reason, "OAUTHBEARER");
                return Outcome::Fail(format!(
                    "Authentication failed during {during} due to invalid credentials with SASL \
                     mechanism OAUTHBEARER"
                ));
            }
        };
        let options = self.settings.oauthbearer.clone().unwrap_or_default();
        match oauthbearer::validate(&response.token, &options, epoch_ms()) {
            Err(refusal) => {
                tracing::debug!(reason = %refusal.reason, "OAUTHBEARER token refused");
                let error = refusal.json();
                self.oauth_error = Some(error.clone());
                Outcome::Challenge(error.into_bytes())
            }
            Ok(token) => {
                let authorization_id = &response.authorization_id;
                if !authorization_id.is_empty() && *authorization_id != token.principal {
                    return Outcome::Fail(format!(
                        "Authentication failed: Client requested an authorization id \
                         ({authorization_id}) that is different from the token's principal name \
                         ({})",
                        token.principal
                    ));
                }
                Outcome::Done {
                    principal: format!("User:{}", token.principal),
                    token: Vec::new(),
                    expires_ms: Some(token.expires_ms),
                }
            }
        }
    }
}

/// The wall clock in milliseconds since the epoch, which tokens' times are in.
fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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

/// The answer to a SaslHandshake that reaches dispatch: the connection needs no (more)
/// authentication (a PLAINTEXT or SSL listener, or SASL already done). Kafka answers
/// ILLEGAL_SASL_STATE there, on the client and the controller listener alike.
pub fn illegal_handshake() -> ResponseKind {
    ResponseKind::SaslHandshake(
        SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE),
    )
}

/// The answer to a SaslAuthenticate that reaches dispatch (see [`illegal_handshake`]).
pub fn illegal_authenticate() -> ResponseKind {
    ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(ILLEGAL_SASL_STATE)
            .with_error_message(Some(StrBytes::from_static_str(
                "SaslAuthenticate request received after successful authentication",
            ))),
    )
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
            oauthbearer: None,
            max_reauth_ms: Default::default(),
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

    /// franz-go opens with ApiVersions v5, newer than ours: dispatched (and answered
    /// UNSUPPORTED_VERSION with our versions, as Kafka does) rather than closing the connection.
    #[test]
    fn an_api_versions_newer_than_ours_before_the_handshake_is_dispatched() {
        let mut a = Authenticator::new(settings(), None);
        // api key 18, version 5, correlation id 7, null client id, no tagged fields.
        let frame = Bytes::from_static(&[0, 18, 0, 5, 0, 0, 0, 7, 0xff, 0xff, 0]);
        assert!(matches!(a.handle(frame), Step::Dispatch));
    }

    fn api_versions(version: i16, software: &str) -> Bytes {
        use kafka_protocol::messages::{ApiVersionsRequest, RequestHeader};
        use kafka_protocol::protocol::Encodable;
        let mut buf = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::ApiVersions as i16)
            .with_request_api_version(version)
            .with_correlation_id(1)
            .encode(
                &mut buf,
                ApiKey::ApiVersions.request_header_version(version),
            )
            .unwrap();
        ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(software.to_owned()))
            .with_client_software_version(StrBytes::from_static_str("4.1.1"))
            .encode(&mut buf, version)
            .unwrap();
        buf.freeze()
    }

    /// Kafka answers one ApiVersions before the handshake (HANDSHAKE_OR_VERSIONS_REQUEST), then
    /// wants the SaslHandshake (HANDSHAKE_REQUEST): a second ApiVersions closes the connection.
    /// One it did not accept (a version too new, an invalid software name) may be sent again;
    /// a re-authentication starts with the handshake.
    #[test]
    fn one_api_versions_is_answered_before_the_handshake() {
        let mut a = Authenticator::new(settings(), None);
        let newer = Bytes::from_static(&[0, 18, 0, 5, 0, 0, 0, 7, 0xff, 0xff, 0]);
        assert!(matches!(a.handle(newer), Step::Dispatch));
        assert!(matches!(
            a.handle(api_versions(3, "bad name")),
            Step::Dispatch
        ));
        assert!(matches!(
            a.handle(api_versions(3, "apache-kafka-java")),
            Step::Dispatch
        ));
        match a.handle(api_versions(3, "apache-kafka-java")) {
            Step::Close(why) => assert!(why.contains("ApiVersions"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut a = Authenticator::new(settings(), None);
        a.state = State::Complete;
        a.session = Some(Session {
            principal: "User:alice".into(),
            mechanism: Mechanism::Plain,
            ends: Some(Instant::now() + Duration::from_secs(60)),
        });
        assert!(a.begin_reauthentication(Instant::now()));
        assert!(matches!(
            a.handle(api_versions(3, "librdkafka")),
            Step::Close(_)
        ));
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
