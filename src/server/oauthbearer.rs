//! SASL/OAUTHBEARER (RFC 7628) with the validator a Kafka broker uses by default, Kafka's
//! `OAuthBearerUnsecuredValidatorCallbackHandler`: the token is an unsecured JSON Web Signature
//! (`{"alg":"none"}`, no signature) whose claims are checked, not its origin — a development
//! and test setup, as in Kafka.
//!
//! The client's one message is the GS2 header and key-value pairs of RFC 7628
//! (`n,[a=<authzid>],\x01auth=Bearer <token>\x01[<key>=<value>\x01...]\x01`); [`parse`] reads it
//! as Kafka's `OAuthBearerClientInitialResponse` does, [`validate`] checks the token as Kafka's
//! unsecured validator does. A refused token is answered with RFC 7628's JSON error as a server
//! challenge; the client acknowledges it with `\x01` and then fails (`sasl.rs`).

use base64::Engine;

use crate::config::security::UnsecuredValidatorOptions;

/// The client's initial response: the authorization id (empty when not given) and the token.
/// The other key-value pairs (SASL extensions) are accepted and not used, as the unsecured
/// validator accepts every extension.
#[derive(Debug, PartialEq, Eq)]
pub struct InitialResponse {
    pub authorization_id: String,
    pub token: String,
}

/// A token the validator accepted.
#[derive(Debug, PartialEq)]
pub struct ValidToken {
    /// The principal claim's value (Kafka's principal is `User:` and this).
    pub principal: String,
    /// The `exp` claim, in milliseconds since the epoch: the credential's lifetime (KIP-368).
    pub expires_ms: i64,
}

/// Why a token was refused: RFC 7628's error status, the scope it lacked, and the reason (for
/// the broker's log only; the client is told the status and scope).
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub scope: Option<String>,
    pub reason: String,
}

impl Refusal {
    fn invalid(reason: impl Into<String>) -> Refusal {
        Refusal {
            scope: None,
            reason: reason.into(),
        }
    }

    /// The server's error message, formatted as Kafka's `OAuthBearerSaslServer` formats it.
    pub fn json(&self) -> String {
        match &self.scope {
            None => r#"{"status":"invalid_token"}"#.to_owned(),
            Some(scope) => format!(r#"{{"status":"insufficient_scope", "scope":"{scope}"}}"#),
        }
    }
}

/// Reads the client's initial response; the error is the reason, for the log.
pub fn parse(message: &[u8]) -> Result<InitialResponse, &'static str> {
    const INVALID: &str = "Invalid OAUTHBEARER client first message";
    let text = std::str::from_utf8(message).map_err(|_| INVALID)?;
    let rest = text.strip_prefix("n,").ok_or(INVALID)?;
    let (authorization_id, rest) = match rest.strip_prefix("a=") {
        Some(after) => {
            let (name, rest) = after.split_once(',').ok_or(INVALID)?;
            if !is_saslname(name) {
                return Err(INVALID);
            }
            (name.to_owned(), rest)
        }
        None => (String::new(), rest.strip_prefix(',').ok_or(INVALID)?),
    };
    // `\x01`, then each pair followed by `\x01`, then a last `\x01`.
    let pairs = rest
        .strip_prefix('\x01')
        .and_then(|r| r.strip_suffix('\x01'))
        .ok_or(INVALID)?;
    let mut auth = None;
    if !pairs.is_empty() {
        let pairs = pairs.strip_suffix('\x01').ok_or(INVALID)?;
        for pair in pairs.split('\x01') {
            let (key, value) = pair.split_once('=').ok_or(INVALID)?;
            let key_ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphabetic());
            let value_ok = !value.is_empty()
                && value
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b));
            if !key_ok || !value_ok {
                return Err(INVALID);
            }
            if key == "auth" {
                auth = Some(value);
            }
        }
    }
    let auth = auth.ok_or("Invalid OAUTHBEARER client first message: 'auth' not specified")?;
    // `<scheme> <token>`: the scheme a word, the token base64url-ish characters, then any `=`.
    let invalid_auth = "Invalid OAUTHBEARER client first message: invalid 'auth' format";
    let (scheme, token) = auth.split_once(' ').ok_or(invalid_auth)?;
    let token = token.trim_start_matches(' ');
    let body = token.trim_end_matches('=');
    let scheme_ok = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let token_ok = !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_~+/.".contains(&b));
    if !scheme_ok || !token_ok {
        return Err(invalid_auth);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("Invalid scheme in OAUTHBEARER client first message");
    }
    Ok(InitialResponse {
        authorization_id,
        token: token.to_owned(),
    })
}

