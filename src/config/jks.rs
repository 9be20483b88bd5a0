//! A reader of Java KeyStore (JKS) files, Kafka's default `ssl.keystore.type` and
//! `ssl.truststore.type`, as `keytool` writes them.
//!
//! The format (big-endian): magic `0xFEEDFEED`, version 1 or 2, an entry count, then each entry:
//! a tag (1 a private key with its certificate chain, 2 a trusted certificate), an alias (Java's
//! `writeUTF`: a u16 length and the bytes), a creation time (i64); a key entry has the protected
//! key (an `EncryptedPrivateKeyInfo` of Sun's key protector) and its chain, a certificate entry
//! one certificate; version 2 names each certificate's type (`X.509`) before its length. The file
//! ends with the SHA-1 of the password (UTF-16BE), the bytes `Mighty Aphrodite` and everything
//! before it: a wrong password or a damaged file fails that check.
//!
//! Sun's key protector (OID 1.3.6.1.4.1.42.2.17.1.1): the protected bytes are a 20-byte salt,
//! the key XOR a keystream, and a 20-byte check. The keystream is a chain of SHA-1 digests, each
//! of the password (UTF-16BE) and the digest before it, starting from the salt; the check is the
//! SHA-1 of the password and the plain key, a PKCS#8 `PrivateKeyInfo`.

use sha1::{Digest, Sha1};

const MAGIC: u32 = 0xFEED_FEED;
const PRIVATE_KEY_ENTRY: u32 = 1;
const TRUSTED_CERT_ENTRY: u32 = 2;
const INTEGRITY_SALT: &[u8] = b"Mighty Aphrodite";
/// DER of the key protector's OID, 1.3.6.1.4.1.42.2.17.1.1.
const KEY_PROTECTOR_OID: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x2a, 0x02, 0x11, 0x01, 0x01];
const DIGEST_LEN: usize = 20;
/// More entries than any key or trust store holds: a count above it is a damaged file.
const ENTRIES_MAX: u32 = 100_000;

/// A private key entry: the key (still protected) and its certificate chain, leaf first.
pub struct KeyEntry {
    pub alias: String,
    protected_key: Vec<u8>,
    pub chain: Vec<Vec<u8>>,
}

/// What a JKS file holds.
pub struct JksStore {
    pub keys: Vec<KeyEntry>,
    /// Trusted certificate entries (DER).
    pub certificates: Vec<Vec<u8>>,
}

