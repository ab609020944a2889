//! An HTTP fault proxy for S3 (plain HTTP/1.1 in front of MinIO), for the failures a TCP cut
//! cannot make: the store *acted* and the client never heard. Each request is matched against
//! [`Rule`]s (method, path, query); every `every`-th match of a rule is faulted, up to `max`, and
//! a path once faulted is never faulted again (its retries pass, uncounted):
//!
//! - [`Fault::SlowDown`]: answered `503 SlowDown` without reaching the store (throttling);
//! - [`Fault::AppliedThenError`]: forwarded, and when the store answered 2xx the client gets
//!   `500 InternalError` instead (AWS documents such answers after a completed request); clients
//!   retry, and the retry meets the effect of the first attempt (an existing object, a completed
//!   upload);
//! - [`Fault::AppliedThenReset`]: forwarded, and after a 2xx from the store the connection is
//!   closed without an answer (a load balancer dropping it on the way back).
//!
//! Requests are forwarded byte for byte with their own `Host` header, so SigV4 signatures made
//! for the proxy's address still verify at the store. Runs on a thread of its own with its own
//! Tokio runtime, so it keeps serving while a test blocks.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::error::{IoContext, Result};

/// What happens to a faulted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    SlowDown,
    AppliedThenError,
    AppliedThenReset,
}

/// Which requests a fault applies to, and how often.
#[derive(Debug, Clone)]
pub struct Rule {
    /// For reports: [`S3FaultProxy::injected`] counts by this name.
    pub name: &'static str,
    pub method: Method,
    /// A substring of the path (`""`: any).
    pub path_contains: &'static str,
    /// A substring of the query (`""`: any).
    pub query_contains: &'static str,
    /// The n-th, 2n-th, … matching request is faulted (1: every one).
    pub every: u64,
    /// At most this many faults in all (0: no limit).
    pub max: u64,
    pub fault: Fault,
}

impl Rule {
    fn matches(&self, method: &Method, path: &str, query: &str) -> bool {
        *method == self.method
            && path.contains(self.path_contains)
            && query.contains(self.query_contains)
    }
}

#[derive(Debug)]
struct Shared {
    rules: Vec<Rule>,
    /// Per rule: requests matched, faults injected.
    seen: Vec<AtomicU64>,
    injected: Vec<AtomicU64>,
    /// `METHOD path` of every request faulted (or due, whatever the store answered): a client's
    /// retries of it pass untouched and uncounted, so each rule's `every` counts distinct
    /// requests, not the retries its own faults cause.
    faulted: Mutex<HashSet<String>>,
    upstream: SocketAddr,
}

impl Shared {
    /// Every matching rule counts the request; the first one due faults it.
    fn decide(&self, method: &Method, path: &str, query: &str) -> Option<(usize, Fault)> {
        let key = format!("{method} {path}");
        let mut faulted = self.faulted.lock().unwrap_or_else(PoisonError::into_inner);
        if faulted.contains(&key) {
            return None;
        }
        let mut due = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if !rule.matches(method, path, query) {
                continue;
            }
            let n = self.seen[i].fetch_add(1, Ordering::Relaxed) + 1;
            let spent = rule.max > 0 && self.injected[i].load(Ordering::Relaxed) >= rule.max;
            if due.is_none() && !spent && n.is_multiple_of(rule.every.max(1)) {
                due = Some((i, rule.fault));
            }
        }
        if due.is_some() {
            faulted.insert(key);
        }
        due
    }
}

type Body = BoxBody<Bytes, hyper::Error>;
type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// A running proxy; stopped when dropped.
#[derive(Debug)]
pub struct S3FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl S3FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` under `rules`.
    pub fn start(upstream: SocketAddr, rules: Vec<Rule>) -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .ctx(|| "binding the S3 fault proxy".into())?;
        listener
            .set_nonblocking(true)
            .ctx(|| "S3 fault proxy listener".into())?;
        let addr = listener
            .local_addr()
            .ctx(|| "S3 fault proxy address".into())?;
        let shared = Arc::new(Shared {
            seen: rules.iter().map(|_| AtomicU64::new(0)).collect(),
            injected: rules.iter().map(|_| AtomicU64::new(0)).collect(),
            faulted: Mutex::default(),
            rules,
            upstream,
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .ctx(|| "S3 fault proxy runtime".into())?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("s3-fault-proxy".into())
            .spawn(move || runtime.block_on(serve(listener, serving, stopped)))
            .ctx(|| "S3 fault proxy thread".into())?;
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, the endpoint clients use instead of the store's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Faults injected so far by the rule named `name`.
    pub fn injected(&self, name: &str) -> u64 {
        self.count(name, &self.shared.injected)
    }

    /// Requests the rule named `name` matched so far.
    pub fn seen(&self, name: &str) -> u64 {
        self.count(name, &self.shared.seen)
    }

    fn count(&self, name: &str, counters: &[AtomicU64]) -> u64 {
        self.shared
            .rules
            .iter()
            .zip(counters)
            .filter(|(r, _)| r.name == name)
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .sum()
    }
}

impl Drop for S3FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "S3 fault proxy cannot listen");
            return;
        }
    };
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "S3 fault proxy accept");
                    continue;
                }
            },
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
            // an error here is a client gone, or a reset this proxy made on purpose
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> std::result::Result<Response<Body>, HandlerError> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let fault = shared.decide(req.method(), &path, &query);
    if let Some((rule, Fault::SlowDown)) = fault {
        // read the body, so the client's connection stays usable for its retry
        req.into_body().collect().await?;
        shared.injected[rule].fetch_add(1, Ordering::Relaxed);
        return Ok(s3_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate.",
        ));
    }
    let stream = tokio::net::TcpStream::connect(shared.upstream).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let response = sender.send_request(req).await?;
    match fault {
        Some((rule, fault)) if response.status().is_success() => {
            // the store has acted: read its whole answer, then lose it
            response.into_body().collect().await?;
            shared.injected[rule].fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%path, %query, ?fault, "S3 fault injected after the store acted");
            match fault {
                Fault::AppliedThenReset => Err(format!("reset after {path}?{query}").into()),
                _ => Ok(s3_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "We encountered an internal error. Please try again.",
                )),
            }
        }
        _ => Ok(response.map(BodyExt::boxed)),
    }
}

fn s3_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message><RequestId>s3-fault-proxy</RequestId></Error>"
    );
    let mut response = Response::new(
        Full::new(Bytes::from(xml))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/xml"),
    );
    response
}
