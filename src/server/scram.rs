//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's `ScramSaslServer` serves
//! them: client-first (`n,,n=<user>,r=<nonce>`), server-first (`r=<nonce+ours>,s=<salt>,i=<n>`),
//! client-final (`c=<gs2 header>,r=<nonce>,p=<proof>`), server-final (`v=<signature>`).
//! Credentials are salted once at startup ([`ScramCredential::new`]); only the stored and
//! server keys are kept. Proofs are compared in constant time.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use subtle::ConstantTimeEq;

pub use crate::config::security::{ScramCredential, ScramHash};

const INVALID: &str = "Authentication failed: Invalid user credentials";

/// The server's state between the client's first and final messages.
pub struct ScramExchange {
    hash: ScramHash,
    user: String,
    credential: ScramCredential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// RFC 5802 saslname: `=2C` is `,`, `=3D` is `=`; any other `=` is malformed.
fn decode_saslname(name: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The client's first message; `lookup` finds a user's credential. Gives the exchange and the
/// server-first message.
pub fn client_first(
    hash: ScramHash,
    message: &[u8],
    server_nonce: &str,
    lookup: impl Fn(&str) -> Option<ScramCredential>,
) -> Result<(ScramExchange, String), String> {
    let text = std::str::from_utf8(message)
        .map_err(|_| "Invalid SCRAM client first message: not UTF-8".to_owned())?;
    let malformed = || format!("Invalid SCRAM client first message");
    // gs2-header: "n," or "y," (no channel binding), then an optional "a=<authzid>", then ",".
    let (cbind, rest) = text.split_once(',').ok_or_else(malformed)?;
    if cbind != "n" && cbind != "y" {
        return Err("Authentication failed: channel binding is not supported".to_owned());
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(malformed)?;
    let gs2_header = format!("{cbind},{authzid},");
    let mut user = None;
    let mut client_nonce = None;
    for attr in bare.split(',') {
        match attr.split_once('=') {
            Some(("n", v)) => user = decode_saslname(v),
            Some(("r", v)) => client_nonce = Some(v.to_owned()),
            Some(("m", _)) => return Err(malformed()),
            // Extensions (Kafka's `tokenauth=true` among them) are read and not honoured.
            _ => {}
        }
    }
    let user = user.filter(|u| !u.is_empty()).ok_or_else(malformed)?;
    let client_nonce = client_nonce
        .filter(|n| !n.is_empty())
        .ok_or_else(malformed)?;
    if let Some(a) = authzid.strip_prefix("a=") {
        if decode_saslname(a).as_deref() != Some(user.as_str()) {
            return Err("Authentication failed: Client requested an authorization id that is different from username".to_owned());
        }
    }
    let credential = lookup(&user).ok_or_else(|| INVALID.to_owned())?;
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        B64.encode(&credential.salt),
        credential.iterations
    );
    Ok((
        ScramExchange {
            hash,
            user,
            credential,
            gs2_header,
            client_first_bare: bare.to_owned(),
            server_first: server_first.clone(),
            nonce,
        },
        server_first,
    ))
}

impl ScramExchange {
    /// The client's final message: the principal and the server-final message, or why not.
    pub fn client_final(self, message: &[u8]) -> Result<(String, String), String> {
        let text = std::str::from_utf8(message).map_err(|_| INVALID.to_owned())?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| INVALID.to_owned())?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("c", v)) => binding = Some(v),
                Some(("r", v)) => nonce = Some(v),
                _ => {}
            }
        }
        if binding != Some(B64.encode(&self.gs2_header).as_str()) {
            return Err("Authentication failed: Invalid channel binding".to_owned());
        }
        // RFC 5802: exactly the combined nonce the server sent, as Kafka 4.1's `ScramSaslServer`
        // checks it. (librdkafka before 2.6.1 sends its own nonce followed by the combined one,
        // which Kafka 3.8.1 to 3.9 let through with a suffix check; Kafka 4.1 refuses it.)
        if nonce != Some(self.nonce.as_str()) {
            return Err(
                "Authentication failed: Invalid client nonce in the final client message."
                    .to_owned(),
            );
        }
        let proof = B64.decode(proof).map_err(|_| INVALID.to_owned())?;
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let client_signature = self
            .hash
            .hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(INVALID.to_owned());
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let ok: bool = self
            .hash
            .hash(&client_key)
            .ct_eq(&self.credential.stored_key)
            .into();
        if !ok {
            return Err(INVALID.to_owned());
        }
        let server_signature = self
            .hash
            .hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok((
            format!("User:{}", self.user),
            format!("v={}", B64.encode(server_signature)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example: user `user`, password `pencil`.
    #[test]
    fn rfc_7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::new(ScramHash::Sha256, "pencil", salt, 4096);
        let (exchange, server_first) = client_first(
            ScramHash::Sha256,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            |u| (u == "user").then(|| credential.clone()),
        )
        .unwrap();
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (principal, server_final) = exchange
            .client_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(principal, "User:user");
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn a_wrong_proof_or_unknown_user_fails() {
        let credential = ScramCredential::new(ScramHash::Sha512, "pw", b"salt".to_vec(), 4096);
        assert!(client_first(ScramHash::Sha512, b"n,,n=bob,r=abc", "xyz", |_| None).is_err());
        let (exchange, _) = client_first(ScramHash::Sha512, b"n,,n=alice,r=abc", "xyz", |_| {
            Some(credential.clone())
        })
        .unwrap();
        let e = exchange
            .client_final(b"c=biws,r=abcxyz,p=AAAA")
            .unwrap_err();
        assert_eq!(e, INVALID);
    }

    /// The client-final message with a correct proof for `password`, its nonce attribute `r`.
    fn client_final_message(
        hash: ScramHash,
        password: &str,
        salt: &[u8],
        client_first_bare: &str,
        server_first: &str,
        r: &str,
    ) -> String {
        let salted = hash.salted_password(password.as_bytes(), salt, 4096);
        let client_key = hash.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={r}");
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hash.hmac(&hash.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        format!("{without_proof},p={}", B64.encode(proof))
    }

    #[test]
    fn only_the_exact_combined_nonce_is_taken_as_kafka_4_takes_it() {
        let hash = ScramHash::Sha256;
        let credential = ScramCredential::new(hash, "pw", b"salt".to_vec(), 4096);
        let exchange = || {
            client_first(hash, b"n,,n=alice,r=cnonce", "snonce", |_| {
                Some(credential.clone())
            })
            .unwrap()
        };
        // RFC 5802: exactly the combined nonce.
        let (first, server_first) = exchange();
        let message = client_final_message(
            hash,
            "pw",
            b"salt",
            "n=alice,r=cnonce",
            &server_first,
            "cnoncesnonce",
        );
        assert_eq!(
            first.client_final(message.as_bytes()).unwrap().0,
            "User:alice"
        );
        // librdkafka before 2.6.1 (its nonce, then the combined one), and any other nonce, are
        // refused even with a matching proof.
        for nonce in ["cnoncecnoncesnonce", "cnoncesnonceX", "snonce"] {
            let (first, server_first) = exchange();
            let message = client_final_message(
                hash,
                "pw",
                b"salt",
                "n=alice,r=cnonce",
                &server_first,
                nonce,
            );
            assert!(
                first
                    .client_final(message.as_bytes())
                    .unwrap_err()
                    .contains("Invalid client nonce"),
                "{nonce}"
            );
        }
    }
}