fn utf16_be(password: &str) -> Vec<u8> {
    password.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn utf(&mut self) -> Result<String, String> {
        let n = usize::from(self.u16()?);
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn certificate(&mut self, version: u32) -> Result<Vec<u8>, String> {
        if version == 2 {
            let kind = self.utf()?;
            if kind != "X.509" {
                return Err(format!("a certificate of type {kind}, not X.509"));
            }
        }
        self.bytes()
    }
}

impl JksStore {
    /// Reads a JKS file, checking its integrity with `password` when there is one (Java reads
    /// a trust store without a password unchecked).
    pub fn parse(data: &[u8], password: Option<&str>) -> Result<JksStore, String> {
        if data.len() < DIGEST_LEN {
            return Err("too short for a JKS file".into());
        }
        let (body, digest) = data.split_at(data.len() - DIGEST_LEN);
        let mut r = Reader { data: body, pos: 0 };
        if r.u32()? != MAGIC {
            return Err("not a JKS file (no 0xFEEDFEED magic)".into());
        }
        let version = r.u32()?;
        if version != 1 && version != 2 {
            return Err(format!("unknown JKS version {version}"));
        }
        let count = r.u32()?;
        if count > ENTRIES_MAX {
            return Err(format!("{count} entries: a damaged file"));
        }
        let mut store = JksStore {
            keys: Vec::new(),
            certificates: Vec::new(),
        };
        for _ in 0..count {
            let tag = r.u32()?;
            let alias = r.utf()?;
            r.take(8)?; // the creation time
            match tag {
                PRIVATE_KEY_ENTRY => {
                    let protected_key = r.bytes()?;
                    let n = r.u32()?;
                    if n > ENTRIES_MAX {
                        return Err(format!("a chain of {n} certificates: a damaged file"));
                    }
                    let chain = (0..n)
                        .map(|_| r.certificate(version))
                        .collect::<Result<Vec<_>, _>>()?;
                    store.keys.push(KeyEntry {
                        alias,
                        protected_key,
                        chain,
                    });
                }
                TRUSTED_CERT_ENTRY => store.certificates.push(r.certificate(version)?),
                other => return Err(format!("unknown entry tag {other}")),
            }
        }
        if r.pos != body.len() {
            return Err("bytes after the last entry".into());
        }
        if let Some(password) = password {
            let mut check = Sha1::new();
            check.update(utf16_be(password));
            check.update(INTEGRITY_SALT);
            check.update(body);
            if check.finalize().as_slice() != digest {
                return Err("the integrity check failed: wrong password, or a damaged file".into());
            }
        }
        Ok(store)
    }
}

impl KeyEntry {
    /// The entry's private key (PKCS#8 DER), recovered with `password`.
    pub fn private_key(&self, password: &str) -> Result<Vec<u8>, String> {
        let protected = protected_data(&self.protected_key)?;
        if protected.len() < 2 * DIGEST_LEN {
            return Err("a protected key too short".into());
        }
        let (salt, rest) = protected.split_at(DIGEST_LEN);
        let (encrypted, check) = rest.split_at(rest.len() - DIGEST_LEN);
        let password = utf16_be(password);
        let mut key = Vec::with_capacity(encrypted.len());
        let mut digest = salt.to_vec();
        for block in encrypted.chunks(DIGEST_LEN) {
            let mut h = Sha1::new();
            h.update(&password);
            h.update(&digest);
            digest = h.finalize().to_vec();
            key.extend(block.iter().zip(&digest).map(|(b, k)| b ^ k));
        }
        let mut h = Sha1::new();
        h.update(&password);
        h.update(&key);
        if h.finalize().as_slice() != check {
            return Err(format!(
                "cannot recover the key of entry {}: wrong key password",
                self.alias
            ));
        }
        Ok(key)
    }
}

/// One DER element: (tag, content, what follows).
fn der(input: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let bad = || "a malformed EncryptedPrivateKeyInfo".to_string();
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad());
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

/// The encrypted data of an `EncryptedPrivateKeyInfo` protected by Sun's key protector:
/// `SEQUENCE { SEQUENCE { OID, params }, OCTET STRING }`.
fn protected_data(info: &[u8]) -> Result<&[u8], String> {
    let (tag, body, _) = der(info)?;
    if tag != 0x30 {
        return Err("a malformed EncryptedPrivateKeyInfo".into());
    }
    let (tag, algorithm, rest) = der(body)?;
    if tag != 0x30 {
        return Err("a malformed EncryptedPrivateKeyInfo".into());
    }
    let (tag, oid, _) = der(algorithm)?;
    if tag != 0x06 || oid != KEY_PROTECTOR_OID {
        return Err("a key protected by another algorithm than JKS's own".into());
    }
    let (tag, data, _) = der(rest)?;
    if tag != 0x04 {
        return Err("a malformed EncryptedPrivateKeyInfo".into());
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JKS file the way `keytool` lays it out, from a plain key, to test the reader's
    /// framing, key recovery and integrity check (the real `keytool` files are read by the
    /// TLS listener tests).
    fn jks(password: &str, key: &[u8], salt: [u8; 20], cert: &[u8]) -> Vec<u8> {
        let pw = utf16_be(password);
        let mut encrypted = Vec::new();
        let mut digest = salt.to_vec();
        for block in key.chunks(DIGEST_LEN) {
            let mut h = Sha1::new();
            h.update(&pw);
            h.update(&digest);
            digest = h.finalize().to_vec();
            encrypted.extend(block.iter().zip(&digest).map(|(b, k)| b ^ k));
        }
        let mut h = Sha1::new();
        h.update(&pw);
        h.update(key);
        let mut protected = salt.to_vec();
        protected.extend(&encrypted);
        protected.extend(h.finalize());
        let mut algorithm = vec![0x06, KEY_PROTECTOR_OID.len() as u8];
        algorithm.extend(KEY_PROTECTOR_OID);
        algorithm.extend([0x05, 0x00]);
        let mut inner = vec![0x30, algorithm.len() as u8];
        inner.extend(&algorithm);
        inner.extend([0x04, 0x81, protected.len() as u8]);
        inner.extend(&protected);
        let mut info = vec![0x30, 0x81, inner.len() as u8];
        info.extend(&inner);

        let mut out = Vec::new();
        out.extend(MAGIC.to_be_bytes());
        out.extend(2u32.to_be_bytes());
        out.extend(2u32.to_be_bytes());
        let utf = |out: &mut Vec<u8>, s: &str| {
            out.extend((s.len() as u16).to_be_bytes());
            out.extend(s.as_bytes());
        };
        out.extend(PRIVATE_KEY_ENTRY.to_be_bytes());
        utf(&mut out, "broker");
        out.extend(0i64.to_be_bytes());
        out.extend((info.len() as u32).to_be_bytes());
        out.extend(&info);
        out.extend(1u32.to_be_bytes());
        utf(&mut out, "X.509");
        out.extend((cert.len() as u32).to_be_bytes());
        out.extend(cert);
        out.extend(TRUSTED_CERT_ENTRY.to_be_bytes());
        utf(&mut out, "ca");
        out.extend(0i64.to_be_bytes());
        utf(&mut out, "X.509");
        out.extend((cert.len() as u32).to_be_bytes());
        out.extend(cert);
        let mut h = Sha1::new();
        h.update(&pw);
        h.update(INTEGRITY_SALT);
        h.update(&out);
        out.extend(h.finalize());
        out
    }

    #[test]
    fn entries_keys_and_the_integrity_check() {
        let key: Vec<u8> = (0..50u8).collect();
        let file = jks("secret", &key, [7; 20], b"certificate");
        let store = JksStore::parse(&file, Some("secret")).unwrap();
        assert_eq!(store.keys.len(), 1);
        assert_eq!(store.keys[0].alias, "broker");
        assert_eq!(store.keys[0].chain, vec![b"certificate".to_vec()]);
        assert_eq!(store.certificates, vec![b"certificate".to_vec()]);
        assert_eq!(store.keys[0].private_key("secret").unwrap(), key);
        assert!(store.keys[0]
            .private_key("other")
            .unwrap_err()
            .contains("wrong key password"));
        assert!(JksStore::parse(&file, Some("wrong"))
            .err()
            .unwrap()
            .contains("integrity"));
        // Without a password (a trust store read as Java reads it) nothing is checked.
        assert_eq!(JksStore::parse(&file, None).unwrap().certificates.len(), 1);
    }

    #[test]
    fn damaged_files_are_errors() {
        let file = jks("secret", &[1; 30], [3; 20], b"c");
        let mut flipped = file.clone();
        flipped[40] ^= 1;
        assert!(JksStore::parse(&flipped, Some("secret")).is_err());
        for n in [0, 3, 12, 30, file.len() - 21] {
            assert!(
                JksStore::parse(&file[..n], Some("secret")).is_err(),
                "{n} bytes"
            );
        }
        let mut not_jks = file.clone();
        not_jks[0] = 0;
        assert!(JksStore::parse(&not_jks, Some("secret"))
            .err()
            .unwrap()
            .contains("magic"));
    }
}
