//! The e2e suite (one test binary, one shared environment: run with `--test-threads=1`).
//!
//! Needs the binaries built by `bash e2e/scripts/install.sh`; without them every test fails with
//! a message saying so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use streamjob_e2e::fixtures::{self, EnvOptions, TestEnv, wait_condition, wait_for};
use streamjob_e2e::scenario::{container_pid, pid_alive};
use streamjob_e2e::wait::poll_until;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn env() -> &'static TestEnv {
    fixtures::init_test_tracing();
    match fixtures::shared(|| {
        EnvOptions::new(
            env!("CARGO_BIN_EXE_process-kubelet"),
            env!("CARGO_BIN_EXE_e2e-echo-server"),
        )
    })
    .await
    {
        Ok(env) => {
            eprintln!(
                "e2e environment: run dir {}, control plane ready in {:?}, whole environment in {:?}",
                env.run_dir.display(),
                env.plane.start_duration,
                env.start_duration
            );
            env
        }
        Err(e) => panic!("e2e environment failed to start: {e}"),
    }
}

fn pod_ready(pod: &Pod) -> bool {
    fixtures::condition_status(pod, "Ready").as_deref() == Some("True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_is_established_and_invalid_specs_are_rejected() {
    let env = env().await;
    let crd_dir = env.repo_root.join("charts/streamjob-operator/crds");
    assert!(crd_dir.is_dir(), "no CRD folder at {}", crd_dir.display());
    let dir = crd_dir.display().to_string();
    env.kubectl_ok(&["apply", "--server-side", "-f", &dir], None)
        .expect("kubectl apply of the chart's CRDs");

    let client = env.client().await.expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in std::fs::read_dir(&crd_dir).expect("read crds dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let doc: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path).expect("read CRD"))
                .expect("parse CRD");
        let name = doc["metadata"]["name"]
            .as_str()
            .expect("CRD name")
            .to_string();
        wait_condition(&crds, &name, "Established", "True", TIMEOUT)
            .await
            .expect("CRD Established");
        eprintln!("CRD {name} established");
    }
    let printed = env
        .kubectl_ok(&["get", "streamjobs", "--all-namespaces"], None)
        .expect("kubectl get streamjobs");
    eprintln!("kubectl get streamjobs: {printed:?}");

    let invalid_dir = env.repo_root.join("crds/tests/invalid");
    if !invalid_dir.is_dir() {
        eprintln!("no {}; skipping invalid specs", invalid_dir.display());
        return;
    }
    let ns = env.namespace("invalid").await.expect("namespace");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&invalid_dir)
        .expect("read invalid dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{} has no yaml files",
        invalid_dir.display()
    );
    let mut failures = Vec::new();
    for file in &files {
        let failure = check_invalid(env, &ns, file);
        match failure {
            None => eprintln!("rejected as expected: {}", file.display()),
            Some(f) => failures.push(f),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} invalid specs were not rejected as expected:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// Applies one invalid manifest; `None` if the API server rejected it with the expected message.
fn check_invalid(env: &TestEnv, ns: &str, file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(file).expect("read invalid spec");
    let Some(expect) = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("# expect:"))
        .map(|s| s.trim().to_string())
    else {
        return Some(format!("{}: no `# expect:` comment", file.display()));
    };
    let path = file.display().to_string();
    let out = env
        .kubectl(&["apply", "-n", ns, "-f", &path], None)
        .expect("run kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Some(format!(
            "{path}: ACCEPTED by the API server (expected: {expect:?})"
        ))
    } else if !stderr.contains(&expect) {
        Some(format!(
            "{path}: rejected, but the message lacks {expect:?}:\n  {}",
            stderr.trim()
        ))
    } else {
        None
    }
}

