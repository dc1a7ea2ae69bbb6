//! [`TlsFiles`]: a throwaway certificate authority and the certificates
//! signed by it, for TLS servers and clients in tests (made with the
//! `openssl` command, ECDSA P-256, valid for two days).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A private CA and what it signed, in a temporary directory deleted on
/// drop:
///
/// - the server certificate is valid for `127.0.0.1` and `localhost`;
/// - the client certificate is for mutual TLS (`tls-auth-clients yes`);
/// - the wrong-name certificate, signed by the same CA, is valid only for
///   `elsewhere.invalid` (a host-name mismatch);
/// - the other CA signed none of them (a certificate that does not verify).
#[derive(Debug)]
pub struct TlsFiles {
    dir: tempfile::TempDir,
}

impl TlsFiles {
    /// Makes the CA and every certificate.
    ///
    /// # Errors
    /// When `openssl` cannot be run or fails (its output is in the error).
    pub fn generate() -> io::Result<TlsFiles> {
        let dir = tempfile::Builder::new()
            .prefix("locksmith-tls-")
            .tempdir()?;
        let files = TlsFiles { dir };
        files.self_signed("ca", "locksmith test CA")?;
        files.self_signed("other-ca", "an unrelated CA")?;
        files.signed("server", "localhost", "IP:127.0.0.1,DNS:localhost")?;
        files.signed("client", "locksmith test client", "DNS:client.invalid")?;
        files.signed("wrong-name", "elsewhere.invalid", "DNS:elsewhere.invalid")?;
        Ok(files)
    }

    /// The CA certificate (PEM): what clients trust.
    pub fn ca_cert(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// An unrelated CA's certificate (PEM): trusting it, a client refuses
    /// every server here.
    pub fn other_ca_cert(&self) -> PathBuf {
        self.path("other-ca.crt")
    }

    /// The server certificate and key (for 127.0.0.1 and localhost).
    pub fn server_cert(&self) -> (PathBuf, PathBuf) {
        (self.path("server.crt"), self.path("server.key"))
    }

    /// The client certificate and key, for mutual TLS.
    pub fn client_cert(&self) -> (PathBuf, PathBuf) {
        (self.path("client.crt"), self.path("client.key"))
    }

    /// A server certificate and key of the same CA for another host name.
    pub fn wrong_name_cert(&self) -> (PathBuf, PathBuf) {
        (self.path("wrong-name.crt"), self.path("wrong-name.key"))
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn self_signed(&self, name: &str, subject: &str) -> io::Result<()> {
        openssl(
            self.dir(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={subject}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ],
        )
    }

    fn signed(&self, name: &str, subject: &str, alt_names: &str) -> io::Result<()> {
        openssl(
            self.dir(),
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={subject}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        )?;
        let ext = self.path(&format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!(
                "subjectAltName={alt_names}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=critical,digitalSignature,keyAgreement\n\
                 extendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )?;
        openssl(
            self.dir(),
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.crt"),
            ],
        )
    }
}

/// Runs `openssl args...` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run openssl: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