/// RFC 5801's saslname: `=2C` and `=3D` escapes, otherwise any ASCII but NUL, `,` and `=`.
fn is_saslname(name: &str) -> bool {
    let mut rest = name.as_bytes();
    if rest.is_empty() {
        return false;
    }
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'=' {
            if !(tail.starts_with(b"2C") || tail.starts_with(b"3D")) {
                return false;
            }
            rest = &tail[2..];
        } else if b == 0 || b == b',' || b > 0x7f {
            return false;
        } else {
            rest = tail;
        }
    }
    true
}

/// A claim's value as Kafka's `OAuthBearerUnsecuredJws` holds it: numbers stay numbers, arrays
/// become lists of their elements' text, anything else its text.
#[derive(Debug, Clone, PartialEq)]
enum Claim {
    Text(String),
    Number(f64),
    List(Vec<String>),
}

impl Claim {
    fn of(value: &serde_json::Value) -> Claim {
        match value {
            serde_json::Value::Number(n) => Claim::Number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::Array(items) => Claim::List(items.iter().map(text).collect()),
            other => Claim::Text(text(other)),
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Claim::Text(_) => "String",
            Claim::Number(_) => "Number",
            Claim::List(_) => "List",
        }
    }
}

/// Jackson's `asText`: a string itself, a number or boolean printed, null `"null"`, a
/// container empty.
fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Null => "null".to_owned(),
        serde_json::Value::Array(_) | serde_json::Value::Object(_) => String::new(),
    }
}

/// One part of the compact serialization: base64url (Kafka's decoder takes the standard
/// alphabet; both are taken here, padded or not) of a JSON object.
fn decode_part(part: &str) -> Result<std::collections::BTreeMap<String, Claim>, Refusal> {
    let url_safe: String = part
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(url_safe)
        .map_err(|_| Refusal::invalid("malformed Base64 URL encoded value"))?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| Refusal::invalid("malformed JSON"))?;
    let mut claims = std::collections::BTreeMap::new();
    if let serde_json::Value::Object(members) = json {
        for (name, value) in &members {
            claims.insert(name.clone(), Claim::of(value));
        }
    }
    Ok(claims)
}

