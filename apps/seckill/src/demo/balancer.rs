//! The load balancer in front of the demo's instances: a private nginx on a
//! free loopback port, round robin over the instances, as in the original
//! experiment. Without nginx the demo balances on the client side and says
//! so (see [`Balancer::Client`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::state::BoxError;

/// How the load reaches the instances.
#[derive(Debug)]
pub enum Balancer {
    /// A private nginx; killed on drop.
    Nginx {
        /// The nginx process (single-process mode, so killing it ends it);
        /// boxed, it is much larger than the other variant.
        child: Box<Child>,
        /// `http://127.0.0.1:<port>`.
        url: String,
        /// Config, pid file and error log; removed on drop.
        _dir: tempfile::TempDir,
    },
    /// No nginx here: the load generator sends buyer i to instance i mod n.
    Client {
        /// Why nginx is not used.
        reason: String,
    },
}

impl Balancer {
    /// Starts nginx in front of `instances` (`http://host:port` URLs), or
    /// falls back to client-side round robin when nginx is not installed
    /// or does not start. Errors only for what the fallback cannot cover.
    pub async fn start(instances: &[String], logs: &Path) -> Result<Balancer, BoxError> {
        let Some(nginx) = find_nginx() else {
            return Ok(Balancer::Client {
                reason: "nginx is not installed (scripts/setup installs it)".into(),
            });
        };
        match start_nginx(&nginx, instances, logs).await {
            Ok(balancer) => Ok(balancer),
            Err(e) => Ok(Balancer::Client {
                reason: format!("nginx did not start: {e}"),
            }),
        }
    }

    /// Where the buyers send their requests.
    pub fn targets(&self, instances: &[String]) -> Vec<String> {
        match self {
            Balancer::Nginx { url, .. } => vec![url.clone()],
            Balancer::Client { .. } => instances.to_vec(),
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        match self {
            Balancer::Nginx { .. } => "nginx, round robin".into(),
            Balancer::Client { reason } => format!("client-side round robin ({reason})"),
        }
    }

    /// Stops nginx.
    pub async fn stop(self) {
        if let Balancer::Nginx { mut child, .. } = self {
            let _ = child.kill().await;
        }
    }
}

fn find_nginx() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("nginx")).collect())
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/sbin/nginx")])
        .find(|p| p.is_file())
}

async fn start_nginx(
    nginx: &Path,
    instances: &[String],
    logs: &Path,
) -> Result<Balancer, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("seckill-nginx-")
        .tempdir()?;
    // A free port: bound and released here, taken by nginx right after.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let servers: String = instances
        .iter()
        .map(|u| {
            let hostport = u.trim_start_matches("http://");
            // max_fails=0: never take an instance out of the rotation
            // because it was slow under the burst.
            format!("        server {hostport} max_fails=0;\n")
        })
        .collect();
    let d = dir.path().display();
    let conf = format!(
        r#"# Written by `seckill demo`: a round-robin load balancer in front of the
# demo's service instances, on loopback, in one process so it dies with it.
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 8192;
}}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream seckill {{
{servers}        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://seckill;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # A purchase is not idempotent: never resend it to the other
            # instance after an error or a timeout.
            proxy_next_upstream off;
            proxy_read_timeout 120s;
        }}
    }}
}}
"#
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let log = std::fs::File::create(logs.join("nginx.log"))?;
    let mut child = Command::new(nginx)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()?;
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            let errors = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            return Err(format!("nginx exited ({status}): {}", errors.trim()).into());
        }
        if let Ok(r) = http.get(format!("{url}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        if tokio::time::Instant::now() > deadline {
            let _ = child.kill().await;
            return Err("nginx did not answer within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Balancer::Nginx {
        child: Box::new(child),
        url,
        _dir: dir,
    })
}
