//! Certificates and kubeconfigs for the control plane, made with the `openssl` CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{IoContext, Result};
use crate::process::run_checked;

/// A certificate and its private key on disk.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// All the PKI material of one control plane.
#[derive(Debug, Clone)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca: CertPair,
    pub apiserver: CertPair,
    pub admin: CertPair,
    /// The API server's client certificate towards kubelets.
    pub kubelet_client: CertPair,
    pub controller_manager: CertPair,
    pub scheduler: CertPair,
    /// RSA key pair that signs service-account tokens.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

fn openssl() -> Command {
    Command::new("openssl")
}

fn genrsa(path: &Path) -> Result<()> {
    run_checked(openssl().arg("genrsa").arg("-out").arg(path).arg("2048"))?;
    Ok(())
}

/// Makes a leaf certificate signed by `ca`. `ext` is an openssl extension section body.
fn leaf(dir: &Path, name: &str, subject: &str, ext: &str, ca: &CertPair) -> Result<CertPair> {
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let cert = dir.join(format!("{name}.crt"));
    let ext_file = dir.join(format!("{name}.ext"));
    genrsa(&key)?;
    run_checked(
        openssl()
            .args(["req", "-new", "-key"])
            .arg(&key)
            .args(["-subj", subject, "-out"])
            .arg(&csr),
    )?;
    std::fs::write(&ext_file, ext).ctx(|| format!("write {}", ext_file.display()))?;
    let serial = format!("0x{:016x}", rand::random::<u64>());
    run_checked(
        openssl()
            .args(["x509", "-req", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&ca.cert)
            .arg("-CAkey")
            .arg(&ca.key)
            .args(["-set_serial", &serial, "-days", "7", "-sha256", "-extfile"])
            .arg(&ext_file)
            .arg("-out")
            .arg(&cert),
    )?;
    Ok(CertPair { cert, key })
}

/// Makes a self-signed CA certificate `<name>.crt` with its key `<name>.key` in `dir`.
fn self_signed_ca(dir: &Path, name: &str, subject: &str) -> Result<CertPair> {
    let ca = CertPair {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
    };
    genrsa(&ca.key)?;
    run_checked(
        openssl()
            .args(["req", "-x509", "-new", "-nodes", "-key"])
            .arg(&ca.key)
            .args([
                "-subj",
                subject,
                "-days",
                "7",
                "-sha256",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
                "-out",
            ])
            .arg(&ca.cert),
    )?;
    Ok(ca)
}

const CLIENT_EXT: &str = "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n";

impl Pki {
    /// Generates a CA, the apiserver's serving certificate, client certificates for the admin,
    /// controller-manager and scheduler, and the service-account key pair, in `dir`.
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let ca = self_signed_ca(dir, "ca", "/CN=streamjob-e2e-ca")?;
        let apiserver = leaf(
            dir,
            "apiserver",
            "/CN=kube-apiserver",
            &format!(
                "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:{node_ip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n",
                node_ip = crate::cluster::host_address()
            ),
            &ca,
        )?;
        let admin = leaf(dir, "admin", "/O=system:masters/CN=admin", CLIENT_EXT, &ca)?;
        // the API server's identity towards kubelets (logs, exec, port-forward)
        let kubelet_client = leaf(
            dir,
            "kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            CLIENT_EXT,
            &ca,
        )?;
        let controller_manager = leaf(
            dir,
            "controller-manager",
            "/CN=system:kube-controller-manager",
            CLIENT_EXT,
            &ca,
        )?;
        let scheduler = leaf(
            dir,
            "scheduler",
            "/CN=system:kube-scheduler",
            CLIENT_EXT,
            &ca,
        )?;
        let sa_key = dir.join("sa.key");
        let sa_pub = dir.join("sa.pub");
        genrsa(&sa_key)?;
        run_checked(
            openssl()
                .args(["rsa", "-in"])
                .arg(&sa_key)
                .args(["-pubout", "-out"])
                .arg(&sa_pub),
        )?;
        Ok(Self {
            dir: dir.to_path_buf(),
            ca,
            apiserver,
            admin,
            kubelet_client,
            controller_manager,
            scheduler,
            sa_key,
            sa_pub,
        })
    }
}

impl Pki {
    /// Issues a client certificate `<name>.crt` signed by the cluster CA (`subject` like
    /// `/O=system:nodes/CN=system:node:n1`).
    pub fn client_cert(&self, name: &str, subject: &str) -> Result<CertPair> {
        leaf(&self.dir, name, subject, CLIENT_EXT, &self.ca)
    }
}

/// How a kubeconfig authenticates.
#[derive(Debug, Clone)]
pub enum KubeconfigAuth<'a> {
    /// A client certificate.
    Cert(&'a CertPair),
    /// A bearer token.
    Token(&'a str),
}

/// Writes a single-context kubeconfig to `path`.
pub fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    user: &str,
    auth: KubeconfigAuth<'_>,
    namespace: Option<&str>,
) -> Result<()> {
    let user_body = match auth {
        KubeconfigAuth::Cert(pair) => serde_json::json!({
            "client-certificate": pair.cert,
            "client-key": pair.key,
        }),
        KubeconfigAuth::Token(token) => serde_json::json!({ "token": token }),
    };
    let mut context = serde_json::json!({ "cluster": "e2e", "user": user });
    if let Some(ns) = namespace {
        context["namespace"] = serde_json::Value::String(ns.to_string());
    }
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "e2e", "cluster": { "server": server, "certificate-authority": ca } }],
        "users": [{ "name": user, "user": user_body }],
        "contexts": [{ "name": "e2e", "context": context }],
        "current-context": "e2e",
    });
    let text = serde_yaml_ng::to_string(&doc)?;
    std::fs::write(path, text).ctx(|| format!("write {}", path.display()))
}

/// TLS material of a test Kafka broker, PEM files (OpenSSL 3 writes PKCS#8 keys, which Kafka's
/// PEM key store requires).
#[derive(Debug, Clone)]
pub struct BrokerTls {
    /// The CA that signed both certificates.
    pub ca: CertPair,
    /// The broker's serving certificate, for `127.0.0.1` and `localhost`.
    pub server: CertPair,
    /// `server`'s certificate followed by its key: Kafka's PEM key store file.
    pub server_keystore: PathBuf,
    /// A client certificate signed by `ca`, for mutual TLS.
    pub client: CertPair,
    /// A CA that signed nothing here: trusting it alone must fail the handshake.
    pub stranger_ca: CertPair,
}

impl BrokerTls {
    /// Generates the material in `dir`.
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let ca = self_signed_ca(dir, "kafka-ca", "/CN=streamjob-e2e-kafka-ca")?;
        let server = leaf(
            dir,
            "kafka-server",
            "/CN=localhost",
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
            &ca,
        )?;
        let client = leaf(dir, "kafka-client", "/CN=streamjob-job", CLIENT_EXT, &ca)?;
        let stranger_ca = self_signed_ca(dir, "stranger-ca", "/CN=someone-else")?;
        let server_keystore = dir.join("kafka-server.pem");
        let pem = [
            std::fs::read_to_string(&server.cert)
                .ctx(|| format!("read {}", server.cert.display()))?,
            std::fs::read_to_string(&server.key)
                .ctx(|| format!("read {}", server.key.display()))?,
        ]
        .concat();
        std::fs::write(&server_keystore, pem)
            .ctx(|| format!("write {}", server_keystore.display()))?;
        Ok(Self {
            ca,
            server,
            server_keystore,
            client,
            stranger_ca,
        })
    }
}