/// Checks `token` as Kafka's unsecured validator does, at `now_ms` (milliseconds since the
/// epoch): an unsecured JWS whose header's `alg` is `none` and whose signature is empty, with a
/// non-blank string principal claim, a numeric `exp` after now (less the allowed clock skew),
/// an `iat`, if any, not after now (plus the skew) and before `exp`, and every required scope
/// item in its scope claim (a string is one item, a list is each).
pub fn validate(
    token: &str,
    options: &UnsecuredValidatorOptions,
    now_ms: i64,
) -> Result<ValidToken, Refusal> {
    if token.contains("..") {
        return Err(Refusal::invalid(
            "Malformed compact serialization contains '..'",
        ));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(Refusal::invalid(
            "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values",
        ));
    };
    let header = decode_part(header)?;
    let claims = decode_part(claims)?;
    match header.get("alg") {
        Some(Claim::Text(alg)) if alg == "none" => {}
        Some(_) => {
            return Err(Refusal::invalid(
                "Unsecured JWS must have 'none' for an algorithm",
            ))
        }
        None => return Err(Refusal::invalid("JWS header must have an Algorithm value")),
    }
    if !signature.is_empty() {
        return Err(Refusal::invalid(
            "Unsecured JWS must not contain a digital signature",
        ));
    }
    let wrong_type = |name: &str, claim: &Claim, wanted: &str| {
        Refusal::invalid(format!(
            "The '{name}' claim was not of type {wanted}: {}",
            claim.type_name()
        ))
    };
    let scope: Vec<String> = match claims.get(&options.scope_claim) {
        None => Vec::new(),
        Some(Claim::Text(s)) if s.trim().is_empty() => Vec::new(),
        Some(Claim::Text(s)) => vec![s.trim().to_owned()],
        Some(Claim::List(items)) => items
            .iter()
            .map(|i| i.trim())
            .filter(|i| !i.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(other) => return Err(wrong_type(&options.scope_claim, other, "List")),
    };
    let exp = match claims.get("exp") {
        Some(Claim::Number(exp)) => *exp,
        Some(other) => return Err(wrong_type("exp", other, "Number")),
        None => return Err(Refusal::invalid("No expiration time in JWT")),
    };
    let principal = match claims.get(&options.principal_claim) {
        Some(Claim::Text(p)) if !p.trim().is_empty() => p.clone(),
        Some(Claim::Text(_)) | None => {
            return Err(Refusal::invalid(format!(
                "No principal name in JWT claim: {}",
                options.principal_claim
            )))
        }
        Some(other) => return Err(wrong_type(&options.principal_claim, other, "String")),
    };
    let iat = match claims.get("iat") {
        Some(Claim::Number(iat)) => Some(*iat),
        Some(other) => return Err(wrong_type("iat", other, "Number")),
        None => None,
    };
    let now = now_ms as f64;
    let skew = options.allowable_clock_skew_ms as f64;
    if let Some(iat) = iat {
        if 1000.0 * iat > now + skew {
            return Err(Refusal::invalid(format!(
                "The Issued At value ({iat} seconds) was after the indicated time ({now_ms} ms) \
                 plus allowable clock skew ({skew} ms)"
            )));
        }
    }
    if now - skew >= 1000.0 * exp {
        return Err(Refusal::invalid(format!(
            "The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or \
             after the Expiration Time value ({exp} seconds)"
        )));
    }
    if let Some(iat) = iat {
        if exp <= iat {
            return Err(Refusal::invalid(format!(
                "The Expiration Time time ({exp} seconds) was not after the Issued At time \
                 ({iat} seconds)"
            )));
        }
    }
    if let Some(missing) = options
        .required_scope
        .iter()
        .find(|item| !scope.contains(item))
    {
        return Err(Refusal {
            // Java's `List.toString`, as Kafka reports it.
            scope: Some(format!("[{}]", options.required_scope.join(", "))),
            reason: format!(
                "The provided scope ({scope:?}) was missing a required scope ({missing})"
            ),
        });
    }
    Ok(ValidToken {
        principal,
        expires_ms: (exp * 1000.0).round() as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(json: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn jws(header: &str, claims: &str) -> String {
        format!("{}.{}.", b64(header), b64(claims))
    }

    const NOW: i64 = 1_700_000_000_000;

    fn options() -> UnsecuredValidatorOptions {
        UnsecuredValidatorOptions::default()
    }

    #[test]
    fn the_initial_response_is_read_as_kafka_reads_it() {
        assert_eq!(
            parse(b"n,,\x01auth=Bearer abc.def.\x01\x01").unwrap(),
            InitialResponse {
                authorization_id: String::new(),
                token: "abc.def.".to_owned()
            }
        );
        // An authorization id, extensions, the scheme in any case, padding.
        assert_eq!(
            parse(b"n,a=alice,\x01traceId=1 2\x01auth=bEaReR  x-y_z.w+/~==\x01\x01").unwrap(),
            InitialResponse {
                authorization_id: "alice".to_owned(),
                token: "x-y_z.w+/~==".to_owned()
            }
        );
        for bad in [
            &b""[..],
            b"\x01",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,auth=Bearer t\x01\x01",
            b"n,a=,\x01auth=Bearer t\x01\x01",
            b"n,a=x=2,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01bad key=v\x01\x01",
            b"n,,\x01\x01",
            b"n,,\x01other=v\x01\x01",
            b"n,,\x01auth=Basic dXNlcg==\x01\x01",
            b"n,,\x01auth=Bearer t!\x01\x01",
            b"n,,\x01auth=Bearer\x01\x01",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_valid_unsecured_token_gives_its_principal_and_expiry() {
        let token = jws(
            r#"{"alg":"none"}"#,
            r#"{"sub":"alice","iat":1699999990,"exp":1700000060.5,"scope":["a","b"]}"#,
        );
        assert_eq!(
            validate(&token, &options(), NOW).unwrap(),
            ValidToken {
                principal: "alice".to_owned(),
                expires_ms: 1_700_000_060_500
            }
        );
        // Another principal claim; the standard alphabet and padding are taken too.
        let o = UnsecuredValidatorOptions {
            principal_claim: "client_id".to_owned(),
            ..options()
        };
        let standard = base64::engine::general_purpose::STANDARD
            .encode(r#"{"client_id":"svc","exp":1700000001}"#);
        let token = format!("{}.{standard}.", b64(r#"{"alg":"none"}"#));
        assert_eq!(validate(&token, &o, NOW).unwrap().principal, "svc");
    }

    #[test]
    fn bad_tokens_are_refused_as_invalid() {
        let none = r#"{"alg":"none"}"#;
        let cases = [
            jws(r#"{"alg":"HS256"}"#, r#"{"sub":"a","exp":1700000060}"#),
            jws(r#"{"typ":"JWT"}"#, r#"{"sub":"a","exp":1700000060}"#),
            format!("{}x", jws(none, r#"{"sub":"a","exp":1700000060}"#)),
            jws(none, r#"{"sub":"a","exp":1700000060}"#).replace('.', ".."),
            b64(none),
            jws(none, r#"{"sub":"a"}"#),
            jws(none, r#"{"sub":"a","exp":"1700000060"}"#),
            jws(none, r#"{"exp":1700000060}"#),
            jws(none, r#"{"sub":"  ","exp":1700000060}"#),
            jws(none, r#"{"sub":7,"exp":1700000060}"#),
            // Expired, issued in the future, expiring before issued.
            jws(none, r#"{"sub":"a","exp":1700000000}"#),
            jws(none, r#"{"sub":"a","exp":1700000090,"iat":1700000001}"#),
            jws(none, r#"{"sub":"a","exp":1699999999.9}"#),
            jws(none, r#"{"sub":"a","scope":3,"exp":1700000060}"#),
            "!!.e30.".to_owned(),
            format!("{}.bm90IGpzb24.", b64(none)),
        ];
        for token in cases {
            let refusal = validate(&token, &options(), NOW).unwrap_err();
            assert_eq!(
                (refusal.json(), refusal.scope),
                (r#"{"status":"invalid_token"}"#.to_owned(), None),
                "{token}: {}",
                refusal.reason
            );
        }
    }

    #[test]
    fn clock_skew_is_allowed_both_ways() {
        let o = UnsecuredValidatorOptions {
            allowable_clock_skew_ms: 5_000,
            ..options()
        };
        let expired_4s_ago = jws(r#"{"alg":"none"}"#, r#"{"sub":"a","exp":1699999996}"#);
        assert!(validate(&expired_4s_ago, &o, NOW).is_ok());
        assert!(validate(&expired_4s_ago, &options(), NOW).is_err());
        let issued_in_4s = jws(
            r#"{"alg":"none"}"#,
            r#"{"sub":"a","iat":1700000004,"exp":1700000100}"#,
        );
        assert!(validate(&issued_in_4s, &o, NOW).is_ok());
        assert!(validate(&issued_in_4s, &options(), NOW).is_err());
    }

    #[test]
    fn a_missing_required_scope_is_insufficient_scope() {
        let o = UnsecuredValidatorOptions {
            required_scope: vec!["kafka".to_owned(), "write".to_owned()],
            ..options()
        };
        let claims = |scope: &str| {
            jws(
                r#"{"alg":"none"}"#,
                &format!(r#"{{"sub":"a","exp":1700000060{scope}}}"#),
            )
        };
        assert!(validate(&claims(r#","scope":["write"," kafka "]"#), &o, NOW).is_ok());
        // A string scope is one item, as Kafka reads it: not split at spaces.
        for scope in [r#","scope":"kafka write""#, r#","scope":["kafka"]"#, ""] {
            let refusal = validate(&claims(scope), &o, NOW).unwrap_err();
            assert_eq!(
                refusal.json(),
                r#"{"status":"insufficient_scope", "scope":"[kafka, write]"}"#
            );
        }
    }
}