const ECHO_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: echo
spec:
  replicas: 1
  selector:
    matchLabels: {app: echo}
  template:
    metadata:
      labels: {app: echo}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
        - name: echo
          image: streamjob/e2e-echo:1.0
          ports: [{name: http, containerPort: 8080}]
          env:
            - name: POD_IP
              valueFrom: {fieldRef: {fieldPath: status.podIP}}
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          readinessProbe:
            httpGet: {path: /healthz, port: http}
            periodSeconds: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_gets_running_ready_pod_and_gc_removes_it() {
    let env = env().await;
    let ns = env.namespace("deploy").await.expect("namespace");
    let client = env.client().await.expect("client");
    env.kubectl_ok(&["apply", "-n", &ns, "-f", "-"], Some(ECHO_DEPLOYMENT))
        .expect("kubectl apply deployment");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    wait_for(&deployments, "echo", "available replica", TIMEOUT, |d| {
        d.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
            >= 1
    })
    .await
    .expect("deployment available");

    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let rs_list = rss.list(&ListParams::default()).await.expect("list rs");
    assert_eq!(rs_list.items.len(), 1, "one ReplicaSet");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_list = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(pod_list.items.len(), 1, "one pod");
    let pod = &pod_list.items[0];
    let status = pod.status.as_ref().expect("pod status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(pod_ready(pod), "pod Ready");
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(fixtures::NODE_NAME),
        "bound by the scheduler"
    );
    let ip = status.pod_ip.clone().expect("podIP");
    assert!(
        ip.starts_with("127.") && ip != "127.0.0.1",
        "own loopback pod IP, got {ip}"
    );
    let pid = container_pid(pod).expect("container pid");
    assert!(pid_alive(pid), "container process {pid} runs");

    // The process really serves on its pod IP, with the env the kubelet resolved.
    let body = reqwest::get(format!("http://{ip}:8080/env/POD_NAME"))
        .await
        .expect("GET pod")
        .text()
        .await
        .expect("body");
    assert_eq!(Some(body.as_str()), pod.metadata.name.as_deref());

    // Deleting the owner: GC removes the ReplicaSet and the pod; the kubelet stops the process.
    deployments
        .delete("echo", &DeleteParams::background())
        .await
        .expect("delete deployment");
    poll_until(
        "ReplicaSets and pods gone",
        TIMEOUT,
        Duration::from_millis(250),
        || async {
            let rs_left = rss.list(&ListParams::default()).await?.items.len();
            let pods_left = pods.list(&ListParams::default()).await?.items.len();
            Ok((rs_left == 0 && pods_left == 0).then_some(()))
        },
    )
    .await
    .expect("garbage collection");
    assert!(!pid_alive(pid), "container process {pid} is gone");
}

const ENV_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: env-check
  labels: {team: streams}
spec:
  containers:
    - name: echo
      image: streamjob/e2e-echo:1.0
      envFrom:
        - configMapRef: {name: settings}
          prefix: CM_
      env:
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: TEAM, valueFrom: {fieldRef: {fieldPath: "metadata.labels['team']"}}}
        - {name: PASSWORD, valueFrom: {secretKeyRef: {name: creds, key: password}}}
        - {name: MODE, valueFrom: {configMapKeyRef: {name: settings, key: mode}}}
        - {name: GREETING, value: "hello $(TEAM)"}
      readinessProbe:
        httpGet: {path: /healthz, port: 8080}
        periodSeconds: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_env_value_from_and_kubeconfig() {
    let env = env().await;
    let ns = env.namespace("env").await.expect("namespace");
    env.kubectl_ok(
        &[
            "create",
            "-n",
            &ns,
            "secret",
            "generic",
            "creds",
            "--from-literal=password=s3cr3t",
        ],
        None,
    )
    .expect("secret");
    env.kubectl_ok(
        &[
            "create",
            "-n",
            &ns,
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ],
        None,
    )
    .expect("configmap");
    env.kubectl_ok(&["apply", "-n", &ns, "-f", "-"], Some(ENV_POD))
        .expect("apply pod");
    let client = env.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let pod = wait_for(&pods, "env-check", "Ready", TIMEOUT, pod_ready)
        .await
        .expect("pod ready");
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("ip");
    let expected = BTreeMap::from([
        ("POD_IP", ip.clone()),
        ("POD_NAMESPACE", ns.clone()),
        ("TEAM", "streams".to_string()),
        ("PASSWORD", "s3cr3t".to_string()),
        ("MODE", "fast".to_string()),
        ("CM_mode", "fast".to_string()),
        ("GREETING", "hello streams".to_string()),
    ]);
    for (name, want) in &expected {
        let got = reqwest::get(format!("http://{ip}:8080/env/{name}"))
            .await
            .expect("GET env")
            .text()
            .await
            .expect("body");
        assert_eq!(&got, want, "env {name}");
    }
    // The pod's kubeconfig carries a token of its ServiceAccount: `default` may not list pods.
    let kubeconfig = reqwest::get(format!("http://{ip}:8080/env/KUBECONFIG"))
        .await
        .expect("GET env")
        .text()
        .await
        .expect("body");
    assert!(
        Path::new(&kubeconfig).is_file(),
        "pod kubeconfig {kubeconfig}"
    );
    let mut cmd = std::process::Command::new(&env.bins.kubectl);
    let out = cmd
        .env("KUBECONFIG", &kubeconfig)
        .args([
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .output()
        .expect("kubectl auth whoami");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("system:serviceaccount:{ns}:default"),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn exit_pod(name: &str, policy: &str, code: i32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: {policy}
  containers:
    - name: main
      image: streamjob/e2e-echo:1.0
      args: ["exit", "{code}"]
"#
    )
}

fn first_container_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_and_exit_codes() {
    let env = env().await;
    let ns = env.namespace("restart").await.expect("namespace");
    for (name, policy, code) in [
        ("never-fails", "Never", 3),
        ("never-ok", "Never", 0),
        ("onfailure", "OnFailure", 4),
    ] {
        env.kubectl_ok(
            &["apply", "-n", &ns, "-f", "-"],
            Some(&exit_pod(name, policy, code)),
        )
        .expect("apply pod");
    }
    let client = env.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let failed = wait_for(&pods, "never-fails", "phase Failed", TIMEOUT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await
    .expect("Failed");
    let cs = first_container_status(&failed).expect("status");
    let term = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!(term.exit_code, 3);
    assert_eq!(cs.restart_count, 0);

    wait_for(&pods, "never-ok", "phase Succeeded", TIMEOUT, |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await
    .expect("Succeeded");

    let restarted = wait_for(&pods, "onfailure", "two restarts", TIMEOUT, |p| {
        first_container_status(p).is_some_and(|c| c.restart_count >= 2)
    })
    .await
    .expect("restarts");
    let cs = first_container_status(&restarted).expect("status");
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("lastState.terminated");
    assert_eq!(last.exit_code, 4);
    assert_eq!(
        restarted.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running"),
        "a restarting OnFailure pod is Running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minio_bucket_secret_and_objects() {
    let env = env().await;
    let ns = env.namespace("s3").await.expect("namespace");
    env.bucket_with_secret(&ns, "e2e-smoke", "s3-credentials")
        .await
        .expect("bucket + secret");
    let s3 = env.s3();
    s3.write(
        "e2e-smoke",
        "out/a/part-0-0.json",
        bytes::Bytes::from_static(b"{\"x\":1}\n"),
    )
    .await
    .expect("put");
    let listed = s3.list("e2e-smoke", "out").await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, "out/a/part-0-0.json");
    let data = s3
        .read("e2e-smoke", "out/a/part-0-0.json")
        .await
        .expect("get");
    assert_eq!(&data[..], b"{\"x\":1}\n");
    let secret = env
        .kubectl_ok(
            &[
                "get",
                "-n",
                &ns,
                "secret",
                "s3-credentials",
                "-o",
                "jsonpath={.data.AWS_ENDPOINT_URL}",
            ],
            None,
        )
        .expect("secret");
    assert!(!secret.is_empty());
}

/// Installs the chart once per test binary (operator watching every namespace); returns its
/// namespace once the operator Deployment is available.
async fn operator(env: &'static TestEnv) -> &'static str {
    static NS: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    NS.get_or_init(|| async {
        env.workspace_binary("streamjob-operator")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            env.kubelet_config
                .images
                .iter()
                .any(|m| m.matches("streamjob/operator:0.1.0")),
            "streamjob/operator:* is not mapped (was the operator built after the environment started?)"
        );
        // The chart's CRDs may already be there (helm then leaves them alone).
        let ns = env.restricted_namespace("operator").await.expect("namespace");
        let out = env
            .install_operator_chart("streamjob", &ns, &["logFormat=text", "logLevel=info"])
            .expect("helm install");
        eprintln!("helm: {out}");
        let client = env.client().await.expect("client");
        let deployments: Api<Deployment> = Api::namespaced(client, &ns);
        let list = deployments
            .list(&ListParams::default())
            .await
            .expect("list deployments");
        assert_eq!(list.items.len(), 1, "the chart makes one Deployment");
        let name = list.items[0].metadata.name.clone().expect("name");
        let waited = wait_for(&deployments, &name, "available replica", TIMEOUT, |d| {
            d.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                >= 1
        })
        .await;
        if let Err(e) = waited {
            let pods = env
                .kubectl(&["get", "pods", "-n", &ns, "-o", "yaml"], None)
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!(
                "operator Deployment not available: {e}\npods:\n{pods}\nlogs under {}",
                env.kubelet_config.run_dir.display()
            );
        }
        ns
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_chart_installs_and_operator_runs_as_pod() {
    let env = env().await;
    let ns = operator(env).await;
    let client = env.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let pod_list = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(pod_list.items.len(), 1, "one operator pod");
    let pod = &pod_list.items[0];
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert!(pod_ready(pod), "operator pod Ready");
    assert_eq!(
        pod.spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some("streamjob-streamjob-operator"),
        "runs with the chart's ServiceAccount"
    );
}

/// Issue #15: the CRD as users apply it — client-side `kubectl apply`, which keeps the whole
/// object in the last-applied annotation (at most 256 KiB) — twice, as after an upgrade; no
/// unknown-format warnings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_applies_client_side_and_again() {
    let env = env().await;
    operator(env).await;
    let crd = env
        .repo_root
        .join("charts/streamjob-operator/crds/streamjob.io_streamjobs.yaml")
        .display()
        .to_string();
    for round in ["first", "second"] {
        let out = env
            .kubectl(&["apply", "-f", &crd], None)
            .expect("run kubectl");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "{round} kubectl apply of the CRD failed: {stdout}{stderr}"
        );
        assert!(
            !stderr.contains("unrecognized format"),
            "{round} apply warned: {stderr}"
        );
    }
}

fn streamjob_manifest(name: &str, bucket: &str, s3_url: &str, secret: &str, sink: &str) -> String {
    let sink = if sink == "print" {
        "print: {}".to_string()
    } else {
        format!(
            r#"fileSink:
        path: s3://{bucket}/output/{name}
        format:
          jsonLines: {{}}
        bucketAssigner:
          basePath: {{}}
        rollingPolicy:
          onCheckpoint: {{}}
        outputFileConfig:
          partPrefix: part
          partSuffix: .json"#
        )
    };
    format!(
        r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  image: streamjob/runtime:0.1.0
  parallelism: 1
  maxParallelism: 16
  checkpoints:
    interval: 2s
    dir: s3://{bucket}/checkpoints/{name}
  savepoints:
    dir: s3://{bucket}/savepoints/{name}
  storage:
    s3:
      endpoint: {s3_url}
      region: us-east-1
      allowHttp: true
      credentialsSecret:
        name: {secret}
  pipeline:
    - uid: gen
      source:
        generator:
          keys: 10
          seed: 1
          ratePerSecond: 200
    - uid: out
      {sink}
"#
    )
}

/// Applies a StreamJob (generator → `sink`) in a new namespace with a bucket and credentials,
/// and waits for phase Running. Returns (namespace, bucket).
async fn run_streamjob(env: &'static TestEnv, name: &str, sink: &str) -> (String, String) {
    env.workspace_binary("streamjob-runtime")
        .unwrap_or_else(|e| panic!("{e}"));
    operator(env).await;
    let ns = env.restricted_namespace("sj").await.expect("namespace");
    let bucket = format!("sj-{}", &ns[3..]);
    env.bucket_with_secret(&ns, &bucket, "s3-credentials")
        .await
        .expect("bucket + secret");
    let manifest = streamjob_manifest(name, &bucket, &env.s3().url, "s3-credentials", sink);
    env.kubectl_ok(&["apply", "-n", &ns, "-f", "-"], Some(&manifest))
        .expect("kubectl apply StreamJob");
    let phase = poll_until(
        "StreamJob phase Running",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async {
            let out = env.kubectl_ok(
                &[
                    "get",
                    "sj",
                    name,
                    "-n",
                    &ns,
                    "-o",
                    "jsonpath={.status.phase}",
                ],
                None,
            )?;
            Ok((out == "Running").then_some(out))
        },
    )
    .await;
    if let Err(e) = phase {
        let dump = env
            .kubectl(&["get", "sj,pods", "-n", &ns, "-o", "yaml"], None)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!(
            "{e}\n{dump}\npod logs under {}",
            env.kubelet_config.run_dir.display()
        );
    }
    (ns, bucket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamjob_with_print_sink_reaches_running() {
    let env = env().await;
    let (ns, _) = run_streamjob(env, "gen-to-print", "print").await;
    let printed = env
        .kubectl_ok(&["get", "sj", "-n", &ns], None)
        .expect("kubectl get sj");
    eprintln!("{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamjob_reaches_running_and_writes_finished_files_to_minio() {
    let env = env().await;
    let (_, bucket) = run_streamjob(env, "gen-to-s3", "fileSink").await;
    let s3 = env.s3();
    let prefix = "output/gen-to-s3";
    let files = poll_until(
        "finished part files in MinIO",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let listed = s3.list(&bucket, prefix).await?;
            let finished: Vec<_> = listed
                .into_iter()
                .filter(|o| {
                    let file = o.key.rsplit('/').next().unwrap_or("");
                    file.starts_with("part") && file.ends_with(".json") && o.size > 0
                })
                .collect();
            Ok((!finished.is_empty()).then_some(finished))
        },
    )
    .await
    .expect("finished files");
    let first = s3
        .read(&bucket, &files[0].key)
        .await
        .expect("read part file");
    let text = String::from_utf8_lossy(&first);
    let line = text.lines().next().expect("a record");
    serde_json::from_str::<serde_json::Value>(line).expect("JSON lines");
    eprintln!("{} finished files; first record: {line}", files.len());
}

/// Runs last (tests run in name order with one thread): prints the peak memory of the plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zz_resource_report() {
    let env = env().await;
    let mut total_peak = 0;
    for (name, pid) in env.pids() {
        let (rss, peak) = streamjob_e2e::cluster::rss_kib(pid).expect("process alive");
        if name != "minio" && name != "process-kubelet" {
            total_peak += peak;
        }
        eprintln!(
            "{name:<24} pid {pid:>7}  rss {:>5} MiB  peak {:>5} MiB",
            rss / 1024,
            peak / 1024
        );
    }
    eprintln!(
        "control plane (etcd+apiserver+controller-manager+scheduler) sum of peaks: {} MiB; ready in {:?}; environment in {:?}",
        total_peak / 1024,
        env.plane.start_duration,
        env.start_duration
    );
}

/// Issue #15: the operator's service account can do what the code calls and nothing more, in any
/// namespace (cluster mode), read from the API server itself by impersonation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_rbac_grants_only_what_the_code_calls() {
    let env = env().await;
    let ns = operator(env).await;
    let elsewhere = env.namespace("rbac").await.expect("namespace");
    let sa = format!("system:serviceaccount:{ns}:streamjob-streamjob-operator");
    let out = env
        .kubectl_ok(
            &["auth", "can-i", "--list", "--as", &sa, "-n", &elsewhere],
            None,
        )
        .expect("kubectl auth can-i --list");
    // rows: RESOURCE  NON-RESOURCE-URLS  RESOURCE-NAMES  [VERBS]
    let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in out.lines().skip(1) {
        let Some(resource) = line
            .split_whitespace()
            .next()
            .filter(|r| !r.starts_with('['))
        else {
            continue;
        };
        let Some(verbs) = line.rfind('[').map(|i| &line[i + 1..line.len() - 1]) else {
            continue;
        };
        granted
            .entry(resource.to_string())
            .or_default()
            .extend(verbs.split_whitespace().map(str::to_string));
    }
    let verbs = |r: &str| -> Vec<&str> {
        granted
            .get(r)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        verbs("streamjobs.streamjob.io"),
        ["list", "patch", "watch"],
        "{out}"
    );
    assert_eq!(verbs("streamjobs.streamjob.io/status"), ["patch"]);
    assert_eq!(verbs("streamjobs.streamjob.io/finalizers"), ["update"]);
    assert_eq!(verbs("pods"), ["create", "delete", "get", "list", "watch"]);
    assert_eq!(verbs("pods/log"), ["get"]);
    assert_eq!(verbs("configmaps"), ["create", "delete", "get", "list"]);
    assert_eq!(
        verbs("services"),
        ["create", "delete"],
        "services: a Flink JobManager's rest Service, with its run"
    );
    assert_eq!(
        verbs("secrets"),
        ["create", "get"],
        "secrets: only the token's needs"
    );
    assert_eq!(
        verbs("networkpolicies.networking.k8s.io"),
        ["create", "get"],
        "one NetworkPolicy per StreamJob, created once"
    );
    assert_eq!(
        verbs("ingresses.networking.k8s.io"),
        ["create", "delete", "patch"],
        "a Flink job's Ingress, applied and deleted"
    );
    for none in [
        "deployments.apps",
        "statefulsets.apps",
        "jobs.batch",
        "leases.coordination.k8s.io",
    ] {
        assert!(
            verbs(none).is_empty(),
            "{none} is granted in other namespaces: {out}"
        );
    }
}

/// While alive, every other streamjob-operator Deployment is scaled to 0 (the cluster-mode one
/// of the other tests would reconcile the namespaced test's jobs too); dropped, they come back.
struct OtherOperatorsPaused {
    env: &'static TestEnv,
    paused: Vec<(String, String)>,
}

impl OtherOperatorsPaused {
    fn new(env: &'static TestEnv) -> Self {
        let out = env
            .kubectl_ok(
                &[
                    "get",
                    "deployments",
                    "-A",
                    "-l",
                    "app.kubernetes.io/name=streamjob-operator",
                    "-o",
                    "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}",
                ],
                None,
            )
            .expect("list operator Deployments");
        let paused: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .collect();
        for (ns, name) in &paused {
            env.kubectl_ok(
                &["scale", "deployment", name, "-n", ns, "--replicas=0"],
                None,
            )
            .expect("pause the other operator");
        }
        Self { env, paused }
    }
}

impl Drop for OtherOperatorsPaused {
    fn drop(&mut self) {
        // the tests after this one expect them running and ready again
        for (ns, name) in &self.paused {
            self.env.resume_deployment(ns, name);
        }
    }
}

/// Issue #15: the chart in namespaced mode watching two namespaces: a Role per watched namespace
/// and nothing cluster-wide on StreamJobs; a job in a watched namespace runs, a job in another
/// namespace is left alone (no status, no pods); the chart uninstalls cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_mode_watches_only_its_namespaces() {
    let env = env().await;
    env.workspace_binary("streamjob-operator")
        .unwrap_or_else(|e| panic!("{e}"));
    env.workspace_binary("streamjob-runtime")
        .unwrap_or_else(|e| panic!("{e}"));
    let _paused = OtherOperatorsPaused::new(env);
    let op_ns = env.restricted_namespace("nsop").await.expect("namespace");
    let watched_a = env.restricted_namespace("nsa").await.expect("namespace");
    let watched_b = env.restricted_namespace("nsb").await.expect("namespace");
    let unwatched = env.restricted_namespace("nsc").await.expect("namespace");
    let watch = format!("watchNamespaces={{{watched_a},{watched_b}}}");
    // stored before the chart (and with it the admission policy) exists: the operator refuses it
    // (the CRD first, as GitOps users apply it, if no other test has installed it yet)
    let crd = env
        .repo_root
        .join("charts/streamjob-operator/crds/streamjob.io_streamjobs.yaml")
        .display()
        .to_string();
    env.kubectl_ok(&["apply", "-f", &crd], None)
        .expect("kubectl apply the CRD");
    env.kubectl_ok(
        &[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/streamjobs.streamjob.io",
        ],
        None,
    )
    .expect("the CRD established");
    let borrowing = |name: &str, template: &str| {
        streamjob_manifest(name, "nowhere", &env.s3().url, "s3-credentials", "print").replacen(
            "\nspec:\n",
            &format!("\nspec:\n  podTemplate:\n    spec:\n{template}"),
            1,
        )
    };
    let manifest = borrowing(
        "borrower",
        "      serviceAccountName: default\n      volumes: [{name: keys, secret: {secretName: other-team}}]\n",
    );
    env.kubectl_ok(&["apply", "-n", &watched_b, "-f", "-"], Some(&manifest))
        .expect("kubectl apply StreamJob with a borrowing template");
    env.install_operator_chart(
        "nsmode",
        &op_ns,
        &["logFormat=text", &watch, "podTemplatePolicy=restricted"],
    )
    .expect("helm install in namespaced mode");

    // RBAC: StreamJobs in the watched namespaces only
    let sa = format!("system:serviceaccount:{op_ns}:nsmode-streamjob-operator");
    // `kubectl auth can-i watch streamjobs` as the operator, in `scope` (`-n NS` or `-A`)
    let can = |scope: &[&str]| {
        let mut args = vec![
            "auth",
            "can-i",
            "watch",
            "streamjobs.streamjob.io",
            "--as",
            &sa,
        ];
        args.extend_from_slice(scope);
        env.kubectl(&args, None)
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .expect("kubectl auth can-i")
    };
    assert_eq!(can(&["-n", &watched_a]), "yes");
    assert_eq!(can(&["-n", &watched_b]), "yes");
    assert_eq!(
        can(&["-n", &unwatched]),
        "no",
        "no StreamJob rights outside watchNamespaces"
    );
    let cluster_wide = can(&["-A"]);
    assert_eq!(
        cluster_wide, "no",
        "nothing cluster-wide in namespaced mode"
    );

    let mut buckets = Vec::new();
    for ns in [&watched_a, &unwatched] {
        let bucket = format!("nsm-{}", &ns[ns.len() - 8..]);
        env.bucket_with_secret(ns, &bucket, "s3-credentials")
            .await
            .expect("bucket + secret");
        let manifest =
            streamjob_manifest("nsmode", &bucket, &env.s3().url, "s3-credentials", "print");
        env.kubectl_ok(&["apply", "-n", ns, "-f", "-"], Some(&manifest))
            .expect("kubectl apply StreamJob");
        buckets.push(bucket);
    }
    let get = |ns: &str, path: &str| {
        env.kubectl_ok(
            &[
                "get",
                "sj",
                "nsmode",
                "-n",
                ns,
                "-o",
                &format!("jsonpath={path}"),
            ],
            None,
        )
    };
    // podTemplatePolicy=restricted hands a job only Secrets labelled for it: refused, naming the
    // field, until someone who may write the Secret labels it; then it starts (the operator looks
    // again every 30 s: it does not watch Secrets)
    let refused = poll_until(
        "the job refused: its store Secret is not labelled",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let out = get(
                &watched_a,
                "{.status.conditions[?(@.type=='SpecValid')].status} {.status.conditions[?(@.type=='SpecValid')].message}",
            )?;
            Ok(out.starts_with("False ").then_some(out))
        },
    )
    .await
    .expect("SpecValid=False");
    assert!(
        refused.contains("spec.storage.s3.credentialsSecret: Secret s3-credentials is not labelled streamjob.io/credentials=true"),
        "{refused}"
    );
    env.kubectl_ok(
        &[
            "label",
            "secret",
            "s3-credentials",
            "-n",
            &watched_a,
            "streamjob.io/credentials=true",
        ],
        None,
    )
    .expect("kubectl label secret");
    poll_until(
        "the job in a watched namespace Running with a checkpoint",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async {
            let phase = get(&watched_a, "{.status.phase}")?;
            let ck = get(&watched_a, "{.status.lastCheckpoint.id}")?;
            Ok((phase == "Running" && !ck.is_empty()).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| {
        let dump = env
            .kubectl(&["get", "sj,pods", "-n", &watched_a, "-o", "yaml"], None)
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        panic!("{e}\n{dump}")
    });
    // by now the operator has listed and reconciled everything it watches: the other job was
    // never touched
    assert_eq!(
        get(&unwatched, "{.status}").unwrap(),
        "",
        "unwatched job got a status"
    );
    let pods = env
        .kubectl_ok(&["get", "pods", "-n", &unwatched, "-o", "name"], None)
        .unwrap();
    assert!(
        pods.trim().is_empty(),
        "pods in the unwatched namespace: {pods}"
    );

    // podTemplatePolicy=restricted: the template stored before the chart, naming a service
    // account and a Secret, is refused by the operator as an invalid spec naming both fields, and
    // nothing of it runs
    let refused = poll_until(
        "the borrowing job refused by the pod template policy",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let out = env.kubectl_ok(
                &[
                    "get",
                    "sj",
                    "borrower",
                    "-n",
                    &watched_b,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='SpecValid')].status} {.status.conditions[?(@.type=='SpecValid')].message}",
                ],
                None,
            )?;
            Ok(out.starts_with("False ").then_some(out))
        },
    )
    .await
    .expect("SpecValid=False");
    for field in [
        "spec.podTemplate.spec.serviceAccountName",
        "spec.podTemplate.spec.volumes[name=keys]: secret",
        "podTemplatePolicy",
    ] {
        assert!(refused.contains(field), "{field} in {refused}");
    }
    let pods = env
        .kubectl_ok(&["get", "pods", "-n", &watched_b, "-o", "name"], None)
        .unwrap();
    assert!(pods.trim().is_empty(), "pods of a refused job: {pods}");
    // and once the chart is in, the API server refuses such templates itself (the chart's
    // ValidatingAdmissionPolicy), naming the field: `kubectl apply` fails
    for (name, template, field) in [
        (
            "borrower-sa",
            "      serviceAccountName: default\n",
            "spec.podTemplate.spec.serviceAccountName",
        ),
        (
            "borrower-vol",
            "      volumes: [{name: scratch, emptyDir: {}}, {name: keys, secret: {secretName: other-team}}]\n",
            "spec.podTemplate.spec.volumes[name=keys]",
        ),
        (
            "borrower-env",
            "      containers: [{name: runtime, env: [{name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}]}]\n",
            "spec.podTemplate.spec.containers[name=runtime]",
        ),
    ] {
        let out = env
            .kubectl(
                &["apply", "-n", &watched_b, "-f", "-"],
                Some(&borrowing(name, template)),
            )
            .expect("kubectl apply");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name} admitted");
        assert!(err.contains(field), "{field} in {err}");
    }
    // the Flink roles' templates are held to the same rules, each refusal naming its role
    let flink_job = |name: &str, role: &str, template: &str| {
        format!(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: {name}}}\n\
             spec:\n  engine: flink\n  image: example.com/job:1\n  checkpoints: {{dir: \"s3://b/ck\"}}\n\
             \x20 flink:\n    version: 2.3.0\n    job: {{entryClass: a.B}}\n    {role}:\n\
             \x20     podTemplate:\n        spec: {template}\n"
        )
    };
    for (role, template, field) in [
        (
            "taskManager",
            "{volumes: [{name: keys, secret: {secretName: other-team}}]}",
            "spec.flink.taskManager.podTemplate.spec.volumes[name=keys]",
        ),
        (
            "jobManager",
            "{serviceAccountName: default}",
            "spec.flink.jobManager.podTemplate.spec.serviceAccountName",
        ),
    ] {
        let out = env
            .kubectl(
                &["apply", "-n", &watched_b, "-f", "-"],
                Some(&flink_job("flink-borrower", role, template)),
            )
            .expect("kubectl apply");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a Flink {role} template admitted");
        assert!(err.contains(field), "{field} in {err}");
    }
    env.kubectl_ok(
        &["apply", "--dry-run=server", "-n", &watched_b, "-f", "-"],
        Some(&flink_job(
            "flink-allowed",
            "taskManager",
            "{tolerations: [{key: spot, operator: Exists}]}",
        )),
    )
    .expect("a Flink role template restricted allows is admitted");
    // what restricted allows is admitted (a server-side dry run passes admission, stores nothing)
    let allowed = borrowing(
        "allowed",
        "      volumes: [{name: scratch, emptyDir: {}}]\n      containers: [{name: runtime, resources: {limits: {memory: 1Gi}}}]\n",
    );
    env.kubectl_ok(
        &["apply", "--dry-run=server", "-n", &watched_b, "-f", "-"],
        Some(&allowed),
    )
    .expect("a template restricted allows is admitted");
    // the operator can still let go of the job stored before the policy (its finalizer)
    env.kubectl_ok(
        &["delete", "sj", "borrower", "-n", &watched_b, "--wait=false"],
        None,
    )
    .expect("delete StreamJob");
    poll_until(
        "the refused job deleted, its finalizer removed under the admission policy",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let out = env.kubectl(&["get", "sj", "borrower", "-n", &watched_b], None)?;
            Ok((!out.status.success()).then_some(()))
        },
    )
    .await
    .expect("deletion of the refused job");

    for ns in [&watched_a, &unwatched] {
        env.kubectl_ok(&["delete", "sj", "nsmode", "-n", ns, "--wait=false"], None)
            .expect("delete StreamJob");
    }
    poll_until(
        "the watched job deleted",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let out = env.kubectl(&["get", "sj", "nsmode", "-n", &watched_a], None)?;
            Ok((!out.status.success()).then_some(()))
        },
    )
    .await
    .expect("deletion");
    env.helm_ok(&["uninstall", "nsmode", "-n", &op_ns, "--wait"])
        .expect("helm uninstall");
}
